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
//
// Asynchronous RL (trainer.max_staleness = K > 0, rl_async.cpp): the rollout call of step s+1 is
// submitted before step s's actor work and collected at the start of step s+1, so the separate
// rollout ranks generate while the actor trains. Versions count actor updates: the batch of a
// step was generated with weights `policy` updates old; the trainer syncs the weights just before
// submitting a generation whenever the batch would otherwise be more than K updates stale when
// trained on, and refuses (InternalError) to train on a batch that is. Validation and
// checkpoints first collect the generation in flight and then sync, so a resumed run (which
// restores that batch from the checkpoint and syncs) continues exactly as an uninterrupted one.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "metrics_log.h"
#include "modes.h"
#include "rlpt/algo/kl.h"
#include "rlpt/app/run_plan.h"
#include "rlpt/data/sampler.h"
#include "rlpt/roles/rollout.h"
#include "task_data.h"

namespace rlpt::ckpt {
class H5Writer;
class H5Reader;
}  // namespace rlpt::ckpt

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
    roles::GenerateArgs sampling_args(bool validation, int64_t stream_step) const;
    // A rollout call in flight; finish_rollout() collects it.
    struct RolloutCall {
        protocol::Controller::Pending call;
        Batch prompts;
        roles::GenerateArgs args;
        bool validation = false;
    };
    RolloutCall submit_generate(const std::vector<int64_t>& example_ids, int64_t n, int64_t first_sample_index,
                                bool validation, int64_t stream_step);
    Batch generate(const std::vector<int64_t>& example_ids, int64_t n, int64_t first_sample_index, bool validation);
    // One rollout call on a prompt batch (make_prompt_batch's fields).
    RolloutCall submit_rollout(const Batch& prompts, const roles::GenerateArgs& args);
    Batch finish_rollout(RolloutCall& rc);
    Batch run_rollout(const Batch& prompts, const roles::GenerateArgs& args);
    // remax: [B] fp32, the reward of the greedy response to each row's prompt.
    torch::Tensor greedy_baselines(const Batch& batch);
    void set_reward_components(Batch& b, const ScoredResponses& sc) const;
    int working_ranks() const;
    // `first`: the first generation round when it was prefetched (async), else generated here.
    Batch generate_train_batch(std::map<std::string, double>& metrics, std::map<std::string, double>& timing,
                               std::optional<Batch> first = std::nullopt, int64_t first_policy = 0);
    Batch arrange_for_update(const Batch& b, int64_t dp, int64_t num_mini) const;
    using Metrics = std::map<std::string, double>;
    // The stages of train_step, in order.
    Metrics train_step();
    void compute_old_log_probs(Batch& batch, Metrics& m);
    void compute_ref_log_probs(Batch& batch);
    // algorithm.rollout_correction: IS weights / rejection sampling / rollout_corr/* metrics.
    void apply_rollout_correction(Batch& batch, Metrics& m) const;
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
    void check_weight_version(const Batch& b, int64_t policy);
    // Asynchronous RL (rl_async.cpp).
    bool async() const { return c_.trainer.max_staleness > 0; }
    void check_async_plan() const;
    // Whether the next step's generation may start before this step's batch is scored: true
    // unless scoring draws more prompts (dynamic sampling's extra rounds, which would change
    // the order prompts are drawn in and need the rollout) or calls a reward model on the
    // rollout's ranks. The batches and versions are the same either way.
    bool prefetch_before_scoring() const;
    // Step `step`'s first generation round, submitted now with the rollout's current weights.
    void start_prefetch(int64_t step);
    // Waits for the prefetched round (generating it now if none is pending); sets `policy`.
    Batch take_prefetch(int64_t& policy, Metrics& timing);
    // Collects the generation in flight (if any) without using it.
    void settle_prefetch();
    // Syncs the actor's weights to the rollout when the batch it generates next would be more
    // than max_staleness updates old by the time it is trained on (`updates_then`).
    void sync_for_staleness(int64_t updates_then);
    // Brings the rollout to the actor's newest weights (counting a version change).
    void sync_to_latest();
    void add_async_metrics(int64_t policy, int64_t staleness, const Metrics& timing, double step_time,
                           Metrics& m) const;
    void save_prefetch(ckpt::H5Writer& w);
    void load_prefetch(const ckpt::H5Reader& r);
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
    RunPlan plan_;      // which roles and stages this run has (rlpt/app/run_plan.h)
    int64_t step_ = 0;  // training steps done
    // Stale-weight guard: the weight version the rollout reported (actor optimizer steps) for the
    // last training batch, and its policy version (actor updates): a batch of a newer policy
    // must report a newer weight version, one of the same policy the same.
    int64_t last_weight_version_ = -1;
    int64_t last_policy_ = -1;
    int64_t actor_updates_ = 0;   // actor updates done: the policy version of the actor's weights
    int64_t rollout_policy_ = 0;  // the policy version of the rollout's weights
    struct Prefetch {
        std::optional<RolloutCall> call;  // in flight
        std::optional<Batch> done;        // collected (or restored from a checkpoint)
        int64_t policy = 0;               // rollout_policy_ when it was submitted
        double wait_s = 0;                // controller time spent collecting it outside train_step
    };
    std::optional<Prefetch> prefetch_;
    int64_t step_syncs_ = 0;     // weight syncs since the last step's metrics
    double rollout_busy_s_ = 0;  // training generation time the rollout ranks reported this step
    int64_t batch_epoch_ = 0;    // the data epoch of the step's batch (async: drawn a step ahead)
    int64_t total_steps_ = 0;
    int64_t batches_per_epoch_ = 1;
    std::unique_ptr<MetricsLog> log_;
    double started_ = 0;
};

}  // namespace rlpt::app
