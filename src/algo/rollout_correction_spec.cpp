// algorithm.rollout_correction option parsing (rlpt/algo/rollout_correction_spec.h). Torch-free:
// it is compiled into rlpt_base (src/CMakeLists.txt) because config validation runs it; the
// algorithm code links it from there.
#include "rlpt/algo/rollout_correction_spec.h"

#include <cmath>
#include <cstdlib>

#include "rlpt/core/error.h"

namespace rlpt::algo {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    size_t start = 0;
    for (;;) {
        size_t end = s.find(sep, start);
        std::string item = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
        size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
        out.push_back(a == std::string::npos ? "" : item.substr(a, b - a + 1));
        if (end == std::string::npos) return out;
        start = end + 1;
    }
}

double positive_number(const std::string& text, const std::string& what) {
    char* end = nullptr;
    const double v = text.empty() ? NAN : std::strtod(text.c_str(), &end);
    RLPT_CHECK(!text.empty() && end && *end == '\0' && std::isfinite(v), "{}: '{}' is not a number", what, text);
    RLPT_CHECK(v > 0, "{}: bounds must be > 0, got {}", what, text);
    return v;
}

// "L_U" -> {L, U}; "U" -> {1/U, U}. `bounds_ok` false: "_" is refused.
std::pair<double, double> parse_bounds(const std::string& spec, const std::string& what, bool two_sided) {
    RLPT_CHECK(!spec.empty(), "{}: empty threshold (give a number U or \"L_U\")", what);
    const auto parts = split(spec, '_');
    if (parts.size() == 1) {
        const double u = positive_number(parts[0], what);
        return {1.0 / u, u};
    }
    RLPT_CHECK(two_sided, "{}: '{}' gives bounds \"L_U\", but this option takes one upper bound", what, spec);
    RLPT_CHECK(parts.size() == 2, "{}: '{}' must be a number U or \"L_U\"", what, spec);
    const double l = positive_number(parts[0], what), u = positive_number(parts[1], what);
    RLPT_CHECK(l <= u, "{}: lower bound {} is above the upper bound {}", what, l, u);
    return {l, u};
}

}  // namespace

IsThreshold parse_rollout_is_threshold(const std::string& spec) {
    const std::string what = "algorithm.rollout_correction.rollout_is_threshold";
    IsThreshold t;
    auto [l, u] = parse_bounds(spec, what, true);
    t.lower = l;
    t.upper = u;
    t.icepop = spec.find('_') != std::string::npos;
    return t;
}

const std::vector<std::string>& rollout_rs_option_names() {
    static const std::vector<std::string> names{"token_k1",    "token_k2",   "token_k3",    "seq_sum_k1",
                                                "seq_sum_k2",  "seq_sum_k3", "seq_mean_k1", "seq_mean_k2",
                                                "seq_mean_k3", "seq_max_k2", "seq_max_k3"};
    return names;
}

std::vector<RsOption> parse_rollout_rs(const std::string& rs, const std::string& thresholds) {
    const std::string what = "algorithm.rollout_correction.rollout_rs";
    std::vector<RsOption> opts;
    if (rs.empty()) return opts;
    for (const auto& name : split(rs, ',')) {
        bool dup = false;
        for (const auto& o : opts) dup = dup || o.name == name;
        if (dup) continue;
        const auto& known = rollout_rs_option_names();
        bool ok = false;
        for (const auto& k : known) ok = ok || k == name;
        if (!ok) {
            std::string list;
            for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
            throw ValueError(fmt::format("{}: unknown option '{}' (known: {})", what, name, list));
        }
        RsOption o;
        o.name = name;
        const char k = name.back();
        o.stat = k == '1' ? RsStat::kK1 : k == '2' ? RsStat::kK2 : RsStat::kK3;
        o.level = name.rfind("token_", 0) == 0      ? RsLevel::kToken
                  : name.rfind("seq_sum_", 0) == 0  ? RsLevel::kSeqSum
                  : name.rfind("seq_mean_", 0) == 0 ? RsLevel::kSeqMean
                                                    : RsLevel::kSeqMax;
        opts.push_back(o);
    }
    const std::string twhat = "algorithm.rollout_correction.rollout_rs_threshold";
    RLPT_CHECK(!thresholds.empty(), "{} is required when rollout_rs is set ({})", twhat, rs);
    const auto specs = split(thresholds, ',');
    RLPT_CHECK(specs.size() == 1 || specs.size() == opts.size(),
               "{}: {} thresholds for {} rollout_rs options (give one for all, or one per option)", twhat, specs.size(),
               opts.size());
    for (size_t i = 0; i < opts.size(); ++i) {
        const std::string& s = specs[specs.size() == 1 ? 0 : i];
        auto [l, u] = parse_bounds(s, twhat + " (" + opts[i].name + ")", opts[i].stat == RsStat::kK1);
        opts[i].lower = l;
        opts[i].upper = u;
    }
    return opts;
}

}  // namespace rlpt::algo
