#!/usr/bin/env bash
# Mixture-of-experts benchmark (issue 34), side by side in one run:
#   1. one Qwen3-MoE sparse block, forward + backward over 2,048 float32 rows (hidden 512, 8 experts,
#      top 2, moe_intermediate_size 384): rlpt's grouped experts (tests/bench/bench_moe.cpp) against
#      transformers' Qwen3MoeSparseMoeBlock in PyTorch eager (scripts/bench_moe_torch.py), same
#      threads, alternating round by round so load hits both alike; the table takes each one's best
#      round and the ratio transformers ms / rlpt ms (> 1: rlpt faster; the goal is >= 1.5);
#   2. decode tokens/s of a small Qwen3-MoE model against a dense Qwen3 of the same active parameters
#      (intermediate = top_k x moe_intermediate_size), both rlpt, at batch 1 and 16.
# Usage: scripts/bench_moe.sh [path/to/rlpt_bench_moe] [--threads "1 2"] [--rounds 3] [--iters 5]
#        [--python PY]   (default: the repo's .venv/bin/python, which needs transformers: pip install transformers)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bin_arg=()
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then bin_arg=("$1"); shift; fi
threads_list="1 2"
rounds=3
iters=5
py="$here/.venv/bin/python"
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads_list="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --iters) iters="$2"; shift 2 ;;
    --python) py="$2"; shift 2 ;;
    *) echo "bench_moe.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bench_binary bench_moe.sh rlpt_bench_moe "${bin_arg[@]}"
peer_reason=""
"$py" -c "import transformers" 2>/dev/null || peer_reason="transformers is not installed in $py (pip install transformers)"

echo "bench_moe: $(date -u +%FT%TZ), $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "block: forward + backward, 2048 tokens, hidden 512, 8 experts, top-2, moe_intermediate_size 384, float32"
printf "%-8s %14s %22s %8s\n" threads "rlpt ms" "transformers eager ms" ratio
for t in $threads_list; do
  best_r=""; best_p=""
  for ((r = 0; r < rounds; r++)); do
    ms=$(OMP_NUM_THREADS=$t "$bin" --iters "$iters" --no-decode | sed -n 's/.*"case":"block_fwd_bwd".*"ms":\([0-9.]*\).*/\1/p')
    [ -z "$best_r" ] || [ "$(echo "$ms < $best_r" | bc -l)" = 1 ] && best_r=$ms
    if [ -z "$peer_reason" ]; then
      pm=$(OMP_NUM_THREADS=$t "$py" "$here/scripts/bench_moe_torch.py" --threads "$t" --iters "$iters" \
             | sed -n 's/.*"ms": \([0-9.]*\).*/\1/p')
      [ -z "$best_p" ] || [ "$(echo "$pm < $best_p" | bc -l)" = 1 ] && best_p=$pm
    fi
  done
  if [ -n "$peer_reason" ]; then
    printf "%-8s %14.1f %22s %8s\n" "$t" "$best_r" "not available ($peer_reason)" "-"
  else
    printf "%-8s %14.1f %22.1f %7.2fx\n" "$t" "$best_r" "$best_p" "$(echo "$best_p / $best_r" | bc -l)"
  fi
done
echo
# Decode streams every expert some row of the batch uses: at batch 1 a token reads its k experts
# (the dense model's bytes), at batch 16 nearly all of them (num_experts / k times more).
echo "decode (rlpt, 32 steps): MoE against a dense model of the same active parameters"
for t in $threads_list; do
  for b in 1 16; do
    echo "threads $t, batch $b:"
    OMP_NUM_THREADS=$t "$bin" --iters "$iters" --tokens 256 --decode-batch "$b" | grep '^decode' | sed 's/^/  /'
  done
done
