#pragma once
// The agent loop as a rollout generator (rollout.generator: tool_agent; DESIGN §4c, AGENTS.md §1).
//
// Per sample, with R = params.max_new_tokens the budget of the whole response (model and
// observation tokens together, verl's response_length):
//   GENERATING  the sample's turn is sampled from its whole conversation so far (prompt +
//               response), the new ids appended verbatim with response_mask 1 and their log-probs.
//               A sample stops at R tokens, at max_assistant_turns, or when its turn holds no tool
//               call (and no environment runs).
//   TOOLS       the turn's calls (first max_parallel_calls; the rest are dropped) are dispatched
//               asynchronously: MCP calls are written to their servers at once and collected by
//               polling (agent/mcp_client.h submit/poll), the built-in calculator runs inline.
//               Malformed calls, unknown tools and arguments failing the tool's input schema
//               become error observations without a call. With an environment (env_command) the
//               turn's text is its action instead (EnvironmentPool::submit_step); its reward is
//               summed and done ends the sample.
//   OBSERVING   when all of the sample's results are back: truncated to max_tool_response_length
//               characters, rendered as the chat template's tool turn (agent/tool_call.h) and
//               appended with response_mask 0 and rollout log-prob 0: in the sequence (attended) but
//               out of every loss, entropy and KL. An observation that would reach R is not
//               appended and the sample ends, so a response always ends on model tokens. Then back
//               to GENERATING (max_user_turns caps these observation turns).
// Scheduling (tool_agent_generate = continuous_agent_loop): continuous batching over KV slots as
// in rollout::generate (generator.h): rollout.max_num_seqs slots of (longest prompt + R - 1)
// positions, bounded by rollout.max_num_batched_tokens. A sample holds one slot from its first
// turn to its end. When its turn ends with tool calls the slot is parked (its KV kept) and the
// other slots keep decoding; tool calls of different samples are in flight together. When the
// results are back, only the new tokens (the turn's last token, never fed yet, and the
// observation, which ends with the next assistant header) are prefilled after what the slot
// holds (KVCache extend), and the sample decodes its next turn: the conversation is never
// prefilled again (prefix reuse across turns). A finished sample frees its slot for the next
// waiting sample. Samples whose first turn starts from identical tokens (the n samples of a
// prompt) share one prefill (copied into their slots). The engine waits for tool results only when
// no slot can decode. Tensor-parallel rollout (model.tp()): every rank of the block must make the
// same batching decisions, so the engine waits for all results out before each decode step
// (lockstep; results are the same, tool waits overlap less).
// run_agent_loop is the turn-by-turn schedule (rlpt's loop before continuous batching): one
// generation call per turn over the samples still active, then a barrier on every tool result; it
// remains for scripted tests (TurnGenerator) and as the baseline of scripts/bench_agent.sh.
//
// Randomness: turn 0 of a sample uses its seed (a sample without tool calls is token-identical to
// the sampler's); turn t uses sample_seed(seed, t, 0), its token c draw c of that stream: results
// depend neither on batch composition nor on the schedule. Both schedules give the same tokens;
// log-probs agree to rounding, not bit for bit: the turn-by-turn loop recomputes the conversation's
// K/V in one prefill per turn, the continuous one keeps the K/V each token got in its decode step
// (a different summation order), so a draw that falls within ~1e-6 of a token boundary could
// differ (tests/unit/test_agent_loop.cpp compares both, and slot counts, on a tiny model).
//
// Per-sample outputs (GeneratorContext::sample_values): num_turns (verl: assistant + user turns + 1),
// tool_call_counts, tool_errors, tool_latency_s (sum over the sample's calls), tool_latency_max_s,
// observation_tokens, model_tokens (response tokens the model sampled), and with an environment
// env_reward (sum of its rewards) and env_errors.
//
// State (GeneratorContext::state, for the worker's life): the MCP servers (started on the first
// call, stopped with the worker) and the environment pool. Tool I/O runs on the calling thread
// (non-blocking pipes polled between decode steps): no threads and no MPI.
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlpt/agent/mcp_client.h"
#include "rlpt/agent/tool_call.h"
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
                                              int64_t max_num_seqs, rollout::GeneratorContext& context);

// The continuous schedule with explicit engine limits (limits.continuous and share_prefixes are
// not read). ValueError as rollout::generate for bad prompts, params or limits.
rollout::GenerationOutput continuous_agent_loop(model::CausalLM& model,
                                                const std::vector<std::vector<int64_t>>& prompts,
                                                const std::vector<uint64_t>& seeds,
                                                const rollout::SamplingParams& params,
                                                const rollout::BatchLimits& limits, rollout::GeneratorContext& context);

// Observation ids: o.pieces encoded with special-token text, o.texts without (a tool cannot inject
// control tokens; characters the tokenizer lacks are dropped).
std::vector<int64_t> encode_observation(const tokenizer::Tokenizer& tok, const ObservationPieces& o);

// A demonstrated conversation after the prompt, as the agent loop produces it, for SFT (verl's
// multi-turn SFT: loss on the assistant turns only). turns: [{"role": "assistant"|"tool",
// "content": TEXT}, ...], first and last the assistant's. Each assistant turn is its text (no
// special-token text) closed by the family's end-of-turn token (qwen2 <|im_end|>) or eos_id
// (none; nothing when eos_id < 0), loss mask 1; each run of tool turns is the observation the
// loop appends (render_tool_observation, turn closed), loss mask 0: in the sequence, out of the
// loss, exactly like response_mask 0 in RL. ValueError naming the turn for anything else.
struct EncodedConversation {
    std::vector<int64_t> ids;
    std::vector<int64_t> loss_mask;  // same length
};
EncodedConversation encode_conversation(const tokenizer::Tokenizer& tok, tokenizer::ChatFamily family,
                                        const nlohmann::json& turns, int64_t eos_id);

// The turn-by-turn loop with its generation step as a parameter (tests script the model's turns;
// scripts/bench_agent.sh passes rollout::generate). The loop reads responses, response_mask,
// rollout_log_probs and finish_reasons of each turn's output.
using TurnGenerator =
    std::function<rollout::GenerationOutput(const std::vector<std::vector<int64_t>>& prompts,
                                            const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params)>;
rollout::GenerationOutput run_agent_loop(const TurnGenerator& generate_turn,
                                         const std::vector<std::vector<int64_t>>& prompts,
                                         const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                         rollout::GeneratorContext& context);

}  // namespace rlpt::agent
