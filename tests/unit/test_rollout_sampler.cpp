// Sampling rule and random streams of the rollout engine (rollout/sampler.h), on hand-given logits.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <algorithm>
#include <numeric>
#include <set>

#include "rlpt/core/error.h"
#include "rlpt/rollout/sampler.h"
#include "unit/test_model_helpers.h"

namespace rlpt::rollout {
namespace {

using model::testing::expect_error;

torch::Tensor row(std::vector<float> v) { return torch::tensor(v, torch::kFloat32).view({1, -1}); }

SamplingParams sampling(double temperature = 1.0, double top_p = 1.0, int64_t top_k = -1) {
    SamplingParams p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.top_k = top_k;
    return p;
}

int64_t pick(const torch::Tensor& logits, const SamplingParams& p, double u) {
    return choose_tokens(logits, p, {u}).tokens.at(0);
}

TEST(RolloutSampler, UniformDrawIsSplitMix64) {
    // Reference outputs of SplitMix64 seeded with 1234567 (Vigna's splitmix64.c): the first two.
    EXPECT_EQ(uniform_draw(1234567, 0), static_cast<double>(6457827717110365317ULL >> 11) * 0x1.0p-53);
    EXPECT_EQ(uniform_draw(1234567, 1), static_cast<double>(3203168211198807973ULL >> 11) * 0x1.0p-53);
    EXPECT_EQ(splitmix64_mix(0), 0u);
    // Deterministic, in [0, 1), and sensitive to both the seed and the counter.
    std::set<double> seen;
    for (uint64_t s = 0; s < 8; ++s)
        for (int64_t c = 0; c < 64; ++c) {
            const double u = uniform_draw(s, c);
            EXPECT_GE(u, 0.0);
            EXPECT_LT(u, 1.0);
            EXPECT_EQ(u, uniform_draw(s, c));
            seen.insert(u);
        }
    EXPECT_EQ(seen.size(), 8u * 64u);
    expect_error<ValueError>([] { uniform_draw(1, -1); }, {"counter", "-1"});
}

TEST(RolloutSampler, SampleSeedFormulaAndSpread) {
    const uint64_t g = 0x9E3779B97F4A7C15ULL;
    uint64_t h = splitmix64_mix(42 + g);
    h = splitmix64_mix(h ^ splitmix64_mix(3 + 2 * g));
    EXPECT_EQ(sample_seed(42, 3, 5), splitmix64_mix(h ^ splitmix64_mix(5 + 3 * g)));
    std::set<uint64_t> seeds;
    for (int64_t step = 0; step < 20; ++step)
        for (int64_t i = 0; i < 50; ++i) seeds.insert(sample_seed(7, step, i));
    for (uint64_t run = 0; run < 20; ++run) seeds.insert(sample_seed(run + 100, 0, 0));
    EXPECT_EQ(seeds.size(), 20u * 50u + 20u);
    expect_error<ValueError>([] { sample_seed(1, -1, 0); }, {"step", "-1"});
    expect_error<ValueError>([] { sample_seed(1, 0, -2); }, {"global_index", "-2"});
}

TEST(RolloutSampler, InverseCdfOverTheFullVocabulary) {
    // p = [0.25, 0.25, 0.5]: u * 1 is compared with the running sums 0.25, 0.5, 1.
    auto z = row({std::log(1.0f), std::log(1.0f), std::log(2.0f)});
    EXPECT_EQ(pick(z, sampling(), 0.0), 0);
    EXPECT_EQ(pick(z, sampling(), 0.2), 0);
    EXPECT_EQ(pick(z, sampling(), 0.3), 1);
    EXPECT_EQ(pick(z, sampling(), 0.6), 2);
    EXPECT_EQ(pick(z, sampling(), 0.999999), 2);
    auto c = choose_tokens(z, sampling(), {0.6});
    EXPECT_NEAR(c.log_probs[0], std::log(0.5), 1e-6);
}

TEST(RolloutSampler, TemperatureScalesTheDistribution) {
    // logits [0, ln 3] at T = 0.5 -> p ∝ [1, 9]: p0 = 0.1.
    auto z = row({0.0f, std::log(3.0f)});
    EXPECT_EQ(pick(z, sampling(0.5), 0.09), 0);
    EXPECT_EQ(pick(z, sampling(0.5), 0.11), 1);
    EXPECT_NEAR(choose_tokens(z, sampling(0.5), {0.05}).log_probs[0], std::log(0.1), 1e-6);
    // T = 2 -> p ∝ [1, sqrt 3].
    EXPECT_NEAR(choose_tokens(z, sampling(2.0), {0.9}).log_probs[0], std::log(std::sqrt(3.0) / (1 + std::sqrt(3.0))),
                1e-6);
}

TEST(RolloutSampler, TopKWalksTheKeptTokensInIndexOrder) {
    // logits [0, 1, 2, 3], top-2 keeps {2, 3} with renormalised p2 = 1 / (1 + e) = 0.269.
    auto z = row({0, 1, 2, 3});
    EXPECT_EQ(pick(z, sampling(1, 1, 2), 0.0), 2);
    EXPECT_EQ(pick(z, sampling(1, 1, 2), 0.26), 2);
    EXPECT_EQ(pick(z, sampling(1, 1, 2), 0.28), 3);
    EXPECT_EQ(pick(z, sampling(1, 1, 2), 0.9999), 3);
    // Order of the kept set does not depend on where the tokens sit: top-2 of [3, 2, 1, 0].
    EXPECT_EQ(pick(row({3, 2, 1, 0}), sampling(1, 1, 2), 0.72), 0);
    EXPECT_EQ(pick(row({3, 2, 1, 0}), sampling(1, 1, 2), 0.74), 1);
    // The log-prob is the unfiltered one: log softmax([0,1,2,3])[2].
    const double lse = std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    EXPECT_NEAR(choose_tokens(z, sampling(1, 1, 2), {0.1}).log_probs[0], 2 - lse, 1e-6);
    // k >= V and k = 0 are off.
    EXPECT_EQ(pick(z, sampling(1, 1, 4), 0.0), 0);
    EXPECT_EQ(pick(z, sampling(1, 1, 0), 0.0), 0);
}

TEST(RolloutSampler, TopPKeepsTheSmallestPrefixReachingP) {
    auto z = row({std::log(0.2f), std::log(0.5f), std::log(0.3f)});
    // top_p 0.45: {1} alone (0.5 >= 0.45).
    for (double u : {0.0, 0.5, 0.99}) EXPECT_EQ(pick(z, sampling(1, 0.45), u), 1);
    // top_p 0.6: {1, 2} (0.5 < 0.6 <= 0.8); target u * 0.8 vs running sums 0.5, 0.8.
    EXPECT_EQ(pick(z, sampling(1, 0.6), 0.6), 1);   // 0.48 < 0.5
    EXPECT_EQ(pick(z, sampling(1, 0.6), 0.65), 2);  // 0.52
    EXPECT_EQ(pick(z, sampling(1, 0.6), 0.999), 2);
    // top_p 0.9: all three, walked in index order: sums 0.2, 0.7, 1.0.
    EXPECT_EQ(pick(z, sampling(1, 0.9), 0.1), 0);
    EXPECT_EQ(pick(z, sampling(1, 0.9), 0.5), 1);
    EXPECT_EQ(pick(z, sampling(1, 0.9), 0.85), 2);
    // top-k then top-p over the renormalised top-k: k = 2 keeps {1, 2} (0.625, 0.375); top_p 0.6 -> {1}.
    for (double u : {0.0, 0.7, 0.99}) EXPECT_EQ(pick(z, sampling(1, 0.6, 2), u), 1);
    // All keys equal (ties resolved by index after the radix passes): top_p 0.5 of 100
    // uniform tokens keeps the 50 lowest ids (ties rank by index).
    auto flat = torch::zeros({1, 100});
    std::set<int64_t> chosen;
    for (int i = 0; i < 400; ++i) chosen.insert(pick(flat, sampling(1, 0.5), (i + 0.5) / 400.0));
    EXPECT_EQ(chosen.size(), 50u);
    EXPECT_EQ(*chosen.rbegin(), 49);
}

// The rule of sampler.h computed the slow way: full sort by (z desc, index asc), cumulative
// sums in rank order, then the index-order walk over the kept set.
int64_t reference_choice(const torch::Tensor& z_row, const torch::Tensor& p_row, int64_t top_k, double top_p,
                         double u) {
    const int64_t v = z_row.size(0);
    std::vector<float> z(z_row.data_ptr<float>(), z_row.data_ptr<float>() + v);
    std::vector<float> p(p_row.data_ptr<float>(), p_row.data_ptr<float>() + v);
    std::vector<int64_t> order(static_cast<size_t>(v));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    int64_t n = top_k > 0 && top_k < v ? top_k : v;
    if (top_p < 1) {
        double mass = 0, cum = 0;
        for (int64_t r = 0; r < n; ++r) mass += p[order[r]];
        for (int64_t r = 0; r < n; ++r) {
            cum += p[order[r]];
            if (cum >= top_p * mass) {
                n = r + 1;
                break;
            }
        }
    }
    std::vector<int64_t> kept(order.begin(), order.begin() + n);
    std::sort(kept.begin(), kept.end());
    double total = 0, cum = 0;
    for (int64_t j : kept) total += p[j];
    for (int64_t j : kept) {
        if (p[j] <= 0) continue;
        cum += p[j];
        if (cum > u * total) return j;
    }
    return kept.back();
}

TEST(RolloutSampler, RadixSelectAgreesWithASortedReference) {
    torch::manual_seed(3);
    const int64_t b = 24, v = 3000;
    // Wide and narrow logit scales, quantised rows full of exact ties, and -inf entries; the
    // unfiltered cases check the blocked inverse-CDF walk against a token-by-token one.
    auto z = torch::randn({b, v}) * torch::linspace(0.1, 8, b).unsqueeze(1);
    z.narrow(0, 0, 6).mul_(2).round_().div_(2);
    z.narrow(0, 6, 3).index_put_({torch::indexing::Slice(), torch::indexing::Slice(0, v, 7)},
                                 -std::numeric_limits<float>::infinity());
    struct Case {
        double t, top_p;
        int64_t top_k;
    };
    for (const Case& c :
         {Case{1.0, 0.9, -1}, Case{0.7, 0.5, -1}, Case{1.0, 1.0, 40}, Case{1.3, 0.95, 500}, Case{1.0, 0.999, -1},
          Case{0.5, 0.3, 2999}, Case{1.0, 1e-3, -1}, Case{1.0, 1.0, -1}, Case{0.6, 1.0, -1}}) {
        SCOPED_TRACE(::testing::Message() << "T " << c.t << " top_p " << c.top_p << " top_k " << c.top_k);
        auto s = z.div(c.t);
        auto p = (s - torch::logsumexp(s, 1, true)).exp().contiguous();
        for (int rep = 0; rep < 5; ++rep) {
            std::vector<double> u(b);
            for (int64_t i = 0; i < b; ++i) u[static_cast<size_t>(i)] = uniform_draw(static_cast<uint64_t>(rep), i);
            auto got = choose_tokens(z, sampling(c.t, c.top_p, c.top_k), u);
            for (int64_t i = 0; i < b; ++i)
                EXPECT_EQ(got.tokens[static_cast<size_t>(i)],
                          reference_choice(z[i].contiguous(), p[i], c.top_k, c.top_p, u[static_cast<size_t>(i)]))
                    << "row " << i;
        }
    }
}

TEST(RolloutSampler, GreedyTopK1AndTinyTopPAgree) {
    torch::manual_seed(0);
    auto z = torch::randn({16, 50}, torch::TensorOptions().dtype(torch::kFloat32));
    z.index_put_({3, 7}, 10.0f);  // a tie: row 3 has two maxima; the lower index wins everywhere
    z.index_put_({3, 9}, 10.0f);
    SamplingParams greedy;
    greedy.greedy = true;
    greedy.temperature = 0.7;
    std::vector<double> u(16);
    for (size_t i = 0; i < u.size(); ++i) u[i] = uniform_draw(5, static_cast<int64_t>(i));
    auto g = choose_tokens(z, greedy, {});
    auto k1 = choose_tokens(z, sampling(0.7, 1, 1), u);
    auto p0 = choose_tokens(z, sampling(0.7, 1e-9), u);
    auto ref = std::get<1>(z.max(1));
    auto lp = torch::log_softmax(z / 0.7, 1);
    for (int64_t i = 0; i < 16; ++i) {
        if (i != 3) EXPECT_EQ(g.tokens[i], ref[i].item<int64_t>());
        EXPECT_EQ(k1.tokens[i], g.tokens[i]);
        EXPECT_EQ(p0.tokens[i], g.tokens[i]);
        EXPECT_NEAR(g.log_probs[i], lp[i][g.tokens[i]].item<float>(), 1e-6);
        EXPECT_NEAR(k1.log_probs[i], g.log_probs[i], 1e-6);
        EXPECT_NEAR(p0.log_probs[i], g.log_probs[i], 1e-6);
    }
    EXPECT_EQ(g.tokens[3], 7);
    // Greedy with temperature 0 reports untempered log-probs.
    greedy.temperature = 0;
    auto g0 = choose_tokens(z, greedy, {});
    auto lp1 = torch::log_softmax(z, 1);
    for (int64_t i = 0; i < 16; ++i) EXPECT_NEAR(g0.log_probs[i], lp1[i][g0.tokens[i]].item<float>(), 1e-6);
}

TEST(RolloutSampler, ZeroProbabilityTokensAreNeverChosen) {
    const float ninf = -std::numeric_limits<float>::infinity();
    auto z = row({ninf, 0.0f, ninf, ninf});
    for (double u : {0.0, 0.5, 0.9999999}) {
        EXPECT_EQ(pick(z, sampling(), u), 1);
        EXPECT_EQ(pick(z, sampling(1, 0.5), u), 1);
        EXPECT_EQ(pick(z, sampling(1, 1, 3), u), 1);
    }
    EXPECT_EQ(choose_tokens(z, sampling(), {0.3}).log_probs[0], 0.0f);
}

TEST(RolloutSampler, Errors) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    expect_error<ValueError>([&] { choose_tokens(row({0.0f, nan}), sampling(), {0.5}); }, {"row 0", "non-finite"});
    SamplingParams greedy;
    greedy.greedy = true;
    expect_error<ValueError>([&] { choose_tokens(row({nan, nan}), greedy, {}); }, {"non-finite"});
    const float ninf = -std::numeric_limits<float>::infinity();
    expect_error<ValueError>([&] { choose_tokens(row({ninf, ninf}), sampling(), {0.1}); }, {"non-finite"});
    expect_error<ValueError>([&] { choose_tokens(torch::zeros({3}), sampling(), {0.1}); }, {"[b, V]"});
    expect_error<ValueError>([&] { choose_tokens(torch::zeros({2, 0}), sampling(), {0.1, 0.2}); }, {"V >= 1"});
    expect_error<ValueError>(
        [&] {
            choose_tokens(torch::zeros({2, 3}), sampling(), {0.1});
        },
        {"1 uniforms for 2 rows"});
}

}  // namespace
}  // namespace rlpt::rollout
