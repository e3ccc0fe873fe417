#include "rlpt/tokenizer/chat_template.h"

#include "rlpt/core/error.h"
#include "tokenizer/unicode.h"

namespace rlpt::tokenizer {

namespace {

constexpr const char* kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// Python's str.isspace(), which Jinja's `trim` uses: White_Space plus the information
// separators U+001C..U+001F.
bool python_space(char32_t cp) { return detail::is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

std::string python_strip(const std::string& s) {
    size_t begin = 0;
    size_t end = s.size();
    size_t i = 0;
    char32_t cp = 0;
    // Leading: advance while whitespace.
    while (i < s.size()) {
        size_t next = i;
        if (!detail::utf8_next(s, next, cp) || !python_space(cp)) break;
        i = next;
    }
    begin = i;
    // Trailing: remember the end of the last non-space character.
    size_t last_end = begin;
    while (i < s.size()) {
        size_t next = i;
        if (!detail::utf8_next(s, next, cp)) {
            next = i + 1;  // invalid byte: keep it as content
            last_end = next;
        } else if (!python_space(cp)) {
            last_end = next;
        }
        i = next;
    }
    end = last_end;
    return s.substr(begin, end - begin);
}

}  // namespace

ChatFamily parse_chat_family(const std::string& name) {
    if (name == "none") return ChatFamily::kNone;
    if (name == "qwen2") return ChatFamily::kQwen2;
    if (name == "llama3") return ChatFamily::kLlama3;
    RLPT_THROW(ConfigError, "unknown chat template family '{}' (choices: none, qwen2, llama3)", name);
}

const char* chat_family_name(ChatFamily family) {
    switch (family) {
        case ChatFamily::kNone: return "none";
        case ChatFamily::kQwen2: return "qwen2";
        case ChatFamily::kLlama3: return "llama3";
    }
    return "?";
}

std::string apply_chat_template(ChatFamily family, const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) {
    RLPT_CHECK(!messages.empty(), "apply_chat_template({}): no messages", chat_family_name(family));
    for (size_t i = 0; i < messages.size(); ++i) {
        RLPT_CHECK(!messages[i].role.empty(), "apply_chat_template({}): message {} has an empty role",
                   chat_family_name(family), i);
    }
    std::string out;
    switch (family) {
        case ChatFamily::kNone:
            for (const auto& m : messages) out += m.content;
            break;
        case ChatFamily::kQwen2:
            if (messages.front().role != "system") {
                out += "<|im_start|>system\n";
                out += kQwenDefaultSystem;
                out += "<|im_end|>\n";
            }
            for (const auto& m : messages) {
                out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
            }
            if (add_generation_prompt) out += "<|im_start|>assistant\n";
            break;
        case ChatFamily::kLlama3:
            out += "<|begin_of_text|>";
            for (const auto& m : messages) {
                out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + python_strip(m.content) +
                       "<|eot_id|>";
            }
            if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
            break;
    }
    return out;
}

std::vector<std::string> chat_stop_tokens(ChatFamily family) {
    switch (family) {
        case ChatFamily::kNone: return {};
        case ChatFamily::kQwen2: return {"<|im_end|>", "<|endoftext|>"};
        case ChatFamily::kLlama3: return {"<|eot_id|>", "<|end_of_text|>"};
    }
    return {};
}

}  // namespace rlpt::tokenizer
