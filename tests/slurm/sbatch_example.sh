#!/usr/bin/env bash
# sbatch_example.sh RLPT_BINARY SBATCH_SCRIPT CONFIG
# Submits scripts/slurm/rlpt_1node.sbatch to the local Slurm with 3 tasks and no GPUs
# (command-line options override the script's #SBATCH lines), running CONFIG for 1000 steps,
# and checks the whole preemption cycle:
#   * the job's log (<run dir>/logs/rlpt-<job>-restart0.log) names the Slurm job;
#   * after the first training step, `scancel --batch --signal=USR1` (what
#     --signal=B:USR1@300 does before the time limit) reaches the batch shell, whose trap
#     forwards it to srun and so to every rank; rlpt checkpoints and exits 75;
#   * the script requeues the job; the requeued job (restart 1; the test lifts Slurm's
#     ~2 minute requeue hold) resumes from that checkpoint. The test then cancels it.
# Prints the times; leaves no job behind.
set -u
bin="$1"; script="$2"; config="$3"
work=$(mktemp -d /tmp/rlpt-sbatch-XXXXXX)
name="rlpt-sbatch-$$"
export RLPT_BIN="$bin" RLPT_RUN_DIR="$work/runs/$name"
opts=(-J "$name" --ntasks-per-node=3 --cpus-per-task=1 --gpus-per-node=0 --time=10 --chdir="$work"
      --output="$work/slurm-%j.out")
status=0
fail() { echo "FAIL: $*"; status=1; }
finish() {
  scancel -n "$name" 2>/dev/null
  local gone=0
  for _ in $(seq 1 60); do [ -z "$(squeue -h -n "$name" -o %i 2>/dev/null)" ] && { gone=1; break; }; sleep 0.5; done
  [ "$gone" -eq 1 ] || fail "job $name still in the queue 30 s after scancel"
  for _ in $(seq 1 20); do pgrep -f -- "$RLPT_RUN_DIR" >/dev/null || break; sleep 0.5; done
  if pgrep -f -- "$RLPT_RUN_DIR" >/dev/null; then
    fail "processes left behind:"; pgrep -af -- "$RLPT_RUN_DIR"; pkill -KILL -f -- "$RLPT_RUN_DIR"
  fi
  for f in "$work"/slurm-*.out "$RLPT_RUN_DIR"/logs/*.log; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done
  rm -rf "$work"
  echo "sbatch_example: $([ $status -eq 0 ] && echo ok || echo FAILED) after $SECONDS s"
  exit $status
}
wait_for() {  # wait_for SECONDS FILE REGEX [STOP_FILE STOP_REGEX]: early failure on STOP_REGEX
  local i
  for i in $(seq 1 $(( $1 * 10 ))); do
    grep -Eq "$3" "$2" 2>/dev/null && return 0
    [ $# -ge 5 ] && grep -Eq "$5" "$4" 2>/dev/null && { sleep 0.5; grep -Eq "$3" "$2" 2>/dev/null; return; }
    sleep 0.1
  done
  return 1
}
job=$(sbatch --parsable "${opts[@]}" "$script" "$config" trainer.total_training_steps=1000 \
      trainer.save_freq=-1 trainer.test_freq=-1 trainer.export_hf=false) || { fail "sbatch failed"; finish; }
job="${job%%;*}"
log0="$RLPT_RUN_DIR/logs/rlpt-$job-restart0.log"
out="$work/slurm-$job.out"
wait_for 90 "$log0" "step [0-9]+/1000 ep" "$out" "rlpt exited with" || { fail "the job did not finish a training step"; finish; }
grep -Eq "Slurm job $job step [0-9]+ on nodes " "$log0" || fail "the log does not name the Slurm job"
t0=$(date +%s.%N)
scancel --batch --signal=USR1 "$job"
wait_for 60 "$log0" "stopping after step [0-9]+/1000 on SIGUSR1" ||
  fail "rlpt did not stop after SIGUSR1 to the batch shell"
n=$(grep -Eo "stopping after step [0-9]+" "$log0" | head -1 | grep -Eo "[0-9]+$")
echo "sbatch_example: rlpt stopped after step ${n:-?}, $(echo "$(date +%s.%N) - $t0" | bc) s after the signal"
wait_for 30 "$out" "requeueing job $job" || fail "the batch script did not requeue the job"
grep -q "rlpt exited with 75" "$out" || fail "the batch script did not see exit code 75"
# Slurm usually holds a requeued job for ~2 minutes (BeginTime); start it now when it does.
log1="$RLPT_RUN_DIR/logs/rlpt-$job-restart1.log"
for _ in $(seq 1 100); do
  [ -f "$log1" ] && break
  if [ "$(squeue -h -j "$job" -o %T 2>/dev/null)" = PENDING ]; then
    scontrol show job "$job" | grep -Eo "(JobState|Reason|Restarts|BeginTime)=[^ ]+" | tr '\n' ' '; echo
    # Not at once: slurmd may still be cleaning up the old step <job>.0, and a restart within
    # a second or two fails to launch its srun step ("aborted before step completely launched").
    sleep 8
    scontrol update jobid="$job" starttime=now && break
  fi
  sleep 0.1
done
if wait_for 90 "$log1" "resumed from .*step_0*${n:-x} \(step ${n:-x}[,)]"; then
  echo "sbatch_example: the requeued job resumed from step $n, $(echo "$(date +%s.%N) - $t0" | bc) s after the signal"
else
  fail "the requeued job did not resume from step ${n:-?} (restart 1)"
  scontrol show job "$job" | grep -E "JobState|Reason|Restarts|BeginTime"
fi
finish
