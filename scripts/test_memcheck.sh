#!/usr/bin/env bash
# Valgrind memcheck of the in-process trainer matrix and the role-handler test on the normal build
# (no second build): every advantage estimator x vanilla/dro/clip_cov/gspo through the real
# trainer, ReMax, the lr unit, clip_cov across a resume, the reward model, and every handler of
# every role. Fails on any invalid read/write, invalid or mismatched free, or overlapping copy.
# Uninitialised-value checks are off (Open MPI's and OpenBLAS's buffers trip them) and leaks are
# not errors. scripts/test_asan.sh (AddressSanitizer) also sees stack and global overflows, but
# needs a separate full build.
#   scripts/test_memcheck.sh [gtest filter]    (default: "TrainerMatrix.*:RoleHandlers.*")
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/tests/mpi/rlpt_mpi_tests
[ -x "$bin" ] || { echo "build $bin first (cmake --build build --target rlpt_mpi_tests)"; exit 1; }
supp=(--suppressions=scripts/memcheck.supp)
for f in /usr/share/openmpi/openmpi-valgrind.supp /usr/lib/x86_64-linux-gnu/pmix2/share/pmix/pmix-valgrind.supp; do
    [ -f "$f" ] && supp+=(--suppressions="$f")
done
flags=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 RLPT_SOURCE_DIR="$PWD"
exec mpirun -np 1 "${flags[@]}" valgrind --tool=memcheck --error-exitcode=42 --undef-value-errors=no \
    "${supp[@]}" --num-callers=30 "$bin" --gtest_filter="${1:-TrainerMatrix.*:RoleHandlers.*}"
