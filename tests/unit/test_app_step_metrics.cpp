// The metrics of an RL training step (step_metrics.h) from a hand-made trained batch: the data
// metrics, the timing and throughput ones, the step and epoch, and the asynchronous loop's
// versions and idle ratios.
#include <gtest/gtest.h>

#include "app_test_util.h"
#include "step_metrics.h"

namespace rlpt::app {
namespace {

using Metrics = std::map<std::string, double>;

// Two rows, prompts of 1 token, responses of 2 (row 1 has one valid token).
Batch trained_batch() {
    Batch b(2);
    b.set("prompts", torch::tensor({{5}, {6}}, torch::kInt64));
    b.set("response_mask", torch::tensor({{1, 1}, {1, 0}}, torch::kInt64));
    b.set("attention_mask", torch::tensor({{1, 1, 1}, {1, 1, 0}}, torch::kInt64));
    b.set("token_level_scores", torch::tensor({{0.0f, 1.0f}, {0.5f, 0.0f}}));
    b.set("token_level_rewards", torch::tensor({{0.0f, 1.0f}, {0.5f, 0.0f}}));
    b.set("advantages", torch::tensor({{1.0f, 1.0f}, {-1.0f, 0.0f}}));
    b.set("returns", torch::tensor({{1.0f, 1.0f}, {0.5f, 0.0f}}));
    b.set("values", torch::tensor({{0.25f, 0.5f}, {0.0f, 0.0f}}));
    b.set("acc", torch::tensor({1.0, 0.0}, torch::kFloat64));
    return b;
}

TEST(StepMetrics, WorkingRanksCountEachRankOnce) {
    comm::Placement p;
    EXPECT_EQ(working_ranks(p), 1);  // at least one
    p.roles.push_back({"actor", 0, {1, 2}, 1});
    p.roles.push_back({"rollout", 0, {1, 2}, 1});
    p.roles.push_back({"critic", 1, {3}, 1});
    EXPECT_EQ(working_ranks(p), 3);
}

TEST(StepMetrics, DataTimingAndThroughput) {
    const Metrics timing{{"timing_s/gen", 2.0}, {"timing_s/update", 0.5}};
    Metrics m;
    StepMetrics(/*max_prompt_length=*/4, /*max_response_length=*/2, /*working_ranks=*/2, /*critic=*/false)
        .add(trained_batch(), timing, /*step_time=*/4.0, /*step=*/3, /*epoch=*/1, m);
    EXPECT_EQ(m.at("training/global_step"), 3.0);
    EXPECT_EQ(m.at("training/epoch"), 1.0);
    EXPECT_EQ(m.at("train/acc/mean"), 0.5);
    EXPECT_EQ(m.at("critic/score/mean"), 0.75);  // row sums 1 and 0.5
    EXPECT_EQ(m.at("response_length/mean"), 1.5);
    EXPECT_EQ(m.count("critic/values/mean"), 0u);  // no critic
    EXPECT_EQ(m.at("timing_s/gen"), 2.0);
    EXPECT_EQ(m.at("timing_s/step"), 4.0);
    EXPECT_EQ(m.at("perf/total_num_tokens"), 5.0);
    EXPECT_EQ(m.at("perf/time_per_step"), 4.0);
    EXPECT_EQ(m.at("perf/throughput"), 5.0 / 4.0 / 2.0);
    EXPECT_EQ(m.at("timing_per_token_ms/gen"), 1000.0 * 2.0 / 3.0);  // per response token
    EXPECT_EQ(m.at("timing_per_token_ms/update"), 1000.0 * 0.5 / 5.0);
    EXPECT_EQ(m.count("timing_per_token_ms/ref"), 0u);  // stages that did not run

    Metrics with_critic;
    StepMetrics(4, 2, 2, /*critic=*/true).add(trained_batch(), timing, 4.0, 3, 1, with_critic);
    EXPECT_EQ(with_critic.count("critic/values/mean"), 1u);
}

TEST(StepMetrics, AsyncVersionsAndIdleRatios) {
    const Metrics timing{{"timing_s/update_weights", 1.0},
                         {"timing_s/old_log_prob", 1.0},
                         {"timing_s/update", 2.0},
                         {"timing_s/rollout_busy", 5.0}};
    Metrics m;
    add_async_metrics({/*batch_policy=*/3, /*staleness=*/1, /*actor_policy=*/5, /*weight_syncs=*/2}, timing, 8.0, m);
    EXPECT_EQ(m.at("async/batch_policy_version"), 3.0);
    EXPECT_EQ(m.at("async/staleness"), 1.0);
    EXPECT_EQ(m.at("async/actor_policy_version"), 5.0);
    EXPECT_EQ(m.at("async/weight_syncs"), 2.0);
    EXPECT_EQ(m.at("perf/actor_idle_ratio"), 1.0 - 4.0 / 8.0);    // sync + old log-probs + update
    EXPECT_EQ(m.at("perf/rollout_idle_ratio"), 1.0 - 6.0 / 8.0);  // generation + sync
    Metrics busy;
    add_async_metrics({}, timing, 2.0, busy);
    EXPECT_EQ(busy.at("perf/rollout_idle_ratio"), 0.0);  // clamped
    Metrics untimed;
    add_async_metrics({}, timing, 0.0, untimed);
    EXPECT_EQ(untimed.count("perf/actor_idle_ratio"), 0u);
    EXPECT_EQ(untimed.at("async/weight_syncs"), 0.0);
}

}  // namespace
}  // namespace rlpt::app
