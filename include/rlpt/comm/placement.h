#pragma once
// Placement (DESIGN §1): which world ranks host which roles, derived identically on every
// rank from the config and the world size. Torch-free. compute_placement() is a pure
// function (no MPI) so layouts can be unit-tested for any world; build_role_comms() then
// creates the communicators.
//
// Rules
//  * Rank 0 is the controller. Unless placement.controller_hosts_roles, it hosts no role.
//  * Each placement group is a set of colocated roles (one process runs all of them, taking
//    turns) with a rank count or `auto`. Auto groups share the ranks the fixed groups leave,
//    evenly; no rank may be left idle.
//  * A group's ranks come in model-parallel blocks of model_parallel_size consecutive role
//    ranks; a block never spans nodes (node identity from MPI_COMM_TYPE_SHARED). DP runs
//    across blocks and may span nodes. Role rank i has dp_rank = i / mp, mp_rank = i % mp;
//    the ranks with mp_rank == 0 are the role's output sources.
//  * Anything impossible throws ConfigError with one message naming the problem.

#include <string>
#include <vector>

#include "rlpt/comm/placement_config.h"

namespace rlpt::comm {

struct RoleLayout {
    std::string role;
    int group = -1;                // index into placement.groups
    std::vector<int> world_ranks;  // role rank i -> world rank, ascending
    int mp_size = 1;

    int size() const { return static_cast<int>(world_ranks.size()); }
    int dp_size() const { return size() / mp_size; }
    // Role rank of `world_rank`, or -1.
    int role_rank(int world_rank) const;
    int dp_rank_of(int role_rank) const { return role_rank / mp_size; }
    int mp_rank_of(int role_rank) const { return role_rank % mp_size; }
    // World ranks of the output sources (mp_rank 0), in dp order.
    std::vector<int> output_sources() const;
};

struct Placement {
    int world_size = 0;
    int controller_rank = 0;
    bool controller_hosts_roles = false;
    std::vector<RoleLayout> roles;  // in the order of compute_placement's role_names, only roles that are placed
    std::vector<int> node_of_rank;  // dense node index per world rank
    int n_nodes = 1;

    const RoleLayout* find(const std::string& role) const;  // nullptr if not placed
    const RoleLayout& at(const std::string& role) const;    // ConfigError if not placed
    std::vector<std::string> roles_of(int world_rank) const;
    // Index of world_rank among the ranks on its node (for local rank -> GPU).
    int local_rank(int world_rank) const;
    int ranks_on_node(int node) const;
    // Multi-line table for the start-up log.
    std::string describe() const;
};

// node_of_rank: any node labels per world rank (made dense in order of first appearance).
// role_names: every role there is, in the role registry's order (app::role_names(); comm cannot
// see the registry): a group naming another role is a ConfigError listing them, and
// Placement::roles (so the order communicators are built in) follows this order.
// required_roles: roles the run needs (app::plan_run; missing -> ConfigError naming `why`).
// rollout_tp (rollout.tensor_model_parallel_size, 0: the group's size): a rollout colocated with
// the actor gets blocks of this many ranks on the group's ranks (the hybrid engine: its weights
// are resharded from the actor's layout before each generation, rlpt/weights/held_reshard.h); it
// must divide the group and keep every block inside one node. For a rollout in a group without
// the actor it must equal that group's model_parallel_size (ConfigError naming the key).
Placement compute_placement(const PlacementConfig& cfg, int world_size, const std::vector<int>& node_of_rank,
                            const std::vector<std::string>& role_names, const std::vector<std::string>& required_roles,
                            const std::string& why = {}, int rollout_tp = 0);

// Ranks taking part in the actor -> rollout weight sync of model-parallel rank `mp_rank`:
// [actor role rank mp_rank (the first block's)] + the rollout ranks with that mp_rank that do not
// host the actor (those use the actor's model in place). Empty when every rollout rank is
// colocated with the actor (no sync needed). With equal actor and rollout model_parallel_size
// there is one such group per mp_rank, each broadcasting exactly its slices; with different
// sizes the weights move shard to shard instead (weight_reshard_ranks).
std::vector<int> weight_sync_ranks(const Placement& p, int mp_rank = 0);

// The shard-to-shard sync group (rlpt/weights/weight_reshard.h) when the rollout runs on ranks of
// its own with another model_parallel_size than the actor's: the actor's first block (mp ranks
// 0..tp-1, the senders) followed by the rollout ranks in role order. Empty otherwise.
std::vector<int> weight_reshard_ranks(const Placement& p);

// The sync group of a ZeRO-3 actor (its weights go from its shards, weights::HeldReshard): every
// actor rank in role order (each DP and tp rank owns shards) followed by the rollout ranks that
// do not host the actor, in role order. Empty when every rollout rank hosts the actor.
std::vector<int> weight_exchange_ranks(const Placement& p);

// Hybrid shard: the ZeRO shard group size of `role` (TrainEngine's OptimOptions::shard_group_size,
// 0 = one group of all DP ranks) for an fsdp_size setting (OptimConfig::fsdp_size; `key` names it
// in errors). -1: 0. N >= 1: N, which must divide the role's DP size (N = DP size gives 0). 0: the
// DP ranks sharing a node, which must be consecutive and as many on every node. ConfigError
// naming `key`, the role and the numbers otherwise.
int zero_shard_group_size(const Placement& p, const std::string& role, int64_t fsdp_size, const std::string& key);

}  // namespace rlpt::comm
