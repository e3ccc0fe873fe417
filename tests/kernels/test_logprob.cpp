// Fused log-prob / entropy: CPU reference against plain torch (computed in float64), hand-checked
// values, edge cases and error paths; GPU against the CPU reference (skipped without a GPU).

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rlpt/core/error.h"
#include "rlpt/kernels/logprob.h"
#include "../unit/test_tolerance.h"
#include "gpu_test_util.h"

namespace {

using rlpt::kernels::logprob_backward;
using rlpt::kernels::logprob_backward_out;
using rlpt::kernels::logprob_entropy;
using rlpt::kernels::logprob_forward;
using rlpt::kernels::logprob_forward_out;
using torch::Tensor;

// Float32 error bounds of the fused log-prob / entropy / gradient against the exact values, from
// the float64 distribution (tests/unit/test_tolerance.h). lse = m + log Σ_j exp(z_j/T − m) sums V
// positive terms along the kernel's summation tree (kernels/logprob_ref.cpp: tiles of 2048, two
// accumulators of 8 lanes each, a sum over the lanes, the tiles' rescaled running sum; the GPU's
// block reduction is shallower), so each term passes through at most
// D = min(V, 2048)/16 + 9 + 2·⌈V/2048⌉ additions: γ_D relative, plus the exp's error (Cephes
// expf, < 2 ulp: 4 roundings), so γ_{D+4} absolute on lse; the roundings of z/T and z/T − m move each exponent by at most
// u·(|z_j/T| + |m| + |z_j/T − m|), at most 3u·max|z/T| once weighted by p; the log rounds once.
// log p = z_l/T − lse adds u·(|z_l/T| + |log p|). The entropy, lse − E_p[z/T], adds its sum of
// V terms of one sign: γ_{D+4}·E_p|z/T − m|. Each gradient element wl·(1[j = l] − p_j) −
// wh·p_j·(log p_j + H) sees p_j and log p_j off by ε_j = Δlse + 3u·|z_j/T| (relative and
// absolute), H by ΔH, and rounds ~4 times: (ε_j + ΔH + γ_4)·(|wl|·(1[j = l] + p_j) +
// |wh|·p_j·(|log p_j| + H + 1)). Entries at −inf have p = 0 and drop out (but for the clamp below).
struct LogProbBound {
    Tensor lse, logp, entropy, grad;
};
LogProbBound logprob_bound(const Tensor& logits, const Tensor& labels, double temperature, const Tensor& wl = {},
                           const Tensor& wh = {}) {
    const double u = rlpt::tol::kUnitRoundoffFp32;
    const int64_t v = logits.size(-1);
    const Tensor z = logits.detach().to(torch::kCPU, torch::kDouble).reshape({-1, v}) / temperature;
    const Tensor lab = labels.detach().to(torch::kCPU).reshape({-1, 1});
    const Tensor zf = torch::where(torch::isfinite(z), z, torch::zeros_like(z)).abs();
    const Tensor lsm = torch::log_softmax(z, -1), p = lsm.exp();
    const Tensor live = p > 0;
    const Tensor m = std::get<0>(z.max(-1, true));
    const Tensor dist = torch::where(live, (z - m).abs(), torch::zeros_like(z));
    const Tensor neg_log_p = torch::where(live, -lsm, torch::zeros_like(z));
    const Tensor h = (p * neg_log_p).sum(-1, true);
    const int64_t tiles = (v + 2047) / 2048, depth = std::min<int64_t>(v, 2048) / 16 + 9 + 2 * tiles;
    const double g = rlpt::tol::gamma(depth + 4, u);
    const Tensor lse_z = torch::logsumexp(z, -1, true);
    LogProbBound b;
    b.lse = g + 3 * u * std::get<0>(zf.max(-1, true)) + u * lse_z.abs();
    b.logp = b.lse + u * (zf.gather(-1, lab) + lsm.gather(-1, lab).abs());
    b.entropy = b.lse + g * (p * dist).sum(-1, true) + u * h;
    const Tensor eps = b.lse + 3 * u * zf + b.entropy + rlpt::tol::gamma(4, u);
    const Tensor onehot = torch::zeros_like(z).scatter_(-1, lab, 1.0);
    const Tensor wl_abs =
        wl.defined() ? wl.to(torch::kDouble).abs().reshape({-1, 1}) : torch::zeros({z.size(0), 1}, torch::kDouble);
    const Tensor wh_abs =
        wh.defined() ? wh.to(torch::kDouble).abs().reshape({-1, 1}) : torch::zeros({z.size(0), 1}, torch::kDouble);
    // The kernel clamps exp(z/T − m) at exp(kMinLogRatio = −86) (kernels/logprob_ref.cpp): a
    // probability that underflows to 0 may come out as that floor, log p as −86.
    const double floor = std::exp(-86.0);
    b.grad = (eps * (wl_abs * (onehot + p) + wh_abs * p * (neg_log_p + h + 1)) + floor * (wl_abs + wh_abs * (87 + h))) /
             temperature;
    b.lse = b.lse.squeeze(-1);
    b.logp = b.logp.squeeze(-1);
    b.entropy = b.entropy.squeeze(-1);
    return b;
}

// |got − want| <= bound + u_out·(|got| + |want|) element-wise (u_out: got's type, rounded last);
// NaN only matches NaN, infinities only themselves. Reports the worst element.
::testing::AssertionResult within(const Tensor& got_in, const Tensor& want_in, const Tensor& bound_in) {
    if (got_in.sizes() != want_in.sizes()) {
        return ::testing::AssertionFailure() << "shape " << got_in.sizes() << " vs expected " << want_in.sizes();
    }
    const double u_out = rlpt::tol::unit_roundoff(got_in.scalar_type());
    const Tensor got = got_in.detach().to(torch::kCPU, torch::kDouble).contiguous().reshape({-1});
    const Tensor want = want_in.detach().to(torch::kCPU, torch::kDouble).contiguous().reshape({-1});
    const Tensor b64 = bound_in.to(torch::kCPU, torch::kDouble);
    const Tensor bound = (b64.numel() == want_in.numel() ? b64.reshape(want_in.sizes()) : b64.expand(want_in.sizes()))
                             .contiguous()
                             .reshape({-1});
    const double *g = got.data_ptr<double>(), *w = want.data_ptr<double>(), *e = bound.data_ptr<double>();
    for (int64_t i = 0; i < got.numel(); ++i) {
        const bool gn = std::isnan(g[i]), wn = std::isnan(w[i]);
        const bool ok =
            (gn && wn) ||
            (!gn && !wn && (g[i] == w[i] || std::abs(g[i] - w[i]) <= e[i] + u_out * (std::abs(g[i]) + std::abs(w[i]))));
        if (!ok) {
            return ::testing::AssertionFailure()
                   << "element " << i << ": got " << g[i] << ", expected " << w[i] << " (bound " << e[i] << ")";
        }
    }
    return ::testing::AssertionSuccess();
}

struct TorchRef {
    Tensor logp, entropy;
};

// Plain torch in float64: log_softmax(z / T).gather(label), entropy = −Σ p·log p.
TorchRef torch_ref(const Tensor& logits, const Tensor& labels, double temperature) {
    const Tensor lsm = torch::log_softmax(logits.to(torch::kDouble) / temperature, -1);
    TorchRef r;
    r.logp = lsm.gather(-1, labels.unsqueeze(-1)).squeeze(-1);
    r.entropy = -(lsm.exp() * lsm).sum(-1);
    return r;
}

// Gradient of Σ(wl·logp + wh·entropy) w.r.t. logits through the plain-torch formula (float64).
Tensor torch_ref_grad(const Tensor& logits, const Tensor& labels, double temperature, const Tensor& wl,
                      const Tensor& wh) {
    const Tensor x = logits.detach().to(torch::kDouble).requires_grad_(true);
    const TorchRef r = torch_ref(x, labels, temperature);
    Tensor loss = (r.logp * wl.to(torch::kDouble)).sum();
    if (wh.defined()) loss = loss + (r.entropy * wh.to(torch::kDouble)).sum();
    loss.backward();
    return x.grad();
}

Tensor random_logits(int64_t n, int64_t v, double scale, torch::ScalarType dtype, uint64_t seed) {
    torch::manual_seed(seed);
    return (torch::randn({n, v}) * scale).to(dtype);
}

Tensor random_labels(int64_t n, int64_t v, uint64_t seed) {
    torch::manual_seed(seed);
    return torch::randint(0, v, {n}, torch::kLong);
}

// --- hand-checked values ------------------------------------------------------------------------

TEST(LogProbRef, HandCheckedSmallRow) {
    // p = [0.1, 0.2, 0.3, 0.4]; label 2.
    const Tensor logits = torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kFloat).log().reshape({1, 4});
    const Tensor labels = torch::tensor({2}, torch::kLong);
    const auto f = logprob_forward(logits, labels, 1.0, true);
    // The kernel's bounds plus the logits' own rounding to float (u32·|z| each, at most twice that
    // on any output here) and the 8 significant digits of the entropy's literal.
    const auto b = logprob_bound(logits, labels, 1.0, torch::ones({1}), torch::ones({1}));
    const double in = 2 * rlpt::tol::kUnitRoundoffFp32 * logits.abs().max().item<double>(), literal = 5e-8;
    EXPECT_NEAR(f.logp.item<float>(), std::log(0.3), b.logp.item<double>() + in);
    // H = 0.1·ln10 + 0.2·ln5 + 0.3·ln(10/3) + 0.4·ln2.5 = 1.2798542
    EXPECT_NEAR(f.entropy.item<float>(), 1.2798542, b.entropy.item<double>() + in + literal);
    EXPECT_NEAR(f.lse.item<float>(), 0.0, b.lse.item<double>() + in);  // Σp = 1

    // d logp / d z = onehot − p
    const Tensor g = logprob_backward(logits, labels, f.lse, f.entropy, torch::ones({1}), Tensor(), 1.0);
    EXPECT_TRUE(within(g, torch::tensor({-0.1, -0.2, 0.7, -0.4}).reshape({1, 4}), b.grad + in));
    // d H / d z_j = −p_j (log p_j + H)
    const double h = 1.2798542;
    const Tensor gh_want = torch::tensor({-0.1 * (std::log(0.1) + h), -0.2 * (std::log(0.2) + h),
                                          -0.3 * (std::log(0.3) + h), -0.4 * (std::log(0.4) + h)})
                               .reshape({1, 4});
    const Tensor gh = logprob_backward(logits, labels, f.lse, f.entropy, Tensor(), torch::ones({1}), 1.0);
    EXPECT_TRUE(within(gh, gh_want, b.grad + in + literal));
}

TEST(LogProbRef, TemperatureScalesLogitsAndGradient) {
    // logits 2·log p with T = 2 is the same distribution; the gradient carries 1/T.
    const Tensor logits = (torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kFloat).log() * 2).reshape({1, 4});
    const Tensor labels = torch::tensor({3}, torch::kLong);
    const auto f = logprob_forward(logits, labels, 2.0, true);
    const auto b = logprob_bound(logits, labels, 2.0, torch::ones({1}));
    const double in = 3 * rlpt::tol::kUnitRoundoffFp32 * logits.abs().max().item<double>(), literal = 5e-8;
    EXPECT_NEAR(f.logp.item<float>(), std::log(0.4), b.logp.item<double>() + in);
    EXPECT_NEAR(f.entropy.item<float>(), 1.2798542, b.entropy.item<double>() + in + literal);
    const Tensor g = logprob_backward(logits, labels, f.lse, f.entropy, torch::ones({1}), Tensor(), 2.0);
    EXPECT_TRUE(within(g, torch::tensor({-0.05, -0.1, -0.15, 0.3}).reshape({1, 4}), b.grad + in));
}

// --- against plain torch ------------------------------------------------------------------------

struct Case {
    int64_t n, v;
    double temperature;
    torch::ScalarType dtype;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << "n=" << c.n << " v=" << c.v << " T=" << c.temperature << " " << c.dtype;
}

class LogProbVsTorch : public ::testing::TestWithParam<Case> {};

TEST_P(LogProbVsTorch, ForwardAndBackward) {
    const Case c = GetParam();
    const Tensor logits = random_logits(c.n, c.v, 4.0, c.dtype, 1234 + c.v);
    const Tensor labels = random_labels(c.n, c.v, 99 + c.n);
    const TorchRef ref = torch_ref(logits, labels, c.temperature);

    const auto f = logprob_forward(logits, labels, c.temperature, true);
    ASSERT_EQ(f.logp.scalar_type(), torch::kFloat);
    // Inputs are exact in both paths (bf16 widens exactly), so the fp32 bounds apply.
    torch::manual_seed(7);
    const Tensor wl = torch::randn({c.n});
    const Tensor wh = torch::randn({c.n});
    const auto b = logprob_bound(logits, labels, c.temperature, wl, wh);
    EXPECT_TRUE(within(f.logp, ref.logp, b.logp)) << "logp";
    EXPECT_TRUE(within(f.entropy, ref.entropy, b.entropy)) << "entropy";
    EXPECT_TRUE(within(f.lse, torch::logsumexp(logits.to(torch::kDouble) / c.temperature, -1), b.lse)) << "lse";
    const Tensor want = torch_ref_grad(logits, labels, c.temperature, wl, wh);

    // Through the autograd wrapper.
    const Tensor x = logits.detach().clone().requires_grad_(true);
    const auto out = logprob_entropy(x, labels, c.temperature, true);
    ((out.logp * wl).sum() + (out.entropy * wh).sum()).backward();
    ASSERT_EQ(x.grad().scalar_type(), c.dtype);
    // bf16 gradients: one rounding to 8 significant bits on top (within()'s u_out).
    EXPECT_TRUE(within(x.grad(), want, b.grad)) << "grad through autograd";

    // grad_logp only / grad_entropy only, through the raw backward.
    const Tensor want_l = torch_ref_grad(logits, labels, c.temperature, wl, Tensor());
    EXPECT_TRUE(within(logprob_backward(logits, labels, f.lse, Tensor(), wl, Tensor(), c.temperature), want_l,
                       logprob_bound(logits, labels, c.temperature, wl).grad))
        << "grad_logp only";
    const Tensor want_h = torch_ref_grad(logits, labels, c.temperature, torch::zeros({c.n}), wh);
    EXPECT_TRUE(within(logprob_backward(logits, labels, f.lse, f.entropy, Tensor(), wh, c.temperature), want_h,
                       logprob_bound(logits, labels, c.temperature, Tensor(), wh).grad))
        << "grad_entropy only";
}

// V values are not multiples of the 8 SIMD lanes, the 256-thread CUDA block or the 2048-element
// CPU tile; 6149 spans four tiles (the online rescale across tiles).
INSTANTIATE_TEST_SUITE_P(Shapes, LogProbVsTorch,
                         ::testing::Values(Case{5, 1, 1.0, torch::kFloat}, Case{7, 3, 1.0, torch::kFloat},
                                           Case{33, 257, 0.7, torch::kFloat}, Case{9, 6149, 1.3, torch::kFloat},
                                           Case{33, 257, 0.7, torch::kBFloat16}, Case{9, 6149, 2.5, torch::kBFloat16},
                                           Case{4, 2048, 1.0, torch::kFloat}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             const Case& c = info.param;
                             return "n" + std::to_string(c.n) + "_v" + std::to_string(c.v) + "_t" +
                                    std::to_string(int(c.temperature * 10)) +
                                    (c.dtype == torch::kFloat ? "_fp32" : "_bf16");
                         });

TEST(LogProbRef, MaxInLaterTileRescalesTheSum) {
    // The row max sits in a later tile, a few units above the earlier tiles' max, so the
    // rescaled partial sums still matter.
    const int64_t v = 3 * 2048 + 11;
    torch::manual_seed(17);
    Tensor logits = torch::randn({2, v}) * 0.5;
    logits.index_put_({0, v - 3}, 4.0);
    logits.index_put_({1, 2048 + 5}, 3.0);
    const Tensor labels = torch::tensor({7, 2048 + 5}, torch::kLong);
    const TorchRef ref = torch_ref(logits, labels, 0.9);
    const auto f = logprob_forward(logits, labels, 0.9, true);
    const auto b = logprob_bound(logits, labels, 0.9);
    EXPECT_TRUE(within(f.logp, ref.logp, b.logp));
    EXPECT_TRUE(within(f.entropy, ref.entropy, b.entropy));
}

TEST(LogProbRef, LeadingDimsAreKept) {
    const Tensor logits = random_logits(6, 50, 2.0, torch::kFloat, 3).reshape({2, 3, 50});
    const Tensor labels = random_labels(6, 50, 4).reshape({2, 3});
    const auto out = logprob_entropy(logits, labels, 1.0, true);
    ASSERT_EQ(out.logp.sizes(), labels.sizes());
    ASSERT_EQ(out.entropy.sizes(), labels.sizes());
    const TorchRef ref = torch_ref(logits, labels, 1.0);
    const auto b = logprob_bound(logits, labels, 1.0);
    EXPECT_TRUE(within(out.logp, ref.logp, b.logp));
    EXPECT_TRUE(within(out.entropy, ref.entropy, b.entropy));
}

TEST(LogProbRef, WithoutEntropy) {
    const Tensor logits = random_logits(4, 30, 1.0, torch::kFloat, 5).requires_grad_(true);
    const Tensor labels = random_labels(4, 30, 6);
    const auto out = logprob_entropy(logits, labels, 1.0, false);
    EXPECT_FALSE(out.entropy.defined());
    out.logp.sum().backward();
    const Tensor want = torch_ref_grad(logits, labels, 1.0, torch::ones({4}), Tensor());
    EXPECT_TRUE(within(logits.grad(), want, logprob_bound(logits, labels, 1.0, torch::ones({4})).grad));
    EXPECT_FALSE(logprob_forward(logits.detach(), labels, 1.0, false).entropy.defined());
}

TEST(LogProbRef, EmptyBatch) {
    const Tensor logits = torch::zeros({0, 17}).requires_grad_(true);
    const Tensor labels = torch::zeros({0}, torch::kLong);
    const auto out = logprob_entropy(logits, labels, 0.5, true);
    EXPECT_EQ(out.logp.numel(), 0);
    EXPECT_EQ(out.entropy.numel(), 0);
    (out.logp.sum() + out.entropy.sum()).backward();
    EXPECT_EQ(logits.grad().sizes(), logits.sizes());
    const auto f = logprob_forward(logits.detach(), labels, 1.0, true);
    EXPECT_EQ(
        logprob_backward(logits.detach(), labels, f.lse, f.entropy, torch::zeros({0}), torch::zeros({0}), 1.0).sizes(),
        logits.sizes());
}

TEST(LogProbRef, ExtremeLogitsStayFinite) {
    // Row 0: k = 3 entries at +1e4, the rest at −1e4: p = 1/3 on the maxima, H = log 3.
    const int64_t v = 37;
    Tensor logits = torch::full({2, v}, -1e4);
    logits.index_put_({0, 0}, 1e4);
    logits.index_put_({0, 10}, 1e4);
    logits.index_put_({0, 36}, 1e4);
    logits[1] = torch::where(torch::arange(v) % 2 == 0, torch::full({v}, 1e4), torch::full({v}, -1e4));
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        const Tensor x = logits.to(dtype, false, /*copy=*/true).requires_grad_(true);
        const Tensor labels = torch::tensor({10, 1}, torch::kLong);  // row 1: a −1e4 entry
        const auto out = logprob_entropy(x, labels, 1.0, true);
        // The bounds grow with max|z| ≈ 1e4 (ulp(1e4)·p ≈ 1e-3·p in the recomputed log p).
        const auto b = logprob_bound(x, labels, 1.0, torch::ones({2}), torch::ones({2}));
        EXPECT_NEAR(out.logp[0].item<float>(), -std::log(3.0), b.logp[0].item<double>());
        EXPECT_NEAR(out.entropy[0].item<float>(), std::log(3.0), b.entropy[0].item<double>());
        const double hi = x[1][0].item<double>(), lo = x[1][1].item<double>();  // ±1e4 after rounding
        EXPECT_NEAR(out.logp[1].item<float>(), lo - hi - std::log(19.0), b.logp[1].item<double>());
        EXPECT_NEAR(out.entropy[1].item<float>(), std::log(19.0), b.entropy[1].item<double>());
        (out.logp.sum() + out.entropy.sum()).backward();
        EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>());
        const Tensor want = torch_ref_grad(x, labels, 1.0, torch::ones({2}), torch::ones({2}));
        EXPECT_TRUE(within(x.grad(), want, b.grad));
    }
}

TEST(LogProbRef, NegativeInfinityLogitsHaveZeroProbability) {
    // −inf entries (a masked vocabulary) drop out: the row is the distribution over the rest.
    Tensor logits = torch::tensor({{0.5f, -INFINITY, 1.5f, -INFINITY, -0.25f}});
    const Tensor finite = torch::tensor({{0.5f, 1.5f, -0.25f}});
    const auto f = logprob_forward(logits, torch::tensor({2}, torch::kLong), 1.0, true);
    const TorchRef ref = torch_ref(finite, torch::tensor({1}, torch::kLong), 1.0);
    const auto b = logprob_bound(logits, torch::tensor({2}, torch::kLong), 1.0);
    EXPECT_TRUE(within(f.logp, ref.logp, b.logp));
    EXPECT_TRUE(within(f.entropy, ref.entropy, b.entropy));
    const Tensor g = logprob_backward(logits, torch::tensor({2}, torch::kLong), f.lse, f.entropy, torch::ones({1}),
                                      torch::ones({1}), 1.0);
    EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
    // p of a −inf entry is exp(kMinLogRatio = −86) at most (kernels/logprob_ref.cpp clamps there):
    // its gradient −p·(1 + log p + H) with |log p| <= 86.
    EXPECT_LE(std::abs(g[0][1].item<float>()), std::exp(-86.0) * (1 + 86 + f.entropy.item<double>()));
    // The label itself at −inf: log p = −inf (as log_softmax gives), entropy still finite.
    const auto f2 = logprob_forward(logits, torch::tensor({1}, torch::kLong), 1.0, true);
    EXPECT_EQ(f2.logp.item<float>(), -INFINITY);
    EXPECT_TRUE(std::isfinite(f2.entropy.item<float>()));
}

TEST(LogProbRef, NanLogitsPoisonTheirRowOnly) {
    Tensor logits = torch::randn({3, 3000});
    logits.index_put_({1, 2500}, NAN);
    const Tensor labels = torch::tensor({0, 1, 2}, torch::kLong);
    const auto f = logprob_forward(logits, labels, 1.0, true);
    EXPECT_TRUE(std::isnan(f.logp[1].item<float>()));
    EXPECT_TRUE(std::isnan(f.entropy[1].item<float>()));
    EXPECT_TRUE(std::isfinite(f.logp[0].item<float>()) && std::isfinite(f.logp[2].item<float>()));
    const Tensor g = logprob_backward(logits, labels, f.lse, f.entropy, torch::ones({3}), torch::ones({3}), 1.0);
    EXPECT_TRUE(torch::isnan(g[1]).all().item<bool>());
    EXPECT_TRUE(torch::isfinite(g[0]).all().item<bool>());
}

TEST(LogProbRef, ZeroGradientRowsAreExactlyZero) {
    const Tensor logits = random_logits(4, 100, 3.0, torch::kBFloat16, 8);
    const Tensor labels = random_labels(4, 100, 9);
    const auto f = logprob_forward(logits, labels, 1.0, true);
    const Tensor gl = torch::tensor({1.0f, 0.0f, 0.5f, 0.0f});
    const Tensor gh = torch::tensor({0.0f, 0.0f, 1.0f, 0.0f});
    const Tensor g = logprob_backward(logits, labels, f.lse, f.entropy, gl, gh, 1.0);
    EXPECT_EQ(g[1].abs().sum().item<float>(), 0.0f);
    EXPECT_EQ(g[3].abs().sum().item<float>(), 0.0f);
    EXPECT_GT(g[0].abs().sum().item<float>(), 0.0f);
}

TEST(LogProbRef, BitwiseIndependentOfThreadCount) {
    const Tensor logits = random_logits(64, 3001, 3.0, torch::kFloat, 10);
    const Tensor labels = random_labels(64, 3001, 11);
    const int threads = torch::get_num_threads();
    torch::set_num_threads(1);
    const auto a = logprob_forward(logits, labels, 0.8, true);
    torch::set_num_threads(2);
    const auto b = logprob_forward(logits, labels, 0.8, true);
    torch::set_num_threads(threads);
    EXPECT_TRUE(torch::equal(a.logp, b.logp));
    EXPECT_TRUE(torch::equal(a.entropy, b.entropy));
}

TEST(LogProbRef, NonContiguousInputs) {
    const Tensor base = random_logits(40, 12, 2.0, torch::kFloat, 12);
    const Tensor logits = base.t();                                      // [12, 40], non-contiguous
    const Tensor labels = random_labels(24, 40, 13).slice(0, 0, 24, 2);  // stride 2
    const auto f = logprob_forward(logits, labels, 1.0, true);
    const TorchRef ref = torch_ref(logits, labels, 1.0);
    const auto b = logprob_bound(logits, labels, 1.0);
    EXPECT_TRUE(within(f.logp, ref.logp, b.logp));
    EXPECT_TRUE(within(f.entropy, ref.entropy, b.entropy));
}

// Outputs written into views of sentinel-filled buffers: nothing outside the views may change.
TEST(LogProbRef, OutVariantsWriteOnlyTheirElements) {
    const int64_t n = 13, v = 1031, pad = 64;
    const float sentinel = 12345.0f;
    for (auto dtype : {torch::kFloat, torch::kBFloat16}) {
        const Tensor logits = random_logits(n, v, 2.0, dtype, 14);
        const Tensor labels = random_labels(n, v, 15);
        Tensor bufs[3];
        for (auto& b : bufs) b = torch::full({n + 2 * pad}, sentinel);
        const Tensor logp = bufs[0].narrow(0, pad, n), ent = bufs[1].narrow(0, pad, n), lse = bufs[2].narrow(0, pad, n);
        logprob_forward_out(logits, labels, 0.9, logp, ent, lse);
        const auto f = logprob_forward(logits, labels, 0.9, true);
        EXPECT_TRUE(torch::equal(logp, f.logp));
        EXPECT_TRUE(torch::equal(ent, f.entropy));
        for (auto& b : bufs) {
            EXPECT_TRUE(torch::equal(b.narrow(0, 0, pad), torch::full({pad}, sentinel)));
            EXPECT_TRUE(torch::equal(b.narrow(0, pad + n, pad), torch::full({pad}, sentinel)));
        }
        const Tensor gbuf = torch::full({n * v + 2 * pad}, sentinel, torch::TensorOptions(dtype));
        const Tensor grad = gbuf.narrow(0, pad, n * v).view({n, v});
        logprob_backward_out(logits, labels, lse, ent, torch::ones({n}), torch::ones({n}), 0.9, grad);
        EXPECT_TRUE(
            torch::equal(grad, logprob_backward(logits, labels, lse, ent, torch::ones({n}), torch::ones({n}), 0.9)));
        EXPECT_TRUE(torch::equal(gbuf.narrow(0, 0, pad), torch::full({pad}, sentinel, gbuf.options())));
        EXPECT_TRUE(torch::equal(gbuf.narrow(0, pad + n * v, pad), torch::full({pad}, sentinel, gbuf.options())));
    }
}

// --- error paths ---------------------------------------------------------------------------------

TEST(LogProbRef, RejectsBadArguments) {
    const Tensor logits = torch::randn({3, 5});
    const Tensor labels = torch::tensor({0, 4, 2}, torch::kLong);
    const auto f = logprob_forward(logits, labels, 1.0, true);
    auto expect_error = [](auto&& fn, const std::string& fragment) {
        try {
            fn();
            ADD_FAILURE() << "no ValueError for: " << fragment;
        } catch (const rlpt::ValueError& e) {
            EXPECT_NE(e.message().find(fragment), std::string::npos) << e.message();
        }
    };
    expect_error([&] { logprob_forward(logits.to(torch::kDouble), labels, 1.0, true); },
                 "float32 or bfloat16, got Double");
    expect_error([&] { logprob_forward(logits.to(torch::kHalf), labels, 1.0, true); }, "float32 or bfloat16, got Half");
    expect_error([&] { logprob_forward(logits.reshape({15}), labels, 1.0, true); }, "2-D [N, V]");
    expect_error([&] { logprob_forward(torch::randn({3, 0}), labels, 1.0, true); }, "V must be >= 1");
    expect_error([&] { logprob_forward(logits, labels.to(torch::kInt), 1.0, true); }, "int64");
    expect_error([&] { logprob_forward(logits, labels.narrow(0, 0, 2), 1.0, true); }, "labels must be [N] = [3]");
    expect_error(
        [&] {
            logprob_forward(logits, torch::tensor({0, 5, 1}, torch::kLong), 1.0, true);
        },
        "labels[1] = 5 is outside [0, 5)");
    expect_error(
        [&] {
            logprob_forward(logits, torch::tensor({0, 1, -1}, torch::kLong), 1.0, true);
        },
        "labels[2] = -1 is outside [0, 5)");
    expect_error([&] { logprob_forward(logits, labels, 0.0, true); }, "temperature");
    expect_error([&] { logprob_forward(logits, labels, -1.0, true); }, "temperature");
    expect_error([&] { logprob_forward(logits, labels, NAN, true); }, "temperature");
    expect_error([&] { logprob_backward(logits, labels, f.lse, Tensor(), Tensor(), torch::ones({3}), 1.0); },
                 "with_entropy=false");
    expect_error([&] { logprob_backward(logits, labels, Tensor(), f.entropy, torch::ones({3}), Tensor(), 1.0); },
                 "lse (from the forward) is undefined");
    expect_error([&] { logprob_backward(logits, labels, f.lse, f.entropy, torch::ones({4}), Tensor(), 1.0); },
                 "grad_logp must be [N] = [3]");
    expect_error(
        [&] { logprob_backward(logits, labels, f.lse, f.entropy, torch::ones({3}, torch::kDouble), Tensor(), 1.0); },
        "grad_logp must be float32");
    expect_error([&] { logprob_forward_out(logits, labels, 1.0, torch::empty({4}), Tensor(), torch::empty({3})); },
                 "output logp must have shape [3]");
    expect_error(
        [&] {
            logprob_forward_out(logits, labels, 1.0, torch::empty({3}, torch::kDouble), Tensor(), torch::empty({3}));
        },
        "output logp must be Float");
    expect_error(
        [&] {
            logprob_backward_out(logits, labels, f.lse, f.entropy, torch::ones({3}), Tensor(), 1.0,
                                 torch::empty({5, 3}).t());
        },
        "output grad_logits must be contiguous");
    expect_error(
        [&] {
            logprob_backward_out(logits, labels, f.lse, f.entropy, torch::ones({3}), Tensor(), 1.0,
                                 torch::empty({3, 5}, torch::kBFloat16));
        },
        "output grad_logits must be Float");
    expect_error([&] { logprob_entropy(logits, labels.reshape({3, 1}), 1.0, true); }, "must equal the leading dims");
    expect_error([&] { logprob_entropy(torch::randn({}), torch::zeros({}, torch::kLong), 1.0, true); }, "0-dim");
}

// --- GPU against the CPU reference ----------------------------------------------------------------

using rlpt::testing::gpu_usable;

TEST(LogProbGpu, MatchesCpuReference) {
    std::string why;
    if (!gpu_usable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
    const torch::Device cuda(torch::kCUDA, 0);
    const float sentinel = -777.0f;
    const int64_t pad = 257;
    for (const Case c :
         {Case{1, 1, 1.0, torch::kFloat}, Case{37, 1001, 0.7, torch::kFloat}, Case{5, 151937, 1.0, torch::kFloat},
          Case{37, 1001, 1.3, torch::kBFloat16}, Case{3, 32003, 0.6, torch::kBFloat16}}) {
        SCOPED_TRACE(::testing::Message() << "n=" << c.n << " v=" << c.v << " dtype=" << c.dtype);
        Tensor logits = random_logits(c.n, c.v, 4.0, c.dtype, 21);
        logits.index_put_({0, c.v - 1}, 1e4);  // an extreme value in the last element
        const Tensor labels = random_labels(c.n, c.v, 22);
        const auto ref = logprob_forward(logits, labels, c.temperature, true);
        const Tensor lx = logits.to(cuda), ly = labels.to(cuda);

        Tensor bufs[3];
        for (auto& b : bufs) b = torch::full({c.n + 2 * pad}, sentinel, torch::TensorOptions(cuda));
        const Tensor logp = bufs[0].narrow(0, pad, c.n), ent = bufs[1].narrow(0, pad, c.n),
                     lse = bufs[2].narrow(0, pad, c.n);
        logprob_forward_out(lx, ly, c.temperature, logp, ent, lse);
        // Two float32 computations (the GPU's and the CPU's): twice the bound against exact.
        const auto b = logprob_bound(logits, labels, c.temperature);
        EXPECT_TRUE(within(logp, ref.logp, 2 * b.logp)) << "logp";
        EXPECT_TRUE(within(ent, ref.entropy, 2 * b.entropy)) << "entropy";
        EXPECT_TRUE(within(lse, ref.lse, 2 * b.lse)) << "lse";
        for (auto& b : bufs) {
            EXPECT_TRUE(torch::equal(b.narrow(0, 0, pad).cpu(), torch::full({pad}, sentinel)));
            EXPECT_TRUE(torch::equal(b.narrow(0, pad + c.n, pad).cpu(), torch::full({pad}, sentinel)));
        }

        torch::manual_seed(23);
        const Tensor wl = torch::randn({c.n}), wh = torch::randn({c.n});
        const Tensor gref = logprob_backward(logits, labels, ref.lse, ref.entropy, wl, wh, c.temperature);
        const Tensor gbuf = torch::full({c.n * c.v + 2 * pad}, sentinel, torch::TensorOptions(cuda).dtype(c.dtype));
        const Tensor grad = gbuf.narrow(0, pad, c.n * c.v).view({c.n, c.v});
        logprob_backward_out(lx, ly, lse, ent, wl.to(cuda), wh.to(cuda), c.temperature, grad);
        EXPECT_TRUE(within(grad, gref, 2 * logprob_bound(logits, labels, c.temperature, wl, wh).grad)) << "grad_logits";
        const Tensor edge = torch::full({pad}, sentinel, torch::TensorOptions(c.dtype));
        EXPECT_TRUE(torch::equal(gbuf.narrow(0, 0, pad).cpu(), edge));
        EXPECT_TRUE(torch::equal(gbuf.narrow(0, pad + c.n * c.v, pad).cpu(), edge));
    }
}

TEST(LogProbGpu, AutogradAndLabelChecksOnDevice) {
    std::string why;
    if (!gpu_usable(&why)) GTEST_SKIP() << "GPU test skipped: " << why;
    const torch::Device cuda(torch::kCUDA, 0);
    const Tensor logits = random_logits(8, 300, 2.0, torch::kFloat, 31);
    const Tensor labels = random_labels(8, 300, 32);
    const Tensor xc = logits.clone().requires_grad_(true);
    const Tensor xg = logits.to(cuda).requires_grad_(true);
    const auto oc = logprob_entropy(xc, labels, 0.9, true);
    const auto og = logprob_entropy(xg, labels.to(cuda), 0.9, true);
    (oc.logp.sum() + 0.5 * oc.entropy.sum()).backward();
    (og.logp.sum() + 0.5 * og.entropy.sum()).backward();
    EXPECT_TRUE(within(xg.grad(), xc.grad(),
                       2 * logprob_bound(logits, labels, 0.9, torch::ones({8}), torch::full({8}, 0.5)).grad));
    EXPECT_THROW(logprob_forward(logits.to(cuda), torch::full({8}, 300, torch::kLong).to(cuda), 1.0, false),
                 rlpt::ValueError);
}

}  // namespace
