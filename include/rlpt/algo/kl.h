#pragma once
// KL penalties (ALGORITHMS §1.4): per-token estimators, the in-reward penalty with its
// controller, and the KL loss term of the actor objective.
// Devices: the tensors of one call on one device (ValueError naming two that differ); results on it.

#include <torch/torch.h>

#include <map>
#include <string>

#include "rlpt/algo/agg_loss.h"

namespace rlpt::algo {

enum class KlEstimator {
    kK1,   // "kl" / "k1":          logp - ref
    kAbs,  // "abs":                |logp - ref|
    kK2,   // "mse" / "k2":         0.5·(logp - ref)²
    kK3,   // "low_var_kl" / "k3":  kl = clamp(ref - logp, ±20); clamp(exp(kl) - kl - 1, ±10)
};

struct KlType {
    KlEstimator estimator = KlEstimator::kK1;
    // "+" suffix: forward value of `estimator`, gradient of k2 (k2 - sg(k2) + sg(base)).
    bool straight_through = false;
};

// Parses verl's names with an optional "+" suffix. "full" (and "full+") throws ValueError saying
// it is not supported; unknown names throw ValueError listing the valid ones.
KlType parse_kl_type(const std::string& name);

// Per-token KL estimate. log_prob, ref_log_prob: same shape, floating. Differentiable w.r.t.
// log_prob (and ref_log_prob).
torch::Tensor kl_penalty(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob, KlType type);
torch::Tensor kl_penalty(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob, const std::string& type);

// Coefficient β of the in-reward penalty (algorithm.kl_ctrl). Plain value type: copy it into a
// checkpoint with value()/set_value().
class KlController {
  public:
    enum class Kind { kFixed, kAdaptive };

    static KlController fixed(double kl_coef);
    // Ziegler et al.: err = clip(kl/target - 1, -0.2, 0.2); value *= 1 + err·n_steps/horizon.
    // Throws ValueError unless horizon > 0 and target_kl > 0.
    static KlController adaptive(double init_kl_coef, double target_kl, double horizon);
    // type "fixed" or "adaptive" (ValueError otherwise).
    static KlController from_config(const std::string& type, double kl_coef, double target_kl, double horizon);

    Kind kind() const { return kind_; }
    double value() const { return value_; }
    void set_value(double v) { value_ = v; }
    // No-op for a fixed controller.
    void update(double current_kl, int64_t n_steps);

  private:
    KlController(Kind kind, double value, double target, double horizon)
        : kind_(kind), value_(value), target_(target), horizon_(horizon) {}
    Kind kind_;
    double value_;
    double target_;
    double horizon_;
};

struct KlRewardResult {
    torch::Tensor token_level_rewards;      // B×T: scores - β·kld
    double current_kl = 0.0;                // mean over rows of the per-row masked mean of kld
    std::map<std::string, double> metrics;  // actor/reward_kl_penalty, actor/reward_kl_penalty_coeff
};

// In-reward KL (ray_trainer.apply_kl_penalty): kld = kl_penalty(old, ref, type)·m;
// rewards = scores - β·kld with β = controller.value() BEFORE the update; then
// controller.update(current_kl, n_steps = B). The coefficient metric reports that β.
// token_level_scores, old_log_prob, ref_log_prob, response_mask: B×T. No autograd.
KlRewardResult apply_kl_penalty(const torch::Tensor& token_level_scores, const torch::Tensor& old_log_prob,
                                const torch::Tensor& ref_log_prob, const torch::Tensor& response_mask,
                                KlController& controller, const std::string& kl_type = "kl");

// KL as a loss (actor.use_kl_loss): agg_loss(kl_penalty(logp, ref, type), m, mode, info).
torch::Tensor kl_loss(const torch::Tensor& log_prob, const torch::Tensor& ref_log_prob,
                      const torch::Tensor& response_mask, const std::string& kl_type, AggMode mode,
                      const GlobalBatchInfo& info = {});

}  // namespace rlpt::algo
