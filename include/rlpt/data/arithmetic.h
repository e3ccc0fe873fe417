#pragma once
// The built-in "arithmetic" task: generated, no download, sized for a tiny character-level
// transformer. Torch-free.
//
// A problem is a prompt like "37+485=" and the response a model should produce, "522",
// followed by the tokenizer's EOS (EOS and padding are tokenizer specials, not text).
//   * Operands are non-negative integers written most significant digit first, without
//     leading zeros; each has a digit count drawn uniformly from [min_digits, max_digits].
//   * Operators come from `operations` (a subset of "+-*"; '*' is multiplication), and
//     expressions with more than two operands use the usual precedence ('*' before '+'/'-',
//     left to right). Results may be negative.
//   * Answer formats:
//       plain     "-448", "522"       the integer as usual
//       reversed  "-844", "225"       sign first, then the digits least significant first.
//     Reversed digits make carries flow in generation order, which is what lets a small
//     model learn addition (Lee et al. 2023, "Teaching arithmetic to small transformers").
//   * Text uses only kArithmeticCharset: "0123456789+-*=". A character tokenizer built
//     from it covers every prompt and response.
//
// Examples carry data_source "rlpt/arithmetic", ground_truth = the plain answer ("522"),
// response = the demonstration (extra["response"]),
// and extra = {"answer_format": "plain"|"reversed", "response": <target text>,
// "split": "train"|"val"}. reward::ArithmeticScorer reads "answer_format".
//
// Train and validation sets are disjoint by construction: a problem belongs to validation
// iff a fixed hash of its prompt falls below val_fraction. The hash does not depend on the
// seed, so validation problems are held out from the training set of every seed (as long
// as val_fraction is unchanged). Within a split, problems are distinct. Everything is a
// pure function of the options.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rlpt/data/example.h"

namespace rlpt::data {

inline constexpr std::string_view kArithmeticDataSource = "rlpt/arithmetic";
inline constexpr std::string_view kArithmeticCharset = "0123456789+-*=";

struct ArithmeticOptions {
    uint64_t seed = 1;
    int min_digits = 1;            // per operand, >= 1
    int max_digits = 3;            // per operand, num_operands * max_digits <= 18 (fits int64)
    int num_operands = 2;          // >= 2
    std::string operations = "+";  // non-empty subset of "+-*"
    bool reversed_answer = false;
    int64_t num_train = 10000;  // >= 1
    int64_t num_val = 256;      // >= 0
    double val_fraction = 0.1;  // share of the problem space held out, in (0, 1)
    // Share in [0, 1] of training problems WITH a carry whose demonstration (extra["response"],
    // the SFT target) adds column by column without carrying, e.g. "58+7=" -> "55"; such examples
    // carry extra["flawed_demo"] = true. Ground truth (rewards) and validation stay correct. It
    // models imperfect demonstrations that a verifiable reward can correct. Needs operations "+".
    double demo_carry_error_rate = 0.0;
    // How the options are named in the "cannot draw" error ("data.builtin." in a run's config).
    std::string key_prefix = "arithmetic.";
};

// Throws ConfigError naming the field ("arithmetic.max_digits ...") on a bad option.
void validate_arithmetic_options(const ArithmeticOptions& options);

struct ArithmeticTask {
    std::vector<Example> train;
    std::vector<Example> val;
};

// Generates both splits. Throws ConfigError when a split cannot hold the requested number
// of distinct problems (e.g. 1000 training problems of 1-digit addition).
ArithmeticTask make_arithmetic_task(const ArithmeticOptions& options);

// True when `prompt` is held out for validation under `val_fraction`.
bool arithmetic_is_validation_prompt(std::string_view prompt, double val_fraction);

// The answer text for `value` in the given format: (522, false) -> "522",
// (522, true) -> "225", (-448, true) -> "-844", (0, true) -> "0".
std::string arithmetic_format_answer(int64_t value, bool reversed);

// The built-in "arithmetic_tools" task: the arithmetic task (plain answers) with a calculator.
// Examples carry data_source "rlpt/arithmetic_tools" (reward: the last number of the model's text,
// reward::add_builtin_scorers). A hashed share `tool_demo_rate` of the training demonstrations
// calls the calculator (Hermes format, agent/tool_call.h) before answering; their extra["turns"]
// holds the conversation after the prompt, e.g. for "37*48=":
//   [{"role": "assistant", "content": "<tool_call>{\"name\": \"calculator\", \"arguments\":
//       {\"expression\": \"37*48\"}}</tool_call>"},
//    {"role": "tool", "content": "1776"}, {"role": "assistant", "content": "1776"}]
// (SFT learns the assistant turns; the tool turn is in the sequence with loss mask 0, see
// agent::encode_conversation), and response is the turns' text joined. The others answer directly
// (response "1776", no turns), the demonstration being right. Validation examples have no turns.
// extra["tool_demo"] = true marks the tool demonstrations.
inline constexpr std::string_view kArithmeticToolsDataSource = "rlpt/arithmetic_tools";
// Multi-character tokens of the task's character tokenizer (tokenizer/char_tokenizer.h words): a
// calculator call is kToolCallWords[0] EXPRESSION kToolCallWords[1], a result kToolCallWords[2]
// TEXT kToolCallWords[3] (chat template none).
inline const std::vector<std::string> kToolCallWords = {
    "<tool_call>{\"name\": \"calculator\", \"arguments\": {\"expression\": \"", "\"}}</tool_call>", "<tool_response>",
    "</tool_response>"};
// ConfigError when tool_demo_rate is outside [0, 1] or the options ask for reversed answers or
// flawed demonstrations.
ArithmeticTask make_arithmetic_tools_task(const ArithmeticOptions& options, double tool_demo_rate);

// Decodes an answer text (exactly -?[0-9]+, nothing else) into the canonical plain decimal
// integer ("0"/"-?[1-9][0-9]*"), or nullopt when malformed. Leading zeros of the plain
// value (trailing zeros of a reversed text) are accepted: "0522" -> "522",
// reversed "2250" -> "522", "-0" -> "0". Arbitrary length; no overflow.
std::optional<std::string> arithmetic_decode_answer(std::string_view text, bool reversed);

}  // namespace rlpt::data
