#pragma once
// Off-policy correction between the rollout's sampling policy and the actor (verl's
// rollout_correction, ALGORITHMS §6): truncated importance-sampling weights, rejection
// sampling and off-policy diagnostics, computed once per training batch on the controller
// (verl's decoupled mode: after the actor's old log-probs, before the advantage).
//
// Inputs (all B×T):
//   old_log_prob      log π_old, the actor's recomputed log-probs (floating)
//   rollout_log_prob  log π_rollout, what the rollout recorded while sampling (floating)
//   response_mask     any dtype, non-zero = valid response token
// With lr = old_log_prob − rollout_log_prob and every exponent clamped to [−20, 20]:
//   token IS:    w_raw[i,t] = exp(lr[i,t])·m[i,t]
//   sequence IS: w_raw[i,t] = exp(Σ_t m·lr[i,·])·m[i,t]
//   TIS: w = min(w_raw, U); IcePop ("L_U"): w = w_raw inside [L, U], else 0 (mask unchanged).
//   Optional batch normalisation divides w by its mean (after the metrics).
// Rejection sampling (rollout_rs) ANDs a keep mask per option into the response mask.
// Metrics: verl's rollout_corr/* names (§6.5), from the pre-normalisation weights.
// Everything is computed in float64; the weights come back in old_log_prob's dtype, detached.
// Inputs on one device, outputs on it. Throws ValueError on differing shapes or devices, or when
// the mask has no valid token (B = 0 excepted: then nothing changes and there are no metrics).

#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/algo/rollout_correction_spec.h"

namespace rlpt::algo {

struct RolloutCorrectionParams {
    std::optional<std::string> rollout_is;  // unset | "token" | "sequence"
    IsThreshold is_threshold;               // parse_rollout_is_threshold
    bool batch_normalize = false;           // rollout_is_batch_normalize
    std::vector<RsOption> rs;               // parse_rollout_rs (empty: no rejection sampling)
};

struct RolloutCorrectionOutput {
    torch::Tensor rollout_is_weights;       // [B, T]; undefined when rollout_is is unset
    torch::Tensor response_mask;            // [B, T], input dtype; rejected tokens zeroed
    std::map<std::string, double> metrics;  // "rollout_corr/kl", "rollout_corr/rollout_is_mean", ...
};

RolloutCorrectionOutput compute_rollout_correction(const torch::Tensor& old_log_prob,
                                                   const torch::Tensor& rollout_log_prob,
                                                   const torch::Tensor& response_mask,
                                                   const RolloutCorrectionParams& params);

}  // namespace rlpt::algo
