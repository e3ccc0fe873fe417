// Policy losses: vanilla (PPO + dual-clip), gspo, sapo, gpg, cispo, dro, dppo_tv, dppo_kl; and the
// dispatcher.
#include "rlpt/algo/policy_loss.h"

#include <fmt/format.h>

#include "algo/checks.h"
#include "algo/policy_loss_common.h"
#include "rlpt/algo/masked_ops.h"

namespace rlpt::algo {

namespace detail {

void check_policy_inputs(const PolicyLossInputs& in, const char* where) {
    check_float(in.log_prob, where, "log_prob");
    check_2d(in.log_prob, where, "log_prob");
    check_float(in.old_log_prob, where, "old_log_prob");
    check_float(in.advantages, where, "advantages");
    check_like(in.log_prob, "log_prob", in.old_log_prob, "old_log_prob", where);
    check_like(in.log_prob, "log_prob", in.advantages, "advantages", where);
    check_like(in.log_prob, "log_prob", in.response_mask, "response_mask", where);
    if (in.rollout_is_weights.defined()) {
        check_float(in.rollout_is_weights, where, "rollout_is_weights");
        check_like(in.log_prob, "log_prob", in.rollout_is_weights, "rollout_is_weights", where);
    }
}

void check_clip_ratios(const PolicyLossConfig& cfg, const char* where) {
    RLPT_CHECK(cfg.eps_low() >= 0.0 && cfg.eps_high() >= 0.0,
               "{}: clip ratios must be >= 0, got clip_ratio_low {} and clip_ratio_high {}", where, cfg.eps_low(),
               cfg.eps_high());
}

torch::Tensor apply_is_weights(const torch::Tensor& loss_tok, const PolicyLossInputs& in) {
    if (!in.rollout_is_weights.defined()) return loss_tok;
    return loss_tok * in.rollout_is_weights.to(loss_tok.scalar_type());
}

double masked_mean_value(const torch::Tensor& values, const torch::Tensor& mask) {
    torch::NoGradGuard no_grad;
    return masked_mean(values.detach(), mask).item<double>();
}

}  // namespace detail

namespace {

torch::Tensor aggregate(const torch::Tensor& loss_tok, const PolicyLossInputs& in, const PolicyLossConfig& cfg,
                        AggMode mode) {
    return agg_loss(detail::apply_is_weights(loss_tok, in), in.response_mask, mode, cfg.global_batch_info);
}

}  // namespace

PolicyLossOutput compute_policy_loss_vanilla(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(vanilla)";
    detail::check_policy_inputs(in, kWhere);
    detail::check_clip_ratios(cfg, kWhere);
    RLPT_CHECK(cfg.clip_ratio_c > 1.0, "{}: clip_ratio_c (dual-clip lower bound) must be > 1, got {}", kWhere,
               cfg.clip_ratio_c);
    const auto& a = in.advantages;
    const auto dt = in.log_prob.scalar_type();
    auto lr = torch::clamp(in.log_prob - in.old_log_prob, -20.0, 20.0);
    auto ratio = torch::exp(lr);
    auto l1 = -a * ratio;
    auto l2 = -a * torch::clamp(ratio, 1.0 - cfg.eps_low(), 1.0 + cfg.eps_high());
    auto c1 = torch::maximum(l1, l2);
    auto l3 = -a * cfg.clip_ratio_c;
    auto c2 = torch::minimum(l3, c1);
    auto negative = a < 0;
    auto loss_tok = torch::where(negative, c2, c1);

    PolicyLossOutput out;
    out.loss = aggregate(loss_tok, in, cfg, cfg.loss_agg_mode);
    out.metrics["actor/pg_clipfrac"] = detail::masked_mean_value((l2 > l1).to(dt), in.response_mask);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    out.metrics["actor/pg_clipfrac_lower"] = detail::masked_mean_value(((c1 > l3) & negative).to(dt), in.response_mask);
    return out;
}

PolicyLossOutput compute_policy_loss_gspo(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(gspo)";
    detail::check_policy_inputs(in, kWhere);
    detail::check_clip_ratios(cfg, kWhere);
    const auto& a = in.advantages;
    const auto dt = in.log_prob.scalar_type();
    auto lr = in.log_prob - in.old_log_prob;
    auto seq_len = in.response_mask.sum(-1).clamp_min(1);
    auto seq_log_ratio = masked_sum(lr, in.response_mask, -1) / seq_len;
    auto log_ratio = in.log_prob - in.log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1);
    auto ratio = torch::exp(torch::clamp_max(log_ratio, 10.0));
    auto l1 = -a * ratio;
    auto l2 = -a * torch::clamp(ratio, 1.0 - cfg.eps_low(), 1.0 + cfg.eps_high());
    auto loss_tok = torch::maximum(l1, l2);

    PolicyLossOutput out;
    out.loss = aggregate(loss_tok, in, cfg, AggMode::kSeqMeanTokenMean);
    out.metrics["actor/pg_clipfrac"] = detail::masked_mean_value((l2 > l1).to(dt), in.response_mask);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    out.metrics["actor/pg_clipfrac_lower"] = 0.0;
    return out;
}

PolicyLossOutput compute_policy_loss_sapo(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(sapo)";
    detail::check_policy_inputs(in, kWhere);
    RLPT_CHECK(cfg.tau_pos > 0.0 && cfg.tau_neg > 0.0, "{}: tau_pos and tau_neg must be > 0, got {} and {}", kWhere,
               cfg.tau_pos, cfg.tau_neg);
    const auto& a = in.advantages;
    auto lr = torch::clamp(in.log_prob - in.old_log_prob, -20.0, 20.0);
    auto ratio = torch::exp(lr);
    auto tau =
        torch::where(a > 0, torch::full({}, cfg.tau_pos, a.options()), torch::full({}, cfg.tau_neg, a.options()));
    auto gate = torch::sigmoid(tau * (ratio - 1.0)) * (4.0 / tau);
    auto loss_tok = -gate * a;

    PolicyLossOutput out;
    out.loss = aggregate(loss_tok, in, cfg, AggMode::kSeqMeanTokenMean);
    out.metrics["actor/pg_clipfrac"] = 0.0;
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    out.metrics["actor/pg_clipfrac_lower"] = 0.0;
    return out;
}

PolicyLossOutput compute_policy_loss_gpg(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    detail::check_policy_inputs(in, "policy_loss(gpg)");
    PolicyLossOutput out;
    out.loss = aggregate(-in.log_prob * in.advantages, in, cfg, cfg.loss_agg_mode);
    return out;
}

PolicyLossOutput compute_policy_loss_cispo(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(cispo)";
    detail::check_policy_inputs(in, kWhere);
    detail::check_clip_ratios(cfg, kWhere);
    const auto dt = in.log_prob.scalar_type();
    auto lr = torch::clamp(in.log_prob - in.old_log_prob, -20.0, 20.0);
    auto ratio = torch::exp(lr);
    auto clipped = torch::clamp(ratio, 1.0 - cfg.eps_low(), 1.0 + cfg.eps_high());
    auto loss_tok = -clipped.detach() * in.advantages * in.log_prob;

    PolicyLossOutput out;
    out.loss = aggregate(loss_tok, in, cfg, cfg.loss_agg_mode);
    out.metrics["actor/pg_clipfrac"] = detail::masked_mean_value((ratio != clipped).to(dt), in.response_mask);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    out.metrics["actor/pg_clipfrac_lower"] = 0.0;
    return out;
}

PolicyLossOutput compute_policy_loss_dro(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    constexpr const char* kWhere = "policy_loss(dro)";
    detail::check_policy_inputs(in, kWhere);
    RLPT_CHECK(cfg.dro_beta.has_value() && *cfg.dro_beta > 0.0, "{}: actor.policy_loss.dro_beta must be set and > 0{}",
               kWhere, cfg.dro_beta ? fmt::format(", got {}", *cfg.dro_beta) : std::string(" (it is unset)"));
    auto lr = in.log_prob - in.old_log_prob;
    auto loss_tok = -(in.log_prob * in.advantages - 0.5 * *cfg.dro_beta * lr * lr);

    PolicyLossOutput out;
    out.loss = aggregate(loss_tok, in, cfg, cfg.loss_agg_mode);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    return out;
}

namespace {

// dppo_tv / dppo_kl share everything but the trust-region test.
template <typename ValidFn>
PolicyLossOutput dppo(const PolicyLossInputs& in, const PolicyLossConfig& cfg, const char* where, ValidFn valid_fn) {
    detail::check_policy_inputs(in, where);
    detail::check_clip_ratios(cfg, where);
    RLPT_CHECK(cfg.clip_ratio_c > 0.0, "{}: clip_ratio_c (ratio truncation) must be > 0, got {}", where,
               cfg.clip_ratio_c);
    const auto& a = in.advantages;
    const auto dt = in.log_prob.scalar_type();
    auto lr = torch::clamp(in.log_prob - in.old_log_prob, -20.0, 20.0);
    auto ratio = torch::exp(lr);
    auto truncated = torch::clamp_max(ratio, cfg.clip_ratio_c).detach();
    torch::Tensor valid;
    {
        torch::NoGradGuard no_grad;
        auto p = torch::exp(in.log_prob.detach());
        auto p_old = torch::exp(in.old_log_prob.detach());
        valid = valid_fn(p, p_old, in.log_prob.detach(), in.old_log_prob.detach(), a > 0).to(dt);
    }
    auto loss_tok = -a * truncated * in.log_prob * valid;

    PolicyLossOutput out;
    out.loss = aggregate(loss_tok, in, cfg, cfg.loss_agg_mode);
    out.metrics["actor/pg_clipfrac"] = detail::masked_mean_value(1.0 - valid, in.response_mask);
    out.metrics["actor/ppo_kl"] = detail::masked_mean_value(-lr, in.response_mask);
    out.metrics["actor/pg_clipfrac_lower"] =
        detail::masked_mean_value((ratio > cfg.clip_ratio_c).to(dt) * valid, in.response_mask);
    return out;
}

}  // namespace

PolicyLossOutput compute_policy_loss_dppo_tv(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    return dppo(in, cfg, "policy_loss(dppo_tv)",
                [&](const torch::Tensor& p, const torch::Tensor& p_old, const torch::Tensor&, const torch::Tensor&,
                    const torch::Tensor& positive) {
                    return torch::where(positive, (p - p_old) <= cfg.eps_high(), (p - p_old) >= -cfg.eps_low());
                });
}

PolicyLossOutput compute_policy_loss_dppo_kl(const PolicyLossInputs& in, const PolicyLossConfig& cfg) {
    return dppo(in, cfg, "policy_loss(dppo_kl)",
                [&](const torch::Tensor& p, const torch::Tensor& p_old, const torch::Tensor& logp,
                    const torch::Tensor& logp_old, const torch::Tensor& positive) {
                    auto bkl =
                        p_old * (logp_old - logp) + (1.0 - p_old) * torch::log((1.0 - p_old + 1e-8) / (1.0 - p + 1e-8));
                    return torch::where(positive, (bkl <= cfg.eps_high()) | (p <= p_old),
                                        (bkl <= cfg.eps_low()) | (p >= p_old));
                });
}

namespace {

using LossFn = PolicyLossOutput (*)(const PolicyLossInputs&, const PolicyLossConfig&);

struct LossEntry {
    const char* name;
    LossFn fn;
};
constexpr LossEntry kLosses[] = {
    {"vanilla", compute_policy_loss_vanilla},   {"gspo", compute_policy_loss_gspo},
    {"sapo", compute_policy_loss_sapo},         {"gpg", compute_policy_loss_gpg},
    {"cispo", compute_policy_loss_cispo},       {"dro", compute_policy_loss_dro},
    {"clip_cov", compute_policy_loss_clip_cov}, {"kl_cov", compute_policy_loss_kl_cov},
    {"geo_mean", compute_policy_loss_geo_mean}, {"dppo_tv", compute_policy_loss_dppo_tv},
    {"dppo_kl", compute_policy_loss_dppo_kl},
};
constexpr const char* kUnsupported[] = {"bypass_mode"};

}  // namespace

std::vector<std::string> policy_loss_names() {
    std::vector<std::string> names;
    for (const auto& e : kLosses) names.emplace_back(e.name);
    return names;
}

PolicyLossOutput compute_policy_loss(const std::string& loss_mode, const PolicyLossInputs& in,
                                     const PolicyLossConfig& cfg) {
    for (const auto& e : kLosses)
        if (loss_mode == e.name) return e.fn(in, cfg);
    for (const char* u : kUnsupported)
        RLPT_CHECK(loss_mode != u, "policy loss_mode '{}' is not supported by rlpt; supported modes: {}", loss_mode,
                   fmt::join(policy_loss_names(), ", "));
    RLPT_THROW(ValueError, "unknown policy loss_mode '{}'; valid modes: {}", loss_mode,
               fmt::join(policy_loss_names(), ", "));
}

}  // namespace rlpt::algo
