#pragma once
// The tool agent's settings (rollout.multi_turn), as the config spells them (the config includes
// this header) and as the rollout role receives them in its settings (roles::RolloutSettings) and
// hands them to the generator (rollout::GeneratorArgs::multi_turn). Here, below the agent, because
// the generators' typed arguments (rollout/generators.h) hold them and rollout never includes
// agent. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace rlpt {

// rollout.generator: tool_agent (include/rlpt/agent/tool_agent.h): generate until a tool call or the
// end of the turn, run the calls, append their results as the chat template's tool turn (masked out
// of the loss), repeat. Names follow verl's rollout.multi_turn where verl has them. The response
// budget of a sample (model and tool tokens together) is data.max_response_length.
struct MultiTurnConfig {
    int64_t max_assistant_turns = 0;                     // 0: no limit (verl: null)
    int64_t max_user_turns = 0;                          // observation turns (tool results, environment); 0: no limit
    int64_t max_parallel_calls = 1;                      // calls run per assistant turn; further calls are dropped
    int64_t max_tool_response_length = 256;              // characters of one tool result (verl: characters too)
    std::string tool_response_truncate_side = "middle";  // left | middle | right
    std::string format = "hermes";                       // the tool-call parser: hermes (<tool_call>{json}</tool_call>)
    // MCP servers over stdio, one shell command each (`npx -y @modelcontextprotocol/server-everything`);
    // every rollout rank starts its own, and the controller lists their tools for the prompt.
    std::vector<std::string> mcp_servers;
    std::vector<std::string> builtin_tools;  // tools in rlpt itself: calculator
    double tool_timeout_s = 30.0;            // per tool call; a late call is an error observation
    double server_start_timeout_s = 60.0;    // an MCP server's start and handshake
    // An environment program speaking JSON lines (include/rlpt/agent/environment.h; example
    // scripts/examples/retry_env.py): each assistant turn is its action, its observation the next
    // user turn, and its rewards (summed) the sample's score instead of the reward scorer's.
    std::string env_command;
    int64_t env_workers = 1;      // environment processes per rollout rank
    double env_timeout_s = 30.0;  // per reset/step

    // Every field, for the rollout's settings on the wire (rlpt/protocol/args.h).
    template <typename V>
    void visit(V& v) {
        v("max_assistant_turns", max_assistant_turns);
        v("max_user_turns", max_user_turns);
        v("max_parallel_calls", max_parallel_calls);
        v("max_tool_response_length", max_tool_response_length);
        v("tool_response_truncate_side", tool_response_truncate_side);
        v("format", format);
        v("mcp_servers", mcp_servers);
        v("builtin_tools", builtin_tools);
        v("tool_timeout_s", tool_timeout_s);
        v("server_start_timeout_s", server_start_timeout_s);
        v("env_command", env_command);
        v("env_workers", env_workers);
        v("env_timeout_s", env_timeout_s);
    }
};

}  // namespace rlpt
