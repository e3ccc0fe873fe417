// The names config validation accepts (rlpt/algo/names.h) are exactly the dispatch tables' names,
// so an estimator or loss added to a table without its name there (or the reverse) fails here.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "rlpt/algo/advantage.h"
#include "rlpt/algo/names.h"
#include "rlpt/algo/policy_loss.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"

namespace rlpt::algo {
namespace {

template <typename Array>
std::set<std::string> as_set(const Array& names) {
    return std::set<std::string>(names.begin(), names.end());
}

TEST(AlgoNames, ConfigListsEqualTheDispatchTables) {
    auto table = advantage_estimator_names();
    EXPECT_EQ(as_set(kAdvantageEstimatorNames), std::set<std::string>(table.begin(), table.end()));
    auto losses = policy_loss_names();
    EXPECT_EQ(as_set(kPolicyLossNames), std::set<std::string>(losses.begin(), losses.end()));
}

TEST(AlgoNames, ConfigValidationAcceptsEveryTableName) {
    for (const auto& name : advantage_estimator_names()) {
        std::vector<std::string> ov{"algorithm.adv_estimator=" + name, "rollout.n=2",
                                    "algorithm.gdpo_reward_keys=[score]"};
        EXPECT_NO_THROW(config_from_yaml("", "test", ov)) << name;
    }
    for (const auto& name : policy_loss_names())
        EXPECT_NO_THROW(config_from_yaml("", "test", {"actor.policy_loss.loss_mode=" + name,
                                                      "actor.policy_loss.dro_beta=0.1"}))
            << name;
    EXPECT_THROW(config_from_yaml("", "test", {"algorithm.adv_estimator=grpoo"}), ConfigError);
}

}  // namespace
}  // namespace rlpt::algo
