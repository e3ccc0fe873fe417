#include "tokenizer/files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "rlpt/core/error.h"

namespace rlpt::tokenizer::detail {

namespace fs = std::filesystem;

std::string path_join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

std::string parent_dir(const std::string& path) {
    const fs::path parent = fs::path(path).parent_path();
    return parent.empty() ? std::string(".") : parent.string();
}

bool is_regular_file(const std::string& path) {
    std::error_code ec;
    return fs::is_regular_file(path, ec);
}

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    RLPT_CHECK_KIND(IoError, in.good(), "cannot read {}: {}", path, std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    RLPT_CHECK_KIND(IoError, !in.bad(), "error while reading {}", path);
    return ss.str();
}

void write_text_file(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        RLPT_CHECK_KIND(IoError, out.good(), "cannot write {}: {}", tmp, std::strerror(errno));
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
        out.flush();
        RLPT_CHECK_KIND(IoError, out.good(), "error while writing {}: {}", tmp, std::strerror(errno));
    }
    std::error_code ec;
    fs::rename(tmp, path, ec);
    RLPT_CHECK_KIND(IoError, !ec, "cannot rename {} to {}: {}", tmp, path, ec.message());
}

void make_dirs(const std::string& dir) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    RLPT_CHECK_KIND(IoError, !ec, "cannot create directory {}: {}", dir, ec.message());
    RLPT_CHECK_KIND(IoError, fs::is_directory(dir, ec), "{} exists and is not a directory", dir);
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
    // tokenizer.json is ~6 levels deep. Deeper nesting is refused while parsing: dump() (used
    // in error messages) and copies recurse per level and would overflow the stack.
    constexpr int kMaxDepth = 64;
    auto depth_guard = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
        if (depth > kMaxDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                  event == nlohmann::json::parse_event_t::array_start)) {
            RLPT_THROW(IoError, "{}: invalid JSON: nested deeper than {} levels", source, kMaxDepth);
        }
        return true;
    };
    try {
        return nlohmann::json::parse(text, depth_guard);
    } catch (const nlohmann::json::exception& e) {  // syntax errors, number overflow (1e999)
        RLPT_THROW(IoError, "{}: invalid JSON: {}", source, e.what());
    }
}

namespace {

// tokenizer_config.json "<name>_token": a string, {"content": string}, or null (-> -1).
int64_t config_token_id(const nlohmann::json& value, const std::string& key, const std::string& source,
                        const std::function<int64_t(std::string_view)>& lookup) {
    if (value.is_null()) return -1;
    std::string content;
    if (value.is_string()) {
        content = value.get<std::string>();
    } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
        content = value["content"].get<std::string>();
    } else {
        RLPT_THROW(IoError, "{}: \"{}\" must be a string, {{\"content\": ...}} or null, got {}", source, key,
                   value.dump());
    }
    const int64_t id = lookup(content);
    RLPT_CHECK_KIND(IoError, id >= 0, "{}: {} '{}' is not in the tokenizer's vocabulary", source, key, content);
    return id;
}

// config.json "<name>_token_id": an int, a list of ints (first wins), or null (-> -1).
int64_t config_json_id(const nlohmann::json& value, const std::string& key, const std::string& source,
                       int64_t vocab_size) {
    const nlohmann::json* v = &value;
    if (v->is_array()) {
        if (v->empty()) return -1;
        v = &(*v)[0];
    }
    if (v->is_null()) return -1;
    RLPT_CHECK_KIND(IoError, v->is_number_integer(),
                    "{}: \"{}\" must be an integer, a list of integers or null, got {}", source, key, value.dump());
    const int64_t id = v->get<int64_t>();
    RLPT_CHECK_KIND(IoError, id >= 0 && id < vocab_size, "{}: {} = {} is outside the tokenizer's vocabulary (size {})",
                    source, key, id, vocab_size);
    return id;
}

}  // namespace

SpecialTokenIds resolve_special_ids(const std::string& dir, const std::function<int64_t(std::string_view)>& lookup,
                                    int64_t vocab_size, SpecialTokenIds defaults) {
    nlohmann::json tok_config;
    nlohmann::json model_config;
    const std::string tok_config_path = path_join(dir, "tokenizer_config.json");
    const std::string model_config_path = path_join(dir, "config.json");
    if (is_regular_file(tok_config_path)) {
        tok_config = parse_json(read_text_file(tok_config_path), tok_config_path);
        RLPT_CHECK_KIND(IoError, tok_config.is_object(), "{}: expected a JSON object", tok_config_path);
    }
    if (is_regular_file(model_config_path)) {
        model_config = parse_json(read_text_file(model_config_path), model_config_path);
        RLPT_CHECK_KIND(IoError, model_config.is_object(), "{}: expected a JSON object", model_config_path);
    }
    SpecialTokenIds ids = defaults;
    auto resolve = [&](const char* name, int64_t& out) {
        const std::string tok_key = std::string(name) + "_token";
        const std::string id_key = std::string(name) + "_token_id";
        if (tok_config.is_object() && tok_config.contains(tok_key)) {
            out = config_token_id(tok_config[tok_key], tok_key, tok_config_path, lookup);
        } else if (model_config.is_object() && model_config.contains(id_key)) {
            out = config_json_id(model_config[id_key], id_key, model_config_path, vocab_size);
        }
    };
    resolve("bos", ids.bos);
    resolve("eos", ids.eos);
    resolve("pad", ids.pad);
    return ids;
}

}  // namespace rlpt::tokenizer::detail
