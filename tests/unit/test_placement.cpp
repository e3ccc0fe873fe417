#include <gtest/gtest.h>

#include "rlpt/app/registry.h"
#include "rlpt/app/run_plan.h"
#include "rlpt/comm/placement.h"
#include "rlpt/core/debug_env.h"
#include "rlpt/core/error.h"

using rlpt::ConfigError;
using rlpt::PlacementConfig;
using rlpt::RoleGroupConfig;
using rlpt::comm::compute_placement;
using rlpt::comm::Placement;

namespace {
std::vector<int> one_node(int n) { return std::vector<int>(static_cast<size_t>(n), 0); }
std::vector<int> nodes_of(int n_nodes, int per_node) {
    std::vector<int> v;
    for (int i = 0; i < n_nodes * per_node; ++i) v.push_back(i / per_node);
    return v;
}
PlacementConfig groups(std::vector<RoleGroupConfig> g, bool hosts = false) {
    PlacementConfig p;
    p.controller_hosts_roles = hosts;
    p.groups = std::move(g);
    return p;
}
std::vector<int> R(std::initializer_list<int> v) { return v; }
// Every role, in the registry's order (what the launch passes).
std::vector<std::string> roles() { return rlpt::app::role_names(); }

template <typename F>
void expect_error(F&& f, const char* fragment) {
    try {
        f();
        ADD_FAILURE() << "expected ConfigError containing: " << fragment;
    } catch (const ConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}
}  // namespace

TEST(Placement, DefaultGroupTakesAllButController) {
    PlacementConfig cfg;  // [actor, rollout, reference] auto
    Placement p = compute_placement(cfg, 5, one_node(5), roles(), {"actor", "rollout"});
    ASSERT_EQ(p.roles.size(), 3u);
    EXPECT_EQ(p.at("actor").world_ranks, R({1, 2, 3, 4}));
    EXPECT_EQ(p.at("rollout").world_ranks, R({1, 2, 3, 4}));
    EXPECT_EQ(p.roles_of(0).size(), 0u);
    EXPECT_EQ(p.roles_of(3), (std::vector<std::string>{"actor", "rollout", "reference"}));
    EXPECT_EQ(p.at("actor").output_sources(), R({1, 2, 3, 4}));
}

TEST(Placement, ControllerHostsRoles) {
    Placement p =
        compute_placement(groups({{{"actor", "rollout"}, "auto", 1}}, true), 4, one_node(4), roles(), {"actor"});
    EXPECT_EQ(p.at("actor").world_ranks, R({0, 1, 2, 3}));
}

TEST(Placement, UnevenFixedAndAutoGroups) {
    // 7 ranks: controller + actor/rollout/ref on 4 + critic on 2.
    Placement p = compute_placement(groups({{{"actor", "rollout", "reference"}, "auto", 1}, {{"critic"}, "2", 1}}), 7,
                                    one_node(7), roles(), {"critic"});
    EXPECT_EQ(p.at("actor").world_ranks, R({1, 2, 3, 4}));
    EXPECT_EQ(p.at("critic").world_ranks, R({5, 6}));
    // Two auto groups share 5 ranks: 3 + 2.
    Placement q =
        compute_placement(groups({{{"actor"}, "auto", 1}, {{"rollout"}, "auto", 1}}), 6, one_node(6), roles(), {});
    EXPECT_EQ(q.at("actor").size() + q.at("rollout").size(), 5);
    EXPECT_EQ(q.at("actor").size(), 3);
}

TEST(Placement, ModelParallelBlocksAndOutputSources) {
    Placement p = compute_placement(groups({{{"actor"}, "auto", 2}}), 5, one_node(5), roles(), {});
    const auto& a = p.at("actor");
    EXPECT_EQ(a.dp_size(), 2);
    EXPECT_EQ(a.output_sources(), R({1, 3}));
    EXPECT_EQ(a.dp_rank_of(3), 1);
    EXPECT_EQ(a.mp_rank_of(3), 1);
}

TEST(Placement, ImpossibleLayoutsAreRefused) {
    expect_error([] { compute_placement(PlacementConfig{}, 1, one_node(1), roles(), {}); },
                 "leave no rank for the roles");
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "3", 1}}), 3, one_node(3), roles(), {});
        },
        "ask for 3 ranks but only 2 are available");
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "1", 1}}), 4, one_node(4), roles(), {});
        },
        "2 ranks would be idle");
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "3", 2}}), 4, one_node(4), roles(), {});
        },
        "not a multiple of its model_parallel_size 2");
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "auto", 1}}), 4, one_node(4), roles(), {"critic"}, "gae");
        },
        "role 'critic' is needed (gae)");
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "auto", 1}, {{"critic"}, "auto", 1}}), 2, one_node(2), roles(), {});
        },
        "no ranks left");
    // 3 ranks available, mp 2: one would be idle.
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "auto", 2}}), 4, one_node(4), roles(), {});
        },
        "would be idle");
}

TEST(Placement, ModelParallelNeverSpansNodes) {
    // 2 nodes x 3 ranks, rank 0 controls: node0 has 2 free, node1 has 3 free; mp=2 -> blocks
    // {1,2} and {3,4}; rank 5 left for the critic.
    Placement p =
        compute_placement(groups({{{"actor"}, "4", 2}, {{"critic"}, "auto", 1}}), 6, nodes_of(2, 3), roles(), {});
    EXPECT_EQ(p.at("actor").world_ranks, R({1, 2, 3, 4}));
    EXPECT_EQ(p.at("critic").world_ranks, R({5}));
    for (const auto& layout : p.roles) {
        for (int i = 0; i < layout.size(); i += layout.mp_size) {
            int node = p.node_of_rank[static_cast<size_t>(layout.world_ranks[static_cast<size_t>(i)])];
            for (int j = 1; j < layout.mp_size; ++j)
                EXPECT_EQ(p.node_of_rank[static_cast<size_t>(layout.world_ranks[static_cast<size_t>(i + j)])], node);
        }
    }
    // mp=3 blocks on nodes with 2 and 3 free ranks: only one block fits.
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "6", 3}}), 7, R({0, 0, 0, 1, 1, 1, 1}), roles(), {});
        },
        "free ranks per node are node 0: 2, node 1: 1");
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "3", 3}, {{"critic"}, "auto", 1}}), 6, R({0, 0, 0, 1, 1, 2}), roles(),
                              {});
        },
        "inside one node");
}

TEST(Placement, MultiNodeLayouts2x8And4x8) {
    // 2 nodes x 8 ranks, controller hosts roles, actor mp=4: 4 blocks, 2 per node.
    Placement p = compute_placement(groups({{{"actor", "rollout", "reference"}, "auto", 4}}, true), 16, nodes_of(2, 8),
                                    roles(), {});
    const auto& a = p.at("actor");
    EXPECT_EQ(a.dp_size(), 4);
    EXPECT_EQ(a.output_sources(), R({0, 4, 8, 12}));
    EXPECT_EQ(p.n_nodes, 2);
    EXPECT_EQ(p.local_rank(9), 1);
    // 4 x 8, rank 0 only controls: node 0 has 7 free ranks, so an mp=8 group fits only on
    // nodes 1..3 and the 7 leftover ranks go to the critic.
    Placement q = compute_placement(groups({{{"actor", "rollout"}, "24", 8}, {{"critic"}, "auto", 1}}), 32,
                                    nodes_of(4, 8), roles(), {});
    EXPECT_EQ(q.at("actor").output_sources(), R({8, 16, 24}));
    EXPECT_EQ(q.at("critic").world_ranks, R({1, 2, 3, 4, 5, 6, 7}));
    // Uneven allocation: nodes with 5, 3 and 8 ranks; mp=4 blocks need 4 on one node.
    std::vector<int> uneven;
    for (int i = 0; i < 5; ++i) uneven.push_back(0);
    for (int i = 0; i < 3; ++i) uneven.push_back(1);
    for (int i = 0; i < 8; ++i) uneven.push_back(2);
    Placement u = compute_placement(groups({{{"actor"}, "12", 4}, {{"rollout"}, "auto", 1}}), 16, uneven, roles(), {});
    EXPECT_EQ(u.at("actor").output_sources(), R({1, 8, 12}));
    EXPECT_EQ(u.at("rollout").world_ranks, R({5, 6, 7}));
}

// Hybrid shard groups (actor.optim.fsdp_size): -1 all DP ranks, N a divisor, 0 one group per node.
TEST(Placement, ZeroShardGroups) {
    using rlpt::comm::zero_shard_group_size;
    // 8 ranks, the controller hosts roles, two nodes of 4: the actor has 8 DP ranks (tp 1) or 4 (tp 2).
    Placement p = compute_placement(groups({{{"actor", "rollout", "reference"}, "auto", 1}}, true), 8, nodes_of(2, 4),
                                    roles(), {});
    EXPECT_EQ(zero_shard_group_size(p, "actor", -1, "k"), 0);
    EXPECT_EQ(zero_shard_group_size(p, "actor", 2, "k"), 2);
    EXPECT_EQ(zero_shard_group_size(p, "actor", 8, "k"), 0);   // one group of all: plain ZeRO
    EXPECT_EQ(zero_shard_group_size(p, "actor", 0, "k"), 4);   // per node
    EXPECT_EQ(zero_shard_group_size(p, "critic", 3, "k"), 0);  // not placed: nothing to check
    expect_error([&] { zero_shard_group_size(p, "actor", 3, "actor.optim.fsdp_size"); },
                 "actor.optim.fsdp_size: 3 does not divide the 8 DP ranks of the actor");
    Placement tp = compute_placement(groups({{{"actor"}, "auto", 2}}, true), 8, nodes_of(2, 4), roles(), {});
    EXPECT_EQ(zero_shard_group_size(tp, "actor", 0, "k"), 2);  // 2 blocks of 2 per node
    EXPECT_EQ(zero_shard_group_size(compute_placement(groups({{{"actor"}, "auto", 1}}, true), 4, one_node(4), roles(),
                                                      {}),
                                    "actor", 0, "k"),
              0);  // one node: plain ZeRO
    // Uneven nodes (3 + 5 ranks) cannot form equal per-node groups.
    Placement u =
        compute_placement(groups({{{"actor"}, "auto", 1}}, true), 8, R({0, 0, 0, 1, 1, 1, 1, 1}), roles(), {});
    expect_error([&] { zero_shard_group_size(u, "actor", 0, "actor.optim.fsdp_size"); },
                 "as many DP ranks of the actor on every node, got [3, 5]");
    // The config-level check (app::check_zero_shard_groups): tests/unit/test_role_settings.cpp.
}

TEST(Placement, SimulatedNodesSpec) {
    EXPECT_EQ(rlpt::simulated_node_label("8", 9, 16), 1);
    EXPECT_EQ(rlpt::simulated_node_label("0,0,1", 2, 3), 1);
    EXPECT_THROW(rlpt::simulated_node_label("0,1", 0, 3), ConfigError);
    EXPECT_THROW(rlpt::simulated_node_label("x", 0, 3), ConfigError);
    EXPECT_THROW(rlpt::simulated_node_label("0", 0, 3), ConfigError);
}

// comm cannot see the role registry: the caller names the roles, and their order is the
// placement's (the order communicators are built in).
TEST(Placement, RolesAreTheCallersInItsOrder) {
    const auto cfg = groups({{{"critic", "actor"}, "2", 1}, {{"rollout"}, "auto", 1}});
    Placement p = compute_placement(cfg, 5, one_node(5), roles(), {});
    ASSERT_EQ(p.roles.size(), 3u);
    EXPECT_EQ(p.roles[0].role, "actor");
    EXPECT_EQ(p.roles[1].role, "rollout");
    EXPECT_EQ(p.roles[2].role, "critic");
    Placement q = compute_placement(cfg, 5, one_node(5), {"critic", "rollout", "actor"}, {});
    ASSERT_EQ(q.roles.size(), 3u);
    EXPECT_EQ(q.roles[0].role, "critic");
    EXPECT_EQ(q.roles[1].role, "rollout");
    EXPECT_EQ(q.roles[2].role, "actor");
    EXPECT_EQ(q.at("actor").world_ranks, p.at("actor").world_ranks);
    expect_error(
        [&] {
            compute_placement(cfg, 5, one_node(5), {"actor", "rollout"}, {});
        },
        "placement: unknown role 'critic' (roles: actor, rollout)");
    expect_error(
        [] {
            compute_placement(groups({{{"actor", "refrence"}, "auto", 1}}), 3, one_node(3), roles(), {});
        },
        "placement: unknown role 'refrence' (roles: actor, rollout, reference, critic, reward_model)");
}

TEST(Placement, RequiredRolesFollowTheAlgorithm) {
    rlpt::Config c;
    auto plan = rlpt::app::plan_run(c);
    EXPECT_EQ(plan.roles, (std::vector<std::string>{"actor", "rollout"}));
    EXPECT_EQ(plan.checkpointed_roles, (std::vector<std::string>{"actor"}));
    c.algorithm.adv_estimator = "gae";
    c.actor.use_kl_loss = true;
    plan = rlpt::app::plan_run(c);
    EXPECT_EQ(plan.roles, (std::vector<std::string>{"actor", "rollout", "reference", "critic"}));
    EXPECT_EQ(plan.checkpointed_roles, (std::vector<std::string>{"actor", "critic"}));
    EXPECT_NE(plan.why.find("adv_estimator=gae"), std::string::npos);
    for (const char* role : {"actor", "rollout", "reference", "critic"}) EXPECT_TRUE(plan.has(role)) << role;
    EXPECT_FALSE(plan.has("reward_model"));
    c.reward_model.enable = true;
    plan = rlpt::app::plan_run(c);
    EXPECT_TRUE(plan.has("reward_model"));
    EXPECT_EQ(plan.roles.back(), "reward_model");
    EXPECT_NE(plan.why.find("reward_model.enable=true"), std::string::npos);
    c.reward_model.enable = false;
    c.algorithm.adv_estimator = "remax";
    c.critic.enable = "auto";
    plan = rlpt::app::plan_run(c);
    EXPECT_FALSE(plan.has("critic"));
    EXPECT_TRUE(plan.greedy_baselines);  // the estimator's table row asks for it
}

TEST(Placement, WeightSyncGroupsPerLayout) {
    using rlpt::comm::weight_reshard_ranks;
    using rlpt::comm::weight_sync_ranks;
    // Colocated: no sync at all.
    Placement colocated =
        compute_placement(groups({{{"actor", "rollout"}, "4", 2}}), 5, one_node(5), roles(), {"actor"});
    EXPECT_TRUE(weight_sync_ranks(colocated).empty());
    EXPECT_TRUE(weight_reshard_ranks(colocated).empty());
    EXPECT_TRUE(rlpt::comm::weight_exchange_ranks(colocated).empty());
    // Equal tp on other ranks: one broadcast group per mp rank, no reshard.
    Placement equal =
        compute_placement(groups({{{"actor"}, "2", 2}, {{"rollout"}, "4", 2}}), 7, one_node(7), roles(), {"actor"});
    EXPECT_EQ(weight_sync_ranks(equal, 0), R({1, 3, 5}));
    EXPECT_EQ(weight_sync_ranks(equal, 1), R({2, 4, 6}));
    EXPECT_TRUE(weight_reshard_ranks(equal).empty());
    // Actor tp 2 x dp 2, rollout tp 1 x dp 2: the actor's first block sends, every rollout rank receives.
    Placement reshard =
        compute_placement(groups({{{"actor"}, "4", 2}, {{"rollout"}, "2", 1}}), 7, one_node(7), roles(), {"actor"});
    EXPECT_EQ(weight_reshard_ranks(reshard), R({1, 2, 5, 6}));
    // Actor tp 1, rollout one tp 4 block (placed first, on ranks 1-4): the sender still comes first.
    Placement wide =
        compute_placement(groups({{{"actor"}, "1", 1}, {{"rollout"}, "4", 4}}), 6, one_node(6), roles(), {"actor"});
    EXPECT_EQ(weight_reshard_ranks(wide), R({5, 1, 2, 3, 4}));
    // A ZeRO-3 actor syncs from its shards: every actor rank (all DP and tp ranks), then the rollout's.
    EXPECT_EQ(rlpt::comm::weight_exchange_ranks(equal), R({1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(rlpt::comm::weight_exchange_ranks(reshard), R({1, 2, 3, 4, 5, 6}));
    EXPECT_EQ(rlpt::comm::weight_exchange_ranks(wide), R({5, 1, 2, 3, 4}));
}

TEST(Placement, ColocatedRolloutTensorParallelSize) {
    // rollout.tensor_model_parallel_size on the actor's group: the rollout gets its own blocks.
    const auto colocated = groups({{{"actor", "rollout", "reference"}, "auto", 1}}, true);
    Placement p = compute_placement(colocated, 4, one_node(4), roles(), {}, {}, 2);
    EXPECT_EQ(p.at("actor").mp_size, 1);
    EXPECT_EQ(p.at("reference").mp_size, 1);
    EXPECT_EQ(p.at("rollout").mp_size, 2);
    EXPECT_EQ(p.at("rollout").output_sources(), R({0, 2}));
    EXPECT_TRUE(rlpt::comm::weight_sync_ranks(p).empty());  // no sync over the wire: resharded in place
    EXPECT_TRUE(rlpt::comm::weight_reshard_ranks(p).empty());
    Placement q =
        compute_placement(groups({{{"actor", "rollout"}, "auto", 2}}, true), 4, one_node(4), roles(), {}, {}, 1);
    EXPECT_EQ(q.at("rollout").mp_size, 1);
    EXPECT_EQ(q.at("actor").mp_size, 2);
    // Equal to the group's size, or 0: nothing changes.
    EXPECT_EQ(compute_placement(colocated, 4, one_node(4), roles(), {}, {}, 1).at("rollout").mp_size, 1);
    expect_error([&] { compute_placement(colocated, 3, one_node(3), roles(), {}, {}, 2); },
                 "rollout.tensor_model_parallel_size: 2 does not divide the 3 ranks");
    expect_error([&] { compute_placement(colocated, 4, nodes_of(2, 2), roles(), {}, {}, 4); }, "would span nodes");
    // A rollout on ranks of its own takes its group's size.
    expect_error(
        [] {
            compute_placement(groups({{{"actor"}, "1", 1}, {{"rollout"}, "2", 1}}, true), 3, one_node(3), roles(), {},
                              {}, 2);
        },
        "rollout.tensor_model_parallel_size: 2 differs from the model_parallel_size 1 of the rollout's own "
        "group placement.groups.1");
}
