#!/usr/bin/env bash
# Peak resident memory of the Hugging Face export of a ZeRO-3 actor (~100M model, fp32), the
# whole model gathered on every rank (rlpt before issue 11) vs streamed from the shards one
# tensor at a time (now), same machine, same run of this script; the two files must be equal
# byte for byte. Markdown on stdout.
# Usage: scripts/bench_export.sh [path/to/rlpt_bench_export]   Environment: NP (4).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bench_binary bench_export.sh rlpt_bench_export "$@"
np="${NP:-4}"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for mode in 0 1; do
  OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" --mode "$mode" --out "$work/m$mode" | grep '^{' >>"$work/out"
done
cmp "$work/m0/model.safetensors" "$work/m1/model.safetensors"
/usr/bin/python3 - "$work/out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| export | ranks | model MB | rank 0 before MB | rank 0 peak MB | max before MB (all ranks) | max peak MB | peak - before (max) | s |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r['mode']} | {r['ranks']} | {r['params_mb']:.0f} | {r['rank0_before_mb']:.0f} | {r['rank0_peak_mb']:.0f} | "
          f"{r['max_before_mb']:.0f} | {r['max_peak_mb']:.0f} | {r['max_peak_mb'] - r['max_before_mb']:.0f} | {r['seconds']:.2f} |")
print("\nfiles identical byte for byte")
PY
