#include "rlpt/reward/number.h"

#include <nlohmann/json.hpp>

#include "reward/text_util.h"
#include "rlpt/core/error.h"
#include "rlpt/data/arithmetic.h"

namespace rlpt::reward {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The last match of -?[0-9][0-9,]*(\.[0-9]+)?|-?\.[0-9]+ (leftmost, non-overlapping
// matches, as a regex iterator would find them). Hand-written because std::regex
// recurses per character and a long run of digits in a response could exhaust the stack.
std::string last_number(std::string_view s) {
    std::string_view last;
    std::size_t i = 0;
    while (i < s.size()) {
        std::size_t j = i;
        if (s[j] == '-') ++j;
        std::size_t start_body = j;
        if (j < s.size() && is_digit(s[j])) {
            while (j < s.size() && (is_digit(s[j]) || s[j] == ',')) ++j;
            if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
                ++j;
                while (j < s.size() && is_digit(s[j])) ++j;
            }
        } else if (j + 1 < s.size() && s[j] == '.' && is_digit(s[j + 1])) {
            ++j;
            while (j < s.size() && is_digit(s[j])) ++j;
        }
        if (j > start_body) {
            last = s.substr(i, j - i);
            i = j;
        } else {
            ++i;
        }
    }
    return std::string(last);
}

}  // namespace

std::optional<std::string> canonical_decimal(std::string_view s) {
    bool negative = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
        negative = s[0] == '-';
        s.remove_prefix(1);
    }
    std::size_t dot = s.find('.');
    std::string_view int_part = s.substr(0, dot);
    std::string_view frac_part = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
    if (int_part.empty() && frac_part.empty()) return std::nullopt;
    auto all_digits = [](std::string_view x) {
        for (char c : x) {
            if (c < '0' || c > '9') return false;
        }
        return true;
    };
    if (!all_digits(int_part) || !all_digits(frac_part)) return std::nullopt;

    std::size_t i0 = int_part.find_first_not_of('0');
    std::string out(i0 == std::string_view::npos ? std::string_view("0") : int_part.substr(i0));
    std::size_t f1 = frac_part.find_last_not_of('0');
    if (f1 != std::string_view::npos) {
        out += '.';
        out += frac_part.substr(0, f1 + 1);
    }
    if (negative && out != "0") out.insert(out.begin(), '-');
    return out;
}

NumberExtraction parse_number_extraction(const std::string& s) {
    if (s == "whole") return NumberExtraction::kWhole;
    if (s == "last_number") return NumberExtraction::kLastNumber;
    RLPT_THROW(ConfigError, "unknown number extraction '{}' (expected 'whole' or 'last_number')", s);
}

NumberScorer::NumberScorer(NumberScorerOptions options) : options_(options) {}

ScoreResult ExactScorer::score(const ScoreRequest& request) const {
    ScoreResult r;
    r.pred = std::string(detail::trim_ascii(request.solution));
    r.score = r.pred == detail::trim_ascii(request.ground_truth) ? 1.0 : 0.0;
    r.acc = r.score;
    return r;
}

std::string NumberScorer::name() const {
    return options_.extraction == NumberExtraction::kWhole ? "number(whole)" : "number(last_number)";
}

ScoreResult NumberScorer::score(const ScoreRequest& request) const {
    std::optional<std::string> truth = canonical_decimal(detail::trim_ascii(request.ground_truth));
    RLPT_CHECK(truth.has_value(), "number scorer: ground truth '{}' is not a decimal number", request.ground_truth);

    std::optional<std::string> answer;
    std::string raw;
    if (options_.extraction == NumberExtraction::kWhole) {
        raw = std::string(detail::trim_ascii(request.solution));
        answer = canonical_decimal(raw);
    } else {
        raw = last_number(request.solution);
        if (!raw.empty()) answer = canonical_decimal(detail::replace_all(raw, ",", ""));
    }
    ScoreResult r;
    if (!answer) {
        r.acc = 0.0;
        return r;
    }
    const bool correct = *answer == *truth;
    r.score = correct ? options_.score : options_.format_score;
    r.acc = correct ? 1.0 : 0.0;
    r.pred = std::move(*answer);
    return r;
}

ArithmeticScorer::ArithmeticScorer(ArithmeticScorerOptions options) : options_(options) {}

ScoreResult ArithmeticScorer::score(const ScoreRequest& request) const {
    bool reversed = options_.reversed;
    if (request.extra_info != nullptr && request.extra_info->is_object()) {
        auto it = request.extra_info->find("answer_format");
        if (it != request.extra_info->end()) {
            RLPT_CHECK(it->is_string() && (*it == "plain" || *it == "reversed"),
                       "arithmetic scorer: extra_info.answer_format must be \"plain\" or \"reversed\", got {}",
                       it->dump());
            reversed = *it == "reversed";
        }
    }
    std::optional<std::string> truth = data::arithmetic_decode_answer(detail::trim_ascii(request.ground_truth), false);
    RLPT_CHECK(truth.has_value(), "arithmetic scorer: ground truth '{}' is not an integer", request.ground_truth);

    ScoreResult r;
    std::optional<std::string> answer = data::arithmetic_decode_answer(detail::trim_ascii(request.solution), reversed);
    if (!answer) {
        r.acc = 0.0;
        return r;
    }
    const bool correct = *answer == *truth;
    r.score = correct ? options_.score : options_.format_score;
    r.acc = correct ? 1.0 : 0.0;
    r.pred = std::move(*answer);
    return r;
}

}  // namespace rlpt::reward
