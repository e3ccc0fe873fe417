#!/usr/bin/env bash
# cmake/RlptTorch.cmake's rules, checked by configuring rlpt against fake LibTorch trees (a few
# seconds each; nothing is built):
#   1. a CUDA LibTorch (lib/libtorch_cuda.so) with no CUDA compiler: a configure error naming nvcc
#      and -DRLPT_WITH_CUDA=OFF, never a silent CPU-only build;
#   2. the same with -DRLPT_WITH_CUDA=OFF: configures, CUDA kernels and NCCL off;
#   3. (when nvcc exists) a CUDA LibTorch in a site-packages without NCCL: a configure error naming
#      NCCL; NCCL_HOME with only libnccl.so.2 is taken over a system libnccl.so; with pip's layout
#      (nvidia/nccl/include/nccl.h + lib/libnccl.so.2 only) NCCL is found;
#   (the traps of a real CUDA wheel: cuda_toolkit_traps_test.sh)
#   4. a CPU-only LibTorch: CUDA kernels off whatever nvcc is on the machine; RLPT_WITH_CUDA=ON refused.
#   torch_detection_test.sh <source dir>
set -euo pipefail
src=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# fake_torch <site dir> <cuda:0|1>: a site-packages/torch with a minimal TorchConfig.cmake.
fake_torch() {
  local t=$1/torch
  mkdir -p "$t/share/cmake/Torch" "$t/lib" "$t/include"
  : > "$t/lib/libtorch.so"; : > "$t/lib/libc10.so"
  [ "$2" = 1 ] && : > "$t/lib/libtorch_cuda.so" && : > "$t/lib/libnvrtc-0123abcd.so.13"  # as a libtorch zip
  cat > "$t/share/cmake/Torch/TorchConfig.cmake" <<'CM'
set(Torch_VERSION 9.9.9)
set(TORCH_LIBRARIES "")
set(TORCH_INCLUDE_DIRS "${CMAKE_CURRENT_LIST_DIR}/../../../include")
set(TORCH_CXX_FLAGS "")
set(Torch_FOUND TRUE)
CM
}

source "$(dirname "$0")/configure_case.sh"

fake_torch "$tmp/cuda-site" 1
fake_torch "$tmp/cpu-site" 0
# No nvcc: every folder holding one is ignored by CMake's search.
ignore="/usr/local/cuda/bin"
for n in $(which -a nvcc 2>/dev/null); do ignore="$ignore;$(dirname "$n")"; done
no_nvcc=(-DCMAKE_IGNORE_PATH="$ignore")
configure cuda-without-nvcc fail "is a CUDA build, but no CUDA compiler \(nvcc\) was found.*RLPT_WITH_CUDA=OFF" \
  -DTorch_DIR="$tmp/cuda-site/torch/share/cmake/Torch" "${no_nvcc[@]}"
configure cuda-torch-cuda-off ok "rlpt: CUDA kernels OFF, NCCL collectives OFF" \
  -DTorch_DIR="$tmp/cuda-site/torch/share/cmake/Torch" -DRLPT_WITH_CUDA=OFF
configure cpu-torch ok "LibTorch 9.9.9 \(CPU\).*rlpt: CUDA kernels OFF" -DTorch_DIR="$tmp/cpu-site/torch/share/cmake/Torch"
configure cpu-torch-cuda-on fail "RLPT_WITH_CUDA=ON, but LibTorch .* is CPU-only" \
  -DTorch_DIR="$tmp/cpu-site/torch/share/cmake/Torch" -DRLPT_WITH_CUDA=ON

nvcc=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ -n "$nvcc" ]; then
  configure cuda-without-nccl fail "NCCL \(nccl.h and libnccl\) was not found" \
    -DTorch_DIR="$tmp/cuda-site/torch/share/cmake/Torch" -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90
  # No wheel NCCL (a libtorch zip): NCCL_HOME in pip's layout (only libnccl.so.2) beats a system
  # libnccl.so, and nccl.h comes from beside the library.
  mkdir -p "$tmp/home/include" "$tmp/home/lib" "$tmp/sys/lib" "$tmp/sys/include"
  : > "$tmp/home/lib/libnccl.so.2"; echo '#define NCCL_MAJOR 2' > "$tmp/home/include/nccl.h"
  : > "$tmp/sys/lib/libnccl.so"; : > "$tmp/sys/include/nccl.h"
  configure zip-nccl-home ok "rlpt: NCCL $tmp/home/lib/libnccl.so.2 with $tmp/home/include/nccl.h" \
    -DTorch_DIR="$tmp/cuda-site/torch/share/cmake/Torch" -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DNCCL_HOME="$tmp/home" -DCMAKE_LIBRARY_PATH="$tmp/sys/lib" -DCMAKE_INCLUDE_PATH="$tmp/sys/include"
  mkdir -p "$tmp/cuda-site/nvidia/nccl/include" "$tmp/cuda-site/nvidia/nccl/lib"
  echo '#define NCCL_MAJOR 2' > "$tmp/cuda-site/nvidia/nccl/include/nccl.h"
  : > "$tmp/cuda-site/nvidia/nccl/lib/libnccl.so.2"
  configure cuda-wheel-nccl ok "CUDA kernels ON, NCCL collectives ON" \
    -DTorch_DIR="$tmp/cuda-site/torch/share/cmake/Torch" -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90
else
  echo "skip the NCCL cases: no nvcc on this machine"
fi
echo "torch detection OK"
