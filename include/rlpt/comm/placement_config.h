#pragma once
// The placement section of the config (placement.*; the config includes this header), as
// comm::compute_placement reads it (rlpt/comm/placement.h). Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace rlpt {

struct RoleGroupConfig {
    std::vector<std::string> roles;  // colocated in one process: actor, rollout, reference, critic, reward_model
    std::string ranks = "auto";      // a count, or auto (share of the ranks left)
    // Tensor-parallel size: each model of these roles is split over blocks of this many
    // consecutive ranks (model/tensor_parallel.h); ranks / model_parallel_size blocks share the
    // batch. Must split the model's heads, intermediate size and vocabulary (checked when the
    // models are built). A rollout on other ranks than the actor may use another value: its
    // weights then move shard to shard (rlpt/weights/weight_reshard.h).
    int64_t model_parallel_size = 1;
};

struct PlacementConfig {
    bool controller_hosts_roles = false;  // rank 0 also runs role work (so N GPUs do N GPUs' work)
    std::vector<RoleGroupConfig> groups{RoleGroupConfig{{"actor", "rollout", "reference"}, "auto", 1}};
};

}  // namespace rlpt
