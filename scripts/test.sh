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
ctest --test-dir build -L "unit|mpi|slurm" -j2 --output-on-failure --timeout 900 "$@"
echo "test.sh: suite took $(( $(date +%s) - start )) s"
