// compute_data_metrics on a hand-checked batch (B = 3, T = 4, P = 3; row 2 aborted).
#include <cmath>

#include "rlpt/algo/data_metrics.h"
#include "test_algo_util.h"
#include "test_tolerance.h"

namespace rlpt::algo {
namespace {

using test::t2d;

struct MetricsFixture : ::testing::Test {
    DataMetricsInputs in;
    MetricsFixture() {
        in.token_level_scores = t2d({{0, 0, 0, 1.0}, {0, 0.5, 0, 0}, {0, 0, 0, 0}}, torch::kFloat32);
        in.token_level_rewards = t2d({{0, 0, 0, 0.9}, {0, 0.4, 0, 0}, {0, 0, 0, 0}}, torch::kFloat32);
        in.advantages = t2d({{0.5, -0.5, 1, 2}, {-1, 0, 9, 9}, {9, 9, 9, 9}});
        in.returns = t2d({{1, 2, 3, 4}, {5, 6, 9, 9}, {9, 9, 9, 9}});
        in.values = t2d({{1, 2, 3, 3}, {5, 5, 9, 9}, {9, 9, 9, 9}});
        in.response_mask = torch::tensor({1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0}, torch::kInt64).reshape({3, 4});
        in.prompt_mask = torch::tensor({1, 1, 1, 0, 1, 1, 0, 0, 1}, torch::kInt64).reshape({3, 3});
    }
};

TEST_F(MetricsFixture, HandValues) {
    auto m = compute_data_metrics(in);
    auto near = [&](const char* k, double v) {
        ASSERT_TRUE(m.count(k)) << k;
        // float32 scores and rewards (0.9, 0.4 rounded: u32) through means, maxima and variances of
        // a few values <= 9 (~4 roundings each): γ_5(u32)·9 (tests/unit/test_tolerance.h).
        EXPECT_NEAR(m.at(k), v, rlpt::tol::gamma(5, rlpt::tol::kUnitRoundoffFp32) * 9) << k;
    };
    // Scores/rewards of the two non-aborted rows: {1, 0.5} and {0.9, 0.4}.
    near("critic/score/mean", 0.75);
    near("critic/score/max", 1.0);
    near("critic/score/min", 0.5);
    near("critic/rewards/mean", 0.65);
    near("critic/rewards/max", 0.9);
    near("critic/rewards/min", 0.4);
    // Valid tokens: adv {0.5,-0.5,1,2,-1,0}, returns {1..6}, values {1,2,3,3,5,5}.
    near("critic/advantages/mean", 2.0 / 6);
    near("critic/advantages/max", 2.0);
    near("critic/advantages/min", -1.0);
    near("critic/returns/mean", 3.5);
    near("critic/returns/max", 6.0);
    near("critic/returns/min", 1.0);
    near("critic/values/mean", 19.0 / 6);
    near("critic/values/max", 5.0);
    near("critic/values/min", 1.0);
    // R - V = {0,0,0,1,0,1}: unbiased var (12/9)/5; Var(R) = 3.5.
    near("critic/vf_explained_var", 1.0 - (12.0 / 9 / 5) / (3.5 + 1e-5));
    // Response lengths {4, 2, 0}, T = 4; prompt lengths {3, 2, 1}, P = 3.
    near("response_length/mean", 2.0);
    near("response_length/max", 4.0);
    near("response_length/min", 0.0);
    near("response_length/clip_ratio", 1.0 / 3);
    near("response_length_non_aborted/mean", 3.0);
    near("response_length_non_aborted/max", 4.0);
    near("response_length_non_aborted/min", 2.0);
    near("response_length_non_aborted/clip_ratio", 0.5);
    near("response/aborted_ratio", 1.0 / 3);
    near("prompt_length/mean", 2.0);
    near("prompt_length/max", 3.0);
    near("prompt_length/min", 1.0);
    near("prompt_length/clip_ratio", 1.0 / 3);
    EXPECT_EQ(m.size(), 29u);
}

TEST_F(MetricsFixture, ClipRatiosAgainstConfiguredLimits) {
    // Prompts padded only to the batch's longest (3): against a limit of 8 none is clipped.
    in.max_prompt_length = 8;
    in.max_response_length = 2;  // responses {4, 2, 0}: two reach the limit
    auto m = compute_data_metrics(in);
    EXPECT_DOUBLE_EQ(m.at("prompt_length/clip_ratio"), 0.0);
    EXPECT_NEAR(m.at("response_length/clip_ratio"), 2.0 / 3, 1e-12);
    EXPECT_DOUBLE_EQ(m.at("response_length_non_aborted/clip_ratio"), 1.0);
    in.max_prompt_length = 2;  // prompt lengths {3, 2, 1}
    EXPECT_NEAR(compute_data_metrics(in).at("prompt_length/clip_ratio"), 2.0 / 3, 1e-12);
}

TEST_F(MetricsFixture, NoCriticAndSeparateAttentionMask) {
    in.values = torch::Tensor();
    // Multi-turn: the attention mask counts token 3 of row 1 too (an observation token excluded
    // from response_mask), so lengths become {4, 3, 0}.
    in.response_attention_mask = torch::tensor({1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0}, torch::kInt64).reshape({3, 4});
    auto m = compute_data_metrics(in);
    EXPECT_FALSE(m.count("critic/values/mean"));
    EXPECT_FALSE(m.count("critic/vf_explained_var"));
    EXPECT_NEAR(m.at("response_length/mean"), 7.0 / 3, 1e-12);
    EXPECT_NEAR(m.at("critic/advantages/mean"), 2.0 / 6, 1e-12);  // still over response_mask
    EXPECT_EQ(m.size(), 25u);
}

TEST_F(MetricsFixture, AllAbortedGivesNanStatisticsAsVerl) {
    auto all_aborted = in;
    all_aborted.response_mask = torch::zeros({3, 4}, torch::kInt64);
    all_aborted.values = torch::zeros({3, 4}, torch::kFloat64);
    auto m = compute_data_metrics(all_aborted);
    for (const char* k :
         {"critic/score/mean", "critic/score/max", "critic/rewards/min", "critic/advantages/mean", "critic/returns/max",
          "critic/values/mean", "critic/vf_explained_var", "response_length_non_aborted/mean"})
        EXPECT_TRUE(std::isnan(m.at(k))) << k;
    EXPECT_EQ(m.at("response/aborted_ratio"), 1.0);
    EXPECT_EQ(m.at("response_length/mean"), 0.0);
}

TEST_F(MetricsFixture, BadShapesAreErrors) {
    auto bad = in;
    bad.prompt_mask = torch::ones({2, 3}, torch::kInt64);
    test::expect_value_error([&] { compute_data_metrics(bad); }, "prompt_mask has 2 rows");
    auto bad2 = in;
    bad2.returns = torch::ones({3, 5}, torch::kFloat64);
    test::expect_value_error([&] { compute_data_metrics(bad2); }, "'returns'");
}

TEST_F(MetricsFixture, ResponseMaskWithoutTokensGivesNanTokenStatistics) {
    auto in2 = in;
    in2.response_attention_mask = in.response_mask.clone();
    in2.response_mask = torch::zeros({3, 4}, torch::kInt64);
    auto m = compute_data_metrics(in2);
    EXPECT_TRUE(std::isnan(m.at("critic/advantages/mean")));
    EXPECT_FALSE(std::isnan(m.at("critic/score/mean")));  // rows are not aborted: lengths come from the attention mask
}

}  // namespace
}  // namespace rlpt::algo
