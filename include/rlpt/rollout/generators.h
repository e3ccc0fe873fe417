#pragma once
// The rollout generators: how the rollout role turns prompts into responses, by name
// (config key rollout.generator). Rows of src/rollout/generators.cpp:
//   sampler      rollout::generate (generator.h): temperature / top-k / top-p or greedy sampling
//   beam_search  rollout::beam_search (beam_search.h): rollout.beam_search.{beam_width,
//                length_penalty}; a prompt's n samples are its n best beams
//   multi_stage  rollout::run_stages (multi_stage.h): rollout.stages
//   tool_agent   agent::tool_agent_generate (rlpt/agent/tool_agent.h): rollout.multi_turn
//
// A generator takes the prompts, one seed per prompt, the sampling parameters, the number of
// sequences decoded together (rollout.max_num_seqs) and its GeneratorContext (its typed arguments, GeneratorArgs, resolved from the config by
// the rollout role at init plus per-row fields of the call; the run's config and tokenizer; the
// sample fields; state it keeps across calls), and returns a GenerationOutput with
// rollout::generate's shapes and finish reasons; the rollout role pads it to the call's widths.
// Adding one (an agent loop, ...) is one file pair with the function and one row in
// src/rollout/generators.cpp (and its section of typed arguments here when it has one).
// KVCache::fork_rows / repeat_rows let it share a prefill between rows (beam forks, n samples).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/config/config.h"
#include "rlpt/rollout/beam_search.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/multi_stage.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::rollout {

struct GeneratorArgs {
    BeamSearchParams beam_search;   // rollout.beam_search (beam_search, and multi_stage's beam stages)
    std::vector<StageSpec> stages;  // rollout.stages (multi_stage); append_ids from the controller
    // Per call, one entry per prompt (or empty): the row's index among its prompt's samples
    // (sample_index mod n: which beam it gets) and the seed of the prompt's first sample.
    std::vector<int64_t> sample_rank;
    std::vector<uint64_t> group_seeds;
};

// What a generator may use beyond the sampler's arguments. The rollout worker owns one for its
// whole life: `state` persists across calls (an agent's tool servers and environment processes);
// the per-call fields are refilled by every kGenerate. The sampler uses none of it.
struct GeneratorContext {
    const Config* config = nullptr;
    const tokenizer::Tokenizer* tokenizer = nullptr;  // the run's tokenizer (tool_agent only; null otherwise)
    GeneratorArgs args;  // typed arguments (beam_search, multi_stage), with this call's per-row fields
    // Per prompt of the call (empty when the caller sent none): the global sample index and the
    // example's fields as the controller's Batch carries them.
    std::vector<int64_t> sample_index;
    std::vector<std::string> data_source, ground_truth, extra;  // extra: JSON text
    std::shared_ptr<void> state;                                // the generator's own
    // Out, per prompt: numbers the generator reports (the rollout returns each as a float64
    // column of its output; the agent's num_turns, tool_call_counts, ... ). Cleared per call.
    std::map<std::string, std::vector<double>> sample_values;
};

using GeneratorFn = GenerationOutput (*)(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                         int64_t max_num_seqs, GeneratorContext& context);

// The "sampler" row: rollout::generate with batch_limits(max_num_seqs, context).
GenerationOutput sample_responses(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                  const std::vector<uint64_t>& seeds, const SamplingParams& params,
                                  int64_t max_num_seqs, GeneratorContext& context);

// The engine limits a generator passes to rollout::generate: max_num_seqs, and the KV token
// budget rollout.max_num_batched_tokens from context.config (none without a config).
BatchLimits batch_limits(int64_t max_num_seqs, const GeneratorContext& context);

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
