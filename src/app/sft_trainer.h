#pragma once
// Supervised fine-tuning (trainer.mode: sft): the policy learns prompt -> response pairs
// (the built-in task's target answers, or data.response_key of JSONL records), with the same
// actor engine as RL. Greedy accuracy on the validation prompts (val-core/<data_source>/acc/
// mean@1, as RL logs it) is measured with the rollout role every sft.eval_every steps; the trained policy (+ tokenizer) is written as a Hugging
// Face folder to sft.output_model_dir. Private to src/app.
#include "modes.h"

namespace rlpt::app {

int run_sft(protocol::Controller& ctl, const RunContext& run);

}  // namespace rlpt::app
