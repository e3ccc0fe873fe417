#pragma once
// DAPO pieces (Yu et al. 2025) as in verl's DAPO reward manager and trainer. Torch-free.
// Clip-higher needs nothing here: set PolicyLossConfig::clip_ratio_high above clip_ratio_low.

#include <cstdint>
#include <string>
#include <vector>

namespace rlpt::algo {

// Overlong reward shaping (reward_model.reward_kwargs.overlong_buffer_cfg).
struct OverlongBuffer {
    int64_t max_resp_len = 0;     // L: data.max_response_length
    int64_t buffer_len = 0;       // L_b: overlong_buffer.len, 0 < L_b <= L
    double penalty_factor = 1.0;  // f: overlong_buffer.penalty_factor, >= 0
};

// Added to the sequence score: with expected = L - L_b and exceed = len - expected,
// penalty = min(-exceed / L_b · f, 0) (0 for responses not longer than `expected`, -f at len = L).
// response_length is the number of valid response tokens. ValueError on an invalid buffer or a
// negative length.
double overlong_penalty(int64_t response_length, const OverlongBuffer& cfg);
std::vector<double> overlong_penalties(const std::vector<int64_t>& response_lengths, const OverlongBuffer& cfg);

// Dynamic sampling (algorithm.filter_groups): keep the groups whose metric values (e.g. the
// sequence score or acc of each sample) are not all equal.
struct GroupFilterResult {
    std::vector<int64_t> kept_rows;  // row indices to keep, ascending
    int64_t num_groups = 0;
    int64_t num_kept_groups = 0;
};
// metric_values[i] and uids[i] describe row i. Equality is exact (verl tests np.std > 0, which can
// keep a group of equal floats whose mean rounds); a NaN value counts as different from
// everything, so such a group is kept and the NaN stays visible downstream.
// Groups of one: kept when keep_singletons (verl's DAPO trainer keeps them: a lone sample cannot be
// judged), dropped otherwise.
GroupFilterResult filter_groups_by_metric(const std::vector<double>& metric_values, const std::vector<int64_t>& uids,
                                          bool keep_singletons = true);
GroupFilterResult filter_groups_by_metric(const std::vector<double>& metric_values,
                                          const std::vector<std::string>& uids, bool keep_singletons = true);

}  // namespace rlpt::algo
