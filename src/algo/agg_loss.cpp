#include "rlpt/algo/agg_loss.h"

#include <fmt/format.h>

#include "algo/checks.h"
#include "rlpt/algo/masked_ops.h"

namespace rlpt::algo {

namespace {

// numerator / denominator, or an exact 0 (keeping the graph) when the denominator is 0.
torch::Tensor safe_div(const torch::Tensor& numerator, double denominator) {
    if (denominator == 0.0) return numerator * 0.0;
    return numerator / denominator;
}

}  // namespace

torch::Tensor agg_loss(const torch::Tensor& loss_mat, const torch::Tensor& loss_mask, AggMode mode,
                       const GlobalBatchInfo& info) {
    constexpr const char* kWhere = "agg_loss";
    detail::check_float(loss_mat, kWhere, "loss_mat");
    detail::check_2d(loss_mat, kWhere, "loss_mat");
    detail::check_like(loss_mat, "loss_mat", loss_mask, "loss_mask", kWhere);
    RLPT_CHECK(info.dp_size >= 1, "agg_loss: dp_size must be >= 1, got {}", info.dp_size);
    const double dp = static_cast<double>(info.dp_size);
    auto mask = detail::mask_as(loss_mask, loss_mat);

    if (mode == AggMode::kTokenMean || mode == AggMode::kTokenSum) {
        auto total = masked_sum(loss_mat, loss_mask);
        if (mode == AggMode::kTokenSum) return total * dp;
        RLPT_CHECK(info.batch_num_tokens || info.dp_size == 1,
                   "agg_loss(token-mean): batch_num_tokens (mask sum over the whole mini-batch on all "
                   "DP ranks) is required when dp_size = {} > 1",
                   info.dp_size);
        double n = info.batch_num_tokens ? *info.batch_num_tokens : mask.sum().item<double>();
        RLPT_CHECK(n >= 0.0, "agg_loss(token-mean): batch_num_tokens must be >= 0, got {}", n);
        return safe_div(total, n) * dp;
    }

    RLPT_CHECK(info.global_batch_size || info.dp_size == 1,
               "agg_loss({}): global_batch_size (sequences in the whole mini-batch) is required when "
               "dp_size = {} > 1",
               agg_mode_name(mode), info.dp_size);
    auto tokens_per_seq = loss_mask.sum(-1);  // mask dtype: the +1e-8 promotes as in verl
    auto seq_mask = (tokens_per_seq > 0).to(loss_mat.scalar_type());
    auto seq_losses = masked_sum(loss_mat, loss_mask, -1);
    if (mode == AggMode::kSeqMeanTokenMean) seq_losses = seq_losses / (tokens_per_seq + 1e-8);
    double n_seq = info.global_batch_size ? *info.global_batch_size : seq_mask.sum().item<double>();
    RLPT_CHECK(n_seq >= 0.0, "agg_loss({}): global_batch_size must be >= 0, got {}", agg_mode_name(mode), n_seq);
    auto loss = safe_div(masked_sum(seq_losses, seq_mask), n_seq) * dp;
    if (mode == AggMode::kSeqMeanTokenSumNorm) {
        double scale = info.loss_scale_factor ? *info.loss_scale_factor : static_cast<double>(loss_mat.size(-1));
        RLPT_CHECK(scale > 0.0, "agg_loss(seq-mean-token-sum-norm): loss_scale_factor must be > 0, got {}", scale);
        loss = loss / scale;
    }
    return loss;
}

}  // namespace rlpt::algo
