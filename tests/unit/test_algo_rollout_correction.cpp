// algorithm.rollout_correction (ALGORITHMS §6): IS weights, rejection sampling and the
// rollout_corr/* metrics against values worked out by hand on a 2 x 3 batch.
#include "rlpt/algo/rollout_correction.h"

#include "test_algo_util.h"
#include "test_tolerance.h"

namespace rlpt::algo {
namespace {

using test::expect_close;
using test::expect_value_error;
using test::t2d;

// Tolerances (tests/unit/test_tolerance.h). The weights are float32 exps of float32 log-ratios
// (the inputs −0.2 and −1.2 rounded) and the metrics means, maxima and variances of a few of
// them: γ_8(u32) relative to the largest value here (e² < 8), plus 5e-8 for the 8 significant
// digits the literals are written to. Fractions of token or sequence counts, 0/1 weights and the
// threshold 2 are exact in float32: one rounding at most.
const double kTol = rlpt::tol::gamma(8, rlpt::tol::kUnitRoundoffFp32) * 8.0 + 5e-8;
const double kExact = 2.0 * rlpt::tol::kUnitRoundoffFp32 * 2.0;

// Row 0: three valid tokens, lr = old - rollout = [0.5, -1, 0].
// Row 1: one valid token, lr = 1 (the padding holds garbage that must not count).
struct Fixture {
    torch::Tensor old = t2d({{-1.0, -2.0, -0.5}, {-0.2, -3.0, 7.0}}, torch::kFloat32);
    torch::Tensor ro = t2d({{-1.5, -1.0, -0.5}, {-1.2, -0.1, -9.0}}, torch::kFloat32);
    torch::Tensor mask = torch::tensor({{1, 1, 1}, {1, 0, 0}}, torch::kInt64);
};

RolloutCorrectionParams is(const char* level, const std::string& threshold = "2") {
    RolloutCorrectionParams p;
    p.rollout_is = level;
    p.is_threshold = parse_rollout_is_threshold(threshold);
    return p;
}

double at(const std::map<std::string, double>& m, const std::string& k) {
    auto it = m.find("rollout_corr/" + k);
    EXPECT_NE(it, m.end()) << "missing metric rollout_corr/" << k;
    return it == m.end() ? NAN : it->second;
}

TEST(RolloutCorrection, TokenTruncatedIs) {
    Fixture f;
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, is("token"));
    // w_raw = [e^0.5, e^-1, 1 | e^1, 0, 0]; TIS at 2 caps e^1.
    expect_close(out.rollout_is_weights, {1.6487213, 0.3678794, 1.0, 2.0, 0.0, 0.0}, kTol);
    EXPECT_EQ(out.rollout_is_weights.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(out.response_mask, f.mask));
    const auto& m = out.metrics;
    EXPECT_NEAR(at(m, "rollout_is_mean"), (1.6487213 + 0.3678794 + 1 + 2) / 4, kTol);
    EXPECT_NEAR(at(m, "rollout_is_max"), 2.0, kExact);
    EXPECT_NEAR(at(m, "rollout_is_min"), 0.3678794, kTol);
    EXPECT_NEAR(at(m, "rollout_is_ratio_fraction_high"), 0.25, kTol);  // e^1 > 2
    EXPECT_NEAR(at(m, "rollout_is_ratio_fraction_low"), 0.25, kTol);   // e^-1 < 1/2
    // Per-row means of w: (e^.5 + e^-1 + 1)/3 = 1.0055336, 2.
    EXPECT_NEAR(at(m, "rollout_is_seq_mean"), (1.0055336 + 2) / 2, kTol);
    EXPECT_NEAR(at(m, "rollout_is_seq_max"), 2.0, kTol);
    EXPECT_NEAR(at(m, "rollout_is_seq_min"), 1.0055336, kTol);
    EXPECT_NEAR(at(m, "rollout_is_seq_max_deviation"), 1.0, kTol);
    EXPECT_NEAR(at(m, "rollout_is_seq_std"), std::sqrt(2.0) / 2 * (2 - 1.0055336), kTol);
    // Rows' raw means: 1.0055336 and e (> 2).
    EXPECT_NEAR(at(m, "rollout_is_seq_fraction_high"), 0.5, kExact);
    EXPECT_NEAR(at(m, "rollout_is_seq_fraction_low"), 0.0, kExact);
    const double mean = (1.6487213 + 0.3678794 + 1 + 2) / 4;
    const double sq = (1.6487213 * 1.6487213 + 0.3678794 * 0.3678794 + 1 + 4) / 4;
    EXPECT_NEAR(at(m, "rollout_is_std"), std::sqrt(sq - mean * mean), kTol);
    EXPECT_NEAR(at(m, "rollout_is_eff_sample_size"), mean * mean / sq, kTol);
    EXPECT_EQ(m.count("rollout_corr/rollout_is_oob_ratio"), 0u);
}

TEST(RolloutCorrection, SequenceTruncatedIs) {
    Fixture f;
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, is("sequence"));
    // S = [-0.5, 1]: row 0 gets e^-0.5 on each valid token, row 1 e^1 capped at 2.
    expect_close(out.rollout_is_weights, {0.6065307, 0.6065307, 0.6065307, 2.0, 0.0, 0.0}, kTol);
    const auto& m = out.metrics;
    EXPECT_NEAR(at(m, "rollout_is_mean"), (3 * 0.6065307 + 2) / 4, kTol);
    EXPECT_NEAR(at(m, "rollout_is_max"), 2.7182818, kTol);  // exp(max S): not truncated
    EXPECT_NEAR(at(m, "rollout_is_min"), 0.6065307, kTol);
    EXPECT_NEAR(at(m, "rollout_is_ratio_fraction_high"), 0.5, kExact);  // S_1 = 1 > log 2
    EXPECT_NEAR(at(m, "rollout_is_ratio_fraction_low"), 0.0, kExact);   // S_0 = -0.5 > log 0.5
}

TEST(RolloutCorrection, IcePopZeroesOutOfBandTokensAndKeepsTheMask) {
    Fixture f;
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, is("token", "0.5_1.5"));
    expect_close(out.rollout_is_weights, {0.0, 0.0, 1.0, 0.0, 0.0, 0.0}, kExact);
    EXPECT_TRUE(torch::equal(out.response_mask, f.mask));
    EXPECT_NEAR(at(out.metrics, "rollout_is_mean"), 0.25, kTol);
    EXPECT_NEAR(at(out.metrics, "rollout_is_oob_ratio"), 0.75, kTol);
}

TEST(RolloutCorrection, BatchNormalizeAfterTheMetrics) {
    Fixture f;
    auto p = is("token");
    p.batch_normalize = true;
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, p);
    const double mean = (1.6487213 + 0.3678794 + 1 + 2) / 4;
    expect_close(out.rollout_is_weights, {1.6487213 / mean, 0.3678794 / mean, 1 / mean, 2 / mean, 0, 0}, kTol);
    EXPECT_NEAR(at(out.metrics, "rollout_is_batch_norm_factor"), mean, kTol);
    EXPECT_NEAR(at(out.metrics, "rollout_is_mean"), mean, kTol);  // pre-normalisation
}

TEST(RolloutCorrection, OffPolicyDiagnostics) {
    Fixture f;
    RolloutCorrectionParams none;
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, none);
    EXPECT_FALSE(out.rollout_is_weights.defined());
    const auto& m = out.metrics;
    EXPECT_NEAR(at(m, "kl"), (-0.5 + 1.0 + 0.0 - 1.0) / 4, kTol);
    // e^x - 1 - x over lr = [0.5, -1, 0, 1].
    EXPECT_NEAR(at(m, "k3_kl"), (0.1487213 + 0.3678794 + 0 + 0.7182818) / 4, kTol);
    // Row means: old -7/6 and -0.2, rollout -1 and -1.2.
    EXPECT_NEAR(at(m, "training_log_ppl"), (7.0 / 6 + 0.2) / 2, kTol);
    EXPECT_NEAR(at(m, "training_ppl"), (std::exp(7.0 / 6) + std::exp(0.2)) / 2, kTol);
    EXPECT_NEAR(at(m, "rollout_log_ppl"), (1.0 + 1.2) / 2, kTol);
    EXPECT_NEAR(at(m, "log_ppl_diff"), (1.0 / 6 - 1.0) / 2, kTol);
    EXPECT_NEAR(at(m, "log_ppl_abs_diff"), (1.0 / 6 + 1.0) / 2, kTol);
    EXPECT_NEAR(at(m, "log_ppl_diff_max"), 1.0 / 6, kTol);
    EXPECT_NEAR(at(m, "log_ppl_diff_min"), -1.0, kTol);
    EXPECT_NEAR(at(m, "ppl_ratio"), (std::exp(1.0 / 6) + std::exp(-1.0)) / 2, kTol);
    EXPECT_NEAR(at(m, "chi2_token"), (2.7182818 + 0.1353353 + 1 + 7.3890561) / 4 - 1, kTol);
    EXPECT_NEAR(at(m, "chi2_seq"), (std::exp(-1.0) + std::exp(2.0)) / 2 - 1, kTol);
    EXPECT_EQ(m.count("rollout_corr/rollout_is_mean"), 0u);
}

TEST(RolloutCorrection, TokenK1RejectionMasksTokens) {
    Fixture f;
    RolloutCorrectionParams p;
    p.rs = parse_rollout_rs("token_k1", "2");  // keep |lr| <= log 2
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, p);
    EXPECT_TRUE(torch::equal(out.response_mask, torch::tensor({{1, 0, 1}, {0, 0, 0}}, torch::kInt64)));
    const auto& m = out.metrics;
    EXPECT_NEAR(at(m, "rollout_rs_masked_fraction"), 0.5, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_seq_masked_fraction"), 1.0, kExact);
    // k1 = -lr = [-0.5, 1, 0, -1].
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_mean"), -0.125, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_max"), 1.0, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_min"), -1.0, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_fraction_high"), 0.25, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_fraction_low"), 0.25, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_masked_fraction"), 0.5, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_seq_masked_fraction"), 1.0, kExact);
    // Per-row means of k1: 1/6 and -1.
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_seq_mean"), (1.0 / 6 - 1) / 2, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_seq_max_deviation"), 1.0, kTol);
    EXPECT_NEAR(at(m, "rollout_rs_token_k1_seq_fraction_low"), 0.5, kExact);
}

TEST(RolloutCorrection, SequenceK3RejectionAndCombinedOptions) {
    Fixture f;
    RolloutCorrectionParams p;
    // Row means of k3: (0.1487213 + 0.3678794)/3 = 0.1722002 and e - 2 = 0.7182818.
    p.rs = parse_rollout_rs("seq_mean_k3", "0.2");
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, p);
    EXPECT_TRUE(torch::equal(out.response_mask, torch::tensor({{1, 1, 1}, {0, 0, 0}}, torch::kInt64)));
    EXPECT_NEAR(at(out.metrics, "rollout_rs_seq_mean_k3_seq_mean"), (0.1722002 + 0.7182818) / 2, kTol);
    EXPECT_NEAR(at(out.metrics, "rollout_rs_seq_mean_k3_mean"), (3 * 0.1722002 + 0.7182818) / 4, kTol);
    EXPECT_NEAR(at(out.metrics, "rollout_rs_seq_mean_k3_fraction_high"), 0.5, kExact);
    EXPECT_NEAR(at(out.metrics, "rollout_rs_seq_mean_k3_fraction_low"), 0.0, kExact);
    p.rs = parse_rollout_rs("seq_mean_k3", "0.1");  // both rows out
    out = compute_rollout_correction(f.old, f.ro, f.mask, p);
    EXPECT_EQ(out.response_mask.sum().item<int64_t>(), 0);
    p.rs = parse_rollout_rs("token_k1,seq_mean_k3,token_k1", "2,0.2");  // duplicates dropped; AND
    ASSERT_EQ(p.rs.size(), 2u);
    out = compute_rollout_correction(f.old, f.ro, f.mask, p);
    EXPECT_TRUE(torch::equal(out.response_mask, torch::tensor({{1, 0, 1}, {0, 0, 0}}, torch::kInt64)));
    EXPECT_NEAR(at(out.metrics, "rollout_rs_masked_fraction"), 0.5, kTol);
}

TEST(RolloutCorrection, SeqMaxAndSeqSum) {
    Fixture f;
    RolloutCorrectionParams p;
    // k2 = lr^2/2: row 0 max 0.5, row 1 ~0.5 (float32 lr): both <= 0.51 kept; row 0 sums to 0.625 > 0.6.
    p.rs = parse_rollout_rs("seq_max_k2,seq_sum_k2", "0.51,0.6");
    auto out = compute_rollout_correction(f.old, f.ro, f.mask, p);
    EXPECT_TRUE(torch::equal(out.response_mask, torch::tensor({{0, 0, 0}, {1, 0, 0}}, torch::kInt64)));
    EXPECT_NEAR(at(out.metrics, "rollout_rs_seq_max_k2_max"), 0.5, kTol);
    EXPECT_NEAR(at(out.metrics, "rollout_rs_seq_sum_k2_max"), 0.625, kTol);
    EXPECT_NEAR(at(out.metrics, "rollout_rs_seq_sum_k2_masked_fraction"), 0.75, kTol);
}

TEST(RolloutCorrection, ThresholdParsing) {
    auto t = parse_rollout_is_threshold("2.0");
    EXPECT_FALSE(t.icepop);
    EXPECT_DOUBLE_EQ(t.upper, 2.0);
    EXPECT_DOUBLE_EQ(t.lower, 0.5);
    t = parse_rollout_is_threshold("0.5_5");
    EXPECT_TRUE(t.icepop);
    EXPECT_DOUBLE_EQ(t.lower, 0.5);
    EXPECT_DOUBLE_EQ(t.upper, 5.0);
    expect_value_error([] { parse_rollout_is_threshold("abc"); }, "'abc' is not a number");
    expect_value_error([] { parse_rollout_is_threshold("3_2"); }, "lower bound 3 is above the upper bound 2");
    expect_value_error([] { parse_rollout_is_threshold("0"); }, "must be > 0");
    expect_value_error([] { parse_rollout_is_threshold(""); }, "empty threshold");
    auto rs = parse_rollout_rs("token_k1", "0.9_1.2");
    EXPECT_DOUBLE_EQ(rs[0].lower, 0.9);
    EXPECT_DOUBLE_EQ(rs[0].upper, 1.2);
    expect_value_error([] { parse_rollout_rs("token_k2", "0.5_2"); }, "takes one upper bound");
    expect_value_error([] { parse_rollout_rs("token_k1,seq_mean_k3", "1,2,3"); }, "3 thresholds for 2");
    expect_value_error([] { parse_rollout_rs("token_k4", "2"); }, "unknown option 'token_k4'");
    expect_value_error([] { parse_rollout_rs("token_k1", ""); }, "is required");
}

TEST(RolloutCorrection, RefusesBadInputs) {
    Fixture f;
    RolloutCorrectionParams none;
    expect_value_error([&] { compute_rollout_correction(f.old, f.ro.slice(1, 0, 2), f.mask, none); }, "shape");
    expect_value_error([&] { compute_rollout_correction(f.old, f.ro, torch::zeros_like(f.mask), none); },
                       "no valid token");
    auto empty =
        compute_rollout_correction(torch::zeros({0, 3}), torch::zeros({0, 3}), torch::zeros({0, 3}), is("token"));
    EXPECT_TRUE(empty.metrics.empty());
}

}  // namespace
}  // namespace rlpt::algo
