// The rollout generator table (include/rlpt/rollout/generators.h): one row per generator.
#include "rlpt/rollout/generators.h"

#include "rlpt/core/error.h"

namespace rlpt::rollout {

const std::vector<GeneratorEntry>& generator_table() {
    static const std::vector<GeneratorEntry> table{
        {"sampler", generate, "batched sampling with a KV cache: temperature, top-k, top-p or greedy"},
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
