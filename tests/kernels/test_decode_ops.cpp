// Element-wise decode-step kernels (rlpt/kernels/decode_ops.h) and the multi-target few-row
// matmul (small_matmul_into) against their double-precision references and against the
// LibTorch expressions they replace; errors.

#include <gtest/gtest.h>

#include <string>

#include "rlpt/core/error.h"
#include "rlpt/kernels/decode_ops.h"
#include "rlpt/kernels/small_matmul.h"
#include "../unit/test_tolerance.h"

namespace {

using rlpt::kernels::MatmulTarget;

template <class F>
void expect_value_error(F&& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one mentioning " << needle;
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
}

// Hugging Face's RMSNorm as the model's LibTorch path computes it (float32).
torch::Tensor torch_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
    return w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + eps));
}

TEST(DecodeOps, RmsNormMatchesReferenceAndLibTorch) {
    torch::manual_seed(21);
    for (int64_t m : {1, 3, 17}) {
        for (int64_t h : {1, 7, 8, 771}) {
            SCOPED_TRACE(testing::Message() << "m " << m << " h " << h);
            auto x = torch::randn({m, h}) * 3, w = torch::randn({h});
            auto got = torch::empty({m, h}), want = torch::empty({m, h});
            rlpt::kernels::rms_norm_into(x, w, 1e-5, got);
            rlpt::kernels::rms_norm_into_reference(x, w, 1e-5, want);
            // The mean of h squares (positive terms: γ_h relative to it), + eps, the reciprocal square
            // root (halves that, one rounding) and two products: within γ_{h+4}(u32) relative of the
            // exact value per element, whatever the order; the reference is exact, then rounded;
            // LibTorch's expression is another float32 order of the same.
            const auto rel = rlpt::tol::gamma(h + 4, rlpt::tol::kUnitRoundoffFp32);
            const auto mag = want.abs().to(torch::kDouble);
            EXPECT_TRUE(((got - want).abs().to(torch::kDouble) <= (rel + rlpt::tol::kUnitRoundoffFp32) * mag)
                            .all()
                            .item<bool>());
            EXPECT_TRUE(((torch_rms_norm(x, w, 1e-5) - want).abs().to(torch::kDouble) <=
                         (rel + rlpt::tol::kUnitRoundoffFp32) * mag)
                            .all()
                            .item<bool>());
            // In place (out = x) and rows with a stride (a column slice of a wider buffer).
            auto wide = torch::zeros({m, h + 5});
            wide.narrow(1, 2, h).copy_(x);
            auto view = wide.narrow(1, 2, h);
            rlpt::kernels::rms_norm_into(view, w, 1e-5, view);
            EXPECT_TRUE(torch::equal(view, got));
            EXPECT_EQ(wide.narrow(1, 0, 2).abs().sum().item<float>(), 0.0f);  // nothing outside written
        }
    }
}

// x [M, heads * hd] rotated the way the model's LibTorch path does it (layers.cpp apply_rotary).
torch::Tensor torch_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, int64_t hd) {
    auto x4 = x.view({x.size(0), -1, hd});
    const int64_t half = hd / 2;
    auto rot = torch::cat({-x4.narrow(-1, half, half), x4.narrow(-1, 0, half)}, -1);
    return (x4 * cos.unsqueeze(1) + rot * sin.unsqueeze(1)).view(x.sizes());
}

TEST(DecodeOps, RotaryIsTheLibTorchExpressionBitForBit) {
    torch::manual_seed(22);
    for (int64_t m : {1, 5}) {
        for (int64_t hd : {2, 6, 64}) {
            for (int64_t heads : {1, 3}) {
                SCOPED_TRACE(testing::Message() << "m " << m << " hd " << hd << " heads " << heads);
                auto x = torch::randn({m, heads * hd});
                auto ang = torch::rand({m, hd / 2}) * 50;
                auto emb = torch::cat({ang, ang}, -1);
                auto cos = emb.cos(), sin = emb.sin();
                auto got = x.clone(), want = x.clone();
                rlpt::kernels::rotary_inplace(got, cos, sin, hd);
                rlpt::kernels::rotary_inplace_reference(want, cos, sin, hd);
                // x·cos ± x'·sin: two products and a sum, γ_3(u32) of |x·cos| + |x'·sin|, against the
                // exact reference rounded once.
                const auto x4 = x.abs().to(torch::kDouble).view({m, heads, hd});
                const auto rot = torch::cat({x4.narrow(-1, hd / 2, hd / 2), x4.narrow(-1, 0, hd / 2)}, -1);
                const auto mag = (x4 * cos.abs().unsqueeze(1) + rot * sin.abs().unsqueeze(1)).view({m, heads * hd});
                const auto bound = rlpt::tol::gamma(3, rlpt::tol::kUnitRoundoffFp32) * mag +
                                   rlpt::tol::kUnitRoundoffFp32 * want.abs().to(torch::kDouble);
                EXPECT_TRUE(((got - want).abs().to(torch::kDouble) <= bound).all().item<bool>());
                EXPECT_TRUE(torch::equal(got, torch_rotary(x, cos, sin, hd)));
            }
        }
    }
}

TEST(DecodeOps, Errors) {
    auto x = torch::randn({2, 8});
    expect_value_error(
        [&] {
            rlpt::kernels::rms_norm_into(x, torch::randn({7}), 1e-5, torch::empty({2, 8}));
        },
        "rms_norm_into");
    expect_value_error([&] { rlpt::kernels::rms_norm_into(x.to(torch::kDouble), torch::randn({8}), 1e-5, x); },
                       "float32");
    expect_value_error(
        [&] {
            rlpt::kernels::rotary_inplace(x, torch::randn({2, 3}), torch::randn({2, 3}), 3);
        },
        "head_dim even");
    expect_value_error(
        [&] {
            rlpt::kernels::rotary_inplace(x, torch::randn({1, 4}), torch::randn({2, 4}), 4);
        },
        "rotary_inplace");
}

std::vector<rlpt::kernels::SmallMatmulIsa> isas() {
    std::vector<rlpt::kernels::SmallMatmulIsa> out;
    for (auto isa : {rlpt::kernels::SmallMatmulIsa::kAuto, rlpt::kernels::SmallMatmulIsa::kAvx512,
                     rlpt::kernels::SmallMatmulIsa::kAvx2, rlpt::kernels::SmallMatmulIsa::kPortable})
        if (rlpt::kernels::small_matmul_isa_supported(isa)) out.push_back(isa);
    return out;
}

// Three targets (q/k/v-like, one with bias, one written into a column slice of a wider buffer)
// and an accumulating one (the residual add): each element exactly small_matmul's, so equal to
// it bit for bit, and close to the reference; at several row counts and thread counts.
TEST(SmallMatmulInto, EachTargetIsSmallMatmulBitForBit) {
    torch::manual_seed(23);
    const int saved = torch::get_num_threads();
    for (int threads : {1, 2}) {
        torch::set_num_threads(threads);
        for (int64_t m : {1, 3, 16, 33, 64}) {
            for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
                SCOPED_TRACE(testing::Message() << "threads " << threads << " m " << m << " " << c10::toString(dt));
                const int64_t k = 77;
                auto x = torch::randn({m, k});
                auto w1 = torch::randn({37, k}).to(dt), w2 = torch::randn({5, k}).to(dt),
                     w3 = torch::randn({64, k}).to(dt);
                auto b2 = torch::randn({5});
                auto wide = torch::full({m, 37 + 9}, 7.0f);
                auto y1 = wide.narrow(1, 9, 37);
                auto y2 = torch::empty({m, 5});
                auto residual = torch::randn({m, 64});
                auto y3 = residual.clone();
                for (auto isa : isas()) {
                    y3.copy_(residual);
                    rlpt::kernels::small_matmul_into(x, {{w1, {}, y1}, {w2, b2, y2}, {w3, {}, y3, true}}, isa);
                    // float32: exactly small_matmul's elements (bfloat16 weights: against the
                    // reference below; small_matmul has no float32-x / bfloat16-w form).
                    auto f = [&](const torch::Tensor& w, const torch::Tensor& b) {
                        return rlpt::kernels::small_matmul(x, w, b, isa);
                    };
                    if (dt == torch::kFloat32) {
                        EXPECT_TRUE(torch::equal(y1, f(w1, {})));
                        EXPECT_TRUE(torch::equal(y2, f(w2, b2)));
                        EXPECT_TRUE(torch::equal(y3, residual + f(w3, {})));
                    }
                    EXPECT_EQ(wide.narrow(1, 0, 9).ne(7.0f).sum().item<int64_t>(), 0);  // outside the slice
                }
                auto r1 = torch::empty({m, 37}), r2 = torch::empty({m, 5}), r3 = residual.clone();
                rlpt::kernels::small_matmul_into_reference(x, {{w1, {}, r1}, {w2, b2, r2}, {w3, {}, r3, true}});
                // Each element a float32 dot product (the residual one more term) against the exact
                // reference rounded once (tests/unit/test_tolerance.h).
                const double u = rlpt::tol::kUnitRoundoffFp32;
                const auto within = [&](const torch::Tensor& y, const torch::Tensor& r, const torch::Tensor& bound) {
                    return ((y - r).abs().to(torch::kDouble) <= bound + u * r.abs().to(torch::kDouble))
                        .all()
                        .item<bool>();
                };
                EXPECT_TRUE(within(y1, r1, rlpt::tol::matmul_error_bound(x, w1)));
                EXPECT_TRUE(within(y2, r2, rlpt::tol::matmul_error_bound(x, w2, b2)));
                EXPECT_TRUE(within(y3, r3, rlpt::tol::matmul_error_bound(x, w3, residual) * (1 + u)));
            }
        }
    }
    torch::set_num_threads(saved);
}

TEST(SmallMatmulInto, Errors) {
    auto x = torch::randn({2, 8}), w = torch::randn({4, 8});
    expect_value_error([&] { rlpt::kernels::small_matmul_into(x, {}); }, "no targets");
    expect_value_error([&] { rlpt::kernels::small_matmul_into(x, {{w, {}, torch::empty({2, 5})}}); }, "out must be");
    expect_value_error(
        [&] {
            rlpt::kernels::small_matmul_into(x, {{torch::randn({4, 7}), {}, torch::empty({2, 4})}});
        },
        "target 0 needs w");
    expect_value_error(
        [&] {
            rlpt::kernels::small_matmul_into(x, {{w, torch::randn({3}), torch::empty({2, 4})}});
        },
        "bias must be [4]");
    expect_value_error(
        [&] {
            rlpt::kernels::small_matmul_into(x.to(torch::kDouble), {{w, {}, torch::empty({2, 4})}});
        },
        "float32");
    expect_value_error(
        [&] {
            rlpt::kernels::small_matmul_into(x, {{w.t().contiguous().t(), {}, torch::empty({2, 4})}});
        },
        "contiguous");
}

}  // namespace
