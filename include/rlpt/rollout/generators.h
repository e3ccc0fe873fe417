#pragma once
// The rollout generators: how the rollout role turns prompts into responses, by name
// (config key rollout.generator). Today's sampler (rollout/generator.h) is the first entry.
//
// A generator has rollout::generate's contract (prompts, one seed per prompt, sampling
// parameters, batch limits -> GenerationOutput with the documented shapes and finish
// reasons); the rollout role pads its output to the call's widths. Adding one (a beam search, a
// two-stage chain-of-thought, an agent loop) is one file pair with the function and one row in
// src/rollout/generators.cpp. KVCache::fork_rows / repeat_rows let it share a prefill between
// rows (n samples of a prompt, beam forks).
#include <string>
#include <vector>

#include "rlpt/rollout/generator.h"

namespace rlpt::rollout {

using GeneratorFn = GenerationOutput (*)(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                         const BatchLimits& limits);

struct GeneratorEntry {
    const char* name;
    GeneratorFn fn;
    const char* what;  // one line for error messages and docs
};

// Every generator, in a fixed order.
const std::vector<GeneratorEntry>& generator_table();
// The entry named `name`; ConfigError "rollout.generator: unknown generator ... (valid: ...)".
const GeneratorEntry& find_generator(const std::string& name);

}  // namespace rlpt::rollout
