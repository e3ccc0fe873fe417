#include "rl_trainer.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include "check.h"
#include "rlpt/algo/advantage.h"
#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/rollout_correction.h"
#include "rlpt/app/job.h"
#include "rlpt/app/role_settings.h"
#include "rlpt/core/log.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "rlpt/roles/reference.h"
#include "rlpt/roles/reward_model.h"
#include "rlpt/roles/rollout.h"
#include "stage_timer.h"

namespace rlpt::app {
namespace {

using roles::ActorMethod;
using roles::CriticMethod;
using roles::ReferenceMethod;
using roles::RewardModelMethod;
using roles::RolloutMethod;

}  // namespace

RlTrainer::RlTrainer(protocol::Controller& ctl, const RunContext& run)
    : ctl_(ctl),
      run_(run),
      c_(*run.config),
      plan_(plan_run(c_)),
      task_(load_task(c_)),
      sampler_(static_cast<int64_t>(task_.train.size()), static_cast<uint64_t>(c_.data.seed), c_.data.shuffle, true),
      batches_per_epoch_(sampler_.batches_per_epoch(c_.data.train_batch_size)),
      total_steps_(c_.trainer.total_training_steps.value_or(c_.trainer.total_epochs * batches_per_epoch_)),
      rollout_(ctl, run.topology->placement(), task_, sampler_, rollout_source_settings(c_, plan_, ctl)),
      rewards_(task_, reward_settings(c_, plan_), reward_model()),
      update_inputs_(update_settings(c_, plan_, ctl)),
      step_metrics_(c_.data.max_prompt_length, c_.data.max_response_length, working_ranks(run.topology->placement()),
                    plan_.has("critic")) {
    check_batch_sizes();
    check_async_plan();
}

void RlTrainer::check_batch_sizes() const {
    std::string all;
    for (const auto& p :
         rl_batch_size_problems(c_, ctl_.dp_size("actor"), plan_.has("critic") ? ctl_.dp_size("critic") : 1,
                                static_cast<int64_t>(task_.train.size())))
        all += (all.empty() ? "" : "\n") + p;
    RLPT_CHECK_KIND(ConfigError, all.empty(), "{}", all);
}

void RlTrainer::check_async_plan() const {
    if (!rollout_.async()) return;
    // Config validation refused a rollout sharing its group with a role called while it
    // generates; ReMax's greedy baselines are a rollout call in the middle of the actor's work.
    RLPT_CHECK_KIND(ConfigError, !plan_.greedy_baselines,
                    "trainer.max_staleness={}: algorithm.adv_estimator={} needs greedy rollouts (its baselines) while "
                    "the actor trains, when the rollout ranks are busy with the next batch; use max_staleness=0",
                    c_.trainer.max_staleness, c_.algorithm.adv_estimator);
}

RewardModelFn RlTrainer::reward_model() {
    if (!plan_.has("reward_model")) return {};
    return
        [this](const Batch& b) { return ctl_.call(RewardModelMethod::kComputeScore, seq_columns(b)).at("rm_scores"); };
}

void RlTrainer::init_roles() {
    // The lr schedules count training steps (verl steps its scheduler once per training step).
    const protocol::InitArgs init_args = role_init_args(task_, total_steps_);
    const Batch init = protocol::with_args(Batch(0), init_args);
    ctl_.call(ActorMethod::kInit, init);
    ctl_.call(RolloutMethod::kInit, rollout_init_batch(init_args, c_, *task_.tok));
    if (plan_.has("reference")) ctl_.call(ReferenceMethod::kInit, init);
    if (plan_.has("critic")) ctl_.call(CriticMethod::kInit, init);
    if (plan_.has("reward_model")) ctl_.call(RewardModelMethod::kInit, init);
}

// Generates and scores rounds (RewardStage::collect) until a full batch of
// data.train_batch_size prompt groups is ready, checking each round's weight versions.
Batch RlTrainer::generate_train_batch(Metrics& m, Metrics& timing, std::optional<Batch> first, int64_t first_policy) {
    const auto next_round = [&](int64_t round) {
        Batch b;
        int64_t policy = rollout_.versions().rollout();
        if (round == 0 && first) {
            b = std::move(*first);
            policy = first_policy;
        } else {
            Stage s(timing, "gen");
            b = rollout_.generate_round(step_, round);
        }
        rollout_.versions().check_batch(b.ints("weight_version"), policy, step_);
        return b;
    };
    return rewards_.collect(next_round, m, timing);
}

// One PPO-family step, as the algorithm reads: rollouts with rewards, the log-probs the update
// compares against, the reference's and the critic's views, rewards (with the KL penalty),
// advantages, the updates, then the weight sync and the metrics.
std::map<std::string, double> RlTrainer::train_step() {
    Metrics m, timing;
    const double t_step = now_s();
    ctl_.set_step(step_ + 1);
    const bool update_actor = step_ >= c_.trainer.critic_warmup;
    WeightVersions& versions = rollout_.versions();
    int64_t policy = versions.rollout();
    Batch batch;
    rollout_.begin_step();
    if (rollout_.async()) {
        std::optional<Batch> first = rollout_.take_prefetch(step_, policy, timing);
        versions.check_trainable(policy, step_);
        // The next step's generation overlaps this step's actor work (and, when scoring calls no
        // role on the rollout's ranks and draws no more prompts, this step's scoring too). After
        // the last step too: a checkpoint there holds that batch, as one written mid-run does, so
        // a run extended from it trains on what a longer uninterrupted run would have.
        auto prefetch_next = [&] {
            batch_epoch_ = sampler_.epoch();  // before the next step's prompts are drawn
            {
                Stage s(timing, "update_weights");
                rollout_.sync_for_staleness(versions.actor() + (update_actor ? 1 : 0));
            }
            rollout_.start_prefetch(step_ + 1);
        };
        const bool early = rollout_.prefetch_before_scoring();
        if (early) prefetch_next();
        batch = generate_train_batch(m, timing, std::move(first), policy);
        if (!early) prefetch_next();
    } else {
        batch = generate_train_batch(m, timing);
        batch_epoch_ = sampler_.epoch();
    }
    if (batch.at("response_mask").sum().item<double>() == 0)
        RLPT_LOG_WARN("step {}: every one of the {} responses is empty (aborted); the step runs on, and the metrics "
                      "over responses are NaN",
                      step_ + 1, batch.size());
    {
        Stage s(timing, "old_log_prob");
        if (c_.algorithm.rollout_correction.bypass_mode) batch.set("old_log_probs", batch.at("rollout_log_probs"));
        else compute_old_log_probs(batch, m);
    }
    if (!c_.algorithm.rollout_correction.bypass_mode) apply_rollout_correction(batch, m);
    if (plan_.has("reference")) {
        Stage s(timing, "ref");
        batch.update(ctl_.call<ReferenceMethod::kComputeLogProb>(seq_columns(batch), {update_inputs_.temperature()}));
    }
    if (plan_.has("critic")) {
        Stage s(timing, "values");
        batch.update(ctl_.call(CriticMethod::kComputeValues, seq_columns(batch)));
    }
    {
        Stage s(timing, "adv");
        rewards_.compute_rewards(batch, m);
        compute_advantages(batch);
    }
    const int64_t staleness = versions.actor() - policy;
    {
        Stage s(timing, "update");
        update_roles(batch, update_actor, m);
    }
    if (update_actor) {
        versions.actor_updated();
        if (!rollout_.async()) {
            Stage s(timing, "update_weights");
            rollout_.sync_to_latest();
        }
    }
    timing["timing_s/rollout_busy"] = rollout_.busy_s();
    const double step_time = now_s() - t_step;
    step_metrics_.add(batch, timing, step_time, step_ + 1, batch_epoch_, m);
    add_async_metrics({policy, staleness, versions.actor(), versions.take_syncs()}, timing, step_time, m);
    return m;
}

// old_log_probs (+ entropy, + sum_pi_squared when the estimator needs it) from the actor.
void RlTrainer::compute_old_log_probs(Batch& batch, Metrics& m) {
    Batch in = seq_columns(batch);
    if (batch.has("routed_experts")) in.set("routed_experts", batch.at("routed_experts"));  // MoE: the rollout's routes
    Batch old = ctl_.call<ActorMethod::kComputeLogProb>(in, {update_inputs_.temperature(), plan_.sum_pi_squared});
    batch.update(old);
    if (old.has("entropy")) {
        algo::GlobalBatchInfo gbi;
        gbi.loss_scale_factor = c_.actor.loss_scale_factor;
        const auto mask = batch.at("response_mask").to(torch::kFloat32);
        m["actor/entropy"] =
            algo::agg_loss(old.at("entropy"), mask, algo::parse_agg_mode(c_.actor.loss_agg_mode), gbi).item<double>();
    }
}

// verl's decoupled mode (ALGORITHMS §6.3): once per training batch, after the actor's old
// log-probs and before the advantage. Needs the rollout's log-probs (rollout.calculate_log_probs).
void RlTrainer::apply_rollout_correction(Batch& batch, Metrics& m) const {
    if (!batch.has("rollout_log_probs") || batch.at("response_mask").sum().item<double>() == 0) return;
    const auto& rc = c_.algorithm.rollout_correction;
    algo::RolloutCorrectionParams p;
    p.rollout_is = rc.rollout_is;
    p.is_threshold = algo::parse_rollout_is_threshold(rc.rollout_is_threshold);
    p.batch_normalize = rc.rollout_is_batch_normalize;
    if (rc.rollout_rs) p.rs = algo::parse_rollout_rs(*rc.rollout_rs, rc.rollout_rs_threshold.value_or(""));
    auto out = algo::compute_rollout_correction(batch.at("old_log_probs"), batch.at("rollout_log_probs"),
                                                batch.at("response_mask"), p);
    if (out.rollout_is_weights.defined()) batch.set("rollout_is_weights", out.rollout_is_weights.to(torch::kFloat32));
    if (!p.rs.empty()) batch.set("response_mask", out.response_mask);
    for (const auto& [k, v] : out.metrics) m[k] = v;
}

// advantages and returns by algorithm.adv_estimator, with the inputs its table row asks for.
void RlTrainer::compute_advantages(Batch& batch) {
    algo::AdvantageInputs ai;
    ai.token_level_rewards = batch.at("token_level_rewards");
    ai.response_mask = batch.at("response_mask");
    if (plan_.has("critic")) ai.values = batch.at("values");
    ai.index = algo::make_group_index(batch.strings("uid")).ids;
    if (plan_.greedy_baselines)
        ai.reward_baselines = rewards_.greedy_baselines(batch, [&](const Batch& prompts) {
            return rollout_.generate_greedy(prompts, step_);
        });
    if (plan_.sum_pi_squared) {
        ai.old_log_probs = batch.at("old_log_probs");
        ai.sum_pi_squared = batch.at("sum_pi_squared");
    }
    if (plan_.reward_components) {
        std::vector<torch::Tensor> comps;
        for (const auto& k : c_.algorithm.gdpo_reward_keys) comps.push_back(batch.at(reward_component_column(k)));
        ai.reward_components = torch::stack(comps);
    }
    auto adv = algo::compute_advantage(c_.algorithm.adv_estimator, ai, c_.algorithm.advantage);
    batch.set("advantages", adv.advantages.to(torch::kFloat32));
    batch.set("returns", adv.returns.to(torch::kFloat32));
}

// The critic and actor updates: both in flight at once when they live on different ranks.
void RlTrainer::update_roles(const Batch& batch, bool update_actor, Metrics& m) {
    auto take = [&](protocol::Controller::Pending& call) {
        for (const auto& [k, v] : reduce_metrics(ctl_.wait(call).metrics())) m[k] = v;
    };
    std::optional<protocol::Controller::Pending> critic_call;
    if (plan_.has("critic")) critic_call = ctl_.submit(CriticMethod::kUpdate, update_inputs_.critic(batch));
    if (!update_actor) {
        if (critic_call) take(*critic_call);
        return;
    }
    Batch actor_in = update_inputs_.actor(batch);
    if (critic_call && critic_shares_actor_ranks()) {
        take(*critic_call);  // one after the other on shared ranks
        critic_call.reset();
    }
    auto actor_call = ctl_.submit(ActorMethod::kUpdate, actor_in);
    if (critic_call) take(*critic_call);
    take(actor_call);
}

bool RlTrainer::critic_shares_actor_ranks() const {
    const auto& critic = ctl_.layout("critic").world_ranks;
    const auto& actor = ctl_.layout("actor").world_ranks;
    return std::find_first_of(critic.begin(), critic.end(), actor.begin(), actor.end()) != critic.end();
}

std::map<std::string, double> RlTrainer::validate() {
    std::map<std::string, double> m;
    if (task_.val.empty()) return m;
    const double t0 = now_s();
    if (rollout_.async()) {  // validate the actor's newest weights (the rollout may hold older ones)
        rollout_.settle_prefetch();
        rollout_.sync_to_latest();
    }
    const int64_t n = c_.rollout.val.n;
    const int64_t chunk = c_.data.val_batch_size > 0 ? c_.data.val_batch_size : static_cast<int64_t>(task_.val.size());
    ValidationTally tally;
    for (int64_t b = 0; b < static_cast<int64_t>(task_.val.size()); b += chunk) {
        std::vector<int64_t> idx;
        for (int64_t i = b; i < std::min<int64_t>(b + chunk, static_cast<int64_t>(task_.val.size())); ++i)
            idx.push_back(i);
        Batch out = rollout_.generate(idx, n, b * n, true, step_);
        tally.add(out, score_responses(task_, out));
    }
    m = tally.metrics(n);
    m["timing_s/testing"] = now_s() - t0;
    return m;
}

void RlTrainer::export_policy(const std::string& dir) {
    ctl_.call<ActorMethod::kExport>(Batch(0), {dir});
    task_.tok->save(dir);
    RLPT_LOG_INFO("exported the policy as a Hugging Face folder: {}", dir);
}

int RlTrainer::run() {
    started_ = now_s();
    init_roles();
    const bool resumed = try_resume();
    log_ = std::make_unique<MetricsLog>(run_.run_dir, resumed ? step_ : -1, c_.trainer.logger);
    if (!resumed) rollout_.sync_weights();
    RLPT_LOG_INFO("{}/{}: training {} steps ({} prompts x {} samples per step, {} steps per epoch){}",
                  c_.trainer.project_name, c_.trainer.experiment_name, total_steps_, c_.data.train_batch_size,
                  c_.rollout.n, batches_per_epoch_, resumed ? fmt::format(", resumed at step {}", step_) : "");
    std::map<std::string, double> last_val;
    if (!resumed && c_.trainer.val_before_train) {
        last_val = validate();
        log_->write(0, last_val);
        for (const auto& [k, v] : last_val)
            if (k.rfind("val-core/", 0) == 0) RLPT_LOG_INFO("validation before training: {} = {:.4f}", k, v);
    }
    while (step_ < total_steps_) {
        auto m = train_step();
        ++step_;
        const bool last = step_ == total_steps_;
        if (c_.trainer.test_freq > 0 && (step_ % c_.trainer.test_freq == 0 || last)) {
            last_val = validate();
            for (const auto& [k, v] : last_val) m[k] = v;
        }
        if (log_->console()) log_progress(m, step_, total_steps_, batch_epoch_);
        for (const auto& [k, v] : m)
            if (k.rfind("val-core/", 0) == 0) RLPT_LOG_INFO("  validation at step {}: {} = {:.4f}", step_, k, v);
        log_->write(step_, m);
        const bool saved = c_.trainer.save_freq > 0 && (step_ % c_.trainer.save_freq == 0 || last);
        if (saved) save_checkpoint();
        if (c_.trainer.export_hf_freq > 0 && step_ % c_.trainer.export_hf_freq == 0)
            export_policy((std::filesystem::path(run_.run_dir) / "hf_models" / fmt::format("step_{}", step_)).string());
        // Preemption (SIGTERM/SIGUSR1 on any rank): the step is done; checkpoint every role and
        // exit 75 so a requeued job resumes here (trainer.resume=auto). After the last step
        // the run is complete and ends normally.
        if (!last && ctl_.stop_requested()) {
            if (!saved) save_checkpoint();
            RLPT_LOG_WARN("stopping after step {}/{} on {}: checkpoint written; exit code {} (a run with "
                          "trainer.resume=auto continues from here)",
                          step_, total_steps_, ctl_.stop_reason(), kExitPreempted);
            return kExitPreempted;
        }
    }
    rollout_.settle_prefetch();  // async: the generation for a step after the last one (kept in its checkpoint)
    if (c_.trainer.export_hf) export_policy((std::filesystem::path(run_.run_dir) / "hf_model").string());
    std::string summary;
    for (const auto& [k, v] : last_val)
        if (k.rfind("val-core/", 0) == 0) summary += fmt::format(", {} {:.4f}", k, v);
    RLPT_LOG_INFO("done: {} steps in {:.1f} s{}; metrics in {}", step_, now_s() - started_, summary, log_->path());
    return 0;
}

}  // namespace rlpt::app
