#pragma once
// GSM8K scorer, exactly verl/utils/reward_score/gsm8k.py (ALGORITHMS §5):
//  * only the last 300 characters (code points) of the solution are searched;
//  * strict: the last match of `#### (-?[0-9.,]+)`, commas removed; no match -> none;
//  * flexible: the last match of `(-?[0-9.,]+)` that is not "" or "." (commas kept);
//    when every match is "." the first match is returned, as verl's loop does;
//  * score: none -> 0; answer == ground_truth (exact string) -> `score`; else `format_score`.
// So "3.50" != "3.5", "7." != "7" and "#### $18" scores 0.

#include <optional>
#include <string>
#include <string_view>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

enum class Gsm8kMethod { kStrict, kFlexible };

// "strict" | "flexible"; anything else throws ConfigError.
Gsm8kMethod parse_gsm8k_method(const std::string& s);

inline constexpr std::size_t kGsm8kClipChars = 300;

std::optional<std::string> gsm8k_extract_solution(std::string_view solution, Gsm8kMethod method = Gsm8kMethod::kStrict);

double gsm8k_compute_score(std::string_view solution, std::string_view ground_truth,
                           Gsm8kMethod method = Gsm8kMethod::kStrict, double format_score = 0.0, double score = 1.0);

// Scorer wrapper: score as gsm8k_compute_score; acc = 1 when the extracted answer equals
// the ground truth; pred = the extracted answer ("" when none).
class Gsm8kScorer final : public Scorer {
  public:
    explicit Gsm8kScorer(Gsm8kMethod method = Gsm8kMethod::kStrict, double format_score = 0.0, double score = 1.0);
    std::string name() const override;
    ScoreResult score(const ScoreRequest& request) const override;

  private:
    Gsm8kMethod method_;
    double format_score_;
    double score_;
};

}  // namespace rlpt::reward
