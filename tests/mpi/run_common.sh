# Sourced by the end-to-end test scripts (trainer_runs.sh, async_runs.sh) after they set
# bin, src and check: a scratch directory removed on exit (entered), mpirun flags for an
# oversubscribed machine, run <np> <args...> and the Python interpreter `py`.
work=$(mktemp -d "/tmp/rlpt-${check}-XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
# RLPT_TEST_OVERRIDES (e.g. "model.device=cuda", scripts/gpu_check.sh): config overrides appended
# to every job this script runs.
run() {
  local np="$1"; shift
  # shellcheck disable=SC2086  # word splitting of the overrides is intended
  mpirun -np "$np" "${flags[@]}" "$bin" "$@" ${RLPT_TEST_OVERRIDES:-}
}
py=/usr/bin/python3; [ -x "$py" ] || py=python3
