// The DAPO math scorer (verl math_dapo.py). The regular expressions of the Python are written out
// as scans: each one works line by line, as Python's '.' does not match a newline.
#include "rlpt/reward/math_dapo.h"

#include <optional>
#include <regex>
#include <utility>

#include "text_util.h"

namespace rlpt::reward {

namespace {

using detail::replace_all;

constexpr std::string_view kInvalid = "[INVALID]";

// Python's str.replace over the two lists of normalize_final_answer, in order.
constexpr std::pair<std::string_view, std::string_view> kSubstitutions[] = {
    {"an ", ""}, {"a ", ""},       {".$", "$"},           {"\\$", ""},          {"\\ ", ""},
    {" ", ""},   {"mbox", "text"}, {",\\text{and}", ","}, {"\\text{and}", ","}, {"\\text{m}", "\\text{}"},
};
constexpr std::string_view kRemoved[] = {
    "square",     "ways",       "integers",  "dollars",      "mph",
    "inches",     "hours",      "km",        "units",        "\\ldots",
    "sue",        "points",     "feet",      "minutes",      "digits",
    "cents",      "degrees",    "cm",        "gm",           "pounds",
    "meters",     "meals",      "edges",     "students",     "childrentickets",
    "multiples",  "\\text{s}",  "\\text{.}", "\\text{\ns}",  "\\text{}^2",
    "\\text{}^3", "\\text{\n}", "\\text{}",  "\\mathrm{th}", "^\\circ",
    "^{\\circ}",  "\\;",        ",\\!",      "{,}",          "\"",
    "\\dots",
};

// Applies `fn` to each line (the text between '\n's), keeping the newlines.
template <typename Fn>
std::string per_line(std::string_view s, Fn&& fn) {
    std::string out;
    size_t start = 0;
    while (true) {
        size_t nl = s.find('\n', start);
        out += fn(s.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
        if (nl == std::string_view::npos) return out;
        out += '\n';
        start = nl + 1;
    }
}

// re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", r"$\3$", line): a line with two '$' becomes "$<between>$".
std::string keep_first_math(std::string_view line) {
    size_t a = line.find('$');
    if (a == std::string_view::npos) return std::string(line);
    size_t b = line.find('$', a + 1);
    if (b == std::string_view::npos) return std::string(line);
    return "$" + std::string(line.substr(a + 1, b - a - 1)) + "$";
}

// re.sub(r"(<open>)(.*?)(\})", r"\2", line) (lazy) or, with greedy, r"(<open>)(.*)(\})".
std::string unwrap(std::string_view line, std::string_view open, bool greedy) {
    std::string out;
    size_t i = 0;
    while (i < line.size()) {
        if (line.substr(i, open.size()) == open) {
            size_t from = i + open.size();
            size_t close = greedy ? line.rfind('}') : line.find('}', from);
            if (close != std::string_view::npos && close >= from) {
                out += line.substr(from, close - from);
                i = close + 1;
                continue;
            }
        }
        out += line[i++];
    }
    return out;
}

// re.sub(r"(frac)([^{])(.)", r"frac{\2}{\3}") and re.sub(r"(sqrt)([^{])", r"sqrt{\2}"): the groups
// are single code points; [^{] matches a newline, '.' does not.
std::string fix_shorthand(std::string_view s, std::string_view word, bool two_args) {
    std::string out;
    size_t i = 0;
    while (i < s.size()) {
        size_t a = i + word.size();
        if (s.substr(i, word.size()) == word && a < s.size() && s[a] != '{') {
            const size_t la = detail::utf8_char_len(static_cast<unsigned char>(s[a]));
            const size_t b = a + la;
            if (!two_args || (b < s.size() && s[b] != '\n')) {
                out += std::string(word) + "{" + std::string(s.substr(a, la)) + "}";
                i = b;
                if (two_args) {
                    const size_t lb = detail::utf8_char_len(static_cast<unsigned char>(s[b]));
                    out += "{" + std::string(s.substr(b, lb)) + "}";
                    i = b + lb;
                }
                continue;
            }
        }
        out += s[i++];
    }
    return out;
}

// verl's last_boxed_only_string of math_dapo.py: the last "\boxed{", brace-matched from there.
std::optional<std::string> last_boxed(std::string_view s) {
    size_t idx = s.rfind("\\boxed{");
    if (idx == std::string_view::npos) return std::nullopt;
    int open = 0;
    for (size_t i = idx; i < s.size(); ++i) {
        if (s[i] == '{') ++open;
        if (s[i] == '}' && --open == 0) return std::string(s.substr(idx, i - idx + 1));
    }
    return std::nullopt;
}

}  // namespace

std::string math_dapo_normalize(std::string_view answer) {
    auto parts = detail::split(answer, "=");
    std::string s = parts.back();
    for (const auto& [from, to] : kSubstitutions) s = replace_all(s, from, to);
    for (auto expr : kRemoved) s = replace_all(s, expr, "");
    s = per_line(s, keep_first_math);
    for (std::string_view open : {"\\text{", "\\textbf{", "\\overline{"})
        s = per_line(s, [&](std::string_view line) { return unwrap(line, open, false); });
    s = per_line(s, [](std::string_view line) { return unwrap(line, "\\boxed{", true); });
    s = fix_shorthand(s, "frac", true);
    s = fix_shorthand(s, "sqrt", false);
    s = replace_all(s, "$", "");
    std::string digits = replace_all(s, ",", "");
    if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos) s = digits;
    return std::string(detail::trim_ascii(s));
}

ScoreResult math_dapo_compute_score(std::string_view solution, std::string_view ground_truth) {
    const std::string text(detail::utf8_tail(solution, 300));
    // Minerva: the last "Answer: ..." line.
    static const std::regex kAnswer(R"(Answer\s*:\s*([^\n]+))", std::regex::icase);
    std::string extracted(kInvalid);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kAnswer); it != std::sregex_iterator(); ++it)
        extracted = (*it)[1].str();
    ScoreResult r;
    r.pred = math_dapo_normalize(extracted);
    bool correct = r.pred == math_dapo_normalize(ground_truth);
    if (r.pred == kInvalid) {
        // No "Answer:" line: the last \boxed{...} of the last 100 characters, compared exactly.
        if (auto boxed = last_boxed(detail::utf8_tail(text, 100))) {
            r.pred = boxed->substr(7, boxed->size() - 8);  // remove_boxed: "\boxed{" ... "}"
            correct = r.pred == ground_truth;
        }
    }
    r.score = correct ? 1.0 : -1.0;
    r.acc = correct ? 1.0 : 0.0;
    return r;
}

ScoreResult MathDapoScorer::score(const ScoreRequest& request) const {
    return math_dapo_compute_score(request.solution, request.ground_truth);
}

}  // namespace rlpt::reward
