// Outcome-reward estimators (one scalar score per sample, grouped by prompt uid):
// grpo, grpo_passk, rloo, opo, gpg. Group helpers live here too.
#include <unordered_map>

#include "algo/checks.h"
#include "algo/group_stats.h"
#include "rlpt/algo/advantage.h"

namespace rlpt::algo {

namespace {

template <typename Label>
GroupIndex dense_ids(const std::vector<Label>& labels) {
    std::unordered_map<Label, int64_t> seen;
    std::vector<int64_t> ids;
    ids.reserve(labels.size());
    for (const auto& l : labels) {
        auto it = seen.emplace(l, static_cast<int64_t>(seen.size())).first;
        ids.push_back(it->second);
    }
    GroupIndex out;
    out.num_groups = static_cast<int64_t>(seen.size());
    out.ids = torch::tensor(ids, torch::kInt64);
    if (ids.empty()) out.ids = torch::empty({0}, torch::kInt64);
    return out;
}

}  // namespace

GroupIndex make_group_index(const std::vector<int64_t>& labels) { return dense_ids(labels); }

GroupIndex make_group_index(const std::vector<std::string>& labels) { return dense_ids(labels); }

GroupIndex make_group_index(const torch::Tensor& labels) {
    RLPT_CHECK(labels.defined() && labels.dim() == 1, "make_group_index: labels must be a 1-D tensor, got {}",
               detail::shape_str(labels));
    RLPT_CHECK(!labels.is_floating_point() && !labels.is_complex() && labels.scalar_type() != torch::kBool,
               "make_group_index: labels must be an integer tensor, got {}",
               std::string(c10::toString(labels.scalar_type())));
    auto l = labels.to(torch::kCPU, torch::kInt64).contiguous();
    const int64_t* p = l.data_ptr<int64_t>();
    return dense_ids(std::vector<int64_t>(p, p + l.numel()));
}

namespace detail {

torch::Tensor outcome_scores(const torch::Tensor& rewards, const torch::Tensor& mask, const char* where) {
    check_float(rewards, where, "token_level_rewards");
    check_2d(rewards, where, "token_level_rewards");
    check_like(rewards, "token_level_rewards", mask, "response_mask", where);
    return rewards.sum(-1);
}

GroupStats group_stats(const torch::Tensor& scores, const torch::Tensor& index, const char* where) {
    RLPT_CHECK(index.defined(), "{}: the group index (uid per sample) is required but was not given", where);
    RLPT_CHECK(index.dim() == 1 && index.size(0) == scores.size(0),
               "{}: index must have shape [{}] (one group label per sample), got {}", where, scores.size(0),
               shape_str(index));
    GroupStats st;
    st.index = make_group_index(index);
    const auto g = st.index.num_groups;
    auto opts = torch::TensorOptions().dtype(torch::kFloat64);
    st.scores = scores.detach().to(torch::kCPU, torch::kFloat64);
    st.count = torch::zeros({g}, opts).index_add_(0, st.index.ids, torch::ones_like(st.scores));
    st.sum = torch::zeros({g}, opts).index_add_(0, st.index.ids, st.scores);
    auto single = st.count == 1.0;
    auto raw_mean = st.sum / st.count;
    st.mean = torch::where(single, torch::zeros_like(raw_mean), raw_mean);
    auto centered = st.scores - st.mean.index_select(0, st.index.ids);
    auto ss = torch::zeros({g}, opts).index_add_(0, st.index.ids, centered * centered);
    auto var = ss / (st.count - 1.0).clamp_min(1.0);
    st.std = torch::where(single, torch::ones_like(var), var.sqrt());
    return st;
}

AdvantageOutput outcome_output(const torch::Tensor& per_sample, const torch::Tensor& like, const torch::Tensor& mask) {
    auto adv = per_sample.to(like.device(), like.scalar_type()).unsqueeze(-1) * mask_as(mask, like);
    return {adv, adv};
}

}  // namespace detail

AdvantageOutput compute_grpo(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                             const torch::Tensor& index, double epsilon, bool norm_by_std) {
    torch::NoGradGuard no_grad;
    auto s = detail::outcome_scores(token_level_rewards, response_mask, "compute_grpo");
    auto st = detail::group_stats(s, index, "compute_grpo");
    auto ids = st.index.ids;
    auto a = st.scores - st.mean.index_select(0, ids);
    if (norm_by_std) a = a / (st.std.index_select(0, ids) + epsilon);
    return detail::outcome_output(a, token_level_rewards, response_mask);
}

AdvantageOutput compute_grpo_passk(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                                   const torch::Tensor& index, double epsilon, bool norm_by_std) {
    torch::NoGradGuard no_grad;
    auto s = detail::outcome_scores(token_level_rewards, response_mask, "compute_grpo_passk");
    auto st = detail::group_stats(s, index, "compute_grpo_passk");
    const int64_t b = s.size(0);
    const int64_t g = st.index.num_groups;
    auto ids = st.index.ids.accessor<int64_t, 1>();
    auto sc = st.scores.accessor<double, 1>();
    auto cnt = st.count.accessor<double, 1>();
    auto sd = st.std.accessor<double, 1>();
    std::vector<int64_t> best(g, -1), second(g, -1);
    for (int64_t i = 0; i < b; ++i) {
        int64_t k = ids[i];
        RLPT_CHECK(cnt[k] >= 2.0,
                   "compute_grpo_passk: pass@k needs at least 2 samples per group, but the group of row {} "
                   "has {}",
                   i, static_cast<int64_t>(cnt[k]));
        if (best[k] < 0 || sc[i] > sc[best[k]]) {
            second[k] = best[k];
            best[k] = i;
        } else if (second[k] < 0 || sc[i] > sc[second[k]]) {
            second[k] = i;
        }
    }
    auto adv = torch::zeros({b}, torch::kFloat64);
    auto a = adv.accessor<double, 1>();
    for (int64_t k = 0; k < g; ++k) {
        double v = sc[best[k]] - sc[second[k]];
        if (norm_by_std) v /= sd[k] + epsilon;
        a[best[k]] = v;
    }
    return detail::outcome_output(adv, token_level_rewards, response_mask);
}

AdvantageOutput compute_rloo(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                             const torch::Tensor& index) {
    torch::NoGradGuard no_grad;
    auto s = detail::outcome_scores(token_level_rewards, response_mask, "compute_rloo");
    auto st = detail::group_stats(s, index, "compute_rloo");
    auto ids = st.index.ids;
    auto n = st.count.index_select(0, ids);
    auto loo = (n * st.scores - st.sum.index_select(0, ids)) / (n - 1.0).clamp_min(1.0);
    auto a = torch::where(n > 1.0, loo, st.scores);
    return detail::outcome_output(a, token_level_rewards, response_mask);
}

AdvantageOutput compute_opo(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                            const torch::Tensor& index) {
    torch::NoGradGuard no_grad;
    auto s = detail::outcome_scores(token_level_rewards, response_mask, "compute_opo");
    auto st = detail::group_stats(s, index, "compute_opo");
    auto ids = st.index.ids;
    auto len = response_mask.detach().to(torch::kCPU, torch::kFloat64).sum(-1);
    auto opts = torch::TensorOptions().dtype(torch::kFloat64);
    auto len_sum = torch::zeros({st.index.num_groups}, opts).index_add_(0, ids, len);
    auto weighted = torch::zeros({st.index.num_groups}, opts).index_add_(0, ids, len * st.scores);
    auto use = (st.count > 1.0) & (len_sum > 0.0);
    auto baseline = torch::where(use, weighted / len_sum.clamp_min(1.0), torch::zeros_like(len_sum));
    auto a = st.scores - baseline.index_select(0, ids);
    return detail::outcome_output(a, token_level_rewards, response_mask);
}

AdvantageOutput compute_gpg(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                            const torch::Tensor& index, double f_norm) {
    torch::NoGradGuard no_grad;
    RLPT_CHECK(f_norm != 0.0, "compute_gpg: f_norm must be non-zero");
    auto s = detail::outcome_scores(token_level_rewards, response_mask, "compute_gpg");
    auto st = detail::group_stats(s, index, "compute_gpg");
    const double nonzero = static_cast<double>(torch::count_nonzero(s).item<int64_t>());
    const double alpha = static_cast<double>(s.size(0)) / std::max(nonzero, 1.0);
    auto a = alpha * (st.scores - st.mean.index_select(0, st.index.ids)) / f_norm;
    return detail::outcome_output(a, token_level_rewards, response_mask);
}

}  // namespace rlpt::algo
