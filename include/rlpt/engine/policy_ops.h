#pragma once
// Forward passes the roles need, over sequences laid out as the rollout produces them:
//   input_ids      [B, T] int64   = prompt (left-padded, P tokens) ++ response (right-padded, R)
//   attention_mask [B, T] int64   1 on real tokens
//   position_ids   [B, T] int64   clamp(cumsum(attention_mask) - 1, 0)
// and R = responses.size(1). Response token t of row i is input_ids[i, P + t]; it is
// predicted from position P + t - 1.
//
// Log-probs: hidden states of the R predicting positions [B·R, H] -> the LM head in fp32 ->
// fused log-softmax-gather + entropy (kernels/logprob) with the logits divided by temperature.
// With tp = 1 the head is model::chunked_head_logprob (model/chunked_head.h): it never holds more
// than one chunk of rows' [rows, V] fp32 logits (kHeadChunkBudgetBytes, 256 MiB; twice that in the
// backward) and saves no logits for the backward; when all B·R rows fit one chunk the arithmetic is
// the unchunked path's. With tp > 1 the rank's [B·R, V / tp] logits slice is materialised (and kept
// for the backward) as before.
// The head matmul runs in fp32 whatever the model dtype (model.head_precision: fp32, the default;
// tf32 or bf16 operands with fp32 accumulation: CausalLM::head_precision, model/chunked_head.h):
// for a bf16 model at fp32 the [V, H] output weight is cast to fp32 on every call (a transient
// V·H·4 bytes, e.g. 545 MB for Qwen2.5-0.5B).
// Positions whose token is padding get finite values; callers mask them.
// Devices: every input tensor (the SequenceBatch's three, sft_token_nll_sum's four) must be on
// the model's device (model.device(): the host or the rank's GPU; a tensor elsewhere is a
// ValueError naming it and both devices), and every result is on that device. The roles get
// their batches there (protocol::WorkerHost moves them before the handler runs).
// Tensor-parallel models: each rank computes the logits of its vocabulary slice only and the
// block exchanges per-row statistics (model::vocab_parallel_logprob_entropy); every function
// here is then collective on the block and returns the same values on every rank.
#include <torch/torch.h>

#include "rlpt/model/transformer.h"
#include "rlpt/model/value_model.h"

namespace rlpt::engine {

struct SequenceBatch {
    torch::Tensor input_ids;
    torch::Tensor attention_mask;
    torch::Tensor position_ids;
    int64_t response_length = 0;  // R
    int64_t first_column = 0;     // the column of the source batch input_ids[:, 0] is (trimmed batches)
};

struct LogProbs {
    torch::Tensor log_probs;  // [B, R] fp32
    torch::Tensor entropy;    // [B, R] fp32, undefined unless requested
    // [B, R] fp32 Σ_v π_v² of the temperature-scaled distribution, exp(logsumexp(2z) - 2·logsumexp(z));
    // undefined unless requested (the optimal-token-baseline estimators need it).
    torch::Tensor sum_pi_squared;
};

// Differentiable when grad mode is on (training); call under torch::NoGradGuard for
// inference. Rows are processed as given (the caller micro-batches).
LogProbs compute_log_probs(model::CausalLM& model, const SequenceBatch& seq, double temperature, bool with_entropy,
                           bool with_sum_pi_squared = false);

// Value predictions for the response tokens: values[i, t] is the value head at the position
// that predicts response token t (position P + t - 1), [B, R] fp32.
torch::Tensor compute_values(model::ValueModel& model, const SequenceBatch& seq);

// Sequence score of a reward model: the value head at each row's last real token, [B] fp32.
torch::Tensor compute_sequence_scores(model::ValueModel& model, const SequenceBatch& seq);

// Token-level cross-entropy for SFT: mean over positions where loss_mask [B, T] is 1 of
// -log p(input_ids[:, t] | prefix), returned as the SUM over masked tokens (the caller divides
// by the global token count, so the loss splits cleanly across micro-batches and ranks).
torch::Tensor sft_token_nll_sum(model::CausalLM& model, const torch::Tensor& input_ids,
                                const torch::Tensor& attention_mask, const torch::Tensor& position_ids,
                                const torch::Tensor& loss_mask);

}  // namespace rlpt::engine
