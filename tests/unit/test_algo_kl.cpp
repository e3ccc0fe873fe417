// KL estimators, straight-through variants, in-reward penalty, controllers, KL loss.
// Values: hand arithmetic (comments), confirmed with verl's kl_penalty/agg_loss under
// /usr/bin/python3 + torch 1.13 on the same inputs.
#include <cmath>

#include "rlpt/algo/kl.h"
#include "test_algo_util.h"

namespace rlpt::algo {
namespace {

using test::expect_close;
using test::t2d;

struct KlFixture : ::testing::Test {
    // Tokens 2 and 3 exercise k3's clamps: ref - logp = 30 and -30.
    torch::Tensor logp = t2d({{-1.0, -0.5, -31.0, 1.0}});
    torch::Tensor ref = t2d({{-1.2, -0.1, -1.0, -29.0}});

    std::pair<torch::Tensor, torch::Tensor> value_and_grad(const std::string& type) {
        auto x = logp.clone().requires_grad_(true);
        auto v = kl_penalty(x, ref, type);
        v.sum().backward();
        return {v.detach(), x.grad()};
    }
};

TEST_F(KlFixture, Estimators) {
    // d = logp - ref = [0.2, -0.4, -30, 30].
    for (const char* name : {"kl", "k1"}) {
        auto [v, g] = value_and_grad(name);
        expect_close(v, {0.2, -0.4, -30, 30}, 1e-12);
        expect_close(g, {1, 1, 1, 1});
    }
    auto [va, ga] = value_and_grad("abs");
    expect_close(va, {0.2, 0.4, 30, 30}, 1e-12);
    expect_close(ga, {1, -1, -1, 1});
    for (const char* name : {"mse", "k2"}) {
        auto [v, g] = value_and_grad(name);
        expect_close(v, {0.02, 0.08, 450, 450}, 1e-12);
        expect_close(g, {0.2, -0.4, -30, 30}, 1e-12);
    }
    // k3: e^{-0.2} + 0.2 - 1, e^{0.4} - 1.4; both outer clamps hit 10 (gradient 0 there).
    for (const char* name : {"low_var_kl", "k3"}) {
        auto [v, g] = value_and_grad(name);
        expect_close(v, {std::exp(-0.2) + 0.2 - 1, std::exp(0.4) - 1.4, 10, 10}, 1e-12);
        expect_close(g, {1 - std::exp(-0.2), 1 - std::exp(0.4), 0, 0}, 1e-12);
    }
}

TEST_F(KlFixture, StraightThroughKeepsForwardAndUsesK2Gradient) {
    auto [k2v, k2g] = value_and_grad("k2");
    for (const char* base : {"k1", "kl", "abs", "k3", "low_var_kl", "mse", "k2"}) {
        auto [bv, bg] = value_and_grad(base);
        auto [sv, sg] = value_and_grad(std::string(base) + "+");
        EXPECT_TRUE(torch::allclose(sv, bv, 0, 0)) << base << "+ forward";
        EXPECT_TRUE(torch::allclose(sg, k2g, 0, 1e-12)) << base << "+ gradient";
    }
    // The k3+ gradient really differs from k3's: 0.2 vs 1 - e^{-0.2} = 0.1813.
    EXPECT_NE(value_and_grad("k3+").second[0][0].item<double>(), value_and_grad("k3").second[0][0].item<double>());
    auto t = parse_kl_type("k2+");
    EXPECT_EQ(t.estimator, KlEstimator::kK2);
    EXPECT_FALSE(t.straight_through);
}

TEST_F(KlFixture, UnsupportedAndUnknownTypes) {
    test::expect_value_error([] { parse_kl_type("full"); }, "not supported");
    test::expect_value_error([] { parse_kl_type("full+"); }, "not supported");
    test::expect_value_error([] { parse_kl_type("k4"); }, "unknown KL type 'k4'");
    test::expect_value_error([] { parse_kl_type(""); }, "low_var_kl");
    test::expect_value_error([&] { kl_penalty(logp, ref.slice(1, 0, 2), "kl"); }, "shape");
}

struct ApplyKlFixture : ::testing::Test {
    torch::Tensor scores = t2d({{0, 0, 1.0}, {0, 2.0, 0}});
    torch::Tensor old_lp = t2d({{-1.0, -2.0, -0.5}, {-0.7, -1.1, -3.0}});
    torch::Tensor ref_lp = t2d({{-1.1, -1.5, -0.5}, {-0.9, -1.0, -1.0}});
    torch::Tensor mask = torch::tensor({1, 1, 1, 1, 1, 0}, torch::kInt64).reshape({2, 3});
};

TEST_F(ApplyKlFixture, FixedController) {
    // hand: kld = [[0.1, -0.5, 0], [0.2, -0.1, (masked)]]; rewards = scores - 0.1·kld;
    // current_kl = mean(-0.4/3, 0.1/2) = -1/24.
    auto ctrl = KlController::fixed(0.1);
    auto out = apply_kl_penalty(scores, old_lp, ref_lp, mask, ctrl, "kl");
    expect_close(out.token_level_rewards, {-0.01, 0.05, 1.0, -0.02, 2.01, 0.0}, 1e-12);
    EXPECT_NEAR(out.current_kl, -1.0 / 24, 1e-12);
    EXPECT_NEAR(out.metrics.at("actor/reward_kl_penalty"), -1.0 / 24, 1e-12);
    EXPECT_EQ(out.metrics.at("actor/reward_kl_penalty_coeff"), 0.1);
    EXPECT_EQ(ctrl.value(), 0.1);
}

TEST_F(ApplyKlFixture, AdaptiveControllerUpdatesAfterUse) {
    // err = clip(-1/24 / 0.1 - 1, ±0.2) = -0.2; value = 0.1·(1 - 0.2·2/100) with n_steps = B = 2.
    auto ctrl = KlController::adaptive(0.1, 0.1, 100);
    auto out = apply_kl_penalty(scores, old_lp, ref_lp, mask, ctrl, "kl");
    EXPECT_EQ(out.metrics.at("actor/reward_kl_penalty_coeff"), 0.1);
    EXPECT_NEAR(ctrl.value(), 0.1 * (1 - 0.2 * 2 / 100.0), 1e-15);
    // Positive error inside the clip range: kl = 0.11, target 0.1 -> err 0.1.
    auto c2 = KlController::adaptive(0.5, 0.1, 10);
    c2.update(0.11, 5);
    EXPECT_NEAR(c2.value(), 0.5 * (1 + 0.1 * 5 / 10.0), 1e-12);
    auto fixed = KlController::from_config("fixed", 0.3, 0.1, 10);
    fixed.update(100.0, 1000);
    EXPECT_EQ(fixed.value(), 0.3);
    EXPECT_EQ(KlController::from_config("adaptive", 0.3, 0.1, 10).kind(), KlController::Kind::kAdaptive);
    test::expect_value_error([] { KlController::adaptive(0.1, 0.1, 0); }, "horizon");
    test::expect_value_error([] { KlController::adaptive(0.1, 0.0, 10); }, "target_kl");
    test::expect_value_error([] { KlController::from_config("pid", 0.1, 0.1, 10); }, "fixed, adaptive");
    test::expect_value_error([&] { apply_kl_penalty(scores, old_lp, ref_lp, mask.slice(1, 0, 2), fixed); },
                             "response_mask");
}

TEST_F(ApplyKlFixture, KlLossUsesAggLoss) {
    // verl: agg_loss(kl_penalty(old, ref, "low_var_kl"), mask, "token-mean") on these inputs.
    auto v = kl_loss(old_lp, ref_lp, mask, "low_var_kl", AggMode::kTokenMean);
    EXPECT_NEAR(v.item<double>(), 0.0354920719779435, 1e-12);
    GlobalBatchInfo info;
    info.dp_size = 2;
    info.batch_num_tokens = 10.0;
    auto sharded = kl_loss(old_lp, ref_lp, mask, "low_var_kl", AggMode::kTokenMean, info);
    EXPECT_NEAR(sharded.item<double>(), 0.0354920719779435 * 5 / 10 * 2, 1e-12);
}

}  // namespace
}  // namespace rlpt::algo
