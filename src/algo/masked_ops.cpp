#include "rlpt/algo/masked_ops.h"

#include "algo/checks.h"

namespace rlpt::algo {

namespace {

torch::Tensor masked_product(const torch::Tensor& values, const torch::Tensor& mask, const char* where) {
    detail::check_float(values, where, "values");
    detail::check_like(values, "values", mask, "mask", where);
    auto zero = torch::zeros({}, values.options());
    return torch::where(mask.to(torch::kBool), values, zero) * detail::mask_as(mask, values);
}

}  // namespace

torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask) {
    return masked_product(values, mask, "masked_sum").sum();
}

torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask, int64_t dim) {
    return masked_product(values, mask, "masked_sum").sum(dim);
}

// The count keeps torch's promotion of `mask.sum() + 1e-8`: integer/bool masks give a float32
// count (where the epsilon rounds away for n >= 1), floating masks keep their dtype. This is what
// verl computes, so means match it to the last bit.
namespace {
torch::Tensor mask_count(const torch::Tensor& mask) { return mask.sum(); }
torch::Tensor mask_count(const torch::Tensor& mask, int64_t dim) { return mask.sum(dim); }
}  // namespace

torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask) {
    auto s = masked_sum(values, mask);
    return s / (mask_count(mask) + 1e-8);
}

torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask, int64_t dim) {
    auto s = masked_sum(values, mask, dim);
    return s / (mask_count(mask, dim) + 1e-8);
}

torch::Tensor masked_var(const torch::Tensor& values, const torch::Tensor& mask, bool unbiased) {
    auto mean = masked_mean(values, mask);
    auto centered = values - mean;
    auto var = masked_mean(centered * centered, mask);
    if (unbiased) {
        auto n = mask_count(mask);
        const double n_value = n.item<double>();
        RLPT_CHECK(n_value > 1.0,
                   "masked_var: the unbiased variance needs more than one unmasked element, but the mask "
                   "sums to {} (shape {}); use a larger mini-batch or check the response mask",
                   n_value, detail::shape_str(mask));
        var = var * (n / (n - 1));  // Bessel factor with verl's promotion (float32 for integer masks)
    }
    return var;
}

torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, bool shift_mean) {
    auto mean = masked_mean(values, mask);
    auto var = masked_var(values, mask, /*unbiased=*/true);
    auto whitened = (values - mean) * torch::rsqrt(var + 1e-8);
    if (!shift_mean) whitened = whitened + mean;
    return whitened;
}

torch::Tensor clip_by_value(const torch::Tensor& x, const torch::Tensor& lo, const torch::Tensor& hi) {
    return torch::max(torch::min(x, hi), lo);
}

torch::Tensor entropy_from_logits(const torch::Tensor& logits) {
    detail::check_float(logits, "entropy_from_logits", "logits");
    RLPT_CHECK(logits.dim() >= 1, "entropy_from_logits: logits must have a vocabulary dimension");
    auto pd = torch::softmax(logits, -1);
    return torch::logsumexp(logits, -1) - (pd * logits).sum(-1);
}

torch::Tensor entropy_from_logits_chunked(const torch::Tensor& logits, int64_t chunk_rows) {
    detail::check_float(logits, "entropy_from_logits_chunked", "logits");
    RLPT_CHECK(logits.dim() >= 1, "entropy_from_logits_chunked: logits must have a vocabulary dimension");
    RLPT_CHECK(chunk_rows > 0, "entropy_from_logits_chunked: chunk_rows must be > 0, got {}", chunk_rows);
    auto out_shape = logits.sizes().vec();
    out_shape.pop_back();
    auto flat = logits.reshape({-1, logits.size(-1)});
    auto out = torch::empty({flat.size(0)}, logits.options().dtype(torch::kFloat32));
    for (int64_t i = 0; i < flat.size(0); i += chunk_rows) {
        int64_t end = std::min(flat.size(0), i + chunk_rows);
        auto chunk = flat.slice(0, i, end).to(torch::kFloat32);
        auto pd = torch::softmax(chunk, -1);
        out.slice(0, i, end).copy_(torch::logsumexp(chunk, -1) - (pd * chunk).sum(-1));
    }
    return out.reshape(out_shape);
}

torch::Tensor logprobs_from_logits(const torch::Tensor& logits, const torch::Tensor& labels) {
    detail::check_float(logits, "logprobs_from_logits", "logits");
    RLPT_CHECK(labels.defined() && labels.scalar_type() == torch::kInt64,
               "logprobs_from_logits: labels must be an int64 tensor");
    detail::check_same_device(logits, "logits", labels, "labels", "logprobs_from_logits");
    RLPT_CHECK(logits.dim() == labels.dim() + 1 && logits.sizes().slice(0, labels.dim()) == labels.sizes(),
               "logprobs_from_logits: logits {} must be labels {} plus a vocabulary dimension",
               detail::shape_str(logits), detail::shape_str(labels));
    if (labels.numel() > 0) {
        auto lo = labels.min().item<int64_t>();
        auto hi = labels.max().item<int64_t>();
        RLPT_CHECK(lo >= 0 && hi < logits.size(-1),
                   "logprobs_from_logits: labels must lie in [0, {}), got range [{}, {}]", logits.size(-1), lo, hi);
    }
    auto z = logits;
    if (z.scalar_type() != torch::kFloat32 && z.scalar_type() != torch::kFloat64) z = z.to(torch::kFloat32);
    auto picked = z.gather(-1, labels.unsqueeze(-1)).squeeze(-1);
    return picked - torch::logsumexp(z, -1);
}

torch::Tensor sum_pi_squared_from_logits(const torch::Tensor& logits) {
    detail::check_float(logits, "sum_pi_squared_from_logits", "logits");
    return torch::exp(torch::logsumexp(2.0 * logits, -1) - 2.0 * torch::logsumexp(logits, -1));
}

}  // namespace rlpt::algo
