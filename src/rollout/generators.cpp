// The rollout generator table (include/rlpt/rollout/generators.h): one row per generator.
#include "rlpt/rollout/generators.h"

#include "rlpt/agent/tool_agent.h"
#include "rlpt/core/error.h"

namespace rlpt::rollout {

GenerationOutput sample_responses(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                  int64_t micro_batch_size, GeneratorContext&) {
    return generate(model, prompts, seeds, params, micro_batch_size);
}

const std::vector<GeneratorEntry>& generator_table() {
    static const std::vector<GeneratorEntry> table{
        {"sampler", sample_responses, "batched sampling with a KV cache: temperature, top-k, top-p or greedy"},
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

}  // namespace rlpt::rollout
