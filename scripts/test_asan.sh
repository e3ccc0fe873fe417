#!/usr/bin/env bash
# Builds rlpt with AddressSanitizer + UBSan into build-asan/ (a separate, full build: tens of
# minutes on 2 cores) and runs the unit tests and the in-process trainer matrix under it.
#   scripts/test_asan.sh [ctest -R regex, default trainer_matrix]
# RLPT_ASAN_TARGETS limits the build to some targets, e.g. the trainer matrix alone (the unit
# tests then run only if rlpt_unit_tests is among them):
#   RLPT_ASAN_TARGETS=rlpt_mpi_tests scripts/test_asan.sh trainer_matrix_np1
# RLPT_ASAN_JOBS sets the build's parallelism (default: every core).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLPT_SANITIZE=address,undefined
targets=${RLPT_ASAN_TARGETS:-all}
cmake --build build-asan -j"${RLPT_ASAN_JOBS:-$(nproc)}" --target $targets
# LibTorch and Open MPI keep allocations until exit and MPI's shared-memory transport trips the
# leak checker: leaks are not reported, every other ASan/UBSan error fails the test.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
if [[ $targets == all || " $targets " == *" rlpt_unit_tests "* ]]; then
    ctest --test-dir build-asan -L unit --output-on-failure -j"$(nproc)"
fi
ctest --test-dir build-asan -R "${1:-trainer_matrix}" --output-on-failure
