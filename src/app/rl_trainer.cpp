#include "rl_trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include "rlpt/agent/agent_metrics.h"
#include "rlpt/algo/advantage.h"
#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/dapo.h"
#include "rlpt/algo/rollout_correction.h"
#include "rlpt/algo/data_metrics.h"
#include "rlpt/algo/seqlen_balancing.h"
#include "rlpt/app/job.h"
#include "rlpt/core/log.h"
#include "rlpt/core/rng_streams.h"
#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "rlpt/roles/reference.h"
#include "rlpt/roles/reward_model.h"
#include "rlpt/roles/rollout.h"
#include "rlpt/tokenizer/char_tokenizer.h"
#include "check.h"
#include "stage_timer.h"

namespace rlpt::app {
namespace {

using roles::ActorMethod;
using roles::CriticMethod;
using roles::ReferenceMethod;
using roles::RewardModelMethod;
using roles::RolloutMethod;

Batch seq_columns(const Batch& b) { return b.select({"input_ids", "attention_mask", "position_ids", "responses"}); }

// Batch columns holding gdpo's per-sample reward components: <prefix><key>, float64 [B].
const std::string kComponentPrefix = "reward_component/";

}  // namespace

RlTrainer::RlTrainer(protocol::Controller& ctl, const RunContext& run)
    : ctl_(ctl),
      run_(run),
      c_(*run.config),
      plan_(plan_run(c_)),
      kl_ctrl_(algo::KlController::from_config(c_.algorithm.kl_ctrl.type, c_.algorithm.kl_ctrl.kl_coef,
                                               c_.algorithm.kl_ctrl.target_kl, c_.algorithm.kl_ctrl.horizon)) {
    task_ = load_task(c_);
    sampler_ = std::make_unique<data::EpochSampler>(static_cast<int64_t>(task_.train.size()),
                                                    static_cast<uint64_t>(c_.data.seed), c_.data.shuffle, true);
    batches_per_epoch_ = sampler_->batches_per_epoch(c_.data.train_batch_size);
    total_steps_ = c_.trainer.total_training_steps.value_or(c_.trainer.total_epochs * batches_per_epoch_);
    check_batch_sizes();
    check_async_plan();
}

void RlTrainer::check_batch_sizes() const {
    std::string all;
    for (const auto& p : rl_batch_size_problems(c_, ctl_.dp_size("actor"), plan_.critic ? ctl_.dp_size("critic") : 1,
                                                static_cast<int64_t>(task_.train.size())))
        all += (all.empty() ? "" : "\n") + p;
    RLPT_CHECK_KIND(ConfigError, all.empty(), "{}", all);
}

void RlTrainer::init_roles() {
    // The lr schedules count training steps (verl steps its scheduler once per training step).
    const protocol::InitArgs init_args = role_init_args(task_, total_steps_);
    const Batch init = protocol::with_args(Batch(0), init_args);
    ctl_.call(ActorMethod::kInit, init);
    ctl_.call(RolloutMethod::kInit, roles::rollout_init_batch(init_args, c_, *task_.tok));
    if (plan_.reference) ctl_.call(ReferenceMethod::kInit, init);
    if (plan_.critic) ctl_.call(CriticMethod::kInit, init);
    if (plan_.reward_model) ctl_.call(RewardModelMethod::kInit, init);
}

void RlTrainer::sync_weights() {
    if (comm::weight_sync_ranks(run_.topology->placement()).empty()) return;  // colocated: shared tensors
    Batch m(0);
    auto recv = ctl_.submit(RolloutMethod::kReceiveWeights, m);
    auto send = ctl_.submit(ActorMethod::kSendWeights, m);
    ctl_.wait(send);
    ctl_.wait(recv);
}

roles::GenerateArgs RlTrainer::sampling_args(bool validation, int64_t stream_step) const {
    const auto& r = c_.rollout;
    roles::GenerateArgs a;
    a.temperature = validation ? r.val.temperature : r.temperature;
    a.top_p = validation ? r.val.top_p : r.top_p;
    a.top_k = validation ? r.val.top_k : r.top_k;
    a.greedy = validation ? !r.val.do_sample : !r.do_sample;
    a.max_new_tokens = c_.data.max_response_length;
    a.eos_id = task_.eos_id;
    a.pad_id = task_.pad_id;
    a.stop_ids = task_.stop_ids;
    a.n = validation ? r.val.n : r.n;
    a.seed = c_.trainer.seed;
    // Validation draws from other streams than training steps.
    a.stream = validation ? streams::validation_stream(step_) : stream_step;
    return a;
}

RlTrainer::RolloutCall RlTrainer::submit_generate(const std::vector<int64_t>& example_ids, int64_t n,
                                                  int64_t first_sample_index, bool validation, int64_t stream_step) {
    const auto& exs = validation ? task_.val : task_.train;
    const auto& ids = validation ? task_.val_ids : task_.train_ids;
    std::vector<const data::Example*> e;
    std::vector<const std::vector<int64_t>*> p;
    for (int64_t i : example_ids) {
        e.push_back(&exs[static_cast<size_t>(i)]);
        p.push_back(&ids[static_cast<size_t>(i)]);
    }
    RolloutCall rc =
        submit_rollout(make_prompt_batch(task_, e, p, n, first_sample_index), sampling_args(validation, stream_step));
    rc.validation = validation;
    return rc;
}

Batch RlTrainer::generate(const std::vector<int64_t>& example_ids, int64_t n, int64_t first_sample_index,
                          bool validation) {
    auto rc = submit_generate(example_ids, n, first_sample_index, validation, step_);
    return finish_rollout(rc);
}

RlTrainer::RolloutCall RlTrainer::submit_rollout(const Batch& prompts, const roles::GenerateArgs& args) {
    RolloutCall rc{ctl_.submit(RolloutMethod::kGenerate,
                               protocol::with_args(prompts.select({"prompt_ids", "prompt_mask"},
                                                                  {"sample_index", "data_source", "ground_truth",
                                                                   "extra"}),
                                                   args)),
                   prompts.select({}, {"uid", "data_source", "ground_truth", "extra"}), args};
    return rc;
}

Batch RlTrainer::run_rollout(const Batch& prompts, const roles::GenerateArgs& args) {
    auto rc = submit_rollout(prompts, args);
    return finish_rollout(rc);
}

Batch RlTrainer::finish_rollout(RolloutCall& rc) {
    Batch out = ctl_.wait(rc.call);
    for (const auto& [k, v] : reduce_metrics(out.metrics()))
        if (k == "rollout/generate_s" && !rc.validation) rollout_busy_s_ += v;
    out.metrics().clear();
    out.update(rc.prompts);
    out.set_meta("temperature", rc.args.temperature);
    if (!c_.rollout.calculate_log_probs) out.erase("rollout_log_probs");  // verl: then none are kept
    return out;
}

// ReMax's baseline: the reward of the greedy response to each row's own prompt (the first row of
// each uid: the prompt tokens, data_source, ground truth and extra of the batch itself), with the
// training sampling settings but greedy decoding, as verl's do_sample=False copy of the batch.
torch::Tensor RlTrainer::greedy_baselines(const Batch& batch) {
    const auto& uids = batch.strings("uid");
    std::map<std::string, int64_t> group_of;
    std::vector<int64_t> first_rows, group(uids.size());
    for (size_t i = 0; i < uids.size(); ++i) {
        auto it = group_of.emplace(uids[i], static_cast<int64_t>(first_rows.size())).first;
        if (it->second == static_cast<int64_t>(first_rows.size())) first_rows.push_back(static_cast<int64_t>(i));
        group[i] = it->second;
    }
    Batch rows = batch.index(first_rows);
    const int64_t P = rows.at("prompts").size(1);
    Batch prompts(rows.size());
    prompts.set("prompt_ids", rows.at("prompts"));
    prompts.set("prompt_mask", rows.at("attention_mask").slice(1, 0, P));
    for (const char* f : {"uid", "data_source", "ground_truth", "extra"}) prompts.set_strings(f, rows.strings(f));
    std::vector<int64_t> index(first_rows.size());
    for (size_t i = 0; i < index.size(); ++i) index[i] = streams::baseline_sample_index(static_cast<int64_t>(i));
    prompts.set_ints("sample_index", std::move(index));
    roles::GenerateArgs args = sampling_args(false, step_);
    args.greedy = true;
    args.n = 1;  // one baseline per prompt
    auto scores = score_responses(task_, run_rollout(prompts, args)).score;
    std::vector<double> base;
    for (int64_t g : group) base.push_back(scores[static_cast<size_t>(g)]);
    return torch::tensor(base, torch::kFloat32);
}

// gdpo: one column per algorithm.gdpo_reward_keys entry, from what the scorers reported.
void RlTrainer::set_reward_components(Batch& b, const ScoredResponses& sc) const {
    for (const auto& key : c_.algorithm.gdpo_reward_keys) {
        std::vector<double> v;
        if (key == "score") v = sc.score;
        else if (key == "acc") v = sc.acc;
        else if (auto it = sc.extra.find(key); it != sc.extra.end()) v = it->second;
        v.resize(static_cast<size_t>(b.size()), std::nan(""));
        for (size_t i = 0; i < v.size(); ++i)
            RLPT_CHECK_KIND(ConfigError, !std::isnan(v[i]),
                            "algorithm.gdpo_reward_keys: the scorer of sample {} (data_source '{}') reports no '{}' "
                            "(scorers report score, acc when they know correctness, and the numbers of their "
                            "ScoreResult::extra)",
                            i, b.strings("data_source")[i], key);
        b.set(kComponentPrefix + key, torch::tensor(v, torch::kFloat64));
    }
}

// Ranks doing role work (verl divides throughput by the GPUs in its resource pools).
int RlTrainer::working_ranks() const {
    std::set<int> ranks;
    for (const auto& layout : run_.topology->placement().roles)
        ranks.insert(layout.world_ranks.begin(), layout.world_ranks.end());
    return std::max<int>(1, static_cast<int>(ranks.size()));
}

// Every sample of a batch must come from one weight version; a batch generated after an actor
// update was synced (`policy`: the actor updates in the rollout's weights) from a newer one than
// the previous batch, and otherwise from the same: rollout never samples with other weights than
// the trainer believes it has.
void RlTrainer::check_weight_version(const Batch& b, int64_t policy) {
    const auto& v = b.ints("weight_version");
    if (v.empty()) return;
    for (int64_t x : v)
        RLPT_CHECK(x == v[0],
                   "step {}: the rollout ranks sampled with different weight versions ({} and {}); a "
                   "weight sync did not reach every rollout rank",
                   step_ + 1, v[0], x);
    if (last_policy_ >= 0) {
        RLPT_CHECK(policy <= last_policy_ || v[0] > last_weight_version_,
                   "step {}: the rollout sampled with stale weights (version {} after an actor update; the previous "
                   "batch already used version {}): the weight sync did not reach the rollout",
                   step_ + 1, v[0], last_weight_version_);
        RLPT_CHECK(policy != last_policy_ || v[0] == last_weight_version_,
                   "step {}: the rollout's weights changed (version {} -> {}) without a weight sync", step_ + 1,
                   last_weight_version_, v[0]);
    }
    last_weight_version_ = v[0];
    last_policy_ = policy;
}

// Generates, scores and (with DAPO dynamic sampling) filters until a full batch of
// data.train_batch_size prompt groups is ready.
Batch RlTrainer::generate_train_batch(std::map<std::string, double>& m, std::map<std::string, double>& timing,
                                      std::optional<Batch> first, int64_t first_policy) {
    const int64_t want = c_.data.train_batch_size, n = c_.rollout.n;
    const auto& fg = c_.algorithm.filter_groups;
    std::vector<Batch> kept;
    int64_t groups = 0, rounds = 0, groups_seen = 0;
    while (groups < want) {
        ++rounds;
        const int64_t max_rounds = fg.max_num_gen_batches > 0 ? fg.max_num_gen_batches : 100;
        RLPT_CHECK(!fg.enable || rounds <= max_rounds,
                   "dynamic sampling: {} generation rounds gave only {} of {} prompt groups with varied rewards "
                   "(algorithm.filter_groups.max_num_gen_batches); the task may be too easy or too hard",
                   rounds - 1, groups, want);
        Batch b;
        int64_t policy = rollout_policy_;
        if (rounds == 1 && first) {
            b = std::move(*first);
            policy = first_policy;
        } else {
            auto idx = sampler_->next_batch(want);
            Stage s(timing, "gen");
            b = generate(idx, n, streams::training_sample_index(step_, rounds - 1, want * n), false);
        }
        check_weight_version(b, policy);
        Stage s(timing, "reward");
        ScoredResponses sc = score_responses(task_, b);
        if (plan_.reward_components) set_reward_components(b, sc);
        // An environment's rewards (rollout.multi_turn.env_command) are the score of its samples.
        if (!c_.rollout.multi_turn.env_command.empty() && b.has("env_reward")) {
            auto er = b.at("env_reward").contiguous();
            sc.score.assign(er.data_ptr<double>(), er.data_ptr<double>() + er.numel());
        }
        std::vector<double> score = sc.score;
        if (plan_.reward_model) {
            Batch rm = ctl_.call(RewardModelMethod::kComputeScore, seq_columns(b));
            auto a = rm.at("rm_scores").to(torch::kFloat64).contiguous();
            for (int64_t i = 0; i < b.size(); ++i) score[static_cast<size_t>(i)] += a[i].item<double>();
        }
        if (c_.reward.overlong_buffer.enable) {
            auto lens = b.at("response_mask").sum(1).to(torch::kInt64).contiguous();
            std::vector<int64_t> l(lens.data_ptr<int64_t>(), lens.data_ptr<int64_t>() + lens.numel());
            auto pen = algo::overlong_penalties(l, {c_.data.max_response_length, c_.reward.overlong_buffer.len,
                                                    c_.reward.overlong_buffer.penalty_factor});
            for (size_t i = 0; i < pen.size(); ++i) score[i] += pen[i];
        }
        b.set("scores", torch::tensor(score, torch::kFloat64));
        std::vector<double> acc = sc.acc;
        for (auto& a : acc)
            if (std::isnan(a)) a = 0.0;
        b.set("acc", torch::tensor(acc, torch::kFloat64));
        if (!fg.enable) {
            kept.push_back(std::move(b));
            groups += want;
            break;
        }
        // verl's names: acc and score are what the scorer reported; seq_reward sums the token-level
        // scores (with the reward model and overlong penalty); seq_final_reward sums the token-level
        // rewards, which equal them here (validation refuses it with KL in the reward).
        const auto& metric = fg.metric == "acc" ? acc : fg.metric == "score" ? sc.score : score;
        auto res = algo::filter_groups_by_metric(metric, b.strings("uid"), true);
        groups_seen += res.num_groups;
        if (!res.kept_rows.empty()) {
            kept.push_back(b.index(res.kept_rows));
            groups += res.num_kept_groups;
        }
    }
    Batch all = Batch::concat(kept);
    if (all.size() > want * n) all = all.slice(0, want * n);
    if (fg.enable) {
        m["train/num_gen_batches"] = static_cast<double>(rounds);
        m["train/kept_group_ratio"] =
            groups_seen ? static_cast<double>(groups) / static_cast<double>(groups_seen) : 1.0;
    }
    all.set("token_level_scores",
            token_level_scores(std::vector<double>(all.at("scores").data_ptr<double>(),
                                                   all.at("scores").data_ptr<double>() + all.size()),
                               all.at("response_mask")));
    return all;
}

// Orders rows so that an even dp split gives rank k part k of every global mini-batch: each
// rank's local mini-batch j then holds global mini-batch j's rows whatever the DP size. With
// trainer.balance_batch the parts of each mini-batch are balanced by sequence workload.
Batch RlTrainer::arrange_for_update(const Batch& b, int64_t dp, int64_t num_mini) const {
    const int64_t rows = b.size() / num_mini, per = rows / dp;
    RLPT_CHECK(rows * num_mini == b.size() && per * dp == rows, "{} rows do not form {} mini-batches over {} ranks",
               b.size(), num_mini, dp);
    auto lens_t = b.at("attention_mask").sum(1).to(torch::kInt64).contiguous();
    std::vector<std::vector<std::vector<int64_t>>> parts(static_cast<size_t>(num_mini));
    for (int64_t j = 0; j < num_mini; ++j) {
        std::vector<int64_t> lens(lens_t.data_ptr<int64_t>() + j * rows, lens_t.data_ptr<int64_t>() + (j + 1) * rows);
        algo::Partitions p;
        if (c_.trainer.balance_batch && dp > 1) {
            p = algo::get_seqlen_balanced_partitions(algo::calculate_workloads(lens), dp, true);
        } else {
            for (int64_t k = 0; k < dp; ++k) {
                std::vector<int64_t> part;
                for (int64_t i = k * per; i < (k + 1) * per; ++i) part.push_back(i);
                p.push_back(part);
            }
        }
        for (auto& part : p)
            for (auto& i : part) i += j * rows;
        parts[static_cast<size_t>(j)] = std::move(p);
    }
    std::vector<int64_t> order;
    for (int64_t k = 0; k < dp; ++k)
        for (int64_t j = 0; j < num_mini; ++j)
            for (int64_t i : parts[static_cast<size_t>(j)][static_cast<size_t>(k)]) order.push_back(i);
    return b.index(order);
}

// One PPO-family step, as the algorithm reads: rollouts with rewards, the log-probs the update
// compares against, the reference's and the critic's views, rewards (with the KL penalty),
// advantages, the updates, then the weight sync and the metrics.
std::map<std::string, double> RlTrainer::train_step() {
    Metrics m, timing;
    const double t_step = now_s();
    ctl_.set_step(step_ + 1);
    const bool update_actor = step_ >= c_.trainer.critic_warmup;
    int64_t policy = rollout_policy_;
    Batch batch;
    rollout_busy_s_ = 0;
    if (async()) {
        std::optional<Batch> first = take_prefetch(policy, timing);
        RLPT_CHECK_KIND(InternalError, actor_updates_ - policy <= c_.trainer.max_staleness,
                        "step {}: the batch was generated with weights {} actor updates old, more than "
                        "trainer.max_staleness={}; it is not trained on",
                        step_ + 1, actor_updates_ - policy, c_.trainer.max_staleness);
        // The next step's generation overlaps this step's actor work (and, when scoring calls no
        // role on the rollout's ranks and draws no more prompts, this step's scoring too). After
        // the last step too: a checkpoint there holds that batch, as one written mid-run does, so
        // a run extended from it trains on what a longer uninterrupted run would have.
        auto prefetch_next = [&] {
            batch_epoch_ = sampler_->epoch();  // before the next step's prompts are drawn
            {
                Stage s(timing, "update_weights");
                sync_for_staleness(actor_updates_ + (update_actor ? 1 : 0));
            }
            start_prefetch(step_ + 1);
        };
        const bool early = prefetch_before_scoring();
        if (early) prefetch_next();
        batch = generate_train_batch(m, timing, std::move(first), policy);
        if (!early) prefetch_next();
    } else {
        batch = generate_train_batch(m, timing);
        batch_epoch_ = sampler_->epoch();
    }
    if (batch.at("response_mask").sum().item<double>() == 0)
        RLPT_LOG_WARN("step {}: every one of the {} responses is empty (aborted); the step runs on, and the metrics "
                      "over responses are NaN",
                      step_ + 1, batch.size());
    {
        Stage s(timing, "old_log_prob");
        if (c_.algorithm.rollout_correction.bypass_mode) batch.set("old_log_probs", batch.at("rollout_log_probs"));
        else compute_old_log_probs(batch, m);
    }
    if (!c_.algorithm.rollout_correction.bypass_mode) apply_rollout_correction(batch, m);
    if (plan_.reference) {
        Stage s(timing, "ref");
        compute_ref_log_probs(batch);
    }
    if (plan_.critic) {
        Stage s(timing, "values");
        batch.update(ctl_.call(CriticMethod::kComputeValues, seq_columns(batch)));
    }
    {
        Stage s(timing, "adv");
        compute_rewards(batch, m);
        compute_advantages(batch);
    }
    const int64_t staleness = actor_updates_ - policy;
    {
        Stage s(timing, "update");
        update_roles(batch, update_actor, m);
    }
    if (update_actor) {
        ++actor_updates_;
        if (!async()) {
            Stage s(timing, "update_weights");
            sync_weights();
            rollout_policy_ = actor_updates_;
            ++step_syncs_;
        }
    }
    timing["timing_s/rollout_busy"] = rollout_busy_s_;
    const double step_time = now_s() - t_step;
    add_step_metrics(batch, timing, step_time, m);
    add_async_metrics(policy, staleness, timing, step_time, m);
    step_syncs_ = 0;
    return m;
}

// verl's decoupled mode (ALGORITHMS.md §6.3): once per training batch, after the actor's old
// log-probs and before the advantage. Needs the rollout's log-probs (rollout.calculate_log_probs).
void RlTrainer::apply_rollout_correction(Batch& batch, Metrics& m) const {
    if (!batch.has("rollout_log_probs") || batch.at("response_mask").sum().item<double>() == 0) return;
    const auto& rc = c_.algorithm.rollout_correction;
    algo::RolloutCorrectionParams p;
    p.rollout_is = rc.rollout_is;
    p.is_threshold = algo::parse_rollout_is_threshold(rc.rollout_is_threshold);
    p.batch_normalize = rc.rollout_is_batch_normalize;
    if (rc.rollout_rs) p.rs = algo::parse_rollout_rs(*rc.rollout_rs, rc.rollout_rs_threshold.value_or(""));
    auto out = algo::compute_rollout_correction(batch.at("old_log_probs"), batch.at("rollout_log_probs"),
                                                batch.at("response_mask"), p);
    if (out.rollout_is_weights.defined()) batch.set("rollout_is_weights", out.rollout_is_weights.to(torch::kFloat32));
    if (!p.rs.empty()) batch.set("response_mask", out.response_mask);
    for (const auto& [k, v] : out.metrics) m[k] = v;
}

// old_log_probs (+ entropy, + sum_pi_squared when the estimator needs it) from the actor.
void RlTrainer::compute_old_log_probs(Batch& batch, Metrics& m) {
    const bool sum_pi_squared = plan_.sum_pi_squared;
    Batch old = ctl_.call(ActorMethod::kComputeLogProb,
                          protocol::with_args(seq_columns(batch),
                                              roles::ActorLogProbArgs{rollout_temperature(batch), sum_pi_squared}));
    batch.update(old);
    if (old.has("entropy")) {
        algo::GlobalBatchInfo gbi;
        gbi.loss_scale_factor = c_.actor.loss_scale_factor;
        const auto mask = batch.at("response_mask").to(torch::kFloat32);
        m["actor/entropy"] =
            algo::agg_loss(old.at("entropy"), mask, algo::parse_agg_mode(c_.actor.loss_agg_mode), gbi).item<double>();
    }
}

void RlTrainer::compute_ref_log_probs(Batch& batch) {
    batch.update(
        ctl_.call(ReferenceMethod::kComputeLogProb,
                  protocol::with_args(seq_columns(batch), roles::ReferenceLogProbArgs{rollout_temperature(batch)})));
}

// token_level_rewards: the scores, minus the KL penalty when algorithm.use_kl_in_reward.
void RlTrainer::compute_rewards(Batch& batch, Metrics& m) {
    torch::Tensor rewards = batch.at("token_level_scores");
    if (c_.algorithm.use_kl_in_reward) {
        auto res = algo::apply_kl_penalty(rewards, batch.at("old_log_probs"), batch.at("ref_log_prob"),
                                          batch.at("response_mask"), kl_ctrl_, c_.algorithm.kl_penalty);
        rewards = res.token_level_rewards;
        for (const auto& [k, v] : res.metrics) m[k] = v;
    }
    batch.set("token_level_rewards", rewards.to(torch::kFloat32));
}

// advantages and returns by algorithm.adv_estimator, with the inputs its table row asks for.
void RlTrainer::compute_advantages(Batch& batch) {
    algo::AdvantageInputs ai;
    ai.token_level_rewards = batch.at("token_level_rewards");
    ai.response_mask = batch.at("response_mask");
    if (plan_.critic) ai.values = batch.at("values");
    ai.index = algo::make_group_index(batch.strings("uid")).ids;
    if (plan_.greedy_baselines) ai.reward_baselines = greedy_baselines(batch);
    if (plan_.sum_pi_squared) {
        ai.old_log_probs = batch.at("old_log_probs");
        ai.sum_pi_squared = batch.at("sum_pi_squared");
    }
    if (plan_.reward_components) {
        std::vector<torch::Tensor> comps;
        for (const auto& k : c_.algorithm.gdpo_reward_keys) comps.push_back(batch.at(kComponentPrefix + k));
        ai.reward_components = torch::stack(comps);
    }
    algo::AdvantageParams ap;
    ap.gamma = c_.algorithm.gamma;
    ap.lam = c_.algorithm.lam;
    ap.norm_adv_by_std_in_grpo = c_.algorithm.norm_adv_by_std_in_grpo;
    ap.gdpo_weights = c_.algorithm.gdpo_reward_weights;
    auto adv = algo::compute_advantage(c_.algorithm.adv_estimator, ai, ap);
    batch.set("advantages", adv.advantages.to(torch::kFloat32));
    batch.set("returns", adv.returns.to(torch::kFloat32));
}

// The critic and actor updates: both in flight at once when they live on different ranks.
void RlTrainer::update_roles(const Batch& batch, bool update_actor, Metrics& m) {
    auto take = [&](protocol::Controller::Pending& call) {
        for (const auto& [k, v] : reduce_metrics(ctl_.wait(call).metrics())) m[k] = v;
    };
    std::optional<protocol::Controller::Pending> critic_call;
    if (plan_.critic) critic_call = ctl_.submit(CriticMethod::kUpdate, critic_update_input(batch));
    if (!update_actor) {
        if (critic_call) take(*critic_call);
        return;
    }
    Batch actor_in = actor_update_input(batch);
    if (critic_call && critic_shares_actor_ranks()) {
        take(*critic_call);  // one after the other on shared ranks
        critic_call.reset();
    }
    auto actor_call = ctl_.submit(ActorMethod::kUpdate, actor_in);
    if (critic_call) take(*critic_call);
    take(actor_call);
}

Batch RlTrainer::critic_update_input(const Batch& batch) const {
    const int64_t tb = c_.data.train_batch_size, n = c_.rollout.n;
    const int64_t cmb = c_.critic.ppo_mini_batch_size.value_or(c_.actor.ppo_mini_batch_size);
    Batch in = arrange_for_update(batch.select({"input_ids", "attention_mask", "position_ids", "responses",
                                                "response_mask", "values", "returns"}),
                                  ctl_.dp_size("critic"), tb / cmb);
    protocol::encode_args(roles::CriticUpdateArgs{tb / cmb, static_cast<double>(cmb * n)}, in);
    return in;
}

Batch RlTrainer::actor_update_input(const Batch& batch) const {
    const int64_t tb = c_.data.train_batch_size, n = c_.rollout.n, mb = c_.actor.ppo_mini_batch_size;
    std::vector<std::string> cols{"input_ids",     "attention_mask", "position_ids", "responses",
                                  "response_mask", "old_log_probs",  "advantages"};
    if (c_.actor.use_kl_loss) cols.push_back("ref_log_prob");
    if (batch.has("rollout_is_weights")) cols.push_back("rollout_is_weights");
    Batch in = arrange_for_update(batch.select(cols), ctl_.dp_size("actor"), tb / mb);
    protocol::encode_args(roles::ActorUpdateArgs{rollout_temperature(batch), tb / mb, static_cast<double>(mb * n)}, in);
    return in;
}

bool RlTrainer::critic_shares_actor_ranks() const {
    const auto& critic = ctl_.layout("critic").world_ranks;
    const auto& actor = ctl_.layout("actor").world_ranks;
    return std::find_first_of(critic.begin(), critic.end(), actor.begin(), actor.end()) != critic.end();
}

double RlTrainer::rollout_temperature(const Batch& batch) { return batch.meta_double("temperature"); }

// verl's data, timing and throughput metrics of the step.
void RlTrainer::add_step_metrics(const Batch& batch, const Metrics& timing, double step_time, Metrics& m) const {
    const auto mask = batch.at("response_mask");
    algo::DataMetricsInputs dm;
    dm.token_level_scores = batch.at("token_level_scores");
    dm.token_level_rewards = batch.at("token_level_rewards");
    dm.advantages = batch.at("advantages");
    dm.returns = batch.at("returns");
    if (plan_.critic) dm.values = batch.at("values");
    dm.response_mask = mask;
    dm.prompt_mask = batch.at("attention_mask").slice(1, 0, batch.at("prompts").size(1));
    dm.max_prompt_length = c_.data.max_prompt_length;
    dm.max_response_length = c_.data.max_response_length;
    for (const auto& [k, v] : algo::compute_data_metrics(dm)) m[k] = v;
    m["train/acc/mean"] = batch.at("acc").mean().item<double>();
    agent::add_agent_metrics(batch, m);
    for (const auto& [k, v] : timing) m[k] = v;
    m["timing_s/step"] = step_time;
    const double tokens = batch.at("attention_mask").sum().item<double>();
    const double resp_tokens = mask.sum().item<double>();
    m["perf/total_num_tokens"] = tokens;
    m["perf/time_per_step"] = step_time;
    m["perf/throughput"] = tokens / step_time / static_cast<double>(working_ranks());
    // verl's per-token timings: generation per response token, the other stages per prompt+response
    // token (rlpt's "update" is verl's update_actor and update_critic together: they may overlap).
    if (resp_tokens > 0) m["timing_per_token_ms/gen"] = 1000.0 * metric_or(timing, "timing_s/gen", 0) / resp_tokens;
    for (const char* stage : {"old_log_prob", "ref", "values", "adv", "update"}) {
        auto it = timing.find(std::string("timing_s/") + stage);
        if (it != timing.end() && tokens > 0)
            m[std::string("timing_per_token_ms/") + stage] = 1000.0 * it->second / tokens;
    }
    m["training/global_step"] = static_cast<double>(step_ + 1);
    m["training/epoch"] = static_cast<double>(batch_epoch_);
}

std::map<std::string, double> RlTrainer::validate() {
    std::map<std::string, double> m;
    if (task_.val.empty()) return m;
    const double t0 = now_s();
    if (async()) {  // validate the actor's newest weights (the rollout may hold older ones)
        settle_prefetch();
        sync_to_latest();
    }
    const int64_t n = c_.rollout.val.n;
    const int64_t chunk = c_.data.val_batch_size > 0 ? c_.data.val_batch_size : static_cast<int64_t>(task_.val.size());
    ValidationTally tally;
    for (int64_t b = 0; b < static_cast<int64_t>(task_.val.size()); b += chunk) {
        std::vector<int64_t> idx;
        for (int64_t i = b; i < std::min<int64_t>(b + chunk, static_cast<int64_t>(task_.val.size())); ++i)
            idx.push_back(i);
        Batch out = generate(idx, n, b * n, true);
        tally.add(out, score_responses(task_, out));
    }
    m = tally.metrics(n);
    m["timing_s/testing"] = now_s() - t0;
    return m;
}

void RlTrainer::log_progress(const std::map<std::string, double>& m) const {
    auto g = [&](const char* k) { return metric_or(m, k, std::nan("")); };
    std::string kl = m.count("actor/kl_loss")             ? fmt::format(" | kl {:.4f}", g("actor/kl_loss"))
                     : m.count("actor/reward_kl_penalty") ? fmt::format(" | kl {:.4f}", g("actor/reward_kl_penalty"))
                                                          : fmt::format(" | ppo_kl {:.4f}", g("actor/ppo_kl"));
    RLPT_LOG_INFO("step {}/{} ep {} | score {:.3f} acc {:.3f}{} | entropy {:.3f} | resp len {:.1f} | {:.1f} s (gen "
                  "{:.1f}, reward {:.1f}, old {:.1f}, ref {:.1f}, values {:.1f}, update {:.1f}, sync {:.2f})",
                  step_, total_steps_, batch_epoch_, g("critic/score/mean"), g("train/acc/mean"), kl,
                  g("actor/entropy"), g("response_length/mean"), g("timing_s/step"), g("timing_s/gen"),
                  g("timing_s/reward"), g("timing_s/old_log_prob"), metric_or(m, "timing_s/ref", 0),
                  metric_or(m, "timing_s/values", 0), g("timing_s/update"), metric_or(m, "timing_s/update_weights", 0));
}

void RlTrainer::export_policy(const std::string& dir) {
    ctl_.call(ActorMethod::kExport, protocol::with_args(Batch(0), protocol::DirArgs{dir}));
    task_.tok->save(dir);
    RLPT_LOG_INFO("exported the policy as a Hugging Face folder: {}", dir);
}

int RlTrainer::run() {
    started_ = now_s();
    init_roles();
    const bool resumed = try_resume();
    log_ = std::make_unique<MetricsLog>(run_.run_dir, resumed ? step_ : -1, c_.trainer.logger);
    if (!resumed) sync_weights();
    RLPT_LOG_INFO("{}/{}: training {} steps ({} prompts x {} samples per step, {} steps per epoch){}",
                  c_.trainer.project_name, c_.trainer.experiment_name, total_steps_, c_.data.train_batch_size,
                  c_.rollout.n, batches_per_epoch_, resumed ? fmt::format(", resumed at step {}", step_) : "");
    std::map<std::string, double> last_val;
    if (!resumed && c_.trainer.val_before_train) {
        last_val = validate();
        log_->write(0, last_val);
        for (const auto& [k, v] : last_val)
            if (k.rfind("val-core/", 0) == 0) RLPT_LOG_INFO("validation before training: {} = {:.4f}", k, v);
    }
    while (step_ < total_steps_) {
        auto m = train_step();
        ++step_;
        const bool last = step_ == total_steps_;
        if (c_.trainer.test_freq > 0 && (step_ % c_.trainer.test_freq == 0 || last)) {
            last_val = validate();
            for (const auto& [k, v] : last_val) m[k] = v;
        }
        if (log_->console()) log_progress(m);
        for (const auto& [k, v] : m)
            if (k.rfind("val-core/", 0) == 0) RLPT_LOG_INFO("  validation at step {}: {} = {:.4f}", step_, k, v);
        log_->write(step_, m);
        const bool saved = c_.trainer.save_freq > 0 && (step_ % c_.trainer.save_freq == 0 || last);
        if (saved) save_checkpoint();
        if (c_.trainer.export_hf_freq > 0 && step_ % c_.trainer.export_hf_freq == 0)
            export_policy((std::filesystem::path(run_.run_dir) / "hf_models" / fmt::format("step_{}", step_)).string());
        // Preemption (SIGTERM/SIGUSR1 on any rank): the step is done; checkpoint every role and
        // exit 75 so a requeued job resumes here (trainer.resume=auto). After the last step
        // the run is complete and ends normally.
        if (!last && ctl_.stop_requested()) {
            if (!saved) save_checkpoint();
            RLPT_LOG_WARN("stopping after step {}/{} on {}: checkpoint written; exit code {} (a run with "
                          "trainer.resume=auto continues from here)",
                          step_, total_steps_, ctl_.stop_reason(), kExitPreempted);
            return kExitPreempted;
        }
    }
    settle_prefetch();  // async: the generation for a step after the last one (kept in its checkpoint)
    if (c_.trainer.export_hf) export_policy((std::filesystem::path(run_.run_dir) / "hf_model").string());
    std::string summary;
    for (const auto& [k, v] : last_val)
        if (k.rfind("val-core/", 0) == 0) summary += fmt::format(", {} {:.4f}", k, v);
    RLPT_LOG_INFO("done: {} steps in {:.1f} s{}; metrics in {}", step_, now_s() - started_, summary, log_->path());
    return 0;
}

}  // namespace rlpt::app
