#pragma once
// The agent loop as a rollout generator (rollout.generator: tool_agent; DESIGN §4c, AGENTS §1).
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
// Scheduling: the conversations are a sequence source (rollout/sequence_source.h) of the one
// rollout engine (rollout/engine.h): rollout.max_num_seqs KV slots of (longest prompt + R - 1)
// positions, bounded by rollout.max_num_batched_tokens. A sample holds one slot from its first
// turn to its end. When its turn ends with tool calls (or an environment step) the slot is parked
// (its KV kept) and the other slots keep decoding; tool calls of different samples are in flight
// together. When the results are back, only the new tokens (the turn's last token and the
// observation, which ends with the next assistant header) are prefilled after what the slot holds,
// and the sample decodes its next turn: the conversation is never prefilled again. Samples whose
// first turn starts from identical tokens (the n samples of a prompt) share one prefill. The
// engine waits for tool results only when no slot can decode; a tensor-parallel rollout waits for
// every result before each decode step (lockstep, engine.h).
//
// Randomness: turn 0 of a sample uses its seed (a sample without tool calls is token-identical to
// the sampler's); turn t uses sample_seed(seed, t, 0), its token c draw c of that stream: results
// depend neither on batch composition nor on the schedule. A schedule that prefills the whole
// conversation each turn (tests/unit/turn_by_turn.h, the baseline of scripts/bench_agent.sh) gives
// the same tokens; log-probs agree to rounding, not bit for bit (the engine keeps the K/V each
// token got in its decode step, a different summation order), so a draw that falls within ~1e-6
// of a token boundary could differ.
//
// Per-sample outputs (GeneratorContext::sample_values): num_turns (verl: assistant + user turns + 1),
// tool_call_counts, tool_errors, tool_latency_s (sum over the sample's calls), tool_latency_max_s,
// observation_tokens, model_tokens (response tokens the model sampled), and with an environment
// env_reward (sum of its rewards) and env_errors.
//
// State (GeneratorContext::state, for the worker's life): the MCP servers (started on the first
// call, stopped with the worker) and the environment pool. Tool I/O runs on the calling thread
// (non-blocking pipes polled between decode steps): no threads and no MPI.
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlpt/agent/mcp_client.h"
#include "rlpt/agent/tool_call.h"
#include "rlpt/rollout/generators.h"
#include "rlpt/rollout/multi_turn_config.h"
#include "rlpt/rollout/sequence_source.h"

namespace rlpt::agent {

// The tools the config names, as the chat template lists them ({"type": "function", ...}):
// built-in tools first, then each MCP server's in tools/list order. Starts the servers to list
// them and stops them (the controller calls this to render prompts). IoError naming a server that
// fails to start.
std::vector<nlohmann::json> list_tool_schemas(const MultiTurnConfig& c);

// The tool agent on the rollout engine: open_conversations, rollout::run_engine, finish().
// ValueError as rollout::generate for bad prompts, params or limits.
rollout::GenerationOutput tool_agent_generate(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                              const std::vector<uint64_t>& seeds, const rollout::SamplingParams& params,
                                              const rollout::BatchLimits& limits, rollout::GeneratorContext& context);

// The conversations of one call as a sequence source: sequence i is sample i (prompt i, seed i);
// samples whose environment failed at reset are not queued. Turns end as the engine decides
// (EOS, stop ids and strings, the budget left); end_turn parks a sample whose turn holds tool
// calls (or steps its environment), collect() returns it with the rendered observation or ended.
class ConversationSource : public rollout::SequenceSource {
  public:
    // After the run: closes the environment episodes, fills context.sample_values and returns the
    // conversations in rollout::generate's shapes (observation tokens: response_mask 0, log-prob 0).
    virtual rollout::GenerationOutput finish() = 0;
};

// Opens the conversations of one call: starts the tool servers and the environment pool on first
// use (kept in context.state), then resets every sample's environment episode. prompts, seeds,
// params (params.max_new_tokens = R) and context must outlive the source. InternalError without
// context.tokenizer; ValueError when seeds and prompts differ in number.
std::unique_ptr<ConversationSource> open_conversations(const std::vector<std::vector<int64_t>>& prompts,
                                                       const std::vector<uint64_t>& seeds,
                                                       const rollout::SamplingParams& params,
                                                       rollout::GeneratorContext& context);

// Observation ids: o.pieces encoded with special-token text, o.texts without (a tool cannot inject
// control tokens; characters the tokenizer lacks are dropped).
std::vector<int64_t> encode_observation(const tokenizer::Tokenizer& tok, const ObservationPieces& o);

// A demonstrated conversation after the prompt, as the agent loop produces it, for SFT (verl's
// multi-turn SFT: loss on the assistant turns only). turns: [{"role": "assistant"|"tool",
// "content": TEXT}, ...], first and last the assistant's. Each assistant turn is its text (no
// special-token text) closed by the family's end-of-turn token (qwen2, qwen3 <|im_end|>) or eos_id
// (none; nothing when eos_id < 0), loss mask 1; each run of tool turns is the observation the
// loop appends (render_tool_observation with `options`, turn closed), loss mask 0: in the
// sequence, out of the loss, exactly like response_mask 0 in RL. ValueError naming the turn for
// anything else.
struct EncodedConversation {
    std::vector<int64_t> ids;
    std::vector<int64_t> loss_mask;  // same length
};
EncodedConversation encode_conversation(const tokenizer::Tokenizer& tok, tokenizer::ChatFamily family,
                                        const nlohmann::json& turns, int64_t eos_id,
                                        const tokenizer::ChatOptions& options = {});

}  // namespace rlpt::agent
