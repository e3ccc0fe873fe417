#include "rlpt/comm/topology.h"

#include "rlpt/core/debug_env.h"
#include "rlpt/core/error.h"

namespace rlpt::comm {

std::vector<int> detect_node_labels(const Communicator& world, const std::string& simulate_nodes_spec) {
    int label = 0;
    if (!simulate_nodes_spec.empty()) {
        label = simulated_node_label(simulate_nodes_spec, world.rank(), world.size());
    } else {
        Communicator shared = world.split_shared();
        // The lowest world rank on this node names the node.
        int64_t first = world.rank();
        shared.allreduce(&first, 1, MPI_INT64_T, MPI_MIN);
        label = static_cast<int>(first);
    }
    auto all = world.allgather_i64(label);
    return std::vector<int>(all.begin(), all.end());
}

Topology Topology::build(const Communicator& world, Placement placement) {
    Topology t;
    t.world_rank_ = world.rank();
    RLPT_CHECK_KIND(ConfigError, placement.world_size == world.size(),
                    "placement was computed for {} ranks but the world has {}", placement.world_size, world.size());
    t.control_ = world.dup();
    for (const auto& layout : placement.roles) {
        int rr = layout.role_rank(t.world_rank_);
        Communicator role = world.split(rr >= 0 ? 0 : -1, rr);
        if (rr < 0) continue;
        RoleComms rc;
        rc.role_rank = rr;
        rc.dp_rank = layout.dp_rank_of(rr);
        rc.mp_rank = layout.mp_rank_of(rr);
        rc.dp = role.split(rc.mp_rank, rc.dp_rank);
        rc.mp = role.split(rc.dp_rank, rc.mp_rank);
        rc.role = std::move(role);
        t.comms_.emplace(layout.role, std::move(rc));
    }
    t.placement_ = std::move(placement);
    return t;
}

const RoleComms& Topology::role(const std::string& role) const {
    auto it = comms_.find(role);
    if (it == comms_.end()) {
        throw ConfigError(fmt::format("rank {} does not host role '{}'", world_rank_, role));
    }
    return it->second;
}

}  // namespace rlpt::comm
