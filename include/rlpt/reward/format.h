#pragma once
// Format rewards and combinations of scorers. Torch-free (the regex engine is ICU, whose
// headers stay in the .cpp).
//
//   FormatScorer       a regular expression check on the response (e.g. "does it end with
//                      '#### <number>'", "is there a \boxed{}"), `score` when it matches,
//                      `mismatch_score` otherwise.
//   WeightedSumScorer  sum_i weight_i * score_i, e.g. correctness + 0.1 * format.

#include <memory>
#include <string>
#include <vector>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

enum class FormatMatch {
    kSearch,  // the pattern matches somewhere in the response
    kFull,    // the pattern matches the whole response
};

// "search" | "full"; anything else throws ConfigError.
FormatMatch parse_format_match(const std::string& s);

struct FormatScorerOptions {
    // ICU regular expression syntax (Perl-like, Unicode aware: \p{L}, \d matches any
    // Unicode digit; use [0-9] for ASCII digits). '.' does not match newlines unless the
    // pattern starts with (?s).
    std::string pattern;
    FormatMatch match = FormatMatch::kSearch;
    double score = 1.0;
    double mismatch_score = 0.0;
};

// Construction compiles the pattern and throws ConfigError naming it when it is invalid.
// A response on which the regex engine gives up (its step or backtracking limits, e.g. a
// catastrophic pattern on a long response) scores mismatch_score with extra
// {"format_regex_error": 1}; it never throws on model output.
// result: score, extra {"format_ok": 1|0}; no acc, no pred.
class FormatScorer final : public Scorer {
  public:
    explicit FormatScorer(FormatScorerOptions options);
    ~FormatScorer() override;
    FormatScorer(const FormatScorer&) = delete;
    FormatScorer& operator=(const FormatScorer&) = delete;

    std::string name() const override;
    ScoreResult score(const ScoreRequest& request) const override;

  private:
    struct Impl;
    FormatScorerOptions options_;
    std::unique_ptr<Impl> impl_;
};

struct WeightedScorer {
    double weight = 1.0;
    std::shared_ptr<const Scorer> scorer;
};

// score = sum of weight_i * part_i.score. acc and pred come from the first part that
// reports an acc (so put the correctness scorer first). extra holds every part's extra
// entries plus "part<i>_score" (unweighted) for each part i; parts' extra keys that clash
// keep the first part's value.
class WeightedSumScorer final : public Scorer {
  public:
    // Throws ConfigError when `parts` is empty or holds a null scorer.
    explicit WeightedSumScorer(std::vector<WeightedScorer> parts);
    std::string name() const override;
    ScoreResult score(const ScoreRequest& request) const override;

  private:
    std::vector<WeightedScorer> parts_;
};

}  // namespace rlpt::reward
