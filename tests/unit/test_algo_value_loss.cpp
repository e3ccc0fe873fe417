// Clipped value loss, entropy term and the combined actor objective (hand-checked values).
#include "rlpt/algo/kl.h"
#include "rlpt/algo/value_loss.h"
#include "test_algo_util.h"

namespace rlpt::algo {
namespace {

using test::expect_close;
using test::t2d;

TEST(ValueLoss, ClippedByHand) {
    // values 0, ε_v = 0.5 -> vclip = [0.2, 0.5, -0.5, 0.3]; returns 1.
    // (v-R)² = [0.64, 0, 3.24, 0.49], (vclip-R)² = [0.64, 0.25, 2.25, 0.49]; token 3 masked.
    // max = [0.64, 0.25, 3.24]; loss = 0.5·4.13/3; clipfrac 1/3 (token 1); vpred_mean 0.4/3.
    auto vpreds = t2d({{0.2, 1.0, -0.8, 0.3}}).requires_grad_(true);
    auto out = compute_value_loss(vpreds, t2d({{1, 1, 1, 1}}), t2d({{0, 0, 0, 0}}), torch::tensor({{1, 1, 1, 0}}));
    EXPECT_NEAR(out.loss.item<double>(), 0.5 * 4.13 / 3, 1e-12);
    EXPECT_NEAR(out.metrics.at("critic/vf_loss"), 0.5 * 4.13 / 3, 1e-12);
    EXPECT_NEAR(out.metrics.at("critic/vf_clipfrac"), 1.0 / 3, 1e-12);
    EXPECT_NEAR(out.metrics.at("critic/vpred_mean"), 0.4 / 3, 1e-12);
    out.loss.backward();
    // d/dv 0.5·(v-R)²/3 = (v-R)/3 on unclipped tokens; the clipped branch of token 1 has no gradient.
    expect_close(vpreds.grad(), {-0.8 / 3, 0, -1.8 / 3, 0}, 1e-12);
}

TEST(ValueLoss, GlobalInfoAndErrors) {
    auto v = t2d({{0.2, 1.0, -0.8, 0.3}});
    auto r = t2d({{1, 1, 1, 1}});
    auto old = t2d({{0, 0, 0, 0}});
    auto m = torch::tensor({{1, 1, 1, 0}});
    GlobalBatchInfo info;
    info.dp_size = 2;
    info.batch_num_tokens = 6.0;
    auto out = compute_value_loss(v, r, old, m, 0.5, AggMode::kTokenMean, info);
    EXPECT_NEAR(out.loss.item<double>(), 0.5 * 4.13 / 6 * 2, 1e-12);
    test::expect_value_error([&] { compute_value_loss(v, r, old, m, -0.1); }, "cliprange_value");
    test::expect_value_error([&] { compute_value_loss(v, r.slice(1, 0, 3), old, m); }, "'returns'");
}

TEST(EntropyLoss, IsAggLoss) {
    auto ent = t2d({{1.0, 2.0}, {3.0, 5.0}});
    auto m = torch::tensor({{1, 0}, {1, 1}});
    EXPECT_NEAR(entropy_loss(ent, m, AggMode::kTokenMean).item<double>(), 3.0, 1e-12);
    EXPECT_NEAR(entropy_loss(ent, m, AggMode::kSeqMeanTokenMean).item<double>(), 2.5, 1e-12);
}

struct ActorFixture : ::testing::Test {
    torch::Tensor old_lp = t2d({{-1.0, -0.5}, {-0.3, -1.2}});
    torch::Tensor logp = t2d({{-0.9, -0.6}, {-0.3, -1.0}});
    torch::Tensor adv = t2d({{1.0, -1.0}, {0.5, 0.5}});
    torch::Tensor mask = torch::tensor({{1, 1}, {1, 0}});
    torch::Tensor entropy = t2d({{2.0, 1.0}, {3.0, 9.0}});
    torch::Tensor ref = t2d({{-1.0, -0.7}, {-0.2, -1.0}});
};

TEST_F(ActorFixture, CombinesPgEntropyAndKl) {
    ActorLossConfig cfg;
    cfg.entropy_coeff = 0.01;
    cfg.use_kl_loss = true;
    cfg.kl_loss_coef = 0.1;
    ActorLossInputs in{{old_lp, logp, adv, mask, {}}, entropy, ref};
    auto out = compute_actor_loss(in, cfg);
    const double pg = compute_policy_loss_vanilla(in.policy, cfg.policy).loss.item<double>();
    const double ent = 2.0;  // hand: (2 + 1 + 3)/3
    const double kl = kl_loss(logp, ref, mask, "low_var_kl", AggMode::kTokenMean).item<double>();
    EXPECT_NEAR(out.loss.item<double>(), pg - 0.01 * ent + 0.1 * kl, 1e-12);
    EXPECT_NEAR(out.metrics.at("actor/pg_loss"), pg, 1e-12);
    EXPECT_NEAR(out.metrics.at("actor/entropy_loss"), ent, 1e-12);
    EXPECT_NEAR(out.metrics.at("actor/kl_loss"), kl, 1e-12);
    EXPECT_EQ(out.metrics.at("actor/kl_coef"), 0.1);
    EXPECT_TRUE(out.metrics.count("actor/pg_clipfrac"));
}

TEST_F(ActorFixture, OptionalTermsAndErrors) {
    ActorLossInputs in{{old_lp, logp, adv, mask, {}}, {}, {}};
    auto out = compute_actor_loss(in, {});
    EXPECT_FALSE(out.metrics.count("actor/entropy_loss"));
    EXPECT_FALSE(out.metrics.count("actor/kl_loss"));
    ActorLossConfig with_ent;
    with_ent.entropy_coeff = 0.01;
    test::expect_value_error([&] { compute_actor_loss(in, with_ent); }, "no entropy tensor");
    ActorLossConfig with_kl;
    with_kl.use_kl_loss = true;
    test::expect_value_error([&] { compute_actor_loss(in, with_kl); }, "ref_log_prob");
    ActorLossConfig bad_mode;
    bad_mode.loss_mode = "nope";
    test::expect_value_error([&] { compute_actor_loss(in, bad_mode); }, "unknown policy loss_mode");
}

}  // namespace
}  // namespace rlpt::algo
