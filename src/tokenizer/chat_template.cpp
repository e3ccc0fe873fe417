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

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}

// Python's str.lstrip('\n') / rstrip('\n') / strip('\n').
std::string lstrip_nl(const std::string& s) {
    const size_t b = s.find_first_not_of('\n');
    return b == std::string::npos ? std::string() : s.substr(b);
}
std::string rstrip_nl(const std::string& s) {
    const size_t e = s.find_last_not_of('\n');
    return e == std::string::npos ? std::string() : s.substr(0, e + 1);
}
std::string strip_nl(const std::string& s) { return lstrip_nl(rstrip_nl(s)); }

// Qwen3's template, statement by statement (tests/fixtures/chat/qwen3_chat_template.jinja; the
// fixture test compares this with jinja2's rendering of it).
std::string render_qwen3(const std::vector<ChatMessage>& messages) {
    std::string out;
    const bool first_system = messages.front().role == "system";
    if (first_system) out += "<|im_start|>system\n" + messages.front().content + "<|im_end|>\n";
    // The last user message that is a query, not tool results (ns.last_query_index).
    size_t last_query = messages.size() - 1;
    for (size_t i = messages.size(); i-- > 0;) {
        const auto& c = messages[i].content;
        if (messages[i].role == "user" && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = i;
            break;
        }
    }
    for (size_t i = 0; i < messages.size(); ++i) {
        const auto& m = messages[i];
        const bool last = i + 1 == messages.size();
        if (m.role == "user" || (m.role == "system" && i > 0)) {
            out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
        } else if (m.role == "assistant") {
            std::string content = m.content, reasoning;
            if (const size_t close = content.find("</think>"); close != std::string::npos) {
                reasoning = rstrip_nl(content.substr(0, close));
                if (const size_t open = reasoning.rfind("<think>"); open != std::string::npos)
                    reasoning = reasoning.substr(open + 7);
                reasoning = lstrip_nl(reasoning);
                content = lstrip_nl(content.substr(content.rfind("</think>") + 8));
            }
            if (i > last_query && (last || !reasoning.empty())) {
                out += "<|im_start|>assistant\n<think>\n" + strip_nl(reasoning) + "\n</think>\n\n" + lstrip_nl(content);
            } else {
                out += "<|im_start|>assistant\n" + content;
            }
            for (size_t k = 0; k < m.tool_calls.size(); ++k) {
                if (k > 0 || !content.empty()) out += "\n";
                out += "<tool_call>\n{\"name\": \"" + m.tool_calls[k].name +
                       "\", \"arguments\": " + m.tool_calls[k].arguments + "}\n</tool_call>";
            }
            out += "<|im_end|>\n";
        } else if (m.role == "tool") {
            if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
            if (last || messages[i + 1].role != "tool") out += "<|im_end|>\n";
        }
        // Any other role (or a first system message, written above) renders nothing, as in the template.
    }
    return out;
}

}  // namespace

ChatFamily parse_chat_family(const std::string& name) {
    if (name == "none") return ChatFamily::kNone;
    if (name == "qwen2") return ChatFamily::kQwen2;
    if (name == "llama3") return ChatFamily::kLlama3;
    if (name == "qwen3") return ChatFamily::kQwen3;
    RLPT_THROW(ConfigError, "unknown chat template family '{}' (choices: none, qwen2, llama3, qwen3)", name);
}

const char* chat_family_name(ChatFamily family) {
    switch (family) {
        case ChatFamily::kNone: return "none";
        case ChatFamily::kQwen2: return "qwen2";
        case ChatFamily::kLlama3: return "llama3";
        case ChatFamily::kQwen3: return "qwen3";
    }
    return "?";
}

std::string generation_prompt(ChatFamily family, const ChatOptions& options) {
    switch (family) {
        case ChatFamily::kNone: return "";
        case ChatFamily::kQwen2: return "<|im_start|>assistant\n";
        case ChatFamily::kQwen3:
            return options.enable_thinking ? "<|im_start|>assistant\n"
                                           : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        case ChatFamily::kLlama3: return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    }
    return "";
}

std::string apply_chat_template(ChatFamily family, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const ChatOptions& options) {
    RLPT_CHECK(!messages.empty(), "apply_chat_template({}): no messages", chat_family_name(family));
    for (size_t i = 0; i < messages.size(); ++i) {
        RLPT_CHECK(!messages[i].role.empty(), "apply_chat_template({}): message {} has an empty role",
                   chat_family_name(family), i);
        RLPT_CHECK(messages[i].tool_calls.empty() || family == ChatFamily::kQwen3,
                   "apply_chat_template({}): message {} has tool_calls, which only qwen3 renders here",
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
            if (add_generation_prompt) out += generation_prompt(family, options);
            break;
        case ChatFamily::kQwen3:
            out = render_qwen3(messages);
            if (add_generation_prompt) out += generation_prompt(family, options);
            break;
        case ChatFamily::kLlama3:
            out += "<|begin_of_text|>";
            for (const auto& m : messages) {
                out +=
                    "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + python_strip(m.content) + "<|eot_id|>";
            }
            if (add_generation_prompt) out += generation_prompt(family, options);
            break;
    }
    return out;
}

std::vector<std::string> chat_stop_tokens(ChatFamily family) {
    switch (family) {
        case ChatFamily::kNone: return {};
        case ChatFamily::kQwen2:
        case ChatFamily::kQwen3: return {"<|im_end|>", "<|endoftext|>"};
        case ChatFamily::kLlama3: return {"<|eot_id|>", "<|end_of_text|>"};
    }
    return {};
}

}  // namespace rlpt::tokenizer
