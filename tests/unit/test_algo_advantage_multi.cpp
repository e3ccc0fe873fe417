// gdpo and the optimal-token-baseline estimators against values computed from the formulas of
// ALGORITHMS §1.1 by an independent float64 script (plain Python, loops per group and
// position); spot checks by hand in the comments.
#include "rlpt/algo/advantage.h"
#include "test_algo_util.h"
#include "test_tolerance.h"

namespace rlpt::algo {
namespace {

using test::expect_close;
using test::t2d;

TEST(Gdpo, NormalisesEachComponentInItsGroupThenWhitens) {
    // verl's own test case: groups a,a,b,b; accuracy [1,0,0,1], format [0,1,0,1].
    // Per component GRPO gives ±a with a = 0.5/(sqrt(0.5)+1e-6); the sum is [0,0,-2a,2a] per token,
    // whitened over 8 tokens to ±2a/sqrt(16a²/7 + 1e-8) ≈ ±sqrt(7)/2.
    auto comps = t2d({{1, 0, 0, 1}, {0, 1, 0, 1}});
    auto mask = torch::ones({4, 2}, torch::kInt64);
    auto index = torch::tensor({7, 7, 9, 9}, torch::kInt64);
    auto out = compute_gdpo(comps, mask, index);
    const double w = 1.3228756505714954;
    expect_close(out.advantages, {0, 0, 0, 0, -w, -w, w, w}, 1e-12);
    EXPECT_TRUE(torch::equal(out.advantages, out.returns));
    auto weighted = compute_gdpo(comps, mask, index, {1.0, 0.5});
    const double u = 0.4183300106001757, v = 1.2549900318005272;
    expect_close(weighted.advantages, {u, u, -u, -u, -v, -v, v, v}, 1e-12);
    test::expect_value_error([&] { compute_gdpo(comps, mask, index, {1.0}); }, "1 weights for 2 reward components");
    // Through the dispatcher: the output takes the rewards' dtype.
    AdvantageInputs in;
    in.token_level_rewards = torch::zeros({4, 2}, torch::kFloat32);
    in.response_mask = mask;
    in.index = index;
    in.reward_components = comps;
    auto d = compute_advantage("gdpo", in);
    EXPECT_EQ(d.advantages.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(advantage_estimator_needs("gdpo").reward_components);
}

struct OtbFixture : ::testing::Test {
    // Group 0 = rows 0, 1, 3; row 2 is alone (baseline 0: A = G).
    torch::Tensor index = torch::tensor({0, 0, 1, 0}, torch::kInt64);
    torch::Tensor old_lp = t2d({{-0.1, -0.7, -1.2}, {-0.3, -0.9, -2.0}, {-0.5, -1.0, -1.0}, {-2.0, -0.2, -0.6}});
    torch::Tensor spsq = t2d({{0.8, 0.4, 0.3}, {0.6, 0.35, 0.2}, {0.5, 0.5, 0.5}, {0.2, 0.7, 0.45}});
    torch::Tensor rewards = t2d({{0, 0, 1}, {0, 0.5, 0}, {2, 0, 0}, {0, 0.25, 0}});
    // Row lengths 3, 2, 1, 2: row 0 is the group's unique longest (zero tail from position 2).
    torch::Tensor mask = torch::tensor({1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0}, torch::kInt64).reshape({4, 3});
};

TEST_F(OtbFixture, PerPositionBaselineWithZeroTail) {
    auto out = compute_optimal_token_baseline(rewards, mask, index, old_lp, spsq);
    // Position 2 of row 0: only row 0 is valid there, so B = G·W/(W + 1e-8) ≈ 1 without the zero
    // tail (A ≈ 9.1e-9) and 0 with it (A = G = 1).
    expect_close(out.advantages,
                 {0.7284832666375178, 0.5241603461440767, 1.0, 0.22848326663751783, 0.02416034614407664, 0, 2.0, 0, 0,
                  -0.021516733362482166, -0.22583965385592336, 0},
                 1e-12);
    expect_close(out.returns, {1, 1, 1, 0.5, 0.5, 0, 2, 0, 0, 0.25, 0.25, 0}, 0.0);
    auto no_tail = compute_optimal_token_baseline(rewards, mask, index, old_lp, spsq, false);
    EXPECT_NEAR(no_tail.advantages[0][2].item<double>(), 9.134370815289117e-09, 1e-15);
    // With prefix masks the multi-turn form is the same estimator.
    auto tir = compute_tir_optimal_token_baseline(rewards, mask, index, old_lp, spsq);
    EXPECT_TRUE(torch::allclose(tir.advantages, out.advantages, 0, 1e-14));
}

TEST_F(OtbFixture, MultiTurnCompactsValidTokens) {
    // Interleaved masks (tool tokens masked out): baselines per valid-token position k.
    auto m = torch::tensor({1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1}, torch::kInt64).reshape({4, 3});
    auto r = t2d({{0, 0, 1}, {0, 0, 0.5}, {2, 0, 0}, {0, 0, 0.25}});
    auto out = compute_tir_optimal_token_baseline(r, m, index, old_lp, spsq);
    // Row 3 is the unique longest (3 valid tokens vs 2): its last position has baseline 0, A = G.
    expect_close(out.advantages,
                 {0.662833705472196, 0, 0.46948457020084566, 0, 0.16283370547219594, -0.030515429799154337, 2.0, 0, 0,
                  -0.08716629452780406, -0.28051542979915434, 0.25},
                 1e-12);
    // Through the dispatcher (float32 in, float32 out), and the inputs it needs.
    AdvantageInputs in;
    in.token_level_rewards = r.to(torch::kFloat32);
    in.response_mask = m;
    in.index = index;
    in.old_log_probs = old_lp.to(torch::kFloat32);
    test::expect_value_error([&] { compute_advantage("tir_optimal_token_baseline", in); }, "'sum_pi_squared'");
    in.sum_pi_squared = spsq.to(torch::kFloat32);
    auto d = compute_advantage("tir_optimal_token_baseline", in);
    EXPECT_EQ(d.advantages.scalar_type(), torch::kFloat32);
    // float32 against float64: the inputs rounded to float (u32 relative) and the estimator's sums
    // over the 4 rows and its products (~2·4 + 8 roundings), relative to the returns it combines.
    const double bound = rlpt::tol::gamma(2 * 4 + 9, rlpt::tol::kUnitRoundoffFp32) *
                         (2 * out.returns.abs().max().item<double>() + out.advantages.abs().max().item<double>());
    EXPECT_LE(rlpt::tol::max_abs_diff(d.advantages, out.advantages), bound);
    EXPECT_TRUE(advantage_estimator_needs("optimal_token_baseline").sum_pi_squared);
    EXPECT_FALSE(advantage_estimator_needs("grpo").sum_pi_squared);
}

}  // namespace
}  // namespace rlpt::algo
