#pragma once
// Advantage estimators (verl core_algos, ALGORITHMS §1.1) as pure functions on tensors.
//
// Shapes and dtypes, for every estimator:
//   token_level_rewards  B×T float32/float64; rewards are assumed 0 outside the response
//                        (scores s_i = Σ_t r[i,t] over ALL T, as verl does)
//   response_mask        B×T any dtype, non-zero = valid response token
//   values               B×T, same dtype as the rewards (gae only)
//   index                int64 [B] group labels (uid of the prompt); any values, only equality
//                        matters (make_group_index maps strings/ints to dense ids)
//   reward_baselines     [B] floating (remax only: reward of the greedy rollout)
//   old_log_probs, sum_pi_squared   B×T floating (optimal_token_baseline*: log π_old of the
//                        sampled token and Σ_v π_v² of its distribution, from the actor)
//   reward_components    [K, B] floating (gdpo: K per-sample reward components)
// Every estimator returns {advantages, returns}, both B×T in the rewards' dtype, computed without
// autograd, and ZERO outside the response mask (see the notes at each function for the places
// where this deliberately differs from verl).
// Group statistics (means, standard deviations) are computed in float64 and the result is cast
// back to the rewards' dtype, so identical scores in a group give exactly 0 after centring.
// Devices: the tensor inputs on one device, the host or a GPU (ValueError naming two that differ;
// `index` may be anywhere); the group statistics and the per-group loops run on the host, and
// both outputs are on the inputs' device.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/algo/advantage_config.h"  // AdvantageParams

namespace rlpt::algo {

// Dense group ids 0..G-1 in order of first appearance.
struct GroupIndex {
    torch::Tensor ids;  // int64 [B]
    int64_t num_groups = 0;
};
GroupIndex make_group_index(const std::vector<int64_t>& labels);
GroupIndex make_group_index(const std::vector<std::string>& labels);
GroupIndex make_group_index(const torch::Tensor& labels);  // 1-D integer tensor of labels

struct AdvantageOutput {
    torch::Tensor advantages;  // B×T
    torch::Tensor returns;     // B×T
};

// GAE. Loop t = T-1..0: δ = r_t + γ·nextV - V_t; gl' = δ + γλ·gl; nextV = V_t·m_t + (1-m_t)·nextV;
// gl = gl'·m_t + (1-m_t)·gl. Masked tokens carry nextV/gl through (multi-turn observations are
// skipped). returns = gl + V; advantages = masked_whiten(gl, m).
// Choice: verl leaves the whitened advantage and the return non-zero at masked positions; both
// are multiplied by the mask here (no loss or metric reads them there). Throws ValueError when the
// whole batch has fewer than 2 valid tokens (whitening needs an unbiased variance).
AdvantageOutput compute_gae(const torch::Tensor& token_level_rewards, const torch::Tensor& values,
                            const torch::Tensor& response_mask, double gamma = 1.0, double lam = 1.0);

// GRPO (norm_by_std) and Dr.GRPO (!norm_by_std): A_i = (s_i - μ_g)/(σ_g + ε) or s_i - μ_g, with
// σ_g the unbiased std of the group's scores; A_i·m for both outputs.
// Group of one: μ = 0, σ = 1 (A = s/(1+ε)). Choice: verl builds these constants as float32
// tensors, so for float64 scores its denominator is float32(1.000001); here they are exact in the
// scores' dtype. Identical scores: σ = 0 and A = 0 exactly.
AdvantageOutput compute_grpo(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                             const torch::Tensor& index, double epsilon = 1e-6, bool norm_by_std = true);

// Pass@k (GRPO style): in each group only the best sample gets r_max - r_second (divided by
// σ_g + ε when norm_by_std); everyone else gets 0. Ties for the maximum go to the lowest row.
// Throws ValueError for a group with fewer than 2 samples.
AdvantageOutput compute_grpo_passk(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                                   const torch::Tensor& index, double epsilon = 1e-6, bool norm_by_std = true);

// RLOO: A_i = s_i - mean of the other samples of the group = (n·s_i - Σ_g s)/(n-1).
// Group of one: choice A = s_i (no baseline), as verl's `rloo` and as every other estimator here
// treats singletons (baseline 0); verl's `rloo_vectorized` gives 0 instead, and the name
// "rloo_vectorized" in compute_advantage maps to this function too.
AdvantageOutput compute_rloo(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                             const torch::Tensor& index);

// OPO: baseline b_g = Σ(len_i·s_i)/Σ len_i with len_i = Σ_t m; A = s - b. Group of one: b = 0.
// A group whose rows are all fully masked gets b = 0 (verl divides 0 by 0 there).
AdvantageOutput compute_opo(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                            const torch::Tensor& index);

// GPG: α = B / max(#{i: s_i != 0}, 1); A = α·(s - μ_g)/f_norm. Group of one: μ = 0.
AdvantageOutput compute_gpg(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                            const torch::Tensor& index, double f_norm = 1.0);

// REINFORCE++: t = T-1..0: G = r_t + γ·run; returns_t = G·m_t; run = G·m_t + run·(1-m_t)
// (observation tokens do not break the propagation; their returns are 0).
// advantages = masked_whiten(returns, m)·m. Throws when the batch has < 2 valid tokens.
AdvantageOutput compute_reinforce_plus_plus(const torch::Tensor& token_level_rewards,
                                            const torch::Tensor& response_mask, double gamma = 1.0);

// REINFORCE++ with group baseline: A_i = s_i - μ_g (group of one: μ = 0), tiled over T·m, then
// masked_whiten(·, m)·m. Throws when the batch has < 2 valid tokens.
AdvantageOutput compute_reinforce_plus_plus_baseline(const torch::Tensor& token_level_rewards,
                                                     const torch::Tensor& response_mask, const torch::Tensor& index);

// ReMax: returns = reverse cumulative sum of r·m (no discount); A = returns - b[:,None]·m.
AdvantageOutput compute_remax(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                              const torch::Tensor& reward_baselines);

// GDPO: for each component k (row k of reward_components [K, B]), GRPO on its per-sample scores
// gives A_k (the same group statistics, singleton and ε rules as compute_grpo); then
// A = masked_whiten(Σ_k w_k·A_k, m)·m for both outputs. weights: empty = 1 each, else K values.
// (verl places each score at the last valid token and sums over T, which is the score itself.)
// Throws when the batch has < 2 valid tokens (whitening).
AdvantageOutput compute_gdpo(const torch::Tensor& reward_components, const torch::Tensor& response_mask,
                             const torch::Tensor& index, const std::vector<double>& weights = {}, double epsilon = 1e-6,
                             bool norm_by_std = true);

// Optimal token baseline (OTB): G = reverse-cumsum(r·m); w_t = 1 - 2·exp(old_logp_t) + Σπ²_t;
// W = cumsum(w·m) along T. Per group, per position t: B_t = Σ_i G·W·m / (Σ_i W·m + 1e-8);
// A = (G - B)·m, returns = G (not masked: verl's reward-to-go, 0 after the response but carried
// through masked spans inside it, as remax's). Group of one: B = 0. handle_zero_tail: when a group's longest
// response is strictly longer than all others, its baseline from the second-longest length on is
// 0. Computed in float64, returned in the rewards' dtype. (verl's optional rollout IS weights,
// w·ρ², are not supported: rlpt has no rollout correction yet.)
AdvantageOutput compute_optimal_token_baseline(const torch::Tensor& token_level_rewards,
                                               const torch::Tensor& response_mask, const torch::Tensor& index,
                                               const torch::Tensor& old_log_probs, const torch::Tensor& sum_pi_squared,
                                               bool handle_zero_tail = true);

// The multi-turn form (tir_optimal_token_baseline): each row's valid tokens are compacted first,
// so the baseline is per valid-token position k (B_k = Σ_i G·W / (Σ_i W + 1e-8) over the group's
// compacted rows, zero-padded); rows without valid tokens are skipped (advantage 0). The zero-tail
// rule works on compacted lengths. Equal to compute_optimal_token_baseline when every response
// mask is a prefix.
AdvantageOutput compute_tir_optimal_token_baseline(const torch::Tensor& token_level_rewards,
                                                   const torch::Tensor& response_mask, const torch::Tensor& index,
                                                   const torch::Tensor& old_log_probs,
                                                   const torch::Tensor& sum_pi_squared, bool handle_zero_tail = true);

// ---- dispatch by name (algorithm.adv_estimator) ---------------------------------------------

struct AdvantageInputs {
    torch::Tensor token_level_rewards;  // required
    torch::Tensor response_mask;        // required
    torch::Tensor values;               // gae
    torch::Tensor index;                // grpo*, rloo*, opo, gpg, reinforce_plus_plus_baseline, gdpo, otb*
    torch::Tensor reward_baselines;     // remax
    torch::Tensor old_log_probs;        // optimal_token_baseline, tir_optimal_token_baseline
    torch::Tensor sum_pi_squared;       // optimal_token_baseline, tir_optimal_token_baseline
    torch::Tensor reward_components;    // gdpo: [K, B]
};

// What an estimator needs beyond rewards and mask, so the trainer knows which stages to run.
struct EstimatorNeeds {
    bool values = false;             // a critic (gae)
    bool reward_baselines = false;   // greedy-rollout rewards (remax)
    bool sum_pi_squared = false;     // the actor's Σπ² with the old log-probs (otb*)
    bool reward_components = false;  // per-component scores (gdpo)
};

// Valid names are verl's (advantage_estimator_names() lists them; grpo_vectorized = grpo and
// rloo_vectorized = rloo, see compute_rloo). Anything else is a ValueError listing the valid
// names. A missing required input (e.g. values for gae) is a ValueError naming it.
AdvantageOutput compute_advantage(const std::string& name, const AdvantageInputs& inputs,
                                  const AdvantageParams& params = {});
std::vector<std::string> advantage_estimator_names();
EstimatorNeeds advantage_estimator_needs(const std::string& name);
// Whether the estimator needs `values` (a critic): true only for gae.
bool advantage_estimator_needs_values(const std::string& name);

}  // namespace rlpt::algo
