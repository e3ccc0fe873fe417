#!/usr/bin/env bash
# Training-engine benchmark table: tokens/s (forward + backward + step), MFU-like fraction of the
# machine's measured fp32 matmul rate, peak RSS per rank, optimizer state per rank with ZeRO-1.
# Usage: scripts/bench_train.sh [path/to/rlpt_bench_train]   (ITERS=3 by default)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$here/build/tests/bench/rlpt_bench_train}"
iters="${ITERS:-3}"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
run() {  # run <ranks> <args...>
  local np=$1; shift
  OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" --iters "$iters" "$@" | grep '^{' >>"$out"
}
for t in 1 2; do run 1 --model tiny --threads "$t"; done
for t in 1 2; do run 1 --model 100m --threads "$t"; done
run 1 --model 100m --threads 1 --zero 1
run 2 --model 100m --threads 1 --zero 0
run 2 --model 100m --threads 1 --zero 1
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
r0 = rows[0]
print(f"BLAS: {r0['blas']} (OPENBLAS_CORETYPE as set in the environment), git {r0['git_sha']}\n")
print("| model | params | ranks | threads/rank | ZeRO | tokens/step | step s | tokens/s | model GFLOP/s "
      "| matmul GFLOP/s | MFU-like | peak RSS/rank MiB | optimizer state/rank MiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    tokens = r["batch_per_rank"] * r["seq"] * r["ranks"]
    print(f"| {r['model']} | {r['params']/1e6:.1f}M | {r['ranks']} | {r['threads']} | {r['zero']} | {tokens} "
          f"| {r['step_s']:.3f} | {r['tokens_per_s']:.0f} | {r['model_gflops']:.1f} | {r['matmul_gflops']:.1f} "
          f"| {100*r['mfu']:.1f}% | {r['peak_rss_mib']:.0f} | {r['optimizer_state_mib_per_rank']:.1f} |")
PY
