#!/usr/bin/env bash
# fault_cases.sh CASE RLPT_BINARY SOURCE_DIR WORK_DIR
# Bounded failure on every path (issue 16), through the real binary with configs/tiny.yaml at
# 3 ranks, as an operator would break a run. Each case checks the exit code, one clear message,
# the time bound, that no process is left behind (tests/slurm/expect_output.sh) and that no
# complete checkpoint is lost. Layouts: "hosted" = the shipped one (rank 0 hosts roles),
# "alone" = placement.controller_hosts_roles=false (rank 0 is only the controller).
#
#   stop-<phase>-<layout>   SIGSTOP of world rank 2 (RLPT_FAULT=stop) when it starts the
#                           phase: gen (rollout.generate), logprob (compute_log_prob),
#                           update (actor.update: rank 2 never joins the gradient all-reduce),
#                           save (actor.save of step 2; step_1 must stay complete). Exit 4,
#                           naming rank 2 only, and the ranks waiting for it.
#   sigstop-external        the issue's reproduction: kill -STOP world rank 2 from outside
#                           during a long update (actor.ppo_epochs=20). Exit 4.
#   unwritable-<layout>     a directory where actor_rank1.h5.tmp of step 2 goes. Exit 3.
#   disk-full               the run directory on a small tmpfs that holds one checkpoint but
#                           not two (skipped, exit 77, when a tmpfs cannot be mounted). Exit 3.
#   damaged-setup           3 steps, a checkpoint each (fixture for the damaged-* cases)
#   damaged-<how>           step_3 truncated | malformed COMPLETE | a file missing | flipped
#                           bytes: moved aside, resumed from step_2, the run saves step 3-5.
#   all-damaged             every checkpoint damaged: exit 2 naming them and the flag; the old
#                           metrics.jsonl untouched; again exit 2 on the next start.
#   two-jobs                a second job on a live run directory: exit 2 naming the first; a
#                           stale lock (dead pid) is replaced; the lock is gone after exit.
set -u
case_="$1"; bin="$2"; src="$3"; work="$4"
expect="$src/tests/slurm/expect_output.sh"
tiny="$src/configs/tiny.yaml"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
status=0
fail() { echo "FAIL: $*"; status=1; }
# Short watchdog: a stopped rank ends the job in ~6 s (+ start-up and the steps before it).
timeouts=(trainer.call_timeout_s=6 trainer.stall_warn_s=2)
common=(trainer.export_hf=false trainer.val_before_train=false trainer.test_freq=-1)

rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
runs="$work/runs"
run_dir="$runs/tiny"
ckpts="$run_dir/checkpoints"
rlpt() { echo mpirun -np 3 "${flags[@]}" "$bin" "$tiny" trainer.output_dir="$runs" "${common[@]}"; }
layout_args() { [ "$1" = alone ] && echo placement.controller_hosts_roles=false; }
complete() { [ -f "$ckpts/step_$1/COMPLETE" ] || fail "step_$1 is not complete any more"; }
not_complete() { [ ! -f "$ckpts/step_$1/COMPLETE" ] || fail "step_$1 is complete although its save failed"; }
no_lock() { [ ! -e "$run_dir/rlpt.lock" ] || fail "the run lock was left behind: $(cat "$run_dir/rlpt.lock")"; }

case "$case_" in
  stop-*)
    phase=$(echo "$case_" | cut -d- -f2); layout=$(echo "$case_" | cut -d- -f3)
    steps=2; extra=()
    case "$phase" in
      gen) fault=stop:2:generate:1; what="rollout\\.generate \\(step 1\\)";;
      logprob) fault=stop:2:compute_log_prob:1; what="(actor|reference)\\.compute_log_prob \\(step 1\\)";;
      update) fault=stop:2:update:1; what="actor\\.update \\(step 1\\)"
              waiting="waiting for them: .*rank 1 in ";;
      save) fault=stop:2:save:2; what="actor\\.save \\(step 2\\)"; steps=3; extra=(trainer.save_freq=1)
            waiting="waiting for them: .*rank 1 in ";;
      *) echo "bad phase $phase"; exit 2;;
    esac
    regexes=(--regex "$what: rank\\(s\\) 2 did not answer within 6 s \\(trainer\\.call_timeout_s\\); they stopped answering"
             --regex "$what has waited [0-9]+ s for rank\\(s\\) 2 to answer")
    [ -n "${waiting:-}" ] && regexes+=(--regex "$what: rank\\(s\\) 2 did not answer.*$waiting")
    [ "$layout" = hosted ] && [ -n "${waiting:-}" ] && regexes+=(--regex "$what: rank\\(s\\) 2 .*rank 0 \\(this rank\\) in ")
    # shellcheck disable=SC2046
    "$expect" --rc 4 --max-seconds 45 "${regexes[@]}" --absent "rank\\(s\\) ([0-9]+, )*[01](, [0-9]+)* did not answer" \
      -- env RLPT_FAULT="$fault" $(rlpt) trainer.total_training_steps=$steps "${timeouts[@]}" \
      $(layout_args "$layout") "${extra[@]}" || status=1
    if [ "$phase" = save ]; then complete 1; not_complete 2; fi
    no_lock
    ;;

  sigstop-external)
    log="$work/run.log"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2046
    setsid $(rlpt) trainer.total_training_steps=100000 trainer.call_timeout_s=8 trainer.stall_warn_s=3 \
      actor.ppo_epochs=20 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do grep -Eq "step 3/" "$log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    r2=""
    for p in $(pgrep -s "$pid"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PMIX_RANK=2" && r2=$p
    done
    if [ -z "$r2" ] || ! grep -Eq "step 3/" "$log"; then
      cat "$log"; kill -KILL -- -"$pid" 2>/dev/null; echo "FAIL: no step 3 or no rank 2"; exit 1
    fi
    t_stop=$(date +%s.%N)
    kill -STOP "$r2"
    for _ in $(seq 1 400); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then fail "still running 40 s after SIGSTOP of rank 2"; kill -KILL -- -"$pid"; fi
    wait "$pid"; rc=$?
    t_end=$(date +%s.%N)
    cat "$log"
    echo "sigstop-external: exit code $rc $(echo "$t_end - $t_stop" | bc) s after SIGSTOP of rank 2 (pid $r2); bound 8 s + 3 s"
    [ "$rc" -eq 4 ] || fail "exit code $rc, expected 4"
    [ "$(echo "$t_end - $t_stop > 8 + 3 + 5" | bc)" -eq 0 ] || fail "took longer than the bound"
    grep -Eq "rank\\(s\\) 2 did not answer within 8 s \\(trainer\\.call_timeout_s\\); they stopped answering" "$log" \
      || fail "no watchdog message naming rank 2"
    grep -Eq "rank\\(s\\) (1|0), " "$log" && fail "an innocent rank was named"
    for _ in $(seq 1 20); do pgrep -s "$pid" >/dev/null || break; sleep 0.5; done
    if pgrep -s "$pid" >/dev/null; then fail "processes left behind"; pkill -KILL -s "$pid"; fi
    no_lock
    ;;

  unwritable-*)
    layout="${case_#unwritable-}"
    mkdir -p "$ckpts/step_2/actor_rank1.h5.tmp"
    # shellcheck disable=SC2046
    "$expect" --rc 3 --max-seconds 45 \
      --regex "actor\\.save failed on rank [0-9] \\(role actor, step 2\\): .*a directory in the way while writing .*step_2/actor_rank1\\.h5\\.tmp \\(Is a directory\\)" \
      -- $(rlpt) trainer.total_training_steps=3 trainer.save_freq=1 "${timeouts[@]}" $(layout_args "$layout") \
      || status=1
    complete 1; not_complete 2; no_lock
    ;;

  disk-full)
    mkdir -p "$work/disk"
    if ! mount -t tmpfs -o size=64m rlpt-test-tmpfs "$work/disk" 2>"$work/mount.err"; then
      echo "SKIP: cannot mount a tmpfs here ($(cat "$work/mount.err")); run as root to test a full disk"; exit 77
    fi
    trap 'umount "$work/disk" 2>/dev/null' EXIT
    runs="$work/disk/runs"; run_dir="$runs/tiny"; ckpts="$run_dir/checkpoints"
    # shellcheck disable=SC2046
    $(rlpt) trainer.total_training_steps=1 trainer.save_freq=1 >"$work/run1.log" 2>&1 || { cat "$work/run1.log"; fail "first run failed"; }
    used=$(df -k --output=used "$work/disk" | tail -1)
    one=$(du -sk "$ckpts/step_1" | cut -f1)
    size=$((used + one / 2))
    mount -o remount,size=${size}k "$work/disk" || { fail "cannot shrink the tmpfs"; exit 1; }
    echo "disk-full: tmpfs of ${size} KiB: ${used} KiB used, a checkpoint takes ${one} KiB"
    # shellcheck disable=SC2046
    "$expect" --rc 3 --max-seconds 45 \
      --regex "failed on rank [0-9] \\(role actor, step 2\\): .*disk full while writing .*step_2/actor_rank[0-9]\\.h5\\.tmp \\(No space left on device\\)" \
      -- $(rlpt) trainer.total_training_steps=3 trainer.save_freq=1 "${timeouts[@]}" || status=1
    complete 1; not_complete 2; no_lock
    ;;

  damaged-setup)
    # shellcheck disable=SC2046
    $(rlpt) trainer.total_training_steps=3 trainer.save_freq=1 >"$work/setup.log" 2>&1 || { cat "$work/setup.log"; exit 1; }
    for s in 1 2 3; do complete "$s"; done
    ;;

  damaged-*|all-damaged)
    how="${case_#damaged-}"
    setup="$work/../damaged-setup/runs"
    [ -d "$setup/tiny/checkpoints/step_3" ] || { echo "FAIL: no setup run in $setup"; exit 1; }
    rm -rf "$runs"; cp -a "$setup" "$runs"
    damage() {  # damage <step> <how>
      local d="$ckpts/step_$1"
      case "$2" in
        truncated) truncate -s $(( $(stat -c %s "$d/actor_rank0.h5") / 2 )) "$d/actor_rank0.h5";;
        complete) echo '{"manifest_version": 1, "step": ' >"$d/COMPLETE";;
        missing) rm "$d/actor_rank2.h5";;
        flipped) printf '\xde\xad\xbe\xef' | dd of="$d/actor_rank1.h5" bs=1 seek=4096 conv=notrunc status=none;;
      esac
    }
    if [ "$case_" = all-damaged ]; then
      damage 1 truncated; damage 2 complete; damage 3 flipped
      before=$(md5sum <"$run_dir/metrics.jsonl")
      for attempt in 1 2; do
        # shellcheck disable=SC2046
        "$expect" --rc 2 --max-seconds 30 \
          --regex "trainer\\.resume=auto: no valid checkpoint is left in .*checkpoints \\(damaged, moved aside: step_1\\.damaged-[^,]+, step_2\\.damaged-[^,]+, step_3\\.damaged-[^)]+\\); refusing to train from scratch over this run's history.*trainer\\.resume=disable" \
          -- $(rlpt) trainer.total_training_steps=5 trainer.save_freq=1 || status=1
        [ "$(md5sum <"$run_dir/metrics.jsonl")" = "$before" ] || fail "metrics.jsonl changed (attempt $attempt)"
        ls -d "$ckpts"/step_* | grep -Eq "/step_[0-9]+$" && fail "a checkpoint directory appeared (attempt $attempt)"
      done
      no_lock
    else
      damage 3 "$how"
      # shellcheck disable=SC2046
      "$expect" --rc 0 --max-seconds 60 \
        --regex "checkpoint .*step_3 is damaged \\(.+\\); moved it aside to .*step_3\\.damaged-[0-9TZ]+ and falling back" \
        --regex "resumed from .*step_2 \\(step 2," --regex "done: 5 steps" \
        -- $(rlpt) trainer.total_training_steps=5 trainer.save_freq=1 || status=1
      for s in 3 4 5; do complete "$s"; done
      ls -d "$ckpts"/step_3.damaged-* >/dev/null 2>&1 || fail "the damaged step_3 was not kept aside"
      no_lock
    fi
    ;;

  two-jobs)
    log="$work/first.log"
    # shellcheck disable=SC2046
    setsid $(rlpt) trainer.total_training_steps=100000 >"$log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do grep -Eq "step 1/" "$log" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    grep -Eq "step 1/" "$log" || { cat "$log"; kill -KILL -- -"$pid"; echo "FAIL: the first job did not start"; exit 1; }
    # shellcheck disable=SC2046
    "$expect" --rc 2 --max-seconds 30 \
      --regex "run directory .*runs/tiny is in use by another rlpt job \\(host [^,]+, pid [0-9]+, started [0-9T:-]+Z; lock file .*rlpt\\.lock\\)" \
      -- $(rlpt) trainer.total_training_steps=2 || status=1
    kill -0 "$pid" 2>/dev/null || fail "the first job died"
    kill -USR1 "$pid"  # stop it with a checkpoint (exit 75): its lock goes with it
    for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    wait "$pid"; rc=$?
    [ "$rc" -eq 75 ] || { tail -5 "$log"; fail "the first job exited $rc, expected 75"; }
    no_lock
    # A lock left by a job that died on this host (no such process) is replaced.
    printf 'host: %s\npid: 999999\nstarted: 2026-01-01T00:00:00Z\nslurm_job: \nslurm_restart: 0\n' "$(hostname)" \
      >"$run_dir/rlpt.lock"
    # shellcheck disable=SC2046
    "$expect" --rc 0 --max-seconds 60 --regex "replacing the stale run lock .*rlpt\\.lock \\(its process is gone\\)" \
      -- $(rlpt) trainer.total_training_steps=2 trainer.resume=disable || status=1
    no_lock
    ;;
  *) echo "fault_cases.sh: unknown case $case_"; exit 2;;
esac
echo "fault_cases: $case_ $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
