#pragma once
// The rollout generators: how the rollout role turns prompts into responses, by name
// (config key rollout.generator). Rows of src/rollout/generators.cpp:
//   sampler      rollout::generate (generator.h): temperature / top-k / top-p or greedy sampling
//   beam_search  rollout::beam_search (beam_search.h): rollout.beam_search.{beam_width,
//                length_penalty}; a prompt's n samples are its n best beams
//   multi_stage  rollout::run_stages (multi_stage.h): rollout.stages
//
// A generator takes the prompts, one seed per prompt, the sampling parameters, its typed
// arguments (GeneratorArgs, resolved from the config by the rollout role at init, plus per-row
// fields of the call) and the batch limits (rollout.max_num_seqs, rollout.max_num_batched_tokens), and returns a GenerationOutput with
// rollout::generate's shapes and finish reasons; the rollout role pads it to the call's widths.
// Adding one (an agent loop, ...) is one file pair with the function and one row in
// src/rollout/generators.cpp (and its section of typed arguments here when it has one).
// KVCache::fork_rows / repeat_rows let it share a prefill between rows (beam forks, n samples).
#include <string>
#include <vector>

#include "rlpt/rollout/beam_search.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/multi_stage.h"

namespace rlpt {
struct RolloutConfig;
}

namespace rlpt::rollout {

struct GeneratorArgs {
    BeamSearchParams beam_search;      // rollout.beam_search (beam_search, and multi_stage's beam stages)
    std::vector<StageSpec> stages;     // rollout.stages (multi_stage); append_ids from the controller
    // Per call, one entry per prompt (or empty): the row's index among its prompt's samples
    // (sample_index mod n: which beam it gets) and the seed of the prompt's first sample.
    std::vector<int64_t> sample_rank;
    std::vector<uint64_t> group_seeds;
};

using GeneratorFn = GenerationOutput (*)(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                         const GeneratorArgs& args, const BatchLimits& limits);

struct GeneratorEntry {
    const char* name;
    GeneratorFn fn;
    const char* what;  // one line for error messages and docs
};

// Every generator, in a fixed order.
const std::vector<GeneratorEntry>& generator_table();
// The entry named `name`; ConfigError "rollout.generator: unknown generator ... (valid: ...)".
const GeneratorEntry& find_generator(const std::string& name);

// The typed arguments of rollout.beam_search and rollout.stages (stage texts are not encoded
// here: the role fills append_ids with the ids the controller sent).
GeneratorArgs generator_args(const RolloutConfig& c);

}  // namespace rlpt::rollout
