#pragma once
// The metrics of one RL training step under verl's names (ALGORITHMS §3, async-rl.md) and the
// console line the trainer prints for it. Pure functions of the trained batch and the step's
// timings: no calls. Private to src/app.
#include <cstdint>
#include <map>
#include <string>

#include "rlpt/batch/batch.h"
#include "rlpt/comm/placement.h"

namespace rlpt::app {

// Ranks doing role work (verl divides throughput by the GPUs in its resource pools); at least 1.
int working_ranks(const comm::Placement& placement);

// The data, timing and throughput metrics of a trained batch (after its advantages and updates).
class StepMetrics {
  public:
    // data.max_prompt_length and data.max_response_length (the clip ratios' limits), the ranks
    // perf/throughput divides by, and whether the run has a critic (critic/values/* from the
    // batch's values).
    StepMetrics(int64_t max_prompt_length, int64_t max_response_length, int working_ranks, bool critic);

    // Adds to m: compute_data_metrics of the batch (token_level_scores and _rewards, advantages,
    // returns, values, the masks), train/acc/mean (acc), the agent loop's metrics, every entry of
    // `timing`, timing_s/step, perf/{total_num_tokens, time_per_step, throughput},
    // timing_per_token_ms/<stage> (gen per response token, the other stages per prompt+response
    // token), training/global_step = step, training/epoch = epoch. `step` counts from 1;
    // `step_time` is the step's wall time in seconds.
    void add(const Batch& batch, const std::map<std::string, double>& timing, double step_time, int64_t step,
             int64_t epoch, std::map<std::string, double>& m) const;

  private:
    int64_t max_prompt_length_;
    int64_t max_response_length_;
    int working_ranks_;
    bool critic_;
};

// The weight versions behind a step's batch (RolloutSource, WeightVersions).
struct StepVersions {
    int64_t batch_policy = 0;  // the policy version the batch was generated with
    int64_t staleness = 0;     // actor updates between that version and the actor's before this step's update
    int64_t actor_policy = 0;  // the actor's policy version after this step
    int64_t weight_syncs = 0;  // counted weight syncs since the previous step's metrics
};

// async/{staleness, batch_policy_version, actor_policy_version, weight_syncs} and, when
// step_time > 0, perf/actor_idle_ratio and perf/rollout_idle_ratio, in both modes (the benchmark
// compares them). A role's busy time is what it spends in calls: the rollout's generation as the
// rollout ranks measured it (timing_s/rollout_busy) plus the weight syncs; the actor's
// old-log-prob, reference, values, update and sync stages (the roles the trainer places beside
// the actor in the disaggregated layouts the async mode needs).
void add_async_metrics(const StepVersions& v, const std::map<std::string, double>& timing, double step_time,
                       std::map<std::string, double>& m);

// The console line of a step: "step s/total ep e | score .. acc .. | kl .. | entropy .. | ...".
void log_progress(const std::map<std::string, double>& m, int64_t step, int64_t total_steps, int64_t epoch);

}  // namespace rlpt::app
