#pragma once
// Tool calls in the model's text and tools in the prompt (AGENTS §1.5, §2). Torch-free.
//
// Parser format "hermes" (Hermes / Qwen2.5 / Qwen3, verl's HermesToolParser): every non-greedy
// block <tool_call>BODY</tool_call> of the turn's text (decoded with special tokens kept); BODY is
// JSON {"name": "...", "arguments": {...}}. Unlike verl, which logs and skips a block it cannot
// parse, a bad block is kept as a call with `error` set, so the model sees why (an error
// observation) and the run counts it (metric tool_errors).
//
// Chat families (tokenizer/chat_template.h):
//   qwen2  the prompt's system turn lists the tools exactly as Qwen2.5's template renders them
//          (default system text when the conversation has none); tool results are one user turn
//          of <tool_response> blocks; the next assistant turn is opened after them.
//   qwen3  the same turns as Qwen3's template renders them: no default system text, and the
//          assistant turns opened after observations get the empty think block when
//          ChatOptions::enable_thinking is false (as every generation prompt of the template).
//   none   (base / built-in models) tools are not described in the prompt (the model learns the
//          call format from SFT demonstrations); results are "<tool_response>TEXT</tool_response>"
//          each, nothing else.
//   llama3 refused (ConfigError) for tool use: its tool format is not implemented.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlpt/tokenizer/chat_template.h"

namespace rlpt::agent {

struct ParsedToolCall {
    std::string name;          // may be empty when the block did not parse
    nlohmann::json arguments;  // an object when error is empty
    std::string error;         // non-empty: the block is malformed; the observation says why
};

struct ParsedTurn {
    std::string content;                // the text without the call blocks
    std::vector<ParsedToolCall> calls;  // in order of appearance
};

// Valid formats: "hermes". ConfigError "rollout.multi_turn.format: ..." otherwise.
void check_tool_format(const std::string& format);
ParsedTurn parse_tool_calls(const std::string& format, const std::string& text);

// "" when `args` satisfies `schema` (the subset of JSON Schema tools use: type (one or a list),
// properties, required, additionalProperties: false, enum, minimum/maximum, items), else a
// message naming the first failing argument ("argument 'a': expected number, got string").
std::string check_arguments(const nlohmann::json& schema, const nlohmann::json& args);

// JSON as Jinja's tojson in transformers (json.dumps, ensure_ascii=False): separators ", " and
// ": ". Keys come in nlohmann::json's order (sorted), where Python keeps insertion order.
std::string tojson(const nlohmann::json& j);

// A tool as the chat template sees it: {"type": "function", "function": {"name", "description",
// "parameters"}}.
nlohmann::json function_tool(const std::string& name, const std::string& description, const nlohmann::json& parameters);

// ConfigError naming `key` when `family` cannot carry tool calls (llama3).
void check_tool_family(tokenizer::ChatFamily family, const std::string& key);

// The prompt: apply_chat_template's rendering with `tools` in the system turn (qwen2, qwen3; with
// no tools it equals apply_chat_template), always with the generation prompt.
std::string render_prompt_with_tools(tokenizer::ChatFamily family, const std::vector<tokenizer::ChatMessage>& messages,
                                     const std::vector<nlohmann::json>& tools,
                                     const tokenizer::ChatOptions& options = {});

// The observation after an assistant turn, split into the template's text (encode with special
// tokens) and the tool texts (encode without, so a tool cannot inject control tokens):
// pieces[0], texts[0], pieces[1], texts[1], ..., pieces[n]. `turn_closed` says whether the turn's
// text already ends with the family's end-of-turn token (qwen2, qwen3: <|im_end|>; else it is
// added). The last piece ends with tokenizer::generation_prompt(family, options).
struct ObservationPieces {
    std::vector<std::string> pieces;  // size texts.size() + 1
    std::vector<std::string> texts;
};
ObservationPieces render_tool_observation(tokenizer::ChatFamily family, const std::vector<std::string>& tool_texts,
                                          bool turn_closed, const tokenizer::ChatOptions& options = {});

// An environment's observation as the next user turn: qwen2 / qwen3 "[<|im_end|>]\n<|im_start|>user\n"
// TEXT "<|im_end|>\n" + generation_prompt(family, options); none: TEXT alone.
ObservationPieces render_user_observation(tokenizer::ChatFamily family, const std::string& text, bool turn_closed,
                                          const tokenizer::ChatOptions& options = {});

// verl's truncation of a tool text longer than max_chars characters (code points):
// "left" "(truncated)..." + last n; "right" first n + "...(truncated)"; "middle" first n/2 +
// "...(truncated)..." + last n/2. ConfigError for another side.
std::string truncate_tool_text(const std::string& text, int64_t max_chars, const std::string& side);

}  // namespace rlpt::agent
