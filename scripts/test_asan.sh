#!/usr/bin/env bash
# Builds rlpt with AddressSanitizer + UBSan into build-asan/ (a separate, full build: tens of
# minutes on 2 cores) and runs the unit tests and the in-process trainer matrix under it.
#   scripts/test_asan.sh [extra ctest -R regex]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLPT_SANITIZE=address,undefined
cmake --build build-asan -j"$(nproc)"
# LibTorch and Open MPI keep allocations until exit and MPI's shared-memory transport trips the
# leak checker: leaks are not reported, every other ASan/UBSan error fails the test.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build-asan -L unit --output-on-failure -j"$(nproc)"
ctest --test-dir build-asan -R "${1:-trainer_matrix}" --output-on-failure
