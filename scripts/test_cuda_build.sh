#!/usr/bin/env bash
# The CUDA flavour of rlpt, built and tested on a machine without a GPU (CI's; issue 32): the CUDA
# code compiles and links against a CUDA LibTorch, configuring survives the toolkits users have,
# and the device-facing tests of the CPU suite pass against that build (the GPU tests skip).
#   scripts/test_cuda_build.sh [ctest args...]
# 1. a CUDA LibTorch in .venv-cuda/ (pip install torch==$RLPT_CUDA_TORCH_VERSION, default 2.14.1,
#    the CUDA 13 wheel on PyPI; quiet when it is there), or the torch of $RLPT_CUDA_TORCH_PYTHON;
# 2. build-cuda/: configured once (Release, no benchmarks; build-cuda/configure.log) and built
#    whole with the nvcc on PATH (or /usr/local/cuda/bin/nvcc): every translation unit includes
#    the CUDA LibTorch's headers, so nothing is shared with ./build;
# 3. ctest on build-cuda, the tests that change with CUDA: the configure traps against the real
#    wheel (cmake_*; RLPT_REQUIRE_CUDA_TRAPS=1, so they cannot skip), the device map, device
#    collectives and batch devices, the samplers, NCCL settings, the kernel tests (the Gpu* ones
#    skip without a GPU), weight sync at 2 ranks and a tiny trainer run on the CPU from the CUDA
#    binary. RLPT_TEST_CUDA_REGEX replaces that selection.
# scripts/test.sh runs this after the CPU suite (RLPT_TEST_CUDA_BUILD, see there).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { echo "test_cuda_build: $*"; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

py=${RLPT_CUDA_TORCH_PYTHON:-}
if [ -z "$py" ]; then
  py=$PWD/.venv-cuda/bin/python
  want=${RLPT_CUDA_TORCH_VERSION:-2.14.1}
  if ! "$py" -c "import torch, numpy" >/dev/null 2>&1; then
    start=$(date +%s)
    say "installing torch==$want (CUDA) and numpy into .venv-cuda (pip)"
    [ -x "$py" ] || python3 -m venv .venv-cuda
    .venv-cuda/bin/pip install -q --disable-pip-version-check "torch==$want" numpy 2>&1 \
      | grep -vE "^WARNING: Location .* is ignored" || true
    say "wheel installed in $(( $(date +%s) - start )) s"
  fi
fi
cuda=$("$py" -c "import torch; print(torch.version.cuda or '')" 2>/dev/null) \
  || { say "$py has no torch" >&2; exit 1; }
if [ -z "$cuda" ]; then
  say "the torch of $py is a CPU build: pip's index gave no CUDA wheel. Point PIP_INDEX_URL at one" \
      "that has it (PyPI does) and remove .venv-cuda, or set RLPT_CUDA_TORCH_PYTHON." >&2
  exit 1
fi

mkdir -p build-cuda
if [ ! -f build-cuda/CMakeCache.txt ]; then
  start=$(date +%s)
  cmake -S . -B build-cuda -DCMAKE_BUILD_TYPE=Release -DRLPT_TORCH_PYTHON="$py" -DRLPT_BUILD_BENCHMARKS=OFF \
    >build-cuda/configure.log 2>&1 || { cat build-cuda/configure.log; rm -f build-cuda/CMakeCache.txt; exit 1; }
  grep -E "^-- rlpt:" build-cuda/configure.log || true
  say "configured in $(( $(date +%s) - start )) s"
fi
grep -q "CUDA kernels ON" build-cuda/configure.log 2>/dev/null \
  || { say "build-cuda was configured without CUDA kernels (build-cuda/configure.log); remove build-cuda/" >&2; exit 1; }
start=$(date +%s)
if ! out=$(cmake --build build-cuda -j"$(nproc)" 2>&1); then
  grep -E "error|Error" <<<"$out" | head -40 || true
  tail -30 <<<"$out"
  exit 1
fi
# (A here-string: with pipefail, echo | grep -q fails when grep stops reading early.)
if grep -qE "Building|Linking" <<<"$out"; then say "built build-cuda in $(( $(date +%s) - start )) s"; fi

regex=${RLPT_TEST_CUDA_REGEX:-"^(cmake_cuda_toolkit_traps|cmake_torch_detection|GpuMap\\.|DeviceCollectives\\.|BatchDevice\\.|DeviceConsistency\\.|DeviceSampler\\.|NcclEnv\\.|GpuSampler\\.|GpuParity\\.|GpuDevicePaths\\.|LogProb|DecodeOps|DecodeAttention|SmallMatmul|numerics_other_kernels_kernels|mpi_weight_sync_np2|device_collectives_mpi_np3|trainer_smoke-1)"}
start=$(date +%s)
RLPT_REQUIRE_CUDA_TRAPS=1 ctest --test-dir build-cuda -R "$regex" -j2 --output-on-failure --timeout 900 "$@"
say "tests took $(( $(date +%s) - start )) s"
