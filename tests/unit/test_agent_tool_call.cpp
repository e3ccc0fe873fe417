// Tool-call parsing, argument checks and the tool parts of the chat template (agent/tool_call.h).
#include <gtest/gtest.h>

#include "rlpt/agent/tool_call.h"
#include "rlpt/config/config.h"
#include "rlpt/core/error.h"

namespace rlpt::agent {
namespace {

using tokenizer::ChatFamily;

TEST(AgentToolCall, HermesParsesEveryBlockAndKeepsTheContent) {
    auto t = parse_tool_calls(
        "hermes", "I'll add.\n<tool_call>\n{\"name\": \"get-sum\", \"arguments\": {\"a\": 2, \"b\": 3}}\n"
                  "</tool_call>\n<tool_call>{\"name\": \"echo\", \"arguments\": \"{\\\"message\\\": \\\"x\\\"}\"}"
                  "</tool_call><|im_end|>");
    ASSERT_EQ(t.calls.size(), 2u);
    EXPECT_EQ(t.calls[0].name, "get-sum");
    EXPECT_EQ(t.calls[0].arguments, nlohmann::json({{"a", 2}, {"b", 3}}));
    EXPECT_TRUE(t.calls[0].error.empty());
    EXPECT_EQ(t.calls[1].name, "echo");  // arguments given as a JSON string are parsed
    EXPECT_EQ(t.calls[1].arguments, nlohmann::json({{"message", "x"}}));
    EXPECT_EQ(t.content, "I'll add.\n\n<|im_end|>");
    auto none = parse_tool_calls("hermes", "just text <tool_call> unclosed");
    EXPECT_TRUE(none.calls.empty());
    EXPECT_EQ(none.content, "just text <tool_call> unclosed");
    EXPECT_THROW(parse_tool_calls("gpt-oss", "x"), ConfigError);
}

TEST(AgentToolCall, MalformedBlocksBecomeErrorsNotSkips) {
    auto t = parse_tool_calls("hermes", "<tool_call>{not json</tool_call><tool_call>{\"arguments\": {}}</tool_call>"
                                        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>");
    ASSERT_EQ(t.calls.size(), 3u);
    EXPECT_NE(t.calls[0].error.find("not a JSON object"), std::string::npos);
    EXPECT_NE(t.calls[1].error.find("no \"name\""), std::string::npos);
    EXPECT_EQ(t.calls[2].error, "Invalid JSON in arguments for 'f': expected an object");
}

TEST(AgentToolCall, ArgumentsAreCheckedAgainstTheInputSchema) {
    const auto schema = nlohmann::json::parse(
        R"({"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"number"},)"
        R"("b":{"type":"number"},"k":{"type":"string","enum":["x","y"]},"n":{"type":"integer","minimum":1,"maximum":10}},)"
        R"("required":["a","b"],"additionalProperties":false})");
    EXPECT_EQ(check_arguments(schema, {{"a", 1}, {"b", 2.5}}), "");
    EXPECT_EQ(check_arguments(schema, {{"a", "x"}, {"b", 1}}), "argument 'a': expected number, got string");
    EXPECT_EQ(check_arguments(schema, {{"a", 1}}), "argument 'b' is required");
    EXPECT_EQ(check_arguments(schema, {{"a", 1}, {"b", 1}, {"z", 1}}), "argument 'z' is not accepted");
    EXPECT_NE(check_arguments(schema, {{"a", 1}, {"b", 1}, {"k", "q"}}).find("is not one of"), std::string::npos);
    EXPECT_NE(check_arguments(schema, {{"a", 1}, {"b", 1}, {"n", 11}}).find("above the maximum"), std::string::npos);
    EXPECT_EQ(check_arguments(schema, {{"a", 1}, {"b", 1}, {"n", 2.0}}), "");  // 2.0 is an integer in JSON Schema
}

// Qwen2.5's template with the get-sum tool (AGENTS §2: the rendering of the Jinja template).
TEST(AgentToolCall, QwenPromptWithToolsMatchesTheTemplate) {
    auto params = nlohmann::json::parse(R"({"type":"object","properties":{"a":{"type":"number"}},"required":["a"]})");
    const auto text = render_prompt_with_tools(ChatFamily::kQwen2, {{"user", "2+3?"}},
                                               {function_tool("get-sum", "Returns the sum", params)});
    const std::string want =
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"
        "You may call one or more functions to assist with the user query.\n\nYou are provided with function "
        "signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"function\": {\"description\": \"Returns the sum\", \"name\": \"get-sum\", \"parameters\": {\"properties\": "
        "{\"a\": {\"type\": \"number\"}}, \"required\": [\"a\"], \"type\": \"object\"}}, \"type\": \"function\"}\n"
        "</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n";
    EXPECT_EQ(text, want);
    // A system message replaces the default; no tools: the plain template.
    EXPECT_EQ(render_prompt_with_tools(ChatFamily::kQwen2, {{"user", "hi"}}, {}),
              tokenizer::apply_chat_template(ChatFamily::kQwen2, {{"user", "hi"}}, true));
    EXPECT_EQ(render_prompt_with_tools(ChatFamily::kQwen2, {{"system", "S"}, {"user", "hi"}},
                                       {function_tool("f", "", {})})
                  .rfind("<|im_start|>system\nS\n\n# Tools", 0),
              0u);
}

TEST(AgentToolCall, ToolResponsesAreOneUserTurn) {
    auto o = render_tool_observation(ChatFamily::kQwen2, {"A", "B"}, true);
    std::string joined;
    for (size_t i = 0; i < o.texts.size(); ++i) joined += o.pieces[i] + o.texts[i];
    joined += o.pieces.back();
    EXPECT_EQ(joined, "\n<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>"
                      "<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(render_tool_observation(ChatFamily::kQwen2, {"A"}, false).pieces[0].rfind("<|im_end|>\n", 0), 0u);
    auto n = render_tool_observation(ChatFamily::kNone, {"5"}, false);
    EXPECT_EQ(n.pieces[0] + n.texts[0] + n.pieces[1], "<tool_response>5</tool_response>");
    EXPECT_THROW(render_tool_observation(ChatFamily::kLlama3, {"5"}, false), ConfigError);
}

TEST(AgentToolCall, TruncationFollowsVerl) {
    EXPECT_EQ(truncate_tool_text("abcdef", 4, "middle"), "ab...(truncated)...ef");
    EXPECT_EQ(truncate_tool_text("abcdef", 4, "left"), "(truncated)...cdef");
    EXPECT_EQ(truncate_tool_text("abcdef", 4, "right"), "abcd...(truncated)");
    EXPECT_EQ(truncate_tool_text("abcdef", 6, "right"), "abcdef");
    EXPECT_EQ(truncate_tool_text("\xC3\xA9\xC3\xA9\xC3\xA9", 2, "right"),
              "\xC3\xA9\xC3\xA9...(truncated)");  // code points
    EXPECT_THROW(truncate_tool_text("abc", 1, "top"), ConfigError);
}

// rollout.multi_turn.*: every refusal names its key. (What the tool_agent generator asks of them and
// the built-in tools' names are checked against the tables: tests/unit/test_table_names.cpp.)
TEST(AgentToolCall, ConfigKeysAreValidatedByName) {
    auto refused = [](const std::vector<std::string>& overrides, const std::string& key) {
        try {
            config_from_yaml("", "test", overrides);
            ADD_FAILURE() << "accepted: " << overrides.front();
        } catch (const ConfigError& e) {
            EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
        }
    };
    refused({"rollout.multi_turn.tool_response_truncate_side=top"}, "rollout.multi_turn.tool_response_truncate_side");
    refused({"rollout.multi_turn.format=gpt-oss"}, "rollout.multi_turn.format");
    refused({"rollout.multi_turn.max_parallel_calls=0"}, "rollout.multi_turn.max_parallel_calls");
    refused({"rollout.multi_turn.max_assistant_turns=-1"}, "rollout.multi_turn.max_assistant_turns");
    refused({"rollout.multi_turn.tool_timeout_s=0"}, "rollout.multi_turn.tool_timeout_s");
    refused({"rollout.multi_turn.env_workers=0"}, "rollout.multi_turn.env_workers");
    EXPECT_NO_THROW(config_from_yaml("", "test",
                                     {"rollout.generator=tool_agent", "rollout.multi_turn.builtin_tools=[calculator]",
                                      "rollout.multi_turn.mcp_servers=[npx -y x]"}));
}

}  // namespace
}  // namespace rlpt::agent
