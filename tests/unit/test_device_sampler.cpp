// choose_tokens_on_device (rollout/device_sampler.h), the torch-op sampler of the GPU decode path,
// against choose_tokens (the CPU radix-select sampler) on CPU tensors: identical tokens, log-probs
// within bounds derived from the arithmetic, rows independent of the batch, the same errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "rlpt/core/error.h"
#include "rlpt/rollout/device_sampler.h"
#include "rlpt/rollout/sampler.h"
#include "unit/sampling_test_util.h"
#include "unit/test_model_helpers.h"

namespace rlpt::rollout {
namespace {

using model::testing::expect_error;
using testing::draws;
using testing::sampling;

// Distance in fp32 ulps (same sign assumed: log-probs are <= 0).
int64_t ulps(float a, float b) {
    int32_t ia = 0, ib = 0;
    std::memcpy(&ia, &a, sizeof ia);
    std::memcpy(&ib, &b, sizeof ib);
    return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

// Rows of logits exercising the rules: wide and peaked random rows, a row on a coarse grid
// (many equal logits, so ties decide ranks), a row with a few -inf.
torch::Tensor random_logits(int64_t b, int64_t vocab, uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto z = torch::randn({b, vocab}, gen, torch::kFloat32);
    for (int64_t i = 0; i < b; ++i) {
        switch (i % 4) {
            case 0: z[i].mul_(3.0); break;                         // peaked
            case 1: z[i].mul_(0.5); break;                         // flat
            case 2: z[i] = z[i].mul(2.0).round().div(2.0); break;  // ties: values on a 0.5 grid
            case 3: z[i].narrow(0, 0, std::max<int64_t>(1, vocab / 5)).fill_(-INFINITY); break;
        }
    }
    return z;
}

void expect_same_choice(const torch::Tensor& logits, const SamplingParams& p, const std::vector<double>& u,
                        const std::string& what) {
    const TokenChoices ref = choose_tokens(logits, p, u);
    const TokenChoices dev = choose_tokens_on_device(logits, p, u);
    ASSERT_EQ(dev.tokens.size(), ref.tokens.size()) << what;
    const auto z = logits.to(torch::kFloat32);
    const int64_t vocab = logits.size(1);
    for (size_t i = 0; i < ref.tokens.size(); ++i) {
        ASSERT_EQ(dev.tokens[i], ref.tokens[i]) << what << " row " << i;
        if (p.greedy) {
            const double t = p.temperature > 0 ? p.temperature : 1.0;
            // The fused kernel's log-sum-exp against torch::logsumexp.
            const auto zi = z[static_cast<int64_t>(i)];
            const double bound =
                testing::logp_rounding_bound(vocab, zi[ref.tokens[i]].item<double>() / t, zi.max().item<double>() / t);
            EXPECT_NEAR(dev.log_probs[i], ref.log_probs[i], bound) << what << " row " << i;
        } else {
            // The same fp32 p; log in double (torch vs std::log, each within an ulp of double)
            // rounded to float: at most one fp32 ulp apart.
            EXPECT_LE(ulps(dev.log_probs[i], ref.log_probs[i]), 1)
                << what << " row " << i << ": " << dev.log_probs[i] << " vs " << ref.log_probs[i];
        }
    }
}

void sweep(int64_t vocab, int64_t b, torch::ScalarType dtype, uint64_t seed) {
    const auto logits = random_logits(b, vocab, seed).to(dtype);
    const auto u = draws(b, seed, 7);
    for (double t : {0.7, 1.0, 1.3})
        for (int64_t k : {int64_t{-1}, int64_t{1}, int64_t{5}, vocab - 1})
            for (double top_p : {1.0, 0.9, 0.5, 1e-6})
                expect_same_choice(logits, sampling(t, top_p, k), u,
                                   fmt::format("V={} {} T={} k={} p={}", vocab, c10::toString(dtype), t, k, top_p));
    for (double t : {0.0, 0.7, 1.0})
        expect_same_choice(logits, sampling(t, 1.0, -1, true), {},
                           fmt::format("V={} {} greedy T={}", vocab, c10::toString(dtype), t));
}

TEST(DeviceSampler, MatchesChooseTokensSmallVocab) {
    for (uint64_t seed = 1; seed <= 20; ++seed) sweep(11, 8, torch::kFloat32, seed);
}

TEST(DeviceSampler, MatchesChooseTokensLargeVocab) {
    for (uint64_t seed = 100; seed <= 101; ++seed) sweep(50000, 8, torch::kFloat32, seed);
}

TEST(DeviceSampler, MatchesChooseTokensOnBfloat16Logits) {
    // bfloat16 rounds the logits onto 8-bit significands: many exact ties, ranked by index.
    for (uint64_t seed = 200; seed <= 210; ++seed) sweep(37, 8, torch::kBFloat16, seed);
    sweep(50000, 4, torch::kBFloat16, 300);
}

TEST(DeviceSampler, TiesRankByIndexAndMinusZeroLikeZero) {
    // Equal logits at the top-k boundary: the lower indices are kept. -0 ties with +0.
    const auto z = torch::tensor({0.0f, -0.0f, -0.0f, 0.0f, -1.0f}, torch::kFloat32).view({1, -1});
    // top_k = 2 keeps {0, 1} (equal p): u = 0.75 lands on index 1.
    const auto p = sampling(1.0, 1.0, 2);
    EXPECT_EQ(choose_tokens_on_device(z, p, {0.75}).tokens[0], 1);
    expect_same_choice(z, p, {0.75}, "-0 tie");
    // top_p: four equal tokens of p = e/(4e+1) ≈ 0.2284 each; 0.3 of the mass needs two: {0, 1}.
    EXPECT_EQ(choose_tokens_on_device(z, sampling(1.0, 0.3, -1), {0.9}).tokens[0], 1);
    expect_same_choice(z, sampling(1.0, 0.3, -1), {0.9}, "-0 tie top_p");
    // Greedy: the first index of the maximum.
    const auto g = torch::tensor({1.0f, 3.0f, 2.0f, 3.0f, 3.0f}, torch::kFloat32).view({1, -1});
    EXPECT_EQ(choose_tokens_on_device(g, sampling(1.0, 1.0, -1, true), {}).tokens[0], 1);
    EXPECT_EQ(choose_tokens_on_device(g, sampling(1.0, 1.0, 1), {0.99}).tokens[0], 1);
    EXPECT_EQ(choose_tokens_on_device(g, sampling(1.0, 1e-6, -1), {0.99}).tokens[0], 1);
}

TEST(DeviceSampler, ANucleusThatReachesTopPExactlyStops) {
    // Four equal logits: p = 0.25 each, exact in fp32 and double, so the prefix sums hit top_p
    // exactly. top_p = 0.5 keeps ranks {0, 1} (the cumulative probability before rank 2 is 0.5,
    // not < 0.5); u = 0.9 then takes index 1 (a third kept token would take index 2).
    const auto z = torch::zeros({1, 4}, torch::kFloat32);
    EXPECT_EQ(choose_tokens_on_device(z, sampling(1.0, 0.5, -1), {0.9}).tokens[0], 1);
    expect_same_choice(z, sampling(1.0, 0.5, -1), {0.9}, "exact top_p 0.5");
    EXPECT_EQ(choose_tokens_on_device(z, sampling(1.0, 0.25, -1), {0.9}).tokens[0], 0);
    expect_same_choice(z, sampling(1.0, 0.25, -1), {0.9}, "exact top_p 0.25");
    // The draw: u = 0.5 over the kept {0, 1} is target 0.25 = the running sum at index 0, which
    // does not exceed it: index 1.
    EXPECT_EQ(choose_tokens_on_device(z, sampling(1.0, 0.5, -1), {0.5}).tokens[0], 1);
    expect_same_choice(z, sampling(1.0, 0.5, -1), {0.5}, "exact draw");
}

TEST(DeviceSampler, RowsAreIndependentOfTheirNeighbours) {
    const int64_t b = 12, vocab = 3000;
    const auto logits = random_logits(b, vocab, 42);
    const auto u = draws(b, 42, 7);
    for (const auto& p :
         {sampling(1.0, 1.0, -1), sampling(0.7, 0.9, 50), sampling(1.3, 0.5, -1), sampling(1.0, 1.0, -1, true)}) {
        const TokenChoices batch = choose_tokens_on_device(logits, p, u);
        // Each row alone, and the batch reversed (other slots, other neighbours): bit-identical.
        const auto rev = torch::arange(b - 1, -1, -1, torch::kInt64);
        std::vector<double> urev(u.rbegin(), u.rend());
        const TokenChoices reversed = choose_tokens_on_device(logits.index_select(0, rev), p, urev);
        for (int64_t i = 0; i < b; ++i) {
            const auto si = static_cast<size_t>(i);
            const TokenChoices alone = choose_tokens_on_device(logits.narrow(0, i, 1), p, {u[si]});
            EXPECT_EQ(alone.tokens[0], batch.tokens[si]) << "row " << i;
            EXPECT_EQ(alone.log_probs[0], batch.log_probs[si]) << "row " << i;
            EXPECT_EQ(reversed.tokens[static_cast<size_t>(b - 1 - i)], batch.tokens[si]) << "row " << i;
            EXPECT_EQ(reversed.log_probs[static_cast<size_t>(b - 1 - i)], batch.log_probs[si]) << "row " << i;
        }
    }
}

TEST(DeviceSampler, RowGroupsGiveTheSameChoicesAndBoundTheTemporaries) {
    // Sampling runs over groups of rows (chunk_bytes / (8·V) rows each): with 4-row groups the same
    // tokens and log-probs, bit for bit, as one group and as choose_tokens; and no [b, V] float64
    // or int64 temporary. Per group of r rows the sampler holds at most ~62·r·V bytes (probs 4,
    // float64 weights and sums 8 + 8, the sort's values and int64 order 4 + 8, top-p's float64
    // candidates and sums 8 + 8, the key 4 and byte masks), so the peak stays under 64·r·V plus
    // the [b] results, below one [b, V] float64 tensor (8·b·V) at b = 16·r.
    const int64_t b = 64, vocab = 5000, rows = 4;
    const auto logits = random_logits(b, vocab, 77);
    const auto u = draws(b, 77, 7);
    for (const auto& p : {sampling(1.0, 1.0, -1), sampling(0.7, 0.9, 50), sampling(1.3, 0.5, -1)}) {
        const TokenChoices whole = choose_tokens_on_device(logits, p, u);
        int64_t peak = 0;
        TokenChoices grouped;
        {
            rlpt::testing::CountingCpuAllocator::Scope counting;
            grouped = choose_tokens_on_device(logits, p, u, 8 * vocab * rows);
            peak = counting.peak_extra();
        }
        EXPECT_EQ(grouped.tokens, whole.tokens);
        EXPECT_EQ(grouped.log_probs, whole.log_probs);
        expect_same_choice(logits, p, u, "4-row groups");
        EXPECT_LE(peak, 64 * rows * vocab + 64 * b) << "top_p " << p.top_p;
        EXPECT_LT(64 * rows * vocab, 8 * b * vocab);
    }
    EXPECT_THROW(choose_tokens_on_device(logits, sampling(1.0, 1.0, -1), u, 0), ValueError);
}

TEST(DeviceSampler, ZeroProbabilityTokensAreNeverChosen) {
    const float ninf = -std::numeric_limits<float>::infinity();
    const auto z = torch::tensor({ninf, 0.0f, ninf, ninf}, torch::kFloat32).view({1, -1});
    for (double u : {0.0, 0.5, 0.9999999})
        for (const auto& p : {sampling(1.0, 1.0, -1), sampling(1.0, 0.5, -1), sampling(1.0, 1.0, 3)}) {
            const TokenChoices c = choose_tokens_on_device(z, p, {u});
            EXPECT_EQ(c.tokens[0], 1);
            EXPECT_EQ(c.log_probs[0], 0.0f);
        }
    // u just below 1 on a row whose last tokens have p = 0: the last token with p > 0.
    const auto tail = torch::tensor({1.0f, 2.0f, ninf, ninf}, torch::kFloat32).view({1, -1});
    EXPECT_EQ(choose_tokens_on_device(tail, sampling(1.0, 1.0, -1), {std::nextafter(1.0, 0.0)}).tokens[0], 1);
}

TEST(DeviceSampler, Errors) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float ninf = -std::numeric_limits<float>::infinity();
    auto row = [](std::vector<float> v) { return torch::tensor(v, torch::kFloat32).view({1, -1}); };
    expect_error<ValueError>(
        [&] {
            choose_tokens_on_device(row({0.0f, nan}), sampling(1, 1, -1), {0.5});
        },
        {"row 0", "non-finite"});
    expect_error<ValueError>(
        [&] {
            choose_tokens_on_device(row({0.0f, nan}), sampling(1, 0.5, 1), {0.5});
        },
        {"row 0", "non-finite"});
    expect_error<ValueError>(
        [&] {
            choose_tokens_on_device(row({nan, nan}), sampling(1, 1, -1, true), {});
        },
        {"non-finite"});
    expect_error<ValueError>(
        [&] {
            choose_tokens_on_device(row({ninf, ninf}), sampling(1, 1, -1), {0.1});
        },
        {"non-finite"});
    // Row 1 of 2 is the bad one; row 0 alone is fine.
    auto two = torch::stack({row({0.0f, 1.0f})[0], row({nan, 1.0f})[0]});
    expect_error<ValueError>([&] { choose_tokens_on_device(two, sampling(1, 1, -1), {0.1, 0.2}); }, {"row 1"});
    expect_error<ValueError>([&] { choose_tokens_on_device(torch::zeros({3}), sampling(1, 1, -1), {0.1}); },
                             {"[b, V]"});
    expect_error<ValueError>(
        [&] {
            choose_tokens_on_device(torch::zeros({2, 0}), sampling(1, 1, -1), {0.1, 0.2});
        },
        {"V >= 1"});
    expect_error<ValueError>(
        [&] {
            choose_tokens_on_device(torch::zeros({2, 3}), sampling(1, 1, -1), {0.1});
        },
        {"1 uniforms for 2 rows"});
    EXPECT_TRUE(choose_tokens_on_device(torch::zeros({0, 3}), sampling(1, 1, -1), {}).tokens.empty());
}

}  // namespace
}  // namespace rlpt::rollout
