#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unicode/utf16.h>
#include <unicode/utf8.h>

#include "rlpt/core/error.h"

namespace rlpt::tokenizer::detail {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

RegexSplitter::RegexSplitter(const std::string& pattern, bool literal) {
    UErrorCode status = U_ZERO_ERROR;
    UParseError parse_error{};
    const icu::UnicodeString upattern = icu::UnicodeString::fromUTF8(pattern);
    pattern_.reset(icu::RegexPattern::compile(upattern, literal ? UREGEX_LITERAL : 0, parse_error, status));
    if (U_FAILURE(status)) {
        pattern_.reset();
        RLPT_THROW(ValueError, "regex '{}' does not compile (ICU: {} at offset {})", pattern, u_errorName(status),
                   parse_error.offset);
    }
}

RegexSplitter::~RegexSplitter() = default;

void RegexSplitter::find_matches(std::string_view text,
                                 std::vector<std::pair<std::pair<size_t, size_t>, bool>>& out) const {
    if (text.empty()) return;
    const icu::UnicodeString utext =
        icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
    UErrorCode status = U_ZERO_ERROR;
    std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(utext, status));
    RLPT_CHECK_KIND(InternalError, U_SUCCESS(status), "ICU regex matcher: {}", u_errorName(status));
    // Backtracking over a long whitespace run can outgrow ICU's default 8 MB stack; the input is
    // bounded by the caller's text, so let it grow.
    matcher->setStackLimit(0, status);

    // Matches come in order, so UTF-16 offsets convert to UTF-8 offsets by walking forward.
    const char16_t* units = utext.getBuffer();
    const int32_t n_units = utext.length();
    int32_t u16 = 0;
    size_t u8 = 0;
    auto advance_to = [&](int32_t target) {
        while (u16 < target) {
            UChar32 c = 0;
            U16_NEXT(units, u16, n_units, c);
            u8 += U8_LENGTH(c);
        }
        return u8;
    };
    size_t prev = 0;
    while (matcher->find(status) && U_SUCCESS(status)) {
        const int32_t s16 = matcher->start(status);
        const int32_t e16 = matcher->end(status);
        if (s16 == e16) continue;
        const size_t s8 = advance_to(s16);
        const size_t e8 = advance_to(e16);
        if (prev != s8) out.push_back({{prev, s8}, false});
        out.push_back({{s8, e8}, true});
        prev = e8;
    }
    RLPT_CHECK_KIND(InternalError, U_SUCCESS(status), "ICU regex find: {}", u_errorName(status));
    if (prev != text.size()) out.push_back({{prev, text.size()}, false});
}

bool parse_split_behavior(const std::string& name, SplitBehavior& out) {
    if (name == "Removed") out = SplitBehavior::kRemoved;
    else if (name == "Isolated") out = SplitBehavior::kIsolated;
    else if (name == "MergedWithPrevious") out = SplitBehavior::kMergedWithPrevious;
    else if (name == "MergedWithNext") out = SplitBehavior::kMergedWithNext;
    else if (name == "Contiguous") out = SplitBehavior::kContiguous;
    else return false;
    return true;
}

namespace {

using Span = std::pair<std::pair<size_t, size_t>, bool>;

// HF NormalizedString::split: turns (range, is_match) into (range, remove) per behaviour.
std::vector<Span> apply_behavior(std::vector<Span> matches, SplitBehavior behavior) {
    std::vector<Span> acc;
    acc.reserve(matches.size());
    bool previous_match = false;
    switch (behavior) {
        case SplitBehavior::kIsolated:
            for (auto& m : matches) acc.push_back({m.first, false});
            return acc;
        case SplitBehavior::kRemoved: return matches;
        case SplitBehavior::kContiguous:
            for (auto& [range, is_match] : matches) {
                if (is_match == previous_match && !acc.empty()) acc.back().first.second = range.second;
                else acc.push_back({range, false});
                previous_match = is_match;
            }
            return acc;
        case SplitBehavior::kMergedWithPrevious:
            for (auto& [range, is_match] : matches) {
                if (is_match && !previous_match && !acc.empty()) acc.back().first.second = range.second;
                else acc.push_back({range, false});
                previous_match = is_match;
            }
            return acc;
        case SplitBehavior::kMergedWithNext:
            for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
                const auto& [range, is_match] = *it;
                if (is_match && !previous_match && !acc.empty()) acc.back().first.first = range.first;
                else acc.push_back({range, false});
                previous_match = is_match;
            }
            std::reverse(acc.begin(), acc.end());
            return acc;
    }
    return acc;
}

void split_piece(const PreTokenizerStep& step, const std::string& piece, std::vector<std::string>& out) {
    std::vector<Span> matches;
    step.regex->find_matches(piece, matches);
    if (step.invert) {
        for (auto& m : matches) m.second = !m.second;
    }
    for (const auto& [range, remove] : apply_behavior(std::move(matches), step.behavior)) {
        if (!remove && range.second > range.first) out.emplace_back(piece, range.first, range.second - range.first);
    }
}

}  // namespace

void PreTokenizer::run(std::string_view text, std::vector<std::string>& out) const {
    std::vector<std::string> pieces{std::string(text)};
    std::vector<std::string> next;
    for (const auto& step : steps_) {
        next.clear();
        for (auto& piece : pieces) {
            if (step.kind == PreTokenizerStep::Kind::kByteLevel) {
                if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
                if (step.regex) split_piece(step, piece, next);
                else next.push_back(std::move(piece));
            } else {
                split_piece(step, piece, next);
            }
        }
        pieces.swap(next);
    }
    for (auto& p : pieces) {
        if (!p.empty()) out.push_back(std::move(p));
    }
}

}  // namespace rlpt::tokenizer::detail
