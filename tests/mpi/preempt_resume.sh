#!/usr/bin/env bash
# preempt_resume.sh [--resume] [--launcher mpirun|srun] SEND NP RLPT_BINARY CONFIG [key=value...]
# Preemption of a real rlpt run, then resume:
#   1. starts `mpirun -np NP rlpt CONFIG trainer.total_training_steps=1000 ...` (or
#      `srun -n NP ...` inside the local Slurm, tests/slurm/with_cluster.sh) in its own session,
#      waits for the first finished training step, and sends the stop signal SEND:
#        launcher:USR1  kill -USR1 <mpirun|srun>  (both forward it to every rank)
#        ranks:TERM     kill -TERM every rank  (what Slurm's scancel/time limit does)
#        rank2:TERM     kill -TERM world rank 2 only (a worker: its reply carries it to rank 0)
#        scancel:SIG    scancel --signal=SIG <the srun job>  (Slurm signals every task)
#   2. expects exit code 75 within 60 s, "stopping after step N/1000 on <signal> on rank R", a
#      complete checkpoint checkpoints/step_<N> (COMPLETE manifest, actor files, controller.h5)
#      and no process (or Slurm job) left behind;
#   3. with --resume: runs again with trainer.total_training_steps=N+2 (trainer.resume=auto):
#      exit 0, "resumed from .../step_<N> (step N" and the run reaching step N+2.
# Prints the elapsed times. With trainer.mode=sft the steps key and lines are the SFT trainer's.
set -u
resume=0; launcher=mpirun
while :; do
  case "$1" in
    --resume) resume=1; shift;;
    --launcher) launcher="$2"; shift 2;;
    *) break;;
  esac
done
send="$1"; np="$2"; bin="$3"; config="$4"; shift 4
work=$(mktemp -d /tmp/rlpt-preempt-XXXXXX)
trap 'rm -rf "$work"' EXIT
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
runs="$work/runs"
status=0
fail() { echo "FAIL: $*"; status=1; }

sft=0
case " $* " in *" trainer.mode=sft "*) sft=1;; esac
if [ "$sft" -eq 1 ]; then steps_key=sft.total_steps; else steps_key=trainer.total_training_steps; fi
# The first finished step: the RL trainer logs "step 1/1000 ep", the SFT trainer "sft step 1/1000".
if [ "$sft" -eq 1 ]; then step_re="sft step [0-9]+/1000"; else step_re="step [0-9]+/1000 ep"; fi

out1="$work/run1.log"
t0=$(date +%s.%N)
job="rlpt-preempt-$$"
launch() {  # launch NP args...: the launcher command line
  local n="$1"; shift
  if [ "$launcher" = srun ]; then echo srun -J "$job" -n "$n"; else echo mpirun -np "$n" "${flags[@]}"; fi
}
# The ranks of this test: every process whose command line names this test's run directory.
rank_pids() { pgrep -f -- "trainer.output_dir=$runs" | grep -vx "$$" | while read -r p; do
  [ "$(cat /proc/"$p"/comm 2>/dev/null)" = "$(basename "$bin" | cut -c1-15)" ] && echo "$p"; done; }
leftovers() {  # processes or a Slurm job still there after up to 10 s
  for _ in $(seq 1 20); do
    [ -z "$(rank_pids)" ] && { [ "$launcher" != srun ] || [ -z "$(squeue -h -n "$job" -o %i)" ]; } && return 1
    sleep 0.5
  done
  return 0
}
# shellcheck disable=SC2046
setsid $(launch "$np") "$bin" "$config" "$steps_key=1000" trainer.output_dir="$runs" "$@" >"$out1" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  grep -Eq "$step_re" "$out1" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
if ! grep -Eq "$step_re" "$out1"; then
  cat "$out1"; kill -KILL -- -"$pid" 2>/dev/null; wait "$pid"; echo "FAIL: the run never finished a step"; exit 1
fi
ranks=$(rank_pids | sort -n)
t_sig=$(date +%s.%N)
echo "preempt_resume: first step after $(echo "$t_sig - $t0" | bc) s; sending $send (rank pids: $(echo $ranks))"
case "$send" in
  launcher:USR1) kill -USR1 "$pid";;
  ranks:TERM) for p in $ranks; do kill -TERM "$p"; done;;
  rank2:TERM)
    r2=""
    # World rank 2: PMIx sets PMIX_RANK in each rank's environment (mpirun and srun alike).
    for p in $ranks; do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PMIX_RANK=2" && r2=$p
    done
    [ -n "$r2" ] || { fail "cannot find world rank 2"; kill -KILL -- -"$pid"; }
    kill -TERM "$r2";;
  scancel:*) scancel --signal="${send#scancel:}" -n "$job";;
  *) echo "preempt_resume: bad SEND '$send'"; kill -KILL -- -"$pid"; exit 2;;
esac
# Bounded wait: 60 s after the signal, then kill the session.
for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then fail "still running 60 s after the signal"; kill -KILL -- -"$pid"; fi
wait "$pid"
rc=$?
t_end=$(date +%s.%N)
cat "$out1"
echo "preempt_resume: run 1 exited with $rc, $(echo "$t_end - $t_sig" | bc) s after the signal"
[ "$rc" -eq 75 ] || fail "exit code $rc, expected 75"
case "$send" in
  launcher:USR1) who="SIGUSR1 on rank [0-9]+";;
  ranks:TERM) who="SIGTERM on rank [0-9]+";;
  rank2:TERM) who="SIGTERM on rank 2";;
  scancel:*) who="SIG${send#scancel:} on rank [0-9]+";;
esac
line=$(grep -Eo "stopping after step [0-9]+/1000 on $who: checkpoint written; exit code 75" "$out1" | head -1)
[ -n "$line" ] || fail "no 'stopping after step N/1000 on $who' line"
n=$(echo "$line" | sed -E 's/stopping after step ([0-9]+).*/\1/')
# <output_dir>/<experiment_name>/checkpoints/step_<N> (N possibly zero-padded).
ckpt="$runs/<none>/checkpoints/step_$n"
for d in "$runs"/*/checkpoints/step_*; do
  [ -n "$n" ] && [ -d "$d" ] && [ "$((10#${d##*step_}))" -eq "$n" ] && ckpt="$d"
done
if [ -n "$n" ]; then
  [ -f "$ckpt/COMPLETE" ] || fail "no complete checkpoint $ckpt"
  [ -f "$ckpt/controller.h5" ] || fail "no controller.h5 in $ckpt"
  ls "$ckpt"/actor_rank*.h5 >/dev/null 2>&1 || fail "no actor files in $ckpt"
  echo "preempt_resume: checkpoint $ckpt: $(ls "$ckpt" | tr '\n' ' ')"
fi
if leftovers; then
  fail "processes or a Slurm job left behind:"; rank_pids | xargs -r ps -o pid,args -p
  rank_pids | xargs -r kill -KILL; [ "$launcher" = srun ] && scancel -n "$job"
fi

if [ "$resume" -eq 1 ] && [ -n "$n" ] && [ "$status" -eq 0 ]; then
  total=$((n + 2))
  out2="$work/run2.log"
  t1=$(date +%s.%N)
  # shellcheck disable=SC2046
  setsid timeout -k 5 120 $(launch "$np") "$bin" "$config" "$steps_key=$total" \
    trainer.output_dir="$runs" trainer.resume=auto "$@" >"$out2" 2>&1 &
  pid2=$!
  wait "$pid2"
  rc2=$?
  cat "$out2"
  echo "preempt_resume: run 2 exited with $rc2 after $(echo "$(date +%s.%N) - $t1" | bc) s"
  [ "$rc2" -eq 0 ] || fail "the resumed run exited with $rc2"
  grep -Eq "resumed from .*step_0*$n \(step $n[,)]" "$out2" || fail "the second run did not resume from step $n"
  if [ "$sft" -eq 1 ]; then
    grep -Eq "sft step $total/$total " "$out2" || fail "the resumed run did not reach step $total"
    grep -Eq "sft step $n/$total " "$out2" && fail "the resumed run repeated step $n"
  else
    grep -Eq "done: $total steps" "$out2" || fail "the resumed run did not finish $total steps"
    grep -Eq "step $n/$total ep" "$out2" && fail "the resumed run repeated step $n"
  fi
  if leftovers; then fail "processes left behind by run 2"; rank_pids | xargs -r kill -KILL; fi
fi
echo "preempt_resume: $send: $([ $status -eq 0 ] && echo ok || echo FAILED) after $(echo "$(date +%s.%N) - $t0" | bc) s"
exit $status
