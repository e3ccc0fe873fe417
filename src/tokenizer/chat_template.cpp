#include "rlpt/tokenizer/chat_template.h"

#include <algorithm>

#include "rlpt/core/error.h"
#include "tokenizer/unicode.h"

namespace rlpt::tokenizer {

namespace {

constexpr const char* kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// Python's str.isspace(), which Jinja's `trim` uses: White_Space plus the information
// separators U+001C..U+001F.
bool python_space(char32_t cp) { return detail::is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

// Python's str.strip() on UTF-8 (invalid bytes count as content).
std::string python_strip(const std::string& s) {
    size_t begin = s.size();
    size_t end = 0;
    size_t i = 0;
    while (i < s.size()) {
        const size_t at = i;
        char32_t cp = 0;
        const bool valid = detail::utf8_next(s, i, cp);
        if (!valid) i = at + 1;
        if (!valid || !python_space(cp)) {
            begin = std::min(begin, at);
            end = i;
        }
    }
    return begin < end ? s.substr(begin, end - begin) : std::string();
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
                out +=
                    "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + python_strip(m.content) + "<|eot_id|>";
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
