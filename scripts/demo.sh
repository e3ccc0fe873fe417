#!/usr/bin/env bash
# The main job, end to end on a laptop-sized machine: installs what is missing, builds, then
#   1. SFT: a tiny transformer learns the built-in arithmetic task (configs/sft.yaml),
#   2. GRPO: RL on the same task starting from the SFT model (configs/grpo.yaml),
# both as 4-rank MPI jobs, and prints the held-out greedy accuracy before and after GRPO.
#   scripts/demo.sh [--seed N] [--name NAME] [--no-setup] [OVERRIDES...]
# --seed N (default 1) seeds everything: the model's initial weights, the generated data and
# the trainers' sampling and shuffling. Overrides starting with "sft." go to the SFT stage, all
# others to the GRPO stage (e.g. trainer.total_training_steps=10). Runs go to runs/NAME-sft and
# runs/NAME-grpo (NAME defaults to "demo"), replaced on each run. --no-setup skips
# scripts/setup.sh (for scripts/demo_robustness.sh, which runs several demos at once).
# RLPT_DEMO_RANKS changes the number of ranks (4); the figures in the README are for 4.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=1; name=demo; setup=1; sft_args=(); grpo_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2;;
    --name) name="$2"; shift 2;;
    --no-setup) setup=0; shift;;
    sft.*) sft_args+=("$1"); shift;;
    *) grpo_args+=("$1"); shift;;
  esac
done
[ "$setup" -eq 1 ] && scripts/setup.sh
np="${RLPT_DEMO_RANKS:-4}"
sft="runs/$name-sft" grpo="runs/$name-grpo"
rm -rf "$sft" "$grpo"
seeds=(trainer.seed="$seed" data.builtin.seed="$seed")
start=$(date +%s)
scripts/rlpt-mpirun "$np" configs/sft.yaml trainer.experiment_name="$name-sft" sft.output_model_dir="$sft/model" \
  "${seeds[@]}" model.builtin.init_seed="$seed" ${sft_args[@]+"${sft_args[@]}"}
mid=$(date +%s)
scripts/rlpt-mpirun "$np" configs/grpo.yaml trainer.experiment_name="$name-grpo" model.path="$sft/model" \
  "${seeds[@]}" ${grpo_args[@]+"${grpo_args[@]}"}
end=$(date +%s)
/usr/bin/python3 scripts/plot_metrics.py "$grpo/metrics.jsonl" "$grpo/curves.png" >/dev/null 2>&1 || true
/usr/bin/python3 - "$grpo/metrics.jsonl" "$((mid - start))" "$((end - mid))" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = [(r["step"], v) for r in rows for k, v in r.items() if k.startswith("val-core/") and "/acc/mean@" in k and v is not None]
if acc:
    print(f"held-out greedy accuracy: {acc[0][1]:.3f} after SFT (step {acc[0][0]}) -> {acc[-1][1]:.3f} after GRPO "
          f"(step {acc[-1][0]}), {100 * (acc[-1][1] - acc[0][1]):+.1f} points; SFT {sys.argv[2]} s, GRPO {sys.argv[3]} s")
PY
echo "demo took $((end - start)) s; metrics in $grpo/metrics.jsonl, curves in $grpo/curves.png"
