// Token-level estimators (returns propagated along T) and the whitened REINFORCE++ family:
// gae, reinforce_plus_plus, reinforce_plus_plus_baseline, remax.
#include "algo/checks.h"
#include "algo/group_stats.h"
#include "rlpt/algo/advantage.h"
#include "rlpt/algo/masked_ops.h"

namespace rlpt::algo {

AdvantageOutput compute_gae(const torch::Tensor& token_level_rewards, const torch::Tensor& values,
                            const torch::Tensor& response_mask, double gamma, double lam) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "compute_gae";
    detail::outcome_scores(token_level_rewards, response_mask, kWhere);
    detail::check_float(values, kWhere, "values");
    detail::check_like(token_level_rewards, "token_level_rewards", values, "values", kWhere);
    const auto& r = token_level_rewards;
    auto v = values.to(r.scalar_type());
    auto m = detail::mask_as(response_mask, r);
    const int64_t t_len = r.size(1);
    auto next_values = torch::zeros({r.size(0)}, r.options());
    auto last_gae = torch::zeros({r.size(0)}, r.options());
    auto adv = torch::zeros_like(r);
    for (int64_t t = t_len - 1; t >= 0; --t) {
        auto r_t = r.select(1, t);
        auto v_t = v.select(1, t);
        auto m_t = m.select(1, t);
        auto delta = r_t + gamma * next_values - v_t;
        auto gae_t = delta + gamma * lam * last_gae;
        next_values = v_t * m_t + (1.0 - m_t) * next_values;
        last_gae = gae_t * m_t + (1.0 - m_t) * last_gae;
        adv.select(1, t).copy_(last_gae);
    }
    auto returns = (adv + v) * m;
    auto advantages = masked_whiten(adv, response_mask) * m;
    return {advantages, returns};
}

AdvantageOutput compute_reinforce_plus_plus(const torch::Tensor& token_level_rewards,
                                            const torch::Tensor& response_mask, double gamma) {
    torch::NoGradGuard no_grad;
    detail::outcome_scores(token_level_rewards, response_mask, "compute_reinforce_plus_plus");
    const auto& r = token_level_rewards;
    auto m = detail::mask_as(response_mask, r);
    auto running = torch::zeros({r.size(0)}, r.options());
    auto returns = torch::zeros_like(r);
    for (int64_t t = r.size(1) - 1; t >= 0; --t) {
        auto m_t = m.select(1, t);
        auto g = r.select(1, t) + gamma * running;
        returns.select(1, t).copy_(g * m_t);
        running = g * m_t + running * (1.0 - m_t);
    }
    auto advantages = masked_whiten(returns, response_mask) * m;
    return {advantages, returns};
}

AdvantageOutput compute_reinforce_plus_plus_baseline(const torch::Tensor& token_level_rewards,
                                                     const torch::Tensor& response_mask, const torch::Tensor& index) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "compute_reinforce_plus_plus_baseline";
    auto s = detail::outcome_scores(token_level_rewards, response_mask, kWhere);
    auto st = detail::group_stats(s, index, kWhere);
    auto centred = (st.scores - st.mean.index_select(0, st.index.ids)).to(s.options());
    auto m = detail::mask_as(response_mask, token_level_rewards);
    auto tiled = centred.unsqueeze(-1) * m;
    auto adv = masked_whiten(tiled, response_mask) * m;
    return {adv, adv};
}

AdvantageOutput compute_remax(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                              const torch::Tensor& reward_baselines) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "compute_remax";
    detail::outcome_scores(token_level_rewards, response_mask, kWhere);
    detail::check_float(reward_baselines, kWhere, "reward_baselines");
    RLPT_CHECK(reward_baselines.dim() == 1 && reward_baselines.size(0) == token_level_rewards.size(0),
               "{}: reward_baselines must have shape [{}], got {}", kWhere, token_level_rewards.size(0),
               detail::shape_str(reward_baselines));
    detail::check_same_device(token_level_rewards, "token_level_rewards", reward_baselines, "reward_baselines", kWhere);
    auto m = detail::mask_as(response_mask, token_level_rewards);
    auto returns = (token_level_rewards * m).flip({-1}).cumsum(-1).flip({-1});
    auto advantages = returns - reward_baselines.to(token_level_rewards.scalar_type()).unsqueeze(-1) * m;
    return {advantages, returns};
}

}  // namespace rlpt::algo
