#pragma once
// What the RL trainer's role calls take of a training batch (DESIGN §3, §4): the sequences of the
// scoring forwards (old and reference log-probs, values, the reward model) and the inputs of the
// critic and actor updates, arranged so that each data-parallel rank trains on its part of every
// global mini-batch. Pure functions of the batch: no calls. Private to src/app.
#include <cstdint>

#include "rlpt/app/run_plan.h"
#include "rlpt/batch/batch.h"
#include "rlpt/config/config.h"
#include "rlpt/protocol/runtime.h"

namespace rlpt::app {

// input_ids, attention_mask, position_ids, responses: what a scoring forward (log-probs, values,
// reward model scores) takes.
Batch seq_columns(const Batch& b);

// Orders rows so that an even split over `dp` ranks gives rank k part k of every one of the
// `num_mini` global mini-batches (consecutive row ranges): each rank's local mini-batch j then
// holds global mini-batch j's rows whatever the DP size. With `balance` and dp > 1 the parts of
// each mini-batch are balanced by sequence workload (attention_mask lengths). ValueError unless
// the rows form num_mini mini-batches of dp equal parts.
Batch arrange_for_update(const Batch& b, int64_t dp, int64_t num_mini, bool balance);

// What UpdateInputs reads of the config and the layout (update_settings() fills it).
struct UpdateSettings {
    int64_t prompts_per_step = 1;   // data.train_batch_size
    int64_t n = 1;                  // rollout.n
    int64_t actor_mini_batch = 1;   // actor.ppo_mini_batch_size (prompts)
    int64_t critic_mini_batch = 1;  // critic.ppo_mini_batch_size, else the actor's
    bool actor_kl_loss = false;     // actor.use_kl_loss: the actor's update takes ref_log_prob
    bool balance_batch = true;      // trainer.balance_batch
    int64_t actor_dp = 1;           // the actor's data-parallel size
    int64_t critic_dp = 1;          // the critic's (1 without a critic)
    double temperature = 1.0;       // rollout.temperature: training batches were sampled at it
};
UpdateSettings update_settings(const Config& c, const RunPlan& plan, const protocol::Controller& ctl);

// The batches the critic's and the actor's kUpdate take (kDpSplit, unpadded): their columns,
// arranged over their DP ranks per mini-batch (arrange_for_update), with the update's arguments.
class UpdateInputs {
  public:
    explicit UpdateInputs(const UpdateSettings& s) : s_(s) {}
    // input_ids, attention_mask, position_ids, responses, response_mask, values, returns +
    // roles::CriticUpdateArgs.
    Batch critic(const Batch& batch) const;
    // input_ids, attention_mask, position_ids, responses, response_mask, old_log_probs,
    // advantages (+ ref_log_prob with the KL loss, + rollout_is_weights when the batch has them)
    // + roles::ActorUpdateArgs.
    Batch actor(const Batch& batch) const;
    // The training rollout's sampling temperature: every log-prob the trainer asks for (old,
    // reference, the actor's update) is of softmax(logits / T).
    double temperature() const { return s_.temperature; }

  private:
    UpdateSettings s_;
};

}  // namespace rlpt::app
