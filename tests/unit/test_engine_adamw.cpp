// AdamW arithmetic and the single-process TrainEngine step: hand-checked updates (fp32 and
// bf16 masters), weight decay only on matrices, clipping, skip-on-non-finite, schedules,
// bucket-size and ZeRO-1 invariance, and the error paths.
#include <gtest/gtest.h>

#include <limits>

#include "counting_allocator.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/adamw.h"
#include "test_engine_helpers.h"
#include "test_tolerance.h"

namespace rlpt::engine {
namespace {

using testing::RefAdam;
using testing::TinyNet;
using testing::to_vec;

OptimOptions plain(double lr) {
    OptimOptions o;
    o.lr = lr;
    o.weight_decay = 0.0;
    o.clip_grad = 0.0;
    return o;
}

// ---- the flat kernel -------------------------------------------------------------------------

// Step `step` of the multi-step comparisons: lr 1e-2, weight decay 0.1, clip coefficient 0.5.
AdamWStep clipped_step(int64_t step) {
    AdamWStep s;
    s.lr = 1e-2;
    s.weight_decay = 0.1;
    s.step = step;
    s.grad_scale = 0.5;
    return s;
}

// Parameters within Adam's float32 bound of each other, and first moments within `m_roundings`
// roundings (order_bound) of the terms they sum, m_terms.
void expect_same_adam_steps(const torch::Tensor& pa, const torch::Tensor& pb, const torch::Tensor& ma,
                            const torch::Tensor& mb, const torch::Tensor& m_terms, const rlpt::tol::Bound& tol,
                            int64_t m_roundings) {
    const auto p_ref = pb.to(torch::kFloat64);
    EXPECT_TRUE(((pa - pb).abs().to(torch::kFloat64) <= tol.rel * p_ref.abs() + tol.abs).all().item<bool>());
    const double m_bound = rlpt::tol::order_bound(m_roundings, rlpt::tol::kUnitRoundoffFp32);
    EXPECT_TRUE(((ma - mb).abs().to(torch::kFloat64) <= m_bound * m_terms).all().item<bool>());
}

TEST(EngineAdamW, FirstStepByHand) {
    // Step 1 from zero moments: m̂ = g, v̂ = g², so p ← p·(1 − lr·wd) − lr·g / (|g| + eps).
    for (bool fused : {true, false}) {
        auto p = torch::tensor({1.0f, -2.0f, 0.5f});
        auto g = torch::tensor({0.1f, 0.2f, -0.3f});
        auto m = torch::zeros({3}), v = torch::zeros({3});
        AdamWStep s;
        s.lr = 0.1;
        s.weight_decay = 0.01;
        s.eps = 1e-8;
        fused ? adamw_update_(p, g, m, v, s) : adamw_update_torch_(p, g, m, v, s);
        // fp32 against the decimal values: the float32 inputs' roundings (eps is tiny, so the
        // update does not see g's) and the step's own (tests/unit/test_tolerance.h).
        const auto tol = rlpt::tol::adam_fp32_bound({s.lr});
        const double u = rlpt::tol::kUnitRoundoffFp32;
        for (const auto& [i, want] :
             {std::pair{0, 0.999 - 0.1 * 0.1 / (0.1 + 1e-8)}, std::pair{1, -1.998 - 0.1 * 0.2 / (0.2 + 1e-8)},
              std::pair{2, 0.4995 + 0.1 * 0.3 / (0.3 + 1e-8)}})
            EXPECT_NEAR(p[i].item<double>(), want, tol.at(want)) << fused << " " << i;
        // m = (1 − β1)·g, v = (1 − β2)·g²: the inputs rounded to float (2, 3) and the products.
        EXPECT_NEAR(m[0].item<double>(), 0.01, rlpt::tol::gamma(3, u) * 0.01);
        EXPECT_NEAR(v[2].item<double>(), 0.001 * 0.09, rlpt::tol::gamma(5, u) * 0.001 * 0.09);
    }
}

TEST(EngineAdamW, FusedMatchesTorchOpsAndReferenceOverSteps) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const int64_t n = 100003;  // several parallel chunks and a ragged tail
    auto p0 = torch::randn({n}, gen);
    auto pa = p0.clone(), pb = p0.clone();
    auto ma = torch::zeros({n}), va = torch::zeros({n}), mb = torch::zeros({n}), vb = torch::zeros({n});
    auto m_terms = torch::zeros({n}, torch::kFloat64);  // Σ|terms| of m: (1 − β1)·|g·scale| decayed
    RefAdam ref(to_vec(p0.narrow(0, 0, 64)));
    for (int step = 1; step <= 3; ++step) {
        auto g = torch::randn({n}, gen);
        m_terms = 0.9 * m_terms + 0.1 * 0.5 * g.abs().to(torch::kFloat64);
        const AdamWStep s = clipped_step(step);
        adamw_update_(pa, g, ma, va, s);
        adamw_update_torch_(pb, g, mb, vb, s);
        ref.step(to_vec(g.narrow(0, 0, 64)), 1e-2, 0.9, 0.999, 1e-8, 0.1, step, 0.5);
    }
    // Two fp32 computations of the same three steps, and one against float64 (tests/unit/test_tolerance.h);
    // m sums 2 roundings a step relative to its terms.
    const auto tol = rlpt::tol::adam_fp32_bound({1e-2, 1e-2, 1e-2});
    expect_same_adam_steps(pa, pb, ma, mb, m_terms, tol, 6);
    auto got = to_vec(pa.narrow(0, 0, 64));
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref.p[i], tol.at(ref.p[i])) << i;
}

TEST(EngineAdamW, SumOfSquaresIsExactAndThreadIndependent) {
    auto x = torch::full({200001}, 0.5f);
    EXPECT_EQ(sum_of_squares(x), 200001 * 0.25);
    auto y = torch::randn({300000});
    const int saved = torch::get_num_threads();
    torch::set_num_threads(1);
    const double one = sum_of_squares(y);
    torch::set_num_threads(2);
    const double two = sum_of_squares(y);
    torch::set_num_threads(saved);
    EXPECT_EQ(one, two);
    // float squares are exact in double; two orders of n − 1 additions of positive terms.
    EXPECT_NEAR(one, y.to(torch::kFloat64).square().sum().item<double>(),
                rlpt::tol::order_bound(y.numel() - 1, rlpt::tol::kUnitRoundoffFp64) * one);
    EXPECT_THROW(sum_of_squares(torch::zeros({3}, torch::kFloat64)), ValueError);
}

// The bits `update` leaves in (p, m, v), run at 1 and then 2 torch threads from the same inputs.
template <typename Update>
std::vector<torch::Tensor> at_one_and_two_threads(const torch::Tensor& p0, const torch::Tensor& m0,
                                                  const torch::Tensor& v0, Update update) {
    const int saved = torch::get_num_threads();
    std::vector<torch::Tensor> out;
    for (int threads : {1, 2}) {
        torch::set_num_threads(threads);
        auto p = p0.clone(), m = m0.clone(), v = v0.clone();
        update(p, m, v);
        out.push_back(torch::cat({p, m, v}));
    }
    torch::set_num_threads(saved);
    return out;
}

TEST(EngineAdamW, FusedUpdateIsThreadIndependent) {
    // adamw.cpp is compiled with OpenMP (rlpt_parallel_for_sources), so 2 threads really split
    // the elements; each element's update is independent, so the bits must not change.
    torch::manual_seed(3);
    const auto p0 = torch::randn({1 << 20}), g = torch::randn({1 << 20});
    const auto m0 = torch::randn({1 << 20}) * 0.1, v0 = torch::rand({1 << 20}) * 0.01;
    AdamWStep s;
    s.lr = 1e-3;
    s.weight_decay = 0.01;
    s.step = 7;
    const auto out =
        at_one_and_two_threads(p0, m0, v0, [&](auto& p, auto& m, auto& v) { adamw_update_(p, g, m, v, s); });
    EXPECT_TRUE(torch::equal(out[0], out[1]));
}

TEST(EngineAdamW, MultiTensorMatchesTheLoopWithinAdamsBound) {
    // The engine's call: views of one flat buffer at ragged offsets (ZeRO slices), one weight
    // decay, three steps. Unclipped, the fused kernel: two float32 computations of the same steps
    // (tol::adam_fp32_bound), m within 2 roundings a step of its terms. Clipped (grad_scale 0.5),
    // the loop tensor by tensor: bit for bit adamw_update_. The gradients are never written.
    for (const double scale : {1.0, 0.5}) {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
        const std::vector<int64_t> sizes = {1, 17, 4099, 100003};
        int64_t total = 0;
        for (auto n : sizes) total += n + 3;
        const auto p0 = torch::randn({total}, gen);
        auto pa = p0.clone(), pb = p0.clone();
        auto ma = torch::zeros({total}), va = torch::zeros({total}), mb = torch::zeros({total}),
             vb = torch::zeros({total});
        auto m_terms = torch::zeros({total}, torch::kFloat64);
        const auto views = [&](const torch::Tensor& flat) {
            std::vector<torch::Tensor> out;
            int64_t off = 3;
            for (auto n : sizes) {
                out.push_back(flat.narrow(0, off, n));
                off += n + 3;
            }
            return out;
        };
        for (int step = 1; step <= 3; ++step) {
            const auto g = torch::randn({total}, gen);
            m_terms = 0.9 * m_terms + 0.1 * scale * g.abs().to(torch::kFloat64);
            AdamWStep s = clipped_step(step);
            s.grad_scale = scale;
            const auto ga = g.clone();
            adamw_update_multi_(views(pa), views(ga), views(ma), views(va), s);
            EXPECT_TRUE(torch::equal(ga, g)) << "the gradients were written";
            for (size_t i = 0; i < sizes.size(); ++i)
                adamw_update_(views(pb)[i], views(g)[i], views(mb)[i], views(vb)[i], s);
        }
        if (scale == 1.0) {
            expect_same_adam_steps(pa, pb, ma, mb, m_terms, rlpt::tol::adam_fp32_bound({1e-2, 1e-2, 1e-2}), 6);
        } else {
            EXPECT_TRUE(torch::equal(pa, pb) && torch::equal(ma, mb) && torch::equal(va, vb));
        }
        EXPECT_TRUE(torch::equal(pa.narrow(0, 0, 3), p0.narrow(0, 0, 3))) << "an element outside the views moved";
        EXPECT_FALSE(torch::equal(pa, p0));
    }
}

TEST(EngineAdamW, MultiTensorUpdateIsThreadIndependent) {
    torch::manual_seed(3);
    const auto p0 = torch::randn({(1 << 20) + 5}), g = torch::randn({(1 << 20) + 5});
    const auto m0 = torch::randn({(1 << 20) + 5}) * 0.1, v0 = torch::rand({(1 << 20) + 5}) * 0.01;
    AdamWStep s;
    s.lr = 1e-3;
    s.weight_decay = 0.01;
    s.step = 7;
    const auto out = at_one_and_two_threads(p0, m0, v0, [&](auto& p, auto& m, auto& v) {
        adamw_update_multi_({p.narrow(0, 1, 1 << 20), p.narrow(0, 0, 1)}, {g.narrow(0, 1, 1 << 20), g.narrow(0, 0, 1)},
                            {m.narrow(0, 1, 1 << 20), m.narrow(0, 0, 1)}, {v.narrow(0, 1, 1 << 20), v.narrow(0, 0, 1)},
                            s);
    });
    EXPECT_TRUE(torch::equal(out[0], out[1]));
}

TEST(EngineAdamW, ChunkedSumOfSquaresHoldsOneChunk) {
    // The device path's arithmetic on the CPU: float64 squares (exact) summed in another order than
    // the loop's (two orders of n − 1 additions of positive terms), and at most one chunk's
    // float64 copy (plus its [1] partial sums) live at a time.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(4);
    const auto x = torch::randn({250007}, gen);
    const int64_t chunk = 10000;
    double got = 0;
    int64_t peak = 0;
    {
        rlpt::testing::CountingCpuAllocator::Scope counting;
        got = sum_of_squares_chunked(x, chunk);
        peak = counting.peak_extra();
    }
    const double want = sum_of_squares(x);
    EXPECT_NEAR(got, want, rlpt::tol::order_bound(x.numel() - 1, rlpt::tol::kUnitRoundoffFp64) * want);
    EXPECT_LE(peak, chunk * 8 + 4096) << "more than one chunk's float64 copy";
    EXPECT_GE(peak, chunk * 8) << "the measurement sees the chunk";
    EXPECT_EQ(sum_of_squares_chunked(torch::zeros({0})), 0.0);
    EXPECT_THROW(sum_of_squares_chunked(x, 0), ValueError);
}

TEST(EngineAdamW, KernelRejectsBadBuffers) {
    auto p = torch::zeros({4}), g = torch::zeros({4}), m = torch::zeros({4});
    AdamWStep s;
    EXPECT_THROW(adamw_update_(p, torch::zeros({3}), m, torch::zeros({4}), s), ValueError);
    EXPECT_THROW(adamw_update_(p, g, m, torch::zeros({4}, torch::kFloat64), s), ValueError);
    s.step = 0;
    EXPECT_THROW(adamw_update_(p, g, m, torch::zeros({4}), s), ValueError);
}

// ---- the engine, one process ------------------------------------------------------------------

TEST(EngineStep, Fp32SingleStepMatchesHandReferenceWithDecayOnMatricesOnly) {
    auto net = std::make_shared<TinyNet>();
    auto o = plain(0.1);
    o.weight_decay = 0.5;
    comm::Communicator none;
    TrainEngine eng(net, none, o, 0);
    EXPECT_STREQ(eng.transport_name(), "self");
    EXPECT_EQ(eng.num_parameters(), 9);
    EXPECT_EQ(eng.optimizer_state_bytes(), 9 * 8);
    RefAdam rw(to_vec(net->w)), rb(to_vec(net->b));
    auto gw = torch::tensor({{0.1, -0.2, 0.3}, {0.0, 0.5, -1.0}}), gb = torch::tensor({0.25, 0.0, -0.125});
    eng.zero_grad();
    net->set_grads(gw, gb);
    auto r = eng.step();
    EXPECT_FALSE(r.skipped);
    EXPECT_DOUBLE_EQ(r.lr, 0.1);
    // The gradients are the float32 roundings of these decimals (u32 relative each).
    const double norm = std::sqrt(0.01 + 0.04 + 0.09 + 0.25 + 1.0 + 0.0625 + 0.015625);
    EXPECT_NEAR(r.grad_norm, norm,
                (rlpt::tol::kUnitRoundoffFp32 + rlpt::tol::gamma(10, rlpt::tol::kUnitRoundoffFp64)) * norm);
    // The time split is filled in: no all-gather without ZeRO-1, the update itself took time.
    EXPECT_GE(r.allreduce_s, 0.0);
    EXPECT_EQ(r.allgather_s, 0.0);
    EXPECT_GT(r.optimizer_s, 0.0);
    rw.step(to_vec(gw), 0.1, 0.9, 0.999, 1e-8, 0.5, 1);
    rb.step(to_vec(gb), 0.1, 0.9, 0.999, 1e-8, 0.0, 1);
    auto w = to_vec(net->w), b = to_vec(net->b);
    const auto one_step = rlpt::tol::adam_fp32_bound({0.1});
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], rw.p[i], one_step.at(rw.p[i])) << i;
    for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(b[i], rb.p[i], one_step.at(rb.p[i])) << i;
    // A zero gradient moves nothing but the decay: b[1] exactly, w[1][0] by (1 − lr·wd) (the
    // factor rounded to float, then the product).
    EXPECT_EQ(b[1], -0.5);
    EXPECT_NEAR(w[3], 0.25 * 0.95, rlpt::tol::gamma(2, rlpt::tol::kUnitRoundoffFp32) * 0.25 * 0.95);
    // .grad is the flat buffer's view and holds the DP-mean gradient.
    EXPECT_TRUE(torch::equal(net->w.grad(), gw.to(torch::kFloat32)));

    // Second step: bias correction and moments carry over.
    eng.zero_grad();
    EXPECT_EQ(net->w.grad().abs().sum().item<double>(), 0.0);
    net->set_grads(gw * 2, gb * -1);
    eng.step();
    rw.step(to_vec(gw * 2), 0.1, 0.9, 0.999, 1e-8, 0.5, 2);
    rb.step(to_vec(gb * -1), 0.1, 0.9, 0.999, 1e-8, 0.0, 2);
    w = to_vec(net->w);
    b = to_vec(net->b);
    const auto two_steps = rlpt::tol::adam_fp32_bound({0.1, 0.1});
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], rw.p[i], two_steps.at(rw.p[i])) << i;
    for (size_t i = 0; i < b.size(); ++i) EXPECT_NEAR(b[i], rb.p[i], two_steps.at(rb.p[i])) << i;
    EXPECT_EQ(eng.global_step(), 2);
    EXPECT_EQ(eng.applied_updates(), 2);
}

TEST(EngineStep, Bf16ParametersKeepFp32Masters) {
    auto net = std::make_shared<TinyNet>(torch::kBFloat16);
    auto o = plain(0.1);
    o.weight_decay = 0.5;
    comm::Communicator none;
    TrainEngine eng(net, none, o, 0);
    EXPECT_EQ(eng.optimizer_state_bytes(), 9 * 12);  // moments + master
    RefAdam rw(to_vec(net->w)), rb(to_vec(net->b));
    auto gw = torch::tensor({{0.125, -0.25, 0.5}, {0.0, 0.5, -1.0}}), gb = torch::tensor({0.25, 0.0, -0.125});
    eng.zero_grad();
    net->set_grads(gw, gb);
    eng.step();
    rw.step(to_vec(gw), 0.1, 0.9, 0.999, 1e-8, 0.5, 1);
    rb.step(to_vec(gb), 0.1, 0.9, 0.999, 1e-8, 0.0, 1);
    EXPECT_EQ(net->w.scalar_type(), torch::kBFloat16);
    // The bf16 parameter is the fp32 master rounded to nearest.
    auto expect_w = torch::tensor(rw.p, torch::kFloat64).to(torch::kFloat32).to(torch::kBFloat16).view({2, 3});
    auto expect_b = torch::tensor(rb.p, torch::kFloat64).to(torch::kFloat32).to(torch::kBFloat16);
    EXPECT_TRUE(torch::equal(net->w.detach(), expect_w)) << net->w << expect_w;
    EXPECT_TRUE(torch::equal(net->b.detach(), expect_b)) << net->b << expect_b;
}

TEST(EngineStep, Bf16MastersAccumulateUpdatesBelowBf16Resolution) {
    // Each step moves the master by ~lr = 1e-3; bf16 spacing below 1.0 is 2^-8 ≈ 0.0039, so
    // without a master 1.0 − 0.001 would round back to 1.0 forever.
    struct One : torch::nn::Module {
        torch::Tensor x = register_parameter("x", torch::ones({1}, torch::kBFloat16));
    };
    auto net = std::make_shared<One>();
    comm::Communicator none;
    TrainEngine eng(net, none, plain(1e-3), 0);
    auto step = [&] {
        eng.zero_grad();
        (net->x * torch::ones({1}, torch::kBFloat16)).sum().backward();
        eng.step();
    };
    step();
    EXPECT_EQ(net->x.item<float>(), 1.0f);
    step();
    step();  // master ≈ 0.997: nearer to 0.99609375 than to 1
    EXPECT_EQ(net->x.item<float>(), 0.99609375f);
}

TEST(EngineStep, Bf16GradientsAccumulateInFp32) {
    // bf16(1/3) = 0.333984375; three micro-batches sum to 1.001953125 in fp32, while a bf16
    // running sum would round to 1.0 (bf16 spacing at 1 is 2^-7).
    struct One : torch::nn::Module {
        torch::Tensor x = register_parameter("x", torch::ones({2}, torch::kBFloat16));
    };
    auto net = std::make_shared<One>();
    comm::Communicator none;
    TrainEngine eng(net, none, plain(1e-3), 0);
    eng.zero_grad();
    for (int i = 0; i < 3; ++i) (net->x * torch::full({2}, 1.0 / 3, torch::kBFloat16)).sum().backward();
    ASSERT_EQ(net->x.grad().scalar_type(), torch::kFloat32);
    EXPECT_EQ(net->x.grad()[0].item<float>(), 1.001953125f);
    // Exact values: the square root and the product round (and √2 itself).
    const double u64 = rlpt::tol::kUnitRoundoffFp64;
    EXPECT_NEAR(eng.step().grad_norm, 1.001953125 * std::sqrt(2.0),
                rlpt::tol::gamma(4, u64) * 1.001953125 * std::sqrt(2.0));
    // A gradient re-created in bf16 by autograd (after zero_grad(true)) is converted in.
    net->zero_grad(/*set_to_none=*/true);
    (net->x * torch::full({2}, 0.5, torch::kBFloat16)).sum().backward();
    EXPECT_EQ(net->x.grad().scalar_type(), torch::kBFloat16);
    EXPECT_NEAR(eng.step().grad_norm, 0.5 * std::sqrt(2.0), rlpt::tol::gamma(4, u64) * 0.5 * std::sqrt(2.0));
    EXPECT_EQ(net->x.grad().scalar_type(), torch::kFloat32);
}

TEST(EngineStep, ClipsToClipGradAndReportsTheNormBeforeClipping) {
    auto net = std::make_shared<TinyNet>();
    auto o = plain(0.1);
    o.clip_grad = 1.0;
    o.eps = 1.0;  // a large eps makes the update depend on the gradient's scale
    comm::Communicator none;
    TrainEngine eng(net, none, o, 0);
    RefAdam rw(to_vec(net->w)), rb(to_vec(net->b)), unclipped(to_vec(net->w));
    auto gw = torch::tensor({{3.0, 0.0, 0.0}, {0.0, 4.0, 0.0}}), gb = torch::zeros({3});
    eng.zero_grad();
    net->set_grads(gw, gb);
    auto r = eng.step();
    const double u64 = rlpt::tol::kUnitRoundoffFp64;
    EXPECT_NEAR(r.grad_norm, 5.0, rlpt::tol::gamma(3, u64) * 5.0);  // exact squares 9 + 16, one sqrt
    const double scale = 1.0 / (5.0 + 1e-6);
    rw.step(to_vec(gw), 0.1, 0.9, 0.999, 1.0, 0.0, 1, scale);
    unclipped.step(to_vec(gw), 0.1, 0.9, 0.999, 1.0, 0.0, 1);
    auto w = to_vec(net->w);
    const auto tol = rlpt::tol::adam_fp32_bound({0.1});  // the clip factor's float rounding: elasticity <= 1
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], rw.p[i], tol.at(rw.p[i])) << i;
    EXPECT_GT(std::abs(w[0] - unclipped.p[0]), tol.at(unclipped.p[0]));
    // A norm below clip_grad is left alone.
    auto net2 = std::make_shared<TinyNet>();
    TrainEngine eng2(net2, none, o, 0);
    RefAdam r2(to_vec(net2->w));
    eng2.zero_grad();
    net2->set_grads(gw * 0.1, gb);
    // 0.3 and 0.4 are float32 roundings of the decimals (u32 each).
    EXPECT_NEAR(eng2.step().grad_norm, 0.5, (rlpt::tol::kUnitRoundoffFp32 + rlpt::tol::gamma(3, u64)) * 0.5);
    r2.step(to_vec(gw * 0.1), 0.1, 0.9, 0.999, 1.0, 0.0, 1);
    w = to_vec(net2->w);
    for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(w[i], r2.p[i], tol.at(r2.p[i])) << i;
}

TEST(EngineStep, NonFiniteNormSkipsTheUpdateZeroesGradsAndCountsTheStep) {
    for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
        auto net = std::make_shared<TinyNet>();
        auto o = plain(0.1);
        o.clip_grad = 1.0;
        comm::Communicator none;
        TrainEngine eng(net, none, o, 0);
        auto w0 = net->w.detach().clone(), b0 = net->b.detach().clone();
        eng.zero_grad();
        net->set_grads(torch::tensor({{1.0, bad, 0.0}, {0.0, 0.0, 0.0}}), torch::zeros({3}));
        auto r = eng.step();
        EXPECT_TRUE(r.skipped);
        EXPECT_FALSE(std::isfinite(r.grad_norm));
        EXPECT_DOUBLE_EQ(r.lr, 0.1);
        EXPECT_TRUE(torch::equal(net->w.detach(), w0));
        EXPECT_TRUE(torch::equal(net->b.detach(), b0));
        EXPECT_EQ(net->w.grad().abs().sum().item<double>(), 0.0);
        EXPECT_EQ(eng.global_step(), 1);
        EXPECT_EQ(eng.schedule_step(), 1);
        EXPECT_EQ(eng.applied_updates(), 0);
        // The next finite step is the optimizer's first: same as a fresh engine's first step.
        auto gw = torch::tensor({{0.1, -0.2, 0.3}, {0.0, 0.5, -1.0}}), gb = torch::tensor({0.25, 0.0, -0.125});
        net->set_grads(gw, gb);
        eng.step();
        auto ref = std::make_shared<TinyNet>();
        TrainEngine fresh(ref, none, o, 0);
        fresh.zero_grad();
        ref->set_grads(gw, gb);
        fresh.step();
        EXPECT_TRUE(testing::bitwise_equal(*net, *ref));
    }
}

TEST(EngineStep, ScheduleAdvancesPerStepOrOnRequest) {
    auto net = std::make_shared<TinyNet>();
    auto o = plain(1.0);
    o.warmup_steps = 2;  // lr 0, 0.5, 1, ...
    comm::Communicator none;
    TrainEngine eng(net, none, o, 0);
    EXPECT_DOUBLE_EQ(eng.current_lr(), 0.0);
    auto w0 = net->w.detach().clone();
    eng.zero_grad();
    net->set_grads(torch::ones({2, 3}), torch::ones({3}));
    EXPECT_DOUBLE_EQ(eng.step().lr, 0.0);
    EXPECT_TRUE(torch::equal(net->w.detach(), w0));  // lr 0: no change
    EXPECT_DOUBLE_EQ(eng.current_lr(), 0.5);
    EXPECT_DOUBLE_EQ(eng.step(false).lr, 0.5);  // a mini-batch step that keeps the lr
    EXPECT_DOUBLE_EQ(eng.step(false).lr, 0.5);
    EXPECT_EQ(eng.global_step(), 3);
    EXPECT_EQ(eng.schedule_step(), 1);
    eng.advance_schedule();
    EXPECT_DOUBLE_EQ(eng.current_lr(), 1.0);
}

// ---- the engine on a transformer --------------------------------------------------------------

double policy_loss(model::CausalLM& m, const SequenceBatch& s) {
    auto lp = compute_log_probs(m, s, 1.0, false).log_probs;
    auto mask = s.attention_mask.narrow(1, s.attention_mask.size(1) - s.response_length, s.response_length);
    auto loss = -(lp * mask).sum() / mask.sum();
    loss.backward();
    return loss.item<double>();
}

void train(TrainEngine& eng, model::CausalLM& m, int steps, uint64_t data_seed) {
    for (int k = 0; k < steps; ++k) {
        eng.zero_grad();
        // Two micro-batches: gradients accumulate into the flat buffer.
        policy_loss(m, testing::make_sequences(3, 4, 5, 20, data_seed + 2 * k));
        policy_loss(m, testing::make_sequences(3, 4, 5, 20, data_seed + 2 * k + 1));
        ASSERT_FALSE(eng.step().skipped);
    }
}

TEST(EngineStep, BucketSizeAndZero1DoNotChangeTheResult) {
    auto args = testing::tiny_args();
    comm::Communicator none;
    OptimOptions o;
    o.lr = 1e-2;
    auto a = model::make_random_causal_lm(args, 3);
    TrainEngine ea(a, none, o, 0);
    train(ea, *a, 3, 100);

    auto b = model::make_random_causal_lm(args, 3);
    auto ob = o;
    ob.grad_bucket_bytes = 4 * 1000;  // many buckets, boundaries inside parameters
    TrainEngine eb(b, none, ob, 0);
    train(eb, *b, 3, 100);
    EXPECT_TRUE(testing::bitwise_equal(*a, *b));

    auto c = model::make_random_causal_lm(args, 3);
    auto oc = o;
    oc.zero_stage = 1;
    TrainEngine ec(c, none, oc, 0);
    train(ec, *c, 3, 100);
    EXPECT_TRUE(testing::bitwise_equal(*a, *c));
    EXPECT_GE(ec.optimizer_state_bytes(), ea.optimizer_state_bytes());  // one rank: padding only
    EXPECT_EQ(ea.optimizer_state_bytes(), ea.num_parameters() * 8);
}

// One rank: ZeRO-2/3 run the same AdamW on the same (whole) slices; only the norm is summed per
// unit. Dropped gradients (module zero_grad(true)) are picked up by the layer hooks too.
TEST(EngineStep, Zero2AndZero3OnOneRankFollowZero0) {
    auto args = testing::tiny_args();
    comm::Communicator none;
    OptimOptions o;
    o.lr = 1e-2;
    auto a = model::make_random_causal_lm(args, 3);
    TrainEngine ea(a, none, o, 0);
    train(ea, *a, 3, 100);
    for (int64_t z : {2, 3}) {
        auto b = model::make_random_causal_lm(args, 3);
        auto ob = o;
        ob.zero_stage = z;
        std::shared_ptr<void> hold;
        TrainEngine eb(b, none, ob, 0);
        train(eb, *b, 2, 100);
        eb.zero_grad();
        b->zero_grad(/*set_to_none=*/true);
        policy_loss(*b, testing::make_sequences(3, 4, 5, 20, 104));
        policy_loss(*b, testing::make_sequences(3, 4, 5, 20, 105));
        ASSERT_FALSE(eb.step().skipped);
        hold = eb.hold_full_parameters();
        EXPECT_EQ(hold != nullptr, z == 3);
        // The same gradients; only the norm is summed per unit (float64, γ_n(u64) relative), so the
        // clip factor, rounded to float, differs by at most u32 + γ_n(u64): the Adam trajectory
        // bound of that, plus two fp32 computations of the same steps (tests/unit/test_tolerance.h).
        std::vector<double> lrs(3, o.lr);
        const auto tol = rlpt::tol::adam_fp32_bound(lrs);
        const double grad_rel =
            rlpt::tol::kUnitRoundoffFp32 + rlpt::tol::gamma(eb.num_parameters(), rlpt::tol::kUnitRoundoffFp64);
        const double abs = tol.abs + rlpt::tol::adam_trajectory_bound(lrs, grad_rel);
        auto pa = a->named_parameters();
        for (const auto& item : b->named_parameters())
            EXPECT_TRUE(torch::allclose(item.value(), pa[item.key()], tol.rel, abs))
                << "ZeRO-" << z << " " << item.key();
    }
    // ZeRO-2 on a module without a transformer Backbone: one unit, reduced in step().
    auto n0 = std::make_shared<TinyNet>(), n2 = std::make_shared<TinyNet>();
    OptimOptions o2 = o;
    o2.zero_stage = 2;
    TrainEngine e0(n0, none, o, 0), e2(n2, none, o2, 0);
    for (auto* n : {n0.get(), n2.get()}) n->set_grads(torch::full({2, 3}, 0.5), torch::full({3}, -1.0));
    e0.step();
    e2.step();
    const auto one = rlpt::tol::adam_fp32_bound({o.lr});
    EXPECT_TRUE(torch::allclose(n0->w, n2->w, one.rel,
                                one.abs + rlpt::tol::adam_trajectory_bound({o.lr}, 2 * rlpt::tol::kUnitRoundoffFp32)));
    // ZeRO-3 needs the per-layer hooks.
    OptimOptions o3 = o;
    o3.zero_stage = 3;
    try {
        TrainEngine e3(std::make_shared<TinyNet>(), none, o3, 0);
        ADD_FAILURE() << "ZeRO-3 accepted a module without a Backbone";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("Backbone"), std::string::npos) << e.what();
    }
}

TEST(EngineStep, DroppedGradientsAreToleratedAndReattached) {
    auto args = testing::tiny_args();
    comm::Communicator none;
    OptimOptions o;
    o.lr = 1e-2;
    auto a = model::make_random_causal_lm(args, 3);
    TrainEngine ea(a, none, o, 0);
    train(ea, *a, 1, 7);

    auto b = model::make_random_causal_lm(args, 3);
    TrainEngine eb(b, none, o, 0);
    b->zero_grad(/*set_to_none=*/true);  // drops the .grad views
    policy_loss(*b, testing::make_sequences(3, 4, 5, 20, 7));
    policy_loss(*b, testing::make_sequences(3, 4, 5, 20, 8));
    eb.step();
    EXPECT_TRUE(testing::bitwise_equal(*a, *b));
    // Nothing backpropagated at all: every gradient counts as zero.
    b->zero_grad(/*set_to_none=*/true);
    auto r = eb.step();
    EXPECT_EQ(r.grad_norm, 0.0);
    eb.zero_grad();
    for (const auto& p : b->parameters()) ASSERT_TRUE(p.grad().defined());
}

TEST(EngineStep, ErrorsNameTheProblem) {
    comm::Communicator none;
    struct Frozen : torch::nn::Module {
        torch::Tensor x = register_parameter("x", torch::ones({2}), /*requires_grad=*/false);
    };
    EXPECT_THROW(TrainEngine(std::make_shared<Frozen>(), none, OptimOptions{}, 0), ValueError);
    struct Half : torch::nn::Module {
        torch::Tensor x = register_parameter("x", torch::ones({2}, torch::kFloat16));
    };
    try {
        TrainEngine e(std::make_shared<Half>(), none, OptimOptions{}, 0);
        ADD_FAILURE() << "fp16 accepted";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    }
    OptimOptions bad;
    bad.scheduler = "step";
    EXPECT_THROW(TrainEngine(std::make_shared<TinyNet>(), none, bad, 0), ValueError);
    EXPECT_THROW(TrainEngine(nullptr, none, OptimOptions{}, 0), ValueError);

    // Moving the module after the engine took its parameters is caught at the next step.
    auto net = std::make_shared<TinyNet>();
    TrainEngine eng(net, none, OptimOptions{}, 0);
    net->to(torch::kFloat64);
    try {
        eng.step();
        ADD_FAILURE() << "moved parameter not detected";
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("'w' was moved"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace rlpt::engine
