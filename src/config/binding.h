#pragma once
// Private to src/config: a visitor over every config key, so loading, dumping, listing and
// documenting the keys share one description of the schema (config_schema.cpp).

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rlpt::config_detail {

// Every key and section is visited with its meaning, `doc`: one line for users, printed by
// `rlpt --help-config` and turned into docs/config-reference.md (src/config/reference.cpp). A unit
// test fails when a key has an empty doc or the committed reference is stale.
class Visitor {
  public:
    virtual ~Visitor() = default;
    virtual void value(const char* key, bool& v, const char* doc) = 0;
    virtual void value(const char* key, int64_t& v, const char* doc) = 0;
    virtual void value(const char* key, double& v, const char* doc) = 0;
    virtual void value(const char* key, std::string& v, const char* doc) = 0;
    virtual void value(const char* key, std::optional<int64_t>& v, const char* doc) = 0;
    virtual void value(const char* key, std::optional<double>& v, const char* doc) = 0;
    virtual void value(const char* key, std::optional<std::string>& v, const char* doc) = 0;
    virtual void value(const char* key, std::vector<int64_t>& v, const char* doc) = 0;
    virtual void value(const char* key, std::vector<double>& v, const char* doc) = 0;
    virtual void value(const char* key, std::vector<std::string>& v, const char* doc) = 0;
    // A mapping of names to scalars or nested mappings; a nested mapping is kept as JSON text.
    virtual void value(const char* key, std::map<std::string, std::string>& v, const char* doc) = 0;
    virtual void section(const char* key, const char* doc, const std::function<void(Visitor&)>& body) = 0;
    // A list of structs: `resize(n)` is called with the element count before `item(v, i)`.
    virtual void list(const char* key, const char* doc, size_t current_size, const std::function<void(size_t)>& resize,
                      const std::function<void(Visitor&, size_t)>& item) = 0;
};

template <typename T, typename F>
void visit_list(Visitor& v, const char* key, const char* doc, std::vector<T>& items, F&& visit_item) {
    v.list(
        key, doc, items.size(), [&](size_t n) { items.resize(n); },
        [&](Visitor& sub, size_t i) { visit_item(sub, items[i]); });
}

}  // namespace rlpt::config_detail
