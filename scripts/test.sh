#!/usr/bin/env bash
# Installs what is missing, builds, fetches the test assets and runs the whole test suite
# (GoogleTest units, multi-rank tests through mpirun, the Slurm tests against a local
# single-node Slurm). Idempotent. Extra arguments go to ctest (e.g. -R Batch).
# Then the CUDA flavour (scripts/test_cuda_build.sh): a CUDA wheel in .venv-cuda, build-cuda/
# built with the machine's nvcc, and the CPU suite's device-facing tests against it. It runs when
# nvcc is found, ./build's LibTorch is CPU-only and no ctest arguments were given;
# RLPT_TEST_CUDA_BUILD=0 leaves it out, =1 runs it (and fails without nvcc). The exit status is
# non-zero when either part failed; the last line sums both parts in ctest's words.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${RLPT_TEST_CUDA_BUILD:-auto}" in
  0|1|auto) ;;
  *) echo "test.sh: RLPT_TEST_CUDA_BUILD=$RLPT_TEST_CUDA_BUILD: use 0, 1 or leave it unset" >&2; exit 2;;
esac
scripts/setup.sh
[ -x scripts/fetch_test_assets.sh ] && scripts/fetch_test_assets.sh >/dev/null
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
start=$(date +%s)
# With GPUs, ctest packs the tests onto free cards (tests/CMakeLists.txt, RESOURCE_GROUPS).
resources=()
if scripts/gpu_resource_spec.sh build/gpu_resources.json; then
  resources=(--resource-spec-file build/gpu_resources.json)
  echo "test.sh: GPUs found, ctest schedules tests by build/gpu_resources.json"
fi
log=$(mktemp); trap 'rm -f "$log"' EXIT
summary() { grep -E "^[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+" "$1" | tail -1; }
echo "test.sh: CPU suite (./build)"
cpu_rc=0
ctest --test-dir build -L "unit|mpi|slurm" -j2 --output-on-failure --timeout 900 "${resources[@]}" "$@" 2>&1 \
  | tee "$log" || cpu_rc=$?
cpu_summary=$(summary "$log")
echo "test.sh: suite took $(( $(date +%s) - start )) s"

# ---- the CUDA flavour ----------------------------------------------------------------------
want=${RLPT_TEST_CUDA_BUILD:-auto}
why=""
nvcc_found=0
{ command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } && nvcc_found=1
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' build/CMakeCache.txt 2>/dev/null || true)
if [ "$want" = 0 ]; then
  why="RLPT_TEST_CUDA_BUILD=0"
elif [ "$want" = auto ]; then
  if [ $# -gt 0 ]; then why="ctest arguments given (RLPT_TEST_CUDA_BUILD=1 runs it)"
  elif [ "$nvcc_found" = 0 ]; then why="no nvcc"
  elif [ -e "$torch_dir/../../../lib/libtorch_cuda.so" ]; then why="./build is the CUDA flavour already"
  fi
fi
cuda_rc=0; cuda_summary=""
if [ -n "$why" ]; then
  echo "test.sh: CUDA build not tested: $why"
else
  [ "$nvcc_found" = 1 ] || { echo "test.sh: RLPT_TEST_CUDA_BUILD=1, but no nvcc on PATH or in /usr/local/cuda/bin" >&2; exit 1; }
  echo "test.sh: CUDA build (build-cuda, scripts/test_cuda_build.sh)"
  start=$(date +%s)
  scripts/test_cuda_build.sh 2>&1 | tee "$log" || cuda_rc=$?
  cuda_summary=$(summary "$log")
  echo "test.sh: CUDA build and its tests took $(( $(date +%s) - start )) s"
fi

echo "test.sh: CPU suite (./build): ${cpu_summary:-no ctest summary} (exit $cpu_rc)"
if [ -z "$why" ]; then
  echo "test.sh: CUDA build (build-cuda): ${cuda_summary:-no ctest summary} (exit $cuda_rc)"
  # Both parts in ctest's words, for whatever reads the last summary line.
  read -r failed total < <(printf '%s\n%s\n' "$cpu_summary" "$cuda_summary" \
    | sed -nE 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1 \2/p' | awk '{f+=$1; t+=$2} END {print f+0, t+0}')
  [ "$cuda_rc" -eq 0 ] || [ -n "$cuda_summary" ] || failed=$((failed + 1))  # failed before its tests
  if [ "$total" -gt 0 ]; then
    echo "$(( (total - failed) * 100 / total ))% tests passed, $failed tests failed out of $total (CPU suite and CUDA build)"
  fi
fi
[ "$cpu_rc" -eq 0 ] && [ "$cuda_rc" -eq 0 ]
