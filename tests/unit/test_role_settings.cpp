// Settings resolved once (rlpt/app/role_settings.h): each role's settings come from the config on
// the controller, travel with its kInit through their field lists, and a missing one is an error
// naming the role, the method and the field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rlpt/app/registry.h"
#include "rlpt/app/role_settings.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "rlpt/roles/reference.h"
#include "rlpt/roles/reward_model.h"
#include "rlpt/roles/rollout.h"
#include "unit/test_algo_util.h"

namespace rlpt {
namespace {

// What a role's kInit handler decodes: the settings the controller adds to the trainer's InitArgs.
template <typename Settings>
Settings received(const Batch& settings) {
    const Batch init = protocol::with_args(settings, protocol::InitArgs{});
    return protocol::decode_args<protocol::InitWith<Settings>>(init, "test.init").settings;
}

template <typename F>
void expect_config_error(F&& f, const std::string& needle) {
    try {
        f();
        ADD_FAILURE() << "expected a ConfigError containing '" << needle << "'";
    } catch (const ConfigError& e) {
        EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
}

TEST(RoleSettings, EachRoleGetsItsSettingsResolvedFromTheConfig) {
    const Config c =
        config_from_yaml("", "test",
                         {"actor.policy_loss.loss_mode=clip_cov", "actor.clip_ratio_high=0.28",
                          "actor.policy_loss.clip_cov_lb=-2", "actor.loss_agg_mode=seq-mean-token-mean",
                          "actor.entropy_coeff=0.01", "actor.calculate_entropy=false", "actor.use_kl_loss=true",
                          "actor.optim.lr=0.02", "actor.ppo_epochs=2", "trainer.seed=9", "trainer.call_timeout_s=77",
                          "trainer.stall_warn_s=5", "rollout.weight_sync.bucket_mb=3", "model.dtype=bfloat16",
                          "model.builtin.hidden_size=64", "critic.model_path=/somewhere",
                          "critic.forward_micro_batch_size_per_rank=5", "ref.log_prob_micro_batch_size_per_rank=6"});
    const auto all = app::resolve_role_settings(c, {"actor", "rollout", "reference", "critic"});
    ASSERT_EQ(all.size(), 4u);

    const auto a = received<roles::ActorSettings>(all.at("actor"));
    EXPECT_EQ(a.loss.loss_mode, "clip_cov");
    EXPECT_EQ(a.loss.policy.clip_ratio, 0.2);
    EXPECT_EQ(a.loss.policy.clip_ratio_high, 0.28);
    EXPECT_FALSE(a.loss.policy.clip_ratio_low.has_value());  // unset travels as unset, not as 0
    EXPECT_EQ(a.loss.policy.clip_cov_lb, -2.0);
    EXPECT_EQ(a.loss.policy.loss_agg_mode, algo::AggMode::kSeqMeanTokenMean);
    EXPECT_EQ(a.loss.entropy_coeff, 0.01);
    EXPECT_TRUE(a.loss.use_kl_loss);
    EXPECT_TRUE(a.log_prob_entropy);  // entropy_coeff != 0 overrides calculate_entropy=false
    EXPECT_EQ(a.optim.lr, 0.02);
    EXPECT_EQ(a.optim_key, "actor.optim");
    EXPECT_EQ(a.ppo.epochs, 2);
    EXPECT_EQ(a.seed, 9);
    EXPECT_EQ(a.model.dtype, "bfloat16");
    EXPECT_EQ(a.model.builtin.hidden_size, 64);
    EXPECT_EQ(a.weight_sync.timeout_s, 77.0);
    EXPECT_EQ(a.weight_sync.bucket_mb, 3.0);
    EXPECT_EQ(a.sft_micro_batch_size_per_rank, c.sft.micro_batch_size_per_rank);

    const auto cr = received<roles::CriticSettings>(all.at("critic"));
    EXPECT_EQ(cr.model_path, "/somewhere");
    EXPECT_EQ(cr.ppo.epochs, 2);  // critic.ppo_epochs null: the actor's
    EXPECT_EQ(cr.ppo.micro_batch_size_per_rank, c.critic.ppo_micro_batch_size_per_rank);
    EXPECT_EQ(cr.loss_agg_mode, algo::AggMode::kSeqMeanTokenMean);  // actor.loss_agg_mode, as verl's critic
    EXPECT_EQ(cr.optim.lr, c.critic.optim.lr);
    EXPECT_EQ(cr.forward_micro_batch_size_per_rank, 5);
    EXPECT_EQ(cr.policy.builtin.hidden_size, 64);

    const auto r = received<roles::ReferenceSettings>(all.at("reference"));
    EXPECT_EQ(r.log_prob_micro_batch_size_per_rank, 6);
    EXPECT_EQ(r.zero_stage, 0);
    EXPECT_EQ(r.model.dtype, "bfloat16");

    const auto ro = received<roles::RolloutSettings>(all.at("rollout"));
    EXPECT_EQ(ro.model.dtype, "bfloat16");
    EXPECT_EQ(ro.dtype, "auto");
    EXPECT_EQ(ro.generator, "sampler");
    EXPECT_EQ(ro.max_num_seqs, c.rollout.max_num_seqs);
    EXPECT_FALSE(ro.max_num_batched_tokens.has_value());
    EXPECT_EQ(ro.weight_sync.bucket_mb, 3.0);
    EXPECT_EQ(ro.weight_sync.timeout_s, 77.0);
    EXPECT_TRUE(ro.generators.stages.empty());

    const protocol::ProtocolSettings p = app::protocol_settings(c);
    EXPECT_EQ(p.call_timeout_s, 77.0);
    EXPECT_EQ(p.stall_warn_s, 5.0);
}

// The rollout's settings hold lists of strings (the agent's tools) and of structs (the stages):
// each arrives whole, in order.
TEST(RoleSettings, TheRolloutGetsItsGeneratorArgumentsWhole) {
    const Config c = config_from_yaml(
        "rollout:\n"
        "  generator: multi_stage\n"
        "  max_num_batched_tokens: 960\n"
        "  dtype: float32\n"
        "  beam_search: {beam_width: 3, length_penalty: 0.5}\n"
        "  stages:\n"
        "    - {max_tokens: 4, stop: [\"</think>\", \"\\n\\n\"], append: \"x\"}\n"
        "    - {generator: beam_search, max_tokens: 2, share_across_samples: true}\n"
        "  multi_turn: {builtin_tools: [calculator], mcp_servers: [\"npx -y a\", \"b c\"], max_assistant_turns: 4}\n"
        "model: {chat_template: qwen2}\n",
        "test", {"data.max_response_length=16"});
    const auto s = received<roles::RolloutSettings>(app::resolve_role_settings(c, {"rollout"}).at("rollout"));
    EXPECT_EQ(s.generator, "multi_stage");
    EXPECT_EQ(s.max_num_batched_tokens, 960);
    EXPECT_EQ(s.dtype, "float32");
    EXPECT_EQ(s.generators.beam_search.beam_width, 3);
    EXPECT_EQ(s.generators.beam_search.length_penalty, 0.5);
    ASSERT_EQ(s.generators.stages.size(), 2u);
    EXPECT_EQ(s.generators.stages[0].generator, "sampler");
    EXPECT_EQ(s.generators.stages[0].max_tokens, 4);
    EXPECT_EQ(s.generators.stages[0].stop, (std::vector<std::string>{"</think>", "\n\n"}));
    EXPECT_TRUE(s.generators.stages[0].append_ids.empty());  // encoded by the controller: RolloutInitArgs
    EXPECT_EQ(s.generators.stages[1].generator, "beam_search");
    EXPECT_TRUE(s.generators.stages[1].share_across_samples);
    EXPECT_TRUE(s.generators.stages[1].stop.empty());
    EXPECT_EQ(s.generators.multi_turn.builtin_tools, (std::vector<std::string>{"calculator"}));
    EXPECT_EQ(s.generators.multi_turn.mcp_servers, (std::vector<std::string>{"npx -y a", "b c"}));
    EXPECT_EQ(s.generators.multi_turn.max_assistant_turns, 4);
    EXPECT_EQ(s.generators.chat_template, "qwen2");
}

TEST(RoleSettings, SftModeTrainsTheActorWithSftOptim) {
    const Config c = config_from_yaml("", "test", {"trainer.mode=sft", "sft.optim.zero_stage=3"});
    const auto a = received<roles::ActorSettings>(app::resolve_role_settings(c, {"actor"}).at("actor"));
    EXPECT_EQ(a.optim_key, "sft.optim");
    EXPECT_EQ(a.optim.lr, c.sft.optim.lr);
    EXPECT_EQ(a.optim.scheduler, "cosine");
    EXPECT_EQ(a.weight_sync.actor_zero_stage, 3);  // the rollout's sync reads the optimizer the actor trains with
}

TEST(RoleSettings, AMissingSettingIsAConfigErrorBeforeAnyRoleStarts) {
    const Config c = config_from_yaml("", "test", {"reward_model.enable=true"});
    expect_config_error(
        [&] {
            app::resolve_role_settings(c, {"actor", "reward_model"});
        },
        "reward_model.enable=true needs reward_model.model_path");
    EXPECT_NO_THROW(app::resolve_role_settings(c, {"actor"}));  // only the roles the run places
}

// A kInit without one of its settings fails in the handler's decoding, naming the role's method
// (from its table) and the field, before the role builds anything.
TEST(RoleSettings, AnInitWithoutASettingNamesTheMethodAndTheField) {
    const Config c = config_from_yaml("", "test", {});
    Batch init =
        protocol::with_args(app::resolve_role_settings(c, {"actor"}).at("actor"), protocol::InitArgs{32, 2, "", ""});
    Batch without(0);
    for (const auto& [k, v] : init.meta())
        if (k != "settings.loss.policy.clip_ratio") without.set_meta(k, v);
    const auto& row = roles::actor_spec().methods[static_cast<size_t>(roles::ActorMethod::kInit)];
    EXPECT_TRUE(row.takes_settings);
    protocol::RoleWorker worker;
    protocol::WorkerContext ctx;
    ctx.role = "actor";
    ctx.method = row.name;
    algo::test::expect_value_error([&] { row.handler(worker, ctx, without); },
                                   "actor.init: the call has no argument 'settings.loss.policy.clip_ratio'");
}

TEST(RoleSettings, ZeroShardGroupsAndTheReferenceStageFollowTheConfig) {
    auto p =
        comm::compute_placement(PlacementConfig{true, {RoleGroupConfig{{"actor", "rollout", "reference"}, "auto", 1}}},
                                8, {0, 0, 0, 0, 1, 1, 1, 1}, app::role_names(), {});
    Config c;
    c.actor.optim.zero_stage = 3;
    c.actor.optim.fsdp_size = 3;
    expect_config_error([&] { app::check_zero_shard_groups(c, p); }, "actor.optim.fsdp_size: 3 does not divide");
    c.actor.optim.fsdp_size = 4;
    EXPECT_NO_THROW(app::check_zero_shard_groups(c, p));
    EXPECT_EQ(app::reference_zero_stage(c), 3);
    EXPECT_EQ(
        received<roles::ReferenceSettings>(app::resolve_role_settings(c, {"reference"}).at("reference")).fsdp_size, 4);
    c.ref.zero_stage = 0;
    EXPECT_EQ(app::reference_zero_stage(c), 0);
}

}  // namespace
}  // namespace rlpt
