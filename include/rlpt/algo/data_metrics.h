#pragma once
// Per-step data metrics under verl's names (metric_utils.compute_data_metrics, ALGORITHMS §3).

#include <torch/torch.h>

#include <map>
#include <string>

namespace rlpt::algo {

struct DataMetricsInputs {
    torch::Tensor token_level_scores;       // B×T floating
    torch::Tensor token_level_rewards;      // B×T floating
    torch::Tensor advantages;               // B×T floating
    torch::Tensor returns;                  // B×T floating
    torch::Tensor values;                   // B×T floating, optional: critic/values/* and
                                            // critic/vf_explained_var only when given
    torch::Tensor response_mask;            // B×T: tokens whose adv/returns/values are summarised
    torch::Tensor response_attention_mask;  // B×T, optional: response part of the attention mask,
                                            // which defines response lengths (defaults to
                                            // response_mask; they differ for multi-turn)
    torch::Tensor prompt_mask;              // B×P: prompt part of the attention mask
    // Length limits the clip ratios compare against; -1: the tensor widths T and P (verl pads
    // every batch to the configured limits, so there they coincide; rlpt pads prompts only to
    // the batch's longest, where P would count the longest prompts as "clipped").
    int64_t max_response_length = -1;
    int64_t max_prompt_length = -1;
};

// Keys (T = response width = max_response_length, P = prompt width):
//   critic/score/{mean,max,min}      sequence sums of token_level_scores, non-aborted rows
//   critic/rewards/{mean,max,min}    sequence sums of token_level_rewards, non-aborted rows
//   critic/advantages/{mean,max,min}, critic/returns/{mean,max,min}   over masked tokens
//   critic/values/{mean,max,min}, critic/vf_explained_var = 1 - Var(R-V)/(Var(R) + 1e-5)
//                                    (unbiased variances over masked tokens; NaN with 1 token)
//   response_length/{mean,max,min,clip_ratio}          all rows; clip_ratio = share with len >= T
//                                    (T, P below: max_response_length / max_prompt_length when set)
//   response_length_non_aborted/{mean,max,min,clip_ratio}
//   response/aborted_ratio           share of rows with response length 0
//   prompt_length/{mean,max,min,clip_ratio}            clip_ratio = share with len >= P
// A statistic over an empty selection (every row aborted, or no response token masked in) is NaN,
// as in verl: the caller warns and the run goes on.
std::map<std::string, double> compute_data_metrics(const DataMetricsInputs& in);

}  // namespace rlpt::algo
