#include "rlpt/reward/gsm8k.h"

#include <regex>

#include "reward/text_util.h"
#include "rlpt/core/error.h"

namespace rlpt::reward {

Gsm8kMethod parse_gsm8k_method(const std::string& s) {
    if (s == "strict") return Gsm8kMethod::kStrict;
    if (s == "flexible") return Gsm8kMethod::kFlexible;
    RLPT_THROW(ConfigError, "unknown gsm8k method '{}' (expected 'strict' or 'flexible')", s);
}

std::optional<std::string> gsm8k_extract_solution(std::string_view solution, Gsm8kMethod method) {
    // Both patterns are ASCII and cannot match an empty string, so std::regex iteration
    // gives the same non-overlapping matches as Python's re.findall.
    static const std::regex strict_re("#### (-?[0-9.,]+)");
    static const std::regex flexible_re("(-?[0-9.,]+)");

    const std::string clipped(detail::utf8_tail(solution, kGsm8kClipChars));
    const std::regex& re = method == Gsm8kMethod::kStrict ? strict_re : flexible_re;
    std::vector<std::string> matches;
    for (std::sregex_iterator it(clipped.begin(), clipped.end(), re), end; it != end; ++it) {
        matches.push_back((*it)[1].str());
    }
    if (matches.empty()) return std::nullopt;

    if (method == Gsm8kMethod::kStrict) {
        return detail::replace_all(matches.back(), ",", "");
    }
    // verl: `for final_answer in reversed(answer): if final_answer not in ['', '.']: break`
    // leaves the loop variable at the first match when nothing qualifies.
    for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (*it != "" && *it != ".") return *it;
    }
    return matches.front();
}

double gsm8k_compute_score(std::string_view solution, std::string_view ground_truth, Gsm8kMethod method,
                           double format_score, double score) {
    std::optional<std::string> answer = gsm8k_extract_solution(solution, method);
    if (!answer) return 0.0;
    return *answer == ground_truth ? score : format_score;
}

Gsm8kScorer::Gsm8kScorer(Gsm8kMethod method, double format_score, double score)
    : method_(method), format_score_(format_score), score_(score) {}

std::string Gsm8kScorer::name() const { return method_ == Gsm8kMethod::kStrict ? "gsm8k(strict)" : "gsm8k(flexible)"; }

ScoreResult Gsm8kScorer::score(const ScoreRequest& request) const {
    ScoreResult r;
    std::optional<std::string> answer = gsm8k_extract_solution(request.solution, method_);
    if (!answer) {
        r.score = 0.0;
        r.acc = 0.0;
        return r;
    }
    const bool correct = *answer == request.ground_truth;
    r.score = correct ? score_ : format_score_;
    r.acc = correct ? 1.0 : 0.0;
    r.pred = std::move(*answer);
    return r;
}

}  // namespace rlpt::reward
