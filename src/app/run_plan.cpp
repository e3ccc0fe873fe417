#include "rlpt/app/run_plan.h"

#include <algorithm>

#include <fmt/ranges.h>

#include "rlpt/algo/advantage.h"
#include "rlpt/app/registry.h"

namespace rlpt::app {

RunPlan plan_run(const Config& c) {
    RunPlan p;
    std::vector<std::string> wanted{"actor"}, reasons;
    if (c.trainer.mode == "sft") {
        reasons.push_back("trainer.mode=sft");
    } else {
        wanted.push_back("rollout");
        const auto names = algo::advantage_estimator_names();
        RLPT_CHECK_KIND(ConfigError, std::find(names.begin(), names.end(), c.algorithm.adv_estimator) != names.end(),
                        "algorithm.adv_estimator: unknown estimator '{}' (valid: {})", c.algorithm.adv_estimator,
                        fmt::join(names, ", "));
        const auto needs = algo::advantage_estimator_needs(c.algorithm.adv_estimator);
        p.greedy_baselines = needs.reward_baselines;
        p.sum_pi_squared = needs.sum_pi_squared;
        p.reward_components = needs.reward_components;
        if (c.actor.use_kl_loss || c.algorithm.use_kl_in_reward) {
            wanted.push_back("reference");
            reasons.push_back(c.actor.use_kl_loss ? "actor.use_kl_loss=true" : "algorithm.use_kl_in_reward=true");
        }
        if (c.critic.enable == "true" || (c.critic.enable == "auto" && needs.values)) {
            wanted.push_back("critic");
            reasons.push_back(c.critic.enable == "true" ? "critic.enable=true"
                                                        : "algorithm.adv_estimator=" + c.algorithm.adv_estimator);
        }
        if (c.reward_model.enable) {
            wanted.push_back("reward_model");
            reasons.push_back("reward_model.enable=true");
        }
    }
    for (const auto& r : reasons) p.why += (p.why.empty() ? "" : ", ") + r;
    for (const auto& spec : role_registry()) {
        if (std::find(wanted.begin(), wanted.end(), spec.name) == wanted.end()) continue;
        p.roles.push_back(spec.name);
        bool save = false, load = false;
        for (const auto& m : spec.methods) {
            save = save || m.name == "save";
            load = load || m.name == "load";
        }
        if (save && load) p.checkpointed_roles.push_back(spec.name);
    }
    return p;
}

bool RunPlan::has(const std::string& role) const { return std::find(roles.begin(), roles.end(), role) != roles.end(); }

}  // namespace rlpt::app
