#pragma once
// The settings of the actor's policy loss and of loss aggregation, torch-free: the config's actor
// section holds a PolicyLossConfig (its keys: actor.clip_ratio, clip_ratio_low/high, clip_ratio_c,
// tau_pos, tau_neg and actor.policy_loss.*; the config includes this header), the actor receives
// it in its settings (include/rlpt/roles/actor.h), and the losses read it (policy_loss.h).
// The functions that use these types: agg_loss.h, policy_loss.h, value_loss.h.

#include <cstdint>
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

// The parameters of every policy loss (one struct: a loss parameter is a field here, its key in
// src/config/config_schema.cpp and its check in config_validate.cpp).
struct PolicyLossConfig {
    double clip_ratio = 0.2;                // actor.clip_ratio
    std::optional<double> clip_ratio_low;   // unset: clip_ratio
    std::optional<double> clip_ratio_high;  // unset: clip_ratio (DAPO clip-higher sets e.g. 0.28)
    double clip_ratio_c = 3.0;              // dual-clip constant, must be > 1
    double tau_pos = 1.0;                   // sapo
    double tau_neg = 1.05;                  // sapo
    double clip_cov_ratio = 2e-4;           // clip_cov
    double clip_cov_lb = 1.0;
    double clip_cov_ub = 5.0;
    double kl_cov_ratio = 2e-4;      // kl_cov
    double ppo_kl_coef = 0.1;        // kl_cov
    std::optional<double> dro_beta;  // dro: required, > 0
    // actor.loss_agg_mode (a name in the config, shared with the critic; the run plan parses it).
    AggMode loss_agg_mode = AggMode::kTokenMean;
    // Per mini-batch, set by the caller of the loss: not a setting (visit leaves it out).
    GlobalBatchInfo global_batch_info;

    double eps_low() const { return clip_ratio_low.value_or(clip_ratio); }
    double eps_high() const { return clip_ratio_high.value_or(clip_ratio); }

    // The settings, for the actor's settings on the wire (rlpt/protocol/args.h).
    template <typename V>
    void visit(V& v) {
        v("clip_ratio", clip_ratio);
        v("clip_ratio_low", clip_ratio_low);
        v("clip_ratio_high", clip_ratio_high);
        v("clip_ratio_c", clip_ratio_c);
        v("tau_pos", tau_pos);
        v("tau_neg", tau_neg);
        v("clip_cov_ratio", clip_cov_ratio);
        v("clip_cov_lb", clip_cov_lb);
        v("clip_cov_ub", clip_cov_ub);
        v("kl_cov_ratio", kl_cov_ratio);
        v("ppo_kl_coef", ppo_kl_coef);
        v("dro_beta", dro_beta);
        v("loss_agg_mode", loss_agg_mode);
    }
};

}  // namespace rlpt::algo
