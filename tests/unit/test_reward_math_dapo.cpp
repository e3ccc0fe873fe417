// The DAPO math scorer (verl math_dapo.py, ALGORITHMS §5). Expected values worked by hand
// from the Python's steps (noted per case).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "rlpt/reward/math_dapo.h"
#include "rlpt/reward/registry.h"

using namespace rlpt::reward;

TEST(RewardMathDapo, NormalizeFinalAnswer) {
    EXPECT_EQ(math_dapo_normalize(" 42 "), "42");
    // after the last '=', spaces dropped, "dollars" removed, digit commas dropped
    EXPECT_EQ(math_dapo_normalize("x = 1,000 dollars"), "1000");
    EXPECT_EQ(math_dapo_normalize("1,2"), "12");       // a number once the commas go (verl's quirk)
    EXPECT_EQ(math_dapo_normalize("(1,2)"), "(1,2)");  // not a number: commas stay
    EXPECT_EQ(math_dapo_normalize("$5$."), "5");       // $...$ kept, then '$' dropped
    EXPECT_EQ(math_dapo_normalize("\\text{(B)}"), "(B)");
    EXPECT_EQ(math_dapo_normalize("\\boxed{\\frac{3}{4}}"), "\\frac{3}{4}");  // greedy to the last '}'
    EXPECT_EQ(math_dapo_normalize("\\frac12"), "\\frac{1}{2}");
    EXPECT_EQ(math_dapo_normalize("\\frac123"), "\\frac{1}{2}3");
    EXPECT_EQ(math_dapo_normalize("\\sqrt2"), "\\sqrt{2}");
    EXPECT_EQ(math_dapo_normalize("\\sqrt\xCF\x80"), "\\sqrt{\xCF\x80}");  // a code point, not a byte
    EXPECT_EQ(math_dapo_normalize("90^\\circ"), "90");
    EXPECT_EQ(math_dapo_normalize("an apple"), "apple");  // articles go: "an " and "a "
    EXPECT_EQ(math_dapo_normalize("[INVALID]"), "[INVALID]");
}

TEST(RewardMathDapo, MinervaAnswerLine) {
    auto r = math_dapo_compute_score("Let me think.\nAnswer: 42", "42");
    EXPECT_EQ(r.score, 1.0);
    EXPECT_EQ(r.acc, 1.0);
    EXPECT_EQ(r.pred, "42");
    EXPECT_EQ(math_dapo_compute_score("answer : \\frac12", "\\frac{1}{2}").score, 1.0);  // case-insensitive
    EXPECT_EQ(math_dapo_compute_score("Answer: 1\nANSWER: 2", "2").score, 1.0);          // the last line counts
    auto wrong = math_dapo_compute_score("Answer: 41", "42");
    EXPECT_EQ(wrong.score, -1.0);
    EXPECT_EQ(wrong.acc, 0.0);
    EXPECT_EQ(wrong.pred, "41");
    // An "Answer:" line wins over a box.
    EXPECT_EQ(math_dapo_compute_score("\\boxed{7}\nAnswer: 8", "7").score, -1.0);
}

TEST(RewardMathDapo, BoxFallbackIsExact) {
    auto r = math_dapo_compute_score("so the result is \\boxed{7}", "7");
    EXPECT_EQ(r.score, 1.0);
    EXPECT_EQ(r.pred, "7");
    auto e = math_dapo_compute_score("so the result is \\boxed{7}", "7.0");
    EXPECT_EQ(e.score, -1.0);
    EXPECT_EQ(e.pred, "7");
    // Only the last 100 characters are searched for the box.
    EXPECT_EQ(math_dapo_compute_score("\\boxed{7}" + std::string(100, ' '), "7").pred, "[INVALID]");
}

TEST(RewardMathDapo, NothingFoundAndTheLast300Characters) {
    auto r = math_dapo_compute_score("no answer here", "3");
    EXPECT_EQ(r.score, -1.0);
    EXPECT_EQ(r.pred, "[INVALID]");
    // The answer line falls outside the last 300 characters.
    EXPECT_EQ(math_dapo_compute_score("Answer: 3\n" + std::string(300, 'x'), "3").score, -1.0);
    EXPECT_EQ(math_dapo_compute_score(std::string(300, 'x') + "\nAnswer: 3", "3").score, 1.0);
}

TEST(RewardMathDapo, BuiltinDataSourcesAndSpec) {
    ScorerRegistry reg;
    add_builtin_scorers(reg);
    for (const char* ds : {"math_dapo", "math", "math_dapo_reasoning", "aime24", "aime_2025"})
        EXPECT_EQ(reg.get(ds).name(), "math_dapo") << ds;
    EXPECT_EQ(reg.get("lighteval/MATH").name(), "math");
    EXPECT_EQ(make_scorer(nlohmann::json{{"type", "math_dapo"}}, "s")->name(), "math_dapo");
}
