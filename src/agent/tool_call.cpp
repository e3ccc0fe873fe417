#include "rlpt/agent/tool_call.h"

#include <cmath>

#include "rlpt/core/error.h"

namespace rlpt::agent {
namespace {

constexpr const char* kQwenDefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr const char* kOpen = "<tool_call>";
constexpr const char* kClose = "</tool_call>";

std::string json_type(const nlohmann::json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_string()) return "string";
    if (v.is_array()) return "array";
    return "object";
}

bool has_type(const nlohmann::json& v, const std::string& type) {
    const std::string t = json_type(v);
    if (type == "number") return t == "number" || t == "integer";
    if (type == "integer" && t == "number") {
        const double d = v.get<double>();
        return std::isfinite(d) && d == std::floor(d);
    }
    return t == type;
}

std::string check_value(const nlohmann::json& schema, const nlohmann::json& v, const std::string& path) {
    if (!schema.is_object()) return "";
    const std::string at = path.empty() ? "arguments" : "argument '" + path + "'";
    if (auto t = schema.find("type"); t != schema.end()) {
        std::vector<std::string> types;
        if (t->is_string()) types.push_back(t->get<std::string>());
        else if (t->is_array())
            for (const auto& x : *t)
                if (x.is_string()) types.push_back(x.get<std::string>());
        bool ok = types.empty();
        std::string want;
        for (const auto& ty : types) {
            ok = ok || has_type(v, ty);
            want += (want.empty() ? "" : " or ") + ty;
        }
        if (!ok) return fmt::format("{}: expected {}, got {}", at, want, json_type(v));
    }
    if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
        bool found = false;
        for (const auto& x : *e) found = found || x == v;
        if (!found) return fmt::format("{}: {} is not one of {}", at, v.dump(), e->dump());
    }
    if (v.is_number()) {
        const double d = v.get<double>();
        if (auto m = schema.find("minimum"); m != schema.end() && m->is_number() && d < m->get<double>())
            return fmt::format("{}: {} is below the minimum {}", at, v.dump(), m->dump());
        if (auto m = schema.find("maximum"); m != schema.end() && m->is_number() && d > m->get<double>())
            return fmt::format("{}: {} is above the maximum {}", at, v.dump(), m->dump());
    }
    if (v.is_object()) {
        const auto props = schema.find("properties");
        if (auto r = schema.find("required"); r != schema.end() && r->is_array())
            for (const auto& k : *r)
                if (k.is_string() && !v.contains(k.get<std::string>()))
                    return fmt::format("argument '{}{}' is required", path.empty() ? "" : path + ".",
                                       k.get<std::string>());
        const bool closed = schema.contains("additionalProperties") && schema["additionalProperties"] == false;
        for (auto it = v.begin(); it != v.end(); ++it) {
            const std::string sub = path.empty() ? it.key() : path + "." + it.key();
            if (props != schema.end() && props->is_object() && props->contains(it.key())) {
                if (auto err = check_value((*props)[it.key()], it.value(), sub); !err.empty()) return err;
            } else if (closed) {
                return fmt::format("argument '{}' is not accepted", sub);
            }
        }
    }
    if (v.is_array())
        if (auto items = schema.find("items"); items != schema.end())
            for (size_t i = 0; i < v.size(); ++i)
                if (auto err = check_value(*items, v[i], fmt::format("{}[{}]", path, i)); !err.empty()) return err;
    return "";
}

// Byte offsets of UTF-8 code points (a continuation byte never starts one).
std::vector<size_t> code_point_starts(const std::string& s) {
    std::vector<size_t> starts;
    for (size_t i = 0; i < s.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) starts.push_back(i);
    return starts;
}

}  // namespace

void check_tool_format(const std::string& format) {
    RLPT_CHECK_KIND(ConfigError, format == "hermes",
                    "rollout.multi_turn.format: unknown tool-call format '{}' (valid: hermes)", format);
}

ParsedTurn parse_tool_calls(const std::string& format, const std::string& text) {
    check_tool_format(format);
    ParsedTurn turn;
    const std::string open = kOpen, close = kClose;
    if (text.find(open) == std::string::npos || text.find(close) == std::string::npos) {
        turn.content = text;
        return turn;
    }
    size_t pos = 0;
    for (;;) {
        const size_t a = text.find(open, pos);
        const size_t b = a == std::string::npos ? a : text.find(close, a + open.size());
        if (b == std::string::npos) {
            turn.content += text.substr(pos);
            break;
        }
        turn.content += text.substr(pos, a - pos);
        const std::string body = text.substr(a + open.size(), b - a - open.size());
        pos = b + close.size();
        ParsedToolCall call;
        nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
        if (j.is_discarded() || !j.is_object()) {
            call.error = "Invalid tool call: the text between <tool_call> and </tool_call> is not a JSON object";
        } else if (!j.contains("name") || !j["name"].is_string()) {
            call.error = "Invalid tool call: no \"name\" string";
        } else {
            call.name = j["name"].get<std::string>();
            nlohmann::json args = j.contains("arguments") ? j["arguments"] : nlohmann::json::object();
            if (args.is_string()) args = nlohmann::json::parse(args.get<std::string>(), nullptr, false);
            if (args.is_discarded() || !args.is_object())
                call.error = fmt::format("Invalid JSON in arguments for '{}': expected an object", call.name);
            else call.arguments = std::move(args);
        }
        turn.calls.push_back(std::move(call));
    }
    return turn;
}

std::string check_arguments(const nlohmann::json& schema, const nlohmann::json& args) {
    return check_value(schema, args, "");
}

std::string tojson(const nlohmann::json& j) {
    if (j.is_object()) {
        std::string out = "{";
        bool first = true;
        for (auto it = j.begin(); it != j.end(); ++it) {
            out += (first ? "" : ", ") + nlohmann::json(it.key()).dump() + ": " + tojson(it.value());
            first = false;
        }
        return out + "}";
    }
    if (j.is_array()) {
        std::string out = "[";
        for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + tojson(j[i]);
        return out + "]";
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json function_tool(const std::string& name, const std::string& description,
                             const nlohmann::json& parameters) {
    return {{"type", "function"},
            {"function", {{"name", name}, {"description", description}, {"parameters", parameters}}}};
}

void check_tool_family(tokenizer::ChatFamily family, const std::string& key) {
    RLPT_CHECK_KIND(ConfigError, family != tokenizer::ChatFamily::kLlama3,
                    "{}: tool calls are implemented for model.chat_template qwen2, qwen3 and none, not llama3", key);
}

namespace {

bool chatml(tokenizer::ChatFamily family) {
    return family == tokenizer::ChatFamily::kQwen2 || family == tokenizer::ChatFamily::kQwen3;
}

}  // namespace

std::string render_prompt_with_tools(tokenizer::ChatFamily family, const std::vector<tokenizer::ChatMessage>& messages,
                                     const std::vector<nlohmann::json>& tools, const tokenizer::ChatOptions& options) {
    if (!chatml(family) || tools.empty())
        return tokenizer::apply_chat_template(family, messages, /*add_generation_prompt=*/true, options);
    const bool has_system = !messages.empty() && messages.front().role == "system";
    // Qwen2.5 puts its default system text before the tools when there is no system message; Qwen3 nothing.
    std::string out = "<|im_start|>system\n";
    if (has_system) out += messages.front().content + "\n\n";
    else if (family == tokenizer::ChatFamily::kQwen2) out += std::string(kQwenDefaultSystem) + "\n\n";
    out += "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
           "function signatures within <tools></tools> XML tags:\n<tools>";
    for (const auto& t : tools) out += "\n" + tojson(t);
    out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
           "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
           "<args-json-object>}\n</tool_call><|im_end|>\n";
    if (family == tokenizer::ChatFamily::kQwen3) {
        // The turns as without tools, less the system turn the tools block replaced.
        std::string turns = tokenizer::apply_chat_template(family, messages, /*add_generation_prompt=*/true, options);
        const std::string system =
            has_system ? "<|im_start|>system\n" + messages.front().content + "<|im_end|>\n" : std::string();
        RLPT_ASSERT(turns.compare(0, system.size(), system) == 0);
        return out + turns.substr(system.size());
    }
    for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i)
        out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
    return out + tokenizer::generation_prompt(family, options);
}

ObservationPieces render_tool_observation(tokenizer::ChatFamily family, const std::vector<std::string>& tool_texts,
                                          bool turn_closed, const tokenizer::ChatOptions& options) {
    ObservationPieces o;
    o.texts = tool_texts;
    if (chatml(family)) {
        // <|im_end|> ends generation; the template follows it with "\n" (verl's Qwen boundary).
        o.pieces.push_back(std::string(turn_closed ? "" : "<|im_end|>") + "\n<|im_start|>user\n<tool_response>\n");
        for (size_t i = 1; i < tool_texts.size(); ++i) o.pieces.push_back("\n</tool_response>\n<tool_response>\n");
        o.pieces.push_back("\n</tool_response><|im_end|>\n" + tokenizer::generation_prompt(family, options));
    } else {
        check_tool_family(family, "model.chat_template");
        o.pieces.push_back("<tool_response>");
        for (size_t i = 1; i < tool_texts.size(); ++i) o.pieces.push_back("</tool_response><tool_response>");
        o.pieces.push_back("</tool_response>");
    }
    return o;
}

ObservationPieces render_user_observation(tokenizer::ChatFamily family, const std::string& text, bool turn_closed,
                                          const tokenizer::ChatOptions& options) {
    check_tool_family(family, "model.chat_template");
    if (!chatml(family)) return {{"", ""}, {text}};
    return {{std::string(turn_closed ? "" : "<|im_end|>") + "\n<|im_start|>user\n",
             "<|im_end|>\n" + tokenizer::generation_prompt(family, options)},
            {text}};
}

std::string truncate_tool_text(const std::string& text, int64_t max_chars, const std::string& side) {
    RLPT_CHECK_KIND(ConfigError, side == "left" || side == "right" || side == "middle",
                    "rollout.multi_turn.tool_response_truncate_side: '{}' (valid: left, right, middle)", side);
    const auto starts = code_point_starts(text);
    const auto n = static_cast<size_t>(std::max<int64_t>(max_chars, 0));
    if (starts.size() <= n) return text;
    auto first = [&](size_t k) { return text.substr(0, k < starts.size() ? starts[k] : text.size()); };
    auto last = [&](size_t k) { return k == 0 ? std::string() : text.substr(starts[starts.size() - k]); };
    if (side == "left") return "(truncated)..." + last(n);
    if (side == "right") return first(n) + "...(truncated)";
    return first(n / 2) + "...(truncated)..." + last(n / 2);
}

}  // namespace rlpt::agent
