#!/usr/bin/env bash
# The main job, end to end on a laptop-sized machine: installs what is missing, builds, then
#   1. SFT: a tiny transformer learns the built-in arithmetic task (configs/sft.yaml),
#   2. GRPO: RL on the same task starting from the SFT model (configs/grpo.yaml),
# both as 4-rank MPI jobs, and prints the held-out greedy accuracy before and after GRPO.
# Idempotent: each run starts fresh in runs/demo-*. Extra arguments are config overrides for
# the GRPO stage (e.g. trainer.total_training_steps=10).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
np="${RLPT_DEMO_RANKS:-4}"
rm -rf runs/demo-sft runs/demo-grpo
start=$(date +%s)
scripts/rlpt-mpirun "$np" configs/sft.yaml trainer.experiment_name=demo-sft sft.output_model_dir=runs/demo-sft/model
scripts/rlpt-mpirun "$np" configs/grpo.yaml trainer.experiment_name=demo-grpo model.path=runs/demo-sft/model "$@"
end=$(date +%s)
/usr/bin/python3 scripts/plot_metrics.py runs/demo-grpo/metrics.jsonl runs/demo-grpo/curves.png >/dev/null 2>&1 || true
/usr/bin/python3 - <<'PY'
import json
rows = [json.loads(l) for l in open("runs/demo-grpo/metrics.jsonl")]
acc = [(r["step"], v) for r in rows for k, v in r.items() if k.startswith("val-core/") and "/acc/mean@" in k and v is not None]
if acc:
    print(f"held-out greedy accuracy: {acc[0][1]:.3f} after SFT (step {acc[0][0]}) -> {acc[-1][1]:.3f} after GRPO (step {acc[-1][0]})")
PY
echo "demo took $((end - start)) s; metrics in runs/demo-grpo/metrics.jsonl, curves in runs/demo-grpo/curves.png"
