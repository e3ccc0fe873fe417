#!/usr/bin/env bash
# Resharding table (issue 11): the ~100M model's weight sync from an actor block of tp F to
# rollout blocks of tp T on other ranks (shard to shard, rlpt/weights/weight_reshard.h), against raw p2p
# of the same bytes and against a full-model MPI_Bcast to every receiver, in the same run. The
# reshard runs three ways: with single copy between same-host ranks and the tensors in shared
# weight arenas (memcpy through a mapping, the default), with MPI messages only
# (WeightSyncOptions::single_copy off), and with single copy from ordinary memory
# (process_vm_readv/writev). One torch thread per rank.
# Prints markdown on stdout, progress on stderr.
#
# Usage: scripts/bench_reshard.sh [path/to/rlpt_bench_reshard]
#   Without a path it configures build/ (or $BUILD_DIR) with RLPT_BUILD_BENCHMARKS=ON and builds
#   only the rlpt_bench_reshard target.
# Environment: ITERS timed syncs per measurement (5; the median is reported), BUCKET_MB (64),
#   REPEAT processes per colocated row (3).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
source "$here/scripts/bench_common.sh"
bench_binary bench_reshard.sh rlpt_bench_reshard "$@"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
for c in "2 1 1" "1 2 1" "2 1 2" "2 4 1"; do
  set -- $c
  np=$(( $1 + $3 * $2 ))
  echo "bench_reshard.sh: np=$np tp $1 -> $3 x tp $2" >&2
  OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" --from "$1" --to "$2" --blocks "$3" \
    --iters "${ITERS:-5}" --bucket-mb "${BUCKET_MB:-64}" | grep '^{' >>"$out"
done
# The hybrid engine: actor (ZeRO-3, tp F) and rollout (tp T) on the same 2 ranks, in REPEAT
# processes each, rows taking turns: on a VM the speed of a buffer depends on the host memory
# behind it, which a process keeps for its whole run (docs/benchmarks/results/2026-11-28-reshard.md,
# "Where the 0.8 goal stands").
for rep in $(seq "${REPEAT:-3}"); do
  for c in "1 2" "2 1"; do
    set -- $c
    echo "bench_reshard.sh: np=2 colocated actor ZeRO-3 tp $1 -> rollout tp $2 (process $rep)" >&2
    OMP_NUM_THREADS=1 mpirun -np 2 "${flags[@]}" "$bin" --colocated 1 --from "$1" --to "$2" \
      --iters "${ITERS:-5}" | grep '^{' >>"$out"
  done
done
# A ZeRO-3 actor (tp F x dp 2) syncing to rollout ranks of their own: gathered (before) vs from the shards.
for c in "1 1" "1 2" "2 1"; do
  set -- $c
  np=$(( 2 * $1 + $2 ))
  echo "bench_reshard.sh: np=$np actor ZeRO-3 tp $1 x dp 2 -> rollout tp $2 on its own ranks" >&2
  OMP_NUM_THREADS=1 mpirun -np "$np" "${flags[@]}" "$bin" --zero3-dp 2 --from "$1" --to "$2" --blocks 1 \
    --iters "${ITERS:-5}" --bucket-mb "${BUCKET_MB:-64}" | grep '^{' >>"$out"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
/usr/bin/python3 - "$out" "$load_before" "$load_after" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
colocated = [r for r in rows if r.get("colocated")]
zero3 = [r for r in rows if r.get("zero3_dp")]
rows = [r for r in rows if not r.get("colocated") and not r.get("zero3_dp")]
print(f"~100M Llama-style model (hidden 768, 12 layers, vocab 32000, tied; {rows[0]['full_model_bytes']/1e6:.0f} MB fp32), "
      f"{rows[0]['bucket_mb']} MiB buckets, one torch thread per rank, shared memory; load average {sys.argv[2]} before, {sys.argv[3]} after; "
      f"git {rows[0]['git_sha']}. Times: median of the slowest rank"
      + ("; the measurements of a row take turns (one run of each per iteration).\n" if "reshard_mpi_s" in rows[0] else ".\n"))
def mpi_only(r, raw):  # binaries before single copy have no MPI-only measurement
    return (f"{r['reshard_mpi_s']:.3f} | {r[raw]/r['reshard_mpi_s']:.2f}x" if "reshard_mpi_s" in r else "- | -")
print("| actor tp -> rollout | ranks | MB moved (all ranks) | max MB received/rank | max MB sent/rank "
      "| reshard s | GB/s | raw p2p s | reshard / raw | MPI-only reshard s | MPI-only / raw | full bcast s "
      "| received vs full bcast | messages/rank (single copy) | MB copied/rank | plan (agree) / copy / wait s "
      "| CPU s all ranks: reshard / raw p2p (raw / reshard) | CPU s busiest rank: reshard / raw p2p (raw / reshard) "
      "| CMA-only reshard s | CMA-only / raw | CPU s all ranks: CMA-only (raw / CMA-only) | mapped messages (all ranks) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
def cma(r):  # binaries before shared weight arenas have no CMA-only measurement
    if "reshard_cma_s" not in r:
        return "- | - | - | -"
    return (f"{r['reshard_cma_s']:.3f} | {r['raw_p2p_s']/r['reshard_cma_s']:.2f}x "
            f"| {r['reshard_cma_cpu_s']:.3f} ({r['raw_p2p_cpu_s']/r['reshard_cma_cpu_s']:.2f}x) | {r['mapped_messages']}")
def cpu(r, key):  # binaries before the CPU accounting print none
    if f"reshard_{key}" not in r:
        return "-"
    a, b = r[f"reshard_{key}"], r[f"raw_p2p_{key}"]
    return f"{a:.3f} / {b:.3f} ({b/a:.2f}x)"
def plan(r):  # binaries before the one-collective agreement print no agreement time
    return f"{r.get('plan_s', 0):.3f}" + (f" ({r['agree_s']:.3f}{', cached' if r.get('reused') else ''})" if "agree_s" in r else "")
for r in rows:
    gbps = r["plan_bytes"] / r["reshard_s"] / 1e9
    print(f"| {r['from']} -> {r['blocks']} x tp {r['to']} | {r['ranks']} | {r['plan_bytes']/1e6:.0f} "
          f"| {r['max_bytes_received']/1e6:.0f} | {r['max_bytes_sent']/1e6:.0f} | {r['reshard_s']:.3f} | {gbps:.2f} "
          f"| {r['raw_p2p_s']:.3f} | **{r['raw_p2p_s']/r['reshard_s']:.2f}x** | {mpi_only(r, 'raw_p2p_s')} "
          f"| {r['full_bcast_s']:.3f} | {r['max_bytes_received']/r['full_model_bytes']:.2f} "
          f"| {r.get('max_messages', '-')} ({r.get('max_single_copy_messages', 0)}) "
          f"| {r.get('max_bytes_copied', 0)/1e6:.0f} "
          f"| {plan(r)} / {r.get('copy_s', 0):.3f} / {r.get('wait_s', 0):.3f} "
          f"| {cpu(r, 'cpu_s')} | {cpu(r, 'cpu_busiest_s')} | {cma(r)} |")
print("\n- reshard / raw: raw p2p time over reshard time (1.0 = as fast as unplanned, unpacked messages of "
      "the same bytes; the goal is >= 0.8). reshard: the default path (single copy between same-host ranks where "
      "the probe allows it; the tensors in shared weight arenas, so the copying end memcpys through its mapping of "
      "the peer's arena); MPI-only: WeightSyncOptions::single_copy off (MPI messages, strided ends staged); CMA-only: "
      "single copy with the same values in ordinary memory (process_vm_readv/writev, what rlpt did before arenas). "
      "mapped messages: single-copy messages that went through a mapping, summed over the ranks (each counted by its "
      "copying end).")
print("- received vs full bcast: the largest per-rank receive over the full model a broadcast sync delivers "
      "to every receiver.")
print("- messages/rank: the most messages one rank sent or received in a sync; MB copied/rank: bytes packed into or unpacked out of "
      "buckets on the busiest rank; plan / copy / wait s: one timed sync's phases, slowest rank each (agree: the "
      "agreement collective, part of plan; cached: every rank reused the previous sync's message list).")
print("- CPU s: CPU time of one sync (median; copying plus polling in waits), summed over the ranks (with more "
      "ranks than cores, what the cores have to fit) and on the busiest rank.")
print("\nColocated (the hybrid engine, weights::HeldReshard): actor trained at ZeRO-3 over the DP ranks, rollout "
      "copy in another tp on the same ranks; one window = fill the rollout copy from what the ranks hold of the actor "
      "(point to point, straight into the rollout's tensors) + free it, as the trainer runs it: the rollout tensors a "
      "rank holds whole are its own held memory (aliased: row slices inside its ZeRO-3 shard, nothing copied), the "
      "rest lands in the actor's gradient buffers (lent until its next zero_grad, which follows each window, timed "
      "on its own). Peers: raw MPI_Allgather of the actor bytes (over DP; plus over the tp block when actor tp > 1: "
      "what a gather-based fill moves) into preallocated warm buffers and raw p2p of exactly the bytes the window "
      "moved between each pair of ranks, taking turns with the window (nothing in that group maps or unmaps memory) "
      "and, in brackets, on their own before it. Then, taking turns with each other: the window into a fresh block "
      "instead of the lent buffers (what rlpt did before lending), the all-gather into output memory mapped per call "
      "(fresh) and a memcpy of the rollout bytes into such memory (fresh fill). window GB/s: rollout bytes per rank "
      "over the window's time. One line per process.\n")
print("| actor (ZeRO-3) -> rollout | ranks | actor slice MB | ZeRO-3 shard MB/rank | rollout MB/rank "
      "| aliased MB (min rank) | in lent gradient buffers MB (min rank) | fresh MB (max rank) | max MB received/rank "
      "| messages/rank (single copy) | window s | window GB/s | raw all-gather s (alone) | window / raw all-gather "
      "| raw p2p s (alone) | window / raw p2p | zero_grad s after it / after a fresh window | MPI-only window s "
      "| window into a fresh block s | raw all-gather into fresh memory s | fresh fill s | copy / wait s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
def fresh(r, key):  # binaries before a measurement print none of it
    return "-" if key not in r else f"{r[key]:.3f}"
def mb(r, key):
    return "-" if key not in r else f"{r[key]/1e6:.0f}"
def row_name(r):
    return f"tp {r['from']} x dp {r['dp']} -> tp {r['to']}"
for r in sorted(colocated, key=lambda r: (-r["dp"], r["from"])):
    print(f"| {row_name(r)} | {r['ranks']} | {r['actor_slice_bytes']/1e6:.0f} "
          f"| {r['zero3_shard_bytes']/1e6:.0f} | {r['rollout_bytes']/1e6:.0f} | {mb(r, 'min_aliased_bytes')} "
          f"| {mb(r, 'min_scratch_bytes')} | {mb(r, 'max_fresh_bytes')} "
          f"| {r['max_bytes_received']/1e6:.0f} | {r['max_messages']} ({r.get('max_single_copy_messages', 0)}) "
          f"| {r['reshard_s']:.3f} | {r['rollout_bytes']/r['reshard_s']/1e9:.2f} "
          f"| {r['raw_allgather_s']:.3f} ({fresh(r, 'raw_allgather_alone_s')}) "
          f"| **{r['raw_allgather_s']/r['reshard_s']:.2f}x** "
          f"| {r['raw_p2p_s']:.3f} ({fresh(r, 'raw_p2p_alone_s')}) | {r['raw_p2p_s']/r['reshard_s']:.2f}x "
          f"| {fresh(r, 'zero_grad_after_lent_s')} / {fresh(r, 'zero_grad_after_fresh_s')} "
          f"| {r['reshard_mpi_s']:.3f} | {fresh(r, 'reshard_fresh_s')} | {fresh(r, 'raw_allgather_fresh_s')} "
          f"| {fresh(r, 'fresh_fill_s')} | {r['copy_s']:.3f} / {r['wait_s']:.3f} |")
print("\nPer colocated row over its processes (window / peer; goal >= 0.8): min / median / max.\n")
print("| row | processes | / raw all-gather (in turns) | / raw all-gather (alone) | / raw p2p (in turns) "
      "| window s (min-max) | window into a fresh block s (min-max) |")
print("|---|---|---|---|---|---|---|")
for name in dict.fromkeys(row_name(r) for r in sorted(colocated, key=lambda r: (-r["dp"], r["from"]))):
    rs = [r for r in colocated if row_name(r) == name]
    def spread(key):
        v = sorted(r[key] / r["reshard_s"] for r in rs if key in r)
        return "-" if not v else f"{v[0]:.2f} / {v[len(v)//2]:.2f} / {v[-1]:.2f}"
    def span(key):
        w = [r[key] for r in rs if key in r]
        return "-" if not w else f"{min(w):.3f}-{max(w):.3f}"
    print(f"| {name} | {len(rs)} | {spread('raw_allgather_s')} | {spread('raw_allgather_alone_s')} "
          f"| {spread('raw_p2p_s')} | {span('reshard_s')} | {span('reshard_fresh_s')} |")
print("\nZeRO-3 actor -> rollout ranks of their own (send_weights): gathered = every actor rank holds the full "
      "parameters (hold_full_parameters) and the first block sends shard to shard, what rlpt did before; from shards = "
      "weights::HeldReshard, every actor rank sends what it holds. Peak: the actor ranks' engine memory during the sync "
      "(TrainEngine::peak_memory_bytes; from shards plus the exchange's staging), max over ranks. Peer: raw p2p of the "
      "from-shards bytes per pair.\n")
print("| actor (ZeRO-3) -> rollout | ranks | persistent MB/actor rank | peak gathered MB | peak from shards MB "
      "| MB sent/actor rank (min-max) | gathered s | from shards s | raw p2p s | from shards / raw p2p |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in zero3:
    print(f"| tp {r['from']} x dp {r['zero3_dp']} -> {r['blocks']} x tp {r['to']} | {r['ranks']} "
          f"| {r['actor_persistent_bytes']/1e6:.0f} | {r['gathered_peak_bytes']/1e6:.0f} | {r['shards_peak_bytes']/1e6:.0f} "
          f"| {r['min_actor_sent_bytes']/1e6:.0f}-{r['max_actor_sent_bytes']/1e6:.0f} | {r['gathered_s']:.3f} "
          f"| {r['shards_s']:.3f} | {r['raw_p2p_s']:.3f} | {r['raw_p2p_s']/r['shards_s']:.2f}x |")
PY
