// GSM8K scorer against verl/utils/reward_score/gsm8k.py. Expected values were checked by
// running verl's Python on the same strings.
#include <gtest/gtest.h>

#include <string>

#include "rlpt/core/error.h"
#include "rlpt/reward/gsm8k.h"

using namespace rlpt::reward;

namespace {

std::string repeat(const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
}

}  // namespace

TEST(RewardGsm8k, StrictTakesLastHashAnswerWithCommasRemoved) {
    EXPECT_EQ(gsm8k_extract_solution("The answer is #### 72"), "72");
    EXPECT_EQ(gsm8k_extract_solution("#### 1,234"), "1234");
    EXPECT_EQ(gsm8k_extract_solution("#### 5 then #### 6"), "6");
    EXPECT_EQ(gsm8k_extract_solution("#### -5"), "-5");
    EXPECT_EQ(gsm8k_extract_solution("####18"), std::nullopt);    // needs "#### " with a space
    EXPECT_EQ(gsm8k_extract_solution("#### $18"), std::nullopt);  // '$' cannot match
    EXPECT_EQ(gsm8k_extract_solution("no answer"), std::nullopt);
}

TEST(RewardGsm8k, ScoreIsExactStringComparison) {
    EXPECT_EQ(gsm8k_compute_score("The answer is #### 72", "72"), 1.0);
    EXPECT_EQ(gsm8k_compute_score("#### 1,234", "1234"), 1.0);
    // verl's documented edge cases.
    EXPECT_EQ(gsm8k_compute_score("#### 3.50", "3.5"), 0.0);
    EXPECT_EQ(gsm8k_compute_score("#### 7.", "7"), 0.0);
    EXPECT_EQ(gsm8k_compute_score("#### $18", "18"), 0.0);
    // format_score is given for a well-formed wrong answer, never for a missing one.
    EXPECT_EQ(gsm8k_compute_score("#### 3.50", "3.5", Gsm8kMethod::kStrict, 0.1, 1.0), 0.1);
    EXPECT_EQ(gsm8k_compute_score("#### 7.", "7", Gsm8kMethod::kStrict, 0.1, 1.0), 0.1);
    EXPECT_EQ(gsm8k_compute_score("#### $18", "18", Gsm8kMethod::kStrict, 0.1, 1.0), 0.0);
    EXPECT_EQ(gsm8k_compute_score("#### 5 then #### 6", "5", Gsm8kMethod::kStrict, 0.1, 1.0), 0.1);
    EXPECT_EQ(gsm8k_compute_score("#### 6", "6", Gsm8kMethod::kStrict, 0.0, 2.5), 2.5);
}

TEST(RewardGsm8k, OnlyTheLast300CharactersAreSearched) {
    // "#### 42" is 7 characters: 7 + 293 = 300 keeps it, 301 cuts its first '#'.
    EXPECT_EQ(gsm8k_extract_solution("#### 42" + repeat("x", 293)), "42");
    EXPECT_EQ(gsm8k_extract_solution("#### 42" + repeat("x", 294)), std::nullopt);
    // Characters are code points, not bytes: 293 two-byte characters still fit.
    EXPECT_EQ(gsm8k_extract_solution("#### 42" + repeat("\xC3\xA9", 293)), "42");
    EXPECT_EQ(gsm8k_extract_solution("#### 42" + repeat("\xC3\xA9", 294)), std::nullopt);
    EXPECT_EQ(gsm8k_extract_solution(repeat("#### 1 ", 100) + "#### 9"), "9");
}

TEST(RewardGsm8k, FlexibleTakesLastNumberLikeMatch) {
    const auto flex = Gsm8kMethod::kFlexible;
    EXPECT_EQ(gsm8k_extract_solution("I have 3 apples and 5 pears", flex), "5");
    EXPECT_EQ(gsm8k_extract_solution("costs $18", flex), "18");
    // Commas and a trailing '.' are kept, so this does not equal "1234".
    EXPECT_EQ(gsm8k_extract_solution("The answer is 1,234.", flex), "1,234.");
    EXPECT_EQ(gsm8k_compute_score("The answer is 1,234.", "1234", flex), 0.0);
    EXPECT_EQ(gsm8k_extract_solution("7 then a dot .", flex), "7");  // skips "."
    // verl's loop leaves the first match when every match is ".".
    EXPECT_EQ(gsm8k_extract_solution("x . y . z", flex), ".");
    EXPECT_EQ(gsm8k_extract_solution("a , b", flex), ",");
    EXPECT_EQ(gsm8k_extract_solution("nothing", flex), std::nullopt);
    EXPECT_EQ(gsm8k_compute_score("so 18", "18", flex), 1.0);
}

TEST(RewardGsm8k, ScorerReportsPredAndAcc) {
    Gsm8kScorer scorer(Gsm8kMethod::kStrict, 0.1, 1.0);
    EXPECT_EQ(scorer.name(), "gsm8k(strict)");
    ScoreRequest req;
    req.solution = "so #### 1,000";
    req.ground_truth = "1000";
    ScoreResult r = scorer.score(req);
    EXPECT_EQ(r.score, 1.0);
    EXPECT_EQ(r.acc, 1.0);
    EXPECT_EQ(r.pred, "1000");
    req.ground_truth = "999";
    r = scorer.score(req);
    EXPECT_EQ(r.score, 0.1);
    EXPECT_EQ(r.acc, 0.0);
    req.solution = "no answer";
    r = scorer.score(req);
    EXPECT_EQ(r.score, 0.0);
    EXPECT_EQ(r.acc, 0.0);
    EXPECT_EQ(r.pred, "");
}

TEST(RewardGsm8k, MethodNames) {
    EXPECT_EQ(parse_gsm8k_method("strict"), Gsm8kMethod::kStrict);
    EXPECT_EQ(parse_gsm8k_method("flexible"), Gsm8kMethod::kFlexible);
    EXPECT_THROW(parse_gsm8k_method("lenient"), rlpt::ConfigError);
}
