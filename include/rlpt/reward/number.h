#pragma once
// Numeric answer scorers (not in verl): compare the answer a response gives with the
// ground truth as numbers, exactly (decimal strings are canonicalised, never converted to
// floating point, so 20-digit integers compare correctly and 0.1 + 0.2 problems cannot
// arise).
//
//   NumberScorer      generic: take the whole response or its last number.
//   ArithmeticScorer  the built-in "rlpt/arithmetic" task (data/arithmetic.h): the whole
//                     response must be one integer, written plainly or digit-reversed.

#include <optional>
#include <string>
#include <string_view>

#include "rlpt/reward/score.h"

namespace rlpt::reward {

// Canonical form of a plain decimal number, or nullopt when `s` is not one.
// Accepted: optional sign, digits, optional '.' and digits, at least one digit in all
// ("12", "-3.50", "+7.", ".5"). No exponent, no spaces, no thousands separators.
// Canonical: no '+', no leading zeros in the integer part ("0" when empty), no trailing
// zeros in the fraction, no '.' when the fraction is empty, "-0" -> "0".
// So "3.50" -> "3.5", "007" -> "7", "-.50" -> "-0.5", "7." -> "7".
std::optional<std::string> canonical_decimal(std::string_view s);

enum class NumberExtraction {
    kWhole,       // the whole response, ASCII whitespace trimmed
    kLastNumber,  // the last match of -?[0-9][0-9,]*(\.[0-9]+)? or -?\.[0-9]+ (commas dropped)
};

// "whole" | "last_number"; anything else throws ConfigError.
NumberExtraction parse_number_extraction(const std::string& s);

struct NumberScorerOptions {
    NumberExtraction extraction = NumberExtraction::kLastNumber;
    double score = 1.0;         // answer equals the ground truth
    double format_score = 0.0;  // a number was found but it is wrong
    // No number found: 0.
};

// Throws ValueError (naming it) when the ground truth is not a decimal number.
class NumberScorer final : public Scorer {
  public:
    explicit NumberScorer(NumberScorerOptions options = {});
    std::string name() const override;
    ScoreResult score(const ScoreRequest& request) const override;

  private:
    NumberScorerOptions options_;
};

// The whole response equals the ground truth as text, ASCII whitespace trimmed on both:
// score/acc 1, else 0; pred = the trimmed response. For answers that are not numbers (a word,
// a label, a date) and SFT validation of data without a configured scorer.
class ExactScorer final : public Scorer {
  public:
    std::string name() const override { return "exact"; }
    ScoreResult score(const ScoreRequest& request) const override;
};

struct ArithmeticScorerOptions {
    // Answer format when the sample's extra_info has no "answer_format" key
    // ("plain" or "reversed", see data/arithmetic.h). The key, when present, wins.
    bool reversed = false;
    double score = 1.0;
    double format_score = 0.0;  // a well-formed integer, but wrong. Malformed: 0.
};

// Scores a response of the arithmetic task: the response (ASCII whitespace trimmed)
// must be exactly one integer in the sample's answer format. pred is the decoded value in
// plain notation. Throws ValueError when the ground truth is not an integer or the
// extra_info "answer_format" is not "plain"/"reversed".
class ArithmeticScorer final : public Scorer {
  public:
    explicit ArithmeticScorer(ArithmeticScorerOptions options = {});
    std::string name() const override { return "arithmetic"; }
    ScoreResult score(const ScoreRequest& request) const override;

  private:
    ArithmeticScorerOptions options_;
};

}  // namespace rlpt::reward
