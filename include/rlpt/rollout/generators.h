#pragma once
// The rollout generators: how the rollout role turns prompts into responses, by name
// (config key rollout.generator). Today's sampler (rollout/generator.h) is the first entry.
//
// A generator has rollout::generate's contract (prompts, one seed per prompt, sampling
// parameters, micro-batch size -> GenerationOutput with the documented shapes and finish
// reasons); the rollout role pads its output to the call's widths. Adding one (a beam search, a
// two-stage chain-of-thought, an agent loop) is one file pair with the function and one row in
// src/rollout/generators.cpp. KVCache::fork_rows / repeat_rows let it share a prefill between
// rows (n samples of a prompt, beam forks).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/config/config.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::rollout {

// What a generator may use beyond the sampler's arguments. The rollout worker owns one for its
// whole life: `state` persists across calls (an agent's tool servers and environment processes);
// the per-call fields are refilled by every kGenerate. The sampler uses none of it.
struct GeneratorContext {
    const Config* config = nullptr;
    const tokenizer::Tokenizer* tokenizer = nullptr;  // the run's tokenizer (null only in tests that need none)
    // Per prompt of the call (empty when the caller sent none): the global sample index and the
    // example's fields as the controller's Batch carries them.
    std::vector<int64_t> sample_index;
    std::vector<std::string> data_source, ground_truth, extra;  // extra: JSON text
    std::shared_ptr<void> state;  // the generator's own
    // Out, per prompt: numbers the generator reports (the rollout returns each as a float64
    // column of its output; the agent's num_turns, tool_call_counts, ... ). Cleared per call.
    std::map<std::string, std::vector<double>> sample_values;
};

using GeneratorFn = GenerationOutput (*)(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                         int64_t micro_batch_size, GeneratorContext& context);

// The "sampler" row: rollout::generate (the context is not used).
GenerationOutput sample_responses(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                  int64_t micro_batch_size, GeneratorContext& context);

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
