// Few-row matmul (rlpt/kernels/small_matmul.h): every instruction-set variant this CPU has
// against the plain double-precision reference, for odd shapes (M 1..17, K not a multiple of
// any vector width, N odd), with and without bias, strided x, bfloat16; batch invariance; when
// the decode path applies; errors.

#include <gtest/gtest.h>

#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/kernels/small_matmul.h"
#include "../unit/test_tolerance.h"

namespace {

using rlpt::kernels::small_matmul;
using rlpt::kernels::small_matmul_applies;
using rlpt::kernels::small_matmul_reference;
using rlpt::kernels::SmallMatmulIsa;

std::vector<SmallMatmulIsa> isas() {
    std::vector<SmallMatmulIsa> out;
    for (auto isa : {SmallMatmulIsa::kAuto, SmallMatmulIsa::kAvx512, SmallMatmulIsa::kAvx2, SmallMatmulIsa::kPortable})
        if (rlpt::kernels::small_matmul_isa_supported(isa)) out.push_back(isa);
    return out;
}

// got and want both compute x·wᵀ + b (x [..., K], w [N, K]): a float32 accumulation of the K
// products and the bias, in any order (every instruction set, every BLAS), is within
// γ_{K+1}(u32)·Σ|terms| of the exact value, and each side's rounding to the output type adds
// u_out of its magnitude (the double reference is exact to far below that, then rounded).
void expect_matmul_close(const torch::Tensor& got, const torch::Tensor& want, const torch::Tensor& x,
                         const torch::Tensor& w, const torch::Tensor& b) {
    ASSERT_EQ(got.sizes(), want.sizes());
    ASSERT_EQ(got.scalar_type(), want.scalar_type());
    auto g = got.to(torch::kDouble), r = want.to(torch::kDouble);
    const auto bound =
        rlpt::tol::matmul_error_bound(x, w, b) + rlpt::tol::unit_roundoff(want.scalar_type()) * (g.abs() + r.abs());
    EXPECT_LE(((g - r).abs() - bound).max().item<double>(), 0.0) << "max |diff| " << (g - r).abs().max().item<double>();
}

TEST(SmallMatmul, MatchesReferenceOnOddShapes) {
    torch::manual_seed(3);
    for (int64_t m = 1; m <= 17; ++m) {
        for (int64_t k : {1, 7, 16, 37, 100, 259}) {
            for (int64_t n : {1, 3, 5, 33}) {
                auto x = torch::randn({m, k}), w = torch::randn({n, k}), b = torch::randn({n});
                for (bool with_bias : {false, true}) {
                    const auto bias = with_bias ? b : torch::Tensor();
                    const auto want = small_matmul_reference(x, w, bias);
                    for (auto isa : isas()) {
                        SCOPED_TRACE(testing::Message() << "m " << m << " k " << k << " n " << n << " bias "
                                                        << with_bias << " isa " << static_cast<int>(isa));
                        expect_matmul_close(small_matmul(x, w, bias, isa), want, x, w, bias);
                    }
                }
            }
        }
    }
}

TEST(SmallMatmul, ReferenceAgreesWithTorchLinear) {
    torch::manual_seed(4);
    auto x = torch::randn({5, 3, 29}), w = torch::randn({11, 29}), b = torch::randn({11});
    expect_matmul_close(small_matmul_reference(x, w, b), torch::linear(x, w, b), x, w, b);
    expect_matmul_close(small_matmul_reference(x, w, {}), torch::linear(x, w), x, w, {});
}

TEST(SmallMatmul, LeadingDimsAndStridedInput) {
    torch::manual_seed(5);
    auto w = torch::randn({21, 40}), b = torch::randn({21});
    // [B, T, K] with T = 1, as decode feeds it.
    auto x3 = torch::randn({6, 1, 40});
    auto y3 = small_matmul(x3, w, b);
    EXPECT_EQ(y3.sizes(), (std::vector<int64_t>{6, 1, 21}));
    expect_matmul_close(y3, small_matmul_reference(x3, w, b), x3, w, b);
    // Rows with a stride larger than K (a column slice) and a transposed (non-row-major) x.
    auto wide = torch::randn({7, 64});
    auto sliced = wide.narrow(1, 8, 40);
    expect_matmul_close(small_matmul(sliced, w, b), small_matmul_reference(sliced.contiguous(), w, b), sliced, w, b);
    auto transposed = torch::randn({40, 7}).t();
    ASSERT_FALSE(transposed.is_contiguous());
    expect_matmul_close(small_matmul(transposed, w, b), small_matmul_reference(transposed.contiguous(), w, b),
                        transposed, w, b);
    // Nothing beyond y is written: y is fresh and exactly [M, N]; a 1-D x gives [N].
    EXPECT_EQ(small_matmul(torch::randn({40}), w, b).sizes(), (std::vector<int64_t>{21}));
    // K = 0: the bias alone.
    EXPECT_TRUE(torch::equal(small_matmul(torch::randn({2, 0}), torch::randn({3, 0}), b.narrow(0, 0, 3)),
                             b.narrow(0, 0, 3).expand({2, 3})));
}

TEST(SmallMatmul, BFloat16WeightsWidenedExactly) {
    torch::manual_seed(6);
    for (int64_t m : {1, 4, 9}) {
        auto x = torch::randn({m, 83}).to(torch::kBFloat16);
        auto w = torch::randn({19, 83}).to(torch::kBFloat16);
        auto b = torch::randn({19}).to(torch::kBFloat16);
        // The reference sums the exact products of the bf16 values in double; the kernels
        // accumulate them in fp32; one bf16 rounding of each result.
        const auto want = small_matmul_reference(x, w, b);
        ASSERT_EQ(want.scalar_type(), torch::kBFloat16);
        for (auto isa : isas()) expect_matmul_close(small_matmul(x, w, b, isa), want, x, w, b);
        expect_matmul_close(
            torch::linear(x.to(torch::kFloat), w.to(torch::kFloat), b.to(torch::kFloat)).to(torch::kBFloat16), want, x,
            w, b);
    }
}

TEST(SmallMatmul, RowResultDoesNotDependOnBatchOrThreads) {
    torch::manual_seed(7);
    auto w = torch::randn({301, 517}), b = torch::randn({301});
    auto x = torch::randn({16, 517});
    const int saved = torch::get_num_threads();
    torch::set_num_threads(1);
    const auto alone = small_matmul(x.narrow(0, 5, 1), w, b);
    torch::set_num_threads(2);
    for (int64_t m : {6, 9, 16}) {
        auto y = small_matmul(x.narrow(0, 0, m), w, b);
        EXPECT_TRUE(torch::equal(y.narrow(0, 5, 1), alone)) << "m " << m;
    }
    torch::set_num_threads(saved);
}

// The kernels' at::parallel_for really splits the work (it silently runs serially in a file
// compiled without OpenMP, which the thread-invariance test above would not notice).
TEST(SmallMatmul, ParallelForUsesLibTorchThreads) {
    const int saved = torch::get_num_threads();
    torch::set_num_threads(1);
    EXPECT_EQ(rlpt::kernels::decode_kernel_threads(), 1);
    torch::set_num_threads(2);
    EXPECT_EQ(rlpt::kernels::decode_kernel_threads(), 2);
    torch::set_num_threads(saved);
}

TEST(SmallMatmul, AppliesOnlyToFewRowsWithoutGrad) {
    auto w = torch::randn({8, 12}, torch::requires_grad());
    auto x = torch::randn({4, 1, 12});
    EXPECT_FALSE(small_matmul_applies(x, w, {}));  // grad mode on, w requires grad
    {
        torch::NoGradGuard ng;
        EXPECT_TRUE(small_matmul_applies(x, w, {}));
        EXPECT_TRUE(small_matmul_applies(torch::randn({16, 12}), w, {}));
        EXPECT_FALSE(small_matmul_applies(torch::randn({17, 12}), w, {}));  // prefill / training
        EXPECT_FALSE(small_matmul_applies(torch::randn({4, 12}).to(torch::kDouble), w, {}));
        EXPECT_FALSE(small_matmul_applies(x, w.detach().t().contiguous().t(), {}));  // strided weight
        EXPECT_FALSE(small_matmul_applies(torch::randn({4, 11}), w, {}));
        const auto wb = w.detach().to(torch::kBFloat16);
        EXPECT_TRUE(small_matmul_applies(torch::randn({4, 12}).to(torch::kBFloat16), wb, {}));
        EXPECT_FALSE(small_matmul_applies(torch::randn({4, 12}), wb, {}));  // mixed dtypes
    }
    EXPECT_TRUE(small_matmul_applies(x, w.detach(), {}));  // nothing requires grad
}

TEST(SmallMatmul, Errors) {
    auto w = torch::randn({8, 12});
    auto expect_value_error = [](auto&& f, const char* needle) {
        try {
            f();
            ADD_FAILURE() << "no error; expected one mentioning " << needle;
        } catch (const rlpt::ValueError& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_value_error([&] { small_matmul(torch::randn({2, 11}), w, {}); }, "[N, K]");
    expect_value_error([&] { small_matmul(torch::randn({2, 12}).to(torch::kDouble), w, {}); }, "float32");
    expect_value_error([&] { small_matmul(torch::randn({2, 12}), w, torch::randn({7})); }, "bias must be [8]");
}

}  // namespace
