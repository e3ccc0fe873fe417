// The rollout generator table (include/rlpt/rollout/generators.h): one row per generator.
#include "rlpt/rollout/generators.h"

#include "rlpt/config/config.h"
#include "rlpt/core/error.h"

namespace rlpt::rollout {
namespace {

GenerationOutput sample(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<uint64_t>& seeds, const SamplingParams& params, const GeneratorArgs&,
                        const BatchLimits& limits) {
    return generate(model, prompts, seeds, params, limits);
}

GenerationOutput search(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<uint64_t>&, const SamplingParams& params, const GeneratorArgs& args,
                        const BatchLimits& limits) {
    return beam_search(model, prompts, params, args.beam_search, args.sample_rank, limits.max_num_seqs);
}

GenerationOutput stages(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                        const std::vector<uint64_t>& seeds, const SamplingParams& params, const GeneratorArgs& args,
                        const BatchLimits& limits) {
    return run_stages(model, prompts, seeds, params,
                      MultiStageArgs{args.stages, args.beam_search, args.sample_rank, args.group_seeds}, limits);
}

}  // namespace

const std::vector<GeneratorEntry>& generator_table() {
    static const std::vector<GeneratorEntry> table{
        {"sampler", sample, "batched sampling with a KV cache: temperature, top-k, top-p or greedy"},
        {"beam_search", search, "beam search (rollout.beam_search): a prompt's n samples are its n best beams"},
        {"multi_stage", stages, "stages of sampling or beam search with appended text between them (rollout.stages)"},
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
