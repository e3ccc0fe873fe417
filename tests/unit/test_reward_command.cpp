// The command scorer (a JSON-lines subprocess) and scripts/examples/reward_server.py, which
// serves a verl compute_score() to it.
#include <gtest/gtest.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "rlpt/build_config.h"
#include "rlpt/core/error.h"
#include "rlpt/reward/command_scorer.h"
#include "rlpt/reward/registry.h"

using rlpt::reward::CommandScorer;
using rlpt::reward::ScoreRequest;

namespace {

namespace fs = std::filesystem;

const char* kPython = "/usr/bin/python3";

std::string write_file(const std::string& name, const std::string& text) {
    const fs::path p = fs::temp_directory_path() / ("rlpt_cmd_" + std::to_string(::getpid()) + "_" + name);
    std::ofstream(p) << text;
    return p.string();
}

std::string server(const std::string& reward_file) {
    return fmt::format("{} {}/scripts/examples/reward_server.py {}", kPython, RLPT_SOURCE_DIR, reward_file);
}

std::vector<ScoreRequest> requests(const std::vector<std::pair<std::string, std::string>>& sol_gt,
                                   const nlohmann::json& extra) {
    std::vector<ScoreRequest> out;
    for (size_t i = 0; i < sol_gt.size(); ++i) {
        ScoreRequest r;
        r.data_source = "my/task";
        r.solution = sol_gt[i].first;
        r.ground_truth = sol_gt[i].second;
        r.extra_info = &extra;
        r.index = static_cast<int64_t>(i);
        out.push_back(r);
    }
    return out;
}

std::string error_of(const CommandScorer& s, const std::vector<ScoreRequest>& r) {
    try {
        s.score_many(r);
    } catch (const rlpt::Error& e) {
        return e.message();
    }
    return "no error";
}

}  // namespace

TEST(CommandScorer, RunsAVerlComputeScoreUnchanged) {
    if (!fs::exists(kPython)) GTEST_SKIP() << "no " << kPython;
    const std::string reward = write_file("reward.py", R"(
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    print("debug output goes to stderr")
    if extra_info.get("as_dict"):
        return {"score": 2.0 if solution_str == ground_truth else -1.0, "acc": solution_str == ground_truth,
                "pred": solution_str, "len": len(solution_str)}
    return float(solution_str == ground_truth and data_source == "my/task")
)");
    CommandScorer s(server(reward), 30);
    EXPECT_TRUE(s.scores_batches());
    const nlohmann::json plain = nlohmann::json::object(), as_dict = {{"as_dict", true}};
    auto r = s.score_many(requests({{"4", "4"}, {"5", "4"}}, plain));
    ASSERT_EQ(r.size(), 2u);
    EXPECT_EQ(r[0].score, 1.0);
    EXPECT_EQ(r[1].score, 0.0);
    EXPECT_FALSE(r[0].acc.has_value());
    // The same process serves the next batch: a large one (replies interleave with requests).
    std::vector<std::pair<std::string, std::string>> many;
    for (int i = 0; i < 3000; ++i)
        many.push_back({std::string(100, 'x') + std::to_string(i % 7), std::string(100, 'x') + "3"});
    r = s.score_many(requests(many, as_dict));
    ASSERT_EQ(r.size(), many.size());
    for (size_t i = 0; i < many.size(); ++i) {
        ASSERT_EQ(r[i].score, i % 7 == 3 ? 2.0 : -1.0) << i;
        ASSERT_EQ(*r[i].acc, i % 7 == 3 ? 1.0 : 0.0);
        ASSERT_EQ(r[i].extra.at("len"), 101.0);
    }
    EXPECT_EQ(r[3].pred, std::string(100, 'x') + "3");
}

TEST(CommandScorer, FailuresAreClearErrors) {
    if (!fs::exists(kPython)) GTEST_SKIP() << "no " << kPython;
    const nlohmann::json extra = nlohmann::json::object();
    const std::string raises =
        write_file("raises.py",
                   "def compute_score(ds, s, gt, extra_info=None):\n    raise KeyError('no such thing')\n");
    EXPECT_NE(error_of(CommandScorer(server(raises), 30), requests({{"1", "1"}}, extra))
                  .find("the reward function failed: KeyError: 'no such thing'"),
              std::string::npos);
    // A program that exits: its status is named.
    std::string m = error_of(CommandScorer("exit 3", 30), requests({{"1", "1"}}, extra));
    EXPECT_NE(m.find("reward command 'exit 3' "), std::string::npos) << m;
    EXPECT_NE(m.find("exited with status 3 after 0 of 1 replies"), std::string::npos) << m;
    m = error_of(CommandScorer("no_such_program_rlpt", 30), requests({{"1", "1"}}, extra));
    EXPECT_NE(m.find("exited with status 127"), std::string::npos) << m;
    // A program that hangs: killed after the timeout, and the next batch starts a fresh one.
    timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CommandScorer slow("read line; sleep 100", 0.5);
    m = error_of(slow, requests({{"1", "1"}}, extra));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    EXPECT_NE(m.find("did not answer within 0.5 s (reward.command_timeout_s)"), std::string::npos) << m;
    EXPECT_LT(static_cast<double>(t1.tv_sec - t0.tv_sec), 10.0);
    // Replies that are not scores.
    m = error_of(CommandScorer("read line; echo hello", 30), requests({{"1", "1"}}, extra));
    EXPECT_NE(m.find("sample 0: the reply is not JSON: hello"), std::string::npos) << m;
    m = error_of(CommandScorer(R"(read line; echo '{"acc": 1}')", 30), requests({{"1", "1"}}, extra));
    EXPECT_NE(m.find("has no numeric \"score\""), std::string::npos) << m;
    EXPECT_THROW(CommandScorer("", 30), rlpt::ConfigError);
}

TEST(CommandScorer, FromARegistrySpecBatchesPerScorer) {
    // A shell "server" that answers 1 for every request line.
    nlohmann::json config;
    config["scorers"]["a"] = {{"type", "command"}, {"command", "while read l; do echo 1; done"}, {"timeout_s", 10}};
    config["scorers"]["b"] = {{"type", "exact"}};
    auto reg = rlpt::reward::make_scorer_registry(config, "reward");
    auto r = rlpt::reward::score_batch(reg, {"a", "b", "a", "b"}, {"x", "y", "z", "w"}, {"0", "y", "0", "q"});
    ASSERT_EQ(r.size(), 4u);
    EXPECT_EQ(r[0].score, 1.0);
    EXPECT_EQ(r[1].score, 1.0);
    EXPECT_EQ(r[2].score, 1.0);
    EXPECT_EQ(r[3].score, 0.0);
    EXPECT_EQ(*r[3].acc, 0.0);
    try {
        rlpt::reward::make_scorer(nlohmann::json{{"type", "command"}}, "reward.scorers.a");
        FAIL();
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("reward.scorers.a: missing required key 'command'"), std::string::npos);
    }
}
