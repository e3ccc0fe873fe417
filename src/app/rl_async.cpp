// Asynchronous RL (trainer.max_staleness > 0; README "Asynchronous RL"): the rollout ranks
// generate the next step's batch while the actor trains on this one. See rl_trainer.h for the
// version bookkeeping; this file holds the prefetch, the staleness-driven weight syncs, the
// idle/staleness metrics and the prefetched batch's checkpointing.
#include <algorithm>

#include "rl_trainer.h"
#include "rlpt/batch/batch_codec.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/core/log.h"
#include "rlpt/core/rng_streams.h"
#include "stage_timer.h"

namespace rlpt::app {
namespace {
const std::string kPrefetch = "controller/async/prefetch/";
}  // namespace

void RlTrainer::check_async_plan() const {
    if (!async()) return;
    // Config validation refused a rollout sharing its group with a role called while it
    // generates; ReMax's greedy baselines are a rollout call in the middle of the actor's work.
    RLPT_CHECK_KIND(ConfigError, !plan_.greedy_baselines,
                    "trainer.max_staleness={}: algorithm.adv_estimator={} needs greedy rollouts (its baselines) while "
                    "the actor trains, when the rollout ranks are busy with the next batch; use max_staleness=0",
                    c_.trainer.max_staleness, c_.algorithm.adv_estimator);
}

bool RlTrainer::prefetch_before_scoring() const {
    if (c_.algorithm.filter_groups.enable) return false;
    if (!plan_.reward_model) return true;
    const auto& rm = ctl_.layout("reward_model").world_ranks;
    const auto& rollout = ctl_.layout("rollout").world_ranks;
    return std::find_first_of(rm.begin(), rm.end(), rollout.begin(), rollout.end()) == rm.end();
}

void RlTrainer::start_prefetch(int64_t step) {
    const int64_t want = c_.data.train_batch_size, n = c_.rollout.n;
    auto idx = sampler_->next_batch(want);
    Prefetch p;
    p.policy = rollout_policy_;
    p.call = submit_generate(idx, n, streams::training_sample_index(step, 0, want * n), false, step);
    prefetch_ = std::move(p);
}

Batch RlTrainer::take_prefetch(int64_t& policy, Metrics& timing) {
    if (!prefetch_) start_prefetch(step_);  // the first step (or a resume without a prefetched batch)
    Stage s(timing, "gen");
    settle_prefetch();
    Batch b = std::move(*prefetch_->done);
    policy = prefetch_->policy;
    prefetch_.reset();
    return b;
}

void RlTrainer::settle_prefetch() {
    if (!prefetch_ || !prefetch_->call) return;
    prefetch_->done = finish_rollout(*prefetch_->call);
    prefetch_->call.reset();
}

void RlTrainer::sync_to_latest() {
    if (rollout_policy_ == actor_updates_) return;
    sync_weights();
    rollout_policy_ = actor_updates_;
    ++step_syncs_;
}

void RlTrainer::sync_for_staleness(int64_t updates_then) {
    if (updates_then - rollout_policy_ > c_.trainer.max_staleness) sync_to_latest();
}

// Staleness and idle fractions, in both modes (the benchmark compares them). A role's busy time
// is what it spends in calls: the rollout's generation as the rollout ranks measured it plus the
// weight syncs; the actor's old-log-prob, reference, values, update and sync stages (the roles
// this trainer places beside the actor in the disaggregated layouts the async mode needs).
void RlTrainer::add_async_metrics(int64_t policy, int64_t staleness, const Metrics& timing, double step_time,
                                  Metrics& m) const {
    m["async/staleness"] = static_cast<double>(staleness);
    m["async/batch_policy_version"] = static_cast<double>(policy);
    m["async/actor_policy_version"] = static_cast<double>(actor_updates_);
    m["async/weight_syncs"] = static_cast<double>(step_syncs_);
    if (step_time <= 0) return;
    const double sync = metric_or(timing, "timing_s/update_weights", 0);
    double actor = sync;
    for (const char* k : {"old_log_prob", "ref", "values", "update"})
        actor += metric_or(timing, std::string("timing_s/") + k, 0);
    const double rollout = metric_or(timing, "timing_s/rollout_busy", 0) + sync;
    m["perf/actor_idle_ratio"] = std::clamp(1.0 - actor / step_time, 0.0, 1.0);
    m["perf/rollout_idle_ratio"] = std::clamp(1.0 - rollout / step_time, 0.0, 1.0);
}

void RlTrainer::save_prefetch(ckpt::H5Writer& w) {
    settle_prefetch();
    // save_checkpoint syncs the rollout after writing (as a resume does): count that sync the same
    // way in both runs.
    w.set_int_attr("controller/async/sync_after_save", rollout_policy_ != actor_updates_ ? 1 : 0);
    w.set_int_attr("controller/async/has_prefetch", prefetch_ ? 1 : 0);
    if (!prefetch_) return;
    const Batch& b = *prefetch_->done;
    std::string layout;
    encode_layout(b, layout);
    w.write_blob(kPrefetch + "layout", layout);
    for (const auto& [name, t] : b.columns()) w.write_tensor(kPrefetch + "columns/" + name, t.contiguous());
    w.set_int_attr(kPrefetch + "policy", prefetch_->policy);
}

void RlTrainer::load_prefetch(const ckpt::H5Reader& r) {
    prefetch_.reset();
    if (async() && r.has_attr("controller/async/sync_after_save"))
        step_syncs_ = r.int_attr("controller/async/sync_after_save");
    if (!r.has_attr("controller/async/has_prefetch") || r.int_attr("controller/async/has_prefetch") == 0) return;
    const int64_t policy = r.int_attr(kPrefetch + "policy");
    const int64_t stale = actor_updates_ - policy;
    RLPT_CHECK_KIND(ConfigError, async() && stale <= c_.trainer.max_staleness,
                    "{}: the checkpoint holds the next step's batch, generated {} actor update(s) before the "
                    "checkpointed weights (an asynchronous run); resume it with trainer.max_staleness >= {} (now {})",
                    r.path(), stale, std::max<int64_t>(1, stale), c_.trainer.max_staleness);
    const std::string blob = r.read_blob(kPrefetch + "layout");
    BatchLayout layout = decode_layout(blob.data(), blob.size());
    Batch b = std::move(layout.skeleton);
    for (const auto& col : layout.columns) b.set(col.name, r.read_tensor(kPrefetch + "columns/" + col.name));
    b.check();
    Prefetch p;
    p.policy = policy;
    p.done = std::move(b);
    prefetch_ = std::move(p);
}

}  // namespace rlpt::app
