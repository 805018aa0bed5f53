#!/usr/bin/env python3
"""Summarises kernels_bench JSON: per (type, shape, threads) the best time of each m, the m/m=1
cost ratios, and GB/s of weight streaming as a fraction of the ReadStream/Memcpy baselines.

Usage: kernels_bench --benchmark_format=json --benchmark_repetitions=3 ... > out.json
       summarize.py out.json [--cpu]   (--cpu: use CPU time, robust on a loaded shared machine)
"""
import json
import re
import sys
from collections import defaultdict


def main():
    path = sys.argv[1]
    key = "cpu_time" if "--cpu" in sys.argv else "real_time"
    data = json.load(open(path))
    best = {}
    bps = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = b["run_name"] if "run_name" in b else b["name"]
        t = b[key]
        if name not in best or t < best[name]:
            best[name] = t
            # bytes/s recomputed from the chosen time so both columns agree
            if "bytes_per_second" in b:
                bps[name] = b["bytes_per_second"] * b["real_time"] / t
    base = {}
    for name, v in bps.items():
        m = re.match(r"(ReadStream|Memcpy)/(\d+)", name)
        if m:
            base[(m.group(1), int(m.group(2)))] = v
    for k, v in sorted(base.items()):
        print(f"{k[0]:10s} threads={k[1]}: {v / 1e9:6.2f} GB/s")
    groups = defaultdict(dict)
    for name, t in best.items():
        m = re.match(r"(MatMul(?:Hot)?/[^/]+)/([^/]+)/m:(\d+)/threads:(\d+)", name)
        if m:
            groups[(m.group(1), m.group(2), int(m.group(4)))][int(m.group(3))] = (t, bps.get(name, 0))
    print(f"{'type':16s} {'shape':24s} thr  m=1 us   GB/s  %read %copy | m2/m1 m4/m1 m8/m1 m16/m1 | m512 GFLOPS")
    for (ty, shape, thr), ms in sorted(groups.items()):
        if 1 not in ms:
            continue
        t1, b1 = ms[1]
        rd = base.get(("ReadStream", thr), 0)
        cp = base.get(("Memcpy", thr), 0)
        ratios = " ".join(f"{ms[m][0] / t1:5.2f}" if m in ms else "  -  " for m in (2, 4, 8, 16))
        gflops = ""
        if 512 in ms:
            r, c = map(int, re.search(r"(\d+)x(\d+)", shape).groups())
            gflops = f"{2 * 512 * r * c / (ms[512][0] * 1e-9) / 1e9:7.1f}"
        print(f"{ty:16s} {shape:24s} {thr:3d} {t1 / 1e3:8.0f} {b1 / 1e9:6.2f} {100 * b1 / rd if rd else 0:5.0f}% "
              f"{100 * b1 / cp if cp else 0:5.0f}% | {ratios} | {gflops}")


if __name__ == "__main__":
    main()
