// Qwen3's chat template (tokenizer::ChatFamily::kQwen3) against transformers' rendering of the
// template itself (tests/fixtures/chat/qwen3_cases.json, made by scripts/make_chat_fixtures.py from
// tests/fixtures/chat/qwen3_chat_template.jinja): every case byte for byte; the agent loop's tool
// observations continue a conversation exactly as the template does; the tool calls the template
// writes are the ones the agent's parser reads; and the config switch
// model.apply_chat_template_kwargs (verl's data.apply_chat_template_kwargs) with its refusals.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rlpt/agent/tool_call.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"
#include "rlpt/tokenizer/chat_template.h"
#include "test_model_helpers.h"

namespace {

using rlpt::tokenizer::ChatFamily;
using rlpt::tokenizer::ChatMessage;
using rlpt::tokenizer::ChatOptions;

nlohmann::json load_cases() {
    const std::string path = rlpt::model::testing::source_dir() + "/tests/fixtures/chat/qwen3_cases.json";
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return nlohmann::json::parse(ss.str());
}

std::vector<ChatMessage> messages_of(const nlohmann::json& j) {
    std::vector<ChatMessage> out;
    for (const auto& m : j) {
        ChatMessage msg{m["role"].get<std::string>(), m["content"].get<std::string>()};
        if (m.contains("tool_calls"))
            for (const auto& c : m["tool_calls"])
                msg.tool_calls.push_back(
                    {c["function"]["name"].get<std::string>(), c["function"]["arguments"].get<std::string>()});
        out.push_back(std::move(msg));
    }
    return out;
}

ChatOptions options_of(const nlohmann::json& c) {
    // Undefined and true render alike (the template tests `enable_thinking is false` only).
    return ChatOptions{c.value("enable_thinking", true)};
}

}  // namespace

TEST(ChatTemplate, Qwen3MatchesTransformersRenderingOfTheTemplate) {
    const auto cases = load_cases();
    ASSERT_GE(cases.size(), 50u);
    int with_tools = 0, without_thinking = 0;
    for (const auto& c : cases) {
        const auto messages = messages_of(c["messages"]);
        const auto opt = options_of(c);
        const bool gen = c["add_generation_prompt"].get<bool>();
        std::string got;
        if (c.contains("tools")) {
            ASSERT_TRUE(gen) << "the agent renders tools with the generation prompt only";
            got = rlpt::agent::render_prompt_with_tools(ChatFamily::kQwen3, messages,
                                                        c["tools"].get<std::vector<nlohmann::json>>(), opt);
            ++with_tools;
        } else {
            got = rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen3, messages, gen, opt);
        }
        without_thinking += !opt.enable_thinking && gen;
        EXPECT_EQ(got, c["expected"].get<std::string>())
            << c["name"] << " add_generation_prompt=" << gen << " enable_thinking=" << c.value("enable_thinking", true);
    }
    EXPECT_GT(with_tools, 0);
    EXPECT_GT(without_thinking, 0);
}

TEST(ChatTemplate, Qwen3GenerationPromptFollowsEnableThinking) {
    const std::vector<ChatMessage> m = {{"user", "Hi"}};
    EXPECT_EQ(rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen3, m, true),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen3, m, true, ChatOptions{false}),
              "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    // Qwen2.5 keeps its default system message and has no switch.
    EXPECT_EQ(rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen2, m, true, ChatOptions{false}),
              rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen2, m, true));
    EXPECT_EQ(rlpt::tokenizer::parse_chat_family("qwen3"), ChatFamily::kQwen3);
    EXPECT_STREQ(rlpt::tokenizer::chat_family_name(ChatFamily::kQwen3), "qwen3");
    EXPECT_EQ(rlpt::tokenizer::chat_stop_tokens(ChatFamily::kQwen3),
              (std::vector<std::string>{"<|im_end|>", "<|endoftext|>"}));
    // Tool calls as structured fields are Qwen3's alone here.
    EXPECT_THROW(rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen2, {{"assistant", "", {{"f", "{}"}}}}, false),
                 rlpt::ValueError);
}

// The agent loop appends tool results after a closed assistant turn as observation pieces; for
// every fixture conversation that ends with tool results, the pieces (with the results in place)
// are exactly the template's text after that turn's <|im_end|>, generation prompt included.
TEST(ChatTemplate, Qwen3ToolObservationContinuesLikeTheTemplate) {
    int checked = 0;
    for (const auto& c : load_cases()) {
        const auto messages = messages_of(c["messages"]);
        if (messages.back().role != "tool" || !c["add_generation_prompt"].get<bool>() || c.contains("tools")) continue;
        std::vector<std::string> results;
        for (size_t i = messages.size(); i-- > 0 && messages[i].role == "tool";)
            results.insert(results.begin(), messages[i].content);
        const auto o =
            rlpt::agent::render_tool_observation(ChatFamily::kQwen3, results, /*turn_closed=*/true, options_of(c));
        ASSERT_EQ(o.pieces.size(), results.size() + 1);
        std::string tail = "<|im_end|>";
        for (size_t k = 0; k < results.size(); ++k) tail += o.pieces[k] + o.texts[k];
        tail += o.pieces.back();
        const std::string expected = c["expected"].get<std::string>();
        ASSERT_GE(expected.size(), tail.size());
        EXPECT_EQ(expected.substr(expected.size() - tail.size()), tail) << c["name"];
        ++checked;
    }
    EXPECT_GE(checked, 6);  // two conversations x three enable_thinking settings
    // An environment's reply is a user turn followed by the same generation prompt.
    const auto u = rlpt::agent::render_user_observation(ChatFamily::kQwen3, "wrong", false, ChatOptions{false});
    EXPECT_EQ(u.pieces.front() + u.texts.front() + u.pieces.back(),
              "<|im_end|>\n<|im_start|>user\nwrong<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

// The calls Qwen3's template writes into an assistant turn are the agent parser's format.
TEST(ChatTemplate, Qwen3ToolCallsParseBack) {
    const std::vector<ChatMessage> m = {{"user", "12*34 and 5*6?"},
                                        {"assistant",
                                         "<think>\nuse it\n</think>\n\nComputing.",
                                         {{"calculator", R"({"expression": "12*34"})"},
                                          {"calculator", R"({"expression": "5*6"})"}}}};
    const std::string text = rlpt::tokenizer::apply_chat_template(ChatFamily::kQwen3, m, false);
    const std::string turn = text.substr(text.find("<|im_start|>assistant\n") + 22);
    const auto parsed = rlpt::agent::parse_tool_calls("hermes", turn);
    ASSERT_EQ(parsed.calls.size(), 2u);
    EXPECT_EQ(parsed.calls[0].name, "calculator");
    EXPECT_TRUE(parsed.calls[0].error.empty()) << parsed.calls[0].error;
    EXPECT_EQ(parsed.calls[0].arguments, nlohmann::json({{"expression", "12*34"}}));
    EXPECT_EQ(parsed.calls[1].arguments, nlohmann::json({{"expression", "5*6"}}));
    EXPECT_NE(parsed.content.find("Computing."), std::string::npos);
}

TEST(ChatTemplate, EnableThinkingIsAConfigKwargWithRefusals) {
    const auto c = rlpt::config_from_yaml(
        "model:\n  chat_template: qwen3\n  apply_chat_template_kwargs: {enable_thinking: false}\n", "q.yaml");
    EXPECT_FALSE(c.model.apply_chat_template_kwargs.enable_thinking);
    EXPECT_NO_THROW(rlpt::validate(c));
    EXPECT_TRUE(rlpt::Config{}.model.apply_chat_template_kwargs.enable_thinking);
    // A kwarg rlpt's templates do not read is refused by name, not ignored.
    try {
        rlpt::config_from_yaml("model:\n  apply_chat_template_kwargs: {enable_thinkin: false}\n", "k.yaml");
        ADD_FAILURE() << "an unknown kwarg was accepted";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("unknown key 'model.apply_chat_template_kwargs.enable_thinkin'"),
                  std::string::npos)
            << e.what();
    }
    // The switch on a template without one would do nothing: refused naming the key.
    try {
        rlpt::config_from_yaml(
            "model:\n  chat_template: qwen2\n  apply_chat_template_kwargs: {enable_thinking: false}\n", "q2.yaml");
        ADD_FAILURE() << "enable_thinking false with qwen2 was accepted";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("model.apply_chat_template_kwargs.enable_thinking"), std::string::npos)
            << e.what();
    }
}
