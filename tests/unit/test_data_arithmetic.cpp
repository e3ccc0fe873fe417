// The built-in arithmetic task: format, determinism, held-out validation, and agreement
// with its scorer.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>

#include "rlpt/core/error.h"
#include "rlpt/data/arithmetic.h"
#include "rlpt/reward/number.h"

using namespace rlpt::data;

namespace {

// Independent evaluator for "a op b op c =" with '*' before '+'/'-', left to right.
int64_t evaluate(const std::string& prompt, std::vector<std::string>* operands) {
    std::vector<int64_t> values;
    std::vector<char> ops;
    std::string cur;
    for (char c : prompt) {
        if (c >= '0' && c <= '9') {
            cur += c;
            continue;
        }
        operands->push_back(cur);
        values.push_back(std::stoll(cur));
        cur.clear();
        if (c != '=') ops.push_back(c);
    }
    // Fold products first.
    std::vector<int64_t> terms = {values[0]};
    std::vector<char> add_ops;
    for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i] == '*') {
            terms.back() *= values[i + 1];
        } else {
            add_ops.push_back(ops[i]);
            terms.push_back(values[i + 1]);
        }
    }
    int64_t total = terms[0];
    for (std::size_t i = 0; i < add_ops.size(); ++i) total += add_ops[i] == '+' ? terms[i + 1] : -terms[i + 1];
    return total;
}

ArithmeticOptions small_options() {
    ArithmeticOptions o;
    o.seed = 3;
    o.min_digits = 1;
    o.max_digits = 3;
    o.num_operands = 3;
    o.operations = "+-*";
    o.num_train = 2000;
    o.num_val = 300;
    return o;
}

}  // namespace

TEST(DataArithmetic, AnswerCodec) {
    EXPECT_EQ(arithmetic_format_answer(522, false), "522");
    EXPECT_EQ(arithmetic_format_answer(522, true), "225");
    EXPECT_EQ(arithmetic_format_answer(-448, false), "-448");
    EXPECT_EQ(arithmetic_format_answer(-448, true), "-844");
    EXPECT_EQ(arithmetic_format_answer(100, true), "001");
    EXPECT_EQ(arithmetic_format_answer(0, true), "0");
    EXPECT_EQ(arithmetic_format_answer(INT64_MIN, false), "-9223372036854775808");

    EXPECT_EQ(arithmetic_decode_answer("522", false), "522");
    EXPECT_EQ(arithmetic_decode_answer("225", true), "522");
    EXPECT_EQ(arithmetic_decode_answer("-844", true), "-448");
    EXPECT_EQ(arithmetic_decode_answer("001", true), "100");
    EXPECT_EQ(arithmetic_decode_answer("2250", true), "522");
    EXPECT_EQ(arithmetic_decode_answer("0522", false), "522");
    EXPECT_EQ(arithmetic_decode_answer("-0", false), "0");
    EXPECT_EQ(arithmetic_decode_answer("000", true), "0");
    EXPECT_EQ(arithmetic_decode_answer("123456789012345678901234567890", false), "123456789012345678901234567890");
    for (const char* bad : {"", "-", "--1", "1-", "12a", " 12", "1.5", "+3", "1 2"}) {
        EXPECT_EQ(arithmetic_decode_answer(bad, false), std::nullopt) << bad;
        EXPECT_EQ(arithmetic_decode_answer(bad, true), std::nullopt) << bad;
    }
}

TEST(DataArithmetic, ExamplesAreWellFormedAndCorrect) {
    for (bool reversed : {false, true}) {
        ArithmeticOptions o = small_options();
        o.reversed_answer = reversed;
        ArithmeticTask task = make_arithmetic_task(o);
        ASSERT_EQ(task.train.size(), 2000u);
        ASSERT_EQ(task.val.size(), 300u);
        const std::regex prompt_re("[0-9]+[-+*][0-9]+[-+*][0-9]+=");
        std::set<char> ops_seen;
        for (const auto* split : {&task.train, &task.val}) {
            for (std::size_t i = 0; i < split->size(); ++i) {
                const Example& e = (*split)[i];
                ASSERT_TRUE(std::regex_match(e.prompt, prompt_re)) << e.prompt;
                for (char c : e.prompt) {
                    ASSERT_NE(kArithmeticCharset.find(c), std::string_view::npos) << e.prompt;
                    if (c == '+' || c == '-' || c == '*') ops_seen.insert(c);
                }
                std::vector<std::string> operands;
                const int64_t value = evaluate(e.prompt, &operands);
                EXPECT_EQ(e.ground_truth, std::to_string(value)) << e.prompt;
                for (const std::string& op : operands) {
                    EXPECT_GE(op.size(), 1u);
                    EXPECT_LE(op.size(), 3u);
                    EXPECT_TRUE(op.size() == 1 || op[0] != '0') << "leading zero in " << e.prompt;
                }
                const std::string response = e.extra.at("response");
                EXPECT_EQ(response, arithmetic_format_answer(value, reversed));
                for (char c : response) ASSERT_NE(kArithmeticCharset.find(c), std::string_view::npos);
                EXPECT_EQ(e.extra.at("answer_format"), reversed ? "reversed" : "plain");
                EXPECT_EQ(e.extra.at("split"), split == &task.train ? "train" : "val");
                EXPECT_EQ(e.data_source, kArithmeticDataSource);
                EXPECT_EQ(e.index, static_cast<int64_t>(i));
            }
        }
        EXPECT_EQ(ops_seen, (std::set<char>{'+', '-', '*'}));
    }
}

TEST(DataArithmetic, TargetResponsesScorePerfectly) {
    ArithmeticOptions o = small_options();
    o.reversed_answer = true;
    ArithmeticTask task = make_arithmetic_task(o);
    rlpt::reward::ArithmeticScorer scorer;  // plain by default: the sample's extra says reversed
    int negative = 0;
    for (const Example& e : task.train) {
        const std::string response = e.extra.at("response");
        rlpt::reward::ScoreRequest req;
        req.data_source = e.data_source;
        req.solution = response;
        req.ground_truth = e.ground_truth;
        req.extra_info = &e.extra;
        ASSERT_EQ(scorer.score(req).score, 1.0) << e.prompt << " " << response;
        negative += e.ground_truth[0] == '-';
    }
    EXPECT_GT(negative, 0);
}

TEST(DataArithmetic, DeterministicDistinctAndHeldOut) {
    const ArithmeticOptions o = small_options();
    ArithmeticTask a = make_arithmetic_task(o), b = make_arithmetic_task(o);
    ASSERT_EQ(a.train.size(), b.train.size());
    for (std::size_t i = 0; i < a.train.size(); ++i) ASSERT_EQ(a.train[i].prompt, b.train[i].prompt);

    std::set<std::string> train, val;
    for (const Example& e : a.train) train.insert(e.prompt);
    for (const Example& e : a.val) val.insert(e.prompt);
    EXPECT_EQ(train.size(), a.train.size());  // distinct within a split
    EXPECT_EQ(val.size(), a.val.size());
    for (const std::string& p : val) {
        EXPECT_EQ(train.count(p), 0u) << p;
        EXPECT_TRUE(arithmetic_is_validation_prompt(p, o.val_fraction));
    }
    for (const std::string& p : train) EXPECT_FALSE(arithmetic_is_validation_prompt(p, o.val_fraction));

    // Another seed draws other problems, but never one of the held-out ones.
    ArithmeticOptions o2 = o;
    o2.seed = 4;
    ArithmeticTask c = make_arithmetic_task(o2);
    int same = 0;
    for (std::size_t i = 0; i < c.train.size(); ++i) {
        same += c.train[i].prompt == a.train[i].prompt;
        EXPECT_EQ(val.count(c.train[i].prompt), 0u) << c.train[i].prompt;
    }
    EXPECT_LT(same, 20);
    // The number of training problems does not change the validation set.
    ArithmeticOptions o3 = o;
    o3.num_train = 10;
    ArithmeticTask d = make_arithmetic_task(o3);
    for (std::size_t i = 0; i < d.val.size(); ++i) EXPECT_EQ(d.val[i].prompt, a.val[i].prompt);
    for (std::size_t i = 0; i < d.train.size(); ++i) EXPECT_EQ(d.train[i].prompt, a.train[i].prompt);
}

TEST(DataArithmetic, DigitCountsAreSpread) {
    ArithmeticOptions o;
    o.min_digits = 2;
    o.max_digits = 4;
    o.num_train = 3000;
    o.num_val = 0;
    ArithmeticTask t = make_arithmetic_task(o);
    EXPECT_TRUE(t.val.empty());
    std::map<std::size_t, int> counts;
    for (const Example& e : t.train) {
        const std::string first = e.prompt.substr(0, e.prompt.find('+'));
        counts[first.size()]++;
    }
    ASSERT_EQ(counts.size(), 3u);
    for (const auto& kv : counts) {
        EXPECT_GE(kv.first, 2u);
        EXPECT_LE(kv.first, 4u);
        EXPECT_GT(kv.second, 800) << kv.first << " digits";
    }
}

TEST(DataArithmetic, SmallTaskSpaceIsAClearError) {
    ArithmeticOptions o;
    o.max_digits = 1;  // 100 addition problems, about 90 of them for training
    o.num_train = 1000;
    o.num_val = 5;
    try {
        make_arithmetic_task(o);
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("could not draw 1000 distinct train problems"), std::string::npos) << e.message();
        EXPECT_NE(e.message().find("about 100 distinct problems"), std::string::npos) << e.message();
    }
    o.num_train = 60;  // feasible
    EXPECT_EQ(make_arithmetic_task(o).train.size(), 60u);
}

TEST(DataArithmetic, OptionValidation) {
    auto expect_error = [](ArithmeticOptions o, const std::string& needle) {
        try {
            validate_arithmetic_options(o);
            ADD_FAILURE() << "no throw for " << needle;
        } catch (const rlpt::ConfigError& e) {
            EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
        }
    };
    ArithmeticOptions o;
    validate_arithmetic_options(o);
    o.min_digits = 0;
    expect_error(o, "arithmetic.min_digits");
    o = {};
    o.min_digits = 3;
    o.max_digits = 2;
    expect_error(o, "arithmetic.max_digits (2) must be >= arithmetic.min_digits (3)");
    o = {};
    o.num_operands = 1;
    expect_error(o, "arithmetic.num_operands must be >= 2");
    o = {};
    o.num_operands = 2;
    o.max_digits = 10;
    expect_error(o, "must be <= 18");
    o = {};
    o.operations = "";
    expect_error(o, "arithmetic.operations must not be empty");
    o.operations = "+/";
    expect_error(o, "unsupported operation '/'");
    o.operations = "++";
    expect_error(o, "'+' is listed twice");
    o = {};
    o.num_train = 0;
    expect_error(o, "arithmetic.num_train");
    o = {};
    o.num_val = -1;
    expect_error(o, "arithmetic.num_val");
    o = {};
    o.val_fraction = 1.0;
    expect_error(o, "arithmetic.val_fraction");
    o.val_fraction = 0.0;
    expect_error(o, "arithmetic.val_fraction");
}

TEST(DataArithmetic, FlawedDemonstrationsForgetCarriesOnlyInTrainingTargets) {
    ArithmeticOptions o;
    o.min_digits = 1;
    o.max_digits = 2;
    o.operations = "+";
    o.num_train = 2000;
    o.num_val = 200;
    o.demo_carry_error_rate = 0.7;
    ArithmeticTask task = make_arithmetic_task(o);
    int carry = 0, flawed = 0;
    for (const Example& e : task.train) {
        std::vector<std::string> operands;
        const int64_t value = evaluate(e.prompt, &operands);
        ASSERT_EQ(e.ground_truth, std::to_string(value));  // rewards always see the truth
        const int64_t a = std::stoll(operands[0]), b = std::stoll(operands[1]);
        const bool has_carry = (a % 10 + b % 10 >= 10) || ((a / 10) % 10 + (b / 10) % 10 >= 10);
        const std::string response = e.extra.at("response");
        if (e.extra.value("flawed_demo", false)) {
            ASSERT_TRUE(has_carry) << e.prompt;
            const int64_t no_carry = (a % 10 + b % 10) % 10 + 10 * (((a / 10) % 10 + (b / 10) % 10) % 10);
            EXPECT_EQ(response, std::to_string(no_carry)) << e.prompt;
            ++flawed;
        } else {
            EXPECT_EQ(response, std::to_string(value)) << e.prompt;
        }
        carry += has_carry;
    }
    ASSERT_GT(carry, 500);
    EXPECT_NEAR(static_cast<double>(flawed) / carry, 0.7, 0.05);
    for (const Example& e : task.val) {
        EXPECT_FALSE(e.extra.contains("flawed_demo"));
        EXPECT_EQ(e.extra.at("response").get<std::string>(), e.ground_truth);
    }
    // Same seed, same flawed set; the rate only exists for sums.
    ArithmeticTask again = make_arithmetic_task(o);
    for (size_t i = 0; i < task.train.size(); ++i) ASSERT_EQ(again.train[i].extra, task.train[i].extra);
    o.operations = "+-";
    EXPECT_THROW(make_arithmetic_task(o), rlpt::ConfigError);
    o.operations = "+";
    o.demo_carry_error_rate = 1.5;
    EXPECT_THROW(make_arithmetic_task(o), rlpt::ConfigError);
}
