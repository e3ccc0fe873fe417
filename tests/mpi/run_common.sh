# Sourced by the end-to-end test scripts (trainer_runs.sh, async_runs.sh) after they set
# bin, src and check: a scratch directory removed on exit (entered), mpirun flags for an
# oversubscribed machine, run <np> <args...> and the Python interpreter `py`.
work=$(mktemp -d "/tmp/rlpt-${check}-XXXXXX")
# RLPT_METRICS_KEEP=DIR keeps every run's metrics (timing fields dropped) in DIR/<check>/ when the
# script ends, to compare a whole suite before and after a change (scripts/same_metrics.sh).
keep_metrics() {
  [ -n "${RLPT_METRICS_KEEP:-}" ] || return 0
  local f rel
  mkdir -p "$RLPT_METRICS_KEEP/$check"
  while IFS= read -r f; do
    rel=${f#"$work"/}
    "$src/scripts/same_metrics.sh" strip "$f" "$RLPT_METRICS_KEEP/$check/${rel//\//_}" || true
  done < <(find "$work" -name metrics.jsonl)
}
trap 'keep_metrics; rm -rf "$work"' EXIT
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
