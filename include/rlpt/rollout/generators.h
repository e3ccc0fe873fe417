#pragma once
// What a rollout generator is: how the rollout role turns prompts into responses, chosen by name
// (config key rollout.generator) from the table in the rollout role
// (rlpt/roles/generator_table.h: sampler, beam_search, multi_stage, tool_agent).
//
// A generator takes the prompts, one seed per prompt, the sampling parameters, the number of
// sequences decoded together (rollout.max_num_seqs) and its GeneratorContext (its typed
// arguments, GeneratorArgs, from the rollout's settings at init plus per-row fields of the call;
// the run's tokenizer; the KV token budget; the sample fields; state it keeps across calls), and returns a GenerationOutput with rollout::generate's shapes and finish reasons; the
// rollout role pads it to the call's widths. Adding one is one file pair with the function and
// one row in roles/generator_table.cpp (and its section of typed arguments here when it has
// one). A generator that runs turns on the KV-slot engine is a sequence source
// (rollout/sequence_source.h, as agent/tool_agent.h); KVCache::fork_rows / repeat_rows let one
// share a prefill between rows (beam forks, n samples).
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/rollout/beam_search.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/multi_stage.h"
#include "rlpt/rollout/multi_turn_config.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt::rollout {

// The generators' typed arguments, one section per generator that has some: resolved from the
// config once by the run plan, carried by the rollout's settings (roles::RolloutSettings) and
// kept by the rollout worker for its life.
struct GeneratorArgs {
    BeamSearchParams beam_search;        // rollout.beam_search (beam_search, and multi_stage's beam stages)
    std::vector<StageSpec> stages;       // rollout.stages (multi_stage); append_ids from the controller
    MultiTurnConfig multi_turn;          // rollout.multi_turn (tool_agent)
    std::string chat_template = "none";  // model.chat_template (tool_agent: the turns' format)
    bool enable_thinking = true;         // model.apply_chat_template_kwargs.enable_thinking (tool_agent, qwen3)
    template <typename V>
    void visit(V& v) {  // every field, for the rollout's settings on the wire (rlpt/protocol/args.h)
        v("beam_search", beam_search);
        v("stages", stages);
        v("multi_turn", multi_turn);
        v("chat_template", chat_template);
        v("enable_thinking", enable_thinking);
    }
};

// What a generator may use beyond the sampler's arguments. The rollout worker owns one for its
// whole life: `state` persists across calls (an agent's tool servers and environment processes);
// the per-call fields are refilled by every kGenerate. The sampler uses none of it.
struct GeneratorContext {
    const tokenizer::Tokenizer* tokenizer = nullptr;  // the run's tokenizer (tool_agent only; null otherwise)
    GeneratorArgs args;                               // typed arguments (beam_search, multi_stage, tool_agent)
    std::optional<int64_t> max_num_batched_tokens;    // rollout.max_num_batched_tokens: the KV token budget
    // Per prompt of the call (empty when the caller sent none): the global sample index, the row's
    // index among its prompt's samples (sample_index mod n: which beam it gets), the seed of the
    // prompt's first sample, and the example's fields as the controller's Batch carries them.
    std::vector<int64_t> sample_index;
    std::vector<int64_t> sample_rank;
    std::vector<uint64_t> group_seeds;
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

// The engine limits a generator passes on (rollout::generate, agent::tool_agent_generate, ...):
// max_num_seqs, and the KV token budget context.max_num_batched_tokens.
BatchLimits batch_limits(int64_t max_num_seqs, const GeneratorContext& context);

}  // namespace rlpt::rollout
