#!/usr/bin/env bash
# Rollout decode benchmark table: tokens/s at batch 1/16/64 with 1 and 2 threads for the tiny
# demo model and the ~125M Llama of issue #12 (fp32 and bf16), with rlpt's decode kernels and
# with the plain BLAS path (kernels off), against plain PyTorch eager (scripts/bench_decode_torch.py,
# python3-torch, same threads, the same Hugging Face checkpoint: written once to a temporary
# directory and loaded by both) and against this machine's memory-bandwidth and matmul ceilings
# measured in the same run. The llama.cpp ratios use the figures of issue #12's table (measured
# on this machine class, not in this run).
# Usage: scripts/bench_decode.sh [path/to/rlpt_bench_decode] [--threads "1 2"] [--quick] [--batches 1,16,64]
#        [--no-torch]  (skip the PyTorch eager rows)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$here/build/tests/bench/rlpt_bench_decode"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then bin="$1"; shift; fi
[ -x "$bin" ] || { echo "bench_decode.sh: $bin not built (cmake --build build --target rlpt_bench_decode)" >&2; exit 2; }
thread_list="1 2"
batches="1,16,64"
new_tokens=32
torch_rows=1
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) thread_list="$2"; shift 2 ;;
    --batches) batches="$2"; args+=("$1" "$2"); shift 2 ;;
    --quick) new_tokens=16; args+=("$1"); shift ;;
    --no-torch) torch_rows=0; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
out=$(mktemp)
hf=$(mktemp -d)
trap 'rm -rf "$out" "$hf"' EXIT
for t in $thread_list; do
  OMP_NUM_THREADS="$t" "$bin" --threads "$t" --hf-dir "$hf/llama125m" "${args[@]}" | tee -a /dev/stderr | grep '^{' >>"$out"
  if [ "$torch_rows" = 1 ]; then
    OMP_NUM_THREADS="$t" /usr/bin/python3 "$here/scripts/bench_decode_torch.py" "$hf/llama125m" --threads "$t" \
      --batches "$batches" --new-tokens "$new_tokens" | tee -a /dev/stderr | grep '^{' >>"$out"
  fi
done
uptime | sed 's/^/load: /'
python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for c in (r for r in rows if r["kind"] == "ceiling"):
    print(f"Threads {c['threads']}: tensor copy {c['copy_GBps']:.1f} GB/s (read+write bytes), torch::mm "
          f"{c['mm_GFLOPs']:.1f} GFLOP/s (fp32); kernels {c['kernel_isa']} on {c.get('kernel_threads', '?')} "
          f"thread(s); {c['blas']}; git {c['git_sha']}")
print()
eager = {(r["threads"], r["batch"]): r["tokens_per_s"] for r in rows if r["kind"] == "torch_eager"}
# llama.cpp tok/s from issue #12's table (same machine class, NOT this run): (threads, batch) -> f32, f16.
LLAMA_CPP = {(2, 1): (45.4, 65.2), (2, 16): (356, 348), (2, 64): (479, 454), (1, 1): (23.5, None)}
print("125M Llama against its peers: PyTorch eager measured in this run on the same checkpoint; llama.cpp "
      "from the issue's table (f32 for the fp32 rows, f16 for the bf16 rows)")
print()
print("| model | threads | batch | rlpt tok/s | PyTorch eager tok/s | rlpt / eager | llama.cpp (issue) tok/s | rlpt / llama.cpp | rlpt / bandwidth-or-matmul ceiling |")
print("|---|---|---|---|---|---|---|---|---|")
for r in sorted((r for r in rows if r["kind"] == "decode" and r["model"].startswith("125M")),
                key=lambda r: (r["model"], r["threads"], r["batch"])):
    key = (r["threads"], r["batch"])
    e = eager.get(key) if "fp32" in r["model"] else None
    ref = LLAMA_CPP.get(key, (None, None))[0 if "fp32" in r["model"] else 1]
    fmt = lambda v, f: f.format(v) if v else "–"
    print(f"| {r['model']} | {r['threads']} | {r['batch']} | {r['tokens_per_s']:.1f} | {fmt(e, '{:.1f}')} | "
          f"{fmt(e and r['tokens_per_s'] / e, '{:.2f}')} | {fmt(ref, '{}')} | {fmt(ref and r['tokens_per_s'] / ref, '{:.2f}')} | "
          f"{100 * r['achieved']:.0f}% ({r['binding']}) |")
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
