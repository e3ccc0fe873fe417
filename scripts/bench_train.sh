#!/usr/bin/env bash
# Training-throughput table (issue 3): tokens/s and MFU of forward + backward + AdamW steps for the
# built-in tiny policy and a ~100M Llama-style model at 1 and 2 DP ranks, against this machine's
# fp32 matmul ceiling measured in the same run (single-thread torch::mm, before and after the
# training rows). One torch thread per rank. Prints markdown on stdout, progress on stderr.
#
# Usage: scripts/bench_train.sh [path/to/rlpt_bench_train]
#   Without a path it configures build/ (or $BUILD_DIR) as Release with RLPT_BUILD_BENCHMARKS=ON
#   and builds only the rlpt_bench_train target.
# Every training row runs twice, back to back: attention materialised (fp32 scores and probabilities
# kept for the backward, the path before issue 32) and through at::scaled_dot_product_attention (the
# default); the table shows both and the ratio, with the peak host tensor bytes of a training step.
# Environment: ITERS timed 100m steps per row (2), CEILING_N matmul size (4096), ZERO1=1 adds a 100m
#   DP=2 ZeRO-1 row, LONG=0 drops the 100m 1 x 1024 rows (training-step memory at T = 1024).
#   ~5 min at load average 5 on 2 cores (ITERS=3 took 339 s there) before the attention pairs.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bench_binary bench_train.sh rlpt_bench_train "$@"
iters="${ITERS:-2}"
ceiling_n="${CEILING_N:-4096}"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {  # run <ranks> <args...>: one JSON line appended to $out
  local np=$1; shift
  echo "bench_train.sh: np=$np $*" >&2
  OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" --threads 1 "$@" | grep '^{' >>"$out"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s)
pair() {  # pair <ranks> <args...>: materialised, then SDPA
  run "$@" --attention materialised
  run "$@" --attention sdpa
}
run 1 --ceiling "$ceiling_n"
pair 1 --model tiny --iters 10
pair 2 --model tiny --iters 10
pair 1 --model 100m --iters "$iters"
pair 2 --model 100m --iters "$iters"
[ "${ZERO1:-0}" = 1 ] && pair 2 --model 100m --iters "$iters" --zero 1
[ "${LONG:-1}" = 1 ] && pair 1 --model 100m --batch 1 --seq 1024 --iters 1
run 1 --ceiling "$ceiling_n"
elapsed=$(($(date +%s) - t0))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
avx512=$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)

/usr/bin/python3 - "$out" "$cpu" "$(nproc)" "$avx512" "$load_before" "$load_after" "$elapsed" <<'PY'
import json, sys
path, cpu, ncpu, avx512, load_before, load_after, elapsed = sys.argv[1:]
rows = [json.loads(l) for l in open(path)]
ceil = [r for r in rows if r["bench"] == "matmul_ceiling"]
train = [r for r in rows if r["bench"] == "train"]
peak = max(c["gflops"] for c in ceil)
c0 = ceil[0]
print(f"Machine: {cpu}, {ncpu} cores (AVX-512: {avx512}); load average {load_before} before, {load_after} after; "
      f"bench wall time {elapsed} s; git {c0['git_sha']}.")
print(f"BLAS: OpenBLAS core {c0['blas']}, OPENBLAS_CORETYPE={c0['openblas_coretype']}; 1 torch thread per rank.")
print(f"Matmul ceiling: torch::mm fp32 {c0['n']}x{c0['n']}, 1 thread: "
      + ", ".join(f"{c['gflops']:.1f}" for c in ceil)
      + f" GFLOP/s (before, after the training rows); MFU uses the higher, {peak:.1f}.\n")
print("| model | params | DP ranks | batch x seqlen per rank | attention | tokens/s | achieved GFLOP/s | MFU "
      "| ms/step | fwd+bwd ms | all-reduce ms | optimizer ms | step peak tensor MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for i, r in enumerate(train):
    name = r["model"] + (" ZeRO-1" if r["zero"] == 1 else "")
    att = r.get("attention", "sdpa")
    if att == "sdpa" and i > 0 and train[i - 1].get("attention") == "materialised":
        prev = train[i - 1]
        att += f" ({prev['step_s'] / r['step_s']:.2f}x speed, {r['step_peak_tensor_bytes'] / max(1, prev['step_peak_tensor_bytes']):.2f}x memory)"
    p = r["params"]
    params = f"{p / 1e6:.1f}M" if p >= 1e6 else f"{p / 1e3:.0f}k"
    ar = f"{1e3 * r['allreduce_s']:.1f}"
    if r["zero"] == 1:
        ar += f" + {1e3 * r['allgather_s']:.1f} all-gather"
    mfu = r["gflops_6n"] / (peak * r["ranks"])
    print(f"| {name} | {params} | {r['ranks']} | {r['batch_per_rank']} x {r['seq']} | {att} | {r['tokens_per_s']:.0f} "
          f"| {r['gflops_6n']:.1f} | {100 * mfu:.1f}% | {1e3 * r['step_s']:.1f} | {1e3 * r['fwd_bwd_s']:.1f} "
          f"| {ar} | {1e3 * r['optimizer_s']:.1f} | {r.get('step_peak_tensor_bytes', 0) / 2**20:.1f} |")
print(f"""
- tokens/s = (batch x seqlen x DP ranks) / step time; a step is zero_grad + forward + backward (SFT token
  NLL) + TrainEngine::step(). Step and phase times are the maximum over ranks per step, then the median
  over {train[0]['iters']} (tiny) / {train[-1]['iters']} (100m) timed steps, each phase separately (so the
  phases need not add up exactly).
- achieved GFLOP/s = 6 x N x tokens/s, N = all trainable parameters (tied embeddings: the head matmul is
  the embedding's only FLOPs); attention-score FLOPs (12 x layers x hidden x seqlen per token, ~4% extra
  for 100m at seqlen 256) and the tiny model's elementwise work are not counted.
- MFU = achieved / (ceiling x DP ranks). all-reduce ms includes waiting for the slower rank;
  optimizer ms = gradient norm + clip + AdamW (fp32, LibTorch's fused multi-tensor kernel).
- attention: materialised = fp32 scores and probabilities [B, heads, T, T] kept for the backward (the
  path before); sdpa = at::scaled_dot_product_attention (the default), with the step-time ratio
  (materialised / sdpa: above 1 is faster) and the peak-memory ratio (sdpa / materialised) of the pair.
  step peak tensor MiB = the peak of the host tensors a timed step allocates (counting allocator).""")
print("\n<details><summary>raw JSON lines</summary>\n\n```")
for r in rows:
    print(json.dumps(r))
print("```\n</details>")
PY
