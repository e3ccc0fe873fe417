#pragma once
// Loss aggregation (verl core_algos.agg_loss) with global normalisers, so that a loss computed on
// one shard of a mini-batch is already that shard's share of the whole mini-batch's loss.
//
// How the engine must combine shard losses (this is what makes the result independent of the
// number of DP ranks and micro-batches):
//   * every DP rank r splits its shard into micro-batches mb and calls agg_loss on each with the
//     SAME GlobalBatchInfo (dp_size = D, batch_num_tokens = mask sum of the whole mini-batch over
//     all D ranks, global_batch_size = number of sequences in the whole mini-batch);
//   * gradients (and loss values) are SUMMED over the micro-batches of a rank;
//   * the per-rank results are AVERAGED over the D ranks (the usual gradient all-reduce mean).
// Then (1/D) Σ_r Σ_mb agg_loss(mb) == agg_loss(whole mini-batch, dp_size = 1).
// Devices: loss_mat and loss_mask on one device (ValueError otherwise); the loss is on it.

#include <torch/torch.h>

#include "rlpt/algo/loss_config.h"  // AggMode, GlobalBatchInfo

namespace rlpt::algo {

// loss_mat, loss_mask: B×T (mask any dtype, non-zero = valid). Returns a 0-dim tensor of
// loss_mat's dtype, differentiable w.r.t. loss_mat.
//   token-mean:              Σ L·m / batch_num_tokens · dp_size
//   token-sum:               Σ L·m · dp_size
//   seq-mean-token-sum:      Σ_i (Σ_t L·m)·[Σ_t m > 0] / global_batch_size · dp_size
//   seq-mean-token-mean:     Σ_i (Σ_t L·m / (Σ_t m + 1e-8))·[Σ_t m > 0] / global_batch_size · dp_size
//   seq-mean-token-sum-norm: seq-mean-token-sum / loss_scale_factor
// A zero normaliser (all-zero mask with no global count given, or a given count of 0) yields an
// exact 0 with a zero gradient instead of verl's 0/0 = NaN.
torch::Tensor agg_loss(const torch::Tensor& loss_mat, const torch::Tensor& loss_mask, AggMode mode,
                       const GlobalBatchInfo& info = {});

}  // namespace rlpt::algo
