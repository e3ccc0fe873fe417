#include "rlpt/reward/math.h"

#include "reward/text_util.h"

namespace rlpt::reward {

namespace {

using detail::contains;
using detail::replace_all;
using detail::split;
using detail::starts_with;

constexpr std::string_view kBoxedSpace = "\\boxed ";
constexpr std::string_view kBoxedBrace = "\\boxed{";

// fix_fracs: "\frac12" -> "\frac{1}{2}", "\frac1{2}" -> "\frac{1}{2}".
std::optional<std::string> fix_fracs(const std::string& s) {
    std::vector<std::string> parts = split(s, "\\frac");
    std::string out = parts[0];
    for (std::size_t k = 1; k < parts.size(); ++k) {
        const std::string& sub = parts[k];
        out += "\\frac";
        if (sub.empty()) return std::nullopt;  // Python: substr[0] raises IndexError
        if (sub[0] == '{') {
            out += sub;
            continue;
        }
        if (detail::utf8_length(sub) < 2) return s;  // Python: assert len >= 2 -> return input
        std::string_view a = detail::utf8_first(sub);
        std::string_view rest = std::string_view(sub).substr(a.size());
        std::string_view b = detail::utf8_first(rest);
        std::string_view post = rest.substr(b.size());
        out += "{";
        out += a;
        if (b != "{") {
            out += "}{";
            out += b;
            out += "}";
        } else {
            out += "}";
            out += b;
        }
        out += post;
    }
    return out;
}

// A string Python's "{}".format(int(x)) reproduces exactly: "0" or -?[1-9][0-9]*.
bool is_canonical_int(std::string_view x) {
    if (x == "0") return true;
    if (!x.empty() && x[0] == '-') x.remove_prefix(1);
    if (x.empty() || x[0] < '1' || x[0] > '9') return false;
    for (char c : x) {
        if (c < '0' || c > '9') return false;
    }
    return true;
}

// fix_a_slash_b: "3/4" -> "\frac{3}{4}" when both sides are plain integers.
std::string fix_a_slash_b(const std::string& s) {
    std::vector<std::string> parts = split(s, "/");
    if (parts.size() != 2) return s;
    if (!is_canonical_int(parts[0]) || !is_canonical_int(parts[1])) return s;
    return "\\frac{" + parts[0] + "}{" + parts[1] + "}";
}

// remove_right_units: "5 \text{ cm}" -> "5 ". Two or more "\text{ " fail the Python assert.
std::optional<std::string> remove_right_units(const std::string& s) {
    if (!contains(s, "\\text{ ")) return s;
    std::vector<std::string> parts = split(s, "\\text{ ");
    if (parts.size() != 2) return std::nullopt;
    return parts[0];
}

// fix_sqrt: "\sqrt3" -> "\sqrt{3}" (one character only).
std::optional<std::string> fix_sqrt(const std::string& s) {
    if (!contains(s, "\\sqrt")) return s;
    std::vector<std::string> parts = split(s, "\\sqrt");
    std::string out = parts[0];
    for (std::size_t k = 1; k < parts.size(); ++k) {
        const std::string& sub = parts[k];
        if (sub.empty()) return std::nullopt;  // Python: split[0] raises IndexError
        if (sub[0] != '{') {
            std::string_view a = detail::utf8_first(sub);
            out += "\\sqrt{";
            out += a;
            out += "}";
            out += std::string_view(sub).substr(a.size());
        } else {
            out += "\\sqrt";
            out += sub;
        }
    }
    return out;
}

}  // namespace

std::optional<std::string> math_last_boxed_only_string(std::string_view s) {
    std::size_t space_pos = s.rfind(kBoxedSpace);
    if (space_pos != std::string_view::npos) {
        std::string_view after = s.substr(space_pos + kBoxedSpace.size());
        return std::string(kBoxedSpace) + std::string(after.substr(0, after.find('$')));
    }
    std::size_t idx = s.rfind("\\boxed");
    if (idx == std::string_view::npos) {
        idx = s.rfind("\\fbox");
        if (idx == std::string_view::npos) return std::nullopt;
    }
    int open = 0;
    for (std::size_t i = idx; i < s.size(); ++i) {
        if (s[i] == '{') ++open;
        if (s[i] == '}') {
            --open;
            if (open == 0) return std::string(s.substr(idx, i - idx + 1));
        }
    }
    return std::nullopt;
}

std::optional<std::string> math_remove_boxed(std::string_view s) {
    if (contains(s, kBoxedSpace)) {
        if (!starts_with(s, kBoxedSpace)) return std::nullopt;
        return std::string(s.substr(kBoxedSpace.size()));
    }
    if (!starts_with(s, kBoxedBrace) || s.back() != '}') return std::nullopt;
    return std::string(s.substr(kBoxedBrace.size(), s.size() - kBoxedBrace.size() - 1));
}

std::optional<std::string> math_strip_string(std::string_view input) {
    std::string s = replace_all(input, "\n", "");
    s = replace_all(s, "\\!", "");
    s = replace_all(s, "\\\\", "\\");
    s = replace_all(s, "tfrac", "frac");
    s = replace_all(s, "dfrac", "frac");
    s = replace_all(s, "\\left", "");
    s = replace_all(s, "\\right", "");
    s = replace_all(s, "^{\\circ}", "");
    s = replace_all(s, "^\\circ", "");
    s = replace_all(s, "\\$", "");

    std::optional<std::string> no_units = remove_right_units(s);
    if (!no_units) return std::nullopt;
    s = std::move(*no_units);

    s = replace_all(s, "\\\\%", "");
    s = replace_all(s, "\\%", "");
    s = replace_all(s, " .", " 0.");
    s = replace_all(s, "{.", "{0.");
    if (s.empty()) return s;
    if (s[0] == '.') s = "0" + s;

    std::vector<std::string> eq = split(s, "=");
    if (eq.size() == 2 && detail::utf8_length(eq[0]) <= 2) s = eq[1];

    std::optional<std::string> sqrt_fixed = fix_sqrt(s);
    if (!sqrt_fixed) return std::nullopt;
    s = replace_all(*sqrt_fixed, " ", "");

    std::optional<std::string> frac_fixed = fix_fracs(s);
    if (!frac_fixed) return std::nullopt;
    s = std::move(*frac_fixed);

    if (s == "0.5") s = "\\frac{1}{2}";
    return fix_a_slash_b(s);
}

bool math_is_equiv(std::string_view a, std::string_view b) {
    std::optional<std::string> sa = math_strip_string(a);
    std::optional<std::string> sb = math_strip_string(b);
    if (!sa || !sb) return a == b;
    return *sa == *sb;
}

double math_compute_score(std::string_view solution, std::string_view ground_truth) {
    std::optional<std::string> boxed = math_last_boxed_only_string(solution);
    if (!boxed) return 0.0;
    std::optional<std::string> answer = math_remove_boxed(*boxed);
    if (!answer) return 0.0;
    return math_is_equiv(*answer, ground_truth) ? 1.0 : 0.0;
}

ScoreResult MathScorer::score(const ScoreRequest& request) const {
    ScoreResult r;
    std::optional<std::string> boxed = math_last_boxed_only_string(request.solution);
    std::optional<std::string> answer;
    if (boxed) answer = math_remove_boxed(*boxed);
    if (answer) {
        r.score = math_is_equiv(*answer, request.ground_truth) ? 1.0 : 0.0;
        r.pred = std::move(*answer);
    }
    r.acc = r.score;
    return r;
}

}  // namespace rlpt::reward
