// Multi-stage rollouts (rollout/multi_stage.h): a sampled stage that stops on a stop string, an
// appended prefix, a beam-search stage; the masks (appended tokens: response_mask 0, attention 1),
// the log-probs against the actor's full forward, sharing across samples, EOS ending the
// response early, and the checks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rlpt/core/error.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/multi_stage.h"
#include "rlpt/rollout/sampler.h"

namespace rlpt::rollout {
namespace {

using Seq = std::vector<int64_t>;
constexpr int64_t kVocab = 24;

std::shared_ptr<model::CausalLM> tiny() {
    auto a = model::tiny_model_args(model::ModelFamily::kQwen2, kVocab);
    a.initializer_range = 0.25;
    return model::make_random_causal_lm(a, 11);
}

TokenTexts letter_texts() {
    TokenTexts t(kVocab);
    for (int64_t i = 0; i < kVocab; ++i) t[static_cast<size_t>(i)] = std::string(1, static_cast<char>('a' + i));
    return t;
}

Seq row_of(const torch::Tensor& t, int64_t i, int64_t len) {
    auto r = t[i].narrow(0, 0, len).contiguous();
    return {r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + len};
}

std::string text_of(const TokenTexts& texts, const Seq& ids) {
    std::string s;
    for (int64_t id : ids) s += texts[static_cast<size_t>(id)];
    return s;
}

TEST(MultiStage, SampleUntilStopAppendThenBeamSearch) {
    auto m = tiny();
    const auto texts = letter_texts();
    SamplingParams p;
    p.temperature = 0.9;
    p.max_new_tokens = 16;
    p.token_texts = &texts;
    const std::vector<Seq> prompts{{3, 4, 5}, {6, 7}};
    const std::vector<uint64_t> seeds{sample_seed(1, 0, 0), sample_seed(1, 0, 1)};

    // Stage 1 alone, to pick a stop string the first row meets at its 3rd token.
    SamplingParams s1 = p;
    s1.max_new_tokens = 6;
    const auto free_run = generate(*m, prompts, seeds, s1);
    const std::string stop = texts[static_cast<size_t>(free_run.responses[0][2].item<int64_t>())];
    s1.stop = {stop};
    const auto stage1 = generate(*m, prompts, seeds, s1);

    MultiStageArgs args;
    args.stages = {StageSpec{"sampler", 6, {stop}, {20, 21}, false}, StageSpec{"beam_search", 3, {}, {}, false}};
    args.beam_search = BeamSearchParams{2, 1.0};
    args.sample_rank = {1, 0};
    const auto out = run_stages(*m, prompts, seeds, p, args, 8);

    for (int64_t i = 0; i < 2; ++i) {
        const int64_t n1 = stage1.response_mask[i].sum().item<int64_t>();
        const Seq first = row_of(stage1.responses, i, n1);
        // Stage 2 alone: beam search from prompt ++ stage 1 ++ append, the row's rank.
        Seq prefix = prompts[static_cast<size_t>(i)];
        prefix.insert(prefix.end(), first.begin(), first.end());
        prefix.insert(prefix.end(), {20, 21});
        SamplingParams s2 = p;
        s2.max_new_tokens = 3;
        const auto stage2 = beam_search(*m, {prefix}, s2, args.beam_search, {args.sample_rank[static_cast<size_t>(i)]});
        const int64_t n2 = stage2.response_mask[0].sum().item<int64_t>();
        const Seq second = row_of(stage2.responses, 0, n2);

        Seq want = first;
        want.insert(want.end(), {20, 21});
        want.insert(want.end(), second.begin(), second.end());
        const int64_t n = static_cast<int64_t>(want.size());
        EXPECT_EQ(row_of(out.responses, i, n), want) << "row " << i;
        // Masks: trained on the stages' tokens only; attention on every token.
        for (int64_t j = 0; j < n; ++j) {
            const bool appended = j == n1 || j == n1 + 1;
            EXPECT_EQ(out.response_mask[i][j].item<int64_t>(), appended ? 0 : 1) << "row " << i << " token " << j;
            EXPECT_EQ(out.attention_mask[i][out.prompts.size(1) + j].item<int64_t>(), 1);
            if (appended) EXPECT_EQ(out.rollout_log_probs[i][j].item<float>(), 0.0f);
        }
        EXPECT_EQ(out.finish_reasons[static_cast<size_t>(i)], stage2.finish_reasons[0]);
        // The text: stage 1's (with its stop string: the tokens after it belong to the response),
        // the appended prefix, stage 2's.
        EXPECT_EQ(out.texts[static_cast<size_t>(i)], text_of(texts, want));
    }
    EXPECT_EQ(stage1.finish_reasons[0], FinishReason::kStop) << "the chosen stop string ended row 0's stage 1";

    // What the actor recomputes: log_softmax(logits / T) of the full forward at the trained tokens.
    torch::NoGradGuard ng;
    auto logits = m->forward_logits(out.input_ids, out.attention_mask, out.position_ids);
    const int64_t P = out.prompts.size(1), R = out.responses.size(1);
    auto lp = torch::log_softmax(logits.narrow(1, P - 1, R) / p.temperature, -1)
                  .gather(2, out.responses.unsqueeze(-1))
                  .squeeze(-1);
    auto trained = out.response_mask.to(torch::kFloat32);
    EXPECT_TRUE(torch::allclose(lp * trained, out.rollout_log_probs, 0, 2e-5))
        << (lp * trained - out.rollout_log_probs).abs().max().item<double>();
}

TEST(MultiStage, SharedStageGivesTheGroupOneChainAndItsBestBeams) {
    auto m = tiny();
    const auto texts = letter_texts();
    SamplingParams p;
    p.max_new_tokens = 8;
    p.token_texts = &texts;
    const std::vector<Seq> prompts(3, Seq{3, 4, 5});
    const std::vector<uint64_t> seeds{11, 12, 13};
    MultiStageArgs args;
    args.stages = {StageSpec{"sampler", 4, {}, {22}, true}, StageSpec{"beam_search", 2, {}, {}, false}};
    args.beam_search = BeamSearchParams{3, 0.0};
    args.sample_rank = {0, 1, 2};
    args.group_seeds = {11, 11, 11};
    const auto out = run_stages(*m, prompts, seeds, p, args, 8);
    const auto a = row_of(out.responses, 0, 5), b = row_of(out.responses, 1, 5), c = row_of(out.responses, 2, 5);
    EXPECT_EQ(Seq(a.begin(), a.begin() + 5), Seq(b.begin(), b.begin() + 5)) << "one shared chain + append";
    EXPECT_EQ(Seq(a.begin(), a.begin() + 5), Seq(c.begin(), c.begin() + 5));
    // Its three beams, in rank order.
    const auto sums = (out.rollout_log_probs.narrow(1, 5, 2)).sum(1);
    EXPECT_GE(sums[0].item<float>(), sums[1].item<float>() - 1e-6);
    EXPECT_GE(sums[1].item<float>(), sums[2].item<float>() - 1e-6);
    EXPECT_NE(row_of(out.responses, 0, 7), row_of(out.responses, 1, 7));
    // The shared chain is the first sample's (seed 11): the same as running row 0 alone.
    SamplingParams s1 = p;
    s1.max_new_tokens = 4;
    const auto alone = generate(*m, {prompts[0]}, {11}, s1);
    EXPECT_EQ(Seq(a.begin(), a.begin() + 4), row_of(alone.responses, 0, 4));
}

TEST(MultiStage, EosEndsTheResponseWithoutTheAppend) {
    auto m = tiny();
    const auto texts = letter_texts();
    SamplingParams p;
    p.greedy = true;
    p.max_new_tokens = 8;
    p.token_texts = &texts;
    const std::vector<Seq> prompts{{3, 4, 5}};
    SamplingParams s1 = p;
    s1.max_new_tokens = 4;
    const auto free_run = generate(*m, prompts, {1}, s1);
    p.eos_id = free_run.responses[0][1].item<int64_t>();  // the 2nd greedy token ends the response
    MultiStageArgs args;
    args.stages = {StageSpec{"sampler", 4, {}, {22, 23}, false}, StageSpec{"sampler", 2, {}, {}, false}};
    const auto out = run_stages(*m, prompts, {1}, p, args, 8);
    EXPECT_EQ(out.finish_reasons[0], FinishReason::kEos);
    EXPECT_EQ(out.attention_mask.narrow(1, out.prompts.size(1), out.responses.size(1)).sum().item<int64_t>(),
              free_run.responses[0][0].item<int64_t>() == p.eos_id ? 1 : 2);
}

TEST(MultiStage, BadStagesAreRefused) {
    auto m = tiny();
    const auto texts = letter_texts();
    SamplingParams p;
    p.max_new_tokens = 4;
    p.token_texts = &texts;
    auto run = [&](std::vector<StageSpec> stages) {
        MultiStageArgs args;
        args.stages = std::move(stages);
        run_stages(*m, {{3}}, {1}, p, args, 8);
    };
    EXPECT_THROW(run({}), ValueError);
    EXPECT_THROW(run({StageSpec{"greedy", 1, {}, {}, false}}), ValueError);
    EXPECT_THROW(run({StageSpec{"sampler", 0, {}, {}, false}}), ValueError);
    EXPECT_THROW(run({StageSpec{"beam_search", 1, {"x"}, {}, false}}), ValueError);
    EXPECT_THROW(run({StageSpec{"sampler", 1, {""}, {}, false}}), ValueError);
    EXPECT_THROW(run({StageSpec{"sampler", 3, {}, {5, 6}, false}}), ValueError) << "3 + 2 tokens over 4";
    p.token_texts = nullptr;
    EXPECT_THROW(run({StageSpec{"sampler", 1, {}, {}, false}}), ValueError) << "no token texts";
}

}  // namespace
}  // namespace rlpt::rollout
