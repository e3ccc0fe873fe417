// The built-in tools (agent/builtin_tools.h): the table, and the calculator's results and errors.
#include <gtest/gtest.h>

#include "rlpt/agent/builtin_tools.h"

namespace rlpt::agent {
namespace {

ToolResult calc(const nlohmann::json& expression) { return run_calculator({{"expression", expression}}); }

TEST(AgentBuiltinTools, TheTableNamesTheCalculator) {
    const BuiltinTool* t = find_builtin_tool("calculator");
    ASSERT_NE(t, nullptr);
    EXPECT_STREQ(t->name, "calculator");
    EXPECT_EQ(t->schema(), calculator_schema());
    EXPECT_EQ(t->run({{"expression", "2+3"}}).text, "5");
    EXPECT_EQ(find_builtin_tool("search"), nullptr);
}

TEST(AgentBuiltinTools, CalculatorResultsAndErrors) {
    EXPECT_EQ(calc("12*(3+4)").text, "84");
    EXPECT_EQ(calc(" -2 * -(3 - 5) ").text, "-4");
    EXPECT_EQ(calc("7/2").text, "3.5");
    EXPECT_FALSE(calc("1+1").is_error);
    const auto zero = calc("1/0");
    EXPECT_TRUE(zero.is_error);
    EXPECT_EQ(zero.error_kind, "tool");
    EXPECT_EQ(zero.text, "Error executing tool 'calculator': division by zero");
    EXPECT_EQ(calc("2+").text, "Error executing tool 'calculator': unexpected end");
    EXPECT_EQ(calc("(1").text, "Error executing tool 'calculator': missing ')'");
    EXPECT_EQ(calc(std::string(100, '(') + "1" + std::string(100, ')')).text,
              "Error executing tool 'calculator': expression nested too deeply");
    const auto bad = calc(5);
    EXPECT_TRUE(bad.is_error);
    EXPECT_EQ(bad.error_kind, "arguments");
    EXPECT_EQ(bad.text, "Invalid arguments for 'calculator': argument 'expression': expected string, got integer");
    EXPECT_GE(calc("1").latency_s, 0.0);
}

}  // namespace
}  // namespace rlpt::agent
