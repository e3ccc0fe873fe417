// agg_loss: every mode by hand, and the shard-invariance the engine relies on.
#include <random>

#include "rlpt/algo/agg_loss.h"
#include "test_algo_util.h"

namespace rlpt::algo {
namespace {

using test::t2d;

struct AggFixture : ::testing::Test {
    // Row 2 is fully masked. Valid: row 0 {1, 2}, row 1 {4}, row 3 {10, 11, 12}.
    torch::Tensor loss = t2d({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}});
    torch::Tensor mask = torch::tensor({1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 1}, torch::kInt64).reshape({4, 3});
};

TEST_F(AggFixture, EveryModeByHand) {
    // token-mean 40/6; token-sum 40; seq-mean-token-sum (3 + 4 + 33)/3 rows with tokens;
    // seq-mean-token-mean (1.5 + 4 + 11)/3; seq-mean-token-sum-norm 40/3/T with T = 3.
    EXPECT_DOUBLE_EQ(agg_loss(loss, mask, AggMode::kTokenMean).item<double>(), 40.0 / 6);
    EXPECT_DOUBLE_EQ(agg_loss(loss, mask, AggMode::kTokenSum).item<double>(), 40.0);
    EXPECT_DOUBLE_EQ(agg_loss(loss, mask, AggMode::kSeqMeanTokenSum).item<double>(), 40.0 / 3);
    EXPECT_DOUBLE_EQ(agg_loss(loss, mask, AggMode::kSeqMeanTokenMean).item<double>(), 5.5);
    EXPECT_DOUBLE_EQ(agg_loss(loss, mask, AggMode::kSeqMeanTokenSumNorm).item<double>(), 40.0 / 9);
    GlobalBatchInfo info;
    info.loss_scale_factor = 10.0;
    EXPECT_DOUBLE_EQ(agg_loss(loss, mask, AggMode::kSeqMeanTokenSumNorm, info).item<double>(), 40.0 / 30);
    // An explicit global_batch_size counts every row (verl: ppo_mini_batch_size · n).
    info.global_batch_size = 4.0;
    EXPECT_DOUBLE_EQ(agg_loss(loss, mask, AggMode::kSeqMeanTokenSum, info).item<double>(), 10.0);
}

TEST_F(AggFixture, FloatMaskKeepsVerlEpsilonInSeqMeanTokenMean) {
    // With a float64 mask the per-sequence divisor is n + 1e-8 (verl), so 1.5 becomes 3/(2+1e-8).
    auto m64 = mask.to(torch::kFloat64);
    const double want = (3.0 / (2 + 1e-8) + 4.0 / (1 + 1e-8) + 33.0 / (3 + 1e-8)) / 3;
    EXPECT_NEAR(agg_loss(loss, m64, AggMode::kSeqMeanTokenMean).item<double>(), want, 1e-15);
}

TEST_F(AggFixture, GradientOfTokenMeanIsMaskOverCount) {
    auto l = loss.clone().requires_grad_(true);
    agg_loss(l, mask, AggMode::kTokenMean).backward();
    test::expect_close(l.grad(), test::to_vec(mask.to(torch::kFloat64) / 6.0), 1e-15);
}

TEST_F(AggFixture, AllZeroMaskGivesZeroNotNan) {
    auto zero = torch::zeros_like(mask);
    for (const auto& name : agg_mode_names()) {
        auto l = loss.clone().requires_grad_(true);
        auto v = agg_loss(l, zero, parse_agg_mode(name));
        EXPECT_EQ(v.item<double>(), 0.0) << name;
        v.backward();
        EXPECT_EQ(l.grad().abs().sum().item<double>(), 0.0) << name;
    }
}

TEST_F(AggFixture, Errors) {
    GlobalBatchInfo dp2;
    dp2.dp_size = 2;
    test::expect_value_error([&] { agg_loss(loss, mask, AggMode::kTokenMean, dp2); }, "batch_num_tokens");
    test::expect_value_error([&] { agg_loss(loss, mask, AggMode::kSeqMeanTokenMean, dp2); }, "global_batch_size");
    EXPECT_NO_THROW(agg_loss(loss, mask, AggMode::kTokenSum, dp2));
    test::expect_value_error([] { parse_agg_mode("token_mean"); }, "seq-mean-token-sum-norm");
    test::expect_value_error([&] { agg_loss(loss, mask.slice(1, 0, 2), AggMode::kTokenMean); }, "shape");
    GlobalBatchInfo bad_dp;
    bad_dp.dp_size = 0;
    test::expect_value_error([&] { agg_loss(loss, mask, AggMode::kTokenSum, bad_dp); }, "dp_size");
    for (const auto& name : agg_mode_names()) EXPECT_EQ(agg_mode_name(parse_agg_mode(name)), name);
}

// The engine's combination: D DP ranks, each with M micro-batches, every call with the global
// normalisers; SUM over micro-batches, MEAN over ranks. Must equal the unsplit batch, in value
// and in gradient, for every mode.
TEST(AggLossShards, ThreeShardsTimesTwoMicroBatchesEqualTheWholeBatch) {
    constexpr int64_t kB = 12, kT = 5, kRanks = 3, kMicro = 2;
    std::mt19937 rng(1234);
    std::uniform_real_distribution<double> val(-2.0, 2.0);
    std::uniform_int_distribution<int> len(0, kT);
    auto l = torch::zeros({kB, kT}, torch::kFloat64);
    auto m = torch::zeros({kB, kT}, torch::kInt64);
    for (int64_t i = 0; i < kB; ++i) {
        int n = (i == 4 || i == 9) ? 0 : len(rng);  // two fully masked rows, one per shard
        for (int64_t t = 0; t < kT; ++t) {
            l.index_put_({i, t}, val(rng));
            if (t < n) m.index_put_({i, t}, 1);
        }
    }
    const double n_tokens = m.sum().item<double>();
    const double n_seqs = (m.sum(-1) > 0).sum().item<double>();
    for (bool count_all_rows : {false, true}) {
        for (const auto& name : agg_mode_names()) {
            const AggMode mode = parse_agg_mode(name);
            GlobalBatchInfo whole;
            if (count_all_rows) whole.global_batch_size = static_cast<double>(kB);
            auto lw = l.clone().requires_grad_(true);
            auto ref = agg_loss(lw, m, mode, whole);
            ref.backward();

            GlobalBatchInfo info;
            info.dp_size = kRanks;
            info.batch_num_tokens = n_tokens;
            info.global_batch_size = count_all_rows ? static_cast<double>(kB) : n_seqs;
            auto ls = l.clone().requires_grad_(true);
            auto total = torch::zeros({}, torch::kFloat64);
            const int64_t per_rank = kB / kRanks, per_micro = per_rank / kMicro;
            for (int64_t r = 0; r < kRanks; ++r) {
                auto rank_sum = torch::zeros({}, torch::kFloat64);
                for (int64_t mb = 0; mb < kMicro; ++mb) {
                    const int64_t lo = r * per_rank + mb * per_micro;
                    rank_sum = rank_sum +
                               agg_loss(ls.slice(0, lo, lo + per_micro), m.slice(0, lo, lo + per_micro), mode, info);
                }
                total = total + rank_sum / static_cast<double>(kRanks);
            }
            total.backward();
            EXPECT_NEAR(total.item<double>(), ref.item<double>(), 1e-12) << name << " all_rows=" << count_all_rows;
            EXPECT_TRUE(torch::allclose(ls.grad(), lw.grad(), 0, 1e-14)) << name;
            EXPECT_NE(ref.item<double>(), 0.0) << name;
        }
    }
}

TEST_F(AggFixture, NegativeOrZeroNormalisersAreErrors) {
    GlobalBatchInfo info;
    info.batch_num_tokens = -1.0;
    test::expect_value_error([&] { agg_loss(loss, mask, AggMode::kTokenMean, info); }, "batch_num_tokens must be");
    info = {};
    info.global_batch_size = -2.0;
    test::expect_value_error([&] { agg_loss(loss, mask, AggMode::kSeqMeanTokenSum, info); },
                             "global_batch_size must be");
    info = {};
    info.loss_scale_factor = 0.0;
    test::expect_value_error([&] { agg_loss(loss, mask, AggMode::kSeqMeanTokenSumNorm, info); },
                             "loss_scale_factor must be > 0");
}

}  // namespace
}  // namespace rlpt::algo
