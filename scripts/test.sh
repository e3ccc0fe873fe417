#!/usr/bin/env bash
# Installs what is missing, builds, fetches the test assets and runs the whole test suite
# (GoogleTest units, multi-rank tests through mpirun, the Slurm tests against a local
# single-node Slurm). Idempotent. Extra arguments go to ctest (e.g. -R Batch).
set -euo pipefail
cd "$(dirname "$0")/.."
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
ctest --test-dir build -L "unit|mpi|slurm" -j2 --output-on-failure --timeout 900 "${resources[@]}" "$@"
echo "test.sh: suite took $(( $(date +%s) - start )) s"
