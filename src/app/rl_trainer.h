#pragma once
// The RL trainer on the controller (DESIGN §5): the algorithm as it reads on paper.
//
//   for each step:
//     prompts -> rollout (n samples each) -> reward -> old log-probs (actor)
//     -> reference log-probs (KL on) -> values (critic on) -> KL-in-reward (on)
//     -> advantages -> critic update (after critic_warmup) -> actor update
//     -> weight sync -> metrics -> validation every test_freq -> checkpoint every save_freq
//
// Each stage is one call on a role (protocol::Controller, rank 0). The parts beside it:
//   RolloutSource (rollout_source.h)  rollout calls, weight versions and syncs, asynchronous
//                                     prefetch (trainer.max_staleness > 0) and its checkpointing
//   RewardStage (reward_stage.h)      scores, reward model, dynamic sampling, KL in the reward
//   UpdateInputs (update_inputs.h)    what the scoring calls and the updates take of the batch
//   StepMetrics (step_metrics.h)      the step's metrics and console line
// RlTrainer keeps the step, validation, and checkpoint orchestration (rl_checkpoint.cpp).
// Private to src/app.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "metrics_log.h"
#include "modes.h"
#include "reward_stage.h"
#include "rlpt/app/run_plan.h"
#include "rlpt/data/sampler.h"
#include "rollout_source.h"
#include "step_metrics.h"
#include "task_data.h"
#include "update_inputs.h"

namespace rlpt::app {

class RlTrainer {
  public:
    RlTrainer(protocol::Controller& ctl, const RunContext& run);
    // Runs to trainer.total_training_steps (or the preemption point); returns the exit code.
    int run();

  private:
    using Metrics = std::map<std::string, double>;
    void check_batch_sizes() const;
    void check_async_plan() const;
    void init_roles();
    // The reward_model role's kComputeScore when the run has one.
    RewardModelFn reward_model();
    // The stages of train_step, in order.
    Metrics train_step();
    // `first`: the first generation round when it was prefetched (async), else generated here.
    Batch generate_train_batch(Metrics& m, Metrics& timing, std::optional<Batch> first = std::nullopt,
                               int64_t first_policy = 0);
    void compute_old_log_probs(Batch& batch, Metrics& m);
    // algorithm.rollout_correction: IS weights / rejection sampling / rollout_corr/* metrics.
    void apply_rollout_correction(Batch& batch, Metrics& m) const;
    void compute_advantages(Batch& batch);
    void update_roles(const Batch& batch, bool update_actor, Metrics& m);
    bool critic_shares_actor_ranks() const;
    Metrics validate();
    // Writes the current policy (+ tokenizer) as a Hugging Face folder at `dir`.
    void export_policy(const std::string& dir);
    // Checkpoints (rl_checkpoint.cpp).
    void save_checkpoint();
    bool try_resume();

    protocol::Controller& ctl_;
    const RunContext& run_;
    const Config& c_;
    RunPlan plan_;  // which roles and stages this run has (rlpt/app/run_plan.h)
    TaskData task_;
    data::EpochSampler sampler_;
    int64_t batches_per_epoch_;
    int64_t total_steps_;
    RolloutSource rollout_;
    RewardStage rewards_;
    UpdateInputs update_inputs_;
    StepMetrics step_metrics_;
    int64_t step_ = 0;         // training steps done
    int64_t batch_epoch_ = 0;  // the data epoch of the step's batch (async: drawn a step ahead)
    std::unique_ptr<MetricsLog> log_;
    double started_ = 0;
};

}  // namespace rlpt::app
