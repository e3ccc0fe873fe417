// choose_tokens_on_device (rollout/device_sampler.h) on CUDA logits against choose_tokens on the
// same logits on the CPU, and rows independent of their slot on the GPU. Skipped without a GPU
// (label gpu; scripts/gpu_check.sh runs it on a GPU node).
//
// Slots: CUDA's softmax and logsumexp split a row's reduction over the V logits by the shape of
// the batch (rows per block, blocks per row), so a row alone, in a batch or in another slot sums
// in other orders. Its token must not change: the max and each exp(z - max) are computed element
// by element, the sum only scales every probability alike, and the draw and the nucleus cut are
// fractions of the kept mass, so a running sum moves by a rounding or two of the division (~2u =
// 1.2e-7 of the mass) and a draw lands that close to a boundary with about that probability. Its
// log-prob may move by the rounding of two fp32 log-softmaxes over V terms (logp_rounding_bound).
//
// CUDA's softmax rounds differently from the CPU's, so a draw or a nucleus boundary that sits
// within that rounding of a running sum may pick a neighbouring token. A row is "robust" when the
// CPU sampler picks the same token with u and top_p both moved by ±kMargin: a row's running sums
// then sit more than kMargin (relative to the kept mass) from the draw and the nucleus cut, and
// the two softmaxes differ by far less: |Δp_j| <= (γ_V + 4u)·p_j per token, so a running sum
// moves by at most (γ_V + 4u) of the mass, 5.9e-6 at V = 97 (u = 2^-24). Robust rows must agree
// exactly; at most 5% of the rows may be non-robust (else the test would check little).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "gpu_test_util.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/kernels/logprob.h"
#include "rlpt/rollout/device_sampler.h"
#include "rlpt/rollout/sampler.h"
#include "../unit/sampling_test_util.h"

namespace rlpt::rollout {
namespace {

using testing::draws;
using testing::sampling;

constexpr double kMargin = 1e-4;

using rlpt::testing::gpu_usable;

TEST(GpuSampler, CudaMatchesTheCpuSamplerOnRobustRows) {
    std::string why;
    if (!gpu_usable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
    const torch::Device cuda(torch::kCUDA, 0);
    int64_t rows = 0, fragile = 0;
    for (int64_t vocab : {int64_t{11}, int64_t{97}}) {
        for (uint64_t seed = 1; seed <= 10; ++seed) {
            const int64_t b = 16;
            auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
            auto z = torch::randn({b, vocab}, gen, torch::kFloat32).mul(2.0);
            z.narrow(0, 0, b / 2) = z.narrow(0, 0, b / 2).round();  // ties
            const auto zc = z.to(cuda);
            const auto u = draws(b, seed, 3);
            std::vector<SamplingParams> cases;
            for (double t : {0.7, 1.0, 1.3})
                for (int64_t k : {int64_t{-1}, int64_t{1}, int64_t{5}, vocab - 1})
                    for (double top_p : {1.0, 0.9, 0.5, 1e-6}) cases.push_back(sampling(t, top_p, k));
            for (double t : {0.0, 0.7, 1.0}) cases.push_back(sampling(t, 1.0, -1, true));
            for (const auto& p : cases) {
                const TokenChoices ref = choose_tokens(z, p, u);
                const TokenChoices dev = choose_tokens_on_device(zc, p, u);
                std::vector<TokenChoices> moved;
                if (!p.greedy)
                    for (double du : {-kMargin, kMargin})
                        for (double dp : {-kMargin, 0.0, kMargin}) {
                            auto q = p;
                            q.top_p = std::min(1.0, std::max(1e-9, p.top_p + (p.top_p < 1.0 ? dp : 0.0)));
                            std::vector<double> uq(u);
                            for (auto& x : uq) x = std::min(std::nextafter(1.0, 0.0), std::max(0.0, x + du));
                            moved.push_back(choose_tokens(z, q, uq));
                        }
                const double t = p.temperature > 0 ? p.temperature : 1.0;
                for (int64_t i = 0; i < b; ++i) {
                    const auto si = static_cast<size_t>(i);
                    ++rows;
                    bool robust = true;
                    for (const auto& m : moved) robust = robust && m.tokens[si] == ref.tokens[si];
                    if (!robust) {
                        ++fragile;
                        continue;
                    }
                    ASSERT_EQ(dev.tokens[si], ref.tokens[si])
                        << "V=" << vocab << " seed " << seed << " row " << i << " T=" << p.temperature
                        << " k=" << p.top_k << " p=" << p.top_p << " greedy=" << p.greedy;
                    const double zy = z[i][ref.tokens[si]].item<double>() / t;
                    const double zmax = z[i].max().item<double>() / t;
                    EXPECT_NEAR(dev.log_probs[si], ref.log_probs[si], testing::logp_rounding_bound(vocab, zy, zmax))
                        << "row " << i;
                }
            }
        }
    }
    EXPECT_LE(fragile * 20, rows) << fragile << " of " << rows << " rows sit within " << kMargin << " of a boundary";
}

TEST(GpuSampler, RowsDoNotDependOnTheirSlot) {
    std::string why;
    if (!gpu_usable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
    const torch::Device cuda(torch::kCUDA, 0);
    const int64_t b = 12, vocab = 151936;  // a Qwen2 vocabulary
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    const auto z = torch::randn({b, vocab}, gen, torch::kFloat32).mul(3.0).to(cuda);
    const auto zh = z.cpu();
    const auto u = draws(b, 7, 3);
    const auto rev = torch::arange(b - 1, -1, -1, torch::kInt64).to(cuda);
    const std::vector<double> urev(u.rbegin(), u.rend());
    for (const auto& p :
         {sampling(1.0, 1.0, -1), sampling(0.7, 0.9, 50), sampling(1.0, 0.95, -1), sampling(1.0, 1.0, -1, true)}) {
        const TokenChoices batch = choose_tokens_on_device(z, p, u);
        const TokenChoices reversed = choose_tokens_on_device(z.index_select(0, rev), p, urev);
        const double t = p.temperature > 0 ? p.temperature : 1.0;
        for (int64_t i = 0; i < b; ++i) {
            const auto si = static_cast<size_t>(i);
            const auto sr = static_cast<size_t>(b - 1 - i);
            const TokenChoices alone = choose_tokens_on_device(z.narrow(0, i, 1), p, {u[si]});
            EXPECT_EQ(alone.tokens[0], batch.tokens[si]) << "row " << i;
            EXPECT_EQ(reversed.tokens[sr], batch.tokens[si]) << "row " << i;
            // The row's softmax sums its V terms in an order that may depend on the batch's shape.
            const double zy = zh[i][batch.tokens[si]].item<double>() / t;
            const double bound = testing::logp_rounding_bound(vocab, zy, zh[i].max().item<double>() / t);
            EXPECT_NEAR(alone.log_probs[0], batch.log_probs[si], bound) << "row " << i;
            EXPECT_NEAR(reversed.log_probs[sr], batch.log_probs[si], bound) << "row " << i;
        }
    }
}

}  // namespace
}  // namespace rlpt::rollout
