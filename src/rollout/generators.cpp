// The generator signature's shared pieces (include/rlpt/rollout/generators.h); the table of
// generators lives in the rollout role (roles/generator_table.cpp).
#include "rlpt/rollout/generators.h"

namespace rlpt::rollout {

BatchLimits batch_limits(int64_t max_num_seqs, const GeneratorContext& context) {
    BatchLimits limits(max_num_seqs);
    limits.max_num_batched_tokens = context.max_num_batched_tokens;
    return limits;
}

GenerationOutput sample_responses(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                  int64_t max_num_seqs, GeneratorContext& context) {
    return generate(model, prompts, seeds, params, batch_limits(max_num_seqs, context));
}

}  // namespace rlpt::rollout
