#pragma once
// The DAPO math scorer, verl/utils/reward_score/math_dapo.py (ALGORITHMS §5): verl's default
// for the data_sources math_dapo, math, math_dapo_reasoning and aime* (add_builtin_scorers).
//
//   * only the last 300 characters (code points) of the response are read;
//   * Minerva extraction: the last match of (?i)Answer\s*:\s*([^\n]+), normalised with
//     math_dapo_normalize, compared with the normalised ground truth;
//   * when there is no such line, the last \boxed{...} (brace-matched) in the last 100
//     characters, compared with the ground truth exactly;
//   * score 1.0 when correct, -1.0 otherwise; acc 1/0; pred = the normalised (or boxed) answer,
//     "[INVALID]" when nothing was found.
// Torch-free.

#include <string>
#include <string_view>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

// verl's normalize_final_answer: the text after the last '=', its substitution and removal
// lists, $...$ / \text{} / \textbf{} / \overline{} / \boxed{} unwrapping, "\fracab" ->
// "\frac{a}{b}", "\sqrta" -> "\sqrt{a}", '$' dropped, commas dropped from a number, trimmed.
std::string math_dapo_normalize(std::string_view answer);

// {score, acc, pred} as above.
ScoreResult math_dapo_compute_score(std::string_view solution, std::string_view ground_truth);

class MathDapoScorer final : public Scorer {
  public:
    std::string name() const override { return "math_dapo"; }
    ScoreResult score(const ScoreRequest& request) const override;
};

}  // namespace rlpt::reward
