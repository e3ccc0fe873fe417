#include "rollout_source.h"

#include <algorithm>

#include "rlpt/batch/batch_codec.h"
#include "rlpt/ckpt/h5_store.h"
#include "rlpt/comm/placement.h"
#include "rlpt/core/log.h"
#include "rlpt/core/rng_streams.h"
#include "rlpt/roles/actor.h"
#include "stage_timer.h"

namespace rlpt::app {
namespace {

using roles::ActorMethod;
using roles::RolloutMethod;

const std::string kPrefetch = "controller/async/prefetch/";

}  // namespace

RolloutSourceSettings rollout_source_settings(const Config& c, const RunPlan& plan, const protocol::Controller& ctl) {
    const auto& r = c.rollout;
    RolloutSourceSettings s;
    s.train = SamplingConfig{r.temperature, r.top_p, r.top_k, r.do_sample, r.n};
    s.val = r.val;
    s.max_response_length = c.data.max_response_length;
    s.stop = r.stop;
    s.include_stop_str_in_output = r.include_stop_str_in_output;
    s.seed = c.trainer.seed;
    s.keep_rollout_log_probs = r.calculate_log_probs;
    s.prompts_per_step = c.data.train_batch_size;
    s.max_staleness = c.trainer.max_staleness;
    if (c.algorithm.filter_groups.enable) {
        s.prefetch_before_scoring = false;
    } else if (plan.has("reward_model")) {
        const auto& rm = ctl.layout("reward_model").world_ranks;
        const auto& rollout = ctl.layout("rollout").world_ranks;
        s.prefetch_before_scoring =
            std::find_first_of(rm.begin(), rm.end(), rollout.begin(), rollout.end()) == rm.end();
    }
    return s;
}

roles::GenerateArgs sampling_args(const RolloutSourceSettings& s, const TaskData& task, bool validation, int64_t step) {
    const SamplingConfig& sc = validation ? s.val : s.train;
    roles::GenerateArgs a;
    a.temperature = sc.temperature;
    a.top_p = sc.top_p;
    a.top_k = sc.top_k;
    a.greedy = !sc.do_sample;
    a.max_new_tokens = s.max_response_length;
    a.eos_id = task.eos_id;
    a.pad_id = task.pad_id;
    a.stop_ids = task.stop_ids;
    a.stop = s.stop;
    a.include_stop_str_in_output = s.include_stop_str_in_output;
    a.n = sc.n;
    a.seed = s.seed;
    // Validation draws from other streams than training steps.
    a.stream = validation ? streams::validation_stream(step) : step;
    return a;
}

// ---- WeightVersions ----

void WeightVersions::synced(bool counted) {
    rollout_ = actor_;
    if (counted) ++syncs_;
}

int64_t WeightVersions::take_syncs() {
    const int64_t n = syncs_;
    syncs_ = 0;
    return n;
}

void WeightVersions::resume(int64_t actor_updates, int64_t syncs) {
    actor_ = actor_updates;
    syncs_ = syncs;
}

// Every sample of a batch must come from one weight version; a batch generated after an actor
// update was synced (`policy`: the actor updates in the rollout's weights) from a newer one than
// the previous batch, and otherwise from the same: rollout never samples with other weights than
// the trainer believes it has.
void WeightVersions::check_batch(const std::vector<int64_t>& v, int64_t policy, int64_t step) {
    if (v.empty()) return;
    for (int64_t x : v)
        RLPT_CHECK(x == v[0],
                   "step {}: the rollout ranks sampled with different weight versions ({} and {}); a "
                   "weight sync did not reach every rollout rank",
                   step + 1, v[0], x);
    if (last_policy_ >= 0) {
        RLPT_CHECK(policy <= last_policy_ || v[0] > last_weight_version_,
                   "step {}: the rollout sampled with stale weights (version {} after an actor update; the previous "
                   "batch already used version {}): the weight sync did not reach the rollout",
                   step + 1, v[0], last_weight_version_);
        RLPT_CHECK(policy != last_policy_ || v[0] == last_weight_version_,
                   "step {}: the rollout's weights changed (version {} -> {}) without a weight sync", step + 1,
                   last_weight_version_, v[0]);
    }
    last_weight_version_ = v[0];
    last_policy_ = policy;
}

void WeightVersions::check_trainable(int64_t policy, int64_t step) const {
    RLPT_CHECK_KIND(InternalError, actor_ - policy <= max_staleness_,
                    "step {}: the batch was generated with weights {} actor updates old, more than "
                    "trainer.max_staleness={}; it is not trained on",
                    step + 1, actor_ - policy, max_staleness_);
}

// ---- RolloutSource ----

RolloutSource::RolloutSource(protocol::Controller& ctl, const comm::Placement& placement, const TaskData& task,
                             data::EpochSampler& sampler, const RolloutSourceSettings& s)
    : ctl_(ctl),
      sync_by_call_(!comm::weight_sync_ranks(placement).empty()),
      task_(task),
      sampler_(sampler),
      s_(s),
      versions_(s.max_staleness) {}

RolloutSource::Call RolloutSource::submit(const Batch& prompts, const roles::GenerateArgs& args, bool validation) {
    return Call{ctl_.submit<RolloutMethod::kGenerate>(prompts.select({"prompt_ids", "prompt_mask"},
                                                                     {"sample_index", "data_source", "ground_truth",
                                                                      "extra"}),
                                                      args),
                prompts.select({}, {"uid", "data_source", "ground_truth", "extra"}), args, validation};
}

RolloutSource::Call RolloutSource::submit_examples(const std::vector<int64_t>& example_ids, int64_t n,
                                                   int64_t first_sample_index, bool validation, int64_t step) {
    const auto& exs = validation ? task_.val : task_.train;
    const auto& ids = validation ? task_.val_ids : task_.train_ids;
    std::vector<const data::Example*> e;
    std::vector<const std::vector<int64_t>*> p;
    for (int64_t i : example_ids) {
        e.push_back(&exs[static_cast<size_t>(i)]);
        p.push_back(&ids[static_cast<size_t>(i)]);
    }
    return submit(make_prompt_batch(task_, e, p, n, first_sample_index), sampling_args(s_, task_, validation, step),
                  validation);
}

RolloutSource::Call RolloutSource::submit_round(int64_t step, int64_t round) {
    const int64_t want = s_.prompts_per_step, n = s_.train.n;
    auto idx = sampler_.next_batch(want);
    return submit_examples(idx, n, streams::training_sample_index(step, round, want * n), false, step);
}

Batch RolloutSource::finish(Call& call) {
    Batch out = ctl_.wait(call.pending);
    for (const auto& [k, v] : reduce_metrics(out.metrics()))
        if (k == "rollout/generate_s" && !call.validation) busy_s_ += v;
    out.metrics().clear();
    out.update(call.prompts);
    if (!s_.keep_rollout_log_probs) out.erase("rollout_log_probs");  // verl: then none are kept
    return out;
}

Batch RolloutSource::generate(const std::vector<int64_t>& example_ids, int64_t n, int64_t first_sample_index,
                              bool validation, int64_t step) {
    Call call = submit_examples(example_ids, n, first_sample_index, validation, step);
    return finish(call);
}

Batch RolloutSource::generate_round(int64_t step, int64_t round) {
    Call call = submit_round(step, round);
    return finish(call);
}

Batch RolloutSource::generate_greedy(const Batch& prompts, int64_t step) {
    roles::GenerateArgs args = sampling_args(s_, task_, false, step);
    args.greedy = true;
    args.n = 1;  // one response per prompt
    Call call = submit(prompts, args, false);
    return finish(call);
}

void RolloutSource::sync_call() {
    if (!sync_by_call_) return;  // colocated: shared tensors
    Batch m(0);
    auto recv = ctl_.submit(RolloutMethod::kReceiveWeights, m);
    auto send = ctl_.submit(ActorMethod::kSendWeights, m);
    ctl_.wait(send);
    ctl_.wait(recv);
}

void RolloutSource::sync_weights() {
    sync_call();
    versions_.synced(/*counted=*/false);
}

void RolloutSource::sync_to_latest() {
    if (!versions_.rollout_behind()) return;
    sync_call();
    versions_.synced();
}

void RolloutSource::sync_for_staleness(int64_t updates_then) {
    if (versions_.too_stale_then(updates_then)) sync_to_latest();
}

void RolloutSource::start_prefetch(int64_t step) {
    Prefetch p;
    p.policy = versions_.rollout();
    p.call = submit_round(step, 0);
    prefetch_ = std::move(p);
}

Batch RolloutSource::take_prefetch(int64_t step, int64_t& policy, std::map<std::string, double>& timing) {
    if (!prefetch_) start_prefetch(step);  // the first step (or a resume without a prefetched batch)
    Stage s(timing, "gen");
    settle_prefetch();
    Batch b = std::move(*prefetch_->done);
    policy = prefetch_->policy;
    prefetch_.reset();
    return b;
}

void RolloutSource::settle_prefetch() {
    if (!prefetch_ || !prefetch_->call) return;
    prefetch_->done = finish(*prefetch_->call);
    prefetch_->call.reset();
}

void RolloutSource::save(ckpt::H5Writer& w) {
    settle_prefetch();
    // The checkpoint's writer syncs the rollout after writing (as a resume does): count that sync
    // the same way in both runs.
    w.set_int_attr("controller/async/sync_after_save", versions_.rollout_behind() ? 1 : 0);
    w.set_int_attr("controller/async/has_prefetch", prefetch_ ? 1 : 0);
    if (!prefetch_) return;
    const Batch& b = *prefetch_->done;
    std::string layout;
    encode_layout(b, layout);
    w.write_blob(kPrefetch + "layout", layout);
    for (const auto& [name, t] : b.columns()) w.write_tensor(kPrefetch + "columns/" + name, t.contiguous());
    w.set_int_attr(kPrefetch + "policy", prefetch_->policy);
}

void RolloutSource::load(const ckpt::H5Reader& r, int64_t actor_updates) {
    prefetch_.reset();
    const bool counted_sync = async() && r.has_attr("controller/async/sync_after_save");
    versions_.resume(actor_updates, counted_sync ? r.int_attr("controller/async/sync_after_save") : 0);
    if (!r.has_attr("controller/async/has_prefetch") || r.int_attr("controller/async/has_prefetch") == 0) return;
    const int64_t policy = r.int_attr(kPrefetch + "policy");
    const int64_t stale = actor_updates - policy;
    RLPT_CHECK_KIND(ConfigError, async() && stale <= s_.max_staleness,
                    "{}: the checkpoint holds the next step's batch, generated {} actor update(s) before the "
                    "checkpointed weights (an asynchronous run); resume it with trainer.max_staleness >= {} (now {})",
                    r.path(), stale, std::max<int64_t>(1, stale), s_.max_staleness);
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
