#!/usr/bin/env bash
# Installs every Debian 12 package that building and testing dspark needs.
# Idempotent and quiet when everything is already present.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libhwy-dev            # portable SIMD with runtime dispatch
  libpcre2-dev          # Unicode regexes for BPE pre-tokenizers
  nlohmann-json3-dev    # JSON
  libcpp-httplib-dev    # HTTP server/client
  libcli11-dev          # command-line parsing
  libfmt-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-jinja2        # golden chat-template renders in tests
  python3-jsonschema    # bench/serving_bars.py validates structured outputs against their schemas
  # tools/train (the PyTorch toolkit): its tests and the DSpark export cross-check run in `make test`.
  # libopenblas0-pthread: Debian's PyTorch is ~10x slower on the reference BLAS; libpython3.11-testsuite:
  # the half of the stdlib Debian ships apart (the training corpus, tools/train/dspark_train/corpus.py).
  python3-torch python3-numpy python3-sentencepiece libopenblas0-pthread python3-tqdm
  libpython3.11-testsuite python3-pytest
  pybind11-dev python3-dev  # the Python module `dspark` (python/, pybind11); its tests use python3-pytest
  chromium              # headless playground test (tests/e2e/playground_test.cc)
  clang libclang-rt-14-dev  # libFuzzer and the sanitizer runtimes (make fuzz, tests/fuzz)
  nodejs                # the OpenAI SDK conformance test (tests/openai_sdk, ctest -L e2e)
  nginx                 # the load-balancer test (deploy/nginx, tests/e2e/nginx_test.py); it runs its own nginx
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# npm only where no npm is on PATH: a nodejs from elsewhere (NodeSource) bundles npm and conflicts
# with Debian's npm package.
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's nginx starts a system nginx on port 80 as it installs (and enables it at boot). Nothing
  # here uses that service (the tests run their own nginx in the foreground), so refuse service starts
  # for the install with a policy-rc.d (invoke-rc.d and deb-systemd-invoke honour exit 101) unless the
  # machine has one, and stop and disable the service afterwards in case a policy allowed it.
  new_nginx=0
  for p in "${missing[@]}"; do [ "$p" = nginx ] && new_nginx=1; done
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ $new_nginx -eq 1 ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# install-deps.sh: no service starts during this install\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    own_policy=1
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  if [ $own_policy -eq 1 ]; then
    $SUDO rm -f "$policy"
    trap - EXIT
  fi
  if [ $new_nginx -eq 1 ]; then
    if [ -d /run/systemd/system ]; then
      $SUDO systemctl disable --now nginx.service >/dev/null 2>&1 || true
    else
      $SUDO update-rc.d nginx disable >/dev/null 2>&1 || true
      $SUDO service nginx stop >/dev/null 2>&1 || true
    fi
    echo "install-deps: nginx installed with its system service stopped and disabled (port 80 left free)"
  fi
fi

# tests/openai_sdk: the openai npm package at the version its package-lock.json pins, into
# tests/openai_sdk/node_modules (git-ignored). Again only when the lock file is newer than the
# install (npm ci writes node_modules/.package-lock.json).
SDK="$(cd "$(dirname "$0")/.." && pwd)/tests/openai_sdk"
if [ ! -f "$SDK/node_modules/.package-lock.json" ] || [ "$SDK/package-lock.json" -nt "$SDK/node_modules/.package-lock.json" ]; then
  echo "install-deps: npm ci --prefix tests/openai_sdk"
  npm ci --prefix "$SDK" --no-audit --no-fund --loglevel=error >/dev/null
fi
