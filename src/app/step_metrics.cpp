#include "step_metrics.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "metrics_log.h"
#include "rlpt/agent/agent_metrics.h"
#include "rlpt/algo/data_metrics.h"
#include "rlpt/core/log.h"

namespace rlpt::app {
namespace {
using Metrics = std::map<std::string, double>;
}  // namespace

int working_ranks(const comm::Placement& placement) {
    std::set<int> ranks;
    for (const auto& layout : placement.roles) ranks.insert(layout.world_ranks.begin(), layout.world_ranks.end());
    return std::max<int>(1, static_cast<int>(ranks.size()));
}

StepMetrics::StepMetrics(int64_t max_prompt_length, int64_t max_response_length, int working_ranks, bool critic)
    : max_prompt_length_(max_prompt_length),
      max_response_length_(max_response_length),
      working_ranks_(working_ranks),
      critic_(critic) {}

void StepMetrics::add(const Batch& batch, const Metrics& timing, double step_time, int64_t step, int64_t epoch,
                      Metrics& m) const {
    const auto mask = batch.at("response_mask");
    algo::DataMetricsInputs dm;
    dm.token_level_scores = batch.at("token_level_scores");
    dm.token_level_rewards = batch.at("token_level_rewards");
    dm.advantages = batch.at("advantages");
    dm.returns = batch.at("returns");
    if (critic_) dm.values = batch.at("values");
    dm.response_mask = mask;
    dm.prompt_mask = batch.at("attention_mask").slice(1, 0, batch.at("prompts").size(1));
    dm.max_prompt_length = max_prompt_length_;
    dm.max_response_length = max_response_length_;
    for (const auto& [k, v] : algo::compute_data_metrics(dm)) m[k] = v;
    m["train/acc/mean"] = batch.at("acc").mean().item<double>();
    agent::add_agent_metrics(batch, m);
    for (const auto& [k, v] : timing) m[k] = v;
    m["timing_s/step"] = step_time;
    const double tokens = batch.at("attention_mask").sum().item<double>();
    const double resp_tokens = mask.sum().item<double>();
    m["perf/total_num_tokens"] = tokens;
    m["perf/time_per_step"] = step_time;
    m["perf/throughput"] = tokens / step_time / static_cast<double>(working_ranks_);
    // verl's per-token timings: generation per response token, the other stages per prompt+response
    // token (rlpt's "update" is verl's update_actor and update_critic together: they may overlap).
    if (resp_tokens > 0) m["timing_per_token_ms/gen"] = 1000.0 * metric_or(timing, "timing_s/gen", 0) / resp_tokens;
    for (const char* stage : {"old_log_prob", "ref", "values", "adv", "update"}) {
        auto it = timing.find(std::string("timing_s/") + stage);
        if (it != timing.end() && tokens > 0)
            m[std::string("timing_per_token_ms/") + stage] = 1000.0 * it->second / tokens;
    }
    m["training/global_step"] = static_cast<double>(step);
    m["training/epoch"] = static_cast<double>(epoch);
}

void add_async_metrics(const StepVersions& v, const Metrics& timing, double step_time, Metrics& m) {
    m["async/staleness"] = static_cast<double>(v.staleness);
    m["async/batch_policy_version"] = static_cast<double>(v.batch_policy);
    m["async/actor_policy_version"] = static_cast<double>(v.actor_policy);
    m["async/weight_syncs"] = static_cast<double>(v.weight_syncs);
    if (step_time <= 0) return;
    const double sync = metric_or(timing, "timing_s/update_weights", 0);
    double actor = sync;
    for (const char* k : {"old_log_prob", "ref", "values", "update"})
        actor += metric_or(timing, std::string("timing_s/") + k, 0);
    const double rollout = metric_or(timing, "timing_s/rollout_busy", 0) + sync;
    m["perf/actor_idle_ratio"] = std::clamp(1.0 - actor / step_time, 0.0, 1.0);
    m["perf/rollout_idle_ratio"] = std::clamp(1.0 - rollout / step_time, 0.0, 1.0);
}

void log_progress(const Metrics& m, int64_t step, int64_t total_steps, int64_t epoch) {
    auto g = [&](const char* k) { return metric_or(m, k, std::nan("")); };
    std::string kl = m.count("actor/kl_loss")             ? fmt::format(" | kl {:.4f}", g("actor/kl_loss"))
                     : m.count("actor/reward_kl_penalty") ? fmt::format(" | kl {:.4f}", g("actor/reward_kl_penalty"))
                                                          : fmt::format(" | ppo_kl {:.4f}", g("actor/ppo_kl"));
    RLPT_LOG_INFO("step {}/{} ep {} | score {:.3f} acc {:.3f}{} | entropy {:.3f} | resp len {:.1f} | {:.1f} s (gen "
                  "{:.1f}, reward {:.1f}, old {:.1f}, ref {:.1f}, values {:.1f}, update {:.1f}, sync {:.2f})",
                  step, total_steps, epoch, g("critic/score/mean"), g("train/acc/mean"), kl, g("actor/entropy"),
                  g("response_length/mean"), g("timing_s/step"), g("timing_s/gen"), g("timing_s/reward"),
                  g("timing_s/old_log_prob"), metric_or(m, "timing_s/ref", 0), metric_or(m, "timing_s/values", 0),
                  g("timing_s/update"), metric_or(m, "timing_s/update_weights", 0));
}

}  // namespace rlpt::app
