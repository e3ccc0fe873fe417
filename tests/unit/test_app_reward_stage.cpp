// RewardStage on hand-made generated batches with a test scorer (the response text is the score):
// what goes into `scores` (scorer or environment, reward model, overlong penalty), DAPO's dynamic
// sampling over several rounds, gdpo's reward components, the KL penalty in the reward, and
// ReMax's greedy baselines with a fake generator.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "app_test_util.h"
#include "reward_stage.h"
#include "rlpt/core/rng_streams.h"
#include "rlpt/reward/score.h"

namespace rlpt::app {
namespace {

using test::expect_error;
using test::generated;
using test::to_vec;
using Metrics = std::map<std::string, double>;

// score = the response text as a number; acc = score > 0.5, unknown when the ground truth is
// "noacc"; extra "half" = score / 2, missing when the ground truth is "noextra".
class TextScorer : public reward::Scorer {
  public:
    std::string name() const override { return "text"; }
    reward::ScoreResult score(const reward::ScoreRequest& r) const override {
        reward::ScoreResult out;
        out.score = std::stod(std::string(r.solution));
        if (r.ground_truth != "noacc") out.acc = out.score > 0.5 ? 1.0 : 0.0;
        if (r.ground_truth != "noextra") out.extra["half"] = out.score / 2;
        return out;
    }
};

TaskData test_task() {
    TaskData t;
    t.scorers.set_default(std::make_shared<TextScorer>());
    return t;
}

RewardSettings settings(int64_t prompts, int64_t n) {
    RewardSettings s;
    s.prompts_per_step = prompts;
    s.n = n;
    return s;
}

// Collects from `rounds` (round r = rounds[r]); fails the test when more are asked for.
Batch collect(const RewardStage& stage, std::vector<Batch> rounds, Metrics& m, Metrics& timing) {
    return stage.collect(
        [&](int64_t r) {
            EXPECT_LT(r, static_cast<int64_t>(rounds.size()));
            return rounds.at(static_cast<size_t>(r));
        },
        m, timing);
}

TEST(RewardStage, ScoresOneRoundWithoutDynamicSampling) {
    const TaskData task = test_task();
    RewardStage stage(task, settings(2, 2));
    Batch g = generated({"a", "a", "b", "b"}, {"1", "0.25", "0", "2"}, {4, 2, 1, 3});
    g.set_strings("ground_truth", {"", "", "noacc", ""});
    Metrics m, timing;
    Batch out = collect(stage, {g}, m, timing);
    EXPECT_EQ(to_vec(out.at("scores")), (std::vector<double>{1, 0.25, 0, 2}));
    EXPECT_EQ(to_vec(out.at("acc")), (std::vector<double>{1, 0, 0, 1}));  // unknown counts as 0
    // The score sits on the last valid response token.
    EXPECT_EQ(to_vec(out.at("token_level_scores")),
              (std::vector<double>{0, 0, 0, 1, 0, 0.25, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0}));
    EXPECT_EQ(out.at("token_level_scores").scalar_type(), torch::kFloat32);
    EXPECT_TRUE(m.empty());  // no dynamic-sampling metrics
    EXPECT_EQ(timing.count("timing_s/reward"), 1u);
    EXPECT_FALSE(out.has("reward_component/half"));
}

TEST(RewardStage, RewardModelAndOverlongPenaltyAddToTheScore) {
    const TaskData task = test_task();
    RewardSettings s = settings(1, 3);
    s.overlong = algo::OverlongBuffer{4, 2, 1.0};  // expected length 2: len 3 -> -0.5, len 4 -> -1
    int calls = 0;
    RewardStage stage(task, s, [&](const Batch& b) {
        ++calls;
        EXPECT_EQ(b.size(), 3);
        return torch::tensor({0.5f, 1.0f, -1.0f});
    });
    Metrics m, timing;
    Batch out = collect(stage, {generated({"a", "a", "a"}, {"1", "1", "0"}, {2, 3, 4})}, m, timing);
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(to_vec(out.at("scores")), (std::vector<double>{1.5, 1.5, -2.0}));
}

TEST(RewardStage, EnvironmentRewardsReplaceTheScorers) {
    const TaskData task = test_task();
    RewardSettings s = settings(1, 2);
    s.env_rewards = true;
    s.filter_groups.enable = true;
    s.filter_groups.metric = "score";  // the environment's reward is the score dynamic sampling sees
    Batch g = generated({"a", "a"}, {"1", "1"}, {1, 1});
    g.set("env_reward", torch::tensor({0.0, 3.0}, torch::kFloat64));
    RewardStage stage(task, s);
    Metrics m, timing;
    Batch out = collect(stage, {g}, m, timing);
    EXPECT_EQ(to_vec(out.at("scores")), (std::vector<double>{0, 3}));
    EXPECT_EQ(to_vec(out.at("acc")), (std::vector<double>{1, 1}));  // acc stays the scorer's
}

TEST(RewardStage, DynamicSamplingKeepsVariedGroupsOverRounds) {
    const TaskData task = test_task();
    RewardSettings s = settings(/*prompts=*/2, /*n=*/2);
    s.filter_groups.enable = true;
    s.filter_groups.metric = "acc";
    // Round 0: a has equal acc (dropped), b varies. Round 1: c and d vary; d is cut off.
    std::vector<Batch> rounds{generated({"a", "a", "b", "b"}, {"1", "1", "1", "0"}, {1, 1, 1, 1}),
                              generated({"c", "c", "d", "d"}, {"0", "1", "1", "0"}, {1, 1, 1, 1})};
    RewardStage stage(task, s);
    Metrics m, timing;
    Batch out = collect(stage, rounds, m, timing);
    EXPECT_EQ(out.strings("uid"), (std::vector<std::string>{"b", "b", "c", "c"}));
    EXPECT_EQ(to_vec(out.at("scores")), (std::vector<double>{1, 0, 0, 1}));
    EXPECT_EQ(m.at("train/num_gen_batches"), 2.0);
    EXPECT_EQ(m.at("train/kept_group_ratio"), 3.0 / 4.0);  // 3 groups kept of the 4 seen
}

TEST(RewardStage, DynamicSamplingFilterMetrics) {
    // "score" is the scorer's, "seq_reward" the total with the overlong penalty: a group whose
    // scorer scores are equal but whose lengths differ is dropped by one and kept by the other.
    const TaskData task = test_task();
    for (const char* metric : {"score", "seq_reward"}) {
        RewardSettings s = settings(1, 2);
        s.filter_groups.enable = true;
        s.filter_groups.metric = metric;
        s.filter_groups.max_num_gen_batches = 1;
        s.overlong = algo::OverlongBuffer{4, 2, 1.0};
        RewardStage stage(task, s);
        Metrics m, timing;
        const auto run = [&] { collect(stage, {generated({"a", "a"}, {"1", "1"}, {1, 4})}, m, timing); };
        if (std::string(metric) == "seq_reward") {
            run();
            EXPECT_EQ(m.at("train/kept_group_ratio"), 1.0) << metric;
        } else {
            expect_error<ValueError>(run, "dynamic sampling: 1 generation rounds gave only 0 of 1 prompt groups");
        }
    }
}

TEST(RewardStage, DynamicSamplingGivesUpAfterMaxRounds) {
    const TaskData task = test_task();
    RewardSettings s = settings(1, 2);
    s.filter_groups.enable = true;
    s.filter_groups.max_num_gen_batches = 3;
    RewardStage stage(task, s);
    int64_t rounds = 0;
    Metrics m, timing;
    expect_error<ValueError>(
        [&] {
            stage.collect(
                [&](int64_t r) {
                    EXPECT_EQ(r, rounds++);
                    return generated({"a", "a"}, {"0", "0"}, {1, 1});
                },
                m, timing);
        },
        "dynamic sampling: 3 generation rounds gave only 0 of 1 prompt groups with varied rewards");
    EXPECT_EQ(rounds, 3);
}

TEST(RewardStage, GdpoRewardComponents) {
    const TaskData task = test_task();
    RewardSettings s = settings(1, 2);
    s.component_keys = {"score", "acc", "half"};
    RewardStage stage(task, s);
    Metrics m, timing;
    Batch out = collect(stage, {generated({"a", "a"}, {"1", "0.25"}, {1, 1})}, m, timing);
    EXPECT_EQ(to_vec(out.at(reward_component_column("score"))), (std::vector<double>{1, 0.25}));
    EXPECT_EQ(to_vec(out.at(reward_component_column("acc"))), (std::vector<double>{1, 0}));
    EXPECT_EQ(to_vec(out.at(reward_component_column("half"))), (std::vector<double>{0.5, 0.125}));
    EXPECT_EQ(out.at(reward_component_column("half")).scalar_type(), torch::kFloat64);

    Batch missing = generated({"a", "a"}, {"1", "1"}, {1, 1});
    missing.set_strings("ground_truth", {"", "noextra"});
    expect_error<ConfigError>([&] { collect(stage, {missing}, m, timing); },
                              "the scorer of sample 1 (data_source 'test') reports no 'half'");
}

TEST(RewardStage, TokenLevelRewardsWithAndWithoutKl) {
    const TaskData task = test_task();
    Batch b(1);
    b.set("token_level_scores", torch::tensor({{0.0, 1.0}}, torch::kFloat64));
    b.set("old_log_probs", torch::tensor({{-1.0f, -2.0f}}));
    b.set("ref_log_prob", torch::tensor({{-1.5f, -1.0f}}));
    b.set("response_mask", torch::tensor({{1, 1}}, torch::kInt64));
    Metrics m;
    RewardStage plain(task, settings(1, 1));
    plain.compute_rewards(b, m);
    EXPECT_EQ(to_vec(b.at("token_level_rewards")), (std::vector<double>{0, 1}));
    EXPECT_EQ(b.at("token_level_rewards").scalar_type(), torch::kFloat32);
    EXPECT_TRUE(m.empty());

    RewardSettings s = settings(1, 1);
    s.kl_in_reward = true;
    s.kl_penalty = "kl";
    s.kl_ctrl.type = "fixed";
    s.kl_ctrl.kl_coef = 0.5;
    RewardStage kl(task, s);
    kl.compute_rewards(b, m);
    // rewards = scores - 0.5 * (old - ref)
    test::expect_near(b.at("token_level_rewards"), {-0.25, 1.5});
    EXPECT_EQ(m.at("actor/reward_kl_penalty_coeff"), 0.5);
    EXPECT_EQ(m.count("actor/reward_kl_penalty"), 1u);
    EXPECT_EQ(kl.kl_coef(), 0.5);
    kl.set_kl_coef(0.125);  // a resume
    EXPECT_EQ(kl.kl_coef(), 0.125);
}

TEST(RewardStage, GreedyBaselinesAnswerEachGroupsOwnPrompt) {
    const TaskData task = test_task();
    RewardStage stage(task, settings(2, 2));
    Batch b = generated({"a", "b", "a", "b"}, {"x", "x", "x", "x"}, {1, 1, 1, 1});
    b.set("prompts", torch::tensor({{1, 2}, {3, 4}, {1, 2}, {3, 4}}, torch::kInt64));
    b.set_strings("ground_truth", {"ga", "gb", "ga", "gb"});
    int calls = 0;
    torch::Tensor base = stage.greedy_baselines(b, [&](const Batch& prompts) {
        ++calls;
        // The first row of each group, in the order groups appear.
        EXPECT_EQ(prompts.strings("uid"), (std::vector<std::string>{"a", "b"}));
        EXPECT_EQ(prompts.strings("ground_truth"), (std::vector<std::string>{"ga", "gb"}));
        EXPECT_EQ(to_vec(prompts.at("prompt_ids")), (std::vector<double>{1, 2, 3, 4}));
        EXPECT_EQ(to_vec(prompts.at("prompt_mask")), (std::vector<double>{1, 1, 1, 1}));
        EXPECT_EQ(prompts.ints("sample_index"),
                  (std::vector<int64_t>{streams::baseline_sample_index(0), streams::baseline_sample_index(1)}));
        Batch out = generated(prompts.strings("uid"), {"0.25", "0.75"}, {1, 1});
        return out;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(base.scalar_type(), torch::kFloat32);
    EXPECT_EQ(to_vec(base), (std::vector<double>{0.25, 0.75, 0.25, 0.75}));
}

}  // namespace
}  // namespace rlpt::app
