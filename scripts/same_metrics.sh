#!/usr/bin/env bash
# Same results, bit for bit: the runs a refactor must not change, and their metrics kept in the
# repository (tests/golden/metrics/) so that a change is compared with the code before it.
#
#   scripts/same_metrics.sh run DIR      run the set below into DIR/<name>.jsonl
#   scripts/same_metrics.sh compare A B  compare two such folders (or two files) byte for byte
#   scripts/same_metrics.sh strip IN OUT  write metrics.jsonl IN without its timing fields to OUT
#   scripts/same_metrics.sh record       run the set into tests/golden/metrics/ (+ its machine.txt)
#   scripts/same_metrics.sh check        run the set and compare it with tests/golden/metrics/
#                                        (ctest same_metrics_golden)
#
# The set: configs/tiny.yaml at 1, 2, 3 and 4 ranks; the demo (configs/sft.yaml, then
# configs/grpo.yaml from its model, shortened), the async demo of docs/async-rl.md, PPO with a
# critic, and the agent demo (configs/agent_sft.yaml, configs/agent_grpo.yaml, shortened), each
# on 4 ranks. Each file is the run's metrics.jsonl without its timing fields (timing_s/*,
# timing_per_token_ms/*, perf/ fields that are times, rates, idle ratios or memory), re-written
# with sorted keys. The end-to-end tests keep the metrics of every run they make in
# $RLPT_METRICS_KEEP/<test>/ when that is set (tests/mpi/run_common.sh): run the suite with it on
# the commit before a change and after it, then `compare` the two folders.
#
# Floating-point results depend on the CPU's vector units (LibTorch dispatches AVX-512 or AVX2
# kernels, MKL likewise): every run here pins ATEN_CPU_CAPABILITY=avx2 and MKL_CBWR=AVX2 (and
# OMP_NUM_THREADS=1, as ctest does).
# `record` writes the machine it ran on to tests/golden/metrics/machine.txt (CPU name, vector
# units, a hash of all its CPU flags, LibTorch); `check` on a machine with another CPU or LibTorch
# still compares, but a difference there is a skip (exit 77,
# "not comparable bit for bit here") rather than a failure. Re-record on the commit before a
# refactor when the goldens were made elsewhere.
# Environment: RLPT_BIN (default build/src/rlpt).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
golden="$here/tests/golden/metrics"
py=/usr/bin/python3; [ -x "$py" ] || py=python3
export ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 OMP_NUM_THREADS=1

# Drops the timing fields of metrics.jsonl $1 and writes the rest to $2 (sorted keys, one step a line).
strip_timing() {
  "$py" - "$1" "$2" <<'PY'
import json, re, sys
timing = re.compile(r"^(timing_s/|timing_per_token_ms/|perf/(throughput|time_per_step|mfu|.*idle_ratio|.*memory)|.*latency)")
with open(sys.argv[1]) as f, open(sys.argv[2], "w") as out:
    for line in f:
        row = {k: v for k, v in json.loads(line).items() if not timing.match(k)}
        out.write(json.dumps(row, sort_keys=True) + "\n")
PY
}

machine() {
  local cpu flags
  cpu=$(grep -m1 "model name" /proc/cpuinfo | sed 's/.*: //')
  flags=$(grep -m1 "^flags" /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|fma|avx512f)$' | sort | tr '\n' ' ')
  echo "cpu: $cpu"
  echo "vector units: $flags"
  echo "cpu flags: $(grep -m1 "^flags" /proc/cpuinfo | sed 's/.*: //' | tr ' ' '\n' | sort | sha1sum | cut -c1-16)"
  echo "$("${RLPT_BIN:-$here/build/src/rlpt}" --version 2>/dev/null | grep '^LibTorch' || true)"
}

run_set() {  # run_set <out dir>
  local out bin flags
  out="$(mkdir -p "$1" && cd "$1" && pwd)"
  bin="${RLPT_BIN:-$here/build/src/rlpt}"
  [ -x "$bin" ] || { echo "same_metrics.sh: no rlpt binary at $bin (build first, or set RLPT_BIN)" >&2; exit 2; }
  grep -qw avx2 /proc/cpuinfo || { echo "same_metrics.sh: this CPU has no AVX2; the pinned kernels cannot run" >&2; exit 77; }
  work=$(mktemp -d /tmp/rlpt-same-metrics-XXXXXX)
  trap 'rm -rf "$work"' EXIT
  cd "$work"
  flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
  [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
  one() {  # one <name> <np> <config> <overrides...>
    local name="$1" np="$2" config="$3"; shift 3
    if ! mpirun -np "$np" "${flags[@]}" "$bin" "$here/$config" trainer.experiment_name="$name" "$@" \
        >"$name.log" 2>&1; then
      echo "same_metrics.sh: run $name failed; its log:" >&2; tail -30 "$name.log" >&2; exit 1
    fi
    strip_timing "runs/$name/metrics.jsonl" "$out/$name.jsonl"
    echo "  $name: $(wc -l <"$out/$name.jsonl") steps"
  }
  for n in 1 2 3 4; do one "tiny-np$n" "$n" configs/tiny.yaml; done
  one demo-sft 4 configs/sft.yaml sft.output_model_dir=runs/demo-sft/model
  one demo-grpo 4 configs/grpo.yaml model.path=runs/demo-sft/model trainer.total_training_steps=3 \
    trainer.test_freq=3
  one async 4 configs/grpo.yaml model.path=runs/demo-sft/model trainer.total_training_steps=3 \
    trainer.test_freq=3 'placement.groups=[{roles: [actor, reference], ranks: 2}, {roles: [rollout], ranks: 2}]' \
    trainer.max_staleness=1 algorithm.rollout_correction.rollout_is=token
  one ppo 4 configs/ppo.yaml model.path=runs/demo-sft/model trainer.total_training_steps=2 trainer.test_freq=2
  one agent-sft 4 configs/agent_sft.yaml sft.output_model_dir=runs/agent-sft/model
  one agent-grpo 4 configs/agent_grpo.yaml model.path=runs/agent-sft/model trainer.total_training_steps=3 \
    trainer.test_freq=3
}

compare() {  # compare <a> <b>: folders (every file of either) or two files
  "$py" - "$1" "$2" <<'PY'
import json, os, sys
a, b = sys.argv[1], sys.argv[2]
if os.path.isdir(a):
    names = sorted({os.path.relpath(os.path.join(d, f), a) for d, _, fs in os.walk(a) for f in fs if f.endswith(".jsonl")} |
                   {os.path.relpath(os.path.join(d, f), b) for d, _, fs in os.walk(b) for f in fs if f.endswith(".jsonl")})
    pairs = [(n, os.path.join(a, n), os.path.join(b, n)) for n in names]
else:
    pairs = [(os.path.basename(b), a, b)]
bad = 0
for name, x, y in pairs:
    if not (os.path.exists(x) and os.path.exists(y)):
        print(f"DIFF {name}: only in {x if os.path.exists(x) else y}"); bad += 1; continue
    if open(x, "rb").read() == open(y, "rb").read():
        continue
    bad += 1
    rx = [json.loads(l) for l in open(x)]; ry = [json.loads(l) for l in open(y)]
    if len(rx) != len(ry):
        print(f"DIFF {name}: {len(rx)} vs {len(ry)} steps"); continue
    for sx, sy in zip(rx, ry):
        keys = sorted(set(sx) | set(sy))
        diff = [k for k in keys if sx.get(k, "<absent>") != sy.get(k, "<absent>")]
        if diff:
            k = diff[0]
            print(f"DIFF {name}: step {sx.get('step')}: {len(diff)} keys differ, first {k}: {sx.get(k, '<absent>')!r} vs {sy.get(k, '<absent>')!r}")
            break
print(f"same_metrics: {len(pairs) - bad} of {len(pairs)} metrics files byte-identical")
sys.exit(1 if bad else 0)
PY
}

case "${1:-}" in
  run) [ $# -eq 2 ] || { echo "usage: $0 run DIR" >&2; exit 2; }; run_set "$2" ;;
  strip) [ $# -eq 3 ] || { echo "usage: $0 strip IN OUT" >&2; exit 2; }; strip_timing "$2" "$3" ;;
  compare) [ $# -eq 3 ] || { echo "usage: $0 compare A B" >&2; exit 2; }; compare "$2" "$3" ;;
  record)
    rm -rf "$golden"; mkdir -p "$golden"
    (run_set "$golden")
    machine >"$golden/machine.txt"
    echo "recorded $(ls "$golden"/*.jsonl | wc -l) metrics files in $golden" ;;
  check)
    [ -f "$golden/machine.txt" ] || { echo "same_metrics.sh: no goldens in $golden (run record)" >&2; exit 2; }
    out=$(mktemp -d /tmp/rlpt-same-metrics-out-XXXXXX)
    trap 'rm -rf "$out"' EXIT
    (run_set "$out") || exit $?
    if compare "$golden" "$out"; then exit 0; fi
    if [ "$(machine)" != "$(cat "$golden/machine.txt")" ]; then
      echo "same_metrics.sh: the goldens were recorded on another machine, so not comparable bit for bit here:" >&2
      sed 's/^/  recorded: /' "$golden/machine.txt" >&2; machine | sed 's/^/  here:     /' >&2
      exit 77
    fi
    exit 1 ;;
  *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
