#pragma once
// The run plan: the one place that decides which roles a run needs, and why. Placement, the
// RL trainer (which roles it initialises and calls) and its checkpoints ask it.
//
//   actor, rollout   always (trainer.mode=sft: the actor only)
//   reference        a KL term: actor.use_kl_loss or algorithm.use_kl_in_reward
//   critic           critic.enable=true, or critic.enable=auto and the estimator's table row
//                    needs values (algo::advantage_estimator_needs(...).values: gae)
//   reward_model     reward_model.enable
// and, from the estimator's row, the extra stages: greedy baselines (ReMax), Σπ² (optimal
// token baselines), per-key reward components (gdpo).
#include <string>
#include <vector>

#include "rlpt/config/config.h"

namespace rlpt::app {

struct RunPlan {
    std::vector<std::string> roles;  // the roles this run needs, each once, in role-registry order
    std::string why;                 // the config keys that add roles: "actor.use_kl_loss=true, ..."
    bool greedy_baselines = false;
    bool sum_pi_squared = false;
    bool reward_components = false;
    // Roles of this run whose dispatch tables have save and load (their state is checkpointed).
    std::vector<std::string> checkpointed_roles;

    // Whether the run needs `role` (one of `roles`).
    bool has(const std::string& role) const;
};

// ConfigError for an unknown estimator (config validation normally refused it already).
RunPlan plan_run(const Config& c);

}  // namespace rlpt::app
