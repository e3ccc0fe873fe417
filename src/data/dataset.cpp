#include "rlpt/data/dataset.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "rlpt/core/error.h"

namespace rlpt::data {

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Looks up a dotted key path; nullptr when any component is missing.
const nlohmann::json* lookup(const nlohmann::json& record, const std::string& key) {
    const nlohmann::json* node = &record;
    std::size_t pos = 0;
    while (true) {
        std::size_t dot = key.find('.', pos);
        std::string part = key.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
        if (!node->is_object()) return nullptr;
        auto it = node->find(part);
        if (it == node->end()) return nullptr;
        node = &*it;
        if (dot == std::string::npos) return node;
        pos = dot + 1;
    }
}

const char* type_name(const nlohmann::json& v) { return v.type_name(); }

std::string shorten(const std::string& s, std::size_t n = 80) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

// Lines (1-based) on which each element of a top-level JSON array starts. The text must be
// valid JSON (parse it first).
std::vector<int64_t> array_element_lines(const std::string& text) {
    std::vector<int64_t> lines;
    int64_t line = 1;
    int depth = 0;
    bool in_string = false;
    bool escape = false;
    bool expect_value = false;
    for (char c : text) {
        if (c == '\n') ++line;
        if (in_string) {
            if (escape) {
                escape = false;
            } else if (c == '\\') {
                escape = true;
            } else if (c == '"') {
                in_string = false;
            }
            continue;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') continue;
        if (depth == 1 && expect_value && c != ']') {
            lines.push_back(line);
            expect_value = false;
        }
        if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            ++depth;
            if (depth == 1) expect_value = true;
        } else if (c == ']' || c == '}') {
            --depth;
        } else if (c == ',' && depth == 1) {
            expect_value = true;
        }
    }
    return lines;
}

// Records nested deeper than this are refused while parsing: nlohmann's dump() and copies
// recurse once per level, so a line of 100k brackets would overflow the stack later (in an
// error message, or when copied into Example::extra).
constexpr int kMaxJsonDepth = 200;

// Parses JSON text; any parser complaint (syntax, number overflow, nesting) is an IoError
// "<where>: bad JSON: ...".
nlohmann::json parse_json_text(const std::string& text, const std::string& where) {
    auto depth_guard = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
        if (depth > kMaxJsonDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                      event == nlohmann::json::parse_event_t::array_start)) {
            RLPT_THROW(IoError, "{}: bad JSON: nested deeper than {} levels", where, kMaxJsonDepth);
        }
        return true;
    };
    try {
        return nlohmann::json::parse(text, depth_guard);
    } catch (const nlohmann::json::exception& e) {
        RLPT_THROW(IoError, "{}: bad JSON: {}", where, e.what());
    }
}

std::vector<Example> read_json_lines(const std::string& path, const std::string& text, const DatasetOptions& options) {
    std::vector<Example> out;
    std::istringstream in(text);
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        const std::string where = fmt::format("{}:{}", path, line_no);
        const nlohmann::json record = parse_json_text(line, where);
        out.push_back(example_from_json(record, options, where, static_cast<int64_t>(out.size())));
    }
    return out;
}

std::vector<Example> read_json_array(const std::string& path, const std::string& text, const DatasetOptions& options) {
    const nlohmann::json doc = parse_json_text(text, path);
    RLPT_CHECK_KIND(IoError, doc.is_array(), "{}: expected a JSON array of records, got {}", path, type_name(doc));
    const std::vector<int64_t> lines = array_element_lines(text);
    RLPT_ASSERT(lines.size() == doc.size());
    std::vector<Example> out;
    out.reserve(doc.size());
    for (std::size_t i = 0; i < doc.size(); ++i) {
        const std::string where = fmt::format("{}:{} (element {})", path, lines[i], i);
        out.push_back(example_from_json(doc[i], options, where, static_cast<int64_t>(i)));
    }
    return out;
}

}  // namespace

AnswerExtraction parse_answer_extraction(const std::string& s) {
    if (s == "none") return AnswerExtraction::kNone;
    if (s == "gsm8k") return AnswerExtraction::kGsm8k;
    RLPT_THROW(ConfigError, "unknown answer extraction '{}' (expected 'none' or 'gsm8k')", s);
}

void validate_dataset_options(const DatasetOptions& o) {
    RLPT_CHECK_KIND(ConfigError, !o.prompt_key.empty(), "dataset: prompt_key is empty");
    RLPT_CHECK_KIND(ConfigError, !o.answer_key.empty(), "dataset: answer_key is empty");
    if (!o.prompt_template.empty()) {
        const std::size_t at = o.prompt_template.find("{prompt}");
        RLPT_CHECK_KIND(ConfigError,
                        at != std::string::npos && o.prompt_template.find("{prompt}", at + 1) == std::string::npos,
                        "dataset: prompt_template must contain '{{prompt}}' exactly once, got \"{}\"",
                        o.prompt_template);
    }
}

DatasetOptions gsm8k_dataset_options() {
    DatasetOptions o;
    o.prompt_key = "question";
    o.answer_key = "answer";
    o.data_source_key = "";
    o.default_data_source = "openai/gsm8k";
    o.answer_extraction = AnswerExtraction::kGsm8k;
    o.prompt_suffix = " " + std::string(kGsm8kInstruction);
    return o;
}

std::optional<std::string> gsm8k_extract_answer(std::string_view solution) {
    constexpr std::string_view kMarker = "#### ";
    std::size_t pos = solution.rfind(kMarker);
    while (pos != std::string_view::npos) {
        std::size_t i = pos + kMarker.size();
        std::size_t start = i;
        if (i < solution.size() && solution[i] == '-') ++i;
        std::size_t body = i;
        while (i < solution.size() &&
               ((solution[i] >= '0' && solution[i] <= '9') || solution[i] == '.' || solution[i] == ',')) {
            ++i;
        }
        if (i > body) {
            std::string answer;
            for (char c : solution.substr(start, i - start)) {
                if (c != ',') answer += c;
            }
            return answer;
        }
        if (pos == 0) break;
        pos = solution.rfind(kMarker, pos - 1);
    }
    return std::nullopt;
}

Example example_from_json(const nlohmann::json& record, const DatasetOptions& options, const std::string& where,
                          int64_t index) {
    validate_dataset_options(options);
    RLPT_CHECK_KIND(IoError, record.is_object(), "{}: expected a JSON object, got {}", where, type_name(record));
    auto require = [&](const std::string& key) -> const nlohmann::json& {
        const nlohmann::json* v = lookup(record, key);
        RLPT_CHECK_KIND(IoError, v != nullptr, "{}: missing key '{}'", where, key);
        return *v;
    };
    Example e;
    e.index = index;

    const nlohmann::json& prompt = require(options.prompt_key);
    RLPT_CHECK_KIND(IoError, prompt.is_string(), "{}: key '{}': expected a string, got {} {}", where,
                    options.prompt_key, type_name(prompt), shorten(prompt.dump()));
    e.prompt = prompt.get<std::string>();
    if (!options.prompt_template.empty()) {
        const std::size_t at = options.prompt_template.find("{prompt}");
        e.prompt = options.prompt_template.substr(0, at) + e.prompt + options.prompt_template.substr(at + 8);
    }
    e.prompt += options.prompt_suffix;

    if (!options.response_key.empty()) {
        const nlohmann::json* r = lookup(record, options.response_key);
        RLPT_CHECK_KIND(IoError, r != nullptr || !options.require_response, "{}: missing key '{}'", where,
                        options.response_key);
        if (r != nullptr) {
            RLPT_CHECK_KIND(IoError, r->is_string(), "{}: key '{}': expected a string, got {} {}", where,
                            options.response_key, type_name(*r), shorten(r->dump()));
            e.response = r->get<std::string>();
        }
    }

    const nlohmann::json* answer = lookup(record, options.answer_key);
    if (answer == nullptr) {
        RLPT_CHECK_KIND(IoError, options.answer != AnswerNeed::kRequired, "{}: missing key '{}'", where,
                        options.answer_key);
        RLPT_CHECK_KIND(IoError, options.answer != AnswerNeed::kOrResponse || e.response.has_value(),
                        "{}: missing key '{}' (or '{}', whose text would be the ground truth)", where,
                        options.answer_key, options.response_key);
        if (e.response) e.ground_truth = *e.response;
    } else if (answer->is_string()) {
        e.ground_truth = answer->get<std::string>();
    } else if (answer->is_number() && options.answer_extraction == AnswerExtraction::kNone) {
        e.ground_truth = answer->dump();
    } else {
        RLPT_THROW(IoError, "{}: key '{}': expected a string{}, got {} {}", where, options.answer_key,
                   options.answer_extraction == AnswerExtraction::kNone ? " or a number" : "", type_name(*answer),
                   shorten(answer->dump()));
    }
    if (answer != nullptr && options.answer_extraction == AnswerExtraction::kGsm8k) {
        std::optional<std::string> extracted = gsm8k_extract_answer(e.ground_truth);
        RLPT_CHECK_KIND(IoError, extracted.has_value(), "{}: key '{}': no '#### <number>' answer in \"{}\"", where,
                        options.answer_key, shorten(e.ground_truth));
        e.ground_truth = std::move(*extracted);
    }

    const nlohmann::json* ds = options.data_source_key.empty() ? nullptr : lookup(record, options.data_source_key);
    if (ds != nullptr) {
        RLPT_CHECK_KIND(IoError, ds->is_string() && !ds->get<std::string>().empty(),
                        "{}: key '{}': expected a non-empty string, got {}", where, options.data_source_key,
                        shorten(ds->dump()));
        e.data_source = ds->get<std::string>();
    } else {
        RLPT_CHECK_KIND(IoError, !options.default_data_source.empty(),
                        "{}: missing key '{}' and no default data_source is configured", where,
                        options.data_source_key.empty() ? std::string("data_source") : options.data_source_key);
        e.data_source = options.default_data_source;
    }

    e.extra = nlohmann::json::object();
    for (const std::string& key : options.extra_keys) e.extra[key] = require(key);
    return e;
}

std::vector<Example> load_dataset(const std::string& path, const DatasetOptions& options) {
    validate_dataset_options(options);
    const bool jsonl = ends_with(path, ".jsonl");
    RLPT_CHECK_KIND(ConfigError, jsonl || ends_with(path, ".json"),
                    "dataset '{}': unsupported file type (supported: .jsonl, .json)", path);
    std::ifstream file(path, std::ios::binary);
    RLPT_CHECK_KIND(IoError, file.good(), "cannot open dataset file '{}'", path);
    std::ostringstream buffer;
    buffer << file.rdbuf();
    RLPT_CHECK_KIND(IoError, !file.bad(), "error reading dataset file '{}'", path);
    const std::string text = buffer.str();

    std::vector<Example> examples;
    const std::size_t first = text.find_first_not_of(" \t\r\n");
    if (!jsonl && first != std::string::npos && text[first] == '[') {
        examples = read_json_array(path, text, options);
    } else {
        examples = read_json_lines(path, text, options);
    }
    RLPT_CHECK_KIND(IoError, !examples.empty(), "dataset file '{}' holds no records", path);
    return examples;
}

}  // namespace rlpt::data
