// Loading, dumping and overriding the config (validation is in config_validate.cpp).
#include "rlpt/config/config.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>

#include "config/config_schema.h"
#include "rlpt/core/error.h"

namespace rlpt {
namespace {

using config_detail::Visitor;

std::string join_path(const std::string& prefix, const std::string& key) {
    return prefix.empty() ? key : prefix + "." + key;
}

std::string describe_node(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Null: return "null";
        case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Map: return "a mapping";
        default: return "nothing";
    }
}

// A YAML node as JSON: mappings and lists alike; a plain scalar that reads as a boolean, an
// integer or a number becomes one, a quoted scalar stays a string.
nlohmann::json yaml_to_json(const YAML::Node& n) {
    if (n.IsMap()) {
        nlohmann::json j = nlohmann::json::object();
        for (const auto& kv : n) j[kv.first.Scalar()] = yaml_to_json(kv.second);
        return j;
    }
    if (n.IsSequence()) {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& item : n) j.push_back(yaml_to_json(item));
        return j;
    }
    if (!n.IsScalar()) return nullptr;
    const std::string& s = n.Scalar();
    if (n.Tag() == "!") return s;  // quoted
    if (s == "true" || s == "false") return s == "true";
    if (s == "null" || s == "~") return nullptr;
    try {
        size_t used = 0;
        long long i = std::stoll(s, &used);
        if (used == s.size()) return i;
        double d = std::stod(s, &used);
        if (used == s.size()) return d;
    } catch (const std::exception&) {
    }
    return s;
}

// Records where each key came from: "<file>:<line>" from YAML marks, or "command line".
struct Origins {
    std::string file;
    std::map<std::string, std::string> overridden;  // key path -> "command line (k=v)"
    std::map<std::string, std::string>* out = nullptr;
    // Where binding errors go, so one run reports all of them (nullptr: throw the first).
    std::vector<std::string>* errors = nullptr;

    std::string of(const std::string& path, const YAML::Node& n) const {
        auto it = overridden.find(path);
        if (it != overridden.end()) return it->second;
        if (n.Mark().line >= 0) return fmt::format("{}:{}", file, n.Mark().line + 1);
        // A section an override created ("trainr.x=1" creates 'trainr'): name that override.
        const std::string prefix = path + ".";
        auto below = overridden.lower_bound(prefix);
        if (below != overridden.end() && below->first.compare(0, prefix.size(), prefix) == 0) return below->second;
        return file;
    }
};

// YAML -> structs. Every mapping visited checks afterwards that all its keys were known.
class Loader : public Visitor {
  public:
    Loader(YAML::Node node, std::string path, const Origins& origins)
        : node_(std::move(node)), path_(std::move(path)), origins_(origins) {
        if (node_ && !node_.IsNull() && !node_.IsMap()) {
            throw ConfigError(fmt::format("{}: '{}' must be a mapping of keys, got {}", origins_.of(path_, node_),
                                          path_.empty() ? "<top level>" : path_, describe_node(node_)));
        }
        check_keys();
    }

    void finish() const {
        if (!node_ || !node_.IsMap()) return;
        for (const auto& kv : node_) {
            const std::string& key = kv.first.Scalar();
            if (!seen_.count(key)) {
                std::string known;
                for (const auto& k : order_) known += (known.empty() ? "" : ", ") + k;
                guarded([&] {
                    throw ConfigError(fmt::format("{}: unknown key '{}' (known keys{}: {})",
                                                  origins_.of(join_path(path_, key), kv.first), join_path(path_, key),
                                                  path_.empty() ? "" : " in '" + path_ + "'", known));
                });
            }
        }
    }

    void value(const char* key, bool& v, const char*) override {
        guarded([&] { scalar(key, v, "true or false"); });
    }
    void value(const char* key, int64_t& v, const char*) override {
        guarded([&] { scalar(key, v, "an integer"); });
    }
    void value(const char* key, double& v, const char*) override {
        guarded([&] { scalar(key, v, "a number"); });
    }
    void value(const char* key, std::string& v, const char*) override {
        guarded([&] { scalar(key, v, "a string"); });
    }
    void value(const char* key, std::optional<int64_t>& v, const char*) override {
        guarded([&] { optional(key, v, "an integer or null"); });
    }
    void value(const char* key, std::optional<double>& v, const char*) override {
        guarded([&] { optional(key, v, "a number or null"); });
    }
    void value(const char* key, std::optional<std::string>& v, const char*) override {
        guarded([&] { optional(key, v, "a string or null"); });
    }
    void value(const char* key, std::vector<int64_t>& v, const char*) override {
        guarded([&] { sequence(key, v, "a list of integers"); });
    }
    void value(const char* key, std::vector<double>& v, const char*) override {
        guarded([&] { sequence(key, v, "a list of numbers"); });
    }
    void value(const char* key, std::vector<std::string>& v, const char*) override {
        guarded([&] { sequence(key, v, "a list of strings"); });
    }
    void value(const char* key, std::map<std::string, std::string>& v, const char*) override {
        guarded([&] { mapping(key, v); });
    }

    void section(const char* key, const char*, const std::function<void(Visitor&)>& body) override {
        guarded([&] {
            YAML::Node n = child(key);
            Loader sub(n, join_path(path_, key), origins_);
            body(sub);
            sub.finish();
        });
    }

    void list(const char* key, const char*, size_t current_size, const std::function<void(size_t)>& resize,
              const std::function<void(Visitor&, size_t)>& item) override {
        guarded([&] { list_items(key, current_size, resize, item); });
    }

  private:
    // Runs f; a ConfigError goes to the error list when there is one (all are reported together).
    template <typename F>
    void guarded(F&& f) const {
        try {
            f();
        } catch (const ConfigError& e) {
            if (!origins_.errors) throw;
            origins_.errors->push_back(e.message());
        }
    }

    void mapping(const char* key, std::map<std::string, std::string>& v) {
        YAML::Node n = child(key);
        if (!n) return;
        std::string path = join_path(path_, key);
        if (!n.IsNull() && !n.IsMap()) {
            throw ConfigError(fmt::format("{}: '{}' must be a mapping (name: value, ...), got {}", origins_.of(path, n),
                                          path, describe_node(n)));
        }
        std::map<std::string, std::string> out;
        if (n.IsMap()) {
            Loader keys(n, path, origins_);  // plain, unique keys
            for (const auto& kv : n) {
                const std::string item = join_path(path, kv.first.Scalar());
                if (kv.second.IsScalar()) {
                    out[kv.first.Scalar()] = kv.second.Scalar();
                } else if (kv.second.IsMap()) {
                    out[kv.first.Scalar()] = yaml_to_json(kv.second).dump();
                } else {
                    throw ConfigError(fmt::format("{}: '{}' must be a name or a mapping, got {}",
                                                  origins_.of(item, kv.second), item, describe_node(kv.second)));
                }
                record(item, kv.second);
            }
        }
        v = std::move(out);
        record(path, n);
    }

    void list_items(const char* key, size_t, const std::function<void(size_t)>& resize,
                    const std::function<void(Visitor&, size_t)>& item) {
        YAML::Node n = child(key);
        if (!n) return;
        std::string path = join_path(path_, key);
        if (!n.IsSequence()) {
            throw ConfigError(
                fmt::format("{}: '{}' must be a list, got {}", origins_.of(path, n), path, describe_node(n)));
        }
        resize(n.size());
        for (size_t i = 0; i < n.size(); ++i) {
            std::string ipath = fmt::format("{}.{}", path, i);
            Loader sub(n[i], ipath, origins_);
            item(sub, i);
            sub.finish();
        }
        record(path, n);
    }

    // Keys must be plain names, each given once: yaml-cpp keeps both entries of a repeated key
    // and lookups see only the first, so a later value would be ignored without a word.
    void check_keys() const {
        if (!node_ || !node_.IsMap()) return;
        std::map<std::string, std::string> first_at;
        for (const auto& kv : node_) {
            if (!kv.first.IsScalar()) {
                throw ConfigError(fmt::format("{}: a key in '{}' must be a plain name, got {}",
                                              origins_.of(path_, kv.first), path_.empty() ? "<top level>" : path_,
                                              describe_node(kv.first)));
            }
            const std::string key_path = join_path(path_, kv.first.Scalar());
            const std::string at = origins_.of(key_path, kv.first);
            auto [it, fresh] = first_at.emplace(kv.first.Scalar(), at);
            if (!fresh) {
                throw ConfigError(fmt::format("{}: duplicate key '{}' (first set at {})", at, key_path, it->second));
            }
        }
    }

    YAML::Node child(const char* key) {
        seen_.insert(key);
        order_.push_back(key);
        if (!node_ || !node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
        const YAML::Node& const_node = node_;  // const []: never inserts a key
        return const_node[key];
    }

    void record(const std::string& path, const YAML::Node& n) {
        if (origins_.out) (*origins_.out)[path] = origins_.of(path, n);
    }

    template <typename T>
    void convert(const std::string& path, const YAML::Node& n, T& v, const char* expected) {
        if (!n.IsScalar()) {
            throw ConfigError(
                fmt::format("{}: '{}' must be {}, got {}", origins_.of(path, n), path, expected, describe_node(n)));
        }
        try {
            if constexpr (std::is_same_v<T, int64_t>) {
                // yaml-cpp would accept 1.5 -> error only sometimes; be strict.
                const std::string& s = n.Scalar();
                size_t used = 0;
                long long x = std::stoll(s, &used, 0);
                if (used != s.size()) throw std::invalid_argument(s);
                v = x;
            } else {
                v = n.as<T>();
                if constexpr (std::is_same_v<T, double>) {
                    if (std::isnan(v)) throw std::invalid_argument(n.Scalar());  // no setting means NaN
                }
            }
        } catch (const std::exception&) {
            throw ConfigError(
                fmt::format("{}: '{}' must be {}, got {}", origins_.of(path, n), path, expected, describe_node(n)));
        }
    }

    template <typename T>
    void scalar(const char* key, T& v, const char* expected) {
        YAML::Node n = child(key);
        if (!n) return;
        std::string path = join_path(path_, key);
        if (n.IsNull()) {
            throw ConfigError(fmt::format("{}: '{}' must be {}, got null", origins_.of(path, n), path, expected));
        }
        convert(path, n, v, expected);
        record(path, n);
    }

    template <typename T>
    void optional(const char* key, std::optional<T>& v, const char* expected) {
        YAML::Node n = child(key);
        if (!n) return;
        std::string path = join_path(path_, key);
        if (n.IsNull()) {
            v.reset();
        } else {
            T x{};
            convert(path, n, x, expected);
            v = x;
        }
        record(path, n);
    }

    template <typename T>
    void sequence(const char* key, std::vector<T>& v, const char* expected) {
        YAML::Node n = child(key);
        if (!n) return;
        std::string path = join_path(path_, key);
        if (n.IsNull()) {
            v.clear();
            record(path, n);
            return;
        }
        if (!n.IsSequence()) {
            throw ConfigError(
                fmt::format("{}: '{}' must be {}, got {}", origins_.of(path, n), path, expected, describe_node(n)));
        }
        std::vector<T> out;
        for (size_t i = 0; i < n.size(); ++i) {
            T x{};
            convert(fmt::format("{}[{}]", path, i), n[i], x, expected);
            out.push_back(x);
        }
        v = std::move(out);
        record(path, n);
    }

    YAML::Node node_;
    std::string path_;
    const Origins& origins_;
    std::set<std::string> seen_;
    std::vector<std::string> order_;
};

// structs -> YAML, in schema order.
class Dumper : public Visitor {
  public:
    explicit Dumper(YAML::Emitter& out) : out_(out) {}
    void value(const char* key, bool& v, const char*) override { out_ << YAML::Key << key << YAML::Value << v; }
    void value(const char* key, int64_t& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value << static_cast<long long>(v);
    }
    void value(const char* key, double& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value << fmt::format("{}", v);
    }
    void value(const char* key, std::string& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << v;
    }
    void value(const char* key, std::optional<int64_t>& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value;
        if (v) out_ << static_cast<long long>(*v);
        else out_ << YAML::Null;
    }
    void value(const char* key, std::optional<double>& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value;
        if (v) out_ << fmt::format("{}", *v);
        else out_ << YAML::Null;
    }
    void value(const char* key, std::optional<std::string>& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value;
        if (v) out_ << YAML::DoubleQuoted << *v;
        else out_ << YAML::Null;
    }
    void value(const char* key, std::vector<int64_t>& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (auto x : v) out_ << static_cast<long long>(x);
        out_ << YAML::EndSeq;
    }
    void value(const char* key, std::vector<double>& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (auto x : v) out_ << fmt::format("{}", x);
        out_ << YAML::EndSeq;
    }
    void value(const char* key, std::vector<std::string>& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
        for (auto& x : v) out_ << YAML::DoubleQuoted << x;
        out_ << YAML::EndSeq;
    }
    void value(const char* key, std::map<std::string, std::string>& v, const char*) override {
        out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
        for (auto& [name, text] : v) {
            out_ << YAML::Key << YAML::DoubleQuoted << name << YAML::Value;
            // A nested spec is JSON text, which is YAML flow syntax: write it as a mapping.
            if (!text.empty() && text[0] == '{') out_ << YAML::Flow << YAML::Load(text);
            else out_ << YAML::DoubleQuoted << text;
        }
        out_ << YAML::EndMap;
    }
    void section(const char* key, const char*, const std::function<void(Visitor&)>& body) override {
        out_ << YAML::Key << key << YAML::Value << YAML::BeginMap;
        body(*this);
        out_ << YAML::EndMap;
    }
    void list(const char* key, const char*, size_t n, const std::function<void(size_t)>&,
              const std::function<void(Visitor&, size_t)>& item) override {
        out_ << YAML::Key << key << YAML::Value << YAML::BeginSeq;
        for (size_t i = 0; i < n; ++i) {
            out_ << YAML::BeginMap;
            item(*this, i);
            out_ << YAML::EndMap;
        }
        out_ << YAML::EndSeq;
    }

  private:
    YAML::Emitter& out_;
};

// A list index from an override segment of digits; SIZE_MAX when it does not fit (so the
// range checks below report it).
size_t parse_index(const std::string& digits) {
    size_t idx = 0;
    for (char ch : digits) {
        if (idx > (SIZE_MAX - 9) / 10) return SIZE_MAX;
        idx = idx * 10 + static_cast<size_t>(ch - '0');
    }
    return idx;
}

// Applies "a.b.c=value" to the YAML tree (creating mappings; numeric segments index lists).
void apply_override(YAML::Node& root, const std::string& ov, Origins& origins) {
    auto eq = ov.find('=');
    if (eq == std::string::npos || eq == 0) {
        throw ConfigError(fmt::format("command line: override '{}' must look like key.path=value", ov));
    }
    std::string key = ov.substr(0, eq);
    std::string text = ov.substr(eq + 1);
    YAML::Node value;
    try {
        value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw ConfigError(fmt::format("command line: override '{}': value is not valid YAML: {}", ov, e.msg));
    }
    if (!value || (value.IsNull() && text.empty())) value = YAML::Node(std::string());
    std::vector<std::string> parts;
    std::stringstream ss(key);
    for (std::string p; std::getline(ss, p, '.');) {
        if (p.empty()) throw ConfigError(fmt::format("command line: override '{}' has an empty key segment", ov));
        parts.push_back(p);
    }
    std::vector<YAML::Node> chain{root};
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
        YAML::Node cur = chain.back();
        const std::string& p = parts[i];
        bool numeric = !p.empty() && p.find_first_not_of("0123456789") == std::string::npos;
        if (numeric && !cur.IsSequence() && i > 0) {
            // Indexing a list the file does not set (e.g. placement.groups.0.ranks=2):
            // start from the list's default value.
            // (reset() rebinds; `def = node` would assign contents and throw on a missing key.)
            YAML::Node def = YAML::Load(to_yaml(Config{}));
            bool found = true;
            for (size_t j = 0; j < i && found; ++j) {
                const YAML::Node& cdef = def;
                const YAML::Node sub = def.IsMap() ? cdef[parts[j]] : YAML::Node(YAML::NodeType::Undefined);
                found = sub.IsDefined();
                if (found) def.reset(sub);
            }
            if (found && def.IsSequence()) {
                chain[i - 1][parts[i - 1]] = YAML::Clone(def);
                cur = chain[i - 1][parts[i - 1]];
                chain.back() = cur;
            }
        }
        if (numeric && cur.IsSequence()) {
            size_t idx = parse_index(p);
            if (idx >= cur.size()) {
                throw ConfigError(fmt::format("command line: override '{}': list '{}' has {} items", ov,
                                              key.substr(0, key.find(p) - 1), cur.size()));
            }
            chain.push_back(cur[idx]);
        } else {
            if (cur.IsScalar()) {
                throw ConfigError(
                    fmt::format("command line: override '{}': '{}' is not a section", ov, i > 0 ? parts[i - 1] : p));
            }
            YAML::Node next = cur[p];
            if (!next || next.IsNull()) {
                cur[p] = YAML::Node(YAML::NodeType::Map);
                next = cur[p];
            }
            chain.push_back(next);
        }
    }
    YAML::Node parent = chain.back();
    const std::string& last = parts.back();
    bool numeric = last.find_first_not_of("0123456789") == std::string::npos;
    if (numeric && parent.IsSequence()) {
        size_t idx = parse_index(last);
        if (idx >= parent.size()) throw ConfigError(fmt::format("command line: override '{}': index out of range", ov));
        parent[idx] = value;
    } else {
        if (parent.IsScalar()) {
            throw ConfigError(fmt::format("command line: override '{}': '{}' is not a section", ov,
                                          parts.size() > 1 ? parts[parts.size() - 2] : key));
        }
        parent[last] = value;
    }
    origins.overridden[key] = fmt::format("command line ({})", ov);
}

Config bind_yaml(YAML::Node root, const std::string& source, const std::vector<std::string>& overrides,
                 bool check = true) {
    Config c;
    c.source = source;
    Origins origins;
    origins.file = source;
    origins.out = &c.origins;
    std::vector<std::string> errors;
    origins.errors = &errors;
    if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    for (const auto& ov : overrides) {
        try {
            apply_override(root, ov, origins);
        } catch (const YAML::Exception& e) {
            // yaml-cpp refuses some paths (a list indexed by name, a map by number, ...).
            throw ConfigError(fmt::format("command line: override '{}' does not fit the config: {}", ov, e.msg));
        }
    }
    Loader loader(root, "", origins);
    config_detail::visit_config(loader, c);
    loader.finish();
    if (!errors.empty()) {
        std::string all;
        for (const auto& e : errors) all += (all.empty() ? "" : "\n") + e;
        throw ConfigError(all);
    }
    if (check) validate(c);
    return c;
}

YAML::Node parse_yaml_text(const std::string& yaml_text, const std::string& source_name) {
    // yaml-cpp reads a NUL byte as the start of an escape and mangles the value around it.
    if (const size_t nul = yaml_text.find('\0'); nul != std::string::npos) {
        const size_t line_start = yaml_text.rfind('\n', nul);
        const size_t line = static_cast<size_t>(std::count(yaml_text.begin(), yaml_text.begin() + nul, '\n')) + 1;
        throw ConfigError(fmt::format("{}:{}:{}: the file contains a NUL byte (binary or corrupt?)", source_name, line,
                                      nul - (line_start == std::string::npos ? 0 : line_start + 1) + 1));
    }
    try {
        return YAML::Load(yaml_text);
    } catch (const YAML::ParserException& e) {
        throw ConfigError(
            fmt::format("{}:{}:{}: YAML syntax error: {}", source_name, e.mark.line + 1, e.mark.column + 1, e.msg));
    }
}

Config load_config_file(const std::string& path, const std::vector<std::string>& overrides, bool check) {
    if (path.empty()) return bind_yaml(YAML::Node(), "defaults", overrides, check);
    std::ifstream in(path);
    if (!in) throw ConfigError(fmt::format("{}: cannot open config file", path));
    std::stringstream ss;
    ss << in.rdbuf();
    return bind_yaml(parse_yaml_text(ss.str(), path), path, overrides, check);
}

}  // namespace

Config config_from_yaml(const std::string& yaml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides) {
    return bind_yaml(parse_yaml_text(yaml_text, source_name), source_name, overrides);
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
    return load_config_file(path, overrides, true);
}

Config load_config_unchecked(const std::string& path, const std::vector<std::string>& overrides) {
    return load_config_file(path, overrides, false);
}

std::string to_yaml(const Config& c) {
    Config copy = c;  // the visitor takes non-const references
    YAML::Emitter out;
    out << YAML::BeginMap;
    Dumper d(out);
    config_detail::visit_config(d, copy);
    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
}

uint64_t config_hash(const Config& c) {
    // FNV-1a 64 over the effective YAML.
    uint64_t h = 1469598103934665603ull;
    for (unsigned char ch : to_yaml(c)) {
        h ^= ch;
        h *= 1099511628211ull;
    }
    return h;
}

std::string origin_of(const Config& c, const std::string& key) {
    auto it = c.origins.find(key);
    return it == c.origins.end() ? "default" : it->second;
}

}  // namespace rlpt
