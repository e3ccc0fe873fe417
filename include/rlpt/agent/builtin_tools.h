#pragma once
// The built-in tools (rollout.multi_turn.builtin_tools): tools inside rlpt, run inline by the
// agent loop (agent/tool_agent.h) on the calling thread, with the MCP tools' result type.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlpt/agent/mcp_client.h"

namespace rlpt::agent {

struct BuiltinTool {
    const char* name;
    const char* description;                             // as the prompt's tool list shows it
    nlohmann::json (*schema)();                          // its arguments' JSON schema
    ToolResult (*run)(const nlohmann::json& arguments);  // arguments failing the schema: an error result
};

// The built-in tool named `name`, or nullptr.
const BuiltinTool* find_builtin_tool(const std::string& name);
// Every built-in tool's name, in a fixed order: the one list of them (rollout.multi_turn.builtin_tools
// and `rlpt generate --tool` are checked against it, app::table_name_problems).
std::vector<std::string> builtin_tool_names();

// The calculator: arguments {"expression": "12*(3+4)"} with + - * / and parentheses over decimal
// numbers. Its schema, and its result (integers printed without a fraction; errors, e.g. division
// by zero, as an error result).
nlohmann::json calculator_schema();
ToolResult run_calculator(const nlohmann::json& arguments);

}  // namespace rlpt::agent
