#pragma once
// Reward scoring: the result type, one scoring request, and the Scorer interface every
// rule-based and user scorer implements. Torch-free.
//
// A scorer turns one decoded response (the "solution", special tokens already removed)
// plus the sample's ground truth into a scalar reward. The trainer places that scalar on
// the last valid response token (verl: token_level_scores[i, valid_len - 1]).
//
// Text is UTF-8 throughout. Where verl's Python counts characters (e.g. GSM8K's "last 300
// characters"), rlpt counts Unicode code points, so results match verl on any valid UTF-8.

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlpt::reward {

struct ScoreResult {
    double score = 0.0;                   // the reward
    std::optional<double> acc;            // 1.0 / 0.0 correctness when the scorer knows it
    std::string pred;                     // the answer the scorer extracted ("" when none)
    std::map<std::string, double> extra;  // scorer-specific numbers, logged as metrics
};

// One sample to score. Views must outlive the call. `extra_info` is the dataset's
// pass-through JSON for this sample (Example::extra) or nullptr when there is none.
struct ScoreRequest {
    std::string_view data_source;
    std::string_view solution;
    std::string_view ground_truth;
    const nlohmann::json* extra_info = nullptr;
    int64_t index = -1;  // sample index in the batch (error messages, user scorers)
};

// A scorer is immutable after construction; score() is const and safe to call from
// several threads at once. Bad model output never throws (it scores low); a throw means
// bad data or configuration (e.g. a ground truth that is not a number for a numeric
// scorer) or a failing user scorer.
class Scorer {
  public:
    virtual ~Scorer() = default;
    // Short description for logs and error messages: "gsm8k(strict)", "math", "user(x.so)".
    virtual std::string name() const = 0;
    virtual ScoreResult score(const ScoreRequest& request) const = 0;
    // True for scorers with a per-call cost (a subprocess round trip): score_batch() then hands
    // them all their requests of a batch at once through score_many().
    virtual bool scores_batches() const { return false; }
    // Scores several requests, results in order. The default calls score() for each.
    virtual std::vector<ScoreResult> score_many(const std::vector<ScoreRequest>& requests) const {
        std::vector<ScoreResult> out;
        out.reserve(requests.size());
        for (const auto& r : requests) out.push_back(score(r));
        return out;
    }
};

}  // namespace rlpt::reward
