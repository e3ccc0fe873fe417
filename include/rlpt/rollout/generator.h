#pragma once
// Sampling (DESIGN §4): rollout::generate, the sampler, runs its prompts on the rollout engine
// (rollout/engine.h: KV slots, continuous batching, shared prefixes) as the trivial sequence
// source: one turn per prompt, never parked. Prompts wait longest first (prefills pad little),
// identical prompts together (the n samples of a GRPO/RLOO group share one prefill). Also the
// sampling parameters, batch limits and output layout every generator shares.
#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/model/transformer.h"
#include "rlpt/rollout/stop_strings.h"

namespace rlpt::rollout {

struct SamplingParams {
    double temperature = 1.0;     // > 0 unless greedy
    double top_p = 1.0;           // (0, 1]
    int64_t top_k = -1;           // -1: off (0 is accepted as off too, as in Hugging Face); k >= V is off
    bool greedy = false;          // argmax (temperature ignored for the choice; log-probs use temperature,
                                  // or T = 1 when temperature is 0)
    int64_t max_new_tokens = 16;  // >= 1
    int64_t eos_id = -1;          // -1: none
    std::vector<int64_t> stop_token_ids;
    int64_t pad_id = 0;  // fills prompts on the left and responses on the right; in [0, V)
    // Text level (rollout/stop_strings.h). With token_texts set, every response's text is
    // collected (GenerationOutput::texts) and a response that completes one of `stop` finishes
    // (kStop; the token is kept). `stop` needs token_texts. Not owned: must outlive the call.
    std::vector<std::string> stop;
    bool include_stop_str_in_output = false;  // the text keeps the stop string (tokens always do)
    const TokenTexts* token_texts = nullptr;
    // Mixture-of-experts models: keep the experts every fed position was routed to
    // (GenerationOutput::routed_experts; router replay R3 and the route mismatch metric). Read by
    // the engine (rollout/engine.h); ignored for dense models and by beam search.
    bool record_routes = false;
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
    // With SamplingParams::record_routes on a mixture-of-experts model (engine generations):
    // [B, P+R, num_moe_layers, top_k] int64, the experts each position of input_ids was routed to
    // when the rollout fed it; -1 where nothing was (padding, each response's last token, which is
    // never fed). Undefined otherwise.
    torch::Tensor routed_experts;
    // [B] with params.token_texts: each response's text, cut at its stop string (stop_strings.h
    // "What is kept"); empty otherwise.
    std::vector<std::string> texts;
};

// How the engine batches: config keys rollout.max_num_seqs and rollout.max_num_batched_tokens
// (vLLM's names; here the token budget bounds the KV cache, see rollout/engine.h).
struct BatchLimits {
    int64_t max_num_seqs = 256;  // sequences decoded together (slots), >= 1
    // KV positions over all slots, >= 1; must hold one sequence (longest prompt + response
    // budget - 1). Unset: max_num_seqs slots.
    std::optional<int64_t> max_num_batched_tokens;
    // Engine switches for tests and scripts/bench_rollout.sh (defaults: engine.h).
    // continuous = false: static batches ("waves"): the next prompts are admitted only when
    // every slot is free, i.e. micro-batches of max_num_seqs prompts decoded until their last
    // row finishes (rlpt's generation before continuous batching). share_prefixes = false:
    // every sample prefills its prompt.
    bool continuous = true;
    bool share_prefixes = true;

    BatchLimits() = default;
    // Implicit on purpose: generate(model, prompts, seeds, params, 8) means 8 slots.
    BatchLimits(int64_t max_num_seqs_) : max_num_seqs(max_num_seqs_) {}  // NOLINT(google-explicit-constructor)
};

// ValueError naming the config key for max_num_seqs < 1 or max_num_batched_tokens < 1.
void validate_batch_limits(const BatchLimits& limits);

// Generates one response per prompt (callers repeat prompts for n samples). `seeds` has one
// seed per prompt. At most limits.max_num_seqs rows are decoded together. Runs under
// NoGradGuard. A row finishes when it emits eos_id (kEos) or a stop id (kStop; kEos wins when
// eos_id is also listed), the token being kept, when its text completes a stop string (kStop,
// the token kept), or after max_new_tokens tokens (kLength).
// The output keeps the caller's order and pads to the longest prompt of the call. Any number
// of prompts >= 0 (none: every tensor is [0, 0]).
// ValueError for: an empty prompt, a token id outside [0, V), seeds.size() != prompts.size(),
// invalid limits (validate_batch_limits) or a token budget below one sequence (naming
// rollout.max_num_batched_tokens and the lengths), invalid params (validate_sampling_params).
GenerationOutput generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const std::vector<uint64_t>& seeds, const SamplingParams& params,
                          const BatchLimits& limits = BatchLimits());

// Per-sequence seed: a hash of (run seed, step, global sample index), with M = splitmix64_mix
// and G = 0x9E3779B97F4A7C15:
//   h = M(run_seed + G); h = M(h ^ M(step + 2G)); return M(h ^ M(global_index + 3G)).
// step >= 0 and global_index >= 0 (ValueError otherwise).
uint64_t sample_seed(uint64_t run_seed, int64_t step, int64_t global_index);

}  // namespace rlpt::rollout
