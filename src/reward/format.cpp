#include "rlpt/reward/format.h"

#include <unicode/regex.h>
#include <unicode/unistr.h>

#include "rlpt/core/error.h"

namespace rlpt::reward {

namespace {

// Upper bounds on the regex engine per response: the match-time limit is in ICU "steps"
// of roughly a millisecond each (so about 0.3 s), the backtrack stack in bytes. They turn a
// catastrophic pattern into a clean mismatch instead of a stall.
constexpr int32_t kRegexTimeLimit = 300;
constexpr int32_t kRegexStackLimit = 64 << 20;

}  // namespace

struct FormatScorer::Impl {
    std::unique_ptr<icu::RegexPattern> pattern;
};

FormatMatch parse_format_match(const std::string& s) {
    if (s == "search") return FormatMatch::kSearch;
    if (s == "full") return FormatMatch::kFull;
    RLPT_THROW(ConfigError, "unknown format match '{}' (expected 'search' or 'full')", s);
}

FormatScorer::FormatScorer(FormatScorerOptions options) : options_(std::move(options)), impl_(new Impl) {
    RLPT_CHECK_KIND(ConfigError, !options_.pattern.empty(), "format scorer: the pattern is empty");
    UErrorCode status = U_ZERO_ERROR;
    UParseError parse_error{};
    impl_->pattern.reset(
        icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(options_.pattern), 0, parse_error, status));
    RLPT_CHECK_KIND(ConfigError, U_SUCCESS(status) && impl_->pattern,
                    "format scorer: invalid regular expression '{}' ({} near character {})", options_.pattern,
                    u_errorName(status), parse_error.offset);
}

FormatScorer::~FormatScorer() = default;

std::string FormatScorer::name() const {
    return fmt::format("format({}, /{}/)", options_.match == FormatMatch::kFull ? "full" : "search", options_.pattern);
}

ScoreResult FormatScorer::score(const ScoreRequest& request) const {
    const icu::UnicodeString text = icu::UnicodeString::fromUTF8(
        icu::StringPiece(request.solution.data(), static_cast<int32_t>(request.solution.size())));
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> matcher(impl_->pattern->matcher(text, status));
    bool ok = false;
    if (U_SUCCESS(status)) {
        matcher->setTimeLimit(kRegexTimeLimit, status);
        matcher->setStackLimit(kRegexStackLimit, status);
    }
    if (U_SUCCESS(status)) {
        ok = options_.match == FormatMatch::kFull ? matcher->matches(status) : matcher->find(status);
    }
    ScoreResult r;
    if (U_FAILURE(status)) {
        r.score = options_.mismatch_score;
        r.extra["format_ok"] = 0.0;
        r.extra["format_regex_error"] = 1.0;
        return r;
    }
    r.score = ok ? options_.score : options_.mismatch_score;
    r.extra["format_ok"] = ok ? 1.0 : 0.0;
    return r;
}

WeightedSumScorer::WeightedSumScorer(std::vector<WeightedScorer> parts) : parts_(std::move(parts)) {
    RLPT_CHECK_KIND(ConfigError, !parts_.empty(), "weighted sum scorer: no parts");
    for (std::size_t i = 0; i < parts_.size(); ++i) {
        RLPT_CHECK_KIND(ConfigError, parts_[i].scorer != nullptr, "weighted sum scorer: part {} is null", i);
    }
}

std::string WeightedSumScorer::name() const {
    std::string s = "sum(";
    for (std::size_t i = 0; i < parts_.size(); ++i) {
        if (i > 0) s += " + ";
        s += fmt::format("{}*{}", parts_[i].weight, parts_[i].scorer->name());
    }
    return s + ")";
}

ScoreResult WeightedSumScorer::score(const ScoreRequest& request) const {
    ScoreResult total;
    bool have_acc = false;
    for (std::size_t i = 0; i < parts_.size(); ++i) {
        ScoreResult part = parts_[i].scorer->score(request);
        total.score += parts_[i].weight * part.score;
        if (!have_acc && part.acc) {
            have_acc = true;
            total.acc = part.acc;
            total.pred = part.pred;
        }
        for (const auto& kv : part.extra) total.extra.emplace(kv.first, kv.second);
        total.extra[fmt::format("part{}_score", i)] = part.score;
    }
    return total;
}

}  // namespace rlpt::reward
