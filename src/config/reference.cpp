// The configuration reference (rlpt/config/reference.h): one walk over the schema collects every
// key's type, default and meaning into a tree, which is printed as commented YAML or as Markdown.
#include "rlpt/config/reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "config/config_schema.h"
#include "rlpt/config/config.h"

namespace rlpt {
namespace {

using config_detail::Visitor;

// One key, section or list of the schema.
struct Node {
    enum class Kind { kValue, kSection, kList };
    Kind kind = Kind::kValue;
    std::string key, type, value, doc;     // value: the default in YAML flow syntax (kValue)
    std::vector<Node> children;            // kSection: its keys; kList: the keys of a new item (their defaults)
    std::vector<std::vector<Node>> items;  // kList: the keys of each default item
};

std::string yaml_quoted(const std::string& s) { return nlohmann::json(s).dump(); }  // JSON is YAML flow syntax
std::string number(double v) { return fmt::format("{}", v); }

template <typename T, typename F>
std::string flow_list(const std::vector<T>& v, F&& one) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + one(v[i]);
    return s + "]";
}

// Collects the schema into Nodes.
class Collector : public Visitor {
  public:
    explicit Collector(std::vector<Node>& out) : out_(out) {}
    void value(const char* key, bool& v, const char* doc) override { add(key, "bool", v ? "true" : "false", doc); }
    void value(const char* key, int64_t& v, const char* doc) override { add(key, "int", std::to_string(v), doc); }
    void value(const char* key, double& v, const char* doc) override { add(key, "float", number(v), doc); }
    void value(const char* key, std::string& v, const char* doc) override { add(key, "string", yaml_quoted(v), doc); }
    void value(const char* key, std::optional<int64_t>& v, const char* doc) override {
        add(key, "int or null", v ? std::to_string(*v) : "null", doc);
    }
    void value(const char* key, std::optional<double>& v, const char* doc) override {
        add(key, "float or null", v ? number(*v) : "null", doc);
    }
    void value(const char* key, std::optional<std::string>& v, const char* doc) override {
        add(key, "string or null", v ? yaml_quoted(*v) : "null", doc);
    }
    void value(const char* key, std::vector<int64_t>& v, const char* doc) override {
        add(key, "list of int", flow_list(v, [](int64_t x) { return std::to_string(x); }), doc);
    }
    void value(const char* key, std::vector<double>& v, const char* doc) override {
        add(key, "list of float", flow_list(v, number), doc);
    }
    void value(const char* key, std::vector<std::string>& v, const char* doc) override {
        add(key, "list of string", flow_list(v, yaml_quoted), doc);
    }
    void value(const char* key, std::map<std::string, std::string>& v, const char* doc) override {
        std::string s = "{";
        for (const auto& [name, text] : v) {
            s += (s.size() > 1 ? ", " : "") + yaml_quoted(name) + ": " +
                 (!text.empty() && text[0] == '{' ? text : yaml_quoted(text));
        }
        add(key, "map", s + "}", doc);
    }
    void section(const char* key, const char* doc, const std::function<void(Visitor&)>& body) override {
        Node n{Node::Kind::kSection, key, "section", "", doc, {}, {}};
        Collector sub(n.children);
        body(sub);
        out_.push_back(std::move(n));
    }
    void list(const char* key, const char* doc, size_t n, const std::function<void(size_t)>& resize,
              const std::function<void(Visitor&, size_t)>& item) override {
        Node node{Node::Kind::kList, key, "list of mappings", "", doc, {}, {}};
        for (size_t i = 0; i < n; ++i) {
            node.items.emplace_back();
            Collector sub(node.items.back());
            item(sub, i);
        }
        resize(n + 1);  // a default-constructed item shows the keys an item has and their defaults
        Collector sub(node.children);
        item(sub, n);
        resize(n);
        out_.push_back(std::move(node));
    }

  private:
    void add(const char* key, const char* type, std::string value, const char* doc) {
        out_.push_back(Node{Node::Kind::kValue, key, type, std::move(value), doc, {}, {}});
    }
    std::vector<Node>& out_;
};

std::vector<Node> schema() {
    Config c;
    std::vector<Node> top;
    Collector collect(top);
    config_detail::visit_config(collect, c);
    return top;
}

// An item of a list in flow syntax: {roles: ["actor"], ranks: "auto", ...}.
std::string flow_item(const std::vector<Node>& keys) {
    std::string s = "{";
    for (const auto& k : keys) s += (s.size() > 1 ? ", " : "") + k.key + ": " + k.value;
    return s + "}";
}

std::string list_default(const Node& n) { return flow_list(n.items, flow_item); }

void collect_docs(const std::vector<Node>& nodes, const std::string& prefix, std::vector<ConfigKeyDoc>& out) {
    for (const auto& n : nodes) {
        const std::string path = prefix.empty() ? n.key : prefix + "." + n.key;
        switch (n.kind) {
            case Node::Kind::kValue: out.push_back({path, n.type, n.value, n.doc}); break;
            case Node::Kind::kSection:
                out.push_back({path, n.type, "", n.doc});
                collect_docs(n.children, path, out);
                break;
            case Node::Kind::kList:
                out.push_back({path, n.type, list_default(n), n.doc});
                collect_docs(n.children, path + "[]", out);
                break;
        }
    }
}

// ---- YAML ----------------------------------------------------------------------------------

// `text` as comment lines of at most ~100 columns at `indent`, the first starting with `lead`.
void comment(std::string& out, const std::string& indent, const std::string& text, const std::string& lead = "") {
    constexpr size_t kWidth = 100;
    const std::string next = indent + "# " + std::string(lead.size(), ' ');
    std::string line = indent + "# " + lead;
    bool empty = true;
    size_t i = 0;
    while (i <= text.size()) {
        size_t j = text.find(' ', i);
        if (j == std::string::npos) j = text.size();
        const std::string word = text.substr(i, j - i);
        if (!empty && line.size() + 1 + word.size() > kWidth) {
            out += line + "\n";
            line = next;
            empty = true;
        }
        line += (empty ? "" : " ") + word;
        empty = false;
        i = j + 1;
    }
    out += line + "\n";
}

void yaml_keys(std::string& out, const std::vector<Node>& nodes, const std::string& indent) {
    for (const auto& n : nodes) {
        comment(out, indent, n.doc);
        switch (n.kind) {
            case Node::Kind::kValue: out += indent + n.key + ": " + n.value + "\n"; break;
            case Node::Kind::kSection:
                out += indent + n.key + ":\n";
                yaml_keys(out, n.children, indent + "  ");
                break;
            case Node::Kind::kList:
                out += indent + "# each item:\n";
                for (const auto& k : n.children) comment(out, indent, k.doc, "  " + k.key + " (" + k.value + "): ");
                if (n.items.empty()) {
                    out += indent + n.key + ": []\n";
                    break;
                }
                out += indent + n.key + ":\n";
                for (const auto& item : n.items) {
                    for (size_t i = 0; i < item.size(); ++i)
                        out += indent + (i == 0 ? "  - " : "    ") + item[i].key + ": " + item[i].value + "\n";
                }
                break;
        }
    }
}

// ---- Markdown ------------------------------------------------------------------------------

// A table cell: '|' would end it; '<', '>' and '*' would be read as HTML or emphasis.
std::string cell(const std::string& s, bool code) {
    std::string o;
    for (char ch : s) {
        if (ch == '|') o += "\\|";
        else if (!code && ch == '<') o += "&lt;";
        else if (!code && ch == '>') o += "&gt;";
        else if (!code && ch == '*') o += "\\*";
        else o += ch;
    }
    return o;
}

void md_section(std::string& out, const Node& sec, const std::string& path, int level) {
    out += fmt::format("\n{} {}\n\n{}.\n\n", std::string(static_cast<size_t>(level), '#'), path,
                       cell(char(std::toupper(static_cast<unsigned char>(sec.doc[0]))) + sec.doc.substr(1), false));
    if (sec.kind == Node::Kind::kList)
        out += fmt::format("Default: `{}`. Each item has these keys:\n\n", cell(list_default(sec), true));
    const std::string sep = sec.kind == Node::Kind::kList ? "[]." : ".";
    std::vector<const Node*> nested;
    bool table = false;
    for (const auto& n : sec.children) {
        if (n.kind != Node::Kind::kValue) {
            nested.push_back(&n);
            continue;
        }
        if (!table) out += "| key | type | default | meaning |\n|---|---|---|---|\n";
        table = true;
        out += fmt::format("| `{}{}{}` | {} | `{}` | {} |\n", path, sep, n.key, n.type, cell(n.value, true),
                           cell(n.doc, false));
    }
    for (const Node* n : nested) md_section(out, *n, path + sep + n->key, std::min(level + 1, 4));
}

}  // namespace

std::vector<ConfigKeyDoc> config_key_docs() {
    std::vector<ConfigKeyDoc> out;
    collect_docs(schema(), "", out);
    return out;
}

std::string config_reference_yaml() {
    std::string out =
        "# rlpt's configuration: every key with its default and meaning (docs/config-reference.md has the same).\n"
        "# A config file sets only what it changes; key=value on the command line overrides any key.\n";
    for (const auto& n : schema()) {
        out += "\n";
        yaml_keys(out, {n}, "");
    }
    return out;
}

std::string config_reference_markdown() {
    const auto top = schema();
    std::string out =
        "<!-- Generated from src/config/config_schema.cpp by `rlpt --help-config=markdown`; do not edit.\n"
        "     Regenerate: build/src/rlpt --help-config=markdown > docs/config-reference.md -->\n"
        "# Configuration reference\n\n"
        "Every key rlpt reads, with its type, default and meaning, generated from the schema the program loads\n"
        "configs with. A config file (YAML) sets only the keys it changes; `key=value` on the command line\n"
        "overrides any key by its dotted path, with a YAML value (`actor.optim.lr=1e-6`,\n"
        "`rollout.stop_token_ids=[1,2]`, `placement.groups.0.ranks=3`). Unknown keys, wrong types and\n"
        "out-of-range values are refused before anything starts, naming the key and where it was set.\n"
        "`rlpt --help-config` prints the same as commented YAML. Key names follow verl's where verl has the\n"
        "key (`actor_rollout_ref.actor.optim.lr` is `actor.optim.lr` here).\n\n"
        "Sections:";
    for (size_t i = 0; i < top.size(); ++i) out += fmt::format("{} [{}](#{})", i ? " ·" : "", top[i].key, top[i].key);
    out += "\n";
    for (const auto& n : top) md_section(out, n, n.key, 2);
    return out;
}

}  // namespace rlpt
