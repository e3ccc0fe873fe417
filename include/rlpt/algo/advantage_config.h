#pragma once
// The hyperparameters of the advantage estimators, torch-free: the config's algorithm section
// holds an AdvantageParams (its keys: algorithm.gamma, lam, norm_adv_by_std_in_grpo and
// gdpo_reward_weights, mapped in src/config/config_schema.cpp; the config includes this header),
// and the trainer passes it whole to compute_advantage (advantage.h). An estimator's new
// hyperparameter is a field here, its key and its check: nothing copies it.

#include <vector>

namespace rlpt::algo {

struct AdvantageParams {
    double gamma = 1.0;                   // algorithm.gamma
    double lam = 1.0;                     // algorithm.lam
    bool norm_adv_by_std_in_grpo = true;  // algorithm.norm_adv_by_std_in_grpo
    std::vector<double> gdpo_weights;     // algorithm.gdpo_reward_weights (empty: 1 each)
    // verl's fixed values, not config keys:
    double epsilon = 1e-6;  // grpo family
    double gpg_f_norm = 1.0;
    bool otb_handle_zero_tail = true;  // verl's default for both OTB estimators
};

}  // namespace rlpt::algo
