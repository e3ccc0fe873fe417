// Covariance-based and sequence-level policy losses: clip_cov, kl_cov, geo_mean (GMPO).
#include <limits>

#include "algo/checks.h"
#include "algo/policy_loss_common.h"
#include "rlpt/algo/masked_ops.h"
#include "rlpt/algo/policy_loss.h"

namespace rlpt::algo {

PolicyLossOutput compute_policy_loss_clip_cov(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(clip_cov)";
    detail::check_policy_inputs(in, kWhere);
    RLPT_CHECK(in.generator.has_value(),
               "{}: draws a random subset of tokens and needs a seeded generator (PolicyLossInputs::generator); "
               "torch's global RNG would make resumed runs differ",
               kWhere);
    RLPT_CHECK(in.generator->device().is_cpu(),
               "{}: the generator must be a CPU generator (the draws are made on the host whatever the inputs' "
               "device), got one on {}",
               kWhere, in.generator->device().str());
    detail::check_clip_ratios(cfg, kWhere);
    RLPT_CHECK(cfg.clip_cov_ratio > 0.0, "{}: clip_cov_ratio must be > 0, got {}", kWhere, cfg.clip_cov_ratio);
    const auto& a = in.advantages;
    const auto dt = in.log_prob.scalar_type();
    auto lr = in.log_prob - in.old_log_prob;
    auto ratio = torch::exp(lr);
    auto l1 = -a * ratio;
    auto l2 = -a * torch::clamp(ratio, 1.0 - cfg.eps_low(), 1.0 + cfg.eps_high());
    auto valid = in.response_mask.to(torch::kBool);

    torch::Tensor corr;
    {
        torch::NoGradGuard no_grad;
        auto logp = in.log_prob.detach();
        auto clipped_by_origin = (l2 > l1) & valid;
        auto cov = (a - masked_mean(a, in.response_mask)) * (logp - masked_mean(logp, in.response_mask));
        auto candidates = (cov < cfg.clip_cov_ub) & (cov > cfg.clip_cov_lb) & valid & ~clipped_by_origin;
        const double n_valid = detail::mask_as(in.response_mask, logp).sum().item<double>();
        const int64_t clip_num = std::max<int64_t>(static_cast<int64_t>(cfg.clip_cov_ratio * n_valid), 1);
        auto flat_idx = torch::nonzero(candidates.reshape({-1})).reshape({-1});
        corr = torch::ones_like(a);
        if (flat_idx.numel() > 0) {
            // Drawn on the host from the (CPU) generator, then moved: the same subset on any device.
            auto perm = torch::randperm(flat_idx.numel(), in.generator, torch::TensorOptions().dtype(torch::kLong))
                            .to(flat_idx.device());
            auto chosen = flat_idx.index_select(0, perm.slice(0, 0, std::min(clip_num, flat_idx.numel())));
            corr.reshape({-1}).index_fill_(0, chosen, 0.0);
        }
    }
    auto loss_tok = torch::maximum(l1, l2) * corr;

    PolicyLossOutput out;
    out.loss =
        agg_loss(detail::apply_is_weights(loss_tok, in), in.response_mask, cfg.loss_agg_mode, cfg.global_batch_info);
    out.metrics["actor/pg_clipfrac"] = detail::masked_mean_value((corr == 0).to(dt), in.response_mask);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    return out;
}

PolicyLossOutput compute_policy_loss_kl_cov(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(kl_cov)";
    detail::check_policy_inputs(in, kWhere);
    RLPT_CHECK(cfg.kl_cov_ratio > 0.0, "{}: kl_cov_ratio must be > 0, got {}", kWhere, cfg.kl_cov_ratio);
    const auto& a = in.advantages;
    auto lr = in.log_prob - in.old_log_prob;
    auto abs_kl = lr.abs();
    auto ratio = torch::exp(lr);
    auto base = -a * ratio;
    auto with_kl = base + cfg.ppo_kl_coef * abs_kl;

    torch::Tensor selected;
    {
        torch::NoGradGuard no_grad;
        auto valid = in.response_mask.to(torch::kBool).reshape({-1});
        auto valid_idx = torch::nonzero(valid).reshape({-1});
        selected = torch::zeros({valid.numel()}, valid.options());
        const int64_t n = valid_idx.numel();
        if (n > 0) {
            auto adv_v = a.detach().reshape({-1}).index_select(0, valid_idx).to(torch::kFloat64);
            auto logp_v = in.log_prob.detach().reshape({-1}).index_select(0, valid_idx).to(torch::kFloat64);
            auto cov = (adv_v - adv_v.mean()) * (logp_v - logp_v.mean());
            const int64_t k = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(n) * cfg.kl_cov_ratio));
            auto top = std::get<1>(torch::topk(cov, std::min(k, n)));
            selected.index_fill_(0, valid_idx.index_select(0, top), true);
        }
        selected = selected.reshape(a.sizes());
    }
    auto loss_tok = torch::where(selected, with_kl, base);

    PolicyLossOutput out;
    out.loss =
        agg_loss(detail::apply_is_weights(loss_tok, in), in.response_mask, cfg.loss_agg_mode, cfg.global_batch_info);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(abs_kl, in.response_mask);
    return out;
}

PolicyLossOutput compute_policy_loss_geo_mean(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(geo_mean)";
    detail::check_policy_inputs(in, kWhere);
    detail::check_clip_ratios(cfg, kWhere);
    const auto& gbi = cfg.global_batch_info;
    RLPT_CHECK(gbi.dp_size >= 1, "{}: dp_size must be >= 1, got {}", kWhere, gbi.dp_size);
    RLPT_CHECK(gbi.global_batch_size || gbi.dp_size == 1, "{}: global_batch_size is required when dp_size = {} > 1",
               kWhere, gbi.dp_size);
    const auto& a = in.advantages;
    const auto dt = in.log_prob.scalar_type();
    auto lr = in.log_prob - in.old_log_prob;
    auto sgn = torch::sign(a);
    auto lr_clamped = torch::clamp(lr, -cfg.eps_low(), cfg.eps_high());
    auto lr_min = sgn * torch::minimum(sgn * lr, sgn * lr_clamped);
    auto len = in.response_mask.sum(-1);  // mask dtype: the +1e-8 promotes as in verl
    auto seq_ratio = torch::exp(masked_sum(lr_min, in.response_mask, -1) / (len + 1e-8));
    auto seq_adv = masked_sum(a, in.response_mask, -1) / (len + 1e-8);
    auto seq_loss = -seq_adv * seq_ratio;
    if (in.rollout_is_weights.defined()) {
        auto log_w = torch::log(in.rollout_is_weights.to(dt) + 1e-10);
        seq_loss = seq_loss * torch::exp(masked_sum(log_w, in.response_mask, -1) / (len + 1e-8));
    }
    const double n_rows = gbi.global_batch_size ? *gbi.global_batch_size : static_cast<double>(a.size(0));
    RLPT_CHECK(n_rows >= 0.0, "{}: global_batch_size must be >= 0, got {}", kWhere, n_rows);

    PolicyLossOutput out;
    out.loss = (n_rows == 0.0 ? seq_loss.sum() * 0.0 : seq_loss.sum() / n_rows) * static_cast<double>(gbi.dp_size);
    auto clipped = (lr != lr_clamped);
    out.metrics["actor/pg_clipfrac"] = detail::masked_mean_value((clipped & (a > 0)).to(dt), in.response_mask);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    out.metrics["actor/pg_clipfrac_lower"] = detail::masked_mean_value((clipped & (a < 0)).to(dt), in.response_mask);
    return out;
}

}  // namespace rlpt::algo
