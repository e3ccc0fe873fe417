#pragma once
// Multi-stage rollouts (rollout.generator: multi_stage, rollout.stages): a response built by
// several generation stages in turn, with fixed text appended between them. OpenOneRec's
// two-stage rollout is configs/openonerec_two_stage.yaml: sample a chain of thought until
// "</think>", append a fixed prefix, then beam search over item ids.
//
// Stage i generates from the prompt followed by everything the earlier stages produced and
// appended (a fresh prefill per stage). Its tokens join the response as the policy's (trained
// on: response_mask 1, with their log-probs); then its `append_ids` join it as context only
// (response_mask 0, log-prob 0, attention_mask 1: the policy sees them but is not trained to
// produce them, so they give no loss). The response is everything after the original prompt.
//
// A stage ends the whole response when it finishes with eos_id or a stop token id (kEos /
// kStop: the model said it is done); a stop string or the stage's length limit moves on to the
// next stage (the append follows). The last stage's finish reason is the response's. The stop
// strings of a stage end that stage only; the text given to the reward (texts) is the whole
// response's, cut at the last stage's stop string by include_stop_str_in_output (earlier
// stages' stop strings stay in the text: the tokens after them are part of the response).
//
// share_across_samples: rows whose prefixes (prompt + response so far) are identical - a
// prompt's n samples before their first sampled stage - run the stage once, with the seed of
// the group's first sample (group_seeds), and all get its result; a beam-search stage shared
// so gives the group its n best beams (sample_rank). OpenOneRec shares the chain of thought of a
// prompt between its beams.
#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/rollout/beam_search.h"
#include "rlpt/rollout/generator.h"

namespace rlpt::rollout {

struct StageSpec {
    std::string generator = "sampler";  // sampler | beam_search
    int64_t max_tokens = 1;             // this stage's token limit, >= 1
    std::vector<std::string> stop;      // this stage's stop strings (sampler stages only)
    std::vector<int64_t> append_ids;    // appended after the stage unless the response ended
    bool share_across_samples = false;
    template <typename V>
    void visit(V& v) {  // every field, for the rollout's settings on the wire (rlpt/protocol/args.h)
        v("generator", generator);
        v("max_tokens", max_tokens);
        v("stop", stop);
        v("append_ids", append_ids);
        v("share_across_samples", share_across_samples);
    }
};

struct MultiStageArgs {
    std::vector<StageSpec> stages;      // >= 1
    BeamSearchParams beam_search;       // of the beam_search stages
    std::vector<int64_t> sample_rank;   // [B] each row's index among its prompt's samples, or empty (0)
    std::vector<uint64_t> group_seeds;  // [B] the seed of each row's first sample, or empty (= seeds)
};

// ValueError naming the stage for: no stages, an unknown generator, max_tokens < 1, stop
// strings on a beam_search stage, an empty stop string.
void validate_stages(const std::vector<StageSpec>& stages);

// Runs the stages. `params` gives the sampling (temperature, top-p/k, greedy), eos/stop ids,
// pad id, include_stop_str_in_output and token_texts (required: stop strings and texts);
// its max_new_tokens bounds the whole response (ValueError when the stages' max_tokens plus the
// appended tokens could exceed it) and its `stop` is ignored (each stage has its own).
// Sampled stage s of row i draws from the stream of seeds[i] mixed with s, so stages do not
// reuse draws. Output as generate()'s, with response_mask 0 on appended tokens and texts set.
GenerationOutput run_stages(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                            const std::vector<uint64_t>& seeds, const SamplingParams& params,
                            const MultiStageArgs& args, const BatchLimits& limits);

}  // namespace rlpt::rollout
