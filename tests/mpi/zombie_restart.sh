#!/usr/bin/env bash
# zombie_restart.sh NP RLPT_BINARY CONFIG [key=value...]
# A whole job killed with SIGKILL under a PID 1 that never reaps, then a restart that resumes:
#   1. in a new PID namespace whose PID 1 is tests/mpi/nonreaping_init.py, starts
#      `mpirun -np NP rlpt CONFIG ...` with a checkpoint every step, waits for the second complete
#      checkpoint and kills mpirun and every rank with SIGKILL at once;
#   2. checks that the killed rank 0 (the run lock's holder) is a zombie, so the scenario is real;
#   3. restarts the same command with trainer.resume=auto in the same namespace, next to the
#      zombies: exit 0, "replacing the stale run lock ... zombie", resumed from the newest
#      checkpoint, and the run reaches its last step.
# Exit 77 (ctest SKIP) where no PID namespace can be made (not root, no unshare).
set -u
if [ "${1:-}" != "--inside" ]; then
  here=$(cd "$(dirname "$0")" && pwd)
  if ! unshare --pid --fork --mount-proc true 2>/dev/null; then
    echo "zombie_restart: SKIP: cannot make a PID namespace here (unshare --pid needs root or user namespaces)"
    exit 77
  fi
  py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3
  exec timeout -k 10 300 unshare --pid --fork --mount-proc "$py" "$here/nonreaping_init.py" \
    bash "$here/zombie_restart.sh" --inside "$@"
fi
shift
np="$1"; bin="$2"; config="$3"; shift 3
[ "$$" -eq 1 ] && { echo "FAIL: this script must not be PID 1 itself"; exit 1; }
[ "$PPID" -eq 1 ] || { echo "FAIL: expected to run under the namespace's PID 1 (ppid $PPID)"; exit 1; }
work=$(mktemp -d /tmp/rlpt-zombie-XXXXXX)
trap 'rm -rf "$work"' EXIT
runs="$work/runs"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
status=0
fail() { echo "FAIL: $*"; status=1; }

mpirun -np "$np" "${flags[@]}" "$bin" "$config" trainer.total_training_steps=1000 trainer.save_freq=1 \
  trainer.test_freq=-1 trainer.export_hf=false trainer.output_dir="$runs" trainer.experiment_name=z "$@" \
  >"$work/run1.log" 2>&1 &
launcher=$!
ckpts="$runs/z/checkpoints"
complete() { ls -d "$ckpts"/step_*/COMPLETE 2>/dev/null | wc -l; }
for _ in $(seq 1 1800); do
  [ "$(complete)" -ge 2 ] && break
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
if [ "$(complete)" -lt 2 ]; then
  cat "$work/run1.log"; kill -KILL "$launcher" 2>/dev/null; echo "FAIL: no second checkpoint within 180 s"; exit 1
fi
holder=$(sed -n 's/^pid: //p' "$runs/z/rlpt.lock")
# The whole job at once: mpirun and every rank (every process naming this run directory).
victims=$(pgrep -f -- "trainer.output_dir=$runs")
echo "zombie_restart: $(complete) checkpoints; kill -9 of $(echo $victims) (lock holder $holder)"
kill -KILL $victims 2>/dev/null
wait "$launcher" 2>/dev/null
sleep 1
state=$(awk '{ sub(/.*\) /, ""); print substr($0, 1, 1) }' "/proc/$holder/stat" 2>/dev/null)
echo "zombie_restart: rank 0 (pid $holder) state '${state:-gone}'"
[ "$state" = Z ] || fail "the killed rank 0 is not a zombie (state '${state:-gone}'): this PID 1 reaped it, the test tests nothing"
newest=0
for d in "$ckpts"/step_*; do
  [ -f "$d/COMPLETE" ] && n=$((10#${d##*step_})) && [ "$n" -gt "$newest" ] && newest=$n
done
total=$((newest + 2))
timeout -k 5 150 mpirun -np "$np" "${flags[@]}" "$bin" "$config" trainer.total_training_steps=$total \
  trainer.save_freq=-1 trainer.test_freq=-1 trainer.export_hf=false trainer.output_dir="$runs" \
  trainer.experiment_name=z trainer.resume=auto "$@" >"$work/run2.log" 2>&1
rc=$?
cat "$work/run2.log"
[ "$rc" -eq 0 ] || fail "the restart exited with $rc"
grep -q "replacing the stale run lock .*zombie" "$work/run2.log" || fail "no 'replacing the stale run lock (... zombie ...)' line"
grep -Eq "resumed from .*step_0*$newest \(step $newest[,)]" "$work/run2.log" \
  || fail "the restart did not resume from the newest checkpoint, step $newest"
grep -Eq "done: $total steps" "$work/run2.log" || fail "the restart did not finish $total steps"
echo "zombie_restart: $([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
