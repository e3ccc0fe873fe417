#pragma once
// The names config validation accepts for algorithm.adv_estimator and
// actor.policy_loss.loss_mode. Torch-free (the config library cannot see the algorithm tables,
// which live with their torch code); a unit test (test_algo_names.cpp) checks that these lists
// equal the dispatch tables' advantage_estimator_names() / policy_loss_names(), so adding an
// estimator or a loss without its name here fails a test, never a run.
#include <array>

namespace rlpt::algo {

inline constexpr std::array<const char*, 14> kAdvantageEstimatorNames{
    "gae",  "grpo", "grpo_vectorized", "grpo_passk", "rloo", "rloo_vectorized", "opo", "gpg", "reinforce_plus_plus",
    "reinforce_plus_plus_baseline", "remax", "gdpo", "optimal_token_baseline", "tir_optimal_token_baseline"};

inline constexpr std::array<const char*, 11> kPolicyLossNames{
    "vanilla", "gspo", "sapo", "gpg", "cispo", "dro", "clip_cov", "kl_cov", "geo_mean", "dppo_tv", "dppo_kl"};

}  // namespace rlpt::algo
