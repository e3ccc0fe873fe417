#!/usr/bin/env bash
# Asynchronous RL benchmark (issue 14): steps/s of the synchronous loop (trainer.max_staleness=0)
# and of one-step-off async (max_staleness=1, token IS correction) on the same disaggregated
# layout, in the same run, alternating sync/async runs so machine load drifts hit both alike.
#
# Layout: RANKS (4) ranks, actor + reference on the first half (rank 0, the controller, hosts one
# of them), rollout on the rest. Each role gets hardware of its own, as on a cluster where each
# role has its own GPUs: with BIND=roles (default) an Open MPI rankfile binds the actor ranks to
# the first half of the cores and the rollout ranks to the other half (2 cores: core 0 and core
# 1), so in the synchronous loop one role's core sits idle while the other role works, as its
# GPUs would. The torch threads follow from the binding (rlpt derives them from the affinity
# mask; the cpus and threads of every rank, from the run's start-up table, are printed with the
# results).
# BIND=none: no binding, every rank may run anywhere (the old benchmark; on 2 cores both phases
# of the sync loop already keep both cores busy, so overlap cannot gain there).
#
# The built-in task from scratch (GRPO, configs/grpo.yaml's sizes, untrained built-in model).
# Prints markdown on stdout: mean step time over steps 2..N, steps/s, the actor's and rollout's
# idle fractions (perf/actor_idle_ratio, perf/rollout_idle_ratio: 1 - time in the role's calls /
# step time), the async/sync speed-up (also over all N steps, the first included), the mean time
# per step of each stage (timing_s/*), and the run's own CPU time (all ranks; the same work in
# both modes).
#
# Usage: scripts/bench_async.sh [path/to/rlpt]   (default build/src/rlpt, built if missing)
# Environment: STEPS per run (8), REPEATS sync/async pairs (2), RANKS (4), RESPONSE_LENGTH (16);
#   BATCH prompts per step (32; x 8 samples) and DECODE_BATCH (rollout.max_num_seqs, 2: sequences
#   decoded together per rollout rank) set the balance of generation and training: the defaults
#   make generation about half of the synchronous step's role work (printed as "Sync balance"),
#   where one-step-off overlap gains most; memory-bound decoding on GPUs is slow per token in the
#   same way. BIND (roles|none), SESSIONS (rank|one, below), NICE (0, the runs' nice value),
#   QUIET (unset; N: wait before each pair until other processes keep <= N runnable),
#   EXTRA: more overrides for every run (space-separated key=value).
# On a shared machine other processes bias the comparison against async: the core the synchronous
# loop leaves idle runs them, while the async run needs both. The table therefore shows, per mode,
# how many cores' worth of CPU other processes used during the runs (/proc/stat's busy time minus
# the run's own), next to the load average.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$root/build/src/rlpt}"
if [ ! -x "$bin" ]; then
  cmake --build "$root/build" -j2 --target rlpt >/dev/null
fi
steps="${STEPS:-8}" repeats="${REPEATS:-2}" rlen="${RESPONSE_LENGTH:-16}" batch="${BATCH:-32}" np="${RANKS:-4}"
decode="${DECODE_BATCH:-2}" bind="${BIND:-roles}" nice="${NICE:-0}"
read -r -a extra_all <<<"${EXTRA:-}"
half=$((np / 2))
cores=$(nproc)
work=$(mktemp -d /tmp/rlpt-bench-async-XXXXXX)
trap 'rm -rf "$work"' EXIT
flags=(--oversubscribe --mca mpi_yield_when_idle 1)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
case "$bind" in
  roles)
    [ "$cores" -ge 2 ] || { echo "bench_async.sh: BIND=roles needs 2 cores or more" >&2; exit 2; }
    # Actor ranks 0..half-1 on cores [0, cores/2), rollout ranks on [cores/2, cores).
    ca=$((cores / 2))
    for ((r = 0; r < np; r++)); do
      if ((r < half)); then echo "rank $r=localhost slot=0-$((ca - 1))"; else echo "rank $r=localhost slot=$ca-$((cores - 1))"; fi
    done >"$work/rankfile"
    flags+=(--rankfile "$work/rankfile")
    ;;
  none) flags+=(--bind-to none) ;;
  *) echo "bench_async.sh: BIND must be roles or none" >&2; exit 2 ;;
esac
common=(trainer.output_dir="$work" trainer.total_training_steps="$steps" trainer.test_freq=-1 trainer.save_freq=-1
        trainer.val_before_train=false trainer.export_hf=false trainer.logger=[jsonl]
        model.path= data.max_response_length="$rlen" data.train_batch_size="$batch" actor.ppo_mini_batch_size="$batch"
        rollout.max_num_seqs="$decode"
        "placement.groups=[{roles: [actor, reference], ranks: $half}, {roles: [rollout], ranks: $((np - half))}]")
[ "$bind" = none ] && common+=(trainer.threads_per_rank=1)
# SESSIONS=rank (default): every rank in a session of its own (setsid), so Linux's autogroup
# scheduling (kernel.sched_autogroup_enabled, on here) treats each rank as a separate process
# group, as ranks on separate nodes would be. In one session (SESSIONS=one, how mpirun leaves
# them) all ranks share one group's CPU share on a loaded machine: the async run's busy rollout
# ranks then take their CPU from the actor's instead of from hardware the sync loop leaves idle.
launch=()
case "${SESSIONS:-rank}" in
  rank) launch=(bash -c 'setsid "$@" & p=$!; trap "kill -TERM $p 2>/dev/null" TERM INT HUP; wait $p; s=$?
                         kill -0 $p 2>/dev/null && { wait $p; s=$?; }; exit $s' rank) ;;
  one) ;;
  *) echo "bench_async.sh: SESSIONS must be rank or one" >&2; exit 2 ;;
esac
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
# QUIET=N: before each sync/async pair, wait (at most QUIET_WAIT s, 900) until other processes
# keep N or fewer runnable on average over 2 s (/proc/stat procs_running, without this shell).
runnable() {
  local sum=0
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    sum=$((sum + $(awk '/^procs_running/ {print $2}' /proc/stat) - 1)); sleep 0.2
  done
  echo $((sum / 10))
}
quiet_wait() {
  [ -n "${QUIET:-}" ] || return 0
  local t=0 n
  while n=$(runnable); [ "$n" -gt "$QUIET" ]; do
    if [ "$t" -ge "${QUIET_WAIT:-900}" ]; then echo "bench_async.sh: still $n runnable after ${t}s; running anyway" >&2; return 0; fi
    sleep 8; t=$((t + 10))
  done
  [ "$t" -eq 0 ] || echo "bench_async.sh: waited ${t}s for <= $QUIET runnable processes" >&2
}
for r in $(seq 1 "$repeats"); do
  quiet_wait
  for mode in sync async; do
    extra=(trainer.max_staleness=0)
    [ "$mode" = async ] && extra=(trainer.max_staleness=1 algorithm.rollout_correction.rollout_is=token)
    echo "bench_async.sh: $mode run $r/$repeats (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    head -1 /proc/stat >"$work/$mode-$r.stat"
    OMP_NUM_THREADS=1 /usr/bin/time -f "%e %U %S" -o "$work/$mode-$r.time" nice -n "$nice" \
      mpirun -np "$np" "${flags[@]}" "${launch[@]}" "$bin" "$root/configs/grpo.yaml" "${common[@]}" "${extra[@]}" \
      ${extra_all[@]+"${extra_all[@]}"} trainer.experiment_name="$mode-$r" >"$work/$mode-$r.log" 2>&1 \
      || { cat "$work/$mode-$r.log" >&2; exit 1; }
    head -1 /proc/stat >>"$work/$mode-$r.stat"
  done
done
elapsed=$(($(date +%s) - t0))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 - "$work" "$repeats" "$steps" "$rlen" "$batch" "$load_before" "$load_after" "$elapsed" "$np" "$cores" "$decode" "$bind" "$nice" "$(getconf CLK_TCK)" "${SESSIONS:-rank}" <<'PY'
import json, re, statistics, sys
work, repeats, steps, rlen, batch, lb, la, elapsed, np, cores, decode, bind, nice, tck, sessions = sys.argv[1:]

def others_cores(mode, r):
    """Cores' worth of CPU that other processes used during the run (the machine's busy time, from
    /proc/stat, minus this run's own user+system time), and the run's own CPU seconds."""
    a, b = [list(map(int, l.split()[1:])) for l in open(f"{work}/{mode}-{r}.stat")]
    d = [y - x for x, y in zip(a, b)]
    busy = (d[0] + d[1] + d[2] + d[5] + d[6]) / int(tck)  # user nice system irq softirq
    wall, user, system = map(float, open(f"{work}/{mode}-{r}.time").read().split()[-3:])
    return (busy - user - system) / wall, user + system
log = open(f"{work}/sync-1.log").read()
binding = [f"r{m[0]} {m[3]}: cpus {m[2]}, {m[1]} thread{'' if m[1] == '1' else 's'}"
           for m in re.findall(r"^\s+rank\s+(\d+)\s.*\sthreads (\d+)\s+cpus (\S+)\s.*\sroles (\S+)", log, re.M)]
rows, stages = {}, {}
keys = ["gen", "rollout_busy", "reward", "old_log_prob", "ref", "adv", "update", "update_weights"]
for mode in ("sync", "async"):
    st, ai, ri, stale, other, whole, cpu = [], [], [], [], [], [], []
    per = {k: [] for k in keys}
    for r in range(1, int(repeats) + 1):
        m = [json.loads(l) for l in open(f"{work}/{mode}-{r}/metrics.jsonl")]
        whole.append(sum(x["timing_s/step"] for x in m))
        m = [x for x in m if x["step"] >= 2]  # step 1: warm-up (and the async run's unoverlapped first batch)
        o, c = others_cores(mode, r)
        other.append(o)
        cpu.append(c)
        st += [x["timing_s/step"] for x in m]
        ai += [x["perf/actor_idle_ratio"] for x in m]
        ri += [x["perf/rollout_idle_ratio"] for x in m]
        stale += [x["async/staleness"] for x in m]
        for k in keys:
            per[k] += [x.get(f"timing_s/{k}", 0.0) for x in m]
    rows[mode] = (statistics.mean(st), statistics.mean(ai), statistics.mean(ri), max(stale),
                  statistics.stdev(st) if len(st) > 1 else 0.0, statistics.mean(other), statistics.mean(whole),
                  statistics.mean(cpu))
    stages[mode] = {k: statistics.mean(v) for k, v in per.items()}
lay = "roles bound to cores of their own (rankfile)" if bind == "roles" else "no binding"
print(f"Built-in task, GRPO {batch} prompts x 8 samples, responses up to {rlen} tokens, decode batch {decode}, "
      f"{steps} steps per run, {repeats} run(s) per mode alternating; {np} ranks (actor+reference {int(np) // 2}, "
      f"rollout {int(np) - int(np) // 2}), {lay}, "
      f"{'a session per rank' if sessions == 'rank' else 'one session'}{', nice ' + nice if nice != '0' else ''}, "
      f"{cores} cores; load average {lb} before, {la} after; {elapsed} s.\n")
if binding:
    print("Ranks (rlpt's start-up table): " + "; ".join(binding) + "\n")
print("| mode | s/step (steps 2..N) | sd | steps/s | actor idle | rollout idle | max staleness | other processes' CPU "
      "(cores) | the run's CPU (s, all ranks) |")
print("|---|---|---|---|---|---|---|---|---|")
for mode, (s, a, r, k, sd, o, w, c) in rows.items():
    name = "sync (max_staleness 0)" if mode == "sync" else "async (max_staleness 1, token IS)"
    print(f"| {name} | {s:.3f} | {sd:.3f} | {1 / s:.2f} | {a:.2f} | {r:.2f} | {k:.0f} | {o:.2f} | {c:.1f} |")
print(f"\nasync / sync steps/s: **{rows['sync'][0] / rows['async'][0]:.2f}x** (goal >= 1.4x); all {steps} steps of a "
      f"run, the first included: {rows['sync'][6]:.1f} s sync, {rows['async'][6]:.1f} s async "
      f"({rows['sync'][6] / rows['async'][6]:.2f}x)\n")
s = stages["sync"]
train = s["old_log_prob"] + s["ref"] + s["update"]
print(f"Sync balance: generation {s['rollout_busy']:.3f} s (rollout ranks' own time), actor work "
      f"(old log-probs + reference + update) {train:.3f} s: generation {s['rollout_busy'] / (s['rollout_busy'] + train):.0%} "
      f"of the two.\n")
print("| mean s per step | " + " | ".join(keys) + " |")
print("|---|" + "---|" * len(keys))
for mode in ("sync", "async"):
    print(f"| {mode} | " + " | ".join(f"{stages[mode][k]:.3f}" for k in keys) + " |")
PY
