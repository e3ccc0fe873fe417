#include "rlpt/core/debug_env.h"

#include <cstdlib>
#include <sstream>

#include "rlpt/core/error.h"

namespace rlpt {
namespace {
std::string env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

// A short run of digits (at most 6: no machine has a million ranks), so std::stoi cannot overflow.
bool all_digits(const std::string& s) {
    return !s.empty() && s.size() <= 6 && s.find_first_not_of("0123456789") == std::string::npos;
}
}  // namespace

DebugEnv read_debug_env() {
    DebugEnv e;
    e.log_level = env_or_empty("RLPT_LOG_LEVEL");
    e.simulate_nodes = env_or_empty("RLPT_SIMULATE_NODES");
    e.fault = env_or_empty("RLPT_FAULT");
    return e;
}

int simulated_node_label(const std::string& spec, int world_rank, int world_size) {
    if (!spec.empty() && spec.find_first_not_of("0123456789") == std::string::npos) {
        RLPT_CHECK_KIND(ConfigError, all_digits(spec), "RLPT_SIMULATE_NODES={}: ranks per node is too large", spec);
        int per_node = std::stoi(spec);
        RLPT_CHECK_KIND(ConfigError, per_node > 0, "RLPT_SIMULATE_NODES={}: ranks per node must be > 0", spec);
        return world_rank / per_node;
    }
    std::vector<int> labels;
    std::stringstream ss(spec);
    for (std::string item; std::getline(ss, item, ',');) {
        RLPT_CHECK_KIND(ConfigError, all_digits(item),
                        "RLPT_SIMULATE_NODES='{}': expected a count or comma-separated node numbers", spec);
        labels.push_back(std::stoi(item));
    }
    RLPT_CHECK_KIND(ConfigError, static_cast<int>(labels.size()) == world_size,
                    "RLPT_SIMULATE_NODES='{}' lists {} ranks but the world has {}", spec, labels.size(), world_size);
    return labels[static_cast<size_t>(world_rank)];
}

}  // namespace rlpt
