#include "rlpt/algo/kl.h"

#include <algorithm>

#include "algo/checks.h"
#include "rlpt/algo/masked_ops.h"

namespace rlpt::algo {

namespace {

constexpr const char* kValidKlNames =
    "kl, k1, abs, mse, k2, low_var_kl, k3 (each optionally with a '+' suffix for the k2 straight-through "
    "gradient)";

torch::Tensor kl_forward(const torch::Tensor& logp, const torch::Tensor& ref, KlEstimator e) {
    switch (e) {
        case KlEstimator::kK1: return logp - ref;
        case KlEstimator::kAbs: return (logp - ref).abs();
        case KlEstimator::kK2: return 0.5 * (logp - ref).square();
        case KlEstimator::kK3: {
            auto kl = torch::clamp(ref - logp, -20.0, 20.0);
            return torch::clamp(torch::exp(kl) - kl - 1.0, -10.0, 10.0);
        }
    }
    RLPT_THROW(InternalError, "kl_penalty: unknown KlEstimator value {}", static_cast<int>(e));
}

}  // namespace

KlType parse_kl_type(const std::string& name) {
    KlType t;
    std::string base = name;
    if (!base.empty() && base.back() == '+') {
        t.straight_through = true;
        base.pop_back();
    }
    if (base == "kl" || base == "k1") {
        t.estimator = KlEstimator::kK1;
    } else if (base == "abs") {
        t.estimator = KlEstimator::kAbs;
    } else if (base == "mse" || base == "k2") {
        t.estimator = KlEstimator::kK2;
        t.straight_through = false;  // k2+ is k2
    } else if (base == "low_var_kl" || base == "k3") {
        t.estimator = KlEstimator::kK3;
    } else if (base == "full") {
        RLPT_THROW(ValueError,
                   "KL type '{}' (the full-vocabulary KL) is not supported: it needs whole logit rows, rlpt's "
                   "KL works on log-probs of the sampled tokens; valid types: {}",
                   name, kValidKlNames);
    } else {
        RLPT_THROW(ValueError, "unknown KL type '{}'; valid types: {}", name, kValidKlNames);
    }
    return t;
}

torch::Tensor kl_penalty(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob, KlType type) {
    detail::check_float(log_prob, "kl_penalty", "log_prob");
    detail::check_float(ref_log_prob, "kl_penalty", "ref_log_prob");
    detail::check_like(log_prob, "log_prob", ref_log_prob, "ref_log_prob", "kl_penalty");
    auto forward = kl_forward(log_prob, ref_log_prob, type.estimator);
    if (!type.straight_through) return forward;
    auto k2 = 0.5 * (log_prob - ref_log_prob).square();
    return k2 - k2.detach() + forward.detach();
}

torch::Tensor kl_penalty(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob, const std::string& type) {
    return kl_penalty(log_prob, ref_log_prob, parse_kl_type(type));
}

KlController KlController::fixed(double kl_coef) { return KlController(Kind::kFixed, kl_coef, 0.0, 0.0); }

KlController KlController::adaptive(double init_kl_coef, double target_kl, double horizon) {
    RLPT_CHECK(horizon > 0.0, "adaptive KL controller: horizon must be > 0, got {}", horizon);
    RLPT_CHECK(target_kl > 0.0, "adaptive KL controller: target_kl must be > 0, got {}", target_kl);
    return KlController(Kind::kAdaptive, init_kl_coef, target_kl, horizon);
}

KlController KlController::from_config(const std::string& type, double kl_coef, double target_kl, double horizon) {
    if (type == "fixed") return fixed(kl_coef);
    if (type == "adaptive") return adaptive(kl_coef, target_kl, horizon);
    RLPT_THROW(ValueError, "unknown KL controller type '{}'; valid types: fixed, adaptive", type);
}

void KlController::update(double current_kl, int64_t n_steps) {
    if (kind_ == Kind::kFixed) return;
    const double err = std::clamp(current_kl / target_ - 1.0, -0.2, 0.2);
    value_ *= 1.0 + err * static_cast<double>(n_steps) / horizon_;
}

KlRewardResult apply_kl_penalty(const torch::Tensor& token_level_scores, const torch::Tensor& old_log_prob,
                                const torch::Tensor& ref_log_prob, const torch::Tensor& response_mask,
                                KlController& controller, const std::string& kl_type) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "apply_kl_penalty";
    detail::check_float(token_level_scores, kWhere, "token_level_scores");
    detail::check_2d(token_level_scores, kWhere, "token_level_scores");
    detail::check_like(token_level_scores, "token_level_scores", old_log_prob, "old_log_prob", kWhere);
    detail::check_like(token_level_scores, "token_level_scores", response_mask, "response_mask", kWhere);
    auto kld = kl_penalty(old_log_prob, ref_log_prob, kl_type) * detail::mask_as(response_mask, old_log_prob);
    const double beta = controller.value();
    KlRewardResult out;
    out.token_level_rewards = token_level_scores - beta * kld.to(token_level_scores.scalar_type());
    auto per_row = masked_mean(kld, response_mask, -1);
    out.current_kl = token_level_scores.size(0) > 0 ? per_row.mean().item<double>() : 0.0;
    controller.update(out.current_kl, token_level_scores.size(0));
    out.metrics["actor/reward_kl_penalty"] = out.current_kl;
    out.metrics["actor/reward_kl_penalty_coeff"] = beta;
    return out;
}

torch::Tensor kl_loss(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob,
                      const torch::Tensor& response_mask, const std::string& kl_type, AggMode mode,
                      const GlobalBatchInfo& info) {
    return agg_loss(kl_penalty(log_prob, ref_log_prob, kl_type), response_mask, mode, info);
}

}  // namespace rlpt::algo
