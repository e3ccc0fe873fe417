// model::chunked_head_logprob against the unchunked head (fp32 matmul of the whole [N, V] logits +
// the fused kernel's autograd): bit-identical with one chunk, within derived rounding bounds with
// several, and a peak host memory that never holds the [N, V] logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "counting_allocator.h"
#include "rlpt/core/error.h"
#include "rlpt/kernels/logprob.h"
#include "rlpt/model/chunked_head.h"
#include "test_tolerance.h"

namespace rlpt::model {
namespace {

struct Outputs {
    torch::Tensor logp, entropy, spp, grad_h, grad_w;
};

struct Case {
    torch::Tensor h, w, labels, gl, gh;  // h, w leaves requiring grad; gl, gh the upstream gradients
    double temperature = 1.0;
};

Case make_case(int64_t n, int64_t hdim, int64_t v, torch::Dtype dtype, double temperature, uint64_t seed) {
    torch::manual_seed(seed);
    Case c;
    c.h = (torch::randn({n, hdim}) * 1.5).to(dtype).requires_grad_(true);
    c.w = (torch::randn({v, hdim}) * 0.5).to(dtype).requires_grad_(true);
    c.labels = torch::randint(v, {n}, torch::kInt64);
    c.gl = torch::randn({n});
    c.gh = torch::randn({n});
    c.temperature = temperature;
    return c;
}

Outputs run_backward(const Case& c, const torch::Tensor& logp, const torch::Tensor& entropy, const torch::Tensor& spp) {
    c.h.mutable_grad() = torch::Tensor();
    c.w.mutable_grad() = torch::Tensor();
    ((logp * c.gl).sum() + (entropy * c.gh).sum()).backward();
    return {logp.detach(), entropy.detach(), spp, c.h.grad().clone(), c.w.grad().clone()};
}

// The path compute_log_probs took before the chunked head: local_logits_fp32's matmul, the fused
// kernel's autograd, and the Σπ² formula on the whole logits.
Outputs unchunked(const Case& c) {
    auto logits = torch::matmul(c.h.to(torch::kFloat32), c.w.to(torch::kFloat32).t());
    auto out = kernels::logprob_entropy(logits, c.labels, c.temperature, true);
    torch::Tensor spp;
    {
        torch::NoGradGuard ng;
        auto z = logits.detach() / std::max(c.temperature, 1e-8);
        auto lse = torch::stack({torch::logsumexp(2.0 * z, -1), torch::logsumexp(z, -1)});
        spp = torch::exp(lse[0] - 2.0 * lse[1]);
    }
    return run_backward(c, out.logp, out.entropy, spp);
}

Outputs chunked(const Case& c, int64_t chunk_rows, int64_t budget_bytes = kHeadChunkBudgetBytes,
                HeadPrecision precision = HeadPrecision::kFp32) {
    ChunkedHeadOptions o;
    o.precision = precision;
    o.temperature = c.temperature;
    o.with_entropy = true;
    o.with_sum_pi_squared = true;
    o.chunk_rows = chunk_rows;
    o.budget_bytes = budget_bytes;
    auto out = chunked_head_logprob(c.h, c.w, c.labels, o);
    EXPECT_FALSE(out.sum_pi_squared.requires_grad());
    return run_backward(c, out.logp, out.entropy, out.sum_pi_squared);
}

void expect_identical(const Outputs& a, const Outputs& b, const std::string& what) {
    EXPECT_TRUE(torch::equal(a.logp, b.logp)) << what;
    EXPECT_TRUE(torch::equal(a.entropy, b.entropy)) << what;
    EXPECT_TRUE(torch::equal(a.spp, b.spp)) << what;
    EXPECT_TRUE(torch::equal(a.grad_h, b.grad_h)) << what;
    EXPECT_TRUE(torch::equal(a.grad_w, b.grad_w)) << what;
}

TEST(ChunkedHead, OneChunkIsBitIdenticalToTheUnchunkedHead) {
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        auto c = make_case(13, 16, 97, dtype, 0.7, 3);
        const auto ref = unchunked(c);
        EXPECT_EQ(ref.grad_h.scalar_type(), dtype);
        // The default budget holds all 13 rows: one chunk, as does chunk_rows >= N.
        expect_identical(chunked(c, 0), ref, std::string("budget, ") + c10::toString(dtype));
        expect_identical(chunked(c, 13), ref, std::string("N rows, ") + c10::toString(dtype));
        expect_identical(chunked(c, 100), ref, std::string("> N rows, ") + c10::toString(dtype));
    }
}

// Chunked and unchunked differ in the BLAS blocking of each [rows, H]·[H, V] product and in the
// order grad_W sums its N rows. Each path's error (Higham §3.1) is first order in γ_n(u_fp32) with
// n = H + V + N the terms summed along the longest path (a logit's dot product, the kernel's
// vocabulary reductions, grad_W's sum over rows; grad_h sums V), relative to the magnitudes summed:
//   forward values: the row's 1 + max|z| (z = logits / T), |logits| ≤ Σ_k |h_k W_vk|;
//   grad_h [i, k]:   Σ_v |g_iv| |W_vk|,   grad_W [v, k]: Σ_i |g_iv| |h_ik|   (g = d loss / d logits).
// The softmax turns a logit error δ into relative errors of p of at most 2δ/T and changes the
// entropy by at most 2·(1 + log V)·δ/T, so everything is amplified by at most
// κ = 2·(1 + log V)·(1 + max|z|)/min(T, 1). Two paths: tol = 2·κ·γ_n·magnitude. A bf16 gradient is
// then rounded once more: + u_bf16·(|a| + |b|) (tol::bf16_rounding_slack).
TEST(ChunkedHead, ChunksMatchTheUnchunkedHeadWithinRounding) {
    const int64_t n = 11, hdim = 16, v = 97;
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        for (double temperature : {1.0, 0.6}) {
            auto c = make_case(n, hdim, v, dtype, temperature, 7);
            const auto ref = unchunked(c);
            const auto hf = c.h.detach().to(torch::kFloat64), wf = c.w.detach().to(torch::kFloat64);
            const double zmax = (hf.abs().mm(wf.abs().t())).max().item<double>() / temperature;
            const double kappa = 2.0 * (1.0 + std::log(double(v))) * (1.0 + zmax) / std::min(temperature, 1.0);
            const double g = 2.0 * kappa * tol::gamma(hdim + v + n, tol::kUnitRoundoffFp32);
            // |g_iv| ≤ (|gl_i| + |gh_i|·(|log p_iv| + H_i + 1))·(p_iv + 1[v = y])/T ≤ (|gl| + |gh|·(2·zmax + log V + 1))·2/T
            const auto gbound =
                (c.gl.abs() + c.gh.abs() * (2.0 * zmax + std::log(double(v)) + 1.0)) * (2.0 / temperature);
            const auto gb = gbound.to(torch::kFloat64).unsqueeze(1).expand({n, v});
            const auto tol_h = gb.mm(wf.abs()) * g;      // [N, H]
            const auto tol_w = gb.t().mm(hf.abs()) * g;  // [V, H]
            const double tol_fwd = g * (1.0 + zmax);
            for (int64_t rows : {int64_t{1}, int64_t{3}, n - 1, n, int64_t{4}}) {
                const auto got = chunked(c, rows);
                const std::string what = std::string(c10::toString(dtype)) + " T=" + std::to_string(temperature) +
                                         " rows=" + std::to_string(rows);
                EXPECT_LE(tol::max_abs_diff(got.logp, ref.logp), tol_fwd) << what;
                EXPECT_LE(tol::max_abs_diff(got.entropy, ref.entropy), tol_fwd) << what;
                EXPECT_LE(tol::max_abs_diff(got.spp, ref.spp), tol_fwd) << what;  // Σπ² ≤ 1
                auto slack_h = tol_h, slack_w = tol_w;
                if (dtype == torch::kBFloat16) {
                    slack_h = slack_h + tol::bf16_rounding_slack(got.grad_h, ref.grad_h);
                    slack_w = slack_w + tol::bf16_rounding_slack(got.grad_w, ref.grad_w);
                }
                auto dh = (got.grad_h.to(torch::kFloat64) - ref.grad_h.to(torch::kFloat64)).abs();
                auto dw = (got.grad_w.to(torch::kFloat64) - ref.grad_w.to(torch::kFloat64)).abs();
                EXPECT_TRUE((dh <= slack_h).all().item<bool>())
                    << what << " grad_h excess " << (dh - slack_h).max().item<double>();
                EXPECT_TRUE((dw <= slack_w).all().item<bool>())
                    << what << " grad_W excess " << (dw - slack_w).max().item<double>();
            }
        }
    }
}

TEST(ChunkedHead, BudgetPicksTheRows) {
    EXPECT_EQ(head_chunk_rows(1000, 1000, 4000 * 7), 7);
    EXPECT_EQ(head_chunk_rows(5, 1000, 4000 * 7), 5);  // capped at N
    EXPECT_EQ(head_chunk_rows(5, 1000, 1), 1);         // at least one row
    EXPECT_EQ(head_chunk_rows(0, 1000, 4000), 1);
    // 152k vocabulary, default 256 MiB: 441 rows of 608 kB.
    EXPECT_EQ(head_chunk_rows(32 * 1024, 151936, kHeadChunkBudgetBytes), 441);
    EXPECT_THROW(head_chunk_rows(4, 10, 0), ValueError);
}

TEST(ChunkedHead, OnlyLogpAndNoGradientsWhenNotNeeded) {
    auto c = make_case(6, 8, 31, torch::kFloat32, 1.0, 11);
    ChunkedHeadOptions o;
    o.chunk_rows = 4;
    auto out = chunked_head_logprob(c.h, c.w, c.labels, o);
    EXPECT_FALSE(out.entropy.defined());
    EXPECT_FALSE(out.sum_pi_squared.defined());
    auto ref = kernels::logprob_entropy(torch::matmul(c.h.to(torch::kFloat32), c.w.to(torch::kFloat32).t()), c.labels,
                                        1.0, false);
    EXPECT_LE(tol::max_abs_diff(out.logp, ref.logp), 1e-5);
    // A frozen head: only hidden gets a gradient.
    auto w = c.w.detach();
    out = chunked_head_logprob(c.h, w, c.labels, o);
    out.logp.sum().backward();
    EXPECT_TRUE(c.h.grad().defined());
    EXPECT_FALSE(w.grad().defined());
    torch::NoGradGuard ng;
    EXPECT_FALSE(chunked_head_logprob(c.h, c.w, c.labels, o).logp.requires_grad());
}

TEST(ChunkedHead, BadInputsAreValueErrors) {
    auto c = make_case(4, 8, 16, torch::kFloat32, 1.0, 1);
    ChunkedHeadOptions o;
    EXPECT_THROW(chunked_head_logprob(c.h.view({2, 2, 8}), c.w, c.labels, o), ValueError);
    EXPECT_THROW(chunked_head_logprob(c.h, c.w.narrow(1, 0, 4), c.labels, o), ValueError);
    EXPECT_THROW(chunked_head_logprob(c.h, c.w, c.labels.narrow(0, 0, 3), o), ValueError);
    EXPECT_THROW(chunked_head_logprob(c.h, c.w, c.labels.to(torch::kInt32), o), ValueError);
    EXPECT_THROW(chunked_head_logprob(c.h, c.w, c.labels + 16, o), ValueError);  // label outside [0, V)
    o.temperature = 0.0;
    EXPECT_THROW(chunked_head_logprob(c.h, c.w, c.labels, o), ValueError);
}

// ---- head precision ---------------------------------------------------------------------------------

TEST(ChunkedHead, Bf16HeadIsWithinItsBoundOfFp32) {
    // kBf16 rounds h and W to bf16 and accumulates in fp32: each logit z_v = Σ_k h_k·W_vk moves by
    // δ_v <= (γ_2(u_bf16) + 2·γ_{H+1}(u32))·Σ_k |h_k|·|W_vk| (both operands rounded once, products
    // exact in fp32; two fp32 summation orders). log p_y = z_y − lse(z) and lse is 1-Lipschitz in the
    // max norm, so |Δ log p_y| <= δ_y + max_v δ_v, plus the fused kernel's own rounding on each side
    // (2·γ_{V+2}(u32) relative to |z_y| + |lse|). The gradient of the hidden state, (p − e_y)·W·g at
    // fp32, moves through the rounded G and W (γ_2(u_bf16) relative to |G|·|W|) and through p, whose
    // entries move by a factor within exp(±2·max_v δ_v): at most (exp(2·max δ) − 1)·(p·|W|)·|g|.
    // kTf32 on the CPU is kFp32 bit for bit.
    const int64_t n = 24, hdim = 40, v = 300;
    auto c = make_case(n, hdim, v, torch::kFloat32, 1.0, 17);
    const auto ref = chunked(c, 7);
    const auto bf = chunked(c, 7, kHeadChunkBudgetBytes, HeadPrecision::kBf16);
    expect_identical(chunked(c, 7, kHeadChunkBudgetBytes, HeadPrecision::kTf32), ref, "tf32 on the CPU");
    const double ub = tol::kUnitRoundoffBf16, u32 = tol::kUnitRoundoffFp32;
    const auto h64 = c.h.detach().to(torch::kFloat64), w64 = c.w.detach().to(torch::kFloat64);
    const auto abs_prod = torch::matmul(h64.abs(), w64.abs().t());  // [N, V] Σ|h||W|
    const auto delta = abs_prod * (tol::gamma(2, ub) + 2.0 * tol::gamma(hdim + 1, u32));
    const auto z = torch::matmul(h64, w64.t());
    const auto lse = torch::logsumexp(z, -1);
    const auto zy = z.gather(1, c.labels.unsqueeze(1)).squeeze(1);
    const auto max_delta = std::get<0>(delta.max(-1));
    const auto bound = delta.gather(1, c.labels.unsqueeze(1)).squeeze(1) + max_delta +
                       2.0 * tol::gamma(v + 2, u32) * (zy.abs() + lse.abs() + std::get<0>(z.abs().max(-1)));
    const auto diff = (bf.logp.to(torch::kFloat64) - ref.logp.to(torch::kFloat64)).abs();
    EXPECT_TRUE((diff <= bound).all().item<bool>()) << "worst excess " << (diff - bound).max().item<double>();
    EXPECT_GT(diff.max().item<double>(), 0.0) << "bf16 changed nothing";
    // Gradient of the hidden states (entropy's upstream gradient zeroed: the log-prob path only).
    Case lp = c;
    lp.gh = torch::zeros({n});
    const auto gref = chunked(lp, 7), gbf = chunked(lp, 7, kHeadChunkBudgetBytes, HeadPrecision::kBf16);
    // p moves by a factor within exp(±2·max δ) (z_v and lse by at most max δ each): not first order.
    const auto p = torch::softmax(z, -1);
    const auto gl = lp.gl.to(torch::kFloat64).abs().unsqueeze(1);
    const auto p_move = (2.0 * max_delta).exp().sub(1.0).unsqueeze(1) * p * gl;  // |Δ G| per entry
    const auto g_abs = (p - torch::one_hot(c.labels, v).to(torch::kFloat64)).abs() * gl + p_move;
    const auto gbound = torch::matmul(g_abs, w64.abs()) * (tol::gamma(2, ub) + 2.0 * tol::gamma(v + 1, u32)) +
                        torch::matmul(p_move, w64.abs());
    const auto gdiff = (gbf.grad_h.to(torch::kFloat64) - gref.grad_h.to(torch::kFloat64)).abs();
    EXPECT_TRUE((gdiff <= gbound).all().item<bool>()) << "worst excess " << (gdiff - gbound).max().item<double>();
    EXPECT_GT(gdiff.max().item<double>(), 0.0);
    EXPECT_EQ(head_precision_from_name("bf16"), HeadPrecision::kBf16);
    EXPECT_STREQ(head_precision_name(HeadPrecision::kTf32), "tf32");
    EXPECT_THROW(head_precision_from_name("fp16"), ValueError);
}

// ---- peak memory ------------------------------------------------------------------------------------

// Peak bytes above the starting level over a forward + backward of the chunked head.
int64_t peak_extra_bytes(const Case& c, int64_t chunk_rows, int64_t budget_bytes) {
    rlpt::testing::CountingCpuAllocator::Scope counting;
    {
        ChunkedHeadOptions o;
        o.with_entropy = true;
        o.with_sum_pi_squared = true;
        o.chunk_rows = chunk_rows;
        o.budget_bytes = budget_bytes;
        auto out = chunked_head_logprob(c.h, c.w, c.labels, o);
        ((out.logp * c.gl).sum() + (out.entropy * c.gh).sum()).backward();
    }
    return counting.peak_extra();
}

TEST(ChunkedHead, PeakMemoryIsOneChunkNotTheWholeLogits) {
    const int64_t n = 64, hdim = 8, v = 4096;
    auto c = make_case(n, hdim, v, torch::kFloat32, 1.0, 5);
    const int64_t full_logits = n * v * 4;  // 1 MiB
    const int64_t budget = 2 * v * 4;       // two rows per chunk: 32 KiB
    const int64_t head = v * hdim * 4;      // W (fp32) and the grad_W accumulator, 128 KiB each
    const int64_t chunked_peak = peak_extra_bytes(c, 0, budget);
    // A chunk's logits and its transients (Σπ²'s z, 2z, logsumexp's difference from the max and
    // its exp: ≤ 5 chunk-sized tensors live in the forward; logits + grad_logits in the backward),
    // the fp32 grad_W accumulator (W.grad itself for an fp32 head), grad_h and [N] vectors.
    const int64_t bound = 5 * budget + head + 16 * n * (hdim + 1) * 4;
    EXPECT_LE(chunked_peak, bound) << "full logits would be " << full_logits;
    EXPECT_LT(bound, full_logits);
    // The measurement sees logits: with one chunk of all N rows the peak holds [N, V].
    c.h.mutable_grad() = torch::Tensor();
    c.w.mutable_grad() = torch::Tensor();
    EXPECT_GE(peak_extra_bytes(c, n, budget), full_logits);
}

}  // namespace
}  // namespace rlpt::model
