#pragma once
// The agent loop as a rollout generator (rollout.generator: tool_agent; DESIGN §4c, AGENTS.md §1).
//
// Per sample, with R = params.max_new_tokens the budget of the whole response (model and
// observation tokens together, verl's response_length):
//   GENERATING  all active samples of a turn are generated together by rollout::generate, each from
//               its whole token list so far (prompt + response), the new ids appended verbatim with
//               response_mask 1 and their log-probs. A sample stops at R tokens, at
//               max_assistant_turns, or when its turn holds no tool call (and no environment runs).
//   TOOLS       the turn's calls (first max_parallel_calls; the rest are dropped) of every sample run
//               together: MCP calls are all in flight at once (agent/mcp_client.h), the built-in
//               calculator inline. Malformed calls, unknown tools and arguments failing the tool's
//               input schema become error observations without a call. With an environment
//               (env_command) the turn's text is its action instead; its reward is summed and
//               done ends the sample.
//   OBSERVING   the results, truncated to max_tool_response_length characters, rendered as the chat
//               template's tool turn (agent/tool_call.h) and appended with response_mask 0 and
//               rollout log-prob 0: in the sequence (attended) but out of every loss, entropy and
//               KL. An observation that would reach R is not appended and the sample ends, so a
//               response always ends on model tokens. Then back to GENERATING (max_user_turns caps
//               these observation turns).
// Scheduling: a turn is one rollout::generate over the samples still active, so a sample waiting
// for its tools waits for its turn-mates' generation, and vice versa (no continuous batching yet).
//
// Randomness: turn 0 of a sample uses its seed (a sample without tool calls is token-identical to
// the sampler's); turn t uses sample_seed(seed, t, 0), so results do not depend on batch
// composition.
//
// Per-sample outputs (GeneratorContext::sample_values): num_turns (verl: assistant + user turns + 1),
// tool_call_counts, tool_errors, tool_latency_s (sum over the sample's calls), tool_latency_max_s,
// observation_tokens, model_tokens (response tokens the model sampled), and with an environment
// env_reward (sum of its rewards) and env_errors.
//
// State (GeneratorContext::state, for the worker's life): the MCP servers (started on the first
// call, stopped with the worker) and the environment pool. Tool I/O uses no threads and no MPI.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlpt/agent/mcp_client.h"
#include "rlpt/config/config.h"
#include "rlpt/rollout/generators.h"

namespace rlpt::agent {

// The tools the config names, as the chat template lists them ({"type": "function", ...}):
// built-in tools first, then each MCP server's in tools/list order. Starts the servers to list
// them and stops them (the controller calls this to render prompts). IoError naming a server that
// fails to start.
std::vector<nlohmann::json> list_tool_schemas(const MultiTurnConfig& c);

// The built-in calculator: arguments {"expression": "12*(3+4)"} with + - * / and parentheses over
// decimal numbers. Its schema, and its result (integers printed without a fraction; errors, e.g.
// division by zero, as an error result).
nlohmann::json calculator_schema();
ToolResult run_calculator(const nlohmann::json& arguments);

rollout::GenerationOutput tool_agent_generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                              int64_t micro_batch_size, rollout::GeneratorContext& context);

// The loop with its generation step as a parameter (tool_agent_generate passes rollout::generate;
// tests script the model's turns). The loop reads responses, response_mask, rollout_log_probs and
// finish_reasons of each turn's output.
using TurnGenerator = std::function<rollout::GenerationOutput(
    const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params)>;
rollout::GenerationOutput run_agent_loop(const TurnGenerator& generate_turn, const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                         rollout::GeneratorContext& context);

}  // namespace rlpt::agent
