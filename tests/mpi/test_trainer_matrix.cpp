// The real RL trainer (src/app: config -> placement -> roles -> RlTrainer), built in this process
// once per run, for one or two steps of configs/tiny.yaml:
//   * every advantage estimator x the policy losses vanilla, dro, clip_cov, gspo (gae with a critic);
//   * ReMax's greedy baseline answers the row's own prompt (greedy rollouts: advantage exactly 0);
//   * the learning-rate schedule advances once per training step (2 mini-batches per step);
//   * clip_cov's random draws repeat after a resume (2 steps == 1 step + resume + 1 step);
//   * the reward_model role adds its scores, also split over a tensor-parallel block of 2.
// Building the trainer in-process keeps ~60 one-step runs to seconds (one binary per run would
// pay MPI and LibTorch start-up each time).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "modes.h"
#include "rlpt/algo/advantage.h"
#include "rlpt/app/registry.h"
#include "rlpt/app/role_settings.h"
#include "rlpt/app/run_plan.h"
#include "rlpt/comm/placement.h"
#include "rlpt/comm/topology.h"
#include "rlpt/config/config.h"
#include "rlpt/core/log.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/value_model.h"
#include "rlpt/protocol/runtime.h"
#include "unit/test_tolerance.h"

namespace rlpt {
namespace {

namespace fs = std::filesystem;
using Metrics = std::map<std::string, double>;

std::string source_dir() {
    const char* s = std::getenv("RLPT_SOURCE_DIR");
    return s ? s : ".";
}

// A scratch directory every rank agrees on (made by rank 0).
const std::string& scratch() {
    static const std::string dir = [] {
        auto world = comm::Communicator::world();
        std::string d;
        if (world.rank() == 0) {
            char tmpl[] = "/tmp/rlpt_trainer_matrix_XXXXXX";
            d = mkdtemp(tmpl) ? tmpl : "";
        }
        world.bcast_string(d, 0);
        return d;
    }();
    return dir;
}

// Runs the trainer on configs/tiny.yaml with `overrides` on every rank; returns rank 0's metrics
// by step (empty on other ranks).
std::map<int64_t, Metrics> run_trainer(const std::string& name, std::vector<std::string> overrides) {
    auto world = comm::Communicator::world();
    std::vector<std::string> ov{"trainer.output_dir=" + scratch(), "trainer.experiment_name=" + name,
                                "trainer.total_training_steps=1",  "trainer.export_hf=false",
                                "trainer.log_level=warn",          "trainer.threads_per_rank=1"};
    ov.insert(ov.end(), overrides.begin(), overrides.end());
    Config c = load_config(source_dir() + "/configs/tiny.yaml", ov);
    set_log_level(parse_log_level(c.trainer.log_level));
    torch::set_num_threads(1);
    const app::RunPlan plan = app::plan_run(c);
    auto placement = comm::compute_placement(c.placement, world.size(), comm::detect_node_labels(world, ""),
                                             app::role_names(), plan.roles, plan.why);
    comm::Topology topo = comm::Topology::build(world, std::move(placement));
    protocol::WorkerHost host(app::role_registry(), app::protocol_settings(c), topo);
    std::map<int64_t, Metrics> by_step;
    if (!topo.is_controller()) {
        host.serve();
        return by_step;
    }
    app::RunContext run;
    run.config = &c;
    run.topology = &topo;
    run.run_dir = (fs::path(scratch()) / name).string();
    fs::create_directories(run.run_dir);
    protocol::Controller ctl(app::role_registry(), app::protocol_settings(c), topo,
                             topo.hosted_roles().empty() ? nullptr : &host);
    int code = 1;
    try {
        code = app::run_mode(ctl, run);
    } catch (const std::exception& e) {
        ADD_FAILURE() << name << ": the trainer threw: " << e.what();
    }
    ctl.shutdown(code);
    EXPECT_EQ(code, 0) << name;
    std::ifstream f(fs::path(run.run_dir) / "metrics.jsonl");
    for (std::string line; std::getline(f, line);) {
        auto j = nlohmann::json::parse(line);
        Metrics m;
        for (auto it = j.begin(); it != j.end(); ++it)
            if (it->is_number()) m[it.key()] = it->get<double>();
        by_step[j.at("step").get<int64_t>()] = m;
    }
    return by_step;
}

bool is_controller() { return comm::Communicator::world().rank() == 0; }

double get(const Metrics& m, const std::string& key) {
    auto it = m.find(key);
    EXPECT_NE(it, m.end()) << "metric " << key << " missing";
    return it == m.end() ? std::nan("") : it->second;
}

const char* kCriticGroup = "placement.groups=[{roles: [actor, rollout, reference, critic], ranks: auto}]";

TEST(TrainerMatrix, EveryEstimatorWithEveryLossRunsAStep) {
    for (const auto& estimator : algo::advantage_estimator_names()) {
        for (const char* loss : {"vanilla", "dro", "clip_cov", "gspo"}) {
            const std::string name = estimator + "-" + loss;
            SCOPED_TRACE(name);
            std::vector<std::string> ov{"algorithm.adv_estimator=" + estimator,
                                        std::string("actor.policy_loss.loss_mode=") + loss,
                                        "actor.policy_loss.dro_beta=0.1", "algorithm.gdpo_reward_keys=[score, acc]",
                                        // every token a clip_cov candidate: the random choice runs
                                        "actor.policy_loss.clip_cov_lb=-100", "actor.policy_loss.clip_cov_ub=100"};
            if (algo::advantage_estimator_needs_values(estimator)) ov.push_back(kCriticGroup);
            auto steps = run_trainer(name, ov);
            if (!is_controller()) continue;
            ASSERT_EQ(steps.count(1), 1u);
            const Metrics& m = steps.at(1);
            EXPECT_TRUE(std::isfinite(get(m, "actor/pg_loss")));
            EXPECT_TRUE(std::isfinite(get(m, "actor/grad_norm")));
            EXPECT_TRUE(std::isfinite(get(m, "critic/advantages/mean")));
            // verl: tokens / time / the devices doing the work (here every rank hosts roles).
            EXPECT_NEAR(get(m, "perf/throughput"),
                        get(m, "perf/total_num_tokens") / get(m, "perf/time_per_step") /
                            comm::Communicator::world().size(),
                        1e-9 * get(m, "perf/throughput"));
            for (const char* stage : {"gen", "old_log_prob", "adv", "update"})
                EXPECT_GE(get(m, std::string("timing_per_token_ms/") + stage), 0.0) << stage;
            if (algo::advantage_estimator_needs_values(estimator)) EXPECT_TRUE(std::isfinite(get(m, "critic/vf_loss")));
        }
    }
}

// A scorer that tells prompts apart: length of the answer plus a digest of the ground truth.
std::string build_digest_scorer() {
    const fs::path dir = fs::path(scratch()) / "scorer";
    fs::create_directories(dir);
    const fs::path src = dir / "digest.c", lib = dir / "libdigest.so";
    std::ofstream(src) << R"(#include "rlpt/reward/user_scorer.h"
RLPT_SCORER_EXPORT int rlpt_scorer_abi_version(void) { return RLPT_SCORER_ABI_VERSION; }
RLPT_SCORER_EXPORT int rlpt_score_v1(const rlpt_score_input* in, rlpt_score_output* out) {
    double d = 0;
    for (size_t i = 0; i < in->ground_truth_len; ++i) d = d * 1.7 + (unsigned char)in->ground_truth[i];
    out->score = (double)in->solution_len + d / 1000.0;
    return 0;
}
)";
    const std::string cmd =
        "cc -shared -fPIC -I '" + source_dir() + "/include' '" + src.string() + "' -o '" + lib.string() + "'";
    if (std::system(cmd.c_str()) != 0) return "";
    return lib.string();
}

TEST(TrainerMatrix, RemaxBaselineIsTheGreedyAnswerToTheSamePrompt) {
    std::string lib;
    if (is_controller()) lib = build_digest_scorer();
    comm::Communicator::world().bcast_string(lib, 0);
    if (lib.empty()) GTEST_SKIP() << "no C compiler 'cc': cannot build the test scorer";
    // Greedy training rollouts, one per prompt: each sample IS the greedy answer to its prompt, so
    // a baseline from the same prompt equals its reward and every advantage is exactly 0. A
    // baseline from another prompt (the bug: validation prompts indexed by training uids) differs,
    // because the scorer's value depends on the ground truth.
    auto steps =
        run_trainer("remax-greedy", {"algorithm.adv_estimator=remax", "rollout.n=1", "rollout.do_sample=false",
                                     "reward.scorer=custom", "reward.custom_library=" + lib, "data.builtin.num_val=2"});
    if (!is_controller()) return;
    const Metrics& m = steps.at(1);
    EXPECT_LT(get(m, "critic/score/min"), get(m, "critic/score/max"));  // the rewards do differ by prompt
    EXPECT_EQ(get(m, "critic/advantages/max"), 0.0);
    EXPECT_EQ(get(m, "critic/advantages/min"), 0.0);
}

TEST(TrainerMatrix, DynamicSamplingMetricsAndRolloutLogProbsOff) {
    std::string lib;
    if (is_controller()) lib = build_digest_scorer();
    comm::Communicator::world().bcast_string(lib, 0);
    if (lib.empty()) GTEST_SKIP() << "no C compiler 'cc': cannot build the test scorer";
    // The digest scorer rewards longer answers, so sampled groups differ and dynamic sampling
    // keeps some; each metric name of verl's filter_groups runs (acc is constant here).
    for (const char* metric : {"score", "seq_reward", "seq_final_reward"}) {
        SCOPED_TRACE(metric);
        auto steps =
            run_trainer(std::string("dapo-") + metric,
                        {"algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=20",
                         std::string("algorithm.filter_groups.metric=") + metric, "reward.scorer=custom",
                         "reward.custom_library=" + lib, "rollout.calculate_log_probs=false"});
        if (!is_controller()) continue;
        EXPECT_GE(get(steps.at(1), "train/num_gen_batches"), 1.0);
        EXPECT_GT(get(steps.at(1), "train/kept_group_ratio"), 0.0);
        EXPECT_TRUE(std::isfinite(get(steps.at(1), "actor/pg_loss")));
    }
}

TEST(TrainerMatrix, FormatScoreReachesTheScorer) {
    // An untrained model's answers are wrong but mostly contain a number: the number scorer then
    // gives them reward.format_score instead of 0.
    auto steps = run_trainer("format-score", {"reward.scorer=number", "reward.format_score=0.25"});
    if (!is_controller()) return;
    EXPECT_GT(get(steps.at(1), "critic/score/max"), 0.0);
}

TEST(TrainerMatrix, LearningRateScheduleCountsTrainingSteps) {
    // 2 mini-batches per training step, warm-up over 4 training steps from lr 1e-4: the lr is
    // 1e-4·k/4 for every optimizer step of training step k (0-based), as verl steps its scheduler
    // once per training step. Counting optimizer steps would give the mini-batches 0 and 1/4, 2/4
    // and 3/4 of the lr instead. The critic follows the same rule.
    auto steps = run_trainer("lr-unit", {"trainer.total_training_steps=2", "actor.ppo_mini_batch_size=6",
                                         "actor.optim.warmup_steps=4", "critic.optim.warmup_steps=4",
                                         "critic.optim.lr=0.001", "algorithm.adv_estimator=gae", kCriticGroup});
    if (!is_controller()) return;
    EXPECT_EQ(get(steps.at(1), "actor/lr"), 0.0);
    EXPECT_DOUBLE_EQ(get(steps.at(2), "actor/lr"), 1e-4 / 4);
    EXPECT_EQ(get(steps.at(1), "critic/lr"), 0.0);
    EXPECT_DOUBLE_EQ(get(steps.at(2), "critic/lr"), 1e-3 / 4);
}

TEST(TrainerMatrix, ClipCovDrawsRepeatAfterAResume) {
    const std::vector<std::string> common{"actor.policy_loss.loss_mode=clip_cov", "actor.policy_loss.clip_cov_lb=-100",
                                          "actor.policy_loss.clip_cov_ub=100", "actor.policy_loss.clip_cov_ratio=0.3",
                                          "trainer.save_freq=1"};
    auto with = [&](std::vector<std::string> extra) {
        extra.insert(extra.end(), common.begin(), common.end());
        return extra;
    };
    auto straight = run_trainer("clip-cov-straight", with({"trainer.total_training_steps=2"}));
    run_trainer("clip-cov-resumed", with({"trainer.total_training_steps=1"}));
    auto resumed = run_trainer("clip-cov-resumed", with({"trainer.total_training_steps=2", "trainer.resume=auto"}));
    if (!is_controller()) return;
    ASSERT_TRUE(straight.count(2) && resumed.count(2));
    for (const char* k : {"actor/pg_loss", "actor/pg_clipfrac", "actor/grad_norm", "critic/score/mean"})
        EXPECT_EQ(get(straight.at(2), k), get(resumed.at(2), k)) << k;
    EXPECT_GT(get(straight.at(2), "actor/pg_clipfrac"), 0.0);  // tokens were drawn
}

TEST(TrainerMatrix, RewardModelRoleAddsItsScores) {
    auto world = comm::Communicator::world();
    const std::string rm_dir = scratch() + "/reward-model";
    if (is_controller()) {  // a random value-head model over the tiny task's vocabulary (17 < 32)
        Config c = load_config(source_dir() + "/configs/tiny.yaml", {});
        model::ValueModel rm(model::value_model_args(model::builtin_model_args(c.model.builtin, 32)));
        rm.init_weights(5);
        {
            torch::NoGradGuard ng;
            rm.score_weight().mul_(50.0);  // scores of order 1, so they show in critic/score/mean
        }
        model::save_value_model(rm, rm_dir);
    }
    world.barrier();
    const std::vector<std::string> rm{"reward_model.enable=true", "reward_model.model_path=" + rm_dir};
    auto with = [&](std::vector<std::string> extra) {
        extra.insert(extra.end(), rm.begin(), rm.end());
        return extra;
    };
    auto rule_only = run_trainer("rm-off", {});
    auto with_rm = run_trainer("rm-tp1", with({"placement.groups=[{roles: [actor, rollout, reference, reward_model], "
                                               "ranks: auto}]"}));
    std::map<int64_t, Metrics> with_rm_tp2;
    if (world.size() % 2 == 0) {
        with_rm_tp2 =
            run_trainer("rm-tp2", with({"placement.groups=[{roles: [actor, rollout, reference, reward_model], "
                                        "ranks: auto, model_parallel_size: 2}]"}));
    }
    if (!is_controller()) return;
    ASSERT_TRUE(rule_only.count(1) && with_rm.count(1));
    const double off = get(rule_only.at(1), "critic/score/mean"), on = get(with_rm.at(1), "critic/score/mean");
    EXPECT_GT(std::abs(on - off), 1e-3) << "the reward model's scores did not reach the rewards";
    if (world.size() % 2 == 0) {
        // The same reward model at tp 2: its fp32 forward sums the same terms in another order
        // (fp32_order_bound of a score's path, 8 + 4 tokens, relative to max(1, |score|);
        // tests/unit/test_tolerance.h).
        Config c = load_config(source_dir() + "/configs/tiny.yaml", {});
        const auto args = model::builtin_model_args(c.model.builtin, 32);
        const double bound = tol::fp32_order_bound(tol::transformer_logit_terms(args, 12));
        ASSERT_TRUE(with_rm_tp2.count(1));
        EXPECT_NEAR(get(with_rm_tp2.at(1), "critic/score/mean"), on, bound * std::max(1.0, std::abs(on)));
    }
}

TEST(TrainerMatrix, Cleanup) {
    comm::Communicator::world().barrier();
    if (is_controller()) fs::remove_all(scratch());
}

}  // namespace
}  // namespace rlpt
