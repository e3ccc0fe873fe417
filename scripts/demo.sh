#!/usr/bin/env bash
# The main job, end to end on a laptop-sized machine: installs what is missing, builds, then
#   1. SFT: a tiny transformer learns the built-in arithmetic task (configs/sft.yaml),
#   2. GRPO: RL on the same task starting from the SFT model (configs/grpo.yaml),
# both as 4-rank MPI jobs, and prints the held-out greedy accuracy before and after GRPO.
#   scripts/demo.sh [--seed N] [--name NAME] [--no-setup] [OVERRIDES...]
# --seed N (default 1) seeds everything: the model's initial weights, the generated data and
# the trainers' sampling and shuffling. Overrides starting with "sft." go to the SFT stage, all
# others to the GRPO stage (e.g. trainer.total_training_steps=10), but "all.KEY=VALUE" goes to both
# as KEY=VALUE (e.g. all.model.device=cuda). Runs go to runs/NAME-sft and
# runs/NAME-grpo (NAME defaults to "demo"), replaced on each run. --no-setup skips
# scripts/setup.sh (for scripts/demo_robustness.sh, which runs several demos at once).
# RLPT_DEMO_RANKS changes the number of ranks (4); the figures in docs/benchmarks/demo.md are for 4.
# --sft-config / --grpo-config replace the two stages' configs and --plot-keys the curves drawn
# (scripts/demo_agent.sh runs the agent demo this way); a run with a tool_agent rollout also prints
# the held-out tool-call rate.
set -euo pipefail
cd "$(dirname "$0")/.."
seed=1; name=demo; setup=1; sft_args=(); grpo_args=()
sft_config=configs/sft.yaml grpo_config=configs/grpo.yaml plot_keys=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2;;
    --name) name="$2"; shift 2;;
    --no-setup) setup=0; shift;;
    --sft-config) sft_config="$2"; shift 2;;
    --grpo-config) grpo_config="$2"; shift 2;;
    --plot-keys) plot_keys=(--keys "$2"); shift 2;;
    sft.*) sft_args+=("$1"); shift;;
    all.*) sft_args+=("${1#all.}"); grpo_args+=("${1#all.}"); shift;;
    *) grpo_args+=("$1"); shift;;
  esac
done
[ "$setup" -eq 1 ] && scripts/setup.sh
np="${RLPT_DEMO_RANKS:-4}"
sft="runs/$name-sft" grpo="runs/$name-grpo"
rm -rf "$sft" "$grpo"
seeds=(trainer.seed="$seed" data.builtin.seed="$seed")
start=$(date +%s)
scripts/rlpt-mpirun "$np" "$sft_config" trainer.experiment_name="$name-sft" sft.output_model_dir="$sft/model" \
  "${seeds[@]}" model.builtin.init_seed="$seed" ${sft_args[@]+"${sft_args[@]}"}
mid=$(date +%s)
scripts/rlpt-mpirun "$np" "$grpo_config" trainer.experiment_name="$name-grpo" model.path="$sft/model" \
  "${seeds[@]}" ${grpo_args[@]+"${grpo_args[@]}"}
end=$(date +%s)
/usr/bin/python3 scripts/plot_metrics.py "$grpo/metrics.jsonl" "$grpo/curves.png" ${plot_keys[@]+"${plot_keys[@]}"} \
  >/dev/null 2>&1 || true
/usr/bin/python3 - "$grpo/metrics.jsonl" "$((mid - start))" "$((end - mid))" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
acc = [(r["step"], v) for r in rows for k, v in r.items() if k.startswith("val-core/") and "/acc/mean@" in k and v is not None]
rate = {r["step"]: r["val-aux/tool_call_rate"] for r in rows if r.get("val-aux/tool_call_rate") is not None}
if acc:
    (s0, a0), (s1, a1) = acc[0], acc[-1]
    tools = (f", held-out tool-call rate {rate[s0]:.3f} -> {rate[s1]:.3f}" if s0 in rate and s1 in rate else "")
    print(f"held-out greedy accuracy: {a0:.3f} after SFT (step {s0}) -> {a1:.3f} after GRPO (step {s1}), "
          f"{100 * (a1 - a0):+.1f} points{tools}; SFT {sys.argv[2]} s, GRPO {sys.argv[3]} s")
PY
echo "demo took $((end - start)) s; metrics in $grpo/metrics.jsonl, curves in $grpo/curves.png"
