#include "rlpt/algo/dapo.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "rlpt/core/error.h"

namespace rlpt::algo {

namespace {

void check_buffer(const OverlongBuffer& cfg) {
    RLPT_CHECK(cfg.buffer_len > 0, "overlong buffer: len must be > 0, got {}", cfg.buffer_len);
    RLPT_CHECK(cfg.max_resp_len >= cfg.buffer_len, "overlong buffer: max_resp_len ({}) must be >= the buffer len ({})",
               cfg.max_resp_len, cfg.buffer_len);
    RLPT_CHECK(cfg.penalty_factor >= 0.0, "overlong buffer: penalty_factor must be >= 0, got {}", cfg.penalty_factor);
}

template <typename Label>
GroupFilterResult filter_impl(const std::vector<double>& values, const std::vector<Label>& uids, bool keep_singletons) {
    RLPT_CHECK(values.size() == uids.size(), "filter_groups_by_metric: {} metric values but {} uids", values.size(),
               uids.size());
    struct Group {
        int64_t size = 0;
        bool varied = false;
        double first = 0.0;
    };
    std::unordered_map<Label, size_t> id_of;
    std::vector<Group> groups;
    std::vector<size_t> row_group(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
        auto [it, inserted] = id_of.emplace(uids[i], groups.size());
        if (inserted) groups.push_back(Group{0, std::isnan(values[i]), values[i]});
        auto& g = groups[it->second];
        if (g.size > 0 && !(values[i] == g.first)) g.varied = true;
        ++g.size;
        row_group[i] = it->second;
    }
    GroupFilterResult out;
    out.num_groups = static_cast<int64_t>(groups.size());
    std::vector<char> keep(groups.size());
    for (size_t g = 0; g < groups.size(); ++g) {
        keep[g] = groups[g].size == 1 ? keep_singletons : groups[g].varied;
        out.num_kept_groups += keep[g] ? 1 : 0;
    }
    for (size_t i = 0; i < values.size(); ++i)
        if (keep[row_group[i]]) out.kept_rows.push_back(static_cast<int64_t>(i));
    return out;
}

}  // namespace

double overlong_penalty(int64_t response_length, const OverlongBuffer& cfg) {
    check_buffer(cfg);
    RLPT_CHECK(response_length >= 0, "overlong_penalty: response length must be >= 0, got {}", response_length);
    const int64_t expected = cfg.max_resp_len - cfg.buffer_len;
    const double exceed = static_cast<double>(response_length - expected);
    if (exceed <= 0.0) return 0.0;  // not -0.0
    return std::min(-exceed / static_cast<double>(cfg.buffer_len) * cfg.penalty_factor, 0.0);
}

std::vector<double> overlong_penalties(const std::vector<int64_t>& response_lengths, const OverlongBuffer& cfg) {
    std::vector<double> out;
    out.reserve(response_lengths.size());
    for (auto l : response_lengths) out.push_back(overlong_penalty(l, cfg));
    return out;
}

GroupFilterResult filter_groups_by_metric(const std::vector<double>& metric_values, const std::vector<int64_t>& uids,
                                          bool keep_singletons) {
    return filter_impl(metric_values, uids, keep_singletons);
}

GroupFilterResult filter_groups_by_metric(const std::vector<double>& metric_values,
                                          const std::vector<std::string>& uids, bool keep_singletons) {
    return filter_impl(metric_values, uids, keep_singletons);
}

}  // namespace rlpt::algo
