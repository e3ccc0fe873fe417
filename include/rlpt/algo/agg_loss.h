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

#include <optional>
#include <string>
#include <vector>

namespace rlpt::algo {

enum class AggMode {
    kTokenMean,           // "token-mean" (default)
    kTokenSum,            // "token-sum"
    kSeqMeanTokenSum,     // "seq-mean-token-sum"
    kSeqMeanTokenMean,    // "seq-mean-token-mean"
    kSeqMeanTokenSumNorm  // "seq-mean-token-sum-norm" (Dr.GRPO)
};

// Parses verl's mode names; throws ValueError naming the valid ones.
AggMode parse_agg_mode(const std::string& name);
const char* agg_mode_name(AggMode mode);
std::vector<std::string> agg_mode_names();

// verl's config.global_batch_info. Defaults describe a single, unsplit batch.
struct GlobalBatchInfo {
    int64_t dp_size = 1;
    // Σ loss_mask over the whole mini-batch on all DP ranks (token-mean). Unset: the local Σ mask;
    // required (ValueError) when dp_size > 1.
    std::optional<double> batch_num_tokens;
    // Number of sequences of the whole mini-batch (seq-mean-* modes; verl: ppo_mini_batch_size ·
    // rollout.n). Unset: the local number of rows that have at least one valid token; required
    // (ValueError) when dp_size > 1, because a local count cannot be shard-invariant.
    std::optional<double> global_batch_size;
    // Divisor of seq-mean-token-sum-norm. Unset: T = loss_mask.size(-1). Set it explicitly when
    // micro-batches are padded to different widths, otherwise shards use different constants.
    std::optional<double> loss_scale_factor;
};

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
