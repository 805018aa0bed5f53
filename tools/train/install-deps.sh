#!/usr/bin/env bash
# Dependencies of the training toolkit alone (scripts/install-deps.sh, which `make test` runs, installs
# these too: the toolkit's tests and the DSpark export cross-check are part of `make test`).
set -euo pipefail
# libpython3.11-testsuite: the half of the stdlib Debian ships apart (the corpus, see corpus.py).
PKGS=(python3-torch python3-numpy python3-sentencepiece libopenblas0-pthread python3-tqdm libpython3.11-testsuite python3-pytest)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
