#!/usr/bin/env bash
# The installed package as a user gets it: `cmake --install` into WORK/prefix, examples/cpp built
# against it with find_package(dspark) in a separate CMake build, one example built with
# pkg-config, and each run on the bundled models. Fails on the first step that does.
#   package_test.sh BUILD_DIR SOURCE_DIR WORK_DIR LIBDIR CMAKE GENERATOR MAKE_PROGRAM CXX PKG_CONFIG [LDFLAGS]
# LDFLAGS: extra link flags for the programs built against the package (a clang sanitizer build:
# its libdspark.so leaves the runtime's symbols to the preloaded runtime).
set -euo pipefail
build=$1 src=$2 work=$3 libdir=$4 cmake=$5 generator=$6 make_program=$7 cxx=$8 pkg_config=$9 ldflags=${10:-}
prefix=$work/prefix
models=$src/models
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

rm -rf "$work"
mkdir -p "$work"

step "install into $prefix"
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
for f in "$libdir/libdspark.so" "include/dspark/dspark.h" "include/dspark/version.h" \
         "$libdir/cmake/dspark/dspark-config.cmake" "$libdir/cmake/dspark/dspark-config-version.cmake" \
         "$libdir/cmake/dspark/dspark-targets.cmake" "$libdir/pkgconfig/dspark.pc" "bin/dspark"; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
(cd "$prefix" && find . -type f -o -type l | sort)

step "the installed headers include no engine header"
if grep -h '^#include' "$prefix"/include/dspark/*.h | grep -v -E '#include <[a-z_]+>|#include "dspark/[a-z_]+\.h"'; then
  fail "a public header includes something other than the standard library and dspark/"
fi

step "libdspark.so exports the facade only"
leaked=$(nm -D --defined-only "$prefix/$libdir/libdspark.so" | c++filt |
         grep -E ' (dspark::|hwy::|spdlog::|fmt::|nlohmann::|pcre2_)' | grep -v ' dspark::api::' || true)
[ -z "$leaked" ] || fail "internal symbols exported:"$'\n'"$leaked"

step "configure and build examples/cpp against the package (find_package)"
"$cmake" -S "$src/examples/cpp" -B "$work/examples" -G "$generator" -DCMAKE_MAKE_PROGRAM="$make_program" \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON -DCMAKE_EXE_LINKER_FLAGS="$ldflags" >"$work/configure.log" || { cat "$work/configure.log"; fail "configure"; }
found=$(grep '^dspark_DIR:' "$work/examples/CMakeCache.txt" | cut -d= -f2-)
[ "$found" = "$prefix/$libdir/cmake/dspark" ] || fail "find_package(dspark) found '$found', not the installed package"
"$cmake" --build "$work/examples" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build"; }

step "generate"
"$work/examples/generate" "$models/ref-target.gguf" 'def fibonacci(n):' 32 >"$work/generate.out" 2>"$work/generate.err" ||
  { cat "$work/generate.err"; fail "generate"; }
cat "$work/generate.out" "$work/generate.err"
grep -q '^def fibonacci(n):' "$work/generate.out" || fail "generate: no text"
[ "$(wc -c <"$work/generate.out")" -gt 30 ] || fail "generate: nothing generated"
grep -q 'qwen3' "$work/generate.err" || fail "generate: no model summary"

for drafter in ref-draft.gguf ref-dspark.gguf; do
  step "speculative with $drafter"
  "$work/examples/speculative" "$models/ref-target.gguf" "$models/$drafter" >"$work/spec.out" 2>&1 ||
    { cat "$work/spec.out"; fail "speculative $drafter"; }
  cat "$work/spec.out"
  grep -q '^outputs identical' "$work/spec.out" || fail "speculative $drafter: outputs not identical"
  grep -q '^acceptance per position: [0-9]' "$work/spec.out" || fail "speculative $drafter: no per-position acceptance"
done

step "custom_drafter"
"$work/examples/custom_drafter" "$models/ref-target.gguf" >"$work/custom.out" 2>&1 ||
  { cat "$work/custom.out"; fail "custom_drafter"; }
cat "$work/custom.out"
grep -q '^OK: speculative output == plain greedy output' "$work/custom.out" || fail "custom_drafter: no OK line"

step "generate built with pkg-config (C++17)"
flags=$(PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig" "$pkg_config" --cflags --libs dspark) || fail "pkg-config dspark"
echo "pkg-config --cflags --libs dspark: $flags"
# shellcheck disable=SC2086  # the flags are words
"$cxx" -std=c++17 -O1 "$src/examples/cpp/generate.cc" -o "$work/generate-pc" $flags $ldflags || fail "build with pkg-config"
LD_LIBRARY_PATH="$prefix/$libdir" "$work/generate-pc" "$models/ref-target.gguf" 'def fibonacci(n):' 32 \
  >"$work/generate-pc.out" 2>/dev/null || fail "generate (pkg-config build)"
cmp -s "$work/generate.out" "$work/generate-pc.out" || fail "the pkg-config build generated other text"

step "the installed CLI"
# Its own program: a sanitizer runtime preloaded for the consumers above is not for it.
env -u LD_PRELOAD "$prefix/bin/dspark" --version

echo "package test passed"
