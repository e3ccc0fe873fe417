// Policy losses. Inputs: B=2, T=4, float64, one padded token (row 0, t=3).
// Expected losses, metrics and d loss / d log_prob were computed once with verl's own
// compute_policy_loss_* (volcengine/verl mirror, /usr/bin/python3 + torch 1.13, autograd) on exactly
// these inputs; dro (not in that mirror) from its formula in torch. The vanilla numbers were also
// worked by hand (see the comments). verl reports clip fractions in float32, hence 1e-7 there.
#include "rlpt/algo/policy_loss.h"
#include "test_algo_util.h"
#include "test_tolerance.h"

namespace rlpt::algo {
namespace {

using test::expect_close;
using test::t2d;

struct PolicyFixture : ::testing::Test {
    torch::Tensor old_lp = t2d({{-1.0, -0.5, -2.0, -1.5}, {-0.3, -1.2, -0.8, -2.5}});
    torch::Tensor delta = t2d({{0.3, -0.1, 0.05, -0.4}, {1.5, 0.25, -0.3, 0.1}});
    torch::Tensor adv = t2d({{1.5, -0.5, 0.8, -2.0}, {-1.0, 0.3, -0.7, 1.2}});
    torch::Tensor mask = torch::tensor({1, 1, 1, 0, 1, 1, 1, 1}, torch::kInt64).reshape({2, 4});
    torch::Tensor weights = t2d({{1.0, 0.5, 2.0, 1.0}, {0.8, 1.0, 1.5, 0.25}});
    torch::Tensor logp;

    PolicyLossInputs inputs(bool with_weights = false) {
        logp = (old_lp + delta).detach().requires_grad_(true);
        return {old_lp, logp, adv, mask, with_weights ? weights : torch::Tensor()};
    }
    void check(const PolicyLossOutput& out, double loss, const std::vector<double>& grad,
               const std::map<std::string, double>& metrics) {
        EXPECT_NEAR(out.loss.item<double>(), loss, 1e-12);
        out.loss.backward();
        expect_close(logp.grad(), grad, 1e-12);
        EXPECT_EQ(out.metrics.size(), metrics.size());
        for (const auto& [k, v] : metrics) {
            ASSERT_TRUE(out.metrics.count(k)) << k;
            EXPECT_NEAR(out.metrics.at(k), v, 1e-7) << k;
        }
    }
};

TEST_F(PolicyFixture, VanillaWithDualClip) {
    // hand: token losses -1.8 (clipped high), 0.452419, -0.841017, 3 (dual clip: A=-1, ratio e^1.5),
    // -0.36 (clipped), 0.56 (clipped low), -1.326205; sum/7 = -0.0449719. clipfrac 3/7, lower 1/7,
    // ppo_kl = -Σδ/7 = -1.8/7. Gradient only on unclipped tokens: -A·ratio/7.
    check(compute_policy_loss_vanilla(inputs(), {}), -0.0449718956819452,
          {0, 0.0646312441454257, -0.12014526815726, 0, 0, 0, 0, -0.189457871670111},
          {{"actor/pg_clipfrac", 3.0 / 7}, {"actor/ppo_kl", -1.8 / 7}, {"actor/pg_clipfrac_lower", 1.0 / 7}});
}

TEST_F(PolicyFixture, VanillaClipHigher) {
    PolicyLossConfig cfg;
    cfg.clip_ratio_high = 0.28;  // DAPO clip-higher: token (0,0) now clips at 1.28, (1,1) at 1.28
    check(compute_policy_loss_vanilla(inputs(), cfg), -0.0655433242533738,
          {0, 0.0646312441454257, -0.12014526815726, 0, 0, 0, 0, -0.189457871670111},
          {{"actor/pg_clipfrac", 3.0 / 7}, {"actor/ppo_kl", -1.8 / 7}, {"actor/pg_clipfrac_lower", 1.0 / 7}});
}

TEST_F(PolicyFixture, VanillaWithIsWeightsAndSeqMean) {
    PolicyLossConfig cfg;
    cfg.loss_agg_mode = AggMode::kSeqMeanTokenSum;
    check(compute_policy_loss_vanilla(inputs(true), cfg), -0.353687837557671,
          {0, 0.113104677254495, -0.841016877100819, 0, 0, 0, 0, -0.165775637711347},
          {{"actor/pg_clipfrac", 3.0 / 7}, {"actor/ppo_kl", -1.8 / 7}, {"actor/pg_clipfrac_lower", 1.0 / 7}});
}

TEST_F(PolicyFixture, VanillaFloat32) {
    auto in = inputs();
    in.old_log_prob = in.old_log_prob.to(torch::kFloat32);
    in.log_prob = in.log_prob.detach().to(torch::kFloat32);
    in.advantages = in.advantages.to(torch::kFloat32);
    auto out = compute_policy_loss_vanilla(in, {});
    EXPECT_EQ(out.loss.scalar_type(), torch::kFloat32);
    // float32 against float64: per token the inputs' roundings, the ratio's exp and ~8 more
    // operations, then the mean over the 7 valid tokens: γ_{7+12}(u32) of Σ|terms|/7, each term at
    // most |A|·exp(|Δlog p|) (the ratio, or its clip to [0.8, 1.2], which is no larger).
    const auto m = mask.to(torch::kFloat64);
    const double scale = ((adv.abs() * delta.abs().exp() * m).sum() / m.sum()).item<double>();
    EXPECT_NEAR(out.loss.item<double>(), -0.0449718956819452,
                rlpt::tol::gamma(7 + 12, rlpt::tol::kUnitRoundoffFp32) * scale);
}

TEST_F(PolicyFixture, Gspo) {
    PolicyLossConfig cfg;
    cfg.clip_ratio_low = 0.05;
    cfg.clip_ratio_high = 0.1;
    check(compute_policy_loss_gspo(inputs(), cfg), -0.219246462212328,
          {-0.271726012380307, 0.0905753374601024, -0.144920539936164, 0, 0.184161619202377, 0, 0.128913133441664, 0},
          {{"actor/pg_clipfrac", 2.0 / 7}, {"actor/ppo_kl", -1.8 / 7}, {"actor/pg_clipfrac_lower", 0.0}});
}

TEST_F(PolicyFixture, Sapo) {
    check(compute_policy_loss_sapo(inputs(), {}), -0.502296979587181,
          {-0.327345249503459, 0.0752152219293919, -0.140077403094957, 0, 0.0550261248852522, -0.0471927722248922,
           0.0636360723580844, -0.165318073608048},
          {{"actor/pg_clipfrac", 0.0}, {"actor/ppo_kl", -1.8 / 7}, {"actor/pg_clipfrac_lower", 0.0}});
}

TEST_F(PolicyFixture, Gpg) {
    // hand: -Σ logp·A / 7 over valid tokens; gradient -A/7.
    check(compute_policy_loss_gpg(inputs(), {}), 0.843571428571429,
          {-1.5 / 7, 0.5 / 7, -0.8 / 7, 0, 1.0 / 7, -0.3 / 7, 0.7 / 7, -1.2 / 7}, {});
}

TEST_F(PolicyFixture, Cispo) {
    check(compute_policy_loss_cispo(inputs(), {}), 0.996774846999096,
          {-0.257142857142857, 0.0646312441454257, -0.12014526815726, 0, 0.171428571428571, -0.0514285714285714, 0.08,
           -0.189457871670111},
          {{"actor/pg_clipfrac", 4.0 / 7}, {"actor/ppo_kl", -1.8 / 7}, {"actor/pg_clipfrac_lower", 0.0}});
}

TEST_F(PolicyFixture, Dro) {
    PolicyLossConfig cfg;
    cfg.dro_beta = 0.5;
    check(compute_policy_loss_dro(inputs(), cfg), 0.933392857142857,
          {-0.192857142857143, 0.0642857142857143, -0.110714285714286, 0, 0.25, -0.025, 0.0785714285714286,
           -0.164285714285714},
          {{"actor/ppo_kl", -1.8 / 7}});
    test::expect_value_error([&] { compute_policy_loss_dro(inputs(), PolicyLossConfig{}); }, "dro_beta");
}

TEST_F(PolicyFixture, ClipCovWithSingleCandidateIsDeterministic) {
    // cov over valid tokens (verl): only token (0,1) has -0.3 < cov = -0.2394 < -0.2 and is not
    // clipped already, so it is the one zeroed (clip_num = max(int(2e-4·7), 1) = 1).
    // hand: (-1.8 - 0.841017 + 4.481689 - 0.36 + 0.56 - 1.326205)/7 = 0.1020667 (no dual clip).
    PolicyLossConfig cfg;
    cfg.clip_cov_lb = -0.3;
    cfg.clip_cov_ub = -0.2;
    auto in = inputs();
    in.generator = at::detail::createCPUGenerator(1);
    check(compute_policy_loss_clip_cov(in, cfg), 0.102066727363781,
          {0, 0, -0.12014526815726, 0, 0.640241295762581, 0, 0, -0.189457871670111},
          {{"actor/pg_clipfrac", 1.0 / 7}, {"actor/ppo_kl", -1.8 / 7}});
}

TEST(ClipCov, RandomSubsetHasClipNumTokensAndFollowsTheGenerator) {
    torch::manual_seed(0);
    const int64_t b = 50, t = 200;  // 10000 tokens -> clip_num = int(2e-4·10000) = 2
    auto old_lp = -torch::rand({b, t}, torch::kFloat64) * 3;
    PolicyLossInputs in{
        old_lp, old_lp.clone(), torch::randn({b, t}, torch::kFloat64), torch::ones({b, t}, torch::kInt64), {}};
    PolicyLossConfig cfg;
    cfg.clip_cov_lb = -100.0;  // every token is a candidate
    cfg.clip_cov_ub = 100.0;
    in.generator = at::detail::createCPUGenerator(7);
    auto a = compute_policy_loss_clip_cov(in, cfg);
    in.generator = at::detail::createCPUGenerator(7);
    auto b2 = compute_policy_loss_clip_cov(in, cfg);
    EXPECT_NEAR(a.metrics.at("actor/pg_clipfrac"), 2.0 / 10000, 1e-12);
    EXPECT_EQ(a.loss.item<double>(), b2.loss.item<double>());
    // Never torch's global RNG: without a generator the loss refuses to draw.
    in.generator.reset();
    test::expect_value_error([&] { compute_policy_loss_clip_cov(in, cfg); }, "seeded generator");
}

// dppo_tv / dppo_kl on a batch of valid probabilities (B = 2, T = 3, one padded token), ε = 0.2,
// c = 3. Expected values computed by hand from ALGORITHMS §1.2 (token-mean over 5 tokens):
//   (0,0) A>0, p - p_old = 0.298 > ε: outside both regions (bkl = 0.316 > ε, p > p_old)
//   (0,1) A<0, p - p_old = -0.239 < -ε: outside TV; bkl = 0.117 <= ε: inside KL
//   (1,0) ratio e^1.5 > c: truncated to 3 (counted in pg_clipfrac_lower), inside both
// TV loss: [0.5·e^0.1·1.9 - 0.7·3·1.5 + 2·0.05] / 5 = -0.4000175255656268.
struct DppoFixture : ::testing::Test {
    torch::Tensor old_lp = t2d({{-0.5, -0.5, -2.0}, {-3.0, -0.05, -1.0}});
    torch::Tensor new_lp = t2d({{-0.1, -1.0, -1.9}, {-1.5, -0.05, -1.2}});
    torch::Tensor adv = t2d({{1.0, -1.0, 0.5}, {-0.7, 2.0, -0.3}});
    torch::Tensor mask = torch::tensor({1, 1, 1, 1, 1, 0}, torch::kInt64).reshape({2, 3});
    torch::Tensor logp;
    PolicyLossInputs inputs() {
        logp = new_lp.clone().requires_grad_(true);
        return {old_lp, logp, adv, mask, {}};
    }
    void check(const PolicyLossOutput& out, double loss, const std::vector<double>& grad, double clipfrac) {
        EXPECT_NEAR(out.loss.item<double>(), loss, 1e-12);
        out.loss.backward();
        expect_close(logp.grad(), grad, 1e-12);
        EXPECT_NEAR(out.metrics.at("actor/pg_clipfrac"), clipfrac, 1e-12);
        EXPECT_NEAR(out.metrics.at("actor/pg_clipfrac_lower"), 1.0 / 5, 1e-12);
        EXPECT_NEAR(out.metrics.at("actor/ppo_kl"), -1.5 / 5, 1e-12);
    }
};

TEST_F(DppoFixture, TotalVariation) {
    check(compute_policy_loss("dppo_tv", inputs(), {}), -0.4000175255656268,
          {0, 0, -0.11051709180756478, 0.42, -0.4, 0}, 2.0 / 5);
}

TEST_F(DppoFixture, BinaryKl) {
    check(compute_policy_loss("dppo_kl", inputs(), {}), -0.5213236575081535,
          {0, 0.12130613194252668, -0.11051709180756478, 0.42, -0.4, 0}, 1.0 / 5);
}

TEST_F(PolicyFixture, KlCov) {
    // Top-1 covariance token (1,0) gets +0.1·|δ| (kl_cov_ratio 2e-4 of 7 tokens -> k = 1).
    check(compute_policy_loss_kl_cov(inputs(), {}), 0.129351816953046,
          {-0.274969744480572, 0.0646312441454257, -0.12014526815726, 0, 0.640241295762581, -0.0550296607151889,
           0.0740818220681718, -0.189457871670111},
          {{"actor/ppo_kl", 2.6 / 7}});
}

TEST_F(PolicyFixture, GeoMean) {
    check(compute_policy_loss_geo_mean(inputs(), {}), -0.278085711471775,
          {0, -0.105127109637602, -0.105127109637602, 0, 0.00932390436025794, 0, 0, 0.00932390436025794},
          {{"actor/pg_clipfrac", 2.0 / 7}, {"actor/ppo_kl", -1.8 / 7}, {"actor/pg_clipfrac_lower", 2.0 / 7}});
}

TEST_F(PolicyFixture, GeoMeanWithIsWeights) {
    auto out = compute_policy_loss_geo_mean(inputs(true), {});
    EXPECT_NEAR(out.loss.item<double>(), -0.287779483793799, 1e-12);
    out.loss.backward();
    expect_close(logp.grad(),
                 {0, -0.105127109649867, -0.105127109649867, 0, 0.00690046128895075, 0, 0, 0.00690046128895075}, 1e-12);
}

TEST_F(PolicyFixture, GeoMeanShardsUseGlobalRowCount) {
    // Each row as its own DP shard (dp_size 2, global_batch_size 2): mean of shard losses = whole.
    PolicyLossConfig cfg;
    cfg.global_batch_info.dp_size = 2;
    cfg.global_batch_info.global_batch_size = 2;
    double sum = 0;
    for (int64_t r = 0; r < 2; ++r) {
        PolicyLossInputs in{old_lp.slice(0, r, r + 1),
                            (old_lp + delta).slice(0, r, r + 1),
                            adv.slice(0, r, r + 1),
                            mask.slice(0, r, r + 1),
                            {}};
        sum += compute_policy_loss_geo_mean(in, cfg).loss.item<double>();
    }
    EXPECT_NEAR(sum / 2, -0.278085711471775, 1e-12);
    cfg.global_batch_info.global_batch_size.reset();
    test::expect_value_error([&] { compute_policy_loss_geo_mean(inputs(), cfg); }, "global_batch_size");
}

TEST_F(PolicyFixture, FullyMaskedBatchGivesZeroLossAndMetrics) {
    auto in = inputs();
    in.response_mask = torch::zeros_like(mask);
    in.generator = at::detail::createCPUGenerator(3);
    for (const auto& name : policy_loss_names()) {
        PolicyLossConfig cfg;
        cfg.dro_beta = 0.1;
        auto out = compute_policy_loss(name, in, cfg);
        EXPECT_EQ(out.loss.item<double>(), 0.0) << name;
        for (const auto& [k, v] : out.metrics) EXPECT_EQ(v, 0.0) << name << " " << k;
    }
}

TEST_F(PolicyFixture, DispatchAndErrors) {
    auto in = inputs();
    EXPECT_EQ(compute_policy_loss("vanilla", in, {}).loss.item<double>(),
              compute_policy_loss_vanilla(in, {}).loss.item<double>());
    test::expect_value_error([&] { compute_policy_loss("vanila", in, {}); }, "unknown policy loss_mode 'vanila'");
    test::expect_value_error([&] { compute_policy_loss("bypass_mode", in, {}); }, "not supported");
    PolicyLossConfig bad_c;
    bad_c.clip_ratio_c = 1.0;
    test::expect_value_error([&] { compute_policy_loss_vanilla(in, bad_c); }, "clip_ratio_c");
    PolicyLossConfig bad_eps;
    bad_eps.clip_ratio_low = -0.1;
    test::expect_value_error([&] { compute_policy_loss_vanilla(in, bad_eps); }, "clip ratios");
    auto bad_shape = in;
    bad_shape.advantages = adv.slice(1, 0, 3);
    test::expect_value_error([&] { compute_policy_loss_vanilla(bad_shape, {}); }, "'advantages' has shape [2,3]");
    auto bad_w = in;
    bad_w.rollout_is_weights = torch::ones({2, 3}, torch::kFloat64);
    test::expect_value_error([&] { compute_policy_loss_gspo(bad_w, {}); }, "rollout_is_weights");
    PolicyLossConfig bad_tau;
    bad_tau.tau_neg = 0.0;
    test::expect_value_error([&] { compute_policy_loss_sapo(in, bad_tau); }, "tau");
}

TEST_F(PolicyFixture, CovarianceRatiosMustBePositive) {
    PolicyLossConfig cfg;
    cfg.clip_cov_ratio = 0.0;
    auto in = inputs();
    in.generator = at::detail::createCPUGenerator(1);
    test::expect_value_error([&] { compute_policy_loss_clip_cov(in, cfg); }, "clip_cov_ratio");
    cfg = {};
    cfg.kl_cov_ratio = -1.0;
    test::expect_value_error([&] { compute_policy_loss_kl_cov(inputs(), cfg); }, "kl_cov_ratio");
}

}  // namespace
}  // namespace rlpt::algo
