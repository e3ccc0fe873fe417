#include "rlpt/comm/placement.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include <fmt/ranges.h>

#include "rlpt/core/error.h"

namespace rlpt::comm {

int RoleLayout::role_rank(int world_rank) const {
    auto it = std::find(world_ranks.begin(), world_ranks.end(), world_rank);
    return it == world_ranks.end() ? -1 : static_cast<int>(it - world_ranks.begin());
}

std::vector<int> RoleLayout::output_sources() const {
    std::vector<int> out;
    for (int i = 0; i < size(); i += mp_size) out.push_back(world_ranks[static_cast<size_t>(i)]);
    return out;
}

const RoleLayout* Placement::find(const std::string& role) const {
    for (const auto& r : roles)
        if (r.role == role) return &r;
    return nullptr;
}

const RoleLayout& Placement::at(const std::string& role) const {
    const RoleLayout* r = find(role);
    if (!r) throw ConfigError(fmt::format("role '{}' is not placed on any rank", role));
    return *r;
}

std::vector<std::string> Placement::roles_of(int world_rank) const {
    std::vector<std::string> out;
    for (const auto& r : roles)
        if (r.role_rank(world_rank) >= 0) out.push_back(r.role);
    return out;
}

int Placement::local_rank(int world_rank) const {
    int node = node_of_rank.at(static_cast<size_t>(world_rank));
    int k = 0;
    for (int r = 0; r < world_rank; ++r)
        if (node_of_rank[static_cast<size_t>(r)] == node) ++k;
    return k;
}

int Placement::ranks_on_node(int node) const {
    return static_cast<int>(std::count(node_of_rank.begin(), node_of_rank.end(), node));
}

std::string Placement::describe() const {
    std::string s =
        fmt::format("placement: {} ranks on {} node{}; rank {} is the controller{}", world_size, n_nodes,
                    n_nodes == 1 ? "" : "s", controller_rank, controller_hosts_roles ? " and hosts roles" : "");
    for (const auto& r : roles) {
        std::string ranks;
        for (int w : r.world_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(w);
        s +=
            fmt::format("\n  {:<12} group {}  dp={} mp={}  ranks [{}]", r.role, r.group, r.dp_size(), r.mp_size, ranks);
    }
    return s;
}

namespace {

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
    return s;
}

std::string group_name(const RoleGroupConfig& g, size_t i) {
    return fmt::format("placement.groups.{} [{}]", i, join(g.roles));
}

// rollout.tensor_model_parallel_size on a placement: the rollout colocated with the actor gets
// its own block size on the group's ranks (the hybrid engine); elsewhere it must agree with the
// rollout group's model_parallel_size.
void apply_rollout_tp(Placement& p, const PlacementConfig& cfg, int tp) {
    auto it = std::find_if(p.roles.begin(), p.roles.end(), [](const RoleLayout& l) { return l.role == "rollout"; });
    if (it == p.roles.end() || it->mp_size == tp) return;
    RoleLayout& r = *it;
    const RoleLayout* actor = p.find("actor");
    const std::string where = group_name(cfg.groups[static_cast<size_t>(r.group)], static_cast<size_t>(r.group));
    if (actor == nullptr || actor->group != r.group) {
        throw ConfigError(fmt::format("rollout.tensor_model_parallel_size: {} differs from the model_parallel_size {} "
                                      "of the rollout's own group {}; a rollout on ranks of its own takes its size "
                                      "from its group (set {}.model_parallel_size instead)",
                                      tp, r.mp_size, where, where.substr(0, where.find(' '))));
    }
    if (r.size() % tp != 0) {
        throw ConfigError(fmt::format("rollout.tensor_model_parallel_size: {} does not divide the {} ranks of {}", tp,
                                      r.size(), where));
    }
    for (int b = 0; b < r.size(); b += tp) {
        const int node = p.node_of_rank[static_cast<size_t>(r.world_ranks[static_cast<size_t>(b)])];
        for (int i = b; i < b + tp; ++i) {
            if (p.node_of_rank[static_cast<size_t>(r.world_ranks[static_cast<size_t>(i)])] != node) {
                throw ConfigError(fmt::format("rollout.tensor_model_parallel_size: a rollout block of {} ranks would "
                                              "span nodes (world ranks {} and {} of {}); model-parallel blocks never "
                                              "span nodes",
                                              tp, r.world_ranks[static_cast<size_t>(b)],
                                              r.world_ranks[static_cast<size_t>(i)], where));
            }
        }
    }
    r.mp_size = tp;
}

}  // namespace

Placement compute_placement(const PlacementConfig& cfg, int world_size, const std::vector<int>& node_labels,
                            const std::vector<std::string>& role_names, const std::vector<std::string>& required,
                            const std::string& why, int rollout_tp) {
    RLPT_CHECK_KIND(ConfigError, world_size >= 1, "world size must be >= 1 (got {})", world_size);
    RLPT_CHECK_KIND(ConfigError, static_cast<int>(node_labels.size()) == world_size,
                    "internal: {} node labels for {} ranks", node_labels.size(), world_size);
    Placement p;
    p.world_size = world_size;
    p.controller_hosts_roles = cfg.controller_hosts_roles;

    // Dense node ids in order of first appearance.
    std::map<int, int> dense;
    for (int label : node_labels) dense.emplace(label, static_cast<int>(dense.size()));
    for (int label : node_labels) p.node_of_rank.push_back(dense.at(label));
    p.n_nodes = static_cast<int>(dense.size());

    // Every required role must be placed; every placed role must be one of role_names (the
    // registry's), whose order Placement::roles keeps.
    std::set<std::string> placed;
    for (const auto& g : cfg.groups) {
        for (const auto& r : g.roles) {
            if (std::find(role_names.begin(), role_names.end(), r) == role_names.end()) {
                throw ConfigError(
                    fmt::format("placement: unknown role '{}' (roles: {})", r, fmt::join(role_names, ", ")));
            }
            placed.insert(r);
        }
    }
    for (const auto& r : required) {
        if (!placed.count(r)) {
            throw ConfigError(fmt::format("placement: role '{}' is needed{} but no placement group hosts it; add it "
                                          "to placement.groups",
                                          r, why.empty() ? "" : " (" + why + ")"));
        }
    }

    // Ranks available for roles.
    std::vector<int> avail;
    for (int r = 0; r < world_size; ++r)
        if (cfg.controller_hosts_roles || r != p.controller_rank) avail.push_back(r);
    if (avail.empty()) {
        throw ConfigError(fmt::format("placement: {} rank{} leave no rank for the roles (rank 0 only controls); run "
                                      "with more ranks (mpirun -np 2 or more) or set "
                                      "placement.controller_hosts_roles=true",
                                      world_size, world_size == 1 ? "" : "s"));
    }

    // Rank counts.
    const size_t n_groups = cfg.groups.size();
    std::vector<int> count(n_groups, 0);
    int fixed = 0, n_auto = 0;
    for (size_t g = 0; g < n_groups; ++g) {
        if (cfg.groups[g].ranks == "auto") {
            ++n_auto;
        } else {
            count[g] = static_cast<int>(std::stoll(cfg.groups[g].ranks));
            fixed += count[g];
        }
    }
    const int n_avail = static_cast<int>(avail.size());
    std::string avail_note = cfg.controller_hosts_roles
                                 ? fmt::format("world size {}", world_size)
                                 : fmt::format("world size {}, rank 0 only controls", world_size);
    if (fixed > n_avail) {
        throw ConfigError(fmt::format("placement: the groups ask for {} ranks but only {} are available ({})", fixed,
                                      n_avail, avail_note));
    }
    int rest = n_avail - fixed;
    if (n_auto > 0) {
        int base = rest / n_auto;
        for (size_t g = 0; g < n_groups; ++g) {
            if (cfg.groups[g].ranks != "auto") continue;
            int mp = static_cast<int>(cfg.groups[g].model_parallel_size);
            count[g] = base - base % mp;
            rest -= count[g];
        }
        for (size_t g = 0; g < n_groups && rest > 0; ++g) {
            if (cfg.groups[g].ranks != "auto") continue;
            int mp = static_cast<int>(cfg.groups[g].model_parallel_size);
            while (rest >= mp) {
                count[g] += mp;
                rest -= mp;
                if (n_auto > 1) break;  // spread leftovers one block per group
            }
        }
        for (size_t g = 0; g < n_groups && rest > 0; ++g) {
            if (cfg.groups[g].ranks != "auto") continue;
            int mp = static_cast<int>(cfg.groups[g].model_parallel_size);
            while (rest >= mp) {
                count[g] += mp;
                rest -= mp;
            }
        }
        for (size_t g = 0; g < n_groups; ++g) {
            if (cfg.groups[g].ranks == "auto" && count[g] == 0) {
                throw ConfigError(fmt::format("placement: no ranks left for {} (model_parallel_size {}; {} ranks for "
                                              "{} auto groups after {} fixed; {})",
                                              group_name(cfg.groups[g], g), cfg.groups[g].model_parallel_size,
                                              n_avail - fixed, n_auto, fixed, avail_note));
            }
        }
    }
    if (rest > 0) {
        throw ConfigError(fmt::format("placement: {} rank{} would be idle ({}; groups use {}); give a group "
                                      "'ranks: auto' or launch fewer ranks",
                                      rest, rest == 1 ? "" : "s", avail_note, n_avail - rest));
    }
    for (size_t g = 0; g < n_groups; ++g) {
        int mp = static_cast<int>(cfg.groups[g].model_parallel_size);
        if (count[g] % mp != 0) {
            throw ConfigError(fmt::format("placement: {} has {} ranks, not a multiple of its model_parallel_size {}",
                                          group_name(cfg.groups[g], g), count[g], mp));
        }
    }

    // Physical ranks: groups with the largest model-parallel blocks first, so blocks find
    // whole nodes; a block takes the lowest free ranks of the first node that has room.
    std::vector<std::vector<int>> free_on_node(static_cast<size_t>(p.n_nodes));
    for (int r : avail) free_on_node[static_cast<size_t>(p.node_of_rank[static_cast<size_t>(r)])].push_back(r);
    std::vector<size_t> order(n_groups);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return cfg.groups[a].model_parallel_size > cfg.groups[b].model_parallel_size;
    });
    std::vector<std::vector<int>> ranks_of_group(n_groups);
    for (size_t g : order) {
        int mp = static_cast<int>(cfg.groups[g].model_parallel_size);
        if (mp == 1) {
            std::vector<int> all;
            for (auto& f : free_on_node) all.insert(all.end(), f.begin(), f.end());
            std::sort(all.begin(), all.end());
            all.resize(static_cast<size_t>(count[g]));
            for (int r : all) {
                auto& f = free_on_node[static_cast<size_t>(p.node_of_rank[static_cast<size_t>(r)])];
                f.erase(std::find(f.begin(), f.end(), r));
            }
            ranks_of_group[g] = all;
            continue;
        }
        for (int b = 0; b < count[g] / mp; ++b) {
            bool found = false;
            for (auto& f : free_on_node) {
                if (static_cast<int>(f.size()) < mp) continue;
                ranks_of_group[g].insert(ranks_of_group[g].end(), f.begin(), f.begin() + mp);
                f.erase(f.begin(), f.begin() + mp);
                found = true;
                break;
            }
            if (!found) {
                std::string per_node;
                for (size_t n = 0; n < free_on_node.size(); ++n)
                    per_node += fmt::format("{}node {}: {}", n ? ", " : "", n, free_on_node[n].size());
                throw ConfigError(fmt::format("placement: {} needs model-parallel blocks of {} ranks inside one node, "
                                              "but the free ranks per node are {} (model-parallel groups never span "
                                              "nodes)",
                                              group_name(cfg.groups[g], g), mp, per_node));
            }
        }
    }

    for (const auto& name : role_names) {
        for (size_t g = 0; g < n_groups; ++g) {
            const auto& roles = cfg.groups[g].roles;
            if (std::find(roles.begin(), roles.end(), name) == roles.end()) continue;
            RoleLayout l;
            l.role = name;
            l.group = static_cast<int>(g);
            l.world_ranks = ranks_of_group[g];
            l.mp_size = static_cast<int>(cfg.groups[g].model_parallel_size);
            p.roles.push_back(std::move(l));
        }
    }
    if (rollout_tp > 0) apply_rollout_tp(p, cfg, rollout_tp);
    return p;
}

std::vector<int> weight_sync_ranks(const Placement& p, int mp_rank) {
    const RoleLayout* actor = p.find("actor");
    const RoleLayout* rollout = p.find("rollout");
    if (!actor || !rollout || mp_rank < 0 || mp_rank >= actor->mp_size) return {};
    std::vector<int> ranks{actor->world_ranks[static_cast<size_t>(mp_rank)]};
    for (int r : rollout->world_ranks) {
        if (actor->role_rank(r) < 0 && rollout->mp_rank_of(rollout->role_rank(r)) == mp_rank) ranks.push_back(r);
    }
    if (ranks.size() == 1) return {};
    return ranks;
}

std::vector<int> weight_reshard_ranks(const Placement& p) {
    const RoleLayout* actor = p.find("actor");
    const RoleLayout* rollout = p.find("rollout");
    if (!actor || !rollout || actor->mp_size == rollout->mp_size || weight_sync_ranks(p).empty()) return {};
    std::vector<int> ranks(actor->world_ranks.begin(), actor->world_ranks.begin() + actor->mp_size);
    for (int r : rollout->world_ranks) {
        if (actor->role_rank(r) < 0) ranks.push_back(r);
    }
    return ranks;
}

std::vector<int> weight_exchange_ranks(const Placement& p) {
    const RoleLayout* actor = p.find("actor");
    const RoleLayout* rollout = p.find("rollout");
    if (!actor || !rollout || weight_sync_ranks(p).empty()) return {};
    std::vector<int> ranks = actor->world_ranks;
    for (int r : rollout->world_ranks) {
        if (actor->role_rank(r) < 0) ranks.push_back(r);
    }
    return ranks;
}

int zero_shard_group_size(const Placement& p, const std::string& role, int64_t fsdp_size, const std::string& key) {
    const RoleLayout* l = p.find(role);
    if (l == nullptr || fsdp_size == -1) return 0;
    const int dp = l->dp_size();
    if (fsdp_size >= 1) {
        if (dp % fsdp_size != 0)
            throw ConfigError(fmt::format("{}: {} does not divide the {} DP ranks of the {} (hybrid shard groups must "
                                          "be equal: use a divisor of {}, or -1 for one group)",
                                          key, fsdp_size, dp, role, dp));
        return fsdp_size == dp ? 0 : static_cast<int>(fsdp_size);
    }
    // 0: one group per node. A DP rank's node is its block's (blocks never span nodes).
    std::vector<int> node_of_dp;
    for (int d = 0; d < dp; ++d)
        node_of_dp.push_back(p.node_of_rank.at(static_cast<size_t>(l->world_ranks[d * l->mp_size])));
    std::vector<int> runs;  // lengths of runs of equal nodes, in DP order
    std::set<int> seen;
    for (int d = 0; d < dp; ++d) {
        if (d > 0 && node_of_dp[d] == node_of_dp[d - 1]) {
            ++runs.back();
            continue;
        }
        if (!seen.insert(node_of_dp[d]).second)
            throw ConfigError(fmt::format("{}: 0 (one shard group per node) needs each node's DP ranks of the {} to "
                                          "be consecutive; node {} holds DP ranks that are not",
                                          key, role, node_of_dp[d]));
        runs.push_back(1);
    }
    for (int r : runs)
        if (r != runs.front())
            throw ConfigError(fmt::format("{}: 0 (one shard group per node) needs as many DP ranks of the {} on every "
                                          "node, got {} (per node, in DP order); set a group size instead",
                                          key, role, runs));
    return runs.front() == dp ? 0 : runs.front();
}

}  // namespace rlpt::comm
