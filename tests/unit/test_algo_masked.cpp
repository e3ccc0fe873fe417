// Masked helpers. Expected values: hand arithmetic where shown; the rest were computed once with
// verl's torch_functional (masked_mean/var/whiten, entropy_from_logits,
// calculate_sum_pi_squared_from_logits, logprobs_from_logits_v2) under /usr/bin/python3 + torch 1.13
// on exactly these inputs.
#include <cmath>

#include "rlpt/algo/masked_ops.h"
#include "test_algo_util.h"
#include "test_tolerance.h"

namespace rlpt::algo {
namespace {

using test::expect_close;
using test::t2d;

struct MaskedFixture : ::testing::Test {
    torch::Tensor v = t2d({{1, 2, 3, 4}, {5, 6, 7, 8}});
    torch::Tensor m = torch::tensor({1, 1, 0, 0, 1, 1, 1, 0}, torch::kInt64).reshape({2, 4});
};

TEST_F(MaskedFixture, SumMeanVar) {
    // Valid values {1, 2, 5, 6, 7}: sum 21, mean 21/5 (integer mask: float32 count, the +1e-8
    // rounds away), unbiased var 26.8/4 = 6.7.
    EXPECT_DOUBLE_EQ(masked_sum(v, m).item<double>(), 21.0);
    EXPECT_DOUBLE_EQ(masked_mean(v, m).item<double>(), 4.2);
    EXPECT_NEAR(masked_var(v, m).item<double>(), 6.7, 1e-7);
    // Biased: 26.8 / 5.
    EXPECT_NEAR(masked_var(v, m, /*unbiased=*/false).item<double>(), 5.36, 1e-7);
    // Per row: (1+2)/2, (5+6+7)/3.
    expect_close(masked_sum(v, m, 1), {3, 18});
    expect_close(masked_mean(v, m, 1), {1.5, 6.0}, 1e-15);
}

TEST_F(MaskedFixture, EpsilonFollowsMaskDtypeAndNanOutsideMaskIsDropped) {
    // verl's documented example: 3 of 13 valid tokens clipped. A float64 mask keeps the epsilon:
    // 3/(13 + 1e-8) = 0.23076923059...; a bool/int/float32 mask gives a float32 count and 3/13.
    auto clipped = torch::zeros({13}, torch::kFloat64);
    clipped.slice(0, 0, 3).fill_(1.0);
    EXPECT_NEAR(masked_mean(clipped, torch::ones({13}, torch::kFloat64)).item<double>(), 3.0 / (13.0 + 1e-8), 1e-17);
    EXPECT_NE(masked_mean(clipped, torch::ones({13}, torch::kFloat64)).item<double>(), 3.0 / 13.0);
    EXPECT_DOUBLE_EQ(masked_mean(clipped, torch::ones({13}, torch::kInt64)).item<double>(), 3.0 / 13.0);
    EXPECT_DOUBLE_EQ(masked_mean(clipped, torch::ones({13}, torch::kBool)).item<double>(), 3.0 / 13.0);
    EXPECT_DOUBLE_EQ(masked_mean(clipped, torch::ones({13}, torch::kFloat32)).item<double>(), 3.0 / 13.0);
    auto with_nan = v.clone();
    with_nan.index_put_({0, 3}, std::nan(""));
    EXPECT_DOUBLE_EQ(masked_sum(with_nan, m).item<double>(), 21.0);
}

TEST_F(MaskedFixture, AllZeroMaskMeanIsZero) {
    auto zero = torch::zeros_like(m);
    EXPECT_EQ(masked_mean(v, zero).item<double>(), 0.0);
    expect_close(masked_mean(v, zero, 1), {0, 0});
}

TEST_F(MaskedFixture, VarNeedsTwoElements) {
    auto one = torch::zeros_like(m);
    one.index_put_({1, 2}, 1);
    test::expect_value_error([&] { masked_var(v, one); }, "more than one unmasked element");
    test::expect_value_error([&] { masked_var(v, torch::zeros_like(m)); }, "mask sums to 0");
    test::expect_value_error([&] { masked_whiten(v, one); }, "more than one unmasked element");
    EXPECT_EQ(masked_var(v, one, /*unbiased=*/false).item<double>(), 0.0);
}

TEST_F(MaskedFixture, WhitenTouchesEveryPosition) {
    // (v - 4.2)/sqrt(6.7 + 1e-8) everywhere, masked positions included (verl).
    expect_close(masked_whiten(v, m),
                 {-1.23626785394, -0.849934149581, -0.463600445226, -0.077266740871, 0.309066963484, 0.695400667839,
                  1.08173437219, 1.46806807655},
                 1e-10);
    expect_close(masked_whiten(v, m, /*shift_mean=*/false),
                 {2.96373214606, 3.35006585042, 3.73639955477, 4.12273325913, 4.50906696348, 4.89540066784,
                  5.28173437219, 5.66806807655},
                 1e-10);
}

TEST_F(MaskedFixture, ShapeAndDtypeErrors) {
    test::expect_value_error([&] { masked_sum(v, torch::ones({2, 3})); }, "shape");
    test::expect_value_error([&] { masked_sum(torch::ones({2, 4}, torch::kInt64), m); }, "floating point");
}

TEST(MaskedOps, ClipByValue) {
    auto x = test::t1d({-2, 0.5, 3});
    expect_close(clip_by_value(x, test::t1d({-1, -1, -1}), test::t1d({1, 1, 1})), {-1, 0.5, 1});
}

TEST(MaskedOps, EntropyUniformAndReference) {
    // Uniform over 4 classes: ln 4 (hand).
    EXPECT_NEAR(entropy_from_logits(torch::zeros({1, 4}, torch::kFloat64)).item<double>(), std::log(4.0), 1e-15);
    auto z = t2d({{1.0, 2.0, 0.5, -1.0}, {0.0, 3.0, -2.0, 1.0}});
    expect_close(entropy_from_logits(z), {1.0144027755, 0.556198826194}, 1e-10);
    expect_close(sum_pi_squared_from_logits(z), {0.441124379842, 0.718632547658}, 1e-10);
    EXPECT_NEAR(sum_pi_squared_from_logits(torch::zeros({4}, torch::kFloat64)).item<double>(), 0.25, 1e-15);
}

TEST(MaskedOps, ChunkedEntropyMatchesAndIsFloat32) {
    torch::manual_seed(3);
    auto z = torch::randn({3, 5, 11}, torch::kFloat64) * 3.0;
    auto full = entropy_from_logits(z);
    // float32 against float64: the logits rounded (u32·|z|, moving H by at most 2u32·max|z|) and the
    // logsumexp's and E_p[z]'s sums of V = 11 terms of one sign with the exp's and log's roundings,
    // γ_{V+8}(u32) relative to 1 + max|z| (tests/unit/test_tolerance.h).
    const double max_z = z.abs().max().item<double>();
    const double bound = rlpt::tol::gamma(z.size(-1) + 8, rlpt::tol::kUnitRoundoffFp32) * (1 + max_z) +
                         2 * rlpt::tol::kUnitRoundoffFp32 * max_z;
    for (int64_t chunk : {1, 2, 7, 15, 100}) {
        auto chunked = entropy_from_logits_chunked(z, chunk);
        EXPECT_EQ(chunked.scalar_type(), torch::kFloat32);
        EXPECT_EQ(chunked.sizes(), full.sizes());
        EXPECT_LE(rlpt::tol::max_abs_diff(chunked, full), bound) << "chunk " << chunk;
    }
    auto bf = entropy_from_logits_chunked(z.to(torch::kBFloat16), 4);
    EXPECT_EQ(bf.scalar_type(), torch::kFloat32);
    test::expect_value_error([&] { entropy_from_logits_chunked(z, 0); }, "chunk_rows");
}

TEST(MaskedOps, LogprobsFromLogits) {
    // Uniform: -ln 4 (hand).
    auto lp = logprobs_from_logits(torch::zeros({2, 4}), torch::tensor({0, 3}, torch::kInt64));
    EXPECT_EQ(lp.scalar_type(), torch::kFloat32);
    // float32: a sum of V = 4 exps, the log and the subtraction (γ_{V+4}(u32) of 1 + |log p|).
    const double u32 = rlpt::tol::kUnitRoundoffFp32;
    expect_close(lp, {-std::log(4.0), -std::log(4.0)}, rlpt::tol::gamma(8, u32) * (1 + std::log(4.0)));
    auto z = t2d({{1.0, 2.0, 0.5, -1.0}, {0.0, 3.0, -2.0, 1.0}});
    auto lp64 = logprobs_from_logits(z, torch::tensor({1, 2}, torch::kInt64));
    EXPECT_EQ(lp64.scalar_type(), torch::kFloat64);
    expect_close(lp64, {-0.495181898086, -5.17551536262}, 1e-10);
    // bf16 logits come back as float32 log-probs: each logit rounded to bf16 (u_bf16·|z|) moves
    // z_label and the logsumexp by at most that, log p by twice the largest; then float32.
    auto lpb = logprobs_from_logits(z.to(torch::kBFloat16), torch::tensor({1, 2}, torch::kInt64));
    EXPECT_EQ(lpb.scalar_type(), torch::kFloat32);
    const double max_z = z.abs().max().item<double>();
    expect_close(lpb, {-0.495181898086, -5.17551536262},
                 2 * rlpt::tol::kUnitRoundoffBf16 * max_z + rlpt::tol::gamma(8, u32) * (1 + max_z + 5.2));
    test::expect_value_error([&] { logprobs_from_logits(z, torch::tensor({1, 4}, torch::kInt64)); }, "[0, 4)");
    test::expect_value_error([&] { logprobs_from_logits(z, torch::tensor({1, 2}, torch::kInt32)); }, "int64");
    test::expect_value_error(
        [&] {
            logprobs_from_logits(z, torch::tensor({1, 2, 0}, torch::kInt64));
        },
        "vocabulary dimension");
}

TEST(MaskedOps, EntropyNeedsAVocabularyDimension) {
    test::expect_value_error([] { entropy_from_logits(torch::zeros({}, torch::kFloat64)); }, "vocabulary");
    test::expect_value_error([] { entropy_from_logits_chunked(torch::zeros({}, torch::kFloat64)); }, "vocabulary");
}

}  // namespace
}  // namespace rlpt::algo
