#pragma once
// MATH \boxed{} scorer, exactly verl/utils/reward_score/math_reward.py (the Hendrycks MATH
// normalisation from lm-evaluation-harness), ALGORITHMS §5.
//
// Where the Python raises (an `assert` in remove_boxed, an IndexError in fix_sqrt or
// fix_fracs, an `assert` in remove_right_units), these functions return std::nullopt and
// the callers take the same fallback the Python's `except` takes:
//   compute_score: any failure -> 0.0;  is_equiv: strip_string failure -> raw str1 == str2.

#include <optional>
#include <string>
#include <string_view>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

// The last "\boxed{...}" (brace-matched) or, when none, the last "\fbox{...}". When the
// string contains "\boxed " (with a space) the result is "\boxed " + the text after the
// last "\boxed " up to the next '$'. nullopt: no box, or no matching close brace.
std::optional<std::string> math_last_boxed_only_string(std::string_view s);

// "\boxed X" -> "X", "\boxed{X}" -> "X"; nullopt for anything else (e.g. "\fbox{X}").
std::optional<std::string> math_remove_boxed(std::string_view s);

// The full strip_string normalisation: drop newlines, "\!", map "\\" to "\", tfrac/dfrac
// to frac, drop \left/\right, degrees, "\$", right units ("\text{ ..."), "\%"; " ." ->
// " 0.", "{." -> "{0.", leading "." -> "0."; drop a "k=" prefix of <= 2 characters; fix
// "\sqrt3" -> "\sqrt{3}"; drop spaces; fix "\frac12" -> "\frac{1}{2}"; "0.5" ->
// "\frac{1}{2}"; "a/b" (canonical integers) -> "\frac{a}{b}".
// nullopt where the Python raises.
std::optional<std::string> math_strip_string(std::string_view s);

// strip_string(a) == strip_string(b); when either strip fails, a == b.
bool math_is_equiv(std::string_view a, std::string_view b);

// 1.0 if the last boxed answer of `solution` is equivalent to `ground_truth`, else 0.0.
double math_compute_score(std::string_view solution, std::string_view ground_truth);

// Scorer wrapper: score as math_compute_score (1/0), acc = score, pred = the unboxed answer.
class MathScorer final : public Scorer {
  public:
    std::string name() const override { return "math"; }
    ScoreResult score(const ScoreRequest& request) const override;
};

}  // namespace rlpt::reward
