#include "rlpt/algo/data_metrics.h"

#include <cmath>

#include "algo/checks.h"

namespace rlpt::algo {

namespace {

// NaN for an empty selection (an all-aborted batch), as verl's _safe_mean_max_min.
void add_stats(std::map<std::string, double>& m, const std::string& prefix, const torch::Tensor& v) {
    const double nan = std::nan("");
    const bool empty = v.numel() == 0;
    m[prefix + "/mean"] = empty ? nan : v.mean().item<double>();
    m[prefix + "/max"] = empty ? nan : v.max().item<double>();
    m[prefix + "/min"] = empty ? nan : v.min().item<double>();
}

torch::Tensor as_f64(const torch::Tensor& t) { return t.detach().to(torch::kCPU, torch::kFloat64); }

}  // namespace

std::map<std::string, double> compute_data_metrics(const DataMetricsInputs& in) {
    torch::NoGradGuard no_grad;
    constexpr const char* kWhere = "compute_data_metrics";
    detail::check_float(in.token_level_scores, kWhere, "token_level_scores");
    detail::check_2d(in.token_level_scores, kWhere, "token_level_scores");
    const auto& ref = in.token_level_scores;
    detail::check_float(in.token_level_rewards, kWhere, "token_level_rewards");
    detail::check_like(ref, "token_level_scores", in.token_level_rewards, "token_level_rewards", kWhere);
    detail::check_float(in.advantages, kWhere, "advantages");
    detail::check_like(ref, "token_level_scores", in.advantages, "advantages", kWhere);
    detail::check_float(in.returns, kWhere, "returns");
    detail::check_like(ref, "token_level_scores", in.returns, "returns", kWhere);
    detail::check_like(ref, "token_level_scores", in.response_mask, "response_mask", kWhere);
    if (in.values.defined()) {
        detail::check_float(in.values, kWhere, "values");
        detail::check_like(ref, "token_level_scores", in.values, "values", kWhere);
    }
    if (in.response_attention_mask.defined())
        detail::check_like(ref, "token_level_scores", in.response_attention_mask, "response_attention_mask", kWhere);
    detail::check_2d(in.prompt_mask, kWhere, "prompt_mask");
    RLPT_CHECK(in.prompt_mask.size(0) == ref.size(0), "{}: prompt_mask has {} rows but the batch has {}", kWhere,
               in.prompt_mask.size(0), ref.size(0));

    const double max_response_length =
        static_cast<double>(in.max_response_length > 0 ? in.max_response_length : ref.size(1));
    const double max_prompt_length =
        static_cast<double>(in.max_prompt_length > 0 ? in.max_prompt_length : in.prompt_mask.size(1));
    auto resp_attn = in.response_attention_mask.defined() ? in.response_attention_mask : in.response_mask;
    auto response_length = as_f64(resp_attn.to(torch::kBool)).sum(-1);
    auto prompt_length = as_f64(in.prompt_mask.to(torch::kBool)).sum(-1);
    auto aborted = response_length == 0.0;
    auto non_aborted = ~aborted;
    auto valid = in.response_mask.to(torch::kCPU, torch::kBool);

    std::map<std::string, double> m;
    add_stats(m, "critic/score", as_f64(in.token_level_scores).sum(-1).masked_select(non_aborted));
    add_stats(m, "critic/rewards", as_f64(in.token_level_rewards).sum(-1).masked_select(non_aborted));
    add_stats(m, "critic/advantages", as_f64(in.advantages).masked_select(valid));
    auto valid_returns = as_f64(in.returns).masked_select(valid);
    add_stats(m, "critic/returns", valid_returns);
    if (in.values.defined()) {
        auto valid_values = as_f64(in.values).masked_select(valid);
        add_stats(m, "critic/values", valid_values);
        auto diff_var = (valid_returns - valid_values).var().item<double>();
        auto ret_var = valid_returns.var().item<double>();
        m["critic/vf_explained_var"] = valid_values.numel() ? 1.0 - diff_var / (ret_var + 1e-5) : std::nan("");
    }
    add_stats(m, "response_length", response_length);
    m["response_length/clip_ratio"] =
        (response_length >= max_response_length).to(torch::kFloat64).mean().item<double>();
    auto non_aborted_length = response_length.masked_select(non_aborted);
    add_stats(m, "response_length_non_aborted", non_aborted_length);
    m["response_length_non_aborted/clip_ratio"] =
        (non_aborted_length >= max_response_length).to(torch::kFloat64).mean().item<double>();
    m["response/aborted_ratio"] = aborted.to(torch::kFloat64).mean().item<double>();
    add_stats(m, "prompt_length", prompt_length);
    m["prompt_length/clip_ratio"] = (prompt_length >= max_prompt_length).to(torch::kFloat64).mean().item<double>();
    return m;
}

}  // namespace rlpt::algo
