#pragma once
// Critic value loss and the actor's full objective (ALGORITHMS §1.5, §1.6).
// Devices: every tensor input on one device, the host or a GPU (ValueError naming two that
// differ); the loss is on that device.

#include <torch/torch.h>

#include <map>
#include <string>

#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/policy_loss.h"

namespace rlpt::algo {

struct ValueLossOutput {
    torch::Tensor loss;                     // 0-dim, differentiable w.r.t. vpreds
    std::map<std::string, double> metrics;  // critic/vf_loss, critic/vf_clipfrac, critic/vpred_mean
};

// Clipped value loss. vpreds (current critic), returns, values (critic at rollout time),
// response_mask: B×T.
//   vclip = clip_by_value(vpreds, values - ε_v, values + ε_v)
//   L = max((vpreds - R)², (vclip - R)²);  loss = 0.5·agg_loss(L, m, mode, info)
//   vf_clipfrac = masked_mean((vclip - R)² > (vpreds - R)²); vpred_mean = masked_mean(vpreds)
// cliprange_value (critic.cliprange_value, default 0.5) must be >= 0.
ValueLossOutput compute_value_loss(const torch::Tensor& vpreds, const torch::Tensor& returns,
                                   const torch::Tensor& values, const torch::Tensor& response_mask,
                                   double cliprange_value = 0.5, AggMode mode = AggMode::kTokenMean,
                                   const GlobalBatchInfo& info = {});

// Entropy term of the actor objective: agg_loss(entropy, m, mode, info). entropy: B×T.
torch::Tensor entropy_loss(const torch::Tensor& entropy, const torch::Tensor& response_mask, AggMode mode,
                           const GlobalBatchInfo& info = {});

struct ActorLossConfig {
    std::string loss_mode = "vanilla";  // actor.policy_loss.loss_mode
    PolicyLossConfig policy;            // clip ratios, loss_agg_mode, global_batch_info, ...
    double entropy_coeff = 0.0;         // actor.entropy_coeff
    bool use_kl_loss = false;           // actor.use_kl_loss
    double kl_loss_coef = 0.001;        // actor.kl_loss_coef
    std::string kl_loss_type = "low_var_kl";
    // The settings, for the actor's settings on the wire (rlpt/protocol/args.h).
    template <typename V>
    void visit(V& v) {
        v("loss_mode", loss_mode);
        v("policy", policy);
        v("entropy_coeff", entropy_coeff);
        v("use_kl_loss", use_kl_loss);
        v("kl_loss_coef", kl_loss_coef);
        v("kl_loss_type", kl_loss_type);
    }
};

struct ActorLossInputs {
    PolicyLossInputs policy;     // old_log_prob, log_prob, advantages, response_mask, IS weights
    torch::Tensor entropy;       // B×T, optional: when given the entropy term is computed
    torch::Tensor ref_log_prob;  // B×T, required when use_kl_loss
};

// verl's ppo_loss: loss = pg_loss - entropy_coeff·entropy_loss (if entropy given)
//                        + kl_loss_coef·kl_loss (if use_kl_loss).
// Metrics: the policy loss's metrics plus actor/pg_loss, actor/entropy_loss (if entropy given),
// actor/kl_loss and actor/kl_coef (if use_kl_loss). The loss metrics are already globally
// normalised shares: the engine SUMS them over micro-batches (and averages over DP ranks), while
// the clip fractions and ppo_kl are averaged.
PolicyLossOutput compute_actor_loss(const ActorLossInputs& in, const ActorLossConfig& cfg);

}  // namespace rlpt::algo
