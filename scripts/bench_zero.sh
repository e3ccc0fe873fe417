#!/usr/bin/env bash
# Sharded training state (issue 11): memory per rank of the ~100M model (the one bench_reshard and
# bench_tp use; MODEL=tiny for the 396k one) at DP 1, 2, 4 x ZeRO-0/1/2/3 (fp32 and bf16), measured after real
# training steps (rlpt_bench_train; maximum over ranks):
#   - tensor bytes held between steps: parameters + gradients + optimizer state
#     (TrainEngine::memory_bytes, allocated storage, padding included), against the ideal
#     16·P/dp (fp32: 4 param + 4 grad + 8 AdamW moments per parameter, all sharded);
#   - peak tensor bytes during a step (TrainEngine::peak_memory_bytes: ZeRO-3 adds one gathered
#     layer + its gradient and the root unit: embeddings/head, final norm);
#   - peak RSS (VmHWM) during the steps (reset after the set-up) and over the whole run;
#   - the model size whose training state fits 80 GB per GPU at that setting, from the measured
#     bytes per parameter, with 16 GB (20%) kept for activations, the gathered units and
#     workspace: P_max = 64e9 / (bytes between steps / P).
# Then the sharded reference policy (frozen, ZeRO-3-style) next to the full copy, hybrid shard
# (groups of 2 of the 4 DP ranks), and with PREFETCH=1 the ZeRO-3 step time with and without
# the next layer's all-gather prefetched. One torch thread per rank. Markdown on stdout.
#
# Usage: scripts/bench_zero.sh [path/to/rlpt_bench_train]   (builds it like bench_train.sh)
# Environment: MODEL (100m | tiny), ITERS timed steps (1; 100m also runs 2 checked steps first),
#   SEQ (128), BATCH (1) per rank, PREFETCH (0), DTYPES of the main table ("float32 bfloat16";
#   bfloat16: the model in bfloat16 with fp32 gradients, master weights and moments).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bench_binary bench_zero.sh rlpt_bench_train "$@"
model="${MODEL:-100m}"
common=(--model "$model" --iters "${ITERS:-1}" --seq "${SEQ:-128}" --batch "${BATCH:-1}" --threads 1)
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() {
  local np="$1"; shift
  echo "bench_zero.sh: np=$np $*" >&2
  OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" "${common[@]}" "$@" | grep '^{' >>"$out"
}
for dt in ${DTYPES:-float32 bfloat16}; do
  for np in 1 2 4; do
    for z in 0 1 2 3; do run "$np" --zero "$z" --dtype "$dt"; done
  done
done
run 2 --zero 0 --reference 1
for np in 2 4; do run "$np" --zero 3 --reference 1; done
for z in 1 2 3; do run 4 --zero "$z" --shard-group 2; done
if [ "${PREFETCH:-0}" = 1 ]; then
  for np in 2 4; do run "$np" --zero 3 --prefetch 0; done
fi

/usr/bin/python3 - "$out" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n = rows[0]["params"]
r0 = rows[0]
MB = 1e6
print(f"Model {r0['model']}: P = {n:,.0f} parameters; batch {r0['batch_per_rank']} x {r0['seq']} tokens per "
      f"rank; git {r0['git_sha']}; load average after the runs {sys.argv[2]}.\n")

def state(r):
    return r["state_bytes_params"] + r["state_bytes_grads"] + r["state_bytes_optimizer"]

def dtype(r):  # binaries before --dtype trained float32 only
    return r.get("dtype", "float32")

def main_row(r, dt=None):
    return (r["reference"] == 0 and r["shard_group"] == r["ranks"] and r["prefetch"] == 1
            and (dt is None or dtype(r) == dt))

# Training state per parameter, fully sharded over dp: fp32 4 param + 4 grad + 8 AdamW moments;
# bfloat16 2 param + 4 grad (fp32) + 4 master (fp32) + 8 moments.
IDEAL = {"float32": 16, "bfloat16": 18}

print("| dtype | DP | ZeRO | params / grads / optimizer MB/rank | between steps MB/rank | ideal B·P/dp MB (B) | "
      "/ ideal | peak during step MB/rank | peak RSS steps MiB | peak RSS run MiB | bytes/param | "
      "fits 80 GB/GPU (B params) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if not main_row(r):
        continue
    s, ideal = state(r), IDEAL[dtype(r)] * n / r["ranks"]
    bpp = s / n
    print(f"| {dtype(r)} | {r['ranks']} | {r['zero']} | {r['state_bytes_params'] / MB:.1f} / {r['state_bytes_grads'] / MB:.1f} / "
          f"{r['state_bytes_optimizer'] / MB:.1f} | {s / MB:.1f} | {ideal / MB:.1f} ({IDEAL[dtype(r)]}) | {s / ideal:.3f} | "
          f"{r['peak_bytes'] / MB:.1f} | {r['peak_rss_steps_mib']:.0f} | {max(r['peak_rss_setup_mib'], r['peak_rss_steps_mib']):.0f} | {bpp:.2f} | "
          f"{64e9 / bpp / 1e9:.1f} |")

ref = [r for r in rows if r["reference"] == 1]
if ref:
    print("\nReference policy (frozen copy, one no-grad forward per step): ZeRO-3-sharded with the actor at ZeRO-3, "
          "a full copy otherwise:\n")
    print("| DP | actor ZeRO | reference | reference MB/rank between forwards | ideal | peak during forward MB/rank | "
          "peak RSS steps MiB (actor + reference) |")
    print("|---|---|---|---|---|---|---|")
    for r in ref:
        sharded = r["zero"] == 3
        ideal = 4 * n / r["ranks"] if sharded else 4 * n
        print(f"| {r['ranks']} | {r['zero']} | {'sharded' if sharded else 'full copy'} | {r['ref_bytes'] / MB:.1f} | "
              f"{ideal / MB:.1f} ({'4·P/dp' if sharded else '4·P'}) | {r['ref_peak_bytes'] / MB:.1f} | "
              f"{r['peak_rss_steps_mib']:.0f} |")

hyb = [r for r in rows if r["shard_group"] < r["ranks"]]
if hyb:
    print("\nHybrid shard (groups of S DP ranks; state sharded inside a group, replicated across groups):\n")
    print("| DP | S | ZeRO | between steps MB/rank | ideal | peak during step MB/rank | same setting without "
          "groups MB/rank | ms/step | ms/step without groups |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in hyb:
        s, S, d = state(r), r["shard_group"], r["ranks"]
        ideal = {1: 8 * n + 8 * n / S, 2: 4 * n + 12 * n / S, 3: 16 * n / S}[r["zero"]]
        plain = [p for p in rows if main_row(p, "float32") and p["ranks"] == d and p["zero"] == r["zero"]]
        pm = f"{state(plain[0]) / MB:.1f}" if plain else "-"
        pt = f"{1e3 * plain[0]['step_s']:.0f}" if plain else "-"
        print(f"| {d} | {S} | {r['zero']} | {s / MB:.1f} | {ideal / MB:.1f} | {r['peak_bytes'] / MB:.1f} | {pm} | "
              f"{1e3 * r['step_s']:.0f} | {pt} |")

pf = [r for r in rows if r["prefetch"] == 0]
if pf:
    print("\nZeRO-3 layer all-gather prefetch (non-blocking, started one layer ahead), same run:\n")
    print("| DP | ms/step prefetch | ms/step no prefetch | ratio |")
    print("|---|---|---|---|")
    for off in pf:
        on = [r for r in rows if main_row(r, "float32") and r["ranks"] == off["ranks"] and r["zero"] == 3]
        if on:
            a, b = on[0]["step_s"], off["step_s"]
            print(f"| {off['ranks']} | {1e3 * a:.1f} | {1e3 * b:.1f} | {a / b:.3f} |")
print("""
- Tensor bytes: maximum over ranks, padding to 64·S elements per unit included (S: the shard
  group, the DP size without hybrid shard). "Between steps" is after the last timed step (ZeRO-2/3
  hold no full gradient then, ZeRO-3 no gathered unit); "peak during step" is the highest total
  of the engine's buffers at any allocation in the timed steps.
- Peak RSS: VmHWM, maximum over ranks; "steps" is reset after the set-up (model construction and
  the first, checked steps), "run" is the whole process (its set-up builds the full model on
  every rank before the engine shards it). RSS includes LibTorch and MPI (about 0.2 GB) and the
  activations and logits of the batch above.
- fits 80 GB/GPU: P_max = 64e9 / (between-steps bytes per parameter): the training state scales
  with P at the measured bytes per parameter, 16 GB is kept for activations (with activation
  checkpointing), the gathered layer + gradient and workspace; AdamW. bfloat16 rows: the model's
  parameters in bfloat16 (model.dtype: bfloat16), gradients, master weights and moments in fp32
  (B = 18 bytes per parameter fully sharded, against 16 for fp32).""")
PY
