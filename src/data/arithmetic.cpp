#include "rlpt/data/arithmetic.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "data/rng.h"
#include "rlpt/core/error.h"

namespace rlpt::data {

namespace {

constexpr uint64_t kSplitSalt = 0x61726974686D6574ULL;  // "arithmet": fixed, seed-independent
constexpr uint64_t kTrainStream = 0x7472616996E5ULL;
constexpr uint64_t kValStream = 0x76616C5D1D0FULL;
constexpr uint64_t kDemoErrorSalt = 0x6E6F6361727279ULL;  // "nocarry"
constexpr uint64_t kToolDemoSalt = 0x746F6F6C64656DULL;   // "tooldem"

int64_t pow10(int e) {
    int64_t v = 1;
    for (int i = 0; i < e; ++i) v *= 10;
    return v;
}

struct Problem {
    std::string prompt;
    int64_t value = 0;
    int64_t no_carry_value = 0;  // column-wise digit sums mod 10 (only meaningful for '+' only)
};

// "37+485=" added column by column without carrying: 7+5 -> 2, 3+8 -> 1, 4 -> 4 gives 412.
int64_t add_without_carry(int64_t a, int64_t b) {
    int64_t out = 0, place = 1;
    while (a > 0 || b > 0) {
        out += ((a % 10 + b % 10) % 10) * place;
        a /= 10;
        b /= 10;
        place *= 10;
    }
    return out;
}

Problem draw_problem(const ArithmeticOptions& o, detail::SplitMix64& rng) {
    Problem p;
    int64_t sum = 0;     // sum of finished terms
    int64_t term = 0;    // current product term, with its sign
    char pending = '+';  // operator before the current term
    for (int k = 0; k < o.num_operands; ++k) {
        int digits = static_cast<int>(rng.between(o.min_digits, o.max_digits));
        int64_t operand = digits == 1 ? rng.between(0, 9) : rng.between(pow10(digits - 1), pow10(digits) - 1);
        char op = k == 0 ? '+' : o.operations[rng.below(o.operations.size())];
        if (k > 0) p.prompt += op;
        p.prompt += std::to_string(operand);
        p.no_carry_value = add_without_carry(p.no_carry_value, operand);
        if (k == 0) {
            term = operand;
        } else if (op == '*') {
            term *= operand;
        } else {
            sum += pending == '-' ? -term : term;
            pending = op;
            term = operand;
        }
    }
    sum += pending == '-' ? -term : term;
    p.prompt += '=';
    p.value = sum;
    return p;
}

double problem_space_size(const ArithmeticOptions& o) {
    double per_operand = std::pow(10.0, o.max_digits) - (o.min_digits == 1 ? 0.0 : std::pow(10.0, o.min_digits - 1));
    return std::pow(per_operand, o.num_operands) *
           std::pow(static_cast<double>(o.operations.size()), o.num_operands - 1);
}

std::vector<Example> generate_split(const ArithmeticOptions& o, bool val) {
    const int64_t wanted = val ? o.num_val : o.num_train;
    const char* split_name = val ? "val" : "train";
    const char* format_name = o.reversed_answer ? "reversed" : "plain";
    detail::SplitMix64 rng(detail::mix64(o.seed ^ (val ? kValStream : kTrainStream)));
    std::unordered_set<std::string> seen;
    std::vector<Example> out;
    out.reserve(static_cast<std::size_t>(wanted));
    const int64_t max_draws = 64 * (wanted + 1) + 100000;
    int64_t draws = 0;
    while (static_cast<int64_t>(out.size()) < wanted) {
        if (++draws > max_draws) {
            double space = problem_space_size(o);
            double share = val ? o.val_fraction : 1.0 - o.val_fraction;
            RLPT_THROW(ConfigError,
                       "arithmetic: could not draw {} distinct {} problems ({} found after {} draws); the "
                       "task has about {:.0f} distinct problems, about {:.0f} of them in the {} split. "
                       "Lower {}num_{} or allow more digits/operations/operands",
                       wanted, split_name, out.size(), max_draws, space, space * share, split_name, o.key_prefix,
                       split_name);
        }
        Problem p = draw_problem(o, rng);
        if (arithmetic_is_validation_prompt(p.prompt, o.val_fraction) != val) continue;
        if (!seen.insert(p.prompt).second) continue;
        Example e;
        e.prompt = std::move(p.prompt);
        e.ground_truth = std::to_string(p.value);
        e.data_source = std::string(kArithmeticDataSource);
        // The demonstration (the SFT target) forgets carries for a hashed share of training problems;
        // ground truth, rewards and validation always use the true value.
        const bool flawed = !val && o.demo_carry_error_rate > 0.0 && p.no_carry_value != p.value &&
                            detail::stable_hash(e.prompt.data(), e.prompt.size(), kDemoErrorSalt ^ o.seed) >> 11 <
                                static_cast<uint64_t>(o.demo_carry_error_rate * 0x1.0p53);
        e.extra = nlohmann::json{{"answer_format", format_name},
                                 {"response",
                                  arithmetic_format_answer(flawed ? p.no_carry_value : p.value, o.reversed_answer)},
                                 {"split", split_name}};
        e.response = e.extra["response"].get<std::string>();
        if (flawed) e.extra["flawed_demo"] = true;
        e.index = static_cast<int64_t>(out.size());
        out.push_back(std::move(e));
    }
    return out;
}

}  // namespace

void validate_arithmetic_options(const ArithmeticOptions& o) {
    RLPT_CHECK_KIND(ConfigError, o.min_digits >= 1, "arithmetic.min_digits must be >= 1, got {}", o.min_digits);
    RLPT_CHECK_KIND(ConfigError, o.max_digits >= o.min_digits,
                    "arithmetic.max_digits ({}) must be >= arithmetic.min_digits ({})", o.max_digits, o.min_digits);
    RLPT_CHECK_KIND(ConfigError, o.num_operands >= 2, "arithmetic.num_operands must be >= 2, got {}", o.num_operands);
    RLPT_CHECK_KIND(ConfigError, static_cast<int64_t>(o.num_operands) * o.max_digits <= 18,
                    "arithmetic.num_operands * arithmetic.max_digits must be <= 18 so results fit in 64 "
                    "bits, got {} * {}",
                    o.num_operands, o.max_digits);
    RLPT_CHECK_KIND(ConfigError, !o.operations.empty(),
                    "arithmetic.operations must not be empty (use some of \"+-*\")");
    for (std::size_t i = 0; i < o.operations.size(); ++i) {
        char c = o.operations[i];
        RLPT_CHECK_KIND(ConfigError, c == '+' || c == '-' || c == '*',
                        "arithmetic.operations: unsupported operation '{}' in \"{}\" (supported: \"+-*\")", c,
                        o.operations);
        RLPT_CHECK_KIND(ConfigError, o.operations.find(c) == i, "arithmetic.operations: '{}' is listed twice in \"{}\"",
                        c, o.operations);
    }
    RLPT_CHECK_KIND(ConfigError, o.demo_carry_error_rate >= 0.0 && o.demo_carry_error_rate <= 1.0,
                    "arithmetic.demo_carry_error_rate must be in [0, 1], got {}", o.demo_carry_error_rate);
    RLPT_CHECK_KIND(ConfigError, o.demo_carry_error_rate == 0.0 || o.operations == "+",
                    "arithmetic.demo_carry_error_rate needs operations \"+\" only (a forgotten carry is defined for "
                    "sums of non-negative numbers), got \"{}\"",
                    o.operations);
    RLPT_CHECK_KIND(ConfigError, o.num_train >= 1, "arithmetic.num_train must be >= 1, got {}", o.num_train);
    RLPT_CHECK_KIND(ConfigError, o.num_val >= 0, "arithmetic.num_val must be >= 0, got {}", o.num_val);
    RLPT_CHECK_KIND(ConfigError, o.val_fraction > 0.0 && o.val_fraction < 1.0,
                    "arithmetic.val_fraction must be in (0, 1), got {}", o.val_fraction);
}

ArithmeticTask make_arithmetic_task(const ArithmeticOptions& options) {
    validate_arithmetic_options(options);
    ArithmeticTask task;
    task.train = generate_split(options, false);
    task.val = generate_split(options, true);
    return task;
}

ArithmeticTask make_arithmetic_tools_task(const ArithmeticOptions& options, double tool_demo_rate) {
    RLPT_CHECK_KIND(ConfigError, tool_demo_rate >= 0.0 && tool_demo_rate <= 1.0,
                    "{}tool_demo_rate must be in [0, 1], got {}", options.key_prefix, tool_demo_rate);
    RLPT_CHECK_KIND(ConfigError, !options.reversed_answer && options.demo_carry_error_rate == 0.0,
                    "{}task arithmetic_tools takes plain answers (the calculator's) and exact demonstrations: "
                    "set reversed_answer false and demo_carry_error_rate 0",
                    options.key_prefix);
    ArithmeticTask task = make_arithmetic_task(options);
    for (auto* split : {&task.train, &task.val}) {
        for (auto& e : *split) e.data_source = std::string(kArithmeticToolsDataSource);
    }
    for (auto& e : task.train) {
        if (detail::stable_hash(e.prompt.data(), e.prompt.size(), kToolDemoSalt ^ options.seed) >> 11 >=
            static_cast<uint64_t>(tool_demo_rate * 0x1.0p53))
            continue;
        const std::string expression = e.prompt.substr(0, e.prompt.size() - 1);  // without the '='
        const std::string call = kToolCallWords[0] + expression + kToolCallWords[1];
        e.extra["turns"] = nlohmann::json::array({{{"role", "assistant"}, {"content", call}},
                                                  {{"role", "tool"}, {"content", e.ground_truth}},
                                                  {{"role", "assistant"}, {"content", e.ground_truth}}});
        e.extra["tool_demo"] = true;
        e.response = call + kToolCallWords[2] + e.ground_truth + kToolCallWords[3] + e.ground_truth;
        e.extra["response"] = *e.response;
    }
    return task;
}

bool arithmetic_is_validation_prompt(std::string_view prompt, double val_fraction) {
    uint64_t h = detail::stable_hash(prompt.data(), prompt.size(), kSplitSalt);
    double u = static_cast<double>(h >> 11) * 0x1.0p-53;  // uniform in [0, 1)
    return u < val_fraction;
}

std::string arithmetic_format_answer(int64_t value, bool reversed) {
    std::string digits;
    // Negate in unsigned arithmetic so INT64_MIN is handled.
    uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
    digits = std::to_string(magnitude);
    if (reversed) std::reverse(digits.begin(), digits.end());
    return value < 0 ? "-" + digits : digits;
}

std::optional<std::string> arithmetic_decode_answer(std::string_view text, bool reversed) {
    bool negative = !text.empty() && text[0] == '-';
    std::string digits(negative ? text.substr(1) : text);
    if (digits.empty()) return std::nullopt;
    for (char c : digits) {
        if (c < '0' || c > '9') return std::nullopt;
    }
    if (reversed) std::reverse(digits.begin(), digits.end());
    std::size_t first = digits.find_first_not_of('0');
    if (first == std::string::npos) return std::string("0");
    digits.erase(0, first);
    return negative ? "-" + digits : digits;
}

}  // namespace rlpt::data
