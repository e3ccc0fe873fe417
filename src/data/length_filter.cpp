#include "rlpt/data/length_filter.h"

#include "rlpt/core/error.h"

namespace rlpt::data {

std::string LengthFilterReport::summary() const {
    std::string s = fmt::format("prompt length filter (max {} tokens): kept {} of {}, dropped {}", max_length, kept,
                                total, filtered);
    if (longest_index >= 0) s += fmt::format("; longest {} tokens (index {})", longest, longest_index);
    for (std::size_t i = 0; i < example_indices.size(); ++i) {
        s += i == 0 ? "; dropped e.g. " : ", ";
        s += fmt::format("#{} ({} tokens)", example_indices[i], example_lengths[i]);
    }
    return s;
}

LengthFilterResult filter_by_prompt_length(std::vector<Example> examples,
                                           const std::function<int64_t(const std::string&)>& token_length,
                                           int64_t max_length, int max_report_examples) {
    RLPT_CHECK(max_length >= 1, "prompt length filter: max length must be >= 1, got {}", max_length);
    RLPT_CHECK(static_cast<bool>(token_length), "prompt length filter: no token length function");
    LengthFilterResult result;
    LengthFilterReport& report = result.report;
    report.total = static_cast<int64_t>(examples.size());
    report.max_length = max_length;
    for (Example& e : examples) {
        const int64_t n = token_length(e.prompt);
        RLPT_CHECK(n >= 0, "prompt length filter: token length function returned {} for example {}", n, e.index);
        if (report.longest_index < 0 || n > report.longest) {
            report.longest = n;
            report.longest_index = e.index;
        }
        if (n <= max_length) {
            result.kept.push_back(std::move(e));
            continue;
        }
        ++report.filtered;
        if (static_cast<int>(report.example_indices.size()) < max_report_examples) {
            report.example_indices.push_back(e.index);
            report.example_lengths.push_back(n);
        }
    }
    report.kept = static_cast<int64_t>(result.kept.size());
    RLPT_CHECK(report.kept > 0 || report.total == 0, "every prompt is longer than the limit: {}", report.summary());
    return result;
}

}  // namespace rlpt::data
