#!/usr/bin/env bash
# cmake/RlptTorch.cmake against the toolkit traps of a real CUDA LibTorch (issue 32): each case
# configures rlpt (nothing is built) with the CUDA wheel's own CMake config, where the traps live,
# and fails unless the trap is handled:
#   wrapper-nvcc   nvcc on PATH is a script in a bin folder that execs the real one (conda, Spack,
#                  environment modules): LibTorch's FindCUDA takes that folder's parent as the
#                  toolkit and stops ("Your installed Caffe2 version uses CUDA but I cannot find
#                  the CUDA libraries") unless rlpt hands it nvcc's own toolkit;
#   linked-nvcc    the same with a symbolic link to nvcc;
#   no-nvrtc       a toolkit without libnvrtc (a copy of the machine's, nvrtc removed): configuring
#                  must not leave -lCUDA_nvrtc_LIBRARY-NOTFOUND on the link lines (LibTorch's
#                  wheel has libnvrtc: that one is taken);
#   no-nvrtc-anywhere  that toolkit and a wheel without libnvrtc: a configure error naming the fix;
#   system-nccl    a libnccl.so (and nccl.h) in a system library folder beside the wheel's NCCL:
#                  rlpt must link the wheel's libnccl.so.2, the NCCL libtorch_cuda loads;
#   nccl-home-other  NCCL_HOME naming another NCCL than LibTorch's: a configure error.
#   cuda_toolkit_traps_test.sh <source dir>
# Needs nvcc and a Python whose torch is a CUDA wheel: $RLPT_CUDA_TORCH_PYTHON, else
# <source dir>/.venv-cuda/bin/python (scripts/test.sh installs it for its CUDA-flavour step).
# Without them it exits 77 (ctest: skipped), or 1 when RLPT_REQUIRE_CUDA_TRAPS=1 (the CUDA step
# of scripts/test.sh sets it, so CI cannot skip these silently).
set -euo pipefail
src=$(cd "$1" && pwd)
skip() {
  echo "SKIP: $*"
  if [ "${RLPT_REQUIRE_CUDA_TRAPS:-0}" = 1 ]; then echo "FAIL: RLPT_REQUIRE_CUDA_TRAPS=1" >&2; exit 1; fi
  exit 77
}
py=${RLPT_CUDA_TORCH_PYTHON:-$src/.venv-cuda/bin/python}
[ -x "$py" ] || skip "no CUDA wheel ($py; set RLPT_CUDA_TORCH_PYTHON or run scripts/test.sh)"
info=$("$py" -c "import torch; print(torch.utils.cmake_prefix_path); print(torch.version.cuda or '')" 2>/dev/null) \
  || skip "$py cannot import torch"
torch_cmake=$(echo "$info" | sed -n 1p)
[ -n "$(echo "$info" | sed -n 2p)" ] || skip "the torch of $py is a CPU build"
nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
[ -n "$nvcc" ] || skip "no nvcc"
# The folder of the real nvcc binary, as nvcc reports it (the one found may itself be a wrapper).
nvcc_dir=$("$nvcc" -v --dryrun -x cu -c /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | tail -1)
[ -x "$nvcc_dir/nvcc" ] || { echo "FAIL: cannot tell where $nvcc lives (nvcc -v says _HERE_=$nvcc_dir)" >&2; exit 1; }
toolkit=$(cd "$nvcc_dir/.." && pwd -P)
site=$(cd "$torch_cmake/../../.." && pwd)  # site-packages
torch_dir="$torch_cmake/Torch"

tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/configure_case.sh"
CONFIGURE_KEEP_GOING=1  # every trap is reported, not only the first
# Whatever the caller's environment says about CUDA, only the case decides where the toolkit is.
base_env=(-u CUDA_PATH -u CUDA_HOME -u CUDA_TOOLKIT_ROOT -u CUDA_BIN_PATH -u NCCL_HOME -u CUDAToolkit_ROOT)
arch=(-DCMAKE_CUDA_ARCHITECTURES=90)
# Checks after a case that configured (each counts a failure and returns 0):
# no_notfound <name>: no generated link line names a library CMake did not find.
no_notfound() {
  if grep -rl "NOTFOUND" "$tmp/b-$1" --include=link.txt >/dev/null; then
    grep -rho -- "-l[^ ]*NOTFOUND" "$tmp/b-$1" --include=link.txt | sort -u
    configure_failed "$1: a link line has a -NOTFOUND library"
  fi
}
# links <name> <regex>: rlpt's link line names a library matching <regex>.
links() {
  grep -qE -- "$2" "$tmp/b-$1/src/CMakeFiles/rlpt.dir/link.txt" && return
  configure_failed "$1: rlpt's link line has no /$2/"
}

mkdir -p "$tmp/wrap" "$tmp/link"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$nvcc_dir/nvcc" > "$tmp/wrap/nvcc"; chmod +x "$tmp/wrap/nvcc"
ln -s "$nvcc_dir/nvcc" "$tmp/link/nvcc"
CONFIGURE_ENV=("${base_env[@]}" PATH="$tmp/wrap:$PATH")
configure wrapper-nvcc ok "CUDA kernels ON" -DTorch_DIR="$torch_dir" "${arch[@]}"
[ "$configure_ok" = 1 ] && no_notfound wrapper-nvcc
CONFIGURE_ENV=("${base_env[@]}" PATH="$tmp/link:$PATH")
configure linked-nvcc ok "CUDA kernels ON" -DTorch_DIR="$torch_dir" "${arch[@]}"

# A toolkit without libnvrtc: the machine's as a tree of links, nvcc and its profile copied (nvcc
# takes the toolkit from the folder it runs in), every libnvrtc left out.
cp -as "$toolkit" "$tmp/cuda"
cp --remove-destination "$toolkit/bin/nvcc" "$toolkit/bin/nvcc.profile" "$tmp/cuda/bin/"
find "$tmp/cuda" -name 'libnvrtc*' -delete
CONFIGURE_ENV=("${base_env[@]}" PATH="$tmp/cuda/bin:$PATH")
configure no-nvrtc ok "CUDA kernels ON" \
  -DTorch_DIR="$torch_dir" -DCMAKE_CUDA_COMPILER="$tmp/cuda/bin/nvcc" "${arch[@]}"
[ "$configure_ok" = 1 ] && no_notfound no-nvrtc && links no-nvrtc "$site/nvidia/[^ ]*/libnvrtc"
# ... and a wheel without one: a site-packages of links to the wheel's, libnvrtc left out.
mkdir -p "$tmp/site/nvidia"
ln -s "$site/torch" "$tmp/site/torch"
for d in "$site"/nvidia/*; do
  if ls "$d"/lib/libnvrtc* >/dev/null 2>&1; then cp -as "$d" "$tmp/site/nvidia/"; else ln -s "$d" "$tmp/site/nvidia/"; fi
done
find "$tmp/site/nvidia" -name 'libnvrtc*' -delete
configure no-nvrtc-anywhere fail "links libnvrtc, but neither it .* nor the CUDA toolkit .* has one.*CUDA_nvrtc_LIBRARY" \
  -DTorch_DIR="$tmp/site/torch/share/cmake/Torch" -DCMAKE_CUDA_COMPILER="$tmp/cuda/bin/nvcc" "${arch[@]}"

# A system NCCL beside the wheel's: libnccl.so (the development name CMake tries first) and nccl.h
# in folders CMake searches by default. The toolkit is named outright (CUDA_PATH, the one setting
# LibTorch's FindCUDA takes), so these cases test NCCL only.
mkdir -p "$tmp/sys/lib" "$tmp/sys/include"
: > "$tmp/sys/lib/libnccl.so"; echo '#error "the system nccl.h"' > "$tmp/sys/include/nccl.h"
CONFIGURE_ENV=("${base_env[@]}" CUDA_PATH="$toolkit")
configure system-nccl ok "NCCL collectives ON" \
  -DTorch_DIR="$torch_dir" -DCMAKE_CUDA_COMPILER="$nvcc_dir/nvcc" "${arch[@]}" -DCMAKE_LIBRARY_PATH="$tmp/sys/lib" -DCMAKE_INCLUDE_PATH="$tmp/sys/include"
[ "$configure_ok" = 1 ] && links system-nccl "$site/nvidia/[^ ]*/libnccl.so.2" &&
  if grep -rq "$tmp/sys" "$tmp/b-system-nccl" --include=link.txt --include=flags.make; then
    configure_failed "system-nccl: the system NCCL is on a compile or link line"
  fi
CONFIGURE_ENV=("${base_env[@]}" CUDA_PATH="$toolkit" NCCL_HOME="$tmp/sys")
configure nccl-home-other fail "NCCL_HOME=$tmp/sys, but LibTorch .* loads the NCCL of its wheel.*must use one NCCL" \
  -DTorch_DIR="$torch_dir" -DCMAKE_CUDA_COMPILER="$nvcc_dir/nvcc" "${arch[@]}"
if [ "$configure_failures" -gt 0 ]; then echo "FAIL: $configure_failures trap(s) not handled" >&2; exit 1; fi
echo "cuda toolkit traps OK"
