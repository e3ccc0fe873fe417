// Sampling on the rollout engine (rollout/generator.h, engine.h): KV-cache decode against the
// full forward, layout, stopping, reproducibility across batchings, and sampled frequencies on a
// hand-built model.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <algorithm>
#include <set>

#include "rlpt/core/error.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sampler.h"
#include "unit/test_model_helpers.h"

namespace rlpt::rollout {
namespace {

using model::testing::expect_error;
using Prompts = std::vector<std::vector<int64_t>>;

constexpr int64_t kVocab = 24;

// A random tiny model whose next-token distributions are far from uniform (a larger init
// scale than HF's 0.02), so greedy choices have clear margins and EOS gets sampled.
std::shared_ptr<model::CausalLM> tiny_model(model::ModelFamily family = model::ModelFamily::kQwen2,
                                            torch::Dtype dtype = torch::kFloat32) {
    auto a = model::tiny_model_args(family, kVocab);
    a.initializer_range = 0.25;
    return model::make_random_causal_lm(a, 11, dtype);
}

Prompts some_prompts() {
    return {{3, 4, 5}, {6, 7, 8, 9, 10, 11, 12}, {13},         {14, 15, 3, 4, 5},
            {16, 17},  {18, 19, 20, 21, 22, 23}, {5, 5, 5, 5}, {7, 3}};
}

std::vector<uint64_t> seeds_for(size_t n, int64_t step = 0, uint64_t run = 99) {
    std::vector<uint64_t> s;
    for (size_t i = 0; i < n; ++i) s.push_back(sample_seed(run, step, static_cast<int64_t>(i)));
    return s;
}

SamplingParams sampled(int64_t max_new = 10) {
    SamplingParams p;
    p.temperature = 0.9;
    p.top_p = 0.95;
    p.top_k = 12;
    p.max_new_tokens = max_new;
    return p;
}

SamplingParams greedy(int64_t max_new = 10) {
    SamplingParams p;
    p.greedy = true;
    p.max_new_tokens = max_new;
    return p;
}

std::vector<int64_t> response_of(const GenerationOutput& o, int64_t i) {
    const int64_t len = o.response_mask[i].sum().item<int64_t>();
    auto r = o.responses[i].narrow(0, 0, len).contiguous();
    return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + len};
}

// log_softmax(logits / T) of the full forward over the generated sequences, gathered at the
// response tokens: [B, R] (0 on padding).
torch::Tensor full_forward_log_probs(model::CausalLM& m, const GenerationOutput& o, double temperature) {
    torch::NoGradGuard ng;
    auto logits = m.forward_logits(o.input_ids, o.attention_mask, o.position_ids);
    const int64_t p = o.prompts.size(1), r = o.responses.size(1);
    auto lp = torch::log_softmax(logits.narrow(1, p - 1, r).to(torch::kFloat32) / temperature, -1);
    return lp.gather(2, o.responses.unsqueeze(-1)).squeeze(-1) * o.response_mask;
}

void expect_same_generation(const GenerationOutput& a, const GenerationOutput& b, double atol = 2e-5) {
    ASSERT_TRUE(a.responses.sizes() == b.responses.sizes()) << a.responses.sizes() << " vs " << b.responses.sizes();
    EXPECT_TRUE(torch::equal(a.prompts, b.prompts));
    EXPECT_TRUE(torch::equal(a.responses, b.responses));
    EXPECT_TRUE(torch::equal(a.response_mask, b.response_mask));
    EXPECT_TRUE(torch::allclose(a.rollout_log_probs, b.rollout_log_probs, 0, atol))
        << (a.rollout_log_probs - b.rollout_log_probs).abs().max().item<double>();
    EXPECT_EQ(a.finish_reasons, b.finish_reasons);
}

TEST(RolloutGenerator, GreedyDecodeMatchesFullForward) {
    auto m = tiny_model();
    const auto prompts = some_prompts();
    for (double t : {0.0, 1.0, 0.7}) {
        auto p = greedy(12);
        p.temperature = t;
        auto out = generate(*m, prompts, seeds_for(prompts.size()), p, 3);
        auto ref = full_forward_log_probs(*m, out, t > 0 ? t : 1.0);
        EXPECT_TRUE(torch::allclose(out.rollout_log_probs, ref, 0, 2e-5))
            << "T=" << t << " max diff " << (out.rollout_log_probs - ref).abs().max().item<double>();
        // Every token is the argmax of the full forward's logits at its position.
        torch::NoGradGuard ng;
        auto logits = m->forward_logits(out.input_ids, out.attention_mask, out.position_ids);
        auto argmax = std::get<1>(logits.narrow(1, out.prompts.size(1) - 1, out.responses.size(1)).max(-1));
        EXPECT_TRUE(torch::equal(argmax * out.response_mask, out.responses * out.response_mask));
    }
}

TEST(RolloutGenerator, SampledDecodeWithEarlyStopsMatchesFullForward) {
    // Rows stop at different steps (four stop ids), so slots are freed and refilled
    // mid-generation; the log-probs of every row must still be those of the full forward.
    for (auto family : {model::ModelFamily::kQwen2, model::ModelFamily::kLlama}) {
        auto m = tiny_model(family);
        const auto prompts = some_prompts();
        auto p = sampled(16);
        p.eos_id = 4;
        p.stop_token_ids = {9, 13, 21};
        auto out = generate(*m, prompts, seeds_for(prompts.size()), p, 8);
        auto lens = out.response_mask.sum(1);
        EXPECT_LT(lens.min().item<int64_t>(), lens.max().item<int64_t>()) << "rows should finish at different steps";
        EXPECT_TRUE(torch::allclose(out.rollout_log_probs, full_forward_log_probs(*m, out, 0.9), 0, 2e-5));
    }
}

TEST(RolloutGenerator, BFloat16DecodeMatchesFullForward) {
    auto m = tiny_model(model::ModelFamily::kQwen2, torch::kBFloat16);
    const auto prompts = some_prompts();
    auto out = generate(*m, prompts, seeds_for(prompts.size()), greedy(8), 4);
    auto ref = full_forward_log_probs(*m, out, 1.0);
    // bf16 logits of magnitude ~10 carry ~0.05 of rounding, and the cached and full paths run
    // different matmul shapes: bound the worst token loosely and the mean tightly.
    auto diff = (out.rollout_log_probs - ref).abs();
    EXPECT_LT(diff.max().item<double>(), 0.15);
    EXPECT_LT(diff.sum().item<double>() / out.response_mask.sum().item<double>(), 0.02);
    EXPECT_EQ(out.rollout_log_probs.scalar_type(), torch::kFloat32);
}

TEST(RolloutGenerator, OutputLayout) {
    auto m = tiny_model();
    const Prompts prompts = {{3, 4, 5}, {6}, {7, 8}};
    auto p = sampled(6);
    p.pad_id = 1;
    p.stop_token_ids = {10, 11, 12, 14, 15};
    auto out = generate(*m, prompts, seeds_for(3), p);
    const int64_t r = out.responses.size(1);
    ASSERT_EQ(out.prompts.sizes(), (std::vector<int64_t>{3, 3}));
    EXPECT_TRUE(torch::equal(out.prompts, torch::tensor({3, 4, 5, 1, 1, 6, 1, 7, 8}).view({3, 3})));
    int64_t longest = 0;
    for (int64_t i = 0; i < 3; ++i) {
        const auto resp = response_of(out, i);
        longest = std::max<int64_t>(longest, static_cast<int64_t>(resp.size()));
        ASSERT_GE(resp.size(), 1u);
        // Right padding with pad_id and zero log-probs; the mask is a prefix of ones.
        for (int64_t j = 0; j < r; ++j) {
            const bool real = j < static_cast<int64_t>(resp.size());
            EXPECT_EQ(out.response_mask[i][j].item<int64_t>(), real ? 1 : 0);
            if (!real) {
                EXPECT_EQ(out.responses[i][j].item<int64_t>(), 1);
                EXPECT_EQ(out.rollout_log_probs[i][j].item<float>(), 0.0f);
            } else {
                EXPECT_LT(out.rollout_log_probs[i][j].item<float>(), 0.0f);
            }
        }
        const auto reason = out.finish_reasons[static_cast<size_t>(i)];
        if (reason == FinishReason::kStop) {
            EXPECT_TRUE(std::count(p.stop_token_ids.begin(), p.stop_token_ids.end(), resp.back()));
        } else {
            EXPECT_EQ(reason, FinishReason::kLength);
            EXPECT_EQ(resp.size(), 6u);
        }
    }
    EXPECT_EQ(r, longest);
    EXPECT_TRUE(torch::equal(out.input_ids, torch::cat({out.prompts, out.responses}, 1)));
    auto prompt_mask = torch::tensor({1, 1, 1, 0, 0, 1, 0, 1, 1}).view({3, 3});
    EXPECT_TRUE(torch::equal(out.attention_mask, torch::cat({prompt_mask, out.response_mask}, 1)));
    EXPECT_TRUE(torch::equal(out.position_ids, (out.attention_mask.cumsum(1) - 1).clamp_min(0)));
    // Row 1: prompt "6" at position 0, its response from position 1 on.
    EXPECT_EQ(out.position_ids[1][2].item<int64_t>(), 0);
    EXPECT_EQ(out.position_ids[1][3].item<int64_t>(), 1);
    for (const auto& t :
         {out.prompts, out.responses, out.input_ids, out.attention_mask, out.position_ids, out.response_mask})
        EXPECT_EQ(t.scalar_type(), torch::kInt64);
}

TEST(RolloutGenerator, GreedyIsDeterministic) {
    auto m = tiny_model();
    const auto prompts = some_prompts();
    auto a = generate(*m, prompts, seeds_for(prompts.size(), 0, 1), greedy(), 8);
    auto b = generate(*m, prompts, seeds_for(prompts.size(), 0, 2), greedy(), 8);  // seeds are unused
    expect_same_generation(a, b, 0);
}

TEST(RolloutGenerator, LeftPaddingDoesNotChangeResults) {
    auto m = tiny_model();
    const std::vector<int64_t> prompt = {16, 17};
    for (const auto& p : {greedy(10), sampled(10)}) {
        auto alone = generate(*m, {prompt}, {5}, p);
        // The same prompt (same seed) next to longer prompts: 5 and 8 columns of left padding.
        auto batched =
            generate(*m, {{3, 4, 5, 6, 7, 8, 9}, prompt, {10, 11, 12, 13, 14, 15, 16, 17, 18, 19}}, {1, 5, 2}, p, 8);
        EXPECT_EQ(response_of(alone, 0), response_of(batched, 1));
        const auto len = static_cast<int64_t>(response_of(alone, 0).size());
        EXPECT_TRUE(torch::allclose(alone.rollout_log_probs[0].narrow(0, 0, len),
                                    batched.rollout_log_probs[1].narrow(0, 0, len), 0, 2e-5));
        EXPECT_EQ(alone.finish_reasons[0], batched.finish_reasons[1]);
    }
}

TEST(RolloutGenerator, StopConditionsAndFinishReasons) {
    auto m = tiny_model();
    const Prompts prompts = {{3, 4, 5}};
    auto free_run = generate(*m, prompts, {0}, greedy(12));
    const auto seq = response_of(free_run, 0);
    ASSERT_EQ(seq.size(), 12u);
    EXPECT_EQ(free_run.finish_reasons[0], FinishReason::kLength);
    // Stop at the first occurrence of the token greedy emits at step 4.
    const int64_t tok = seq[4];
    const auto first = static_cast<size_t>(std::find(seq.begin(), seq.end(), tok) - seq.begin());
    const std::vector<int64_t> prefix(seq.begin(), seq.begin() + static_cast<long>(first) + 1);

    auto p = greedy(12);
    p.eos_id = tok;
    auto eos = generate(*m, prompts, {0}, p);
    EXPECT_EQ(response_of(eos, 0), prefix);  // the EOS token is kept
    EXPECT_EQ(eos.finish_reasons[0], FinishReason::kEos);
    EXPECT_EQ(eos.responses.size(1), static_cast<int64_t>(prefix.size()));

    p.eos_id = -1;
    p.stop_token_ids = {kVocab - 1, tok};
    auto stop = generate(*m, prompts, {0}, p);
    EXPECT_EQ(response_of(stop, 0), prefix);
    EXPECT_EQ(stop.finish_reasons[0], FinishReason::kStop);

    p.eos_id = tok;  // listed as both: EOS wins
    EXPECT_EQ(generate(*m, prompts, {0}, p).finish_reasons[0], FinishReason::kEos);

    // Length: exactly max_new_tokens, even when the last token would not stop.
    auto len = generate(*m, prompts, {0}, greedy(3));
    EXPECT_EQ(response_of(len, 0), std::vector<int64_t>(seq.begin(), seq.begin() + 3));
    EXPECT_EQ(len.finish_reasons[0], FinishReason::kLength);

    // EOS as the very first token, and a stop on the last allowed step, in one batch.
    auto q = greedy(static_cast<int64_t>(first) + 1);
    q.eos_id = tok;
    auto first_tok = generate(*m, prompts, {0}, greedy(1)).responses[0][0].item<int64_t>();
    q.stop_token_ids = {first_tok};
    if (first_tok != tok) {
        auto mixed = generate(*m, {prompts[0], {20, 21}}, {0, 0}, q);
        EXPECT_EQ(mixed.finish_reasons[0], FinishReason::kStop);
        EXPECT_EQ(response_of(mixed, 0).size(), 1u);
    }
}

TEST(RolloutGenerator, NSampleLayoutWithRepeatedPrompts) {
    auto m = tiny_model();
    const std::vector<int64_t> a = {3, 4}, b = {5, 6, 7};
    const Prompts prompts = {a, a, a, a, b, b, b, b};
    auto out = generate(*m, prompts, seeds_for(8, 3), sampled(8));
    for (int64_t i = 1; i < 4; ++i) EXPECT_TRUE(torch::equal(out.prompts[i], out.prompts[0]));
    for (int64_t i = 5; i < 8; ++i) EXPECT_TRUE(torch::equal(out.prompts[i], out.prompts[4]));
    // Different seeds give different samples of the same prompt.
    std::set<std::vector<int64_t>> distinct_a, distinct_b;
    for (int64_t i = 0; i < 4; ++i) distinct_a.insert(response_of(out, i));
    for (int64_t i = 4; i < 8; ++i) distinct_b.insert(response_of(out, i));
    EXPECT_GT(distinct_a.size(), 1u);
    EXPECT_GT(distinct_b.size(), 1u);
    // The same seed gives the same sample of the same prompt.
    auto again = generate(*m, {a, a}, {seeds_for(8, 3)[2], seeds_for(8, 3)[2]}, sampled(8));
    EXPECT_EQ(response_of(again, 0), response_of(out, 2));
    EXPECT_EQ(response_of(again, 1), response_of(out, 2));
}

TEST(RolloutGenerator, SamplesDoNotDependOnBatching) {
    auto m = tiny_model();
    auto prompts = some_prompts();
    const auto seeds = seeds_for(prompts.size(), 7);
    auto p = sampled(12);
    p.eos_id = 4;
    auto whole = generate(*m, prompts, seeds, p, 8);
    for (int64_t mbs : {1, 3, 256}) {
        SCOPED_TRACE(mbs);
        expect_same_generation(whole, generate(*m, prompts, seeds, p, mbs));
    }
    // Two halves (as two rollout ranks would produce them), concatenated.
    const Prompts first(prompts.begin(), prompts.begin() + 3), second(prompts.begin() + 3, prompts.end());
    auto h1 = generate(*m, first, {seeds.begin(), seeds.begin() + 3}, p, 2);
    auto h2 = generate(*m, second, {seeds.begin() + 3, seeds.end()}, p, 5);
    for (size_t i = 0; i < prompts.size(); ++i) {
        const auto& h = i < 3 ? h1 : h2;
        const int64_t j = i < 3 ? static_cast<int64_t>(i) : static_cast<int64_t>(i) - 3;
        EXPECT_EQ(response_of(whole, static_cast<int64_t>(i)), response_of(h, j)) << "row " << i;
        EXPECT_EQ(whole.finish_reasons[i], h.finish_reasons[static_cast<size_t>(j)]);
    }
}

TEST(RolloutGenerator, TopK1AndTinyTopPEqualGreedy) {
    auto m = tiny_model();
    const auto prompts = some_prompts();
    auto g = greedy(10);
    g.temperature = 0.8;
    auto ref = generate(*m, prompts, seeds_for(prompts.size()), g, 8);
    auto k1 = sampled(10);
    k1.temperature = 0.8;
    k1.top_k = 1;
    k1.top_p = 1.0;
    expect_same_generation(ref, generate(*m, prompts, seeds_for(prompts.size()), k1, 8), 1e-6);
    auto p0 = k1;
    p0.top_k = -1;
    p0.top_p = 1e-6;
    expect_same_generation(ref, generate(*m, prompts, seeds_for(prompts.size()), p0, 8), 1e-6);
}

// Every embedding row is the same vector and attention/MLP outputs are zero, so the logits are
// the same designed vector at every position: each step is an independent draw from one
// known distribution.
std::shared_ptr<model::CausalLM> fixed_distribution_model(const std::vector<float>& logits) {
    auto a = model::tiny_model_args(model::ModelFamily::kLlama, static_cast<int64_t>(logits.size()));
    auto m = std::make_shared<model::CausalLM>(a);
    torch::NoGradGuard ng;
    for (auto& p : m->named_parameters()) {
        const std::string& name = p.key();
        if (name.find("norm") != std::string::npos) p.value().fill_(1.0);
        else if (name == "model.embed_tokens.weight") p.value().fill_(1.0);
        else if (name == "lm_head.weight")
            p.value().copy_(torch::tensor(logits).unsqueeze(1).expand({-1, a.hidden_size}) / a.hidden_size);
        else p.value().zero_();
    }
    return m;
}

TEST(RolloutGenerator, SampledFrequenciesMatchTheDistribution) {
    const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f, 1.5f};
    auto m = fixed_distribution_model(logits);
    torch::Tensor z;
    {
        torch::NoGradGuard ng;
        auto x = torch::tensor({{0}}, torch::kInt64);
        z = m->forward_logits(x, torch::ones({1, 1}, torch::kInt64), torch::zeros({1, 1}, torch::kInt64))[0][0];
    }
    ASSERT_TRUE(torch::allclose(z, torch::tensor(logits), 0, 1e-5));
    const int64_t rows = 200, steps = 50;
    const Prompts prompts(rows, std::vector<int64_t>{0, 1});
    struct Case {
        double temperature, top_p;
        int64_t top_k;
        std::vector<int64_t> kept;  // tokens with nonzero filtered probability
    };
    // Ranks by logit: 2 (2.0), 5 (1.5), 0 (1.0), 4 (0.5), 1 (0.0), 3 (-1.0).
    for (const Case& c : {Case{0.8, 1.0, -1, {0, 1, 2, 3, 4, 5}}, Case{1.0, 1.0, 3, {2, 5, 0}},
                          Case{1.0, 0.7, -1, {2, 5, 0}}, Case{1.3, 0.6, 4, {2, 5}}}) {
        SCOPED_TRACE(c.temperature);
        SamplingParams p;
        p.temperature = c.temperature;
        p.top_p = c.top_p;
        p.top_k = c.top_k;
        p.max_new_tokens = steps;
        auto out = generate(*m, prompts, seeds_for(rows, 0, 17), p, 64);
        ASSERT_EQ(out.response_mask.sum().item<int64_t>(), rows * steps);
        auto full = torch::softmax(z / c.temperature, 0);
        auto idx = torch::tensor(c.kept, torch::kInt64);
        auto expected = torch::zeros_like(full);
        expected.index_put_({idx}, full.index_select(0, idx) / full.index_select(0, idx).sum());
        auto counts = torch::bincount(out.responses.flatten(), {}, static_cast<int64_t>(logits.size()));
        const double n = static_cast<double>(rows * steps);
        for (size_t v = 0; v < logits.size(); ++v) {
            const double q = expected[static_cast<int64_t>(v)].item<double>();
            const double f = counts[static_cast<int64_t>(v)].item<double>() / n;
            if (q == 0) {
                EXPECT_EQ(f, 0.0) << "token " << v << " is filtered out";
            } else {
                EXPECT_NEAR(f, q, 4.5 * std::sqrt(q * (1 - q) / n)) << "token " << v;
            }
        }
        // The reported log-probs are those of the unfiltered tempered distribution.
        auto lp = torch::log_softmax(z / c.temperature, 0).index_select(0, out.responses.flatten()).view({rows, steps});
        EXPECT_TRUE(torch::allclose(out.rollout_log_probs, lp, 0, 1e-5));
    }
}

TEST(RolloutGenerator, EmptyCallAndSingleToken) {
    auto m = tiny_model();
    auto none = generate(*m, {}, {}, sampled());
    EXPECT_EQ(none.input_ids.sizes(), (std::vector<int64_t>{0, 0}));
    EXPECT_TRUE(none.finish_reasons.empty());
    auto one = generate(*m, {{3}}, {1}, greedy(1));
    EXPECT_EQ(one.responses.sizes(), (std::vector<int64_t>{1, 1}));
    EXPECT_EQ(one.finish_reasons[0], FinishReason::kLength);
}

TEST(RolloutGenerator, Errors) {
    auto m = tiny_model();
    auto call = [&](const Prompts& prompts, const std::vector<uint64_t>& seeds, const SamplingParams& p,
                    int64_t mbs = 4) { return [&, prompts, seeds, p, mbs] { generate(*m, prompts, seeds, p, mbs); }; };
    expect_error<ValueError>(call({{3}, {}}, {1, 2}, greedy()), {"prompt 1 is empty"});
    expect_error<ValueError>(call({{3, kVocab}}, {1}, greedy()), {"prompt 0 token 1", "24", "[0, 24)"});
    expect_error<ValueError>(call({{3, -1}}, {1}, greedy()), {"prompt 0 token 1", "-1"});
    expect_error<ValueError>(call({{3}}, {1, 2}, greedy()), {"2 seeds for 1 prompts"});
    expect_error<ValueError>(call({{3}}, {1}, greedy(), 0), {"max_num_seqs", "0"});
    auto bad = [&](auto edit, std::vector<std::string> parts) {
        SamplingParams p = sampled();
        edit(p);
        expect_error<ValueError>(call({{3}}, {1}, p), parts);
    };
    bad([](SamplingParams& p) { p.temperature = 0; }, {"temperature", "> 0"});
    bad([](SamplingParams& p) { p.temperature = std::nan(""); }, {"temperature"});
    bad(
        [](SamplingParams& p) {
            p.greedy = true;
            p.temperature = -1;
        },
        {"temperature", ">= 0 with greedy"});
    bad([](SamplingParams& p) { p.top_p = 0; }, {"top_p", "(0, 1]"});
    bad([](SamplingParams& p) { p.top_p = 1.5; }, {"top_p", "1.5"});
    bad([](SamplingParams& p) { p.top_k = -2; }, {"top_k", "-2"});
    bad([](SamplingParams& p) { p.max_new_tokens = 0; }, {"max_new_tokens", "0"});
    bad([](SamplingParams& p) { p.pad_id = kVocab; }, {"pad_id", "24"});
    bad([](SamplingParams& p) { p.pad_id = -1; }, {"pad_id", "-1"});
    bad([](SamplingParams& p) { p.eos_id = kVocab; }, {"eos_id", "24"});
    bad([](SamplingParams& p) { p.eos_id = -2; }, {"eos_id", "-2"});
    bad([](SamplingParams& p) { p.stop_token_ids = {3, 99}; }, {"stop token id 99"});
    // Without a vocabulary only the vocabulary-free fields are checked.
    SamplingParams p = sampled();
    p.pad_id = 1000;
    EXPECT_NO_THROW(validate_sampling_params(p, 0));
    EXPECT_STREQ(finish_reason_name(FinishReason::kEos), "eos");
    EXPECT_STREQ(finish_reason_name(FinishReason::kStop), "stop");
    EXPECT_STREQ(finish_reason_name(FinishReason::kLength), "length");
}

TEST(RolloutGenerator, DecodeKernelsMatchTheBlasPath) {
    // CausalLM::use_decode_kernels(false) sends decode matmuls through torch::linear and the
    // attention through matmul + softmax. fp32: the same sampled tokens and log-probs within
    // summation-order noise, with micro-batches of 1, 3 and 8 rows (the matmul limit is 16).
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
        auto m = tiny_model(model::ModelFamily::kLlama, dtype);
        const auto prompts = some_prompts();
        for (int64_t mbs : {1, 3, 8}) {
            SCOPED_TRACE(testing::Message() << c10::toString(dtype) << " micro-batch " << mbs);
            if (dtype == torch::kFloat32) {
                auto p = sampled(10);
                m->use_decode_kernels(true);
                auto fast = generate(*m, prompts, seeds_for(prompts.size()), p, mbs);
                m->use_decode_kernels(false);
                auto blas = generate(*m, prompts, seeds_for(prompts.size()), p, mbs);
                m->use_decode_kernels(true);
                expect_same_generation(fast, blas, 2e-5);
            } else {
                // bf16: the kernels keep attention probabilities in fp32 where LibTorch rounds
                // them to bf16, so sequences may part ways; each must match its own full
                // forward as tightly as BFloat16DecodeMatchesFullForward requires.
                auto out = generate(*m, prompts, seeds_for(prompts.size()), greedy(8), mbs);
                auto diff = (out.rollout_log_probs - full_forward_log_probs(*m, out, 1.0)).abs();
                EXPECT_LT(diff.max().item<double>(), 0.15);
                EXPECT_LT(diff.sum().item<double>() / out.response_mask.sum().item<double>(), 0.02);
            }
        }
    }
}

TEST(RolloutGenerator, FusedDecodeStepMatchesTheLayerForward) {
    // Backbone::use_fused_decode: the fused CPU decode step (DecoderLayer::decode_step: scratch
    // buffers in the cache, small_matmul_into, kernels/decode_ops.h, K/V rows copied into their
    // slots) against each layer's forward() with the same kernels: the same tokens, log-probs
    // within summation-order noise (RMSNorm's mean is summed in double there), for Llama (GQA),
    // Qwen2 (q/k/v biases) and Qwen3 (per-head q/k norms, with weights other than 1), at 1, 3, 24
    // (past small_matmul_applies' row limit) and 72 slots (past the fused step's kernel limit:
    // BLAS into the same buffers).
    Prompts prompts;
    for (int r = 0; r < 9; ++r)
        for (const auto& p : some_prompts()) prompts.push_back(p);
    for (auto family : {model::ModelFamily::kLlama, model::ModelFamily::kQwen2, model::ModelFamily::kQwen3}) {
        auto m = tiny_model(family);
        {
            torch::NoGradGuard ng;
            for (auto& p : m->named_parameters())
                if (p.key().find("q_norm") != std::string::npos || p.key().find("k_norm") != std::string::npos)
                    p.value().copy_(torch::linspace(0.5, 1.5, p.value().numel()));
        }
        for (int64_t slots : {1, 3, 24, 72}) {
            SCOPED_TRACE(testing::Message() << m->args().architecture() << " slots " << slots);
            const auto p = sampled(10);
            m->backbone().use_fused_decode(true);
            const int64_t before = m->backbone().fused_decode_steps();
            auto fused = generate(*m, prompts, seeds_for(prompts.size()), p, slots);
            EXPECT_GT(m->backbone().fused_decode_steps(), before);
            m->backbone().use_fused_decode(false);
            auto layered = generate(*m, prompts, seeds_for(prompts.size()), p, slots);
            // At 24 rows the layer forward's matmuls are BLAS, the fused step's the kernel (and
            // at 72 the reverse for the head): float32 summation-order noise, ~2e-5 on AVX2.
            expect_same_generation(fused, layered, 6e-5);
        }
        m->backbone().use_fused_decode(true);
    }
}

// Continuous batching (generator.h): prompts repeated n times (GRPO groups, consecutive as
// the rollout role sends them), rows of very different lengths (four stop ids), generated by
// the static engine (waves of max_num_seqs decoded until their last row ends, every sample
// prefilling its prompt) and by the continuous engine with shared prefixes at several slot
// counts: the same tokens, finish reasons and log-probs, in the caller's order.
Prompts grouped_prompts(int64_t n) {
    Prompts out;
    for (const auto& p : some_prompts())
        for (int64_t i = 0; i < n; ++i) out.push_back(p);
    return out;
}

BatchLimits limits(int64_t max_num_seqs, bool continuous, bool share) {
    BatchLimits l(max_num_seqs);
    l.continuous = continuous;
    l.share_prefixes = share;
    return l;
}

TEST(RolloutGenerator, ContinuousBatchingMatchesStaticAtAnyMaxNumSeqs) {
    auto m = tiny_model();
    const auto prompts = grouped_prompts(3);
    const auto seeds = seeds_for(prompts.size(), 5);
    auto s = sampled(14);
    s.eos_id = 4;
    s.stop_token_ids = {9, 13, 21};
    auto g = greedy(14);
    g.stop_token_ids = {9, 13, 21};
    for (const auto& p : {s, g}) {
        SCOPED_TRACE(p.greedy ? "greedy" : "sampled");
        auto ref = generate(*m, prompts, seeds, p, limits(256, false, false));
        auto lens = ref.response_mask.sum(1);
        ASSERT_LT(lens.min().item<int64_t>(), lens.max().item<int64_t>()) << "rows should finish at different steps";
        for (int64_t slots : {1, 2, 3, 5, 8, 64}) {
            SCOPED_TRACE(testing::Message() << "max_num_seqs " << slots);
            expect_same_generation(ref, generate(*m, prompts, seeds, p, limits(slots, true, true)));
            expect_same_generation(ref, generate(*m, prompts, seeds, p, limits(slots, false, false)));
        }
        // And the tokens are those of the full forward (the cache holds what it should).
        EXPECT_TRUE(
            torch::allclose(ref.rollout_log_probs, full_forward_log_probs(*m, ref, p.greedy ? 1.0 : 0.9), 0, 2e-5));
    }
}

TEST(RolloutGenerator, SharedPrefixesMatchSeparatePrefills) {
    // Groups of 4 identical prompts, interleaved with other prompts in the caller's order; slot
    // counts that split groups over admissions (a later sample copies a live slot's prompt, or
    // prefills again once every copy has finished).
    for (auto family : {model::ModelFamily::kQwen2, model::ModelFamily::kLlama}) {
        auto m = tiny_model(family);
        Prompts prompts;
        const auto base = some_prompts();
        for (int64_t rep = 0; rep < 4; ++rep)
            for (size_t i = 0; i < base.size(); i += 2) prompts.push_back(base[i]);
        prompts.push_back(base[1]);
        const auto seeds = seeds_for(prompts.size(), 2);
        auto p = sampled(12);
        p.eos_id = 4;
        p.stop_token_ids = {9, 13};
        for (int64_t slots : {1, 3, 6, 32}) {
            SCOPED_TRACE(testing::Message() << "max_num_seqs " << slots);
            expect_same_generation(generate(*m, prompts, seeds, p, limits(slots, true, false)),
                                   generate(*m, prompts, seeds, p, limits(slots, true, true)));
        }
    }
}

TEST(RolloutGenerator, TokenBudgetBoundsTheSlots) {
    auto m = tiny_model();
    const auto prompts = grouped_prompts(2);  // longest prompt 7 tokens
    const auto seeds = seeds_for(prompts.size(), 1);
    auto p = sampled(10);
    p.eos_id = 4;
    const auto ref = generate(*m, prompts, seeds, p);
    // 7 + 10 - 1 = 16 positions per sequence: 40 tokens give 2 slots, 16 give one.
    for (int64_t budget : {16, 40, 1000}) {
        BatchLimits l(8);
        l.max_num_batched_tokens = budget;
        expect_same_generation(ref, generate(*m, prompts, seeds, p, l));
    }
    BatchLimits small(8);
    small.max_num_batched_tokens = 15;
    expect_error<ValueError>([&] { generate(*m, prompts, seeds, p, small); },
                             {"rollout.max_num_batched_tokens = 15", "longest prompt (7 tokens)", "16"});
    small.max_num_batched_tokens = 0;
    expect_error<ValueError>([&] { generate(*m, prompts, seeds, p, small); }, {"rollout.max_num_batched_tokens", "0"});
    expect_error<ValueError>([&] { generate(*m, prompts, seeds, p, BatchLimits(0)); }, {"rollout.max_num_seqs", "0"});
}

// KVCache extend (the agent loop's prefix reuse): tokens appended after what slots already hold
// (prefilled and decoded positions), several slots at once with different prefix and chunk lengths
// (right-padded), give the logits of the full forward over the whole sequence; and a decode step
// after the extend sees every position.
TEST(RolloutGenerator, SlotExtendMatchesTheFullForward) {
    for (auto family : {model::ModelFamily::kQwen2, model::ModelFamily::kLlama}) {
        auto m = tiny_model(family);
        torch::NoGradGuard ng;
        const std::vector<std::vector<int64_t>> seqs{{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14},
                                                     {15, 16, 17, 18, 19, 20, 21}};
        auto full = [&](const std::vector<int64_t>& q) {
            const auto n = static_cast<int64_t>(q.size());
            return m->forward_logits(torch::tensor(q).view({1, n}), torch::ones({1, n}, torch::kInt64),
                                     torch::arange(n).view({1, n}))[0];
        };
        auto cache = m->make_cache(3, 16);
        auto step = [&](const std::vector<int64_t>& slots, const std::vector<std::vector<int64_t>>& chunks,
                        bool extend) {
            int64_t T = 0;
            std::vector<int64_t> lens;
            for (const auto& c : chunks) {
                T = std::max<int64_t>(T, static_cast<int64_t>(c.size()));
                lens.push_back(static_cast<int64_t>(c.size()));
            }
            const auto b = static_cast<int64_t>(slots.size());
            auto ids = torch::zeros({b, T}, torch::kInt64), mask = torch::zeros({b, T}, torch::kInt64),
                 pos = torch::zeros({b, T}, torch::kInt64);
            for (int64_t i = 0; i < b; ++i) {
                const int64_t start = cache.slot_length(slots[static_cast<size_t>(i)]);
                for (int64_t t = 0; t < T; ++t) {
                    pos[i][t] = start + t;
                    if (t < lens[static_cast<size_t>(i)]) {
                        ids[i][t] = chunks[static_cast<size_t>(i)][static_cast<size_t>(t)];
                        mask[i][t] = 1;
                    }
                }
            }
            if (extend) cache.bind_slots(slots, lens);
            else cache.bind_slots(slots);
            return m->forward_logits(ids, mask, pos, &cache);
        };
        // Slot 1: a 5-token prefill, then 2 decode steps; slot 2: a 3-token prefill.
        step({1}, {{3, 4, 5, 6, 7}}, false);
        step({2}, {{15, 16, 17}}, false);
        step({1}, {{8}}, false);
        step({1}, {{9}}, false);
        ASSERT_EQ(cache.slot_length(1), 7);
        ASSERT_EQ(cache.slot_length(2), 3);
        // Extend slot 1 by 4 tokens and slot 2 by 2 in one forward.
        auto ext = step({2, 1}, {{18, 19}, {10, 11, 12, 13}}, true);
        EXPECT_EQ(cache.slot_length(1), 11);
        EXPECT_EQ(cache.slot_length(2), 5);
        const auto f0 = full(seqs[0]), f1 = full(seqs[1]);
        EXPECT_TRUE(torch::allclose(ext[1].narrow(0, 0, 4), f0.narrow(0, 7, 4), 0, 2e-5));
        EXPECT_TRUE(torch::allclose(ext[0].narrow(0, 0, 2), f1.narrow(0, 3, 2), 0, 2e-5));
        // A one-token extend, then decode steps of both slots: every position is in the cache.
        auto one = step({1}, {{14}}, true);
        EXPECT_TRUE(torch::allclose(one[0][0], f0[11], 0, 2e-5));
        auto dec = step({1, 2}, {{14}, {20}}, false);
        const auto g0 = full({3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 14});
        EXPECT_TRUE(torch::allclose(dec[0][0], g0[12], 0, 2e-5));
        EXPECT_TRUE(torch::allclose(dec[1][0], f1[5], 0, 2e-5));
        // An extend past the slot's room is refused before any write.
        EXPECT_THROW(cache.bind_slots({1}, {4}), ValueError);
        EXPECT_THROW(cache.bind_slots({1}, {0}), ValueError);
    }
}

}  // namespace
}  // namespace rlpt::rollout
