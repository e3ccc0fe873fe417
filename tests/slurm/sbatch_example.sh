#!/usr/bin/env bash
# sbatch_example.sh run|signal BINARY SBATCH_SCRIPT CONFIG
# Submits scripts/slurm/rlpt_1node.sbatch to the local Slurm with 3 tasks and no GPUs
# (command-line options override the script's #SBATCH lines) and checks:
#   run     BINARY=rlpt: the job completes (exit 0), its log in <run dir>/logs/ has the ping
#           table of all worker ranks and names the Slurm job.
#   signal  BINARY=rlpt_signal_probe: `scancel --batch --signal=USR1` (what --signal=B:USR1@300
#           does before the time limit) reaches the batch shell, whose trap forwards it to the
#           launcher (srun, or mpirun with RLPT_LAUNCHER=mpirun) and so to every rank; the ranks
#           stop with 75, the script requeues the job and the requeued job starts again
#           (restart 1; the test lifts Slurm's ~2 minute requeue hold). The test then cancels it.
set -u
mode="$1"; bin="$2"; script="$3"; config="$4"
work=$(mktemp -d /tmp/rlpt-sbatch-XXXXXX)
name="rlpt-sbatch-$mode-$$"
export RLPT_BIN="$bin" RLPT_RUN_DIR="$work/runs/$name"
opts=(-J "$name" --ntasks-per-node=3 --cpus-per-task=1 --gpus-per-node=0 --time=10 --chdir="$work"
      --output="$work/slurm-%j.out")
status=0
fail() { echo "FAIL: $*"; status=1; }
finish() {
  scancel -n "$name" 2>/dev/null
  for f in "$work"/slurm-*.out "$RLPT_RUN_DIR"/logs/*.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  rm -rf "$work"
  echo "sbatch_example: $mode: $([ $status -eq 0 ] && echo ok || echo FAILED) after $SECONDS s"
  exit $status
}
wait_for() {  # wait_for SECONDS FILE REGEX
  local i
  for i in $(seq 1 $(( $1 * 10 ))); do grep -Eq "$3" "$2" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}

if [ "$mode" = run ]; then
  sbatch --wait "${opts[@]}" "$script" "$config"
  rc=$?
  [ "$rc" -eq 0 ] || fail "the job exited with $rc"
  log=$(ls "$RLPT_RUN_DIR"/logs/rlpt-*-restart0.log 2>/dev/null | head -1)
  [ -n "$log" ] || { fail "no log in $RLPT_RUN_DIR/logs"; finish; }
  grep -q "all 2 worker rank(s) answered" "$log" || fail "the log lacks the ping table"
  grep -Eq "Slurm job [0-9]+ step 0 on nodes " "$log" || fail "the log does not name the Slurm job"
  [ -f "$RLPT_RUN_DIR/config.yaml" ] || fail "no effective config in the run directory"
  grep -q "rlpt exited with 0" "$work"/slurm-*.out || fail "the batch script did not report exit 0"
  finish
fi

[ "$mode" = signal ] || { echo "usage: $0 run|signal BINARY SBATCH_SCRIPT CONFIG"; exit 2; }
job=$(sbatch --parsable "${opts[@]}" "$script" "$config") || { fail "sbatch failed"; finish; }
job="${job%%;*}"
log0="$RLPT_RUN_DIR/logs/rlpt-$job-restart0.log"
wait_for 60 "$log0" "ranks ready" || { fail "the probe did not start"; finish; }
t0=$(date +%s.%N)
scancel --batch --signal=USR1 "$job"
wait_for 30 "$log0" "stop at step" || fail "the ranks did not stop after SIGUSR1 to the batch shell"
echo "sbatch_example: ranks stopped $(echo "$(date +%s.%N) - $t0" | bc) s after the signal"
grep -Eq "signals seen per rank: 0=SIGUSR1 1=SIGUSR1 2=SIGUSR1$" "$log0" || fail "not every rank saw SIGUSR1"
out="$work/slurm-$job.out"
wait_for 30 "$out" "requeueing job $job" || fail "the batch script did not requeue the job"
grep -q "rlpt exited with 75" "$out" || fail "the batch script did not see exit code 75"
# Slurm holds a requeued job for ~2 minutes (BeginTime); start it now.
for _ in $(seq 1 100); do
  [ "$(squeue -h -j "$job" -o %T 2>/dev/null)" = PENDING ] && break
  sleep 0.1
done
scontrol show job "$job" | grep -Eo "(JobState|Reason|Restarts)=[^ ]+" | tr '\n' ' '; echo
scontrol update jobid="$job" starttime=now || fail "cannot release the requeued job"
log1="$RLPT_RUN_DIR/logs/rlpt-$job-restart1.log"
if wait_for 90 "$log1" "ranks ready"; then
  echo "sbatch_example: the requeued job restarted $(echo "$(date +%s.%N) - $t0" | bc) s after the signal"
else
  fail "the requeued job did not start again (restart 1)"
  scontrol show job "$job" | grep -E "JobState|Reason|Restarts|BeginTime"
fi
finish
