// Training attention through at::scaled_dot_product_attention (Backbone::use_sdpa_attention, the
// default) against the materialised fp32 scores and probabilities (the path before, HF eager):
// logits and every parameter gradient within derived rounding bounds, in float32 and bfloat16,
// with left and right padding (query rows that may see no key included); and the peak host memory
// of a training step at T = 1024, which no longer holds the [B, heads, T, T] probabilities of every
// layer.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "counting_allocator.h"
#include "rlpt/model/transformer.h"
#include "test_tolerance.h"

namespace rlpt::model {
namespace {

ModelArgs gqa_args(int64_t max_positions) {
    auto a = tiny_model_args(ModelFamily::kLlama, 61);
    a.num_attention_heads = 4;
    a.num_key_value_heads = 2;  // grouped-query: two query heads per KV head
    a.max_position_embeddings = max_positions;
    a.validate();
    return a;
}

// Rows of length t with `left` padding positions in front and `right` behind (a prompt's left
// padding, a response's right padding): ids in [1, V), mask, positions (clamp(cumsum − 1, 0)).
struct Padded {
    torch::Tensor ids, mask, pos;
};
Padded padded_rows(int64_t t, int64_t vocab, const std::vector<std::pair<int64_t, int64_t>>& pads) {
    const auto b = static_cast<int64_t>(pads.size());
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    auto ids = torch::randint(1, vocab, {b, t}, gen, torch::kInt64);
    auto mask = torch::ones({b, t}, torch::kInt64);
    for (int64_t i = 0; i < b; ++i) {
        const auto [left, right] = pads[static_cast<size_t>(i)];
        mask[i].narrow(0, 0, left).zero_();
        mask[i].narrow(0, t - right, right).zero_();
    }
    return {ids, mask, (mask.cumsum(1) - 1).clamp_min(0)};
}

// Logits [B, T, V] and the gradient of Σ w·log p(next token) over the real positions, w fixed.
struct Pass {
    torch::Tensor logits;
    std::vector<torch::Tensor> grads;
};
Pass train_pass(CausalLM& m, const Padded& in, bool sdpa) {
    m.backbone().use_sdpa_attention(sdpa);
    m.zero_grad();
    auto logits = m.forward_logits(in.ids, in.mask, in.pos);
    const int64_t t = in.ids.size(1);
    auto logp = torch::log_softmax(logits.narrow(1, 0, t - 1), -1)
                    .gather(-1, in.ids.narrow(1, 1, t - 1).unsqueeze(-1))
                    .squeeze(-1);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    auto w = torch::rand({logp.size(0), t - 1}, gen) *
             in.mask.narrow(1, 1, t - 1).mul(in.mask.narrow(1, 0, t - 1)).to(torch::kFloat32);
    (logp * w).sum().backward();
    Pass p{logits.detach(), {}};
    for (const auto& param : m.parameters()) p.grads.push_back(param.grad().detach().clone());
    return p;
}

const std::vector<std::pair<int64_t, int64_t>> kPads = {{0, 0}, {5, 0}, {0, 4}, {3, 2}};

TEST(Attention, SdpaMatchesMaterialisedFloat32) {
    // Two fp32 computations of the same logits that sum in other orders (the flash kernel's
    // blocked online softmax against scores, softmax and a matmul over S): within fp32_order_bound
    // of the terms along a logit's path, and of a gradient's path (backward and the sum over the
    // step's tokens), relative to max(1, max|ref|) (tests/unit/test_tolerance.h).
    const int64_t t = 24;
    const auto a = gqa_args(64);
    auto m = make_random_causal_lm(a, 3);
    const auto in = padded_rows(t, a.vocab_size, kPads);
    const auto ref = train_pass(*m, in, /*sdpa=*/false);
    const auto got = train_pass(*m, in, /*sdpa=*/true);
    // Every position, padding included: a query that may see no key (left padding) has uniform
    // weights on both paths, finite.
    EXPECT_TRUE(torch::isfinite(got.logits).all().item<bool>());
    const double logit_bound = tol::fp32_order_bound(tol::transformer_logit_terms(a, t));
    EXPECT_LE(tol::max_abs_diff(got.logits, ref.logits), logit_bound * tol::scale_of(ref.logits));
    EXPECT_GT(tol::max_abs_diff(got.logits, ref.logits), 0.0) << "the two paths should not be the same code";
    const int64_t tokens = in.mask.sum().item<int64_t>();
    const double grad_bound = tol::fp32_order_bound(tol::transformer_grad_terms(a, t, tokens));
    const auto names = m->named_parameters();
    for (size_t i = 0; i < ref.grads.size(); ++i) {
        EXPECT_LE(tol::max_abs_diff(got.grads[i], ref.grads[i]), grad_bound * tol::scale_of(ref.grads[i]))
            << names[i].key();
        EXPECT_GT(ref.grads[i].abs().max().item<float>(), 0.0f) << names[i].key() << " gets no gradient";
    }
}

TEST(Attention, SdpaMatchesMaterialisedBfloat16) {
    // bf16 takes SDPA on the CPU from 512 keys (attention_sdpa_applies). Two bf16 computations
    // through R roundings to bf16 each along a logit's path (transformer_bf16_roundings; a gradient:
    // 2R + 1): per element within bf16_path_bound(R), in RMS within rms_rounding_bound(R), relative
    // to max(1, max|ref|). The materialised path rounds the scores and the probabilities to bf16,
    // the flash kernel keeps them in fp32: both inside the R counted.
    const int64_t t = 512;
    const auto a = gqa_args(t);
    auto m = make_random_causal_lm(a, 3, torch::kBFloat16);
    const auto in = padded_rows(t, a.vocab_size, {{0, 0}, {37, 0}, {0, 100}, {200, 150}});
    const auto ref = train_pass(*m, in, /*sdpa=*/false);
    const auto got = train_pass(*m, in, /*sdpa=*/true);
    EXPECT_TRUE(torch::isfinite(got.logits).all().item<bool>());
    const int64_t r = tol::transformer_bf16_roundings(a.num_hidden_layers);
    const double u = tol::kUnitRoundoffBf16;
    const double s = tol::scale_of(ref.logits);
    EXPECT_LE(tol::max_abs_diff(got.logits, ref.logits), tol::bf16_path_bound(r) * s);
    EXPECT_LE(tol::rms_diff(got.logits, ref.logits), tol::rms_rounding_bound(r, u) * s);
    const auto names = m->named_parameters();
    for (size_t i = 0; i < ref.grads.size(); ++i) {
        const double gs = tol::scale_of(ref.grads[i]);
        EXPECT_LE(tol::max_abs_diff(got.grads[i], ref.grads[i]), tol::bf16_path_bound(2 * r + 1) * gs)
            << names[i].key();
        EXPECT_LE(tol::rms_diff(got.grads[i], ref.grads[i]), tol::rms_rounding_bound(2 * r + 1, u) * gs)
            << names[i].key() << " (RMS)";
    }
}

TEST(Attention, SdpaAppliesWhereItIsFaster) {
    EXPECT_TRUE(sdpa_attention_applies(torch::kFloat32, torch::kCPU, 16));
    EXPECT_FALSE(sdpa_attention_applies(torch::kBFloat16, torch::kCPU, 511));
    EXPECT_TRUE(sdpa_attention_applies(torch::kBFloat16, torch::kCPU, 512));
    EXPECT_TRUE(sdpa_attention_applies(torch::kBFloat16, torch::Device(torch::kCUDA, 0), 16));
}

// Peak host tensor bytes above the start over one training step's forward + backward.
int64_t step_peak_bytes(CausalLM& m, const Padded& in, bool sdpa) {
    m.backbone().use_sdpa_attention(sdpa);
    m.zero_grad();
    rlpt::testing::CountingCpuAllocator::Scope counting;
    {
        auto logits = m.forward_logits(in.ids, in.mask, in.pos);
        logits.logsumexp(-1).sum().backward();
    }
    return counting.peak_extra();
}

TEST(Attention, TrainingStepAtT1024NoLongerHoldsTheProbabilities) {
    // The materialised path keeps every layer's softmax output, fp32 [B, heads, T, T], for the
    // backward (a bf16 model also its bf16 copy, the probabilities' matmul operand). SDPA keeps
    // instead its output and log-sum-exp per layer ([B, heads, T, hd] in the model dtype and
    // [B, heads, T] fp32) and one additive mask [B, 1, T, T] in the model dtype for all layers. The
    // peak of a step must drop by at least the difference.
    const int64_t t = 1024, b = 1;
    const auto a = gqa_args(t);
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        auto m = make_random_causal_lm(a, 3, dtype);
        const auto in = padded_rows(t, a.vocab_size, {{40, 20}});
        (void)step_peak_bytes(*m, in, true);  // a warm-up step: one-time allocations outside the pair
        const int64_t before = step_peak_bytes(*m, in, /*sdpa=*/false);
        const int64_t after = step_peak_bytes(*m, in, /*sdpa=*/true);
        const int64_t elt = dtype == torch::kFloat32 ? 4 : 2, heads = a.num_attention_heads,
                      layers = a.num_hidden_layers;
        const int64_t probs = b * heads * t * t * 4;  // one layer's fp32 probabilities
        const int64_t kept = layers * (dtype == torch::kFloat32 ? probs : probs + probs / 2);
        const int64_t sdpa_keeps = layers * b * heads * t * (a.head_dim * elt + 4) + b * t * t * elt;
        std::printf("[ memory ] %s training step, %lld layers x %lld heads, B = %lld, T = %lld: peak %.1f MiB "
                    "materialised, %.1f MiB SDPA (%.1f MiB less; probabilities kept %.1f MiB, SDPA keeps %.1f MiB)\n",
                    c10::toString(dtype), static_cast<long long>(layers), static_cast<long long>(heads),
                    static_cast<long long>(b), static_cast<long long>(t), before / 1048576.0, after / 1048576.0,
                    (before - after) / 1048576.0, kept / 1048576.0, sdpa_keeps / 1048576.0);
        EXPECT_GE(before - after, kept - sdpa_keeps) << c10::toString(dtype);
        EXPECT_GT(kept, 4 * sdpa_keeps) << "the check needs probabilities well above what SDPA keeps";
    }
}

}  // namespace
}  // namespace rlpt::model
