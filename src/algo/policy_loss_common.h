#pragma once
// Shared pieces of the policy-loss implementations (private to src/algo).

#include <torch/torch.h>

#include "rlpt/algo/policy_loss.h"

namespace rlpt::algo::detail {

// Checks shapes/dtypes of the inputs (and the IS weights when given); `where` names the loss.
void check_policy_inputs(const PolicyLossInputs& in, const char* where);

// ε_l, ε_h >= 0 (ValueError otherwise).
void check_clip_ratios(const PolicyLossConfig& cfg, const char* where);

// loss_tok * rollout_is_weights when the weights are given.
torch::Tensor apply_is_weights(const torch::Tensor& loss_tok, const PolicyLossInputs& in);

// masked_mean(values, mask) as a plain double (no graph).
double masked_mean_value(const torch::Tensor& values, const torch::Tensor& mask);

}  // namespace rlpt::algo::detail
