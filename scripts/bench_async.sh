#!/usr/bin/env bash
# Asynchronous RL benchmark (issue 14): steps/s of the synchronous loop (trainer.max_staleness=0)
# and of one-step-off async (max_staleness=1, token IS correction) on the same disaggregated
# layout, in the same run, alternating sync/async runs so machine load drifts hit both alike.
# RANKS (4): actor + reference on half (rank 0, the controller, hosts one of them), rollout on the rest. The
# built-in task from scratch (GRPO, configs/grpo.yaml's sizes, untrained built-in model), one
# torch thread per rank. Prints markdown on stdout: mean step time over steps 2..N, steps/s,
# and the actor's and rollout's idle fractions (perf/actor_idle_ratio, perf/rollout_idle_ratio:
# 1 - time in the role's calls / step time), then the async/sync speed-up.
#
# Usage: scripts/bench_async.sh [path/to/rlpt]   (default build/src/rlpt, built if missing)
# Environment: STEPS per run (8), REPEATS sync/async pairs (2), RANKS (4), RESPONSE_LENGTH (16)
#   BATCH prompts per step (32; x 8 samples) and DECODE_BATCH (rollout.max_num_seqs, 4: sequences
#   decoded together per rollout rank; small values make generation dominate, as memory-bound
#   decoding does on GPUs) set the balance of generation and training.
# Overlap needs idle cores: with every rank CPU-bound (one thread each), the async run keeps
# twice as many ranks busy as the synchronous one, so it can only gain where the ranks of one
# phase leave cores idle (GPUs per role on a cluster; here RANKS <= cores / 2 on a quiet machine).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/build/src/rlpt}"
if [ ! -x "$bin" ]; then
  cmake --build "$root/build" -j2 --target rlpt >/dev/null
fi
steps="${STEPS:-8}" repeats="${REPEATS:-2}" rlen="${RESPONSE_LENGTH:-16}" batch="${BATCH:-32}" np="${RANKS:-4}" decode="${DECODE_BATCH:-4}"
half=$((np / 2))
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
work=$(mktemp -d /tmp/rlpt-bench-async-XXXXXX)
trap 'rm -rf "$work"' EXIT
common=(trainer.output_dir="$work" trainer.total_training_steps="$steps" trainer.test_freq=-1 trainer.save_freq=-1
        trainer.val_before_train=false trainer.export_hf=false trainer.threads_per_rank=1 trainer.logger=[jsonl]
        model.path= data.max_response_length="$rlen" data.train_batch_size="$batch" actor.ppo_mini_batch_size="$batch"
        rollout.max_num_seqs="$decode"
        "placement.groups=[{roles: [actor, reference], ranks: $half}, {roles: [rollout], ranks: $((np - half))}]")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
for r in $(seq 1 "$repeats"); do
  for mode in sync async; do
    extra=(trainer.max_staleness=0)
    [ "$mode" = async ] && extra=(trainer.max_staleness=1 algorithm.rollout_correction.rollout_is=token)
    echo "bench_async.sh: $mode run $r/$repeats" >&2
    OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" "$root/configs/grpo.yaml" "${common[@]}" "${extra[@]}" \
      trainer.experiment_name="$mode-$r" >"$work/$mode-$r.log" 2>&1 || { cat "$work/$mode-$r.log" >&2; exit 1; }
  done
done
elapsed=$(($(date +%s) - t0))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 - "$work" "$repeats" "$steps" "$rlen" "$batch" "$load_before" "$load_after" "$elapsed" "$np" "$(nproc)" "$decode" <<'PY'
import json, statistics, sys
work, repeats, steps, rlen, batch, lb, la, elapsed, np, cores, decode = sys.argv[1:]
rows = {}
for mode in ("sync", "async"):
    st, ai, ri, stale = [], [], [], []
    for r in range(1, int(repeats) + 1):
        m = [json.loads(l) for l in open(f"{work}/{mode}-{r}/metrics.jsonl")]
        m = [x for x in m if x["step"] >= 2]  # step 1: warm-up (and the async run's unoverlapped first batch)
        st += [x["timing_s/step"] for x in m]
        ai += [x["perf/actor_idle_ratio"] for x in m]
        ri += [x["perf/rollout_idle_ratio"] for x in m]
        stale += [x["async/staleness"] for x in m]
    rows[mode] = (statistics.mean(st), statistics.mean(ai), statistics.mean(ri), max(stale))
print(f"Built-in task, GRPO {batch} prompts x 8 samples, responses up to {rlen} tokens, decode batch {decode}, "
      f"{steps} steps per run, "
      f"{repeats} run(s) per mode alternating; {np} ranks (actor+reference {int(np) // 2}, rollout "
      f"{int(np) - int(np) // 2}), 1 torch thread per rank, {cores} cores; load average {lb} before, {la} after; "
      f"{elapsed} s.\n")
print("| mode | s/step (steps 2..N) | steps/s | actor idle | rollout idle | max staleness |")
print("|---|---|---|---|---|---|")
for mode, (s, a, r, k) in rows.items():
    name = "sync (max_staleness 0)" if mode == "sync" else "async (max_staleness 1, token IS)"
    print(f"| {name} | {s:.3f} | {1 / s:.2f} | {a:.2f} | {r:.2f} | {k:.0f} |")
print(f"\nasync / sync steps/s: **{rows['sync'][0] / rows['async'][0]:.2f}x** (goal >= 1.4x)")
PY
