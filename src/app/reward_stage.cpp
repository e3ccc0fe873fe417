#include "reward_stage.h"

#include <cmath>

#include "rlpt/core/error.h"
#include "rlpt/core/rng_streams.h"
#include "stage_timer.h"

namespace rlpt::app {

std::string reward_component_column(const std::string& key) { return "reward_component/" + key; }

RewardSettings reward_settings(const Config& c, const RunPlan& plan) {
    RewardSettings s;
    s.prompts_per_step = c.data.train_batch_size;
    s.n = c.rollout.n;
    if (plan.reward_components) s.component_keys = c.algorithm.gdpo_reward_keys;
    s.env_rewards = !c.rollout.multi_turn.env_command.empty();
    const auto& ob = c.reward.overlong_buffer;
    if (ob.enable) s.overlong = algo::OverlongBuffer{c.data.max_response_length, ob.len, ob.penalty_factor};
    s.filter_groups = c.algorithm.filter_groups;
    s.kl_in_reward = c.algorithm.use_kl_in_reward;
    s.kl_penalty = c.algorithm.kl_penalty;
    s.kl_ctrl = c.algorithm.kl_ctrl;
    return s;
}

RewardStage::RewardStage(const TaskData& task, const RewardSettings& s, RewardModelFn reward_model)
    : task_(task),
      s_(s),
      reward_model_(std::move(reward_model)),
      kl_ctrl_(
          algo::KlController::from_config(s.kl_ctrl.type, s.kl_ctrl.kl_coef, s.kl_ctrl.target_kl, s.kl_ctrl.horizon)) {}

// gdpo: one column per algorithm.gdpo_reward_keys entry, from what the scorers reported.
void RewardStage::set_reward_components(Batch& b, const ScoredResponses& sc) const {
    for (const auto& key : s_.component_keys) {
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
        b.set(reward_component_column(key), torch::tensor(v, torch::kFloat64));
    }
}

RewardStage::Scores RewardStage::score(Batch& b) const {
    ScoredResponses sc = score_responses(task_, b);
    set_reward_components(b, sc);
    // An environment's rewards (rollout.multi_turn.env_command) are the score of its samples.
    if (s_.env_rewards && b.has("env_reward")) {
        auto er = b.at("env_reward").contiguous();
        sc.score.assign(er.data_ptr<double>(), er.data_ptr<double>() + er.numel());
    }
    Scores out{sc.score, sc.score, sc.acc};
    std::vector<double>& score = out.total;
    if (reward_model_) {
        auto a = reward_model_(b).to(torch::kFloat64).contiguous();
        for (int64_t i = 0; i < b.size(); ++i) score[static_cast<size_t>(i)] += a[i].item<double>();
    }
    if (s_.overlong) {
        auto lens = b.at("response_mask").sum(1).to(torch::kInt64).contiguous();
        std::vector<int64_t> l(lens.data_ptr<int64_t>(), lens.data_ptr<int64_t>() + lens.numel());
        auto pen = algo::overlong_penalties(l, *s_.overlong);
        for (size_t i = 0; i < pen.size(); ++i) score[i] += pen[i];
    }
    b.set("scores", torch::tensor(score, torch::kFloat64));
    for (auto& a : out.acc)
        if (std::isnan(a)) a = 0.0;
    b.set("acc", torch::tensor(out.acc, torch::kFloat64));
    return out;
}

Batch RewardStage::collect(const std::function<Batch(int64_t round)>& next_round, Metrics& m, Metrics& timing) const {
    const int64_t want = s_.prompts_per_step, n = s_.n;
    const auto& fg = s_.filter_groups;
    std::vector<Batch> kept;
    int64_t groups = 0, rounds = 0, groups_seen = 0;
    while (groups < want) {
        ++rounds;
        const int64_t max_rounds = fg.max_num_gen_batches > 0 ? fg.max_num_gen_batches : 100;
        RLPT_CHECK(!fg.enable || rounds <= max_rounds,
                   "dynamic sampling: {} generation rounds gave only {} of {} prompt groups with varied rewards "
                   "(algorithm.filter_groups.max_num_gen_batches); the task may be too easy or too hard",
                   rounds - 1, groups, want);
        Batch b = next_round(rounds - 1);
        Stage s(timing, "reward");
        const Scores sc = score(b);
        if (!fg.enable) {
            kept.push_back(std::move(b));
            groups += want;
            break;
        }
        // verl's names: acc and score are what the scorer reported; seq_reward sums the token-level
        // scores (with the reward model and overlong penalty); seq_final_reward sums the token-level
        // rewards, which equal them here (validation refuses it with KL in the reward).
        const auto& metric = fg.metric == "acc" ? sc.acc : fg.metric == "score" ? sc.scorer : sc.total;
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

void RewardStage::compute_rewards(Batch& batch, Metrics& m) {
    torch::Tensor rewards = batch.at("token_level_scores");
    if (s_.kl_in_reward) {
        auto res = algo::apply_kl_penalty(rewards, batch.at("old_log_probs"), batch.at("ref_log_prob"),
                                          batch.at("response_mask"), kl_ctrl_, s_.kl_penalty);
        rewards = res.token_level_rewards;
        for (const auto& [k, v] : res.metrics) m[k] = v;
    }
    batch.set("token_level_rewards", rewards.to(torch::kFloat32));
}

// The first row of each uid gives the prompt tokens, data_source, ground truth and extra of the
// batch itself; the rollout decodes greedily with the training settings otherwise, as verl's
// do_sample=False copy of the batch.
torch::Tensor RewardStage::greedy_baselines(const Batch& batch,
                                            const std::function<Batch(const Batch& prompts)>& generate) const {
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
    auto scores = score_responses(task_, generate(prompts)).score;
    std::vector<double> base;
    for (int64_t g : group) base.push_back(scores[static_cast<size_t>(g)]);
    return torch::tensor(base, torch::kFloat32);
}

}  // namespace rlpt::app
