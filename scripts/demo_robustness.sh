#!/usr/bin/env bash
# How much of the demo's gain survives other BLAS kernels and seeds: runs scripts/demo.sh once per
# (OpenBLAS core type, seed) cell and prints a markdown table of held-out greedy accuracy after
# SFT and after GRPO, the gain in points and the wall time of each stage.
#   scripts/demo_robustness.sh [-j JOBS] [--cores "native Haswell SkylakeX"] [--seeds "1 2 3"] [--table-only] [OVERRIDES...]
# "native" leaves OPENBLAS_CORETYPE unset (OpenBLAS picks the kernels for this CPU); other names
# force that kernel family (it must run on this CPU: SkylakeX/Cooperlake need AVX-512). OVERRIDES
# are passed to every demo (sft.* to the SFT stage). Each cell is deterministic on one machine, so
# the figures do not depend on load or on JOBS (default 2 demos at a time; each is 4 ranks with one
# thread each); wall times do. --table-only prints the table from the logs of earlier runs. The core column is what OpenBLAS reported using. Runs go to runs/rb-CORE-SEED-{sft,grpo}, logs to runs/rb-CORE-SEED.log.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=2; cores="native Haswell SkylakeX"; seeds="1 2 3"; overrides=(); run=1
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs="$2"; shift 2;;
    --cores) cores="$2"; shift 2;;
    --seeds) seeds="$2"; shift 2;;
    --table-only) run=0; shift;;
    *) overrides+=("$1"); shift;;
  esac
done
cells=()
for c in $cores; do for s in $seeds; do cells+=("$c $s"); done; done
if [ "$run" -eq 1 ]; then
  scripts/setup.sh
  mkdir -p runs
  run_cell() {
    local core=$1 seed=$2
    local env=(OPENBLAS_VERBOSE=2)  # OpenBLAS names the kernels it uses ("Core: Haswell") in the log
    [ "$core" != native ] && env+=(OPENBLAS_CORETYPE="$core")
    env "${env[@]}" scripts/demo.sh --no-setup --seed "$seed" --name "rb-$core-$seed" \
      ${overrides[@]+"${overrides[@]}"} > "runs/rb-$core-$seed.log" 2>&1 || echo "FAILED: see runs/rb-$core-$seed.log"
  }
  running=0
  for cell in "${cells[@]}"; do
    run_cell $cell &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  done
  wait
fi
echo "| OPENBLAS_CORETYPE | seed | after SFT | after GRPO | gain (points) | SFT wall | GRPO wall |"
echo "|---|---|---|---|---|---|---|"
for cell in "${cells[@]}"; do
  set -- $cell
  line=$(grep -h "^held-out greedy accuracy" "runs/rb-$1-$2.log" || true)
  used=$(grep -ho 'Core: [A-Za-z0-9]*' "runs/rb-$1-$2.log" | sort -u | cut -d' ' -f2 | paste -sd/)
  core="$1"; [ "$1" = native ] && core="native: $used"; [ "$1" != native ] && [ "$used" != "$1" ] && core="$1 (used: $used)"
  /usr/bin/python3 - "$core" "$2" "$line" <<'PY'
import re, sys
core, seed, line = sys.argv[1:]
m = re.search(r"([0-9.]+) after SFT .* -> ([0-9.]+) after GRPO .*, ([-+0-9.]+) points; SFT (\d+) s, GRPO (\d+) s", line)
if m:
    print(f"| {core} | {seed} | {m[1]} | {m[2]} | {m[3]} | {m[4]} s | {m[5]} s |")
else:
    print(f"| {core} | {seed} | failed | | | | |")
PY
done
