// The rollout generator table (include/rlpt/rollout/generators.h): one row per generator.
#include "rlpt/rollout/generators.h"

#include "rlpt/agent/tool_agent.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"

namespace rlpt::rollout {
namespace {

GenerationOutput search(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<uint64_t>&, const SamplingParams& params, int64_t max_num_seqs,
                        GeneratorContext& context) {
    const GeneratorArgs& args = context.args;
    return beam_search(model, prompts, params, args.beam_search, args.sample_rank, max_num_seqs);
}

GenerationOutput stages(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<uint64_t>& seeds, const SamplingParams& params, int64_t max_num_seqs,
                        GeneratorContext& context) {
    const GeneratorArgs& args = context.args;
    return run_stages(model, prompts, seeds, params,
                      MultiStageArgs{args.stages, args.beam_search, args.sample_rank, args.group_seeds},
                      batch_limits(max_num_seqs, context));
}

}  // namespace

BatchLimits batch_limits(int64_t max_num_seqs, const GeneratorContext& context) {
    BatchLimits limits(max_num_seqs);
    if (context.config != nullptr) limits.max_num_batched_tokens = context.config->rollout.max_num_batched_tokens;
    return limits;
}

GenerationOutput sample_responses(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                  int64_t max_num_seqs, GeneratorContext& context) {
    return generate(model, prompts, seeds, params, batch_limits(max_num_seqs, context));
}

const std::vector<GeneratorEntry>& generator_table() {
    static const std::vector<GeneratorEntry> table{
        {"sampler", sample_responses, "batched sampling with a KV cache: temperature, top-k, top-p or greedy"},
        {"beam_search", search, "beam search (rollout.beam_search): a prompt's n samples are its n best beams"},
        {"multi_stage", stages, "stages of sampling or beam search with appended text between them (rollout.stages)"},
        {"tool_agent", agent::tool_agent_generate,
         "multi-turn: generate, run tool calls (MCP servers, built-in tools) or an environment, append the "
         "observation (masked out of the loss), repeat (rollout.multi_turn.*)"},
    };
    return table;
}

const GeneratorEntry& find_generator(const std::string& name) {
    std::string valid;
    for (const auto& g : generator_table()) {
        if (name == g.name) return g;
        valid += (valid.empty() ? "" : ", ") + std::string(g.name);
    }
    throw ConfigError(fmt::format("rollout.generator: unknown generator '{}' (valid: {})", name, valid));
}

GeneratorArgs generator_args(const RolloutConfig& c) {
    GeneratorArgs a;
    a.beam_search = BeamSearchParams{c.beam_search.beam_width, c.beam_search.length_penalty};
    for (const auto& s : c.stages) {
        StageSpec st;
        st.generator = s.generator;
        st.max_tokens = s.max_tokens;
        st.stop = s.stop;
        st.share_across_samples = s.share_across_samples;
        a.stages.push_back(std::move(st));
    }
    return a;
}

}  // namespace rlpt::rollout
