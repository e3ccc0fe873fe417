#pragma once
// Chat formatting: renders a conversation into the prompt text a chat model was trained on,
// exactly as the model's Hugging Face chat template does (for plain text messages; tools and
// multimodal content are out of scope). Torch-free. Encode the result with
// allow_special=true so the template's control tokens become their ids.

#include <string>
#include <vector>

namespace rlpt::tokenizer {

enum class ChatFamily {
    kNone,    // base models: the messages' content concatenated in order, nothing added
    kQwen2,   // Qwen2 / Qwen2.5 ChatML (Qwen3 without thinking uses the same turns)
    kLlama3,  // Llama-3 (3.0) instruct
};

struct ChatMessage {
    std::string role;     // "system", "user", "assistant", ... (non-empty)
    std::string content;  // UTF-8
};

// "none" | "qwen2" | "llama3"; ConfigError listing these for anything else.
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
// ValueError for an empty message list or an empty role.
std::string apply_chat_template(ChatFamily family, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt);

// Token strings that end an assistant turn for the family (look up their ids with
// Tokenizer::token_to_id): kQwen2 {"<|im_end|>", "<|endoftext|>"}, kLlama3 {"<|eot_id|>",
// "<|end_of_text|>"}, kNone {}.
std::vector<std::string> chat_stop_tokens(ChatFamily family);

}  // namespace rlpt::tokenizer
