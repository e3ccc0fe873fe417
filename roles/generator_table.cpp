// The rollout generator table (include/rlpt/roles/generator_table.h): one row per generator.
#include "rlpt/roles/generator_table.h"

#include "rlpt/agent/tool_agent.h"
#include "rlpt/core/error.h"

namespace rlpt::roles {
namespace {

using rollout::GenerationOutput;
using rollout::GeneratorContext;
using rollout::SamplingParams;

GenerationOutput search(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<uint64_t>&, const SamplingParams& params, int64_t max_num_seqs,
                        GeneratorContext& context) {
    return rollout::beam_search(model, prompts, params, context.args.beam_search, context.sample_rank, max_num_seqs);
}

GenerationOutput stages(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<uint64_t>& seeds, const SamplingParams& params, int64_t max_num_seqs,
                        GeneratorContext& context) {
    const rollout::GeneratorArgs& args = context.args;
    return rollout::run_stages(model, prompts, seeds, params,
                               rollout::MultiStageArgs{args.stages, args.beam_search, context.sample_rank,
                                                       context.group_seeds},
                               rollout::batch_limits(max_num_seqs, context));
}

GenerationOutput tool_agent(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                            const std::vector<uint64_t>& seeds, const SamplingParams& params, int64_t max_num_seqs,
                            GeneratorContext& context) {
    return agent::tool_agent_generate(model, prompts, seeds, params, rollout::batch_limits(max_num_seqs, context),
                                      context);
}

}  // namespace

const std::vector<GeneratorEntry>& generator_table() {
    static const std::vector<GeneratorEntry> table{
        {"sampler", rollout::sample_responses, "batched sampling with a KV cache: temperature, top-k, top-p or greedy"},
        {"beam_search", search, "beam search (rollout.beam_search): a prompt's n samples are its n best beams"},
        {"multi_stage", stages, "stages of sampling or beam search with appended text between them (rollout.stages)"},
        {"tool_agent", tool_agent,
         "multi-turn: generate, run tool calls (MCP servers, built-in tools) or an environment, append the "
         "observation (masked out of the loss), repeat (rollout.multi_turn.*)",
         /*runs_tools=*/true},
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

}  // namespace rlpt::roles
