// compute_advantage: the estimator table, by verl's names.
#include <fmt/format.h>

#include "algo/checks.h"
#include "rlpt/algo/advantage.h"

namespace rlpt::algo {

namespace {

using EstimatorFn = AdvantageOutput (*)(const AdvantageInputs&, const AdvantageParams&);

struct Estimator {
    const char* name;
    EstimatorFn fn;
    EstimatorNeeds needs;
};

void require(const torch::Tensor& t, const char* estimator, const char* field) {
    RLPT_CHECK(t.defined(), "compute_advantage('{}'): input '{}' is required by this estimator but was not given",
               estimator, field);
}

AdvantageOutput run_gae(const AdvantageInputs& in, const AdvantageParams& p) {
    require(in.values, "gae", "values");
    return compute_gae(in.token_level_rewards, in.values, in.response_mask, p.gamma, p.lam);
}
AdvantageOutput run_grpo(const AdvantageInputs& in, const AdvantageParams& p) {
    require(in.index, "grpo", "index");
    return compute_grpo(in.token_level_rewards, in.response_mask, in.index, p.epsilon, p.norm_adv_by_std_in_grpo);
}
AdvantageOutput run_grpo_passk(const AdvantageInputs& in, const AdvantageParams& p) {
    require(in.index, "grpo_passk", "index");
    return compute_grpo_passk(in.token_level_rewards, in.response_mask, in.index, p.epsilon, p.norm_adv_by_std_in_grpo);
}
AdvantageOutput run_rloo(const AdvantageInputs& in, const AdvantageParams&) {
    require(in.index, "rloo", "index");
    return compute_rloo(in.token_level_rewards, in.response_mask, in.index);
}
AdvantageOutput run_opo(const AdvantageInputs& in, const AdvantageParams&) {
    require(in.index, "opo", "index");
    return compute_opo(in.token_level_rewards, in.response_mask, in.index);
}
AdvantageOutput run_gpg(const AdvantageInputs& in, const AdvantageParams& p) {
    require(in.index, "gpg", "index");
    return compute_gpg(in.token_level_rewards, in.response_mask, in.index, p.gpg_f_norm);
}
AdvantageOutput run_rpp(const AdvantageInputs& in, const AdvantageParams& p) {
    return compute_reinforce_plus_plus(in.token_level_rewards, in.response_mask, p.gamma);
}
AdvantageOutput run_rpp_baseline(const AdvantageInputs& in, const AdvantageParams&) {
    require(in.index, "reinforce_plus_plus_baseline", "index");
    return compute_reinforce_plus_plus_baseline(in.token_level_rewards, in.response_mask, in.index);
}
AdvantageOutput run_remax(const AdvantageInputs& in, const AdvantageParams&) {
    require(in.reward_baselines, "remax", "reward_baselines");
    return compute_remax(in.token_level_rewards, in.response_mask, in.reward_baselines);
}
AdvantageOutput run_gdpo(const AdvantageInputs& in, const AdvantageParams& p) {
    require(in.index, "gdpo", "index");
    require(in.reward_components, "gdpo", "reward_components");
    auto out = compute_gdpo(in.reward_components, in.response_mask, in.index, p.gdpo_weights, p.epsilon,
                            p.norm_adv_by_std_in_grpo);
    auto dt = in.token_level_rewards.scalar_type();
    return {out.advantages.to(dt), out.returns.to(dt)};
}
template <AdvantageOutput (*Fn)(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                const torch::Tensor&, bool)>
AdvantageOutput run_otb(const AdvantageInputs& in, const AdvantageParams& p) {
    require(in.index, "optimal_token_baseline", "index");
    require(in.old_log_probs, "optimal_token_baseline", "old_log_probs");
    require(in.sum_pi_squared, "optimal_token_baseline", "sum_pi_squared");
    return Fn(in.token_level_rewards, in.response_mask, in.index, in.old_log_probs, in.sum_pi_squared,
              p.otb_handle_zero_tail);
}

constexpr EstimatorNeeds kNothing{};
constexpr EstimatorNeeds kValues{true, false, false, false};
constexpr EstimatorNeeds kGreedyBaselines{false, true, false, false};
constexpr EstimatorNeeds kSumPiSquared{false, false, true, false};
constexpr EstimatorNeeds kRewardComponents{false, false, false, true};

constexpr Estimator kEstimators[] = {
    {"gae", run_gae, kValues},
    {"grpo", run_grpo, kNothing},
    {"grpo_vectorized", run_grpo, kNothing},
    {"grpo_passk", run_grpo_passk, kNothing},
    {"rloo", run_rloo, kNothing},
    {"rloo_vectorized", run_rloo, kNothing},
    {"opo", run_opo, kNothing},
    {"gpg", run_gpg, kNothing},
    {"reinforce_plus_plus", run_rpp, kNothing},
    {"reinforce_plus_plus_baseline", run_rpp_baseline, kNothing},
    {"remax", run_remax, kGreedyBaselines},
    {"gdpo", run_gdpo, kRewardComponents},
    {"optimal_token_baseline", run_otb<compute_optimal_token_baseline>, kSumPiSquared},
    {"tir_optimal_token_baseline", run_otb<compute_tir_optimal_token_baseline>, kSumPiSquared},
};

const Estimator& find_estimator(const std::string& name) {
    for (const auto& e : kEstimators)
        if (name == e.name) return e;
    RLPT_THROW(ValueError, "unknown advantage estimator '{}'; valid names: {}", name,
               fmt::join(advantage_estimator_names(), ", "));
}

}  // namespace

std::vector<std::string> advantage_estimator_names() {
    std::vector<std::string> names;
    for (const auto& e : kEstimators) names.emplace_back(e.name);
    return names;
}

EstimatorNeeds advantage_estimator_needs(const std::string& name) { return find_estimator(name).needs; }

bool advantage_estimator_needs_values(const std::string& name) { return find_estimator(name).needs.values; }

AdvantageOutput compute_advantage(const std::string& name, const AdvantageInputs& inputs,
                                  const AdvantageParams& params) {
    const auto& e = find_estimator(name);
    require(inputs.token_level_rewards, e.name, "token_level_rewards");
    require(inputs.response_mask, e.name, "response_mask");
    return e.fn(inputs, params);
}

}  // namespace rlpt::algo
