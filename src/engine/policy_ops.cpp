#include "rlpt/engine/policy_ops.h"

#include <fmt/ranges.h>

#include "rlpt/core/error.h"
#include "rlpt/model/chunked_head.h"

namespace rlpt::engine {
namespace {

// `t` (defined) must be on the model's device: a tensor elsewhere would meet the model's
// activations in an index or a gather, where torch's error names neither the tensor nor the op.
void check_on_device(const torch::Tensor& t, const char* name, const torch::Device& model_device, const char* op) {
    RLPT_CHECK(t.device() == model_device,
               "{}: {} is on {} but the model is on {} (inputs must be on the model's device)", op, name,
               t.device().str(), model_device.str());
}

// Shapes and devices of a SequenceBatch; returns P = T - R (the prompt width).
int64_t check_sequences(const SequenceBatch& seq, const torch::Device& model_device, const char* op) {
    const auto& ids = seq.input_ids;
    RLPT_CHECK(ids.defined() && ids.dim() == 2 && ids.scalar_type() == torch::kInt64,
               "{}: input_ids must be [B, T] int64, got {}", op, ids.defined() ? ids.sizes() : torch::IntArrayRef{});
    RLPT_CHECK(seq.attention_mask.defined() && seq.attention_mask.sizes() == ids.sizes(),
               "{}: attention_mask must be shaped like input_ids {}", op, ids.sizes());
    RLPT_CHECK(seq.position_ids.defined() && seq.position_ids.sizes() == ids.sizes(),
               "{}: position_ids must be shaped like input_ids {}", op, ids.sizes());
    check_on_device(ids, "input_ids", model_device, op);
    check_on_device(seq.attention_mask, "attention_mask", model_device, op);
    check_on_device(seq.position_ids, "position_ids", model_device, op);
    const int64_t t = ids.size(1), r = seq.response_length;
    // Response token 0 sits at position P and is predicted from P - 1, so P >= 1.
    RLPT_CHECK(r >= 1 && r < t, "{}: response_length must be in [1, T - 1] = [1, {}], got {}", op, t - 1, r);
    return t - r;
}

// tp = 1: the chunked head (model/chunked_head.h), which holds the logits of one chunk of rows at a
// time; bit-identical to the unchunked path whenever all N rows fit one chunk.
model::ChunkedHeadLogProbs chunked_head(model::CausalLM& model, const torch::Tensor& hidden,
                                        const torch::Tensor& labels, double temperature, bool with_entropy,
                                        bool with_sum_pi_squared) {
    model::ChunkedHeadOptions o;
    o.temperature = temperature;
    o.with_entropy = with_entropy;
    o.with_sum_pi_squared = with_sum_pi_squared;
    o.precision = model.head_precision();
    return model::chunked_head_logprob(hidden, model.lm_head_weight(), labels, o);
}

// Log-probs (and entropies) of `labels` [N] from hidden [N, H]: the output projection in fp32
// over this rank's vocabulary slice, reduced over the tensor-parallel block (tp = 1: the whole
// vocabulary, through the chunked head).
model::VocabLogProbs head_log_probs(model::CausalLM& model, const torch::Tensor& hidden, const torch::Tensor& labels,
                                    double temperature, bool with_entropy) {
    if (model.tp() == nullptr) {
        auto out = chunked_head(model, hidden, labels, temperature, with_entropy, false);
        return {out.logp, out.entropy};
    }
    return model::vocab_parallel_logprob_entropy(model.local_logits_fp32(hidden), labels, model.tp_layout().vocab_first,
                                                 model.tp(), temperature, with_entropy);
}

}  // namespace

LogProbs compute_log_probs(model::CausalLM& model, const SequenceBatch& seq, double temperature, bool with_entropy,
                           bool with_sum_pi_squared) {
    const int64_t p = check_sequences(seq, model.device(), "compute_log_probs");
    const int64_t b = seq.input_ids.size(0), r = seq.response_length;
    auto hidden = model.forward_hidden(seq.input_ids, seq.attention_mask, seq.position_ids);  // [B, T, H]
    auto h = hidden.narrow(1, p - 1, r).reshape({b * r, hidden.size(2)});
    auto labels = seq.input_ids.narrow(1, p, r).reshape({b * r});
    if (model.tp() == nullptr) {
        auto out = chunked_head(model, h, labels, temperature, with_entropy, with_sum_pi_squared);
        LogProbs res;
        res.log_probs = out.logp.view({b, r});
        if (with_entropy) res.entropy = out.entropy.view({b, r});
        if (with_sum_pi_squared) res.sum_pi_squared = out.sum_pi_squared.view({b, r});
        return res;
    }
    auto logits = model.local_logits_fp32(h);  // [B·R, V / tp]: this rank's vocabulary slice
    auto out = model::vocab_parallel_logprob_entropy(logits, labels, model.tp_layout().vocab_first, model.tp(),
                                                     temperature, with_entropy);
    LogProbs res;
    res.log_probs = out.logp.view({b, r});
    if (with_entropy) res.entropy = out.entropy.view({b, r});
    if (with_sum_pi_squared) {
        // Σ_v π_v² = exp(LSE(2z) − 2·LSE(z)) over the whole vocabulary. Under tensor parallelism
        // each rank has the two log-sum-exps of its slice (padding columns are -inf); they are
        // combined across the block from an all-gather of [tp, 2, N] values, never of logits.
        torch::NoGradGuard no_grad;
        auto z = logits.detach() / std::max(temperature, 1e-8);
        auto lse = torch::stack({torch::logsumexp(2.0 * z, -1), torch::logsumexp(z, -1)});  // [2, N]
        if (const auto* tp = model.tp()) lse = torch::logsumexp(tp->allgather(lse.unsqueeze(0), 0), 0);
        res.sum_pi_squared = torch::exp(lse[0] - 2.0 * lse[1]).view({b, r});
    }
    return res;
}

torch::Tensor compute_values(model::ValueModel& model, const SequenceBatch& seq) {
    const int64_t p = check_sequences(seq, model.device(), "compute_values");
    auto values = model.forward_values(seq.input_ids, seq.attention_mask, seq.position_ids);  // [B, T]
    return values.narrow(1, p - 1, seq.response_length);
}

torch::Tensor compute_sequence_scores(model::ValueModel& model, const SequenceBatch& seq) {
    const auto& mask = seq.attention_mask;
    RLPT_CHECK(seq.input_ids.defined() && seq.input_ids.dim() == 2 && mask.defined() &&
                   mask.sizes() == seq.input_ids.sizes(),
               "compute_sequence_scores: input_ids [B, T] and attention_mask of the same shape are required");
    check_on_device(seq.input_ids, "input_ids", model.device(), "compute_sequence_scores");
    check_on_device(mask, "attention_mask", model.device(), "compute_sequence_scores");
    const int64_t t = mask.size(1);
    auto real = mask != 0;
    auto has_token = real.any(1);
    RLPT_CHECK(has_token.all().item<bool>(), "compute_sequence_scores: row {} has no real token",
               torch::nonzero(has_token.logical_not()).flatten()[0].item<int64_t>());
    // Index of each row's last real token: max over t of t·[mask != 0].
    auto idx = (torch::arange(t, torch::TensorOptions().dtype(torch::kInt64).device(mask.device())).unsqueeze(0) *
                real.to(torch::kInt64))
                   .amax(1);
    auto values = model.forward_values(seq.input_ids, mask, seq.position_ids);  // [B, T]
    return values.gather(1, idx.unsqueeze(1)).squeeze(1);
}

torch::Tensor sft_token_nll_sum(model::CausalLM& model, const torch::Tensor& input_ids,
                                const torch::Tensor& attention_mask, const torch::Tensor& position_ids,
                                const torch::Tensor& loss_mask) {
    RLPT_CHECK(input_ids.defined() && input_ids.dim() == 2 && input_ids.size(1) >= 2,
               "sft_token_nll_sum: input_ids must be [B, T] with T >= 2");
    RLPT_CHECK(loss_mask.defined() && loss_mask.sizes() == input_ids.sizes(),
               "sft_token_nll_sum: loss_mask must be shaped like input_ids {}, got {}", input_ids.sizes(),
               loss_mask.defined() ? loss_mask.sizes() : torch::IntArrayRef{});
    const char* op = "sft_token_nll_sum";
    check_on_device(input_ids, "input_ids", model.device(), op);
    check_on_device(loss_mask, "loss_mask", model.device(), op);
    auto selected = loss_mask != 0;
    RLPT_CHECK(!selected.select(1, 0).any().item<bool>(),
               "sft_token_nll_sum: loss_mask is set on position 0, which has no prefix to predict it from");
    const int64_t b = input_ids.size(0), t = input_ids.size(1);
    auto hidden = model.forward_hidden(input_ids, attention_mask, position_ids);  // [B, T, H]
    // Target position (row, t) with t >= 1 is predicted from flat hidden row row·T + t − 1.
    auto target = torch::nonzero(selected.flatten()).flatten();  // row·T + t
    auto h = hidden.reshape({b * t, hidden.size(2)}).index_select(0, target - 1);
    auto labels = input_ids.flatten().index_select(0, target);
    auto out = head_log_probs(model, h, labels, 1.0, false);
    return -out.logp.sum();
}

}  // namespace rlpt::engine
