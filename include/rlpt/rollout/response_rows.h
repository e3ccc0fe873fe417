#pragma once
// What a generator produced for one row, and how rows become a GenerationOutput. Shared by the
// generators whose responses are not a plain run of sampled tokens (beam search, multi-stage).
#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/rollout/generator.h"

namespace rlpt::rollout {

struct ResponseRow {
    std::vector<int64_t> tokens;
    std::vector<float> log_probs;  // one per token (0 for tokens the policy did not produce)
    // One per token: 1 = produced by the policy (trained on), 0 = appended text. Empty: all 1.
    std::vector<int64_t> trained;
    FinishReason finish = FinishReason::kLength;
    std::string text;  // used when assemble_rows is asked for texts
    // [prompt + response positions fed, num_moe_layers, top_k] int64: Turn::routes (undefined:
    // none recorded).
    torch::Tensor routes;
};

// Left-pads prompts to the longest, right-pads responses to the longest (pad_id), and builds:
// response_mask = trained (1 on policy tokens, 0 on appended ones and padding), attention_mask
// = 1 on every real prompt and response token (appended ones included: the policy sees them),
// position_ids = clamp(cumsum(attention_mask) - 1, 0), rollout_log_probs (0 on untrained and
// padding). texts: each row's `text` when with_texts, else left empty. routed_experts when any
// row has routes (-1 where a row has none).
GenerationOutput assemble_rows(const std::vector<std::vector<int64_t>>& prompts, const std::vector<ResponseRow>& rows,
                               int64_t pad_id, bool with_texts);

// Generation input checks shared by the generators (ValueError naming the prompt / token):
// non-empty prompts with ids in [0, vocab).
void check_prompts(const std::vector<std::vector<int64_t>>& prompts, int64_t vocab);

}  // namespace rlpt::rollout
