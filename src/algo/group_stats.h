#pragma once
// Per-group statistics of per-sample scores, computed in float64 (private to src/algo).

#include <torch/torch.h>

#include "rlpt/algo/advantage.h"

namespace rlpt::algo::detail {

struct GroupStats {
    GroupIndex index;
    torch::Tensor scores;  // float64 [B]
    torch::Tensor count;   // float64 [G]
    torch::Tensor sum;     // float64 [G]
    torch::Tensor mean;    // float64 [G]; 0 for groups of one (verl's singleton baseline)
    torch::Tensor std;     // float64 [G]; unbiased; 1 for groups of one
};

// scores: [B] floating; index: int64 [B] arbitrary labels.
GroupStats group_stats(const torch::Tensor& scores, const torch::Tensor& index, const char* where);

// Validates the B×T rewards/mask pair and returns s = Σ_t rewards (rewards' dtype).
torch::Tensor outcome_scores(const torch::Tensor& rewards, const torch::Tensor& mask, const char* where);

// Broadcasts a per-sample float64 advantage [B] over T, casts to `like`'s dtype and masks it.
AdvantageOutput outcome_output(const torch::Tensor& per_sample, const torch::Tensor& like, const torch::Tensor& mask);

}  // namespace rlpt::algo::detail
