// Keys that pick a table entry are checked against the tables themselves (app::table_name_problems):
// every entry of every table is accepted, so a new estimator, loss, generator, scorer type or
// role needs no second list anywhere, and an unknown name is refused naming the key, where it
// was set and the table's names.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "check.h"
#include "rlpt/agent/builtin_tools.h"
#include "rlpt/algo/advantage.h"
#include "rlpt/algo/policy_loss.h"
#include "rlpt/app/registry.h"
#include "rlpt/config/config.h"
#include "rlpt/reward/registry.h"
#include "rlpt/roles/generator_table.h"

namespace rlpt::app {
namespace {

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += x + "\n";
    return s;
}

TEST(TableNames, EveryEntryOfEveryTableIsAccepted) {
    Config c = config_from_yaml("", "t");
    EXPECT_TRUE(table_name_problems(c).empty()) << joined(table_name_problems(c));
    for (const auto& name : algo::advantage_estimator_names()) {
        Config e = c;
        e.algorithm.adv_estimator = name;
        EXPECT_TRUE(table_name_problems(e).empty()) << joined(table_name_problems(e));
    }
    for (const auto& name : algo::policy_loss_names()) {
        Config e = c;
        e.actor.loss_mode = name;
        EXPECT_TRUE(table_name_problems(e).empty()) << joined(table_name_problems(e));
    }
    for (const auto& g : roles::generator_table()) {
        Config e = c;
        e.rollout.generator = g.name;
        EXPECT_TRUE(table_name_problems(e).empty()) << joined(table_name_problems(e));
    }
    for (const auto& type : reward::scorer_type_names()) {  // math_dapo too (the old copy refused it)
        Config e = c;
        e.reward.scorer = type;
        e.reward.scorers["my/data"] = type;
        EXPECT_TRUE(table_name_problems(e).empty()) << joined(table_name_problems(e));
    }
    Config tools = c;
    tools.rollout.multi_turn.builtin_tools = agent::builtin_tool_names();
    EXPECT_TRUE(table_name_problems(tools).empty()) << joined(table_name_problems(tools));
    Config all = c;
    all.placement.groups.resize(1);
    all.placement.groups[0].roles.clear();
    for (const auto& spec : role_registry()) all.placement.groups[0].roles.push_back(spec.name);
    EXPECT_TRUE(table_name_problems(all).empty()) << joined(table_name_problems(all));
}

TEST(TableNames, UnknownNamesAreRefusedNamingKeyOriginAndTheTable) {
    Config c = config_from_yaml("algorithm:\n  adv_estimator: grpoo\n", "r.yaml",
                                {"actor.policy_loss.loss_mode=vanila", "rollout.generator=beamz",
                                 "placement.groups=[{roles: [actor, rollout, refrence], ranks: auto}]",
                                 "reward.scorers={a: nmber}", "reward.scorer=exactly"});
    const auto problems = table_name_problems(c);
    ASSERT_EQ(problems.size(), 6u) << joined(problems);
    // Each problem: "<origin>: <key>: '<value>' is not one of: <the table's names>".
    auto expect_problem = [&](const std::string& what, const std::vector<std::string>& names) {
        for (const auto& p : problems) {
            if (p.find(what) == std::string::npos) continue;
            for (const auto& n : names) EXPECT_NE(p.find(n), std::string::npos) << n << " not listed in: " << p;
            return;
        }
        ADD_FAILURE() << "no problem with '" << what << "' in:\n" << joined(problems);
    };
    expect_problem("r.yaml:2: algorithm.adv_estimator: 'grpoo' is not one of: ", algo::advantage_estimator_names());
    expect_problem("actor.policy_loss.loss_mode: 'vanila' is not one of: ", algo::policy_loss_names());
    expect_problem("rollout.generator: 'beamz' is not one of: sampler", {});
    std::vector<std::string> roles;
    for (const auto& spec : role_registry()) roles.push_back(spec.name);
    expect_problem("placement.groups.0.roles: 'refrence' is not one of: ", roles);
    expect_problem("reward.scorers.a: 'nmber' is not one of: ", reward::scorer_type_names());
    expect_problem("reward.scorer: 'exactly' is not one of: auto, custom, ", reward::scorer_type_names());
    EXPECT_EQ(problems[1].rfind("r.yaml:2: algorithm.adv_estimator", 0), 0u) << problems[1];
    EXPECT_EQ(problems[2].rfind("command line", 0), 0u) << problems[2];
    // rlpt check and the launch report them with every other problem (check_config).
    const CheckReport report = check_config(c, 0);
    for (const auto& p : problems)
        EXPECT_NE(std::find(report.problems.begin(), report.problems.end(), p), report.problems.end()) << p;
}

TEST(TableNames, AnUnknownBuiltinToolIsRefusedNamingTheTools) {
    Config c = config_from_yaml("", "t", {"rollout.multi_turn.builtin_tools=[calculator, calc]"});
    const auto problems = table_name_problems(c);
    ASSERT_EQ(problems.size(), 1u) << joined(problems);
    EXPECT_NE(problems[0].find("rollout.multi_turn.builtin_tools: 'calc' is not one of: calculator"), std::string::npos)
        << problems[0];
}

// A generator whose row runs tools needs tools or an environment and a template with a tool format;
// the others ask nothing of rollout.multi_turn.
TEST(TableNames, AGeneratorThatRunsToolsNeedsToolsAndAToolTemplate) {
    for (const auto& g : roles::generator_table()) {
        SCOPED_TRACE(g.name);
        if (!g.runs_tools) {
            Config other = config_from_yaml("", "t");
            other.rollout.generator = g.name;
            EXPECT_TRUE(generator_problems(other).empty()) << joined(generator_problems(other));
            continue;
        }
        Config bare = config_from_yaml("", "t", {std::string("rollout.generator=") + g.name});
        const auto problems = generator_problems(bare);
        ASSERT_EQ(problems.size(), 1u) << joined(problems);
        EXPECT_NE(problems[0].find(std::string("): rollout.generator: ") + g.name + " needs tools or an environment"),
                  std::string::npos)
            << problems[0];
        for (const char* given :
             {"rollout.multi_turn.builtin_tools=[calculator]", "rollout.multi_turn.mcp_servers=[npx -y x]",
              "rollout.multi_turn.env_command=./env"}) {
            Config ok = config_from_yaml("", "t", {std::string("rollout.generator=") + g.name, given});
            EXPECT_TRUE(generator_problems(ok).empty()) << given << ": " << joined(generator_problems(ok));
        }
        Config llama =
            config_from_yaml("", "t",
                             {std::string("rollout.generator=") + g.name,
                              "rollout.multi_turn.builtin_tools=[calculator]", "model.chat_template=llama3"});
        const auto template_problems = generator_problems(llama);
        ASSERT_EQ(template_problems.size(), 1u) << joined(template_problems);
        EXPECT_NE(template_problems[0].find("model.chat_template: " + std::string(g.name) +
                                            " supports the qwen2, qwen3 and none templates"),
                  std::string::npos)
            << template_problems[0];
        // rlpt check and the launch report them with every other problem (check_config).
        const CheckReport report = check_config(bare, 0);
        EXPECT_NE(std::find(report.problems.begin(), report.problems.end(), problems[0]), report.problems.end());
    }
    Config unknown = config_from_yaml("", "t", {"rollout.generator=beamz"});
    EXPECT_TRUE(generator_problems(unknown).empty());  // table_name_problems names it
    EXPECT_TRUE(std::any_of(roles::generator_table().begin(), roles::generator_table().end(),
                            [](const roles::GeneratorEntry& g) { return g.runs_tools; }));
}

}  // namespace
}  // namespace rlpt::app
