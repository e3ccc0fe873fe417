#!/usr/bin/env bash
# Protocol benchmark table: dispatch round trip for 1, 3, 7 workers vs a raw MPI 64-byte
# send/reply round; scatter+gather of 64 and 256 MiB Batches vs raw MPI_Scatterv+Gatherv;
# CPU used by waiting ranks. Usage: scripts/bench_protocol.sh [path/to/bench_protocol]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="${1:-$here/build/tests/bench/bench_protocol}"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp)
for np in 2 4 8; do
  mode=""; [ "$np" -eq 4 ] && mode=transfer
  mpirun -np "$np" "${flags[@]}" "$bin" $mode | grep '^{' >>"$out"
done
/usr/bin/env python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("## Controller dispatch round trip (empty call to every worker)")
print("| workers | raw MPI 64 B round (µs) | rlpt call (µs) | ratio (goal <= 3) |")
print("|---|---|---|---|")
for r in rows:
    if r["kind"] == "dispatch":
        print(f"| {r['workers']} | {r['raw_round_us']:.1f} | {r['call_us']:.1f} | {r['ratio']:.2f} |")
print("\n## Batch scatter + gather (dp_split in, concat out)")
print("| workers | MiB | raw Scatterv+Gatherv GB/s | rlpt Batch GB/s | ratio (goal >= 0.8) |")
print("|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "transfer":
        print(f"| {r['workers']} | {r['mib']} | {r['raw_GBps']:.2f} | {r['batch_GBps']:.2f} | {r['ratio']:.2f} |")
print("\n## CPU used while waiting (2 s idle)")
print("| workers | idle worker CPU % | waiting controller CPU % |")
print("|---|---|---|")
for r in rows:
    if r["kind"] == "idle":
        print(f"| {r['workers']} | {r['worker_idle_cpu_pct']:.1f} | {r['controller_wait_cpu_pct']:.1f} |")
PY
rm -f "$out"
