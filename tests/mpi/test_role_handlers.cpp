// Every handler of every role's dispatch table, called through the real protocol (Controller and
// WorkerHost in this process) on a small batch of configs/tiny.yaml's model: each returns the
// fields its table row declares, with one row per input row (concatenated methods) or one output
// per role rank (kAll). The list of calls below must cover the registry: a method added to a
// table without a small batch here fails this test, naming it.
// On 1 rank every role is colocated; on 2 ranks the rollout runs on its own rank, so
// send_weights / receive_weights really move the weights: after the updates the rollout's
// sampling log-probs differ from the actor's until the sync, and agree after it.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "rlpt/app/registry.h"
#include "rlpt/app/role_settings.h"
#include "rlpt/comm/device.h"
#include "rlpt/comm/placement.h"
#include "rlpt/comm/topology.h"
#include "rlpt/config/config.h"
#include "rlpt/core/log.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/value_model.h"
#include "rlpt/protocol/runtime.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "rlpt/roles/reference.h"
#include "rlpt/roles/reward_model.h"
#include "rlpt/roles/rollout.h"
#include "unit/test_tolerance.h"

namespace rlpt {
namespace {

namespace fs = std::filesystem;

std::string source_dir() {
    const char* s = std::getenv("RLPT_SOURCE_DIR");
    return s ? s : ".";
}

constexpr int64_t kVocab = 32;  // the tiny task's tokenizer has fewer symbols
constexpr int64_t kRows = 4;    // divides over 1 or 2 DP ranks
constexpr int64_t kPrompt = 3;

std::string scratch_dir() {
    auto world = comm::Communicator::world();
    std::string d;
    if (world.rank() == 0) {
        char tmpl[] = "/tmp/rlpt_role_handlers_XXXXXX";
        d = mkdtemp(tmpl) ? tmpl : "";
    }
    world.bcast_string(d, 0);
    return d;
}

Batch columns(const Batch& from, std::initializer_list<const char*> names) {
    Batch b(from.size());
    for (const char* n : names) b.set(n, from.at(n));
    return b;
}

TEST(RoleHandlers, EveryMethodOfEveryRoleRunsOnASmallBatch) {
    auto world = comm::Communicator::world();
    const std::string dir = scratch_dir();
    ASSERT_FALSE(dir.empty());
    const std::string rm_dir = dir + "/reward-model";
    Config c0 = load_config(source_dir() + "/configs/tiny.yaml", {});
    if (world.rank() == 0) {
        model::ValueModel rm(model::value_model_args(model::builtin_model_args(c0.model.builtin, kVocab)));
        rm.init_weights(5);
        model::save_value_model(rm, rm_dir);
    }
    world.barrier();
    const std::string groups =
        world.size() >= 2
            ? "placement.groups=[{roles: [actor, reference, critic, reward_model], ranks: 1}, "
              "{roles: [rollout], ranks: auto}]"
            : "placement.groups=[{roles: [actor, rollout, reference, critic, reward_model], ranks: auto}]";
    std::vector<std::string> overrides{groups,
                                       "reward_model.enable=true",
                                       "reward_model.model_path=" + rm_dir,
                                       "critic.enable=true",
                                       "actor.optim.lr=0.05",
                                       "trainer.log_level=warn",
                                       "trainer.threads_per_rank=1"};
    // RLPT_TEST_OVERRIDES="model.device=cuda" (scripts/gpu_check.sh) runs every handler on the GPU.
    if (const char* more = std::getenv("RLPT_TEST_OVERRIDES")) {
        std::istringstream words(more);
        for (std::string w; words >> w;) overrides.push_back(w);
    }
    Config c = load_config(source_dir() + "/configs/tiny.yaml", overrides);
    set_log_level(parse_log_level(c.trainer.log_level));
    torch::set_num_threads(1);
    const std::vector<std::string> all_roles = app::role_names();
    auto placement =
        comm::compute_placement(c.placement, world.size(), comm::detect_node_labels(world, ""), all_roles, all_roles);
    // The start-up device step of app/job.cpp: handlers get their batches on this rank's device.
    comm::setup_rank_devices(world, placement, c.model.device, c.trainer.device_collectives);
    comm::Topology topo = comm::Topology::build(world, std::move(placement));
    protocol::WorkerHost host(app::role_registry(), app::protocol_settings(c), topo);
    if (!topo.is_controller()) {
        host.serve();
        return;
    }
    protocol::Controller ctl(app::role_registry(), app::protocol_settings(c), topo,
                             topo.hosted_roles().empty() ? nullptr : &host);
    ctl.set_step(1);
    app::give_role_settings(ctl, c);  // each role's kInit carries them

    // Calls one method by name; checks the outputs against its table row.
    std::set<std::string> called;
    auto spec_of = [&](const std::string& role, const std::string& method) -> const protocol::MethodSpec& {
        const auto& reg = app::role_registry();
        const auto& spec = reg[static_cast<size_t>(protocol::find_role(reg, role))];
        return spec.methods[app::method_id(role, method)];
    };
    auto call = [&](const std::string& role, const std::string& method, const Batch& in) -> std::vector<Batch> {
        SCOPED_TRACE(role + "." + method);
        called.insert(role + "." + method);
        const protocol::MethodSpec& m = spec_of(role, method);
        auto p = ctl.submit_raw(ctl.role_index(role), m.id, &in, nullptr);
        std::vector<Batch> outs;
        if (m.collect == protocol::Collect::kAll) {
            outs = ctl.wait_all(p);
            EXPECT_EQ(static_cast<int>(outs.size()), ctl.layout(role).size());
        } else {
            outs.push_back(ctl.wait(p));
        }
        for (const Batch& out : outs) {
            if (m.collect == protocol::Collect::kConcatDpSources && !m.outputs.empty())
                EXPECT_EQ(out.size(), in.size());
            for (const auto& f : m.outputs) {
                if (f.optional) continue;
                const bool has = f.kind == protocol::FieldKind::kTensor   ? out.has(f.name)
                                 : f.kind == protocol::FieldKind::kString ? out.has_strings(f.name)
                                 : f.kind == protocol::FieldKind::kInt    ? out.has_ints(f.name)
                                                                          : true;
                EXPECT_TRUE(has) << "output '" << f.name << "' missing";
                if (f.kind == protocol::FieldKind::kTensor && has && out.at(f.name).is_floating_point())
                    EXPECT_TRUE(torch::isfinite(out.at(f.name)).all().item<bool>()) << f.name;
            }
        }
        return outs;
    };

    for (const auto& role : all_roles) call(role, "ping", Batch(0));
    for (const auto& role : all_roles) {
        if (role == "rollout") {  // app::rollout_init_batch's layout: a text per token id, no stages
            Batch b(kVocab);
            std::vector<std::string> texts;
            for (int64_t t = 0; t < kVocab; ++t) texts.push_back("t" + std::to_string(t));
            b.set_strings("token_text", std::move(texts));
            call(role, "init",
                 protocol::with_args(protocol::with_args(std::move(b), protocol::InitArgs{kVocab, 2}),
                                     roles::RolloutInitArgs{}));
        } else {
            call(role, "init", protocol::with_args(Batch(0), protocol::InitArgs{kVocab, 2}));
        }
    }
    // Weights to the rollout (a no-op when colocated).
    auto sync_weights = [&] {
        auto recv = ctl.submit(roles::RolloutMethod::kReceiveWeights, Batch(0));
        auto send = ctl.submit(roles::ActorMethod::kSendWeights, Batch(0));
        ctl.wait(send);
        ctl.wait(recv);
        called.insert("actor.send_weights");
        called.insert("rollout.receive_weights");
    };
    sync_weights();
    Batch prompts(kRows);
    prompts.set("prompt_ids", torch::randint(1, 10, {kRows, kPrompt}, torch::kInt64));
    prompts.set("prompt_mask", torch::ones({kRows, kPrompt}, torch::kInt64));
    prompts.set_ints("sample_index", {0, 1, 2, 3});
    roles::GenerateArgs gen_args;
    gen_args.max_new_tokens = 3;
    gen_args.seed = 7;
    Batch gen = call("rollout", "generate", protocol::with_args(prompts, gen_args))[0];
    // The largest gap between the rollout's sampling log-probs and the actor's log-probs of the
    // same tokens, over the bound of two fp32 forwards of the same weights that sum in other orders
    // (the rollout's KV-cache decode, the actor's full forward): below 1 when the rollout generates
    // with the actor's weights (tests/unit/test_tolerance.h; kVocab >= the tokenizer's symbols).
    const auto model_args = model::builtin_model_args(c.model.builtin, kVocab);
    const double order_bound =
        tol::fp32_order_bound(tol::transformer_logit_terms(model_args, kPrompt + gen_args.max_new_tokens));
    auto rollout_vs_actor = [&](const Batch& g) {
        Batch s = columns(g, {"input_ids", "attention_mask", "position_ids", "responses"});
        Batch a = call("actor", "compute_log_prob", protocol::with_args(s, roles::ActorLogProbArgs{1.0, false}))[0];
        auto mask = g.at("response_mask").to(torch::kBool);
        const auto want = a.at("old_log_probs").masked_select(mask);
        return tol::max_abs_diff(g.at("rollout_log_probs").masked_select(mask), want) /
               (order_bound * tol::scale_of(want));
    };
    EXPECT_LT(rollout_vs_actor(gen), 1.0);
    ASSERT_EQ(gen.size(), kRows);
    const Batch seq = columns(gen, {"input_ids", "attention_mask", "position_ids", "responses"});

    Batch lp = call("actor", "compute_log_prob",
                    protocol::with_args(seq, roles::ActorLogProbArgs{1.0, /*sum_pi_squared=*/true}))[0];
    EXPECT_TRUE(lp.has("sum_pi_squared"));
    call("reference", "compute_log_prob", protocol::with_args(seq, roles::ReferenceLogProbArgs{1.0}));
    Batch values = call("critic", "compute_values", seq)[0];
    Batch scores = call("reward_model", "compute_score", seq)[0];
    EXPECT_EQ(scores.at("rm_scores").dim(), 1);

    Batch actor_in = columns(gen, {"input_ids", "attention_mask", "position_ids", "responses", "response_mask"});
    actor_in.set("old_log_probs", lp.at("old_log_probs"));
    actor_in.set("advantages", torch::randn({kRows, gen.at("responses").size(1)}));
    Batch actor_metrics =
        call("actor", "update", protocol::with_args(actor_in, roles::ActorUpdateArgs{1.0, 1, double(kRows)}))[0];
    EXPECT_TRUE(actor_metrics.metrics().count("actor/pg_loss"));
    EXPECT_TRUE(actor_metrics.metrics().count("actor/grad_norm"));
    Batch critic_in = columns(gen, {"input_ids", "attention_mask", "position_ids", "responses", "response_mask"});
    critic_in.set("values", values.at("values"));
    critic_in.set("returns", torch::randn({kRows, gen.at("responses").size(1)}));
    Batch critic_metrics =
        call("critic", "update", protocol::with_args(critic_in, roles::CriticUpdateArgs{1, double(kRows)}))[0];
    EXPECT_TRUE(critic_metrics.metrics().count("critic/vf_loss"));

    Batch sft = columns(gen, {"input_ids", "attention_mask", "position_ids"});
    const int64_t T = gen.at("input_ids").size(1);
    sft.set("loss_mask", torch::cat({torch::zeros({kRows, T - gen.at("responses").size(1)}, torch::kInt64),
                                     gen.at("response_mask").to(torch::kInt64)},
                                    1));
    const double tokens = std::max(1.0, sft.at("loss_mask").sum().item<double>());
    Batch sft_metrics = call("actor", "sft_step", protocol::with_args(sft, roles::SftStepArgs{tokens}))[0];
    EXPECT_TRUE(sft_metrics.metrics().count("sft/loss"));

    // The updates moved the actor's weights: a rollout on ranks of its own still samples with the
    // old ones until the next sync, then with the new ones.
    gen_args.seed = 8;
    if (world.size() >= 2)
        EXPECT_GT(rollout_vs_actor(call("rollout", "generate", protocol::with_args(prompts, gen_args))[0]), 1.0);
    sync_weights();
    EXPECT_LT(rollout_vs_actor(call("rollout", "generate", protocol::with_args(prompts, gen_args))[0]), 1.0);

    const std::string ckpt = dir + "/ckpt";
    fs::create_directories(ckpt);
    for (const char* role : {"actor", "critic"}) {
        auto files = call(role, "save", protocol::with_args(Batch(0), protocol::DirArgs{ckpt}));
        for (const Batch& f : files) EXPECT_TRUE(fs::exists(fs::path(ckpt) / f.strings("file")[0])) << role;
        call(role, "load", protocol::with_args(Batch(0), protocol::DirArgs{ckpt}));
    }
    call("actor", "export", protocol::with_args(Batch(0), protocol::DirArgs{dir + "/hf"}));
    EXPECT_TRUE(fs::exists(fs::path(dir) / "hf" / "config.json"));

    // Every method of every table was called.
    for (const auto& spec : app::role_registry())
        for (const auto& m : spec.methods)
            EXPECT_TRUE(called.count(spec.name + "." + m.name))
                << spec.name << "." << m.name << " has no small-batch call in tests/mpi/test_role_handlers.cpp";
    ctl.shutdown(0);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace rlpt
