#include "rlpt/agent/builtin_tools.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <vector>

#include "rlpt/agent/line_process.h"
#include "rlpt/agent/tool_call.h"
#include "rlpt/core/error.h"

namespace rlpt::agent {
namespace {

// Recursive descent over + - * / ( ) and decimal numbers.
class Calculator {
  public:
    explicit Calculator(const std::string& s) : s_(s) {}
    double run() {
        const double v = expr();
        skip();
        if (i_ != s_.size()) fail("unexpected '" + s_.substr(i_, 1) + "'");
        return v;
    }

  private:
    [[noreturn]] void fail(const std::string& why) { throw ValueError(why); }
    void skip() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    bool eat(char c) {
        skip();
        if (i_ < s_.size() && s_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    double expr() {
        double v = term();
        for (;;) {
            if (eat('+')) v += term();
            else if (eat('-')) v -= term();
            else return v;
        }
    }
    double term() {
        double v = factor();
        for (;;) {
            if (eat('*')) {
                v *= factor();
            } else if (eat('/')) {
                const double d = factor();
                if (d == 0) fail("division by zero");
                v /= d;
            } else {
                return v;
            }
        }
    }
    double factor() {
        if (++depth_ > 64) fail("expression nested too deeply");
        double v;
        if (eat('-')) v = -factor();
        else if (eat('+')) v = factor();
        else if (eat('(')) {
            v = expr();
            if (!eat(')')) fail("missing ')'");
        } else {
            skip();
            const size_t start = i_;
            while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.')) ++i_;
            if (start == i_) fail(i_ < s_.size() ? "unexpected '" + s_.substr(i_, 1) + "'" : "unexpected end");
            try {
                v = std::stod(s_.substr(start, i_ - start));
            } catch (const std::exception&) {
                fail("bad number '" + s_.substr(start, i_ - start) + "'");
            }
        }
        --depth_;
        return v;
    }
    const std::string& s_;
    size_t i_ = 0;
    int depth_ = 0;
};

std::string format_number(double v) {
    if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15)
        return fmt::format("{}", static_cast<int64_t>(v));
    return fmt::format("{}", v);
}

const std::vector<BuiltinTool>& builtin_tools() {
    static const std::vector<BuiltinTool> tools{
        {"calculator", "Evaluates an arithmetic expression", calculator_schema, run_calculator},
    };
    return tools;
}

}  // namespace

const BuiltinTool* find_builtin_tool(const std::string& name) {
    for (const auto& t : builtin_tools())
        if (name == t.name) return &t;
    return nullptr;
}

std::vector<std::string> builtin_tool_names() {
    std::vector<std::string> names;
    for (const auto& t : builtin_tools()) names.emplace_back(t.name);
    return names;
}

nlohmann::json calculator_schema() {
    return nlohmann::json::parse(
        R"J({"type":"object","properties":{"expression":{"type":"string","description":"arithmetic with + - * / and parentheses, e.g. 12*(3+4)"}},"required":["expression"]})J");
}

ToolResult run_calculator(const nlohmann::json& arguments) {
    const double t0 = monotonic_s();
    ToolResult r;
    if (auto why = check_arguments(calculator_schema(), arguments); !why.empty()) {
        r = ToolResult{"Invalid arguments for 'calculator': " + why, true, "arguments", 0.0};
    } else {
        try {
            r.text = format_number(Calculator(arguments["expression"].get<std::string>()).run());
        } catch (const ValueError& e) {
            r = ToolResult{"Error executing tool 'calculator': " + e.message(), true, "tool", 0.0};
        }
    }
    r.latency_s = monotonic_s() - t0;
    return r;
}

}  // namespace rlpt::agent
