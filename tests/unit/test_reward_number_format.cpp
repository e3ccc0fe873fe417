// Numeric, arithmetic-task, format and weighted-sum scorers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "rlpt/core/error.h"
#include "rlpt/reward/format.h"
#include "rlpt/reward/number.h"

using namespace rlpt::reward;

namespace {

ScoreResult run(const Scorer& s, std::string_view solution, std::string_view truth,
                const nlohmann::json* extra = nullptr) {
    ScoreRequest req;
    req.solution = solution;
    req.ground_truth = truth;
    req.extra_info = extra;
    return s.score(req);
}

}  // namespace

TEST(RewardNumber, CanonicalDecimal) {
    EXPECT_EQ(canonical_decimal("12"), "12");
    EXPECT_EQ(canonical_decimal("3.50"), "3.5");
    EXPECT_EQ(canonical_decimal("7."), "7");
    EXPECT_EQ(canonical_decimal("007"), "7");
    EXPECT_EQ(canonical_decimal("+7"), "7");
    EXPECT_EQ(canonical_decimal("-.50"), "-0.5");
    EXPECT_EQ(canonical_decimal("-0.000"), "0");
    EXPECT_EQ(canonical_decimal("0"), "0");
    EXPECT_EQ(canonical_decimal("123456789012345678901234567890"), "123456789012345678901234567890");
    EXPECT_EQ(canonical_decimal(""), std::nullopt);
    EXPECT_EQ(canonical_decimal("."), std::nullopt);
    EXPECT_EQ(canonical_decimal("-"), std::nullopt);
    EXPECT_EQ(canonical_decimal("1,000"), std::nullopt);
    EXPECT_EQ(canonical_decimal("1e3"), std::nullopt);
    EXPECT_EQ(canonical_decimal(" 1"), std::nullopt);
    EXPECT_EQ(canonical_decimal("1.2.3"), std::nullopt);
}

TEST(RewardNumber, LastNumberComparesAsNumbers) {
    NumberScorer scorer;  // last_number, 1 / 0
    EXPECT_EQ(scorer.name(), "number(last_number)");
    ScoreResult r = run(scorer, "so the total is 3.50 dollars", "3.5");
    EXPECT_EQ(r.score, 1.0);  // unlike gsm8k, numbers not strings
    EXPECT_EQ(r.acc, 1.0);
    EXPECT_EQ(r.pred, "3.5");
    EXPECT_EQ(run(scorer, "it is 1,234.", "1234").score, 1.0);  // commas dropped, '.' ends it
    EXPECT_EQ(run(scorer, "first 5 then -.5", "-0.5").score, 1.0);
    EXPECT_EQ(run(scorer, "x-7y", "-7").score, 1.0);
    EXPECT_EQ(run(scorer, "answer 12345678901234567890123", "12345678901234567890123").score, 1.0);
    EXPECT_EQ(run(scorer, "answer 12345678901234567890124", "12345678901234567890123").score, 0.0);
    r = run(scorer, "no digits here", "3");
    EXPECT_EQ(r.score, 0.0);
    EXPECT_EQ(r.acc, 0.0);
    EXPECT_EQ(r.pred, "");
    // A long run of digits is fine (no recursive regex).
    EXPECT_EQ(run(scorer, std::string(200000, '9'), "9").score, 0.0);
}

TEST(RewardNumber, WholeResponseAndScores) {
    NumberScorerOptions o;
    o.extraction = NumberExtraction::kWhole;
    o.score = 2.0;
    o.format_score = 0.25;
    NumberScorer scorer(o);
    EXPECT_EQ(run(scorer, "  42\n", "42.0").score, 2.0);
    EXPECT_EQ(run(scorer, "41", "42").score, 0.25);
    EXPECT_EQ(run(scorer, "42 apples", "42").score, 0.0);
    EXPECT_EQ(parse_number_extraction("whole"), NumberExtraction::kWhole);
    EXPECT_THROW(parse_number_extraction("first"), rlpt::ConfigError);
}

TEST(RewardNumber, NonNumericGroundTruthIsAnError) {
    NumberScorer scorer;
    try {
        run(scorer, "5", "five");
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("'five'"), std::string::npos) << e.message();
    }
}

TEST(RewardArithmetic, PlainAndReversedFormats) {
    ArithmeticScorer plain;
    EXPECT_EQ(run(plain, "522", "522").score, 1.0);
    EXPECT_EQ(run(plain, " 522\n", "522").score, 1.0);
    EXPECT_EQ(run(plain, "0522", "522").score, 1.0);
    ScoreResult r = run(plain, "225", "522");
    EXPECT_EQ(r.score, 0.0);
    EXPECT_EQ(r.acc, 0.0);
    EXPECT_EQ(r.pred, "225");
    EXPECT_EQ(run(plain, "-448", "-448").score, 1.0);
    EXPECT_EQ(run(plain, "52 2", "522").pred, "");  // malformed
    EXPECT_EQ(run(plain, "522=", "522").score, 0.0);

    const nlohmann::json reversed_extra = {{"answer_format", "reversed"}};
    r = run(plain, "225", "522", &reversed_extra);  // the sample's format wins
    EXPECT_EQ(r.score, 1.0);
    EXPECT_EQ(r.pred, "522");
    EXPECT_EQ(run(plain, "-844", "-448", &reversed_extra).score, 1.0);
    EXPECT_EQ(run(plain, "001", "100", &reversed_extra).score, 1.0);

    ArithmeticScorerOptions o;
    o.reversed = true;
    o.format_score = 0.1;
    ArithmeticScorer reversed(o);
    EXPECT_EQ(run(reversed, "225", "522").score, 1.0);
    EXPECT_EQ(run(reversed, "522", "522").score, 0.1);
    EXPECT_EQ(run(reversed, "abc", "522").score, 0.0);
    const nlohmann::json plain_extra = {{"answer_format", "plain"}};
    EXPECT_EQ(run(reversed, "522", "522", &plain_extra).score, 1.0);
}

TEST(RewardArithmetic, BadDataIsAnError) {
    ArithmeticScorer scorer;
    EXPECT_THROW(run(scorer, "5", "five"), rlpt::ValueError);
    const nlohmann::json bad = {{"answer_format", "backwards"}};
    EXPECT_THROW(run(scorer, "5", "5", &bad), rlpt::ValueError);
}

TEST(RewardFormat, SearchAndFullMatch) {
    FormatScorerOptions o;
    o.pattern = "#### -?[0-9]+$";
    o.score = 0.5;
    o.mismatch_score = -0.5;
    FormatScorer search(o);
    ScoreResult r = run(search, "work...\n#### 42", "");
    EXPECT_EQ(r.score, 0.5);
    EXPECT_EQ(r.extra.at("format_ok"), 1.0);
    EXPECT_FALSE(r.acc.has_value());
    r = run(search, "the answer is 42", "");
    EXPECT_EQ(r.score, -0.5);
    EXPECT_EQ(r.extra.at("format_ok"), 0.0);

    o.pattern = "[0-9]+";
    o.match = FormatMatch::kFull;
    FormatScorer full(o);
    EXPECT_EQ(run(full, "123", "").score, 0.5);
    EXPECT_EQ(run(full, "123 ", "").score, -0.5);
    // UTF-8 text is matched as Unicode.
    o.pattern = "^\\p{L}{3}$";
    o.match = FormatMatch::kSearch;
    FormatScorer letters(o);
    EXPECT_EQ(run(letters, "\xC3\xA9t\xC3\xA9", "").score, 0.5);
}

TEST(RewardFormat, CatastrophicPatternScoresMismatchInsteadOfHanging) {
    FormatScorerOptions o;
    o.pattern = "^(a+)+$";
    FormatScorer scorer(o);
    ScoreResult r = run(scorer, std::string(40, 'a') + "b", "");
    EXPECT_EQ(r.score, 0.0);
    EXPECT_EQ(r.extra.at("format_regex_error"), 1.0);
}

TEST(RewardFormat, BadOptionsAreConfigErrors) {
    FormatScorerOptions o;
    EXPECT_THROW(FormatScorer{o}, rlpt::ConfigError);  // empty pattern
    o.pattern = "([0-9]";
    try {
        FormatScorer s(o);
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("([0-9]"), std::string::npos) << e.message();
    }
    EXPECT_EQ(parse_format_match("full"), FormatMatch::kFull);
    EXPECT_THROW(parse_format_match("partial"), rlpt::ConfigError);
}

TEST(RewardFormat, WeightedSum) {
    FormatScorerOptions fo;
    fo.pattern = "^[0-9]+$";
    auto format = std::make_shared<FormatScorer>(fo);
    auto number = std::make_shared<NumberScorer>();
    WeightedSumScorer sum({{1.0, number}, {0.25, format}});
    EXPECT_EQ(sum.name(), "sum(1*number(last_number) + 0.25*format(search, /^[0-9]+$/))");
    ScoreResult r = run(sum, "42", "42");
    EXPECT_DOUBLE_EQ(r.score, 1.25);
    EXPECT_EQ(r.acc, 1.0);
    EXPECT_EQ(r.pred, "42");
    EXPECT_EQ(r.extra.at("part0_score"), 1.0);
    EXPECT_EQ(r.extra.at("part1_score"), 1.0);
    EXPECT_EQ(r.extra.at("format_ok"), 1.0);
    r = run(sum, "it is 41", "42");
    EXPECT_DOUBLE_EQ(r.score, 0.0);
    EXPECT_EQ(r.acc, 0.0);
    EXPECT_THROW(WeightedSumScorer({}), rlpt::ConfigError);
    EXPECT_THROW(WeightedSumScorer({{1.0, nullptr}}), rlpt::ConfigError);
}
