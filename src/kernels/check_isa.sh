#!/usr/bin/env bash
# The AVX3_DL kernels (Highway's Ice Lake class: AVX-512 VNNI) must not use AVX-VNNI, the VEX
# encoding of vpdpbusd / vpdpwssd: Zen 4 and Ice Lake have AVX-512 VNNI without it and fault on
# it. Highway 1.0.3's AVX3_DL target string names avxvnni, so a ymm intrinsic compiled there can
# come out VEX-encoded. The kernels test catches this only on such a CPU; this reads the machine
# code, so it fails on any CPU.
# Usage: check_isa.sh BINARY
set -euo pipefail
bin="$1"
objdump -d --no-show-raw-insn -C "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $0; dl = index($0, "N_AVX3_DL::") > 0; fns += dl; next }
  dl && /\{vex\} *vpdp/ { bad[fn]++; n++ }
  dl && /vpdp/ { evex++ }
  END {
    for (f in bad) printf "VEX-encoded VNNI (AVX-VNNI) in an AVX3_DL function (%d): %s\n", bad[f], f
    if (n) exit 1
    # It must have seen the AVX3_DL kernels at all, or it passes on nothing.
    if (evex == 0) { print "no AVX3_DL VNNI code found (" fns " AVX3_DL functions)"; exit 1 }
    printf "%d AVX3_DL functions, %d VNNI instructions, none VEX-encoded\n", fns, evex
  }'
