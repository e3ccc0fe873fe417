#!/usr/bin/env bash
# Rollout decode benchmark table: tokens/s at batch 1/16/64 with 1 and 2 threads for the tiny
# demo model and the ~125M Llama of issue #12 (fp32 and bf16), with rlpt's decode kernels and
# with the plain BLAS path (kernels off, as PyTorch eager runs it), against this machine's
# memory-bandwidth and matmul ceilings measured in the same run.
# Usage: scripts/bench_decode.sh [path/to/rlpt_bench_decode] [--threads "1 2"] [--quick] [--batches 1,16,64]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$here/build/tests/bench/rlpt_bench_decode"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then bin="$1"; shift; fi
[ -x "$bin" ] || { echo "bench_decode.sh: $bin not built (cmake --build build --target rlpt_bench_decode)" >&2; exit 2; }
thread_list="1 2"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) thread_list="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for t in $thread_list; do
  OMP_NUM_THREADS="$t" "$bin" --threads "$t" "${args[@]}" | tee -a /dev/stderr | grep '^{' >>"$out"
done
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for c in (r for r in rows if r["kind"] == "ceiling"):
    print(f"Threads {c['threads']}: tensor copy {c['copy_GBps']:.1f} GB/s (read+write bytes), torch::mm "
          f"{c['mm_GFLOPs']:.1f} GFLOP/s (fp32); kernels {c['kernel_isa']}; {c['blas']}; git {c['git_sha']}")
print()
print("| model | threads | batch | rlpt tok/s | BLAS path tok/s | rlpt / BLAS | ceiling tok/s | rlpt / ceiling "
      "| binding | head ms | sample ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in sorted((r for r in rows if r["kind"] == "decode"), key=lambda r: (r["model"], r["batch"], r["threads"])):
    print(f"| {r['model']} | {r['threads']} | {r['batch']} | {r['tokens_per_s']:.1f} | {r['blas_tokens_per_s']:.1f} | "
          f"{r['vs_blas']:.2f} | {r['ceiling_tokens_per_s']:.0f} | {100 * r['achieved']:.0f}% | {r['binding']} | "
          f"{r['head_ms']:.2f} | {r['sample_ms']:.2f} |")
print("\n| model | threads | sampler ms/step at batch 64: greedy | plain | top-p 0.9 | top-p 0.9 + top-k 50 |")
print("|---|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "sampler":
        print(f"| {r['model']} | {r.get('threads', '')} | {r['greedy_ms']:.3f} | {r['plain_ms']:.3f} | "
              f"{r['top_p_ms']:.3f} | {r['top_p_top_k_ms']:.3f} |")
PY
