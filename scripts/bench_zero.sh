#!/usr/bin/env bash
# Sharded training state (issue 11): bytes of parameters + gradients + optimizer state each rank
# holds between steps, measured by TrainEngine::memory_bytes() (allocated tensor storage,
# padding included, maximum over ranks) after real training steps, for ZeRO-0/1/2/3 at DP 2 and
# 4, against the ideal 16·N/dp bytes (fp32: 4 param + 4 grad + 8 AdamW moments per parameter,
# all sharded). Plus the ZeRO-3 step time with and without the next layer's all-gather
# prefetched, measured in the same run. One torch thread per rank. Markdown on stdout.
#
# Usage: scripts/bench_zero.sh [path/to/rlpt_bench_train]   (builds it like bench_train.sh)
# Environment: MODEL (tiny; 100m needs ~2 GB per rank at ZeRO-0), ITERS timed steps (3),
#   SEQ (64), BATCH (2).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bench_binary bench_zero.sh rlpt_bench_train "$@"
model="${MODEL:-tiny}"
common=(--model "$model" --iters "${ITERS:-3}" --seq "${SEQ:-64}" --batch "${BATCH:-2}" --threads 1)
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() {
  local np="$1"; shift
  echo "bench_zero.sh: np=$np $*" >&2
  OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" "${common[@]}" "$@" | grep '^{' >>"$out"
}
for np in 2 4; do
  for z in 0 1 2 3; do run "$np" --zero "$z"; done
  run "$np" --zero 3 --prefetch 0
done

/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n = rows[0]["params"]
print(f"Model {rows[0]['model']}: N = {n:,.0f} fp32 parameters; git {rows[0]['git_sha']}.\n")
print("| DP | ZeRO | params B/rank | grads B/rank | optimizer B/rank | total B/rank | ideal 16N/dp | total / ideal | ms/step |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["zero"] == 3 and r["prefetch"] == 0:
        continue
    total = r["state_bytes_params"] + r["state_bytes_grads"] + r["state_bytes_optimizer"]
    ideal = 16 * n / r["ranks"]
    print(f"| {r['ranks']} | {r['zero']} | {r['state_bytes_params']:,.0f} | {r['state_bytes_grads']:,.0f} "
          f"| {r['state_bytes_optimizer']:,.0f} | {total:,.0f} | {ideal:,.0f} | {total / ideal:.3f} "
          f"| {1e3 * r['step_s']:.1f} |")
print("\nZeRO-3 layer all-gather prefetch (non-blocking, started one layer ahead), same run:\n")
print("| DP | ms/step prefetch | ms/step no prefetch | ratio |")
print("|---|---|---|---|")
for np in sorted({r["ranks"] for r in rows}):
    on = [r for r in rows if r["ranks"] == np and r["zero"] == 3 and r["prefetch"] == 1]
    off = [r for r in rows if r["ranks"] == np and r["zero"] == 3 and r["prefetch"] == 0]
    if on and off:
        a, b = on[0]["step_s"], off[0]["step_s"]
        print(f"| {np} | {1e3 * a:.1f} | {1e3 * b:.1f} | {a / b:.3f} |")
print("""
- Bytes are TrainEngine::memory_bytes() after the last timed step (between steps: ZeRO-2/3 hold no
  full gradient, ZeRO-3 no gathered layer), padding to 64·dp elements per unit included. During a
  ZeRO-3 forward/backward one gathered layer (+ its gradient) and the root unit come on top.
- ms/step: median over the timed steps of the slowest rank (forward + backward + step).""")
PY
