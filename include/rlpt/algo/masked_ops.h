#pragma once
// Masked tensor helpers shared by the RL algorithms (verl's torch_functional.py semantics).
//
// Conventions for every function here:
//  * `values` are floating point (float32 or float64; reduced precision is accepted where noted).
//  * `mask` has the same shape as `values` and any dtype (bool, int, float); a non-zero entry
//    marks a valid element. Numeric masks are also used as weights (values * mask), as verl does.
//  * Tensor arguments on one device (ValueError naming the two otherwise); results on it.
//  * Results keep the dtype of `values`. Normalisers follow torch's promotion of
//    `mask.sum() + 1e-8`, exactly as verl: a bool/integer mask gives a float32 count, in which
//    the epsilon rounds away for any count >= 1 (so 3 of 13 -> exactly 3/13); a float64 mask keeps
//    the epsilon visible (3/(13 + 1e-8) = 0.23076923059...). A zero count gives 0, not NaN.
// All functions are differentiable w.r.t. `values` unless stated otherwise.

#include <torch/torch.h>

#include <cstdint>

namespace rlpt::algo {

// Σ where(mask, values, 0) * mask over all elements (0-dim result). NaNs outside the mask are
// dropped (where() runs before the multiplication).
torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask);
// Same, reduced along `dim` only.
torch::Tensor masked_sum(const torch::Tensor& values, const torch::Tensor& mask, int64_t dim);

// masked_sum / (Σ mask + 1e-8) (see the promotion note above). A fully masked input gives 0.
torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask);
torch::Tensor masked_mean(const torch::Tensor& values, const torch::Tensor& mask, int64_t dim);

// Variance over the masked elements: masked_mean((v - masked_mean(v))²); with `unbiased` it is
// multiplied by n/(n-1), n = Σ mask. Throws ValueError when unbiased and n <= 1 (verl raises on
// n == 0 and n == 1). 0-dim result.
torch::Tensor masked_var(const torch::Tensor& values, const torch::Tensor& mask, bool unbiased = true);

// (v - mean) * rsqrt(var_unbiased + 1e-8) applied to EVERY element, masked ones included (verl's
// behaviour; callers that need zeros outside the mask multiply by the mask themselves). With
// shift_mean=false the mean is added back. Throws like masked_var when Σ mask <= 1.
torch::Tensor masked_whiten(const torch::Tensor& values, const torch::Tensor& mask, bool shift_mean = true);

// max(min(x, hi), lo), element-wise with broadcasting.
torch::Tensor clip_by_value(const torch::Tensor& x, const torch::Tensor& lo, const torch::Tensor& hi);

// Categorical entropy from logits: logsumexp(z) - Σ softmax(z)·z over the last dim.
// logits (..., V) -> (...), same dtype as logits.
torch::Tensor entropy_from_logits(const torch::Tensor& logits);

// Same value computed `chunk_rows` rows at a time (leading dims flattened) in float32, to bound
// peak memory for large vocabularies. logits (..., V) any floating dtype -> (...) float32.
torch::Tensor entropy_from_logits_chunked(const torch::Tensor& logits, int64_t chunk_rows = 2048);

// log softmax(logits)[label]: logits (..., V) floating, labels (...) int64 in [0, V).
// float32/float64 logits: z[label] - logsumexp(z) in that dtype (verl's logprobs_from_logits_v2).
// Other floating dtypes (bf16/fp16) are upcast to float32 and the result is float32 (verl uses a
// bf16 log_softmax there; float32 is the sounder choice and the caller gets it explicitly).
torch::Tensor logprobs_from_logits(const torch::Tensor& logits, const torch::Tensor& labels);

// Σ_v π_v² = exp(logsumexp(2z) - 2·logsumexp(z)) over the last dim: (..., V) -> (...).
torch::Tensor sum_pi_squared_from_logits(const torch::Tensor& logits);

}  // namespace rlpt::algo
