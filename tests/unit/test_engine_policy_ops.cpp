// policy_ops against plain-torch formulas: log-probs / entropy (+ gradients), values, sequence
// scores, SFT token NLL.
#include <gtest/gtest.h>

#include "rlpt/core/error.h"
#include "rlpt/model/value_model.h"
#include "test_engine_helpers.h"
#include "test_tolerance.h"

namespace rlpt::engine {
namespace {

struct Plain {
    torch::Tensor logp, entropy;
};

// log_softmax(logits / T) gathered at the response tokens, from the model's full-vocabulary
// logits: the textbook formula the fused path must reproduce.
Plain plain_log_probs(model::CausalLM& m, const SequenceBatch& s, double temperature) {
    const int64_t t = s.input_ids.size(1), r = s.response_length, p = t - r;
    auto logits = m.forward_logits(s.input_ids, s.attention_mask, s.position_ids);
    auto lsm = (logits.narrow(1, p - 1, r) / temperature).log_softmax(-1);
    Plain out;
    out.logp = lsm.gather(2, s.input_ids.narrow(1, p, r).unsqueeze(-1)).squeeze(-1);
    out.entropy = -(lsm.exp() * lsm).sum(-1);
    return out;
}

// The fused head and the textbook formula are two fp32 computations of the same model: forwards
// agree to fp32_order_bound of the terms along a log-prob's path, gradients of that path and back
// plus every token summed into a weight gradient, relative to max(1, max|ref|)
// (tests/unit/test_tolerance.h).
double forward_bound(int64_t seq_len) {
    return rlpt::tol::fp32_order_bound(rlpt::tol::transformer_logit_terms(testing::tiny_args(), seq_len));
}
double grad_bound(int64_t seq_len, int64_t tokens) {
    return rlpt::tol::fp32_order_bound(rlpt::tol::transformer_grad_terms(testing::tiny_args(), seq_len, tokens));
}

std::vector<torch::Tensor> grads_of(torch::nn::Module& m) {
    std::vector<torch::Tensor> g;
    for (auto& p : m.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    return g;
}

TEST(PolicyOps, LogProbsAndEntropyMatchPlainTorchWithGradients) {
    auto m = model::make_random_causal_lm(testing::tiny_args(), 5);
    auto s = testing::make_sequences(4, 5, 6, 20, 3);
    auto w = torch::randn({4, 6}), u = torch::randn({4, 6});
    for (double temperature : {1.0, 0.6}) {
        auto ours = compute_log_probs(*m, s, temperature, true);
        ASSERT_EQ(ours.log_probs.sizes(), torch::IntArrayRef({4, 6}));
        ASSERT_EQ(ours.entropy.scalar_type(), torch::kFloat32);
        m->zero_grad(true);
        ((ours.log_probs * w).sum() + (ours.entropy * u).sum()).backward();
        auto g_ours = grads_of(*m);

        auto ref = plain_log_probs(*m, s, temperature);
        const int64_t t = s.input_ids.size(1);
        EXPECT_LT(rlpt::tol::max_abs_diff(ours.log_probs, ref.logp), forward_bound(t) * rlpt::tol::scale_of(ref.logp))
            << temperature;
        EXPECT_LT(rlpt::tol::max_abs_diff(ours.entropy, ref.entropy),
                  forward_bound(t) * rlpt::tol::scale_of(ref.entropy))
            << temperature;
        m->zero_grad(true);
        ((ref.logp * w).sum() + (ref.entropy * u).sum()).backward();
        auto g_ref = grads_of(*m);
        for (size_t i = 0; i < g_ref.size(); ++i)
            EXPECT_LT(rlpt::tol::max_abs_diff(g_ours[i], g_ref[i]),
                      grad_bound(t, s.input_ids.numel()) * rlpt::tol::scale_of(g_ref[i]))
                << i;
    }
    // Without entropy: undefined entropy, same log-probs; under NoGradGuard no graph.
    torch::NoGradGuard ng;
    auto lp = compute_log_probs(*m, s, 1.0, false);
    EXPECT_FALSE(lp.entropy.defined());
    EXPECT_FALSE(lp.log_probs.requires_grad());
}

TEST(PolicyOps, Bf16ModelUsesAnFp32Head) {
    auto m = model::make_random_causal_lm(testing::tiny_args(), 5, torch::kBFloat16);
    auto s = testing::make_sequences(3, 4, 5, 20, 9);
    torch::NoGradGuard ng;
    auto ours = compute_log_probs(*m, s, 1.0, false).log_probs;
    EXPECT_EQ(ours.scalar_type(), torch::kFloat32);
    auto hidden = m->forward_hidden(s.input_ids, s.attention_mask, s.position_ids).narrow(1, 3, 5);
    auto logits = torch::matmul(hidden.to(torch::kFloat32), m->lm_head_weight().to(torch::kFloat32).t());
    auto ref = logits.log_softmax(-1).gather(2, s.input_ids.narrow(1, 4, 5).unsqueeze(-1)).squeeze(-1);
    // Both heads read the same bf16 hidden states and weights in fp32: the LM head's hidden-size dot
    // products and the log-softmax over the vocabulary, in two orders.
    const auto a = testing::tiny_args();
    EXPECT_LT(rlpt::tol::max_abs_diff(ours, ref),
              rlpt::tol::fp32_order_bound(a.hidden_size + a.vocab_size + 4) * (1 + logits.abs().max().item<double>()));
}

TEST(PolicyOps, ValuesAreTheHeadAtThePredictingPositions) {
    auto policy = model::make_random_causal_lm(testing::tiny_args(), 5);
    auto vm = model::value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, model::ValueHeadInit::kNormal, 3);
    auto s = testing::make_sequences(3, 4, 5, 20, 1);
    torch::NoGradGuard ng;
    auto v = compute_values(*vm, s);
    ASSERT_EQ(v.sizes(), torch::IntArrayRef({3, 5}));
    auto all = vm->forward_values(s.input_ids, s.attention_mask, s.position_ids);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t t = 0; t < 5; ++t) EXPECT_EQ(v[i][t].item<float>(), all[i][4 + t - 1].item<float>()) << i << t;
    // A head of weight 0 and bias 0.5 predicts 0.5 everywhere.
    vm->score_weight().zero_();
    vm->score_bias().fill_(0.5);
    EXPECT_TRUE(torch::equal(compute_values(*vm, s), torch::full({3, 5}, 0.5f)));
}

TEST(PolicyOps, SequenceScoresTakeEachRowsLastRealToken) {
    auto policy = model::make_random_causal_lm(testing::tiny_args(), 5);
    auto vm = model::value_model_from_policy(*policy, torch::kFloat32, torch::kCPU, model::ValueHeadInit::kNormal, 3);
    SequenceBatch s;
    s.attention_mask = torch::tensor({{0, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 0, 0, 0, 0}});
    s.input_ids = torch::randint(1, 20, {3, 7}) * s.attention_mask;
    s.position_ids = (s.attention_mask.cumsum(1) - 1).clamp_min(0);
    s.response_length = 3;
    torch::NoGradGuard ng;
    auto scores = compute_sequence_scores(*vm, s);
    auto all = vm->forward_values(s.input_ids, s.attention_mask, s.position_ids);
    ASSERT_EQ(scores.sizes(), torch::IntArrayRef({3}));
    EXPECT_EQ(scores[0].item<float>(), all[0][4].item<float>());
    EXPECT_EQ(scores[1].item<float>(), all[1][6].item<float>());
    EXPECT_EQ(scores[2].item<float>(), all[2][2].item<float>());
    s.attention_mask[2].zero_();
    EXPECT_THROW(compute_sequence_scores(*vm, s), ValueError);
}

TEST(PolicyOps, SftNllSumMatchesTheTokenByTokenFormula) {
    auto m = model::make_random_causal_lm(testing::tiny_args(), 8);
    auto s = testing::make_sequences(3, 3, 5, 20, 4);
    auto loss_mask = torch::zeros({3, 8}, torch::kInt64);
    loss_mask[0].narrow(0, 3, 5).fill_(1);
    loss_mask[1].narrow(0, 4, 2).fill_(1);
    loss_mask[2][7] = 1;
    loss_mask = loss_mask * s.attention_mask;
    auto ours = sft_token_nll_sum(*m, s.input_ids, s.attention_mask, s.position_ids, loss_mask);
    EXPECT_EQ(ours.dim(), 0);
    m->zero_grad(true);
    ours.backward();
    auto g_ours = grads_of(*m);

    auto lsm = m->forward_logits(s.input_ids, s.attention_mask, s.position_ids).log_softmax(-1);
    torch::Tensor ref = torch::zeros({});
    int64_t count = 0;
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t t = 1; t < 8; ++t)
            if (loss_mask[i][t].item<int64_t>() != 0) {
                ref = ref - lsm[i][t - 1][s.input_ids[i][t].item<int64_t>()];
                ++count;
            }
    ASSERT_GT(count, 3);
    // A sum of `count` positive NLL terms, each a log-prob (forward_bound of its magnitude).
    EXPECT_NEAR(ours.item<double>(), ref.item<double>(),
                (forward_bound(8) + rlpt::tol::fp32_order_bound(count)) * std::max(1.0, std::abs(ref.item<double>())));
    m->zero_grad(true);
    ref.backward();
    auto g_ref = grads_of(*m);
    for (size_t i = 0; i < g_ref.size(); ++i)
        EXPECT_LT(rlpt::tol::max_abs_diff(g_ours[i], g_ref[i]), grad_bound(8, count) * rlpt::tol::scale_of(g_ref[i]))
            << i;

    // Nothing selected: an exact zero that still backpropagates (zero gradients).
    auto none = sft_token_nll_sum(*m, s.input_ids, s.attention_mask, s.position_ids, torch::zeros_like(loss_mask));
    EXPECT_EQ(none.item<double>(), 0.0);
    m->zero_grad(true);
    none.backward();
}

TEST(PolicyOps, BadShapesAreValueErrors) {
    auto m = model::make_random_causal_lm(testing::tiny_args(), 5);
    auto s = testing::make_sequences(2, 3, 4, 20, 1);
    auto bad = s;
    bad.response_length = 7;  // no prompt position left to predict the first response token
    EXPECT_THROW(compute_log_probs(*m, bad, 1.0, false), ValueError);
    bad.response_length = 0;
    EXPECT_THROW(compute_log_probs(*m, bad, 1.0, false), ValueError);
    bad = s;
    bad.attention_mask = s.attention_mask.narrow(1, 0, 5);
    EXPECT_THROW(compute_log_probs(*m, bad, 1.0, false), ValueError);
    EXPECT_THROW(compute_log_probs(*m, s, 0.0, false), ValueError);  // temperature must be > 0
    auto lm = torch::zeros({2, 7}, torch::kInt64);
    lm[0][0] = 1;  // position 0 has no prefix
    EXPECT_THROW(sft_token_nll_sum(*m, s.input_ids, s.attention_mask, s.position_ids, lm), ValueError);
    EXPECT_THROW(sft_token_nll_sum(*m, s.input_ids, s.attention_mask, s.position_ids, lm.narrow(1, 0, 6)), ValueError);
}

}  // namespace
}  // namespace rlpt::engine
