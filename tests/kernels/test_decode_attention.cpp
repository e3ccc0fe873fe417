// Decode attention (rlpt/kernels/decode_attention.h) against its double-precision reference
// and the LibTorch expression it replaces, on odd shapes, cache views, bfloat16 and masks.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rlpt/core/error.h"
#include "rlpt/kernels/decode_attention.h"
#include "../unit/test_tolerance.h"

namespace {

using rlpt::kernels::decode_attention;
using rlpt::kernels::decode_attention_reference;
using rlpt::kernels::decode_attention_slots;
using rlpt::kernels::decode_attention_slots_reference;

// The model's pre-kernel expression: fp32 scores, lowest() on masked keys, softmax, matmul.
torch::Tensor torch_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& masked, double scale) {
    auto scores = torch::matmul(q, k.transpose(2, 3)).to(torch::kFloat32) * scale;
    scores.masked_fill_(masked.view({masked.size(0), 1, 1, masked.size(1)}), std::numeric_limits<float>::lowest());
    return torch::matmul(torch::softmax(scores, -1).to(q.scalar_type()), v);
}

// Two computations of softmax(scale·q·kᵀ, masked)·v with float32 arithmetic, per output element
// (tests/unit/test_tolerance.h): each score is an hd-term dot product, within
// e_j = γ_{hd+1}(u32)·scale·|q|·|k_j| of exact; scores off by e move each probability by at most
// 2·max e relative (Δp_j = p_j·(Δs_j − Σ_i p_i·Δs_i)); the softmax's own exp (<= 1 ulp), sum of
// S terms and division, and the output's sum over the S keys, γ_{2S+4}; `p_roundings` more if the
// probabilities are rounded (to bfloat16: LibTorch's expression does); all relative to
// Σ_j p_j·|v_j|. Each side's rounding of the output to its type adds u_out of its magnitude.
void expect_attention_close(const torch::Tensor& got, const torch::Tensor& want, const torch::Tensor& q,
                            const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& masked, double scale,
                            double p_rounding = 0) {
    const double u32 = rlpt::tol::kUnitRoundoffFp32;
    const int64_t hd = q.size(-1), s = k.size(2);
    const auto q64 = q.to(torch::kDouble), k64 = k.to(torch::kDouble);
    const auto key_masked = masked.view({masked.size(0), 1, 1, masked.size(1)});
    auto scores = torch::matmul(q64, k64.transpose(2, 3)) * scale;
    scores.masked_fill_(key_masked, std::numeric_limits<float>::lowest());
    const auto p = torch::softmax(scores, -1);
    const auto score_err = torch::matmul(q64.abs(), k64.abs().transpose(2, 3)).masked_fill(key_masked, 0) *
                           (scale * rlpt::tol::gamma(hd + 1, u32));
    const auto rel = 2 * std::get<0>(score_err.max(-1, true)) + rlpt::tol::gamma(2 * s + 4, u32) + p_rounding;
    const auto bound = rel * torch::matmul(p, v.to(torch::kDouble).abs());
    auto g = got.to(torch::kDouble), w = want.to(torch::kDouble);
    const double u_out = rlpt::tol::unit_roundoff(want.scalar_type());
    EXPECT_LE(((g - w).abs() - bound - u_out * (g.abs() + w.abs())).max().item<double>(), 0.0)
        << "max |diff| " << (g - w).abs().max().item<double>();
}

TEST(DecodeAttention, MatchesReferenceOnOddShapesAndCacheViews) {
    torch::manual_seed(11);
    for (int64_t b : {1, 3}) {
        for (int64_t nkv : {1, 2}) {
            for (int64_t g : {1, 3}) {
                for (int64_t s : {1, 5, 33}) {
                    for (int64_t hd : {7, 16, 64}) {
                        SCOPED_TRACE(testing::Message()
                                     << "b " << b << " nkv " << nkv << " g " << g << " s " << s << " hd " << hd);
                        // K/V as KVCache::store returns them: narrowed from a longer buffer.
                        auto kbuf = torch::randn({b, nkv, s + 4, hd}), vbuf = torch::randn({b, nkv, s + 4, hd});
                        auto k = kbuf.narrow(2, 0, s), v = vbuf.narrow(2, 0, s);
                        auto q = torch::randn({b, nkv, g, hd});
                        auto masked = torch::rand({b, s}) < 0.3;
                        masked.select(1, s - 1).fill_(false);  // the new position always sees itself
                        const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
                        auto want = decode_attention_reference(q, k, v, masked, scale);
                        auto got = decode_attention(q, k, v, masked, scale);
                        expect_attention_close(got, want, q, k, v, masked, scale);
                        expect_attention_close(torch_attention(q, k, v, masked, scale), want, q, k, v, masked, scale);
                    }
                }
            }
        }
    }
}

TEST(DecodeAttention, BFloat16AndFullyMaskedRows) {
    torch::manual_seed(12);
    auto q = torch::randn({2, 2, 3, 32}).to(torch::kBFloat16);
    auto k = torch::randn({2, 2, 9, 32}).to(torch::kBFloat16), v = torch::randn({2, 2, 9, 32}).to(torch::kBFloat16);
    auto masked = torch::zeros({2, 9}, torch::kBool);
    masked[0].narrow(0, 0, 4).fill_(true);
    auto got = decode_attention(q, k, v, masked, 0.17);
    ASSERT_EQ(got.scalar_type(), torch::kBFloat16);
    const auto want = decode_attention_reference(q, k, v, masked, 0.17);
    expect_attention_close(got, want, q, k, v, masked, 0.17);
    expect_attention_close(torch_attention(q, k, v, masked, 0.17), want, q, k, v, masked, 0.17,
                           rlpt::tol::kUnitRoundoffBf16);
    // Every key masked: the uniform average of v, as softmax over equal scores gives.
    auto qf = torch::randn({1, 1, 2, 8}), kf = torch::randn({1, 1, 4, 8}), vf = torch::randn({1, 1, 4, 8});
    auto all = torch::ones({1, 4}, torch::kBool);
    expect_attention_close(decode_attention(qf, kf, vf, all, 1.0), vf.mean(2, true).expand({1, 1, 2, 8}), qf, kf, vf,
                           all, 1.0);
}

TEST(DecodeAttention, Errors) {
    auto q = torch::randn({1, 2, 3, 8}), k = torch::randn({1, 2, 5, 8});
    auto mask = torch::zeros({1, 5}, torch::kBool);
    EXPECT_THROW(decode_attention(q, k, torch::randn({1, 2, 4, 8}), mask, 1.0), rlpt::ValueError);
    EXPECT_THROW(decode_attention(q, k, k, torch::zeros({1, 4}, torch::kBool), 1.0), rlpt::ValueError);
    EXPECT_THROW(decode_attention(q, k, k, mask.to(torch::kInt64), 1.0), rlpt::ValueError);
    EXPECT_THROW(decode_attention(q.to(torch::kDouble), k, k, mask, 1.0), rlpt::ValueError);
}

TEST(DecodeAttention, SlotsReadTheirOwnSlotAndLength) {
    // Rows of q read cache rows slots[b] over lengths[b] keys: the same as decode_attention on
    // the gathered slots with the keys past each length masked.
    torch::manual_seed(13);
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        for (int64_t hd : {7, 32}) {
            SCOPED_TRACE(testing::Message() << c10::toString(dtype) << " hd " << hd);
            const int64_t n = 5, t = 12, nkv = 2, g = 3;
            auto kbuf = torch::randn({n, nkv, t, hd}).to(dtype), vbuf = torch::randn({n, nkv, t, hd}).to(dtype);
            auto q = torch::randn({4, nkv, g, hd}).to(dtype);
            auto slots = torch::tensor({3, 0, 4, 1}, torch::kInt64);
            auto lengths = torch::tensor({1, 12, 7, 3}, torch::kInt64);
            const double scale = 0.3;
            auto got = decode_attention_slots(q, kbuf, vbuf, slots, lengths, scale);
            auto want = decode_attention_slots_reference(q, kbuf, vbuf, slots, lengths, scale);
            auto k = kbuf.index_select(0, slots), v = vbuf.index_select(0, slots);
            auto masked = torch::arange(t).unsqueeze(0) >= lengths.unsqueeze(1);
            expect_attention_close(got, want, q, k, v, masked, scale);
            expect_attention_close(got, decode_attention_reference(q, k, v, masked, scale), q, k, v, masked, scale);
            // Garbage past a slot's length is never read.
            auto poisoned = kbuf.clone();
            poisoned[3].narrow(1, 1, t - 1).fill_(std::numeric_limits<float>::quiet_NaN());
            EXPECT_TRUE(torch::equal(decode_attention_slots(q, poisoned, vbuf, slots, lengths, scale), got));
        }
    }
    auto q = torch::randn({1, 1, 1, 8}), k = torch::randn({2, 1, 4, 8});
    EXPECT_THROW(decode_attention_slots(q, k, k, torch::tensor({2}, torch::kInt64), torch::tensor({1}, torch::kInt64),
                                        1.0),
                 rlpt::ValueError);
    EXPECT_THROW(decode_attention_slots(q, k, k, torch::tensor({0}, torch::kInt64), torch::tensor({5}, torch::kInt64),
                                        1.0),
                 rlpt::ValueError);
    EXPECT_THROW(decode_attention_slots(q, k, k, torch::tensor({0}, torch::kInt64), torch::tensor({0}, torch::kInt64),
                                        1.0),
                 rlpt::ValueError);
}

}  // namespace
