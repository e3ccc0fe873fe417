#include "rlpt/protocol/role_spec.h"

#include <set>

#include "rlpt/comm/device.h"

namespace rlpt::protocol {

const char* distribute_name(Distribute d) {
    switch (d) {
        case Distribute::kOneToAll: return "one_to_all";
        case Distribute::kDpSplit: return "dp_split";
        case Distribute::kAllToAll: return "all_to_all";
    }
    return "?";
}

const char* collect_name(Collect c) {
    switch (c) {
        case Collect::kConcatDpSources: return "concat_dp_sources";
        case Collect::kFirst: return "first";
        case Collect::kAll: return "all";
        case Collect::kNone: return "none";
    }
    return "?";
}

namespace {
bool has_rows(const std::vector<FieldSpec>& fields) {
    for (const auto& f : fields)
        if (f.kind != FieldKind::kMeta) return true;
    return false;
}
}  // namespace

void validate_registry(const std::vector<RoleSpec>& registry) {
    std::set<std::string> roles;
    RLPT_CHECK_KIND(InternalError, registry.size() < 255, "too many roles in the registry ({})", registry.size());
    for (const auto& spec : registry) {
        RLPT_CHECK_KIND(InternalError, !spec.name.empty(), "a role spec has no name");
        RLPT_CHECK_KIND(InternalError, roles.insert(spec.name).second, "role '{}' is registered twice", spec.name);
        RLPT_CHECK_KIND(InternalError, spec.factory != nullptr, "role '{}' has no factory", spec.name);
        RLPT_CHECK_KIND(InternalError, spec.methods.size() == spec.method_count,
                        "role '{}': the table has {} methods but the method enum has {}", spec.name,
                        spec.methods.size(), spec.method_count);
        std::set<std::string> names;
        for (size_t i = 0; i < spec.methods.size(); ++i) {
            const MethodSpec& m = spec.methods[i];
            std::string where = fmt::format("role '{}' method #{} '{}'", spec.name, i, m.name);
            RLPT_CHECK_KIND(InternalError, m.id == i, "{}: id {} is out of enum order (expected {})", where, m.id, i);
            RLPT_CHECK_KIND(InternalError, !m.name.empty(), "{}: no name", where);
            RLPT_CHECK_KIND(InternalError, names.insert(m.name).second, "{}: name used twice", where);
            RLPT_CHECK_KIND(InternalError, m.handler != nullptr, "{}: no handler", where);
            RLPT_CHECK_KIND(InternalError, m.distribute != Distribute::kDpSplit || has_rows(m.inputs),
                            "{}: dp_split needs an input with a batch dimension", where);
            RLPT_CHECK_KIND(InternalError, m.timeout_s >= 0, "{}: negative timeout", where);
        }
    }
}

uint64_t registry_hash(const std::vector<RoleSpec>& registry) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const std::string& s) {
        for (unsigned char c : s) {
            h ^= c;
            h *= 1099511628211ull;
        }
        h ^= 0xff;
        h *= 1099511628211ull;
    };
    for (const auto& spec : registry) {
        mix(spec.name);
        for (const auto& m : spec.methods) {
            mix(fmt::format("{}:{}:{}:{}:{}", m.id, m.name, static_cast<int>(m.distribute), static_cast<int>(m.collect),
                            m.pad_to_dp));
            for (const auto& f : m.inputs) mix("i" + f.name + std::to_string(static_cast<int>(f.kind)));
            for (const auto& f : m.outputs) mix("o" + f.name + std::to_string(static_cast<int>(f.kind)));
        }
    }
    return h;
}

torch::Device handler_device() {
    const int index = comm::rank_device_index();
    return index < 0 ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

int find_role(const std::vector<RoleSpec>& registry, const std::string& role) {
    for (size_t i = 0; i < registry.size(); ++i)
        if (registry[i].name == role) return static_cast<int>(i);
    return -1;
}

void check_schema(const Batch& b, const std::vector<FieldSpec>& schema, const std::string& role,
                  const std::string& method, const char* direction) {
    for (const auto& f : schema) {
        if (f.optional) continue;
        bool ok = false;
        switch (f.kind) {
            case FieldKind::kTensor: ok = b.has(f.name); break;
            case FieldKind::kString: ok = b.has_strings(f.name); break;
            case FieldKind::kInt: ok = b.has_ints(f.name); break;
            case FieldKind::kMeta: ok = b.has_meta(f.name); break;
        }
        if (!ok) {
            throw ValueError(
                fmt::format("{}.{}: {} is missing '{}' ({})", role, method, direction, f.name, b.describe()));
        }
    }
}

}  // namespace rlpt::protocol
