// The rollout generator table (roles/generator_table.cpp): names resolve, an unknown name is a
// ConfigError listing the valid ones, and the default config names a generator the table has.
#include <gtest/gtest.h>

#include <string>

#include "rlpt/config/config.h"
#include "rlpt/core/error.h"
#include "rlpt/roles/generator_table.h"

namespace rlpt {
namespace {

TEST(RolloutGenerators, DefaultIsTheSampler) {
    const Config c;
    const auto& g = roles::find_generator(c.rollout.generator);
    EXPECT_STREQ(g.name, "sampler");
    EXPECT_EQ(g.fn, &rollout::sample_responses);
    for (const char* name : {"beam_search", "multi_stage", "tool_agent"})
        EXPECT_STREQ(roles::find_generator(name).name, name);
}

TEST(RolloutGenerators, UnknownNameListsTheValidOnes) {
    try {
        roles::find_generator("beam");
        FAIL() << "an unknown generator was accepted";
    } catch (const ConfigError& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("rollout.generator"), std::string::npos) << m;
        EXPECT_NE(m.find("'beam'"), std::string::npos) << m;
        for (const auto& g : roles::generator_table()) EXPECT_NE(m.find(g.name), std::string::npos) << m;
    }
}

}  // namespace
}  // namespace rlpt
