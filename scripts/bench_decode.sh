#!/usr/bin/env bash
# Rollout decode benchmark table: tokens/s at batch 1/32/64 for the tiny demo model and a ~100M
# model, against this machine's memory-bandwidth and matmul ceilings measured in the same run.
# Usage: scripts/bench_decode.sh [path/to/rlpt_bench_decode] [--threads N] [--quick]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$here/build/tests/bench/rlpt_bench_decode"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then bin="$1"; shift; fi
[ -x "$bin" ] || { echo "bench_decode.sh: $bin not built (cmake --build build --target rlpt_bench_decode)" >&2; exit 2; }
threads=1
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do [ "${args[$i]}" = "--threads" ] && threads="${args[$((i + 1))]}"; done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
OMP_NUM_THREADS="$threads" "$bin" "$@" | tee /dev/stderr | grep '^{' >"$out"
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
c = next(r for r in rows if r["kind"] == "ceiling")
print(f"Threads: {c['threads']}; BLAS: {c['blas']}; git {c['git_sha']}")
print(f"Ceilings: tensor copy {c['copy_GBps']:.1f} GB/s (read+write bytes), torch::mm {c['mm_GFLOPs']:.1f} GFLOP/s (fp32)\n")
print("| model | batch | decode tok/s | step ms | bandwidth-bound ms | matmul-bound ms | binding | ceiling tok/s | achieved |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "decode":
        print(f"| {r['model']} | {r['batch']} | {r['tokens_per_s']:.0f} | {r['step_ms']:.2f} | {r['bw_bound_ms']:.3f} | "
              f"{r['flop_bound_ms']:.3f} | {r['binding']} | {r['ceiling_tokens_per_s']:.0f} | {100 * r['achieved']:.0f}% |")
print("\n| model | sampler ms/step at batch 64: greedy | plain | top-p 0.9 | top-p 0.9 + top-k 50 |")
print("|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "sampler":
        print(f"| {r['model']} | {r['greedy_ms']:.3f} | {r['plain_ms']:.3f} | {r['top_p_ms']:.3f} | {r['top_p_top_k_ms']:.3f} |")
PY
