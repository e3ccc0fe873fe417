#pragma once
// Rollout engine (DESIGN §4): batched autoregressive generation with a KV cache.
//
//   prefill of the left-padded prompts -> decode steps; temperature / top-k / top-p sampling
//   or greedy; stop on EOS, on any stop token id, or at max_new_tokens; finished rows leave
//   the decode batch (the KV cache is compacted) so they stop costing compute.
//
// Reproducibility: every sequence draws its random numbers from its own counter-based stream
// seeded by `seeds[i]` (the caller derives it from the run seed, the step and the sample's
// global index), never from a shared generator, so a sample does not depend on which other
// prompts share its batch or on how many rollout ranks there are (up to floating-point ties
// of the logits themselves).
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/model/transformer.h"
#include "rlpt/rollout/stop_strings.h"

namespace rlpt::rollout {

struct SamplingParams {
    double temperature = 1.0;  // > 0 unless greedy
    double top_p = 1.0;        // (0, 1]
    int64_t top_k = -1;        // -1: off (0 is accepted as off too, as in Hugging Face); k >= V is off
    bool greedy = false;       // argmax (temperature ignored for the choice; log-probs use temperature,
                               // or T = 1 when temperature is 0)
    int64_t max_new_tokens = 16;  // >= 1
    int64_t eos_id = -1;       // -1: none
    std::vector<int64_t> stop_token_ids;
    int64_t pad_id = 0;        // fills prompts on the left and responses on the right; in [0, V)
    // Text level (rollout/stop_strings.h). With token_texts set, every response's text is
    // collected (GenerationOutput::texts) and a response that completes one of `stop` finishes
    // (kStop; the token is kept). `stop` needs token_texts. Not owned: must outlive the call.
    std::vector<std::string> stop;
    bool include_stop_str_in_output = false;  // the text keeps the stop string (tokens always do)
    const TokenTexts* token_texts = nullptr;
};

// ValueError naming the field for: temperature not finite or <= 0 (< 0 when greedy), top_p
// outside (0, 1], top_k < -1, max_new_tokens < 1, an empty stop string, stop strings without
// token_texts, and, when vocab_size > 0, pad_id / eos_id /
// stop ids outside [0, vocab_size) (eos_id may be -1). generate() calls it.
void validate_sampling_params(const SamplingParams& params, int64_t vocab_size);

enum class FinishReason : int64_t { kEos = 0, kStop = 1, kLength = 2 };
const char* finish_reason_name(FinishReason r);

// All tensors on CPU. P = longest prompt, R = longest response (<= max_new_tokens).
struct GenerationOutput {
    torch::Tensor prompts;            // [B, P] int64, left-padded with pad_id
    torch::Tensor responses;          // [B, R] int64, right-padded with pad_id
    torch::Tensor input_ids;          // [B, P+R] prompts ++ responses
    torch::Tensor attention_mask;     // [B, P+R] int64: real prompt tokens and real response tokens
    torch::Tensor position_ids;       // [B, P+R] int64: clamp(cumsum(attention_mask) - 1, 0)
    torch::Tensor response_mask;      // [B, R] int64: 1 on generated tokens (EOS/stop token included)
    torch::Tensor rollout_log_probs;  // [B, R] fp32: log p of each sampled token under softmax(logits / T)
    std::vector<FinishReason> finish_reasons;
    // [B] with params.token_texts: each response's text, cut at its stop string (stop_strings.h
    // "What is kept"); empty otherwise.
    std::vector<std::string> texts;
};

// Generates one response per prompt (callers repeat prompts for n samples). `seeds` has one
// seed per prompt. Rows are processed `micro_batch_size` at a time. Runs under NoGradGuard.
// A row finishes when it emits eos_id (kEos) or a stop id (kStop; kEos wins when eos_id is
// also listed), the token being kept, when its text completes a stop string (kStop, the token
// kept), or after max_new_tokens tokens (kLength).
// Details: prompts are sorted by length (stable) before being cut into micro-batches, so each
// micro-batch pads to its own longest prompt; the output keeps the caller's order and pads to
// the longest prompt of the whole call. Finished rows leave the decode batch at once
// (KVCache::keep_rows). Any number of prompts >= 0 (none: every tensor is [0, 0]).
// ValueError for: an empty prompt, a token id outside [0, V), seeds.size() != prompts.size(),
// micro_batch_size < 1, invalid params (validate_sampling_params).
GenerationOutput generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const std::vector<uint64_t>& seeds, const SamplingParams& params,
                          int64_t micro_batch_size = 256);

// Per-sequence seed: a hash of (run seed, step, global sample index), with M = splitmix64_mix
// and G = 0x9E3779B97F4A7C15:
//   h = M(run_seed + G); h = M(h ^ M(step + 2G)); return M(h ^ M(global_index + 3G)).
// step >= 0 and global_index >= 0 (ValueError otherwise).
uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t global_index);

}  // namespace rlpt::rollout
