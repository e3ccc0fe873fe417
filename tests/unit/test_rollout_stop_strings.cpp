// Stop strings (rollout/stop_strings.h): the matcher on hand-made token texts (across token
// boundaries, ending inside a token, several candidates, UTF-8 split over tokens), the token
// texts of a tokenizer, and generate() stopping on them with ids, log-probs and mask agreeing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rlpt/core/error.h"
#include "rlpt/model/transformer.h"
#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/stop_strings.h"
#include "rlpt/tokenizer/char_tokenizer.h"
#include "unit/test_model_helpers.h"

namespace rlpt::rollout {
namespace {

struct Case {
    TokenTexts texts;
    std::vector<std::string> stop;
};

// Pushes ids until a match; returns how many were pushed when it matched (0: never).
int push_all(StopStringMatcher& m, const std::vector<int64_t>& ids) {
    for (size_t i = 0; i < ids.size(); ++i)
        if (m.push(ids[i])) return static_cast<int>(i) + 1;
    return 0;
}

TEST(StopStrings, MatchesAcrossTokensAndInsideOne) {
    const TokenTexts texts{"", "ab", "c</", "thi", "nk>rest", "x"};
    const std::vector<std::string> stop{"</think>"};
    for (bool include : {false, true}) {
        StopStringMatcher m(&stop, &texts, include);
        EXPECT_EQ(push_all(m, {1, 2, 3, 4, 5}), 4);  // completed by the 4th token, which goes on after it
        ASSERT_TRUE(m.stopped());
        EXPECT_EQ(*m.matched(), "</think>");
        EXPECT_EQ(m.visible_text(), include ? "abc</think>" : "abc");
        EXPECT_EQ(m.raw_text(), "abc</think>rest");
        EXPECT_FALSE(m.push(5)) << "a matcher reports its match once";
        EXPECT_EQ(m.visible_text(), include ? "abc</think>" : "abc");
        EXPECT_EQ(m.raw_text(), "abc</think>restx");
    }
}

TEST(StopStrings, FirstEndingMatchWinsWhateverTheListOrder) {
    const TokenTexts texts{"", "abc", "z"};
    for (auto stop : {std::vector<std::string>{"abc", "b"}, std::vector<std::string>{"b", "abc"}}) {
        StopStringMatcher m(&stop, &texts, false);
        EXPECT_TRUE(m.push(1));
        EXPECT_EQ(*m.matched(), "b");
        EXPECT_EQ(m.visible_text(), "a");
    }
    // Same end: the one starting first (the longest).
    for (auto stop : {std::vector<std::string>{"c", "bc"}, std::vector<std::string>{"bc", "c"}}) {
        StopStringMatcher m(&stop, &texts, true);
        EXPECT_TRUE(m.push(1));
        EXPECT_EQ(*m.matched(), "bc");
        EXPECT_EQ(m.visible_text(), "abc");
    }
    // Never matched: the whole text.
    const std::vector<std::string> stop{"zz"};
    StopStringMatcher m(&stop, &texts, false);
    EXPECT_EQ(push_all(m, {1, 2, 1}), 0);
    EXPECT_FALSE(m.stopped());
    EXPECT_EQ(m.visible_text(), "abczabc");
}

TEST(StopStrings, SpecialAndUnknownIdsAddNoText) {
    const TokenTexts texts{"", "a", "", "b"};  // id 2 special ("" from token_texts), ids >= 4 unknown
    const std::vector<std::string> stop{"ab"};
    StopStringMatcher m(&stop, &texts, true);
    EXPECT_EQ(push_all(m, {1, 2, 7, 0, 3}), 5);
    EXPECT_EQ(m.visible_text(), "ab");
    StopStringMatcher inactive;
    EXPECT_FALSE(inactive.active());
    EXPECT_FALSE(inactive.push(1));
    EXPECT_EQ(inactive.visible_text(), "");
}

TEST(StopStrings, Utf8CharacterSplitOverTokens) {
    // "é" is C3 A9: byte-level BPE may give each byte its own token.
    const TokenTexts texts{"", "x\xC3", "\xA9y", "\xC3"};
    const std::vector<std::string> stop{"\xC3\xA9"};
    StopStringMatcher m(&stop, &texts, true);
    EXPECT_FALSE(m.push(1));
    EXPECT_TRUE(m.push(2));
    EXPECT_EQ(m.visible_text(), "x\xC3\xA9");
    // Text that ends inside a character shows U+FFFD there.
    const std::vector<std::string> none;
    StopStringMatcher cut(&none, &texts, false);
    cut.push(3);
    EXPECT_EQ(cut.visible_text(), "\xEF\xBF\xBD");
}

TEST(StopStrings, EmptyStopStringIsRefused) {
    EXPECT_THROW(validate_stop_strings({"a", ""}, "rollout.stop"), ValueError);
    try {
        validate_stop_strings({""}, "rollout.stop");
    } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("rollout.stop: stop string 0 is empty"), std::string::npos) << e.what();
    }
    SamplingParams p;
    p.stop = {"x"};
    EXPECT_THROW(validate_sampling_params(p, 0), ValueError) << "stop strings without token texts";
}

TEST(StopStrings, TokenTextsOfACharTokenizer) {
    tokenizer::CharTokenizer tok("ab=\xC3\xA9");
    const auto t = token_texts(tok);
    ASSERT_EQ(static_cast<int64_t>(t.size()), tok.vocab_size());
    EXPECT_EQ(t[tokenizer::CharTokenizer::kEosId], "") << "special tokens add no text";
    EXPECT_EQ(t[static_cast<size_t>(tok.token_to_id("="))], "=");
    EXPECT_EQ(t[static_cast<size_t>(tok.token_to_id("\xC3\xA9"))], "\xC3\xA9");
    EXPECT_EQ(tok.token_bytes(tokenizer::CharTokenizer::kEosId), "<eos>");
    EXPECT_EQ(tok.token_bytes(1000), "");
}

// generate(): a stop string ends the response at the token that completes it; that token and all
// before it are kept with the log-probs of the run without the stop string.
TEST(StopStrings, GenerateStopsAtTheCompletingToken) {
    constexpr int64_t kVocab = 24;
    auto a = model::tiny_model_args(model::ModelFamily::kQwen2, kVocab);
    a.initializer_range = 0.25;
    auto m = model::make_random_causal_lm(a, 11);
    // Two characters per token, so a stop string can end inside a token.
    TokenTexts texts(kVocab);
    for (int64_t i = 0; i < kVocab; ++i) texts[static_cast<size_t>(i)] = {char('a' + i), char('A' + i)};
    SamplingParams p;
    p.greedy = true;
    p.max_new_tokens = 8;
    const std::vector<std::vector<int64_t>> prompts{{3, 4, 5}, {6, 7}};
    const std::vector<uint64_t> seeds{1, 2};
    const auto free_run = generate(*m, prompts, seeds, p);
    ASSERT_EQ(free_run.responses.size(1), 8);
    auto tok = [&](int64_t row, int64_t j) { return free_run.responses[row][j].item<int64_t>(); };
    // Row 0 stops on a string spanning tokens 1 and 2 that ends inside token 2.
    const std::string span = texts[static_cast<size_t>(tok(0, 1))].substr(1) + texts[static_cast<size_t>(tok(0, 2))][0];
    for (bool include : {false, true}) {
        p.stop = {span, "@never@"};
        p.include_stop_str_in_output = include;
        p.token_texts = &texts;
        const auto out = generate(*m, prompts, seeds, p);
        std::string full0;
        for (int64_t j = 0; j < 8; ++j) full0 += texts[static_cast<size_t>(tok(0, j))];
        const size_t at = full0.find(span);
        ASSERT_NE(at, std::string::npos);
        const int64_t kept = static_cast<int64_t>((at + span.size() + 1) / 2);  // tokens up to the completing one
        ASSERT_LE(kept, 3);
        EXPECT_EQ(out.finish_reasons[0], FinishReason::kStop);
        EXPECT_EQ(out.response_mask[0].sum().item<int64_t>(), kept);
        EXPECT_TRUE(torch::equal(out.responses[0].narrow(0, 0, kept), free_run.responses[0].narrow(0, 0, kept)));
        EXPECT_TRUE(torch::allclose(out.rollout_log_probs[0].narrow(0, 0, kept),
                                    free_run.rollout_log_probs[0].narrow(0, 0, kept)));
        EXPECT_EQ(out.texts[0], full0.substr(0, include ? at + span.size() : at));
        // Row 1 (unless it happens to contain the span) runs to the length limit with its full text.
        std::string full1;
        for (int64_t j = 0; j < 8; ++j) full1 += texts[static_cast<size_t>(tok(1, j))];
        if (full1.find(span) == std::string::npos) {
            EXPECT_EQ(out.finish_reasons[1], FinishReason::kLength);
            EXPECT_EQ(out.texts[1], full1);
        }
    }
}

}  // namespace
}  // namespace rlpt::rollout
