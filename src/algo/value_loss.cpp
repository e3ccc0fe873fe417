#include "rlpt/algo/value_loss.h"

#include "algo/checks.h"
#include "rlpt/algo/kl.h"
#include "rlpt/algo/masked_ops.h"

namespace rlpt::algo {

ValueLossOutput compute_value_loss(const torch::Tensor& vpreds, const torch::Tensor& returns,
                                   const torch::Tensor& values, const torch::Tensor& response_mask,
                                   double cliprange_value, AggMode mode, const GlobalBatchInfo& info) {
    constexpr const char* kWhere = "compute_value_loss";
    detail::check_float(vpreds, kWhere, "vpreds");
    detail::check_2d(vpreds, kWhere, "vpreds");
    detail::check_float(returns, kWhere, "returns");
    detail::check_float(values, kWhere, "values");
    detail::check_like(vpreds, "vpreds", returns, "returns", kWhere);
    detail::check_like(vpreds, "vpreds", values, "values", kWhere);
    detail::check_like(vpreds, "vpreds", response_mask, "response_mask", kWhere);
    RLPT_CHECK(cliprange_value >= 0.0, "{}: cliprange_value must be >= 0, got {}", kWhere, cliprange_value);
    auto r = returns.to(vpreds.scalar_type());
    auto v = values.to(vpreds.scalar_type());
    auto vclip = clip_by_value(vpreds, v - cliprange_value, v + cliprange_value);
    auto l1 = (vpreds - r).square();
    auto l2 = (vclip - r).square();
    ValueLossOutput out;
    out.loss = 0.5 * agg_loss(torch::maximum(l1, l2), response_mask, mode, info);
    torch::NoGradGuard no_grad;
    out.metrics["critic/vf_loss"] = out.loss.item<double>();
    out.metrics["critic/vf_clipfrac"] =
        masked_mean((l2 > l1).to(vpreds.scalar_type()).detach(), response_mask).item<double>();
    out.metrics["critic/vpred_mean"] = masked_mean(vpreds.detach(), response_mask).item<double>();
    return out;
}

torch::Tensor entropy_loss(const torch::Tensor& entropy, const torch::Tensor& response_mask, AggMode mode,
                           const GlobalBatchInfo& info) {
    return agg_loss(entropy, response_mask, mode, info);
}

PolicyLossOutput compute_actor_loss(const ActorLossInputs& in, const ActorLossConfig& cfg) {
    PolicyLossOutput out = compute_policy_loss(cfg.loss_mode, in.policy, cfg.policy);
    const auto& mask = in.policy.response_mask;
    const auto mode = cfg.policy.loss_agg_mode;
    const auto& info = cfg.policy.global_batch_info;
    out.metrics["actor/pg_loss"] = out.loss.detach().item<double>();
    torch::Tensor loss = out.loss;
    if (in.entropy.defined()) {
        detail::check_like(in.policy.log_prob, "log_prob", in.entropy, "entropy", "compute_actor_loss");
        auto ent = entropy_loss(in.entropy, mask, mode, info);
        loss = loss - cfg.entropy_coeff * ent;
        out.metrics["actor/entropy_loss"] = ent.detach().item<double>();
    } else {
        RLPT_CHECK(cfg.entropy_coeff == 0.0, "compute_actor_loss: entropy_coeff = {} but no entropy tensor was given",
                   cfg.entropy_coeff);
    }
    if (cfg.use_kl_loss) {
        RLPT_CHECK(in.ref_log_prob.defined(), "compute_actor_loss: use_kl_loss is set but ref_log_prob was not given");
        auto kl = kl_loss(in.policy.log_prob, in.ref_log_prob, mask, cfg.kl_loss_type, mode, info);
        loss = loss + cfg.kl_loss_coef * kl;
        out.metrics["actor/kl_loss"] = kl.detach().item<double>();
        out.metrics["actor/kl_coef"] = cfg.kl_loss_coef;
    }
    out.loss = loss;
    return out;
}

}  // namespace rlpt::algo
