#pragma once
// Topology: the placement plus the communicators built from it. Torch-free.
//
// Topology::build is collective on `world`: every rank detects its node, derives the same
// Placement, and takes part in one MPI_Comm_split per placed role (in Placement::roles order),
// then in the dp/mp splits of the roles it hosts. It also dups `world` into the control
// communicator that carries controller <-> worker messages, so those never share a
// communicator (or tags) with role collectives.

#include <map>
#include <string>
#include <vector>

#include "rlpt/comm/mpi.h"
#include "rlpt/comm/placement.h"

namespace rlpt::comm {

// Node label of each world rank: the world rank of the first rank of this rank's
// MPI_COMM_TYPE_SHARED communicator, unless RLPT_SIMULATE_NODES (passed in) overrides it.
// Collective on world.
std::vector<int> detect_node_labels(const Communicator& world, const std::string& simulate_nodes_spec);

struct RoleComms {
    Communicator role;  // all ranks of the role, ordered by role rank
    Communicator dp;    // ranks with the same mp_rank, ordered by dp_rank
    Communicator mp;    // ranks with the same dp_rank (one model-parallel block)
    int role_rank = -1;
    int dp_rank = -1;
    int mp_rank = -1;
};

class Topology {
  public:
    // Collective on world. Throws ConfigError (on every rank alike) for impossible layouts.
    static Topology build(const Communicator& world, Placement placement);

    const Placement& placement() const { return placement_; }
    int world_rank() const { return world_rank_; }
    int world_size() const { return placement_.world_size; }
    bool is_controller() const { return world_rank_ == placement_.controller_rank; }
    bool hosts(const std::string& role) const { return comms_.count(role) != 0; }
    std::vector<std::string> hosted_roles() const { return placement_.roles_of(world_rank_); }
    // ConfigError if this rank does not host `role`.
    const RoleComms& role(const std::string& role) const;
    const Communicator& control() const { return control_; }

  private:
    Placement placement_;
    int world_rank_ = -1;
    Communicator control_;
    std::map<std::string, RoleComms> comms_;
};

}  // namespace rlpt::comm
