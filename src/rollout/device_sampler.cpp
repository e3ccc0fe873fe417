#include "rlpt/rollout/device_sampler.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "rlpt/core/error.h"

namespace rlpt::rollout {
namespace {

// The first index along dim 1 where `cond` [b, V] bool holds, `none` where it never does: [b]
// int64. argmax returns the first of equal maxima (documented on every device), so no int64 [b, V]
// index tensor is needed.
torch::Tensor first_true(const torch::Tensor& cond, int64_t none) {
    const auto at = cond.to(torch::kUInt8).argmax(1);
    return torch::where(cond.any(1), at, none);
}

// Greedy: (token, log-prob) per row, see the header.
std::pair<torch::Tensor, torch::Tensor> greedy_choice(const torch::Tensor& z, double temperature) {
    // NaN never wins: argmax would take it as the maximum. A row of -inf gives index 0.
    const auto token = torch::where(z.isnan(), -std::numeric_limits<float>::infinity(), z).argmax(1);  // [b]
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
    auto keep = torch::ones_like(order, torch::kBool);
    if (top_k > 0) keep.narrow(1, top_k, vocab - top_k).fill_(false);
    if (top_p < 1.0) {
        auto cand = probs.gather(1, order).to(torch::kFloat64);
        if (top_k > 0) cand.narrow(1, top_k, vocab - top_k).zero_();
        auto cum = cand.cumsum(1);
        cand = torch::Tensor();
        // Rank r is kept iff the mass before it (exclusive) is below top_p · total.
        const auto limit = cum.narrow(1, vocab - 1, 1) * top_p;
        keep.narrow(1, 1, vocab - 1).logical_and_(cum.narrow(1, 0, vocab - 1).lt(limit));
    }
    return torch::zeros_like(keep).scatter(1, order, keep);
}

// Sampling: (token, log-prob) per row; token -1 (log-prob NaN) when no kept token has p > 0.
std::pair<torch::Tensor, torch::Tensor> sampled_choice(const torch::Tensor& z, const SamplingParams& params,
                                                       const torch::Tensor& u) {
    const int64_t vocab = z.size(1);
    const double t = params.temperature;
    const auto probs = torch::softmax(t == 1.0 ? z : z.div(t), 1);  // as choose_tokens
    const bool filter_k = params.top_k > 0 && params.top_k < vocab;
    auto w = probs.to(torch::kFloat64);
    if (filter_k || params.top_p < 1.0)
        w.masked_fill_(kept_mask(z, probs, filter_k ? params.top_k : -1, params.top_p).logical_not(), 0.0);
    const auto positive = w.gt(0);
    const auto cum = w.cumsum(1);
    w = torch::Tensor();
    const auto target = (u * cum.select(1, vocab - 1)).unsqueeze(1);
    const auto first = first_true(cum.gt(target).logical_and_(positive), vocab);
    const auto last = (vocab - 1) - first_true(positive.flip(1), vocab);  // -1: none positive
    const auto token = torch::where(first.lt(vocab), first, last);
    const auto p = probs.gather(1, token.clamp_min(0).unsqueeze(1)).squeeze(1).to(torch::kFloat64);
    const auto logp = torch::where(token.ge(0), p.log(), std::numeric_limits<double>::quiet_NaN());
    return {token, logp};
}

}  // namespace

TokenChoices choose_tokens_on_device(const torch::Tensor& logits_in, const SamplingParams& params,
                                     const std::vector<double>& uniforms, int64_t chunk_bytes) {
    RLPT_CHECK(chunk_bytes > 0, "choose_tokens_on_device: chunk_bytes must be > 0, got {}", chunk_bytes);
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
    torch::Tensor token, logp;
    if (params.greedy) {
        std::tie(token, logp) = greedy_choice(z, params.temperature);
    } else {
        auto u = torch::from_blob(const_cast<double*>(uniforms.data()), {b}, torch::kFloat64);
        // Pinned and asynchronous on CUDA: the upload does not wait for the device.
        u = z.is_cuda() ? u.pin_memory().to(z.device(), /*non_blocking=*/true) : u.clone();
        // Rows in groups whose float64 (and int64 sort index) temporaries stay within chunk_bytes:
        // [rows, V], not [b, V] (at b = 256 over 152k tokens, 311 MB each).
        const int64_t rows = std::max<int64_t>(1, chunk_bytes / (8 * vocab));
        std::vector<torch::Tensor> tokens, logps;
        for (int64_t r = 0; r < b; r += rows) {
            const int64_t n = std::min(rows, b - r);
            auto [tk, lp] = sampled_choice(z.narrow(0, r, n), params, u.narrow(0, r, n));
            tokens.push_back(tk);
            logps.push_back(lp);
        }
        token = tokens.size() == 1 ? tokens[0] : torch::cat(tokens);
        logp = logps.size() == 1 ? logps[0] : torch::cat(logps);
    }
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
