// The agent demo's pieces: CharTokenizer words (multi-character tokens), the built-in task
// arithmetic_tools (data/arithmetic.h) and SFT conversations with tool turns out of the loss
// (agent::encode_conversation).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "rlpt/agent/builtin_tools.h"
#include "rlpt/agent/tool_agent.h"
#include "rlpt/agent/tool_call.h"
#include "rlpt/core/error.h"
#include "rlpt/data/arithmetic.h"
#include "rlpt/reward/registry.h"
#include "rlpt/tokenizer/char_tokenizer.h"
#include "rlpt/tokenizer/tokenizer.h"

namespace rlpt {
namespace {

using tokenizer::CharTokenizer;
using Ids = std::vector<int64_t>;

CharTokenizer task_tokenizer() { return CharTokenizer(data::kArithmeticCharset, data::kToolCallWords); }

TEST(CharTokenizerWords, MatchedLongestFirstInEveryEncodeAndRoundTrip) {
    CharTokenizer tok("ab<>", {"<a>", "<a>b", "</x>"});
    const int64_t w0 = 3 + 4, w1 = w0 + 1, w2 = w0 + 2;
    EXPECT_EQ(tok.vocab_size(), 3 + 4 + 3);
    EXPECT_EQ(tok.encode("<a>a<a>b</x>"), (Ids{w0, 3, w1, w2}));  // "<a>b" wins over "<a>" where both match
    EXPECT_EQ(tok.encode("<a>ba"), (Ids{w1, 3}));
    EXPECT_EQ(tok.encode("<a>b", /*allow_special=*/false), (Ids{w1}));  // not special: matched here too
    EXPECT_EQ(tok.encode("<eos><a>"), (Ids{2, w0}));
    EXPECT_EQ(tok.decode(Ids{w0, 4, 2, w2}, /*skip_special_tokens=*/true), "<a>b</x>");
    EXPECT_EQ(tok.token_to_id("</x>"), w2);
    EXPECT_EQ(tok.id_to_token(w1), "<a>b");
    EXPECT_FALSE(tok.is_special(w0));
    EXPECT_THROW(tok.encode("</y>"), ValueError);                 // '/' and 'y' are no characters of it
    EXPECT_THROW(CharTokenizer("ab", {"a"}), ValueError);         // one character: not a word
    EXPECT_THROW(CharTokenizer("ab", {"ab", "ab"}), ValueError);  // twice
    EXPECT_THROW(CharTokenizer("ab", {"a\nb"}), ValueError);      // newline
    EXPECT_THROW(CharTokenizer("ab", {"<eos>"}), ValueError);     // a special token

    const auto dir = std::filesystem::temp_directory_path() / ("rlpt_words_" + std::to_string(::getpid()));
    tok.save(dir.string());
    auto loaded = tokenizer::load_tokenizer(dir.string());
    std::filesystem::remove_all(dir);
    EXPECT_EQ(loaded->kind(), "char");
    EXPECT_EQ(loaded->vocab_size(), tok.vocab_size());
    EXPECT_EQ(loaded->encode("<a>a<a>b</x>"), tok.encode("<a>a<a>b</x>"));
    EXPECT_EQ(dynamic_cast<const CharTokenizer&>(*loaded).words(), tok.words());
}

TEST(ArithmeticToolsTask, AShareOfDemonstrationsCallTheCalculator) {
    data::ArithmeticOptions o;
    o.min_digits = 2;
    o.max_digits = 2;
    o.operations = "*";
    o.num_train = 2000;
    o.num_val = 100;
    const auto task = data::make_arithmetic_tools_task(o, 0.25);
    const auto tok = task_tokenizer();
    int64_t tools = 0;
    for (const auto& e : task.train) {
        EXPECT_EQ(e.data_source, data::kArithmeticToolsDataSource);
        const std::string expression = e.prompt.substr(0, e.prompt.size() - 1);
        if (!e.extra.value("tool_demo", false)) {
            EXPECT_EQ(*e.response, e.ground_truth);
            EXPECT_FALSE(e.extra.contains("turns"));
            continue;
        }
        ++tools;
        const auto& turns = e.extra["turns"];
        ASSERT_EQ(turns.size(), 3u);
        const auto parsed = agent::parse_tool_calls("hermes", turns[0]["content"].get<std::string>());
        ASSERT_EQ(parsed.calls.size(), 1u);  // the call the agent loop will parse and run
        EXPECT_EQ(parsed.calls[0].name, "calculator");
        EXPECT_EQ(parsed.calls[0].arguments, nlohmann::json({{"expression", expression}}));
        EXPECT_EQ(agent::run_calculator(parsed.calls[0].arguments).text, e.ground_truth);
        EXPECT_EQ(turns[1], nlohmann::json({{"role", "tool"}, {"content", e.ground_truth}}));
        EXPECT_EQ(turns[2], nlohmann::json({{"role", "assistant"}, {"content", e.ground_truth}}));
        EXPECT_EQ(tok.encode(turns[0]["content"].get<std::string>()).size(), expression.size() + 2);  // 2 words
    }
    EXPECT_NEAR(static_cast<double>(tools) / 2000.0, 0.25, 0.04);
    for (const auto& e : task.val) EXPECT_FALSE(e.extra.contains("turns"));
    EXPECT_THROW(data::make_arithmetic_tools_task(o, 1.5), ConfigError);
    o.reversed_answer = true;
    EXPECT_THROW(data::make_arithmetic_tools_task(o, 0.25), ConfigError);
}

TEST(ArithmeticToolsTask, TheRewardIsTheAnswerAfterTheCallNotTheToolText) {
    reward::ScorerRegistry reg;
    reward::add_builtin_scorers(reg);
    auto score = [&](const std::string& text) {
        reward::ScoreRequest r;
        r.data_source = data::kArithmeticToolsDataSource;
        r.solution = text;
        r.ground_truth = "1776";
        return reg.score(r).score;
    };
    const std::string call = data::kToolCallWords[0] + "37*48" + data::kToolCallWords[1];
    EXPECT_EQ(score(call + "1776"), 1.0);  // the model's text: the call, then its answer
    EXPECT_EQ(score("1776"), 1.0);
    EXPECT_EQ(score(call), 0.0);  // no answer after the call
    EXPECT_EQ(score("1766"), 0.0);
}

// SFT on a tool conversation: the same ids the agent loop produces, the tool turn with loss mask 0.
TEST(AgentSftConversation, ToolTurnsAreInTheSequenceButOutOfTheLoss) {
    const auto tok = task_tokenizer();
    const int64_t eos = CharTokenizer::kEosId;
    const std::string call = data::kToolCallWords[0] + "37*48" + data::kToolCallWords[1];
    const nlohmann::json turns = {{{"role", "assistant"}, {"content", call}},
                                  {{"role", "tool"}, {"content", "1776"}},
                                  {{"role", "assistant"}, {"content", "1776"}}};
    const auto conv = agent::encode_conversation(tok, tokenizer::ChatFamily::kNone, turns, eos);
    Ids want = tok.encode(call);
    want.push_back(eos);  // the model ends its turn with EOS (template none)
    const size_t obs_begin = want.size();
    const Ids obs = agent::encode_observation(tok, agent::render_tool_observation(tokenizer::ChatFamily::kNone,
                                                                                  {"1776"}, /*turn_closed=*/true));
    EXPECT_EQ(tok.decode(obs), "<tool_response>1776</tool_response>");
    want.insert(want.end(), obs.begin(), obs.end());
    const size_t obs_end = want.size();
    for (int64_t id : tok.encode("1776")) want.push_back(id);
    want.push_back(eos);
    EXPECT_EQ(conv.ids, want);
    ASSERT_EQ(conv.loss_mask.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
        EXPECT_EQ(conv.loss_mask[k], k >= obs_begin && k < obs_end ? 0 : 1) << "token " << k;

    // Malformed conversations name the problem.
    auto error = [&](const nlohmann::json& t) {
        try {
            agent::encode_conversation(tok, tokenizer::ChatFamily::kNone, t, eos);
        } catch (const ValueError& e) {
            return e.message();
        }
        return std::string("no error");
    };
    EXPECT_NE(
        error({{{"role", "tool"}, {"content", "1"}}, {{"role", "assistant"}, {"content", "1"}}}).find("first turn"),
        std::string::npos);
    EXPECT_NE(
        error({{{"role", "assistant"}, {"content", call}}, {{"role", "tool"}, {"content", "1"}}}).find("last turn"),
        std::string::npos);
    EXPECT_NE(error({{{"role", "user"}, {"content", "1"}}}).find("role 'user'"), std::string::npos);
    EXPECT_NE(error(nlohmann::json::array()).find("non-empty"), std::string::npos);
}

}  // namespace
}  // namespace rlpt
