// Advantage estimators. Unless marked "hand", expected numbers were computed once with verl's own
// core_algos functions (mirror of volcengine/verl, loaded under /usr/bin/python3 + torch 1.13) on
// exactly these inputs, then cross-checked by hand where the arithmetic is short (comments).
#include "rlpt/algo/advantage.h"
#include "test_algo_util.h"
#include "test_tolerance.h"

namespace rlpt::algo {
namespace {

using test::expect_close;
using test::t2d;

// Six samples, T = 3, float32; groups (uid labels) 7: rows 0-2, 3: rows 3-4, 9: row 5 (singleton).
// Scores s = 1, 0, 0.5 | 1, 2 | 0.7, each placed on the row's last valid token.
struct OutcomeFixture : ::testing::Test {
    torch::Tensor rewards =
        t2d({{0, 0, 1.0}, {0, 0, 0}, {0.5, 0, 0}, {0, 0, 1.0}, {0, 2.0, 0}, {0, 0.7, 0}}, torch::kFloat32);
    torch::Tensor mask =
        torch::tensor({1, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 0}, torch::kInt64).reshape({6, 3});
    torch::Tensor index = torch::tensor({7, 7, 7, 3, 3, 9}, torch::kInt64);
};

// OutcomeFixture's float32 estimators against float64 hand values (tests/unit/test_tolerance.h):
// the scores rounded to float (0.7: u32), the group statistics in float64, the result rounded to
// float: u32·(|s| + |μ|)/σ + u32·|A| <= 2·u32·(2 + 1.5)/0.5 (largest score and mean, smallest σ
// here), plus 5e-12 for the 12 significant digits of the literals.
const double kFp32Tol = 2 * rlpt::tol::kUnitRoundoffFp32 * (2.0 + 1.5) / 0.5 + 5e-12;

// Per-sample value broadcast over the row's mask.
std::vector<double> tile(const std::vector<double>& per_row, const torch::Tensor& mask) {
    auto m = test::to_vec(mask);
    const size_t t = static_cast<size_t>(mask.size(1));
    std::vector<double> out(m.size());
    for (size_t i = 0; i < m.size(); ++i) out[i] = per_row[i / t] * m[i];
    return out;
}

TEST_F(OutcomeFixture, Grpo) {
    // hand: group 7 μ=0.5 σ=0.5 -> ±0.5/(0.5+1e-6); group 3 μ=1.5 σ=√0.5 -> ∓0.5/(0.70710678+1e-6);
    // singleton -> 0.7/(1+1e-6).
    auto out = compute_grpo(rewards, mask, index);
    EXPECT_EQ(out.advantages.scalar_type(), torch::kFloat32);
    expect_close(out.advantages,
                 tile({0.999997973442, -0.999997973442, 0.0, -0.707105755806, 0.707105755806, 0.699999332428}, mask),
                 kFp32Tol);
    EXPECT_TRUE(torch::equal(out.advantages, out.returns));
    // Dr.GRPO: no std normalisation.
    auto dr = compute_grpo(rewards, mask, index, 1e-6, /*norm_by_std=*/false);
    expect_close(dr.advantages, tile({0.5, -0.5, 0.0, -0.5, 0.5, 0.7}, mask), kFp32Tol);
}

TEST(Grpo, SingletonUsesExactConstantsInFloat64) {
    // Choice (see header): μ=0, σ=1 in the scores' dtype, so A = s/1.000001 exactly; verl's float32
    // constant would give s/1.0000009536743164.
    auto r = t2d({{0, 2.0}});
    auto out = compute_grpo(r, torch::ones({1, 2}), torch::tensor({5}, torch::kInt64));
    EXPECT_DOUBLE_EQ(out.advantages[0][1].item<double>(), 2.0 / (1.0 + 1e-6));
    EXPECT_NE(out.advantages[0][1].item<double>(), 2.0 / 1.0000009536743164);
}

TEST(Grpo, IdenticalScoresGiveExactZero) {
    // 0.1 is not exact in float32; the group mean is taken in float64, so s - μ is exactly 0
    // (a float32 mean of three 0.1f can be 1 ulp off and, divided by σ + ε ≈ 1e-6, turn into ~1e-2).
    auto r = t2d({{0.1}, {0.1}, {0.1}, {0.3}, {0.3}}, torch::kFloat32);
    auto idx = torch::tensor({1, 1, 1, 2, 2}, torch::kInt64);
    auto out = compute_grpo(r, torch::ones({5, 1}), idx);
    for (double a : test::to_vec(out.advantages)) EXPECT_EQ(a, 0.0);
}

TEST(Grpo, FullyMaskedRowCountsInGroupButIsZero) {
    // Row 1 has no valid token and score 0; it still takes part in the group statistics (as in
    // verl). hand: μ=0.5, σ=√0.5.
    auto r = t2d({{0, 1.0}, {0, 0}});
    auto m = torch::tensor({1, 1, 0, 0}, torch::kInt64).reshape({2, 2});
    auto out = compute_grpo(r, m, torch::tensor({4, 4}, torch::kInt64));
    const double a = 0.5 / (std::sqrt(0.5) + 1e-6);
    expect_close(out.advantages, {a, a, 0, 0}, 1e-12);
}

TEST_F(OutcomeFixture, PassK) {
    // hand: group 7 best row 0: (1-0.5)/(0.5+1e-6); group 3 best row 4: (2-1)/(√0.5+1e-6).
    auto r5 = rewards.slice(0, 0, 5), m5 = mask.slice(0, 0, 5), i5 = index.slice(0, 0, 5);
    auto out = compute_grpo_passk(r5, m5, i5);
    expect_close(out.advantages, tile({0.999997973442, 0, 0, 0, 1.41421151161}, m5), kFp32Tol);
    auto raw = compute_grpo_passk(r5, m5, i5, 1e-6, false);
    expect_close(raw.advantages, tile({0.5, 0, 0, 0, 1.0}, m5), kFp32Tol);
    test::expect_value_error([&] { compute_grpo_passk(rewards, mask, index); }, "at least 2 samples");
}

TEST(PassK, OnlyTheBestSampleGetsTheGap) {
    // hand: group {0, 3, 1}: best row 1, gap 3 - 1; group {2, 2}: tie, gap 0.
    auto r = t2d({{0.0}, {3.0}, {1.0}, {2.0}, {2.0}});
    auto idx = torch::tensor({0, 0, 0, 1, 1}, torch::kInt64);
    auto out = compute_grpo_passk(r, torch::ones({5, 1}), idx, 1e-6, false);
    expect_close(out.advantages, {0.0, 2.0, 0.0, 0.0, 0.0});
}

TEST_F(OutcomeFixture, Rloo) {
    // hand: s - mean(others): 1-0.25, 0-0.75, 0.5-0.5 | 1-2, 2-1 | singleton: raw score (choice).
    auto out = compute_rloo(rewards, mask, index);
    expect_close(out.advantages, tile({0.75, -0.75, 0.0, -1.0, 1.0, 0.7}, mask), kFp32Tol);
    // "rloo_vectorized" maps to the same function (verl's vectorised variant would give 0 for row 5).
    AdvantageInputs in{rewards, mask, {}, index, {}};
    EXPECT_TRUE(torch::equal(compute_advantage("rloo_vectorized", in).advantages, out.advantages));
}

TEST_F(OutcomeFixture, Opo) {
    // hand: group 7 lengths 3,2,1: b = (3·1 + 0 + 0.5)/6; group 3 lengths 3,2: b = 7/5; singleton b=0.
    auto out = compute_opo(rewards, mask, index);
    expect_close(out.advantages, tile({1 - 3.5 / 6, -3.5 / 6, 0.5 - 3.5 / 6, -0.4, 0.6, 0.7}, mask), kFp32Tol);
    expect_close(out.advantages,
                 tile({0.416666686535, -0.583333313465, -0.0833333134651, -0.399999976158, 0.600000023842,
                       0.699999988079},
                      mask),
                 kFp32Tol);
}

TEST(Opo, AllRowsOfGroupMaskedGivesZeroNotNan) {
    auto r = t2d({{0.0, 0.0}, {0.0, 0.0}});
    auto out = compute_opo(r, torch::zeros({2, 2}), torch::tensor({1, 1}, torch::kInt64));
    for (double a : test::to_vec(out.advantages)) EXPECT_EQ(a, 0.0);
}

TEST_F(OutcomeFixture, Gpg) {
    // hand: 5 non-zero scores of 6 -> α = 1.2; A = 1.2·(s - μ_g); singleton 1.2·0.7.
    auto out = compute_gpg(rewards, mask, index);
    expect_close(out.advantages, tile({0.6, -0.6, 0.0, -0.6, 0.6, 0.84}, mask), kFp32Tol);
    auto half = compute_gpg(rewards, mask, index, 2.0);
    expect_close(half.advantages, tile({0.3, -0.3, 0.0, -0.3, 0.3, 0.42}, mask), kFp32Tol);
}

TEST_F(OutcomeFixture, ReinforcePlusPlusBaseline) {
    auto out = compute_reinforce_plus_plus_baseline(rewards, mask, index);
    expect_close(out.advantages,
                 {0.744809925556, 0.744809925556, 0.744809925556, -1.15372514725, -1.15372514725, 0, -0.204457640648, 0,
                  0, -1.15372514725, -1.15372514725, -1.15372514725, 0.744809925556, 0.744809925556, 0, 1.12451696396,
                  1.12451696396, 0},
                 kFp32Tol);
}

TEST(Gae, HandCase) {
    // hand (γ=λ=1): t=1: δ = 1 - 0.2 = 0.8; t=0: δ = 0.2 - 0.5 = -0.3, gae = 0.5.
    // returns = gae + V = [1, 1]; whitened [0.5, 0.8] -> ∓0.15/sqrt(0.045 + 1e-8).
    auto out = compute_gae(t2d({{0, 1}}), t2d({{0.5, 0.2}}), torch::ones({1, 2}));
    expect_close(out.returns, {1.0, 1.0}, 1e-12);
    const double w = 0.15 / std::sqrt(0.045 + 1e-8);
    expect_close(out.advantages, {-w, w}, 1e-9);
}

TEST(Gae, SkipsMaskedTokensAndZeroesPadding) {
    // Row 0 has an observation token at t=2 (mask 0 inside the response) and padding at t=4.
    auto r = t2d({{0.0, 0.1, 0.0, 1.0, 0.0}, {0.2, 0.0, 0.5, 0.0, 0.0}});
    auto v = t2d({{0.3, 0.4, 0.5, 0.6, 0.7}, {0.1, -0.2, 0.3, 0.9, 0.4}});
    auto m = torch::tensor({1, 1, 0, 1, 0, 1, 1, 1, 0, 0}, torch::kInt64).reshape({2, 5});
    auto out = compute_gae(r, v, m, 0.9, 0.8);
    // verl values at valid positions; 0 at masked ones (choice: verl leaves whitened values there).
    expect_close(out.advantages,
                 {0.112993769991, 0.728711682896, 0, -0.168509319515, 0, -0.43431104148, 1.33153204389, -1.57041713578,
                  0, 0},
                 1e-9);
    // hand for row 1: t=2: 0.2 + 0.3; t=1: 0.47 + 0.72·0.2 - 0.2 = 0.414.
    expect_close(out.returns, {0.74016, 0.928, 0, 1.0, 0, 0.46208, 0.414, 0.5, 0, 0}, 1e-12);
    test::expect_value_error([&] { compute_gae(r, v, torch::zeros_like(m)); }, "more than one unmasked");
    test::expect_value_error([&] { compute_gae(r, v.slice(1, 0, 4), m); }, "values");
}

TEST(ReinforcePlusPlus, ObservationTokensDoNotBreakPropagation) {
    // hand (γ=0.5): t=2: G=1; t=1 (mask 0): running stays 1, return 0; t=0: G = 0 + 0.5·1.
    // Whitened over {0.5, 1}: ∓0.25/sqrt(0.125 + 1e-8).
    auto out = compute_reinforce_plus_plus(t2d({{0, 0, 1, 0}}), torch::tensor({{1, 0, 1, 0}}), 0.5);
    expect_close(out.returns, {0.5, 0, 1, 0}, 1e-12);
    expect_close(out.advantages, {-0.707106752902, 0, 0.707106752902, 0}, 1e-9);
}

TEST(ReinforcePlusPlus, MatchesVerlOnContiguousMasks) {
    auto r = t2d({{0.0, 0.3, 1.0, 0.0}, {0.5, 0.0, 0.0, 0.0}, {0.0, 0.0, 0.0, 2.0}});
    auto m = torch::tensor({1, 1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1}, torch::kInt64).reshape({3, 4});
    auto out = compute_reinforce_plus_plus(r, m, 0.9);
    expect_close(out.returns, {1.08, 1.2, 1.0, 0, 0.5, 0, 0, 0, 1.458, 1.62, 1.8, 2.0}, 1e-12);
    expect_close(out.advantages,
                 {-0.164146693314, 0.0248494994143, -0.290144155133, 0, -1.0776282915, -1.86511242787, 0, 0,
                  0.43119131378, 0.686336173964, 0.969830463056, 1.2848241176},
                 1e-9);
}

TEST(Remax, HandCase) {
    // hand: reverse cumsum of r·m: [1,1,1,0] and [2,2,0,0]; minus baseline on valid tokens.
    auto r = t2d({{0, 0, 1, 0}, {0, 2, 0, 0}});
    auto m = torch::tensor({1, 1, 1, 0, 1, 1, 0, 0}, torch::kInt64).reshape({2, 4});
    auto out = compute_remax(r, m, test::t1d({0.5, 1.0}));
    expect_close(out.returns, {1, 1, 1, 0, 2, 2, 0, 0});
    expect_close(out.advantages, {0.5, 0.5, 0.5, 0, 1, 1, 0, 0});
    test::expect_value_error([&] { compute_remax(r, m, test::t1d({0.5})); }, "reward_baselines");
}

TEST(GroupIndex, ArbitraryLabelsBecomeDense) {
    auto g = make_group_index(std::vector<std::string>{"b", "a", "b", "c"});
    EXPECT_EQ(g.num_groups, 3);
    expect_close(g.ids, {0, 1, 0, 2});
    auto g2 = make_group_index(torch::tensor({100, -5, 100}, torch::kInt64));
    EXPECT_EQ(g2.num_groups, 2);
    expect_close(g2.ids, {0, 1, 0});
    auto g3 = make_group_index(std::vector<int64_t>{});
    EXPECT_EQ(g3.num_groups, 0);
    EXPECT_EQ(g3.ids.numel(), 0);
    test::expect_value_error([] { make_group_index(torch::ones({2})); }, "integer");
}

TEST_F(OutcomeFixture, AllZeroMaskGivesZerosOrAClearError) {
    AdvantageInputs in{rewards, torch::zeros_like(mask), rewards.clone(), index, torch::zeros({6}, torch::kFloat32)};
    for (const char* name : {"grpo", "rloo", "opo", "gpg", "remax"}) {
        auto out = compute_advantage(name, in);
        EXPECT_EQ(out.advantages.abs().sum().item<double>(), 0.0) << name;
        EXPECT_FALSE(torch::isnan(out.returns).any().item<bool>()) << name;
    }
    // Whitening estimators need at least two valid tokens in the batch.
    for (const char* name : {"gae", "reinforce_plus_plus", "reinforce_plus_plus_baseline"})
        test::expect_value_error([&] { compute_advantage(name, in); }, "more than one unmasked element");
}

TEST_F(OutcomeFixture, DispatcherByName) {
    AdvantageInputs in{rewards, mask, {}, index, {}};
    AdvantageParams params;
    EXPECT_TRUE(
        torch::equal(compute_advantage("grpo", in, params).advantages, compute_grpo(rewards, mask, index).advantages));
    EXPECT_TRUE(torch::equal(compute_advantage("grpo_vectorized", in, params).advantages,
                             compute_grpo(rewards, mask, index).advantages));
    params.norm_adv_by_std_in_grpo = false;
    EXPECT_TRUE(torch::equal(compute_advantage("grpo", in, params).advantages,
                             compute_grpo(rewards, mask, index, 1e-6, false).advantages));
    EXPECT_TRUE(advantage_estimator_needs_values("gae"));
    EXPECT_FALSE(advantage_estimator_needs_values("grpo"));
    test::expect_value_error([&] { compute_advantage("grpoo", in); }, "unknown advantage estimator 'grpoo'");
    test::expect_value_error([&] { compute_advantage("grpoo", in); }, "reinforce_plus_plus_baseline");
    test::expect_value_error([&] { compute_advantage("gdpo", in); }, "'reward_components'");
    test::expect_value_error([&] { compute_advantage("optimal_token_baseline", in); }, "'old_log_probs'");
    test::expect_value_error([&] { compute_advantage("gae", in); }, "'values'");
    test::expect_value_error([&] { compute_advantage("remax", in); }, "'reward_baselines'");
    AdvantageInputs no_index{rewards, mask, {}, {}, {}};
    test::expect_value_error([&] { compute_advantage("rloo", no_index); }, "'index'");
    AdvantageInputs no_mask{rewards, {}, {}, index, {}};
    test::expect_value_error([&] { compute_advantage("grpo", no_mask); }, "'response_mask'");
    test::expect_value_error([&] { compute_grpo(rewards, mask, index.slice(0, 0, 5)); }, "index must have shape [6]");
}

TEST_F(OutcomeFixture, BadArguments) {
    test::expect_value_error([&] { compute_gpg(rewards, mask, index, 0.0); }, "f_norm");
    test::expect_value_error([&] { make_group_index(torch::ones({2, 2}, torch::kInt64)); }, "1-D");
    test::expect_value_error([&] { compute_grpo(rewards.to(torch::kInt64), mask, index); }, "floating point");
    test::expect_value_error([&] { compute_grpo(rewards.reshape({-1}), mask.reshape({-1}), index); }, "2-D");
}

}  // namespace
}  // namespace rlpt::algo
