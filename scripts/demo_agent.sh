#!/usr/bin/env bash
# The agent demo (docs/agents.md): scripts/demo.sh with the agent configs. Installs what is
# missing, builds, then
#   1. SFT (configs/agent_sft.yaml): the tiny built-in transformer learns 2-digit products from
#      demonstrations of which only a share call the calculator tool (the rest answer directly),
#   2. GRPO (configs/agent_grpo.yaml) with rollout.generator tool_agent and the built-in calculator,
#      rewarded only by the correct final answer,
# both as 4-rank MPI jobs, and prints the held-out greedy accuracy and tool-call rate after SFT and
# after GRPO, the wall times, and one greedy trajectory of the final model (`rlpt generate --tool`).
#   scripts/demo_agent.sh [--seed N] [--name NAME] [--no-setup] [OVERRIDES...]
# Flags and overrides as scripts/demo.sh ("sft.*" to the SFT stage, the others to GRPO); runs go
# to runs/NAME-sft and runs/NAME-grpo (NAME defaults to "agent-demo").
set -euo pipefail
cd "$(dirname "$0")/.."
name=agent-demo prev=
for a in "$@"; do
  [ "$prev" = --name ] && name="$a"
  prev="$a"
done
scripts/demo.sh --name agent-demo --sft-config configs/agent_sft.yaml --grpo-config configs/agent_grpo.yaml \
  --plot-keys critic/score/mean,tool_call_counts/mean,val-core/rlpt/arithmetic_tools/acc/mean@1,val-aux/tool_call_rate "$@"
echo "a held-out problem (57*78 is in no training set), greedy, with the calculator (build/src/rlpt generate --tool calculator):"
build/src/rlpt generate --model "runs/$name-grpo/hf_model" --prompt "57*78=" --greedy --tool calculator \
  --max-new-tokens 24 | sed -n '/^--- sample/,/^ids:/p' | grep -v '^ids:'
