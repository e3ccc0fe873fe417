// Estimators that need more than one reward per sample: gdpo (several reward components) and
// the optimal token baseline pair (the actor's old log-probs and Σπ²).
#include <algorithm>

#include "algo/checks.h"
#include "algo/group_stats.h"
#include "rlpt/algo/advantage.h"
#include "rlpt/algo/masked_ops.h"

namespace rlpt::algo {

namespace {

// The rows of each group, in order of first appearance.
std::vector<std::vector<int64_t>> group_rows(const torch::Tensor& index, int64_t b, const char* where) {
    RLPT_CHECK(index.defined(), "{}: the group index (uid per sample) is required but was not given", where);
    RLPT_CHECK(index.dim() == 1 && index.size(0) == b,
               "{}: index must have shape [{}] (one group label per sample), got {}", where, b,
               detail::shape_str(index));
    auto g = make_group_index(index);
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(g.num_groups));
    auto ids = g.ids.accessor<int64_t, 1>();
    for (int64_t i = 0; i < b; ++i) rows[static_cast<size_t>(ids[i])].push_back(i);
    return rows;
}

struct OtbTerms {
    torch::Tensor m;        // B×T float64 mask
    torch::Tensor returns;  // G = reverse-cumsum(r·m), float64
    torch::Tensor w_cum;    // W = cumsum(w·m), float64
};

OtbTerms otb_terms(const torch::Tensor& rewards, const torch::Tensor& mask, const torch::Tensor& old_log_probs,
                   const torch::Tensor& sum_pi_squared, const char* where) {
    detail::outcome_scores(rewards, mask, where);
    detail::check_float(old_log_probs, where, "old_log_probs");
    detail::check_float(sum_pi_squared, where, "sum_pi_squared");
    detail::check_like(rewards, "token_level_rewards", old_log_probs, "old_log_probs", where);
    detail::check_like(rewards, "token_level_rewards", sum_pi_squared, "sum_pi_squared", where);
    // On the host (group loops), whatever the inputs' device; the callers move the result back.
    const auto f64 = torch::kFloat64;
    OtbTerms t;
    t.m = mask.detach().to(torch::kCPU, f64);
    auto r = rewards.detach().to(torch::kCPU, f64);
    t.returns = (r * t.m).flip({-1}).cumsum(-1).flip({-1});
    auto w = 1.0 - 2.0 * torch::exp(old_log_probs.detach().to(torch::kCPU, f64)) +
             sum_pi_squared.detach().to(torch::kCPU, f64);
    t.w_cum = (w * t.m).cumsum(-1);
    return t;
}

// Zero-tail rule: if one row of the group is strictly the longest, its baseline from the
// second-longest length on is 0. `lens` are the group rows' lengths, `rows` their batch rows.
void zero_tail(torch::Tensor& baselines, const std::vector<int64_t>& rows, const std::vector<int64_t>& lens) {
    std::vector<int64_t> sorted = lens;
    std::sort(sorted.begin(), sorted.end());
    const int64_t longest = sorted.back(), second = sorted[sorted.size() - 2];
    if (longest == second) return;
    for (size_t k = 0; k < rows.size(); ++k)
        if (lens[k] == longest) baselines[rows[k]].slice(0, second).zero_();
}

}  // namespace

AdvantageOutput compute_gdpo(const torch::Tensor& reward_components, const torch::Tensor& response_mask,
                             const torch::Tensor& index, const std::vector<double>& weights, double epsilon,
                             bool norm_by_std) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "compute_gdpo";
    detail::check_float(reward_components, kWhere, "reward_components");
    detail::check_2d(response_mask, kWhere, "response_mask");
    const int64_t b = response_mask.size(0), t = response_mask.size(1);
    RLPT_CHECK(reward_components.dim() == 2 && reward_components.size(1) == b && reward_components.size(0) >= 1,
               "{}: reward_components must have shape [K, {}] with K >= 1, got {}", kWhere, b,
               detail::shape_str(reward_components));
    const int64_t k = reward_components.size(0);
    RLPT_CHECK(weights.empty() || static_cast<int64_t>(weights.size()) == k, "{}: {} weights for {} reward components",
               kWhere, weights.size(), k);
    RLPT_CHECK(t >= 1, "{}: the response mask has no columns", kWhere);
    detail::check_same_device(response_mask, "response_mask", reward_components, "reward_components", kWhere);
    // On the host (the group statistics are host work), the result moved back.
    auto comps = reward_components.detach().to(torch::kCPU, torch::kFloat64);
    auto m = response_mask.detach().to(torch::kCPU, torch::kFloat64);
    auto total = torch::zeros({b, t}, torch::kFloat64);
    for (int64_t j = 0; j < k; ++j) {
        // A row's token rewards summing to its component score: GRPO's per-sample score.
        auto r = torch::zeros({b, t}, torch::kFloat64);
        r.select(1, 0).copy_(comps[j]);
        auto a = compute_grpo(r, m, index, epsilon, norm_by_std).advantages;
        total += (weights.empty() ? 1.0 : weights[static_cast<size_t>(j)]) * a;
    }
    auto adv = (masked_whiten(total, m) * m).to(response_mask.device());
    return {adv, adv};
}

AdvantageOutput compute_optimal_token_baseline(const torch::Tensor& token_level_rewards,
                                               const torch::Tensor& response_mask, const torch::Tensor& index,
                                               const torch::Tensor& old_log_probs, const torch::Tensor& sum_pi_squared,
                                               bool handle_zero_tail) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "compute_optimal_token_baseline";
    auto t = otb_terms(token_level_rewards, response_mask, old_log_probs, sum_pi_squared, kWhere);
    const int64_t b = t.m.size(0);
    auto baselines = torch::zeros_like(t.returns);
    for (const auto& rows : group_rows(index, b, kWhere)) {
        if (rows.size() < 2) continue;  // a singleton has no baseline
        auto idx = torch::tensor(rows, torch::kInt64);
        auto g = t.returns.index_select(0, idx), w = t.w_cum.index_select(0, idx), m = t.m.index_select(0, idx);
        auto base = (g * w * m).sum(0) / ((w * m).sum(0) + 1e-8);
        for (int64_t row : rows) baselines[row].copy_(base);
        if (handle_zero_tail) {
            auto lens_t = m.sum(-1).to(torch::kInt64);
            std::vector<int64_t> lens(lens_t.data_ptr<int64_t>(), lens_t.data_ptr<int64_t>() + lens_t.numel());
            zero_tail(baselines, rows, lens);
        }
    }
    const auto like = token_level_rewards.options();
    return {((t.returns - baselines) * t.m).to(like), t.returns.to(like)};
}

AdvantageOutput compute_tir_optimal_token_baseline(const torch::Tensor& token_level_rewards,
                                                   const torch::Tensor& response_mask, const torch::Tensor& index,
                                                   const torch::Tensor& old_log_probs,
                                                   const torch::Tensor& sum_pi_squared, bool handle_zero_tail) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "compute_tir_optimal_token_baseline";
    auto t = otb_terms(token_level_rewards, response_mask, old_log_probs, sum_pi_squared, kWhere);
    const int64_t b = t.m.size(0);
    // Compact each row's valid positions to the front.
    std::vector<torch::Tensor> positions(static_cast<size_t>(b));
    std::vector<int64_t> lens(static_cast<size_t>(b));
    int64_t longest = 0;
    for (int64_t i = 0; i < b; ++i) {
        positions[static_cast<size_t>(i)] = torch::nonzero(t.m[i]).reshape({-1});
        lens[static_cast<size_t>(i)] = positions[static_cast<size_t>(i)].numel();
        longest = std::max(longest, lens[static_cast<size_t>(i)]);
    }
    auto all_w = torch::zeros({b, longest}, torch::kFloat64), all_g = torch::zeros({b, longest}, torch::kFloat64);
    for (int64_t i = 0; i < b; ++i) {
        const auto& pos = positions[static_cast<size_t>(i)];
        if (pos.numel() == 0) continue;
        all_w[i].slice(0, 0, pos.numel()).copy_(t.w_cum[i].index_select(0, pos));
        all_g[i].slice(0, 0, pos.numel()).copy_(t.returns[i].index_select(0, pos));
    }
    auto baselines = torch::zeros_like(all_g);
    for (const auto& all_rows : group_rows(index, b, kWhere)) {
        std::vector<int64_t> rows, group_lens;
        for (int64_t r : all_rows) {
            if (lens[static_cast<size_t>(r)] == 0) continue;  // empty rows take no part
            rows.push_back(r);
            group_lens.push_back(lens[static_cast<size_t>(r)]);
        }
        if (rows.size() < 2) continue;
        auto idx = torch::tensor(rows, torch::kInt64);
        auto g = all_g.index_select(0, idx), w = all_w.index_select(0, idx);
        auto base = (g * w).sum(0) / (w.sum(0) + 1e-8);
        for (int64_t row : rows) baselines[row].copy_(base);
        if (handle_zero_tail) zero_tail(baselines, rows, group_lens);
    }
    auto all_adv = all_g - baselines;
    auto adv = torch::zeros_like(t.returns);
    for (int64_t i = 0; i < b; ++i) {
        const auto& pos = positions[static_cast<size_t>(i)];
        if (pos.numel() > 0) adv[i].index_copy_(0, pos, all_adv[i].slice(0, 0, pos.numel()));
    }
    const auto like = token_level_rewards.options();
    return {(adv * t.m).to(like), t.returns.to(like)};
}

}  // namespace rlpt::algo
