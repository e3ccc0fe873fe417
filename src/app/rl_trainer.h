#pragma once
// The RL trainer on the controller (DESIGN §5): the algorithm as it reads on paper.
//
//   for each step:
//     prompts -> rollout (n samples each) -> reward -> old log-probs (actor)
//     -> reference log-probs (KL on) -> values (critic on) -> KL-in-reward (on)
//     -> advantages -> critic update (after critic_warmup) -> actor update
//     -> weight sync -> metrics -> validation every test_freq -> checkpoint every save_freq
//
// Each stage is one call on a role. Private to src/app.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "metrics_log.h"
#include "modes.h"
#include "rlpt/algo/kl.h"
#include "rlpt/app/run_plan.h"
#include "rlpt/data/sampler.h"
#include "rlpt/roles/rollout.h"
#include "task_data.h"

namespace rlpt::app {

class RlTrainer {
  public:
    RlTrainer(protocol::Controller& ctl, const RunContext& run);
    // Runs to trainer.total_training_steps (or the preemption point); returns the exit code.
    int run();

  private:
    struct StepTimer;
    void check_batch_sizes() const;
    void init_roles();
    void sync_weights();
    roles::GenerateArgs sampling_args(bool validation) const;
    Batch generate(const std::vector<int64_t>& example_ids, int64_t n, int64_t first_sample_index, bool validation);
    // One rollout call on a prompt batch (make_prompt_batch's fields).
    Batch run_rollout(const Batch& prompts, const roles::GenerateArgs& args);
    // remax: [B] fp32, the reward of the greedy response to each row's prompt.
    torch::Tensor greedy_baselines(const Batch& batch);
    void set_reward_components(Batch& b, const ScoredResponses& sc) const;
    int working_ranks() const;
    Batch generate_train_batch(std::map<std::string, double>& metrics, std::map<std::string, double>& timing);
    Batch arrange_for_update(const Batch& b, int64_t dp, int64_t num_mini) const;
    using Metrics = std::map<std::string, double>;
    // The stages of train_step, in order.
    Metrics train_step();
    void compute_old_log_probs(Batch& batch, Metrics& m);
    void compute_ref_log_probs(Batch& batch);
    void compute_rewards(Batch& batch, Metrics& m);
    void compute_advantages(Batch& batch);
    void update_roles(const Batch& batch, bool update_actor, Metrics& m);
    void add_step_metrics(const Batch& batch, const Metrics& timing, double step_time, Metrics& m) const;
    Batch critic_update_input(const Batch& batch) const;
    Batch actor_update_input(const Batch& batch) const;
    bool critic_shares_actor_ranks() const;
    // The sampling temperature of the batch's rollout (log-probs are of softmax(logits / T)).
    static double rollout_temperature(const Batch& batch);
    std::map<std::string, double> validate();
    void save_checkpoint();
    void check_weight_version(const Batch& b);
    // Writes the current policy (+ tokenizer) as a Hugging Face folder at `dir`.
    void export_policy(const std::string& dir);
    bool try_resume();
    void log_progress(const std::map<std::string, double>& m) const;

    protocol::Controller& ctl_;
    const RunContext& run_;
    const Config& c_;
    TaskData task_;
    std::unique_ptr<data::EpochSampler> sampler_;
    algo::KlController kl_ctrl_;
    RunPlan plan_;  // which roles and stages this run has (rlpt/app/run_plan.h)
    int64_t step_ = 0;  // training steps done
    // Stale-weight guard: the weight version (actor optimizer steps) of the last training batch,
    // and whether an actor update + sync happened since (the next batch must then be newer).
    int64_t last_weight_version_ = -1;
    bool expect_newer_weights_ = false;
    int64_t total_steps_ = 0;
    int64_t batches_per_epoch_ = 1;
    std::unique_ptr<MetricsLog> log_;
    double started_ = 0;
};

}  // namespace rlpt::app
