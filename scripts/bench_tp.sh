#!/usr/bin/env bash
# Tensor-parallel table (issue 10): the ~100M Llama-style model on 2 ranks as one tp = 2 block vs
# two tp = 1 data-parallel copies doing the same global work: parameter bytes per rank, training
# tokens/s, decode tokens/s, and the time per layer in the block's all-reduces. One torch thread
# per rank. Prints markdown on stdout, progress on stderr.
#
# Usage: scripts/bench_tp.sh [path/to/rlpt_bench_tp]
#   Without a path it configures build/ (or $BUILD_DIR) with RLPT_BUILD_BENCHMARKS=ON and builds
#   only the rlpt_bench_tp target.
# Environment: ITERS timed training steps (2), BATCH global rows (4), SEQ (128), PROMPTS (4),
#   NEW generated tokens per prompt (32).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bench_binary bench_tp.sh rlpt_bench_tp "$@"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
common=(--threads 1 --iters "${ITERS:-2}" --batch "${BATCH:-4}" --seq "${SEQ:-128}" --prompts "${PROMPTS:-4}"
        --new "${NEW:-32}")
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for tp in 1 2; do
  echo "bench_tp.sh: np=2 --tp $tp" >&2
  OMP_NUM_THREADS=1 mpirun -np 2 "${flags[@]}" "$bin" --tp "$tp" "${common[@]}" | grep '^{' >>"$out"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 - "$out" "$load_before" "$load_after" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
one, two = rows
print(f"~100M Llama-style model (hidden 768, 12 layers, vocab 32000, tied), 2 ranks, 1 thread each; "
      f"load average {sys.argv[2]} before, {sys.argv[3]} after; git {one['git_sha']}.\n")
print("| layout | param MB/rank | layer matrices MB/rank | train tokens/s | decode tokens/s "
      "| block all-reduce ms/layer/step (train) | ms/layer/token (decode) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| tp {r['tp']} x dp {r['dp']} | {r['param_bytes_per_rank']/1e6:.1f} | {r['layer_matrix_bytes_per_rank']/1e6:.1f} "
          f"| {r['train_tokens_per_s']:.0f} | {r['decode_tokens_per_s']:.1f} "
          f"| {r['train_allreduce_ms_per_layer_step']:.2f} | {r['decode_allreduce_ms_per_layer_token']:.3f} |")
print(f"\n- ratios tp 2 / tp 1: parameter bytes {two['param_bytes_per_rank']/one['param_bytes_per_rank']:.3f}, "
      f"layer matrices {two['layer_matrix_bytes_per_rank']/one['layer_matrix_bytes_per_rank']:.3f}, "
      f"training tokens/s {two['train_tokens_per_s']/one['train_tokens_per_s']:.2f}, "
      f"decode tokens/s {two['decode_tokens_per_s']/one['decode_tokens_per_s']:.2f}")
print(f"- same global work in both rows: {one['batch']} x {one['seq']} tokens per training step "
      f"(tp 1: {one['batch']//one['dp']} rows per rank), {one['decode_prompts']} prompts x {one['decode_new']} "
      f"greedy tokens; times are the max over ranks (median of {one['iters']} steps).")
print("\n```")
for r in rows: print(json.dumps(r))
print("```")
PY
