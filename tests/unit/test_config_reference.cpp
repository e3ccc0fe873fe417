// The configuration reference (rlpt/config/reference.h) is complete and docs/config-reference.md is
// what the code generates: a key added without its meaning, or a schema change without regenerating
// the reference, fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "rlpt/build_config.h"
#include "rlpt/config/config.h"
#include "rlpt/config/reference.h"

namespace {

constexpr const char* kRegenerate = "build/src/rlpt --help-config=markdown > docs/config-reference.md";

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace

TEST(ConfigReference, EveryKeyHasAMeaning) {
    const auto docs = rlpt::config_key_docs();
    ASSERT_GT(docs.size(), 100u);
    std::set<std::string> paths;
    for (const auto& d : docs) {
        EXPECT_TRUE(paths.insert(d.path).second) << d.path << " is documented twice";
        EXPECT_FALSE(d.doc.empty()) << "config key " << d.path
                                    << " has no meaning: give it a one-line doc in src/config/config_schema.cpp, "
                                       "then regenerate the reference: "
                                    << kRegenerate;
        EXPECT_EQ(d.doc.find('\n'), std::string::npos) << d.path << ": a doc is one line";
        EXPECT_FALSE(d.type.empty()) << d.path;
    }
    // A few keys every user meets, so a broken walk over the schema cannot pass as "complete".
    for (const char* key : {"trainer.total_training_steps", "actor.optim.lr", "rollout.n", "algorithm.adv_estimator",
                            "placement.groups[].roles", "rollout.stages[].max_tokens", "reward.scorers"}) {
        EXPECT_TRUE(paths.count(key)) << key << " is missing from the reference";
    }
}

TEST(ConfigReference, CommentedYamlReadsBackAsTheDefaults) {
    const rlpt::Config c = rlpt::config_from_yaml(rlpt::config_reference_yaml(), "rlpt --help-config");
    EXPECT_EQ(rlpt::to_yaml(c), rlpt::to_yaml(rlpt::Config{}));
}

TEST(ConfigReference, CommittedMarkdownIsCurrent) {
    const std::string path = std::string(RLPT_SOURCE_DIR) + "/docs/config-reference.md";
    const std::string committed = read_file(path);
    ASSERT_FALSE(committed.empty()) << path << " is missing; generate it: " << kRegenerate;
    const std::string generated = rlpt::config_reference_markdown();
    if (committed == generated) return;
    // Name the first line that differs, so the failure says which key changed.
    std::istringstream a(committed), b(generated);
    std::string la, lb;
    int line = 0;
    do {
        ++line;
        if (!std::getline(a, la)) la = "(end of file)";
        if (!std::getline(b, lb)) lb = "(end of file)";
    } while (la == lb && line < 1000000);
    FAIL() << path << " is stale (the config schema changed). Regenerate it: " << kRegenerate
           << "\nfirst difference, line " << line << ":\n  committed: " << la << "\n  generated: " << lb;
}
