#pragma once
// The configuration reference, generated from the schema that also loads and dumps configs
// (src/config/config_schema.cpp): every key with its type, default and one-line meaning.
//   rlpt --help-config             config_reference_yaml(): the defaults as YAML, commented
//   rlpt --help-config=markdown    config_reference_markdown(): docs/config-reference.md
// tests/unit/test_config_reference.cpp fails when a key has no meaning or the committed
// docs/config-reference.md differs from config_reference_markdown(). Torch-free.
#include <string>
#include <vector>

namespace rlpt {

struct ConfigKeyDoc {
    std::string path;  // dotted; the keys of a list's items as "placement.groups[].roles"
    std::string type;  // "section", "list of mappings", or a value type: "int", "float or null", "list of string", ...
    std::string default_value;  // YAML flow syntax ("\"rl\"", "null", "[]", ...); empty for a section
    std::string doc;            // one line
};

// Every section, list and key, in schema order.
std::vector<ConfigKeyDoc> config_key_docs();

// Every key with its default, as YAML with each key's meaning in a comment above it. It reads
// back (load_config) as the defaults.
std::string config_reference_yaml();

// The Markdown reference, docs/config-reference.md.
std::string config_reference_markdown();

}  // namespace rlpt
