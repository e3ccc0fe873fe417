#pragma once
// Policy-gradient losses (verl POLICY_LOSS_REGISTRY, ALGORITHMS §1.2).
//
// Inputs (all B×T, same floating dtype for the log-probs and advantages):
//   old_log_prob        log π_old(a_t) (no gradient needed)
//   log_prob            log π_θ(a_t); the returned loss is differentiable w.r.t. it
//   advantages          A_t
//   response_mask       any dtype, non-zero = token contributes to the loss
//   rollout_is_weights  optional per-token importance weights (undefined tensor = none); the
//                       per-token loss is multiplied by them before aggregation
// Notation: lr = log_prob - old_log_prob, ε_l/ε_h = clip_ratio_low/high (each falling back to
// clip_ratio), agg = agg_loss(·, response_mask, config.loss_agg_mode, config.global_batch_info).
// Metric values are plain doubles under verl's final names ("actor/pg_clipfrac", ...); the loss
// tensor is the only thing with a graph.
// Devices: the B×T inputs on one device, the host or a GPU (ValueError naming the two tensors
// otherwise); the loss is on that device.

#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/loss_config.h"  // PolicyLossConfig

namespace rlpt::algo {

struct PolicyLossInputs {
    torch::Tensor old_log_prob;
    torch::Tensor log_prob;
    torch::Tensor advantages;
    torch::Tensor response_mask;
    torch::Tensor rollout_is_weights;  // optional
    // Losses that draw random numbers (clip_cov) draw them from this generator and refuse to run
    // without one: never from torch's global RNG, so a resumed run repeats the same draws. A CPU
    // generator, whatever the inputs' device: the draws are made on the host and moved, so the
    // host and a GPU pick the same tokens.
    c10::optional<at::Generator> generator;
};

struct PolicyLossOutput {
    torch::Tensor loss;                     // 0-dim, differentiable w.r.t. log_prob
    std::map<std::string, double> metrics;  // "actor/pg_clipfrac", "actor/ppo_kl", ...
};

// vanilla: PPO clip with separate ε_l/ε_h and dual-clip. lr clamped to [-20, 20], ratio = exp(lr).
// L1 = -A·ratio, L2 = -A·clamp(ratio, 1-ε_l, 1+ε_h), C1 = max(L1, L2), L3 = -A·c,
// loss_tok = A < 0 ? min(L3, C1) : C1. Metrics: pg_clipfrac = masked_mean(L2 > L1),
// ppo_kl = masked_mean(-lr), pg_clipfrac_lower = masked_mean((C1 > L3)·(A < 0)).
PolicyLossOutput compute_policy_loss_vanilla(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// gspo: sequence ratio s_i = exp(Σ m·lr / max(Σ m, 1)); token ratio = exp(min(logp - sg(logp) +
// sg(log s_i), 10)) (value s_i, gradient through logp); loss_tok = max(-A·r, -A·clamp(r, 1-ε_l,
// 1+ε_h)). Always aggregated with seq-mean-token-mean. pg_clipfrac_lower = 0.
PolicyLossOutput compute_policy_loss_gspo(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// sapo: ratio = exp(clamp(lr, ±20)); τ = A > 0 ? tau_pos : tau_neg;
// loss_tok = -sigmoid(τ(ratio - 1))·4/τ·A. Always seq-mean-token-mean. Clip fractions are 0.
PolicyLossOutput compute_policy_loss_sapo(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// gpg: loss_tok = -logp·A with the configured aggregation. No metrics.
PolicyLossOutput compute_policy_loss_gpg(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// cispo: ratio = exp(clamp(lr, ±20)); loss_tok = -sg(clamp(ratio, 1-ε_l, 1+ε_h))·A·logp.
// pg_clipfrac = masked_mean(ratio != clamped); pg_clipfrac_lower = 0.
PolicyLossOutput compute_policy_loss_cispo(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// dro: loss_tok = -(logp·A - 0.5·β·lr²), β = dro_beta (> 0, required). Metric: ppo_kl.
PolicyLossOutput compute_policy_loss_dro(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// clip_cov: ratio = exp(lr) (no clamp); L1, L2 as in vanilla; cov = (A - Ā)(logp - mean logp)
// over valid tokens. Among valid, not-already-clipped tokens with lb < cov < ub, a random subset
// of max(int(clip_cov_ratio·Σm), 1) gets weight 0; loss_tok = max(L1, L2)·corr.
// pg_clipfrac = masked_mean(corr == 0). The random subset comes from in.generator (required).
PolicyLossOutput compute_policy_loss_clip_cov(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// kl_cov: ratio = exp(lr) (no clamp, no clipping); loss_tok = -A·ratio, plus ppo_kl_coef·|lr| on
// the max(1, int(N·kl_cov_ratio)) valid tokens with the largest cov (N = valid tokens).
// Metric: ppo_kl = masked_mean(|lr|).
PolicyLossOutput compute_policy_loss_kl_cov(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// geo_mean (GMPO): lr_c = sgn(A)·min(sgn(A)·lr, sgn(A)·clamp(lr, -ε_l, ε_h)) (log-space clip);
// ratio_i = exp(Σ m·lr_c / (Σm + 1e-8)); Ā_i = Σ m·A / (Σm + 1e-8); IS weights reduced to a
// per-sequence geometric mean. loss_agg_mode is ignored: loss = Σ_i -Ā_i·ratio_i / n_rows · dp_size
// with n_rows = global_batch_info.global_batch_size (required when dp_size > 1) or the local
// number of rows (fully masked rows included) — verl's torch.mean over rows for one shard, and
// shard-invariant when split. Metrics: pg_clipfrac / _lower = masked_mean((lr != clamp)·(A >< 0)).
PolicyLossOutput compute_policy_loss_geo_mean(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// dppo_tv / dppo_kl (binary-divergence trust region): truncated_ratio = sg(min(ratio, clip_ratio_c))
// with ratio = exp(clamp(lr, ±20)); loss_tok = -A·truncated_ratio·logp·valid, where p = exp(logp),
// p_old = exp(old_log_prob) and
//   tv: valid = A > 0 ? p - p_old <= ε_h : p - p_old >= -ε_l
//   kl: bkl = p_old·(log p_old - logp) + (1 - p_old)·log((1 - p_old + 1e-8)/(1 - p + 1e-8));
//       valid = A > 0 ? (bkl <= ε_h or p <= p_old) : (bkl <= ε_l or p >= p_old)
// (ε_l/ε_h are divergence bounds here, not ratio bounds). Metrics: pg_clipfrac =
// masked_mean(1 - valid), pg_clipfrac_lower = masked_mean((ratio > c)·valid), ppo_kl.
// c is clip_ratio_c (actor.clip_ratio_c, default 3.0, the value verl's ActorConfig passes; its
// code falls back to 20 only when the field is absent). Must be > 0.
PolicyLossOutput compute_policy_loss_dppo_tv(const PolicyLossInputs& in, const PolicyLossConfig& cfg);
PolicyLossOutput compute_policy_loss_dppo_kl(const PolicyLossInputs& in, const PolicyLossConfig& cfg);

// Dispatch by actor.policy_loss.loss_mode, verl's names: the rows of kLosses in
// src/algo/policy_loss.cpp (policy_loss_names() lists them; config validation asks it, see
// app::table_name_problems). verl's bypass_mode is refused as
// unsupported; other names as unknown (ValueError listing the valid names).
PolicyLossOutput compute_policy_loss(const std::string& loss_mode, const PolicyLossInputs& in,
                                     const PolicyLossConfig& cfg);
std::vector<std::string> policy_loss_names();

}  // namespace rlpt::algo
