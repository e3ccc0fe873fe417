#include "rlpt/rollout/device_sampler.h"

#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "rlpt/core/error.h"

namespace rlpt::rollout {
namespace {

// Greedy: (token, log-prob) per row, see the header.
std::pair<torch::Tensor, torch::Tensor> greedy_choice(const torch::Tensor& z, const torch::Tensor& index,
                                                      double temperature) {
    const int64_t vocab = z.size(1);
    const auto no_nan = torch::where(z.isnan(), -std::numeric_limits<float>::infinity(), z);
    const auto token = torch::where(no_nan.eq(no_nan.amax(1, true)), index, vocab).amin(1);  // [b]
    const double t = temperature > 0 ? temperature : 1.0;
    const auto zt = t == 1.0 ? z : z.div(t);
    const auto logp = zt.gather(1, token.unsqueeze(1)).squeeze(1) - torch::logsumexp(zt, 1);
    return {token, logp};
}

// The kept tokens of every row as a [b, V] bool mask in index order: the top-k / top-p filters
// over the ranks (z descending, index ascending), see the header.
torch::Tensor kept_mask(const torch::Tensor& z, const torch::Tensor& probs, int64_t top_k, double top_p) {
    const int64_t vocab = z.size(1);
    const auto key = torch::where(z.eq(0), torch::zeros_like(z), z);                            // -0 ranks like +0
    const auto order = std::get<1>(key.sort(/*stable=*/true, /*dim=*/1, /*descending=*/true));  // [b, V]
    const auto rank = torch::arange(vocab, z.options().dtype(torch::kInt64)).unsqueeze(0);
    auto keep = top_k > 0 ? rank.lt(top_k).expand_as(order) : torch::ones_like(order, torch::kBool);
    if (top_p < 1.0) {
        const auto cand = torch::where(keep, probs.gather(1, order).to(torch::kFloat64), 0.0);
        const auto cum = cand.cumsum(1);
        const auto before = torch::constant_pad_nd(cum.narrow(1, 0, vocab - 1), {1, 0}, 0.0);  // exclusive
        keep = keep.logical_and(before.lt(cum.narrow(1, vocab - 1, 1) * top_p));
    }
    return torch::zeros_like(keep).scatter(1, order, keep);
}

// Sampling: (token, log-prob) per row; token -1 (log-prob NaN) when no kept token has p > 0.
std::pair<torch::Tensor, torch::Tensor> sampled_choice(const torch::Tensor& z, const torch::Tensor& index,
                                                       const SamplingParams& params,
                                                       const std::vector<double>& uniforms) {
    const int64_t b = z.size(0), vocab = z.size(1);
    const double t = params.temperature;
    const auto probs = torch::softmax(t == 1.0 ? z : z.div(t), 1);  // as choose_tokens
    const bool filter_k = params.top_k > 0 && params.top_k < vocab;
    auto w = probs.to(torch::kFloat64);
    if (filter_k || params.top_p < 1.0)
        w = torch::where(kept_mask(z, probs, filter_k ? params.top_k : -1, params.top_p), w, 0.0);
    auto u = torch::from_blob(const_cast<double*>(uniforms.data()), {b}, torch::kFloat64);
    // Pinned and asynchronous on CUDA: the upload does not wait for the device.
    u = z.is_cuda() ? u.pin_memory().to(z.device(), /*non_blocking=*/true) : u.clone();
    const auto cum = w.cumsum(1);
    const auto target = (u * cum.select(1, vocab - 1)).unsqueeze(1);
    const auto positive = w.gt(0);
    const auto first = torch::where(cum.gt(target).logical_and(positive), index, vocab).amin(1);
    const auto last = torch::where(positive, index, -1).amax(1);
    const auto token = torch::where(first.lt(vocab), first, last);
    const auto p = probs.gather(1, token.clamp_min(0).unsqueeze(1)).squeeze(1).to(torch::kFloat64);
    const auto logp = torch::where(token.ge(0), p.log(), std::numeric_limits<double>::quiet_NaN());
    return {token, logp};
}

}  // namespace

TokenChoices choose_tokens_on_device(const torch::Tensor& logits_in, const SamplingParams& params,
                                     const std::vector<double>& uniforms) {
    RLPT_CHECK(logits_in.defined() && logits_in.dim() == 2 && logits_in.size(1) > 0,
               "choose_tokens_on_device: logits must be [b, V] with V >= 1, got {}",
               logits_in.defined() ? logits_in.sizes() : torch::IntArrayRef{});
    const int64_t b = logits_in.size(0), vocab = logits_in.size(1);
    RLPT_CHECK(params.greedy || static_cast<int64_t>(uniforms.size()) == b,
               "choose_tokens_on_device: {} uniforms for {} rows", uniforms.size(), b);
    RLPT_CHECK(vocab < std::numeric_limits<int32_t>::max(), "choose_tokens_on_device: vocabulary of {} is too large",
               vocab);
    TokenChoices out;
    if (b == 0) return out;
    const auto z = logits_in.to(torch::kFloat32).contiguous();
    const auto index = torch::arange(vocab, z.options().dtype(torch::kInt64)).unsqueeze(0);  // [1, V]
    const auto [token, logp] =
        params.greedy ? greedy_choice(z, index, params.temperature) : sampled_choice(z, index, params, uniforms);
    // The one download: tokens (exact in double below 2^53) and log-probs together.
    const auto host = torch::stack({token.to(torch::kFloat64), logp.to(torch::kFloat32).to(torch::kFloat64)})
                          .to(torch::kCPU)
                          .contiguous();
    const double* h = host.data_ptr<double>();
    out.tokens.resize(static_cast<size_t>(b));
    out.log_probs.resize(static_cast<size_t>(b));
    for (int64_t i = 0; i < b; ++i) {
        out.tokens[static_cast<size_t>(i)] = static_cast<int64_t>(h[i]);
        const float l = static_cast<float>(h[b + i]);
        out.log_probs[static_cast<size_t>(i)] = l;
        RLPT_CHECK(std::isfinite(l),
                   "sampling: row {} has non-finite logits (chosen log-prob {}); the model output is NaN/inf", i, l);
    }
    return out;
}

}  // namespace rlpt::rollout
