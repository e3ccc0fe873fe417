#pragma once
// Dropping prompts longer than the rollout's prompt budget (verl: filter_overlong_prompts),
// with a report of what was dropped. Torch-free: the token count comes from a callback
// (e.g. the tokenizer's encode(prompt).size(), chat template applied if the run uses one).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "rlpt/data/example.h"

namespace rlpt::data {

struct LengthFilterReport {
    int64_t total = 0;
    int64_t kept = 0;
    int64_t filtered = 0;
    int64_t max_length = 0;      // the limit applied
    int64_t longest = 0;         // longest prompt seen, in tokens (kept or not)
    int64_t longest_index = -1;  // its Example::index
    // The first few filtered prompts: Example::index and token length, in dataset order.
    std::vector<int64_t> example_indices;
    std::vector<int64_t> example_lengths;

    // One line for the log, e.g. "prompt length filter (max 512 tokens): kept 7460 of 7473,
    // dropped 13; longest 601 tokens (index 4215); dropped e.g. #17 (530 tokens), ...".
    std::string summary() const;
};

struct LengthFilterResult {
    std::vector<Example> kept;  // in the original order, Example::index unchanged
    LengthFilterReport report;
};

// Keeps the examples whose token_length(prompt) <= max_length. Throws ValueError when
// max_length < 1, when token_length returns a negative number (naming the example), or
// when every example is filtered (the message carries the summary).
LengthFilterResult filter_by_prompt_length(std::vector<Example> examples,
                                           const std::function<int64_t(const std::string&)>& token_length,
                                           int64_t max_length, int max_report_examples = 5);

}  // namespace rlpt::data
