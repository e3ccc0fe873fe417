#pragma once
// The RL trainer's rewards (DESIGN §6, rewards.md; ALGORITHMS §5 for DAPO's pieces): scoring
// generated rounds into a training batch, with DAPO's dynamic sampling, and the token-level
// rewards with the KL penalty. Private to src/app; runs on the controller (rank 0).
//
// A sample's score (the `scores` column) is, in this order: what the scorer of its data_source
// reported (or, with rollout.multi_turn.env_command, the environment's env_reward), plus the
// reward model's rm_scores when the run has one, plus the overlong penalty
// (reward.overlong_buffer). token_level_scores puts it on the last response token.
//
// RewardStage makes no controller calls itself: the reward model and ReMax's greedy rollouts
// reach it as functions the trainer binds to its calls.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rlpt/algo/dapo.h"
#include "rlpt/algo/kl.h"
#include "rlpt/app/run_plan.h"
#include "rlpt/batch/batch.h"
#include "rlpt/config/config.h"
#include "task_data.h"

namespace rlpt::app {

// What RewardStage reads of the config (reward_settings() fills it).
struct RewardSettings {
    int64_t prompts_per_step = 1;  // data.train_batch_size: prompt groups per training batch
    int64_t n = 1;                 // rollout.n: samples per prompt group
    // gdpo (plan.reward_components): algorithm.gdpo_reward_keys, one column each; else empty.
    std::vector<std::string> component_keys;
    bool env_rewards = false;                      // rollout.multi_turn.env_command set: env_reward is the score
    std::optional<algo::OverlongBuffer> overlong;  // reward.overlong_buffer, when enabled
    FilterGroupsConfig filter_groups;              // algorithm.filter_groups (DAPO's dynamic sampling)
    bool kl_in_reward = false;                     // algorithm.use_kl_in_reward
    std::string kl_penalty = "kl";                 // algorithm.kl_penalty
    KlCtrlConfig kl_ctrl;                          // algorithm.kl_ctrl
};
RewardSettings reward_settings(const Config& c, const RunPlan& plan);

// The reward model's score of each row of a generated batch: [B] floating (the trainer calls
// the reward_model role's kComputeScore). Empty: the run has no reward model.
using RewardModelFn = std::function<torch::Tensor(const Batch& generated)>;

class RewardStage {
  public:
    using Metrics = std::map<std::string, double>;
    // `task` (tokenizer, scorers) outlives this object. Throws ValueError on an invalid kl_ctrl.
    RewardStage(const TaskData& task, const RewardSettings& s, RewardModelFn reward_model = {});

    // Scores generation rounds until a training batch of prompts_per_step prompt groups (n rows
    // each) is full: next_round(r) gives round r (0, 1, ...; each a batch of whole groups, rows
    // of a group adjacent, as RolloutSource makes them). Without dynamic sampling that is the
    // first round; with it, the groups whose filter metric varies are kept, round after round,
    // and the batch is cut to prompts_per_step x n rows (ValueError after
    // filter_groups.max_num_gen_batches rounds, 100 when 0). Scoring is timed under
    // timing_s/reward; with dynamic sampling m gets train/num_gen_batches and
    // train/kept_group_ratio. The batch gains scores and acc (float64 [B]; acc 0 where the scorer
    // knows none), reward_component/<key> (float64 [B], gdpo) and token_level_scores (fp32 [B, R]).
    Batch collect(const std::function<Batch(int64_t round)>& next_round, Metrics& m, Metrics& timing) const;

    // token_level_rewards (fp32 [B, R]): token_level_scores, minus the KL penalty between
    // old_log_probs and ref_log_prob when algorithm.use_kl_in_reward (which updates the KL
    // controller and adds its metrics to m).
    void compute_rewards(Batch& batch, Metrics& m);

    // ReMax's baselines: [B] fp32, each row the score of the greedy response to its own prompt.
    // `generate` answers a prompt batch (make_prompt_batch's fields) with one response per row;
    // it gets the first row of each uid group (prompt, data_source, ground truth, extra; sample
    // indices streams::baseline_sample_index).
    torch::Tensor greedy_baselines(const Batch& batch,
                                   const std::function<Batch(const Batch& prompts)>& generate) const;

    // The in-reward KL coefficient (checkpointed by the trainer).
    double kl_coef() const { return kl_ctrl_.value(); }
    void set_kl_coef(double v) { kl_ctrl_.set_value(v); }

  private:
    struct Scores {
        std::vector<double> scorer;  // the scorers' (or the environment's) score
        std::vector<double> total;   // + reward model + overlong penalty: the `scores` column
        std::vector<double> acc;     // the `acc` column
    };
    // Scores one round in place (scores, acc, reward components).
    Scores score(Batch& b) const;
    void set_reward_components(Batch& b, const ScoredResponses& sc) const;

    const TaskData& task_;
    RewardSettings s_;
    RewardModelFn reward_model_;
    algo::KlController kl_ctrl_;
};

// Batch columns holding gdpo's per-sample reward components: reward_component/<key>.
std::string reward_component_column(const std::string& key);

}  // namespace rlpt::app
