// MATH \boxed{} scorer against verl/utils/reward_score/math_reward.py. Expected values
// were checked by running verl's Python on the same strings.
#include <gtest/gtest.h>

#include "rlpt/reward/math.h"

using namespace rlpt::reward;

TEST(RewardMath, LastBoxedOnlyString) {
    EXPECT_EQ(math_last_boxed_only_string("so \\boxed{1} and \\boxed{\\frac{1}{\\sqrt{2}}} done"),
              "\\boxed{\\frac{1}{\\sqrt{2}}}");
    EXPECT_EQ(math_last_boxed_only_string("\\fbox{5}"), "\\fbox{5}");
    EXPECT_EQ(math_last_boxed_only_string("\\boxed{5"), std::nullopt);  // unclosed
    EXPECT_EQ(math_last_boxed_only_string("no box"), std::nullopt);
    // "\boxed " (with a space) wins over any brace form and stops at '$'.
    EXPECT_EQ(math_last_boxed_only_string("\\boxed 5$ more"), "\\boxed 5");
    EXPECT_EQ(math_last_boxed_only_string("\\boxed 3$ and \\boxed{4}"), "\\boxed 3");
}

TEST(RewardMath, RemoveBoxed) {
    EXPECT_EQ(math_remove_boxed("\\boxed{\\frac{1}{2}}"), "\\frac{1}{2}");
    EXPECT_EQ(math_remove_boxed("\\boxed 5"), "5");
    EXPECT_EQ(math_remove_boxed("\\fbox{5}"), std::nullopt);  // verl asserts -> 0
    EXPECT_EQ(math_remove_boxed("\\boxed{5"), std::nullopt);
    EXPECT_EQ(math_remove_boxed("x \\boxed 5"), std::nullopt);
}

TEST(RewardMath, StripStringSteps) {
    EXPECT_EQ(math_strip_string("0.5"), "\\frac{1}{2}");
    EXPECT_EQ(math_strip_string(".5"), "\\frac{1}{2}");   // leading 0 added first
    EXPECT_EQ(math_strip_string(" .5"), "\\frac{1}{2}");  // " ." -> " 0."
    EXPECT_EQ(math_strip_string("{.5}"), "{0.5}");
    EXPECT_EQ(math_strip_string("1/2"), "\\frac{1}{2}");
    EXPECT_EQ(math_strip_string("-1/2"), "\\frac{-1}{2}");
    EXPECT_EQ(math_strip_string("01/2"), "01/2");  // not a canonical integer
    EXPECT_EQ(math_strip_string("-0/2"), "-0/2");
    EXPECT_EQ(math_strip_string("\\frac1"), "\\frac1");  // too short to fix: unchanged
    EXPECT_EQ(math_strip_string("\\frac1{2}"), "\\frac{1}{2}");
    EXPECT_EQ(math_strip_string("\\frac{1}2"), "\\frac{1}2");  // only \frac12 and \frac1{..} forms
    EXPECT_EQ(math_strip_string("\\left(1\\right)"), "(1)");
    EXPECT_EQ(math_strip_string("x=y=z"), "x=y=z");
    EXPECT_EQ(math_strip_string("=3"), "3");
    EXPECT_EQ(math_strip_string(""), "");
    // Code points, not bytes: a 2-character prefix before '=' is dropped, 3 is kept.
    EXPECT_EQ(math_strip_string("\xC3\xA9\xC3\xA9=3"), "3");
    EXPECT_EQ(math_strip_string("\xC3\xA9\xC3\xA9\xC3\xA9=3"), "\xC3\xA9\xC3\xA9\xC3\xA9=3");
    EXPECT_EQ(math_strip_string("\\sqrt\xCF\x80"), "\\sqrt{\xCF\x80}");  // \sqrtπ
    EXPECT_EQ(math_strip_string("\\frac\xCF\x80"
                                "2"),
              "\\frac{\xCF\x80}{2}");  // \fracπ2
    // Where the Python raises.
    EXPECT_EQ(math_strip_string("\\frac"), std::nullopt);
    EXPECT_EQ(math_strip_string("\\sqrt"), std::nullopt);
    EXPECT_EQ(math_strip_string("a \\text{ b} \\text{ c}"), std::nullopt);
}

TEST(RewardMath, ComputeScoreEquivalences) {
    // verl's documented edge cases.
    EXPECT_EQ(math_compute_score("\\boxed{0.5}", "\\frac{1}{2}"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\frac{1}{2}}", "0.5"), 1.0);
    EXPECT_EQ(math_compute_score("\\fbox{5}", "5"), 0.0);
    // Normalisation steps.
    EXPECT_EQ(math_compute_score("\\boxed{\\frac12}", "\\frac{1}{2}"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\dfrac{3}{4}}", "3/4"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\tfrac{1}{3}}", "1/3"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{10\\%}", "10"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{90^\\circ}", "90"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{x = 5}", "5"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{k=3}", "3"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{abc=3}", "3"), 0.0);
    EXPECT_EQ(math_compute_score("\\boxed{5 \\text{ cm}}", "5"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{.5}", "\\frac{1}{2}"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\sqrt3}", "\\sqrt{3}"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\left( 1, 2 \\right)}", "(1,2)"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\$5}", "5"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{-3/4}", "\\frac{-3}{4}"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{03/4}", "\\frac{3}{4}"), 0.0);
    EXPECT_EQ(math_compute_score("\\boxed{1\\\\2}", "1\\2"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\!\\!5\\\\%}", "5"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed 5$ more", "5"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed 3$ and \\boxed{4}", "4"), 0.0);
    EXPECT_EQ(math_compute_score("\\boxed 3$ and \\boxed{4}", "3"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{5}", "6"), 0.0);
    EXPECT_EQ(math_compute_score("\\boxed{5", "5"), 0.0);
    EXPECT_EQ(math_compute_score("no box 5", "5"), 0.0);
}

TEST(RewardMath, FailedNormalisationFallsBackToRawEquality) {
    EXPECT_EQ(math_compute_score("\\boxed{5 \\text{ a} \\text{ b}}", "5 \\text{ a} \\text{ b}"), 1.0);
    EXPECT_EQ(math_compute_score("\\boxed{5 \\text{ a} \\text{ b}}", "5"), 0.0);
    EXPECT_EQ(math_compute_score("\\boxed{\\frac}", "\\frac"), 1.0);
    EXPECT_TRUE(math_is_equiv("\\sqrt", "\\sqrt"));
    EXPECT_FALSE(math_is_equiv("\\sqrt", "\\sqrt{}"));
}

TEST(RewardMath, ScorerReportsPredAndAcc) {
    MathScorer scorer;
    ScoreRequest req;
    req.solution = "thus \\boxed{\\dfrac{1}{2}}.";
    req.ground_truth = "0.5";
    ScoreResult r = scorer.score(req);
    EXPECT_EQ(r.score, 1.0);
    EXPECT_EQ(r.acc, 1.0);
    EXPECT_EQ(r.pred, "\\dfrac{1}{2}");
    req.solution = "\\fbox{0.5}";
    r = scorer.score(req);
    EXPECT_EQ(r.score, 0.0);
    EXPECT_EQ(r.acc, 0.0);
    EXPECT_EQ(r.pred, "");
}
