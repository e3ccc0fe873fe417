#pragma once
// Where the RL trainer's rollouts come from (DESIGN §4c, §4e): the rollout calls, the weight
// versions and syncs, and with asynchronous RL the prefetched next batch. verl's agent-loop
// manager and, asynchronous, its rollouter. Private to src/app; runs on the controller (rank 0).
//
// Versions. A policy version counts actor updates; a weight version is what the rollout reports
// per sample (its copy's optimizer steps). WeightVersions keeps the actor's and the rollout's
// policy versions and checks every training batch against them; it makes no calls.
//
// Asynchronous RL (trainer.max_staleness = K > 0): the rollout call of step s+1 is submitted
// before step s's actor work and collected at the start of step s+1, so the separate rollout
// ranks generate while the actor trains. The batch of a step was generated with weights `policy`
// updates old; the trainer syncs the weights just before submitting a generation whenever the
// batch would otherwise be more than K updates stale when trained on, and refuses
// (InternalError) to train on a batch that is. Validation and checkpoints first collect the
// generation in flight and then sync, so a resumed run (which restores that batch from the
// checkpoint and syncs) continues exactly as an uninterrupted one.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/app/run_plan.h"
#include "rlpt/batch/batch.h"
#include "rlpt/config/config.h"
#include "rlpt/data/sampler.h"
#include "rlpt/protocol/runtime.h"
#include "rlpt/roles/rollout.h"
#include "task_data.h"

namespace rlpt::ckpt {
class H5Writer;
class H5Reader;
}  // namespace rlpt::ckpt

namespace rlpt::app {

// What RolloutSource reads of the config (rollout_source_settings() fills it).
struct RolloutSourceSettings {
    SamplingConfig train;                     // rollout.{temperature, top_p, top_k, do_sample, n}
    SamplingConfig val;                       // rollout.val
    int64_t max_response_length = 1;          // data.max_response_length
    std::vector<std::string> stop;            // rollout.stop (training and validation)
    bool include_stop_str_in_output = false;  // rollout.include_stop_str_in_output
    int64_t seed = 0;                         // trainer.seed
    bool keep_rollout_log_probs = true;       // rollout.calculate_log_probs: false drops rollout_log_probs (verl)
    int64_t prompts_per_step = 1;             // data.train_batch_size
    int64_t max_staleness = 0;                // trainer.max_staleness; > 0: asynchronous
    // Whether the next step's generation may be submitted before this step's batch is scored:
    // true unless scoring draws more prompts (dynamic sampling's extra rounds, which would change
    // the order prompts are drawn in and need the rollout) or calls a reward model on the
    // rollout's ranks. The batches and versions are the same either way.
    bool prefetch_before_scoring = true;
};
// From the config; prefetch_before_scoring also from the plan and the reward model's and the
// rollout's ranks (ctl's layouts).
RolloutSourceSettings rollout_source_settings(const Config& c, const RunPlan& plan, const protocol::Controller& ctl);

// The sampling arguments of a generation call: rollout.val's for validation (on the validation
// stream of `step`, steps done), the training ones otherwise (on stream `step`); the stop, eos
// and pad tokens are the task's, the stop strings rollout.stop.
roles::GenerateArgs sampling_args(const RolloutSourceSettings& s, const TaskData& task, bool validation, int64_t step);

// The policy versions of the actor's and the rollout's weights and the checks on them. Plain
// bookkeeping: RolloutSource makes the calls it asks for.
class WeightVersions {
  public:
    explicit WeightVersions(int64_t max_staleness) : max_staleness_(max_staleness) {}

    int64_t actor() const { return actor_; }      // actor updates done
    int64_t rollout() const { return rollout_; }  // the actor updates in the rollout's weights
    void actor_updated() { ++actor_; }
    // Whether a batch generated now would be more than max_staleness updates old once the actor
    // has done `updates_then` updates (then the rollout is synced first).
    bool too_stale_then(int64_t updates_then) const { return updates_then - rollout_ > max_staleness_; }
    bool rollout_behind() const { return rollout_ != actor_; }
    // A weight sync brought the rollout to the actor's weights; `counted` adds it to syncs().
    void synced(bool counted = true);
    // Weight syncs counted since the last take_syncs() (the step's async/weight_syncs).
    int64_t take_syncs();
    // A resumed run: the actor's version after `actor_updates` updates, and the syncs the run that
    // wrote the checkpoint counted after writing it.
    void resume(int64_t actor_updates, int64_t syncs);

    // ValueError unless every row of `weight_versions` (a batch's weight_version field, one per
    // row; empty: a rollout that reports none) is the same version, newer than the previous
    // batch's when the batch's policy version `policy` is newer, else equal to it. `step`: steps
    // done (messages name step + 1).
    void check_batch(const std::vector<int64_t>& weight_versions, int64_t policy, int64_t step);
    // InternalError when a batch of policy version `policy` is more than max_staleness updates
    // older than the actor: it is not trained on.
    void check_trainable(int64_t policy, int64_t step) const;

  private:
    int64_t max_staleness_;
    int64_t actor_ = 0;
    int64_t rollout_ = 0;
    int64_t syncs_ = 0;
    // The weight version and policy version of the last training batch (-1: none yet).
    int64_t last_weight_version_ = -1;
    int64_t last_policy_ = -1;
};

// The rollout calls of a run. Calls, all on protocol::Controller `ctl` (rank 0): the rollout's
// kGenerate (one call per generation, kDpSplit over the rollout's ranks) and, when the rollout
// runs on ranks of its own, a weight sync: the rollout's kReceiveWeights and the actor's
// kSendWeights submitted together. Colocated with the actor the rollout shares its tensors and a
// sync makes no call. Only one generation is in flight at a time (the prefetched one).
class RolloutSource {
  public:
    // `task` (prompts, tokens), `sampler` (the training prompts' order; the trainer checkpoints it)
    // and `ctl` outlive this object.
    RolloutSource(protocol::Controller& ctl, const comm::Placement& placement, const TaskData& task,
                  data::EpochSampler& sampler, const RolloutSourceSettings& s);

    bool async() const { return s_.max_staleness > 0; }
    bool prefetch_before_scoring() const { return s_.prefetch_before_scoring; }
    WeightVersions& versions() { return versions_; }
    const WeightVersions& versions() const { return versions_; }

    // Generation, n samples per prompt of `example_ids` (rows of task.train, or task.val when
    // `validation`), sample indices from `first_sample_index`. `step`: steps done. The batch holds
    // the rollout's columns (responses, masks, weight_version, ...), the prompts' uid,
    // data_source, ground_truth and extra.
    Batch generate(const std::vector<int64_t>& example_ids, int64_t n, int64_t first_sample_index, bool validation,
                   int64_t step);
    // Generation round `round` of the training step after `step` steps: the sampler's next
    // data.train_batch_size prompts, rollout.n samples each.
    Batch generate_round(int64_t step, int64_t round);
    // Greedy responses (n = 1, the training settings otherwise) to a prompt batch with
    // make_prompt_batch's fields (ReMax's baselines).
    Batch generate_greedy(const Batch& prompts, int64_t step);
    // The generation time (rollout/generate_s) the rollout ranks reported for training batches
    // collected since begin_step().
    void begin_step() { busy_s_ = 0; }
    double busy_s() const { return busy_s_; }

    // The actor's weights to the rollout, not counted in versions().take_syncs() (start, resume).
    void sync_weights();
    // Brings the rollout to the actor's newest weights when it is behind (a counted sync).
    void sync_to_latest();
    // Syncs when the batch generated next would be more than max_staleness updates old by the
    // time it is trained on, after `updates_then` actor updates.
    void sync_for_staleness(int64_t updates_then);

    // Asynchronous RL. Submits round 0 of the step after `step` steps with the rollout's current
    // weights.
    void start_prefetch(int64_t step);
    // Waits for the prefetched round (submitting it now if none is pending), under
    // timing_s/gen; sets `policy` to the rollout's version when it was submitted.
    Batch take_prefetch(int64_t step, int64_t& policy, std::map<std::string, double>& timing);
    // Collects the generation in flight (if any) without using it.
    void settle_prefetch();
    // The prefetched batch into controller.h5 (settling it first), and whether the checkpoint's
    // writer syncs after writing (so a resume counts that sync the same way).
    void save(ckpt::H5Writer& w);
    // A resume: the actor's version after `actor_updates` updates, and the prefetched batch from
    // controller.h5. ConfigError when the batch is more than max_staleness updates old or this run
    // is not asynchronous.
    void load(const ckpt::H5Reader& r, int64_t actor_updates);

  private:
    // A rollout call in flight; finish() collects it.
    struct Call {
        protocol::Controller::Pending pending;
        Batch prompts;  // the prompts' uid, data_source, ground_truth, extra
        roles::GenerateArgs args;
        bool validation = false;
    };
    Call submit(const Batch& prompts, const roles::GenerateArgs& args, bool validation);
    Call submit_examples(const std::vector<int64_t>& example_ids, int64_t n, int64_t first_sample_index,
                         bool validation, int64_t step);
    Call submit_round(int64_t step, int64_t round);
    Batch finish(Call& call);
    void sync_call();

    protocol::Controller& ctl_;
    bool sync_by_call_;  // the rollout runs on ranks of its own: a weight sync is a call
    const TaskData& task_;
    data::EpochSampler& sampler_;
    RolloutSourceSettings s_;
    WeightVersions versions_;
    struct Prefetch {
        std::optional<Call> call;   // in flight
        std::optional<Batch> done;  // collected (or restored from a checkpoint)
        int64_t policy = 0;         // versions_.rollout() when it was submitted
    };
    std::optional<Prefetch> prefetch_;
    double busy_s_ = 0;
};

}  // namespace rlpt::app
