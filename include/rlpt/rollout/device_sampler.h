#pragma once
// Next-token choice on the logits' own device (the GPU decode path of generator.cpp), with the
// semantics of choose_tokens (sampler.h) and torch operations only: the [b, V] logits never leave
// the device; the per-row draws go up as one [b] double tensor and the chosen tokens and their
// log-probs come back as one [2, b] download, the step's only host synchronisation.
//
// Method for one row of fp32 logits z (bfloat16 is converted first, T = temperature):
//   greedy:   the first index of max z (the smallest index among positions equal to the row
//             maximum; NaN never wins, a row of -inf / NaN gives 0, as first_argmax). Its
//             log-prob is z_y / T − logsumexp(z / T) with T = 1 when temperature is 0 — computed
//             with torch ops, not kernels::logprob_forward, whose label range check would cost a
//             second synchronisation on CUDA; the two agree to rounding of the log-sum-exp.
//   sampling: p = softmax(z / T) in fp32, exactly as choose_tokens computes it. With top-k or
//             top-p: a stable descending sort of z (-0 canonicalised to +0 first) gives the ranks
//             (z descending, index ascending); rank r is kept iff r < k and the cumulative kept
//             probability (double, rank order) BEFORE r is < top_p · (kept mass), so rank 0 is
//             always kept and the kept prefix is the smallest one that reaches top_p. The kept
//             mask goes back to index order, the kept p are summed in double in index order
//             (cumsum), and the token is the first index with p > 0 whose running sum exceeds
//             u · (sum of kept p); when rounding leaves that unreached, the last kept token with
//             p > 0. Its log-prob is log(p[token]) in double, rounded to float.
// Divergence from choose_tokens: only in the order of the double sums. choose_tokens sums the
// top-p mass by radix buckets and walks the draw in blocks, this path uses prefix sums; so a
// nucleus boundary or a draw that sits within double rounding (~1e-16 relative) of a running sum
// may land one token apart — the caveat sampler.h states for its radix select. On the same CPU
// tensors everything else is identical: the same p, the same tokens; sampled log-probs within
// one fp32 ulp (torch's log vs std::log), greedy ones within the log-sum-exp's rounding.
// On CUDA, softmax rounds differently from the CPU, so tokens agree with choose_tokens except
// where a draw sits within fp32 rounding of a running sum.
// Each row's result depends only on that row (all operations are row-wise); rows are never
// mixed. Errors as choose_tokens: a row whose chosen log-prob is not finite is a ValueError.
// Memory: sampling runs over groups of rows whose [rows, V] float64 sums and int64 sort order
// stay within kDeviceSamplerChunkBytes each (at least one row), so a step's temporaries do not
// grow with b; first and last indices come from argmax over byte masks, never an int64 [b, V]
// index tensor, and greedy is one argmax.
#include <torch/torch.h>

#include <vector>

#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sampler.h"

namespace rlpt::rollout {

// Bytes of one row group's [rows, V] float64 (or int64) temporary when sampling (see above).
inline constexpr int64_t kDeviceSamplerChunkBytes = int64_t{64} << 20;

// logits [b, V] float32 or bfloat16 on any device; `uniforms` one draw per row (ignored and may
// be empty when params.greedy). Reads the sampling fields of `params` (temperature, top_p,
// top_k, greedy), which must be valid (validate_sampling_params).
// chunk_bytes (> 0): the row groups' budget (tests use small ones).
TokenChoices choose_tokens_on_device(const torch::Tensor& logits, const SamplingParams& params,
                                     const std::vector<double>& uniforms,
                                     int64_t chunk_bytes = kDeviceSamplerChunkBytes);

}  // namespace rlpt::rollout
