#!/usr/bin/env bash
# RL rollout benchmark (issue #12): 64 prompts x n = 8 samples (GRPO-shaped), response lengths
# spread (geometric, most short, a tail truncated at max_new_tokens: forced by declaring some
# token ids stop tokens of a random-weight model, see tests/bench/bench_rollout.cpp), generated
# by static batching (rlpt's generation before continuous batching), continuous batching, and
# continuous batching with shared prompt prefills, in one run on the same slots. Prints markdown
# on stdout (wall time, tokens/s, ratio to static), progress on stderr.
#
# Usage: scripts/bench_rollout.sh [path/to/rlpt_bench_rollout] [options of the binary...]
#   Without a path it configures build/ (or $BUILD_DIR) with RLPT_BUILD_BENCHMARKS=ON and builds
#   only the rlpt_bench_rollout target. Options, e.g. --threads 2 --max-new 128 --prompts 16.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bench_json bench_rollout.sh rlpt_bench_rollout "$@"
python3 - "$out" "$load_before" "$load_after" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
s = next(r for r in rows if r["kind"] == "setup")
print(f"Random-weight Llama-style model: hidden {s['hidden']}, {s['layers']} layers, vocab {s['vocab']}, fp32, "
      f"{s['params']/1e6:.1f}M parameters; {s['threads']} thread(s); load average {sys.argv[2]} before, "
      f"{sys.argv[3]} after; git {s['git_sha']}.")
print(f"{s['prompts']} prompts ({s['prompt_len_min']}-{s['prompt_len_max']} tokens) x n = {s['n']}, "
      f"max_new_tokens {s['max_new']}, {s['max_num_seqs']} KV slots (rollout.max_num_seqs) for every engine; "
      f"temperature 1.")
print(f"Response lengths forced by stop tokens: {s['stop_ids']} of the {s['vocab']} token ids stop a sample "
      f"(near-uniform next-token distribution: geometric lengths); measured mean {s['len_mean']:.1f}, "
      f"p10 {s['len_p10']:.0f}, median {s['len_median']:.0f}, p90 {s['len_p90']:.0f}, "
      f"{100*s['at_max']:.1f}% at the max length. Same tokens from every engine: {s['identical']}.\n")
print("| engine | wall s | tokens/s (wall) | vs static (wall) | CPU s | tokens/CPU-s | vs static (CPU) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "engine":
        print(f"| {r['engine']} | {r['seconds']:.2f} | {r['tokens_per_s']:.1f} | {r['vs_static']:.2f}x "
              f"| {r['cpu_seconds']:.2f} | {r['tokens_per_cpu_s']:.1f} | {r['vs_static_cpu']:.2f}x |")
print(f"\n{rows[0]['tokens']} response tokens per engine. static = waves of max_num_seqs sequences decoded until "
      "their longest ends, every sample prefilling its prompt (rlpt before continuous batching); continuous = "
      "freed slots refilled at once; +shared = each prompt prefilled once for its n samples.")
PY
