#!/usr/bin/env bash
# The demo (scripts/demo.sh: SFT, then GRPO on the built-in arithmetic task, 4 ranks) on a small
# Qwen3-MoE made from scratch by `rlpt init-model --arch qwen3_moe`: 2 layers of 8 experts, top 2
# (configs/moe_sft.yaml, configs/moe_grpo.yaml, router replay R3). Prints the held-out greedy
# accuracy after SFT and after GRPO.
#   scripts/demo_moe.sh [--seed N] [--no-setup] [OVERRIDES...]   (overrides as scripts/demo.sh takes them)
set -euo pipefail
cd "$(dirname "$0")/.."
seed=1; setup=1; args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="$2"; shift 2;;
    --no-setup) setup=0; shift;;
    *) args+=("$1"); shift;;
  esac
done
[ "$setup" -eq 1 ] && scripts/setup.sh
mkdir -p runs
# The task's characters (data/arithmetic.h kArithmeticCharset): a character vocabulary for init-model.
printf '%s' '0123456789+-*=' >runs/moe-chars.txt
build/src/rlpt init-model --arch qwen3_moe --out runs/moe-init --chars-from runs/moe-chars.txt --hidden-size 128 \
  --layers 2 --heads 4 --kv-heads 2 --experts 8 --experts-per-tok 2 --moe-intermediate-size 96 --max-position 32 \
  --seed "$seed"
scripts/demo.sh --no-setup --seed "$seed" --name moe --sft-config configs/moe_sft.yaml \
  --grpo-config configs/moe_grpo.yaml ${args[@]+"${args[@]}"}
