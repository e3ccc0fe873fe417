#pragma once
// Chat formatting: renders a conversation into the prompt text a chat model was trained on,
// exactly as the model's Hugging Face chat template does (for plain text messages, and for
// qwen3 also tool calls and tool results; the tool list in the system turn is
// agent/tool_call.h's; multimodal content is out of scope). Torch-free. Encode the result with
// allow_special=true so the template's control tokens become their ids.

#include <string>
#include <vector>

namespace rlpt::tokenizer {

enum class ChatFamily {
    kNone,    // base models: the messages' content concatenated in order, nothing added
    kQwen2,   // Qwen2 / Qwen2.5 ChatML
    kLlama3,  // Llama-3 (3.0) instruct
    kQwen3,   // Qwen3 (dense and MoE): ChatML with <think> blocks, no default system message
};

// A tool call of an assistant message as HF templates take it ({"function": {"name", "arguments"}}
// with arguments a string): `arguments` is JSON text, written as it is.
struct ChatToolCall {
    std::string name;
    std::string arguments;
};

struct ChatMessage {
    std::string role;                           // "system", "user", "assistant", "tool" (qwen3), ... (non-empty)
    std::string content;                        // UTF-8
    std::vector<ChatToolCall> tool_calls = {};  // assistant messages (qwen3 renders them; others refuse them)
};

// The template's keyword arguments beyond the messages (HF apply_chat_template(**kwargs); rlpt's
// config model.apply_chat_template_kwargs, verl's data.apply_chat_template_kwargs).
struct ChatOptions {
    // qwen3: false ends the generation prompt with an empty think block ("<think>\n\n</think>\n\n"),
    // as Qwen3's template does for enable_thinking=False; true (the default) is the template's
    // enable_thinking undefined. Other families ignore it.
    bool enable_thinking = true;
};

// "none" | "qwen2" | "llama3" | "qwen3"; ConfigError listing these for anything else.
ChatFamily parse_chat_family(const std::string& name);
const char* chat_family_name(ChatFamily family);

// kNone:   content of every message, concatenated, no separators; add_generation_prompt adds
//          nothing.
// kQwen2:  "<|im_start|>{role}\n{content}<|im_end|>\n" per message, preceded by
//          "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful
//          assistant.<|im_end|>\n" when the first message is not a system message (Qwen2.5's
//          default); add_generation_prompt appends "<|im_start|>assistant\n".
// kLlama3: "<|begin_of_text|>" then "<|start_header_id|>{role}<|end_header_id|>\n\n{content
//          with leading/trailing whitespace trimmed}<|eot_id|>" per message; add_generation_prompt
//          appends "<|start_header_id|>assistant<|end_header_id|>\n\n".
// kQwen3:  Qwen3's template (tests/fixtures/chat/qwen3_chat_template.jinja) without tools: a
//          first system message as "<|im_start|>system\n{content}<|im_end|>\n" (none added when
//          absent); user (and later system) turns as in kQwen2; an assistant turn's reasoning is
//          its text before "</think>" (after "<think>"), its content the text after; the turns
//          after the last real user query (one not wrapped in <tool_response>...</tool_response>)
//          keep "<think>\n{reasoning}\n</think>\n\n" when they are the last message or have
//          reasoning, every earlier one loses it; tool_calls follow as
//          "<tool_call>\n{"name": "N", "arguments": A}\n</tool_call>" ("\n"-separated); a run of
//          "tool" messages is one user turn of "\n<tool_response>\n{content}\n</tool_response>"
//          blocks; add_generation_prompt appends "<|im_start|>assistant\n", plus
//          "<think>\n\n</think>\n\n" when options.enable_thinking is false.
// ValueError for an empty message list, an empty role, or tool_calls in a family other than qwen3.
std::string apply_chat_template(ChatFamily family, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const ChatOptions& options = {});

// What the template appends for add_generation_prompt, alone (the agent loop appends it after
// tool results): kQwen2 "<|im_start|>assistant\n", kQwen3 the same plus the empty think block
// when options.enable_thinking is false, kLlama3 "<|start_header_id|>assistant<|end_header_id|>\n\n",
// kNone "".
std::string generation_prompt(ChatFamily family, const ChatOptions& options = {});

// Token strings that end an assistant turn for the family (look up their ids with
// Tokenizer::token_to_id): kQwen2 and kQwen3 {"<|im_end|>", "<|endoftext|>"}, kLlama3
// {"<|eot_id|>", "<|end_of_text|>"}, kNone {}.
std::vector<std::string> chat_stop_tokens(ChatFamily family);

}  // namespace rlpt::tokenizer
