#pragma once
// A sequence source: what the rollout engine (rollout/engine.h) generates. The engine owns the
// KV slots, prefills, decode steps and sampling; the source owns the sequences: which ones there
// are, how each turn is seeded and bounded, what a finished turn means, and what (if anything)
// is appended before the next turn. The plain sampler (rollout::generate) is the trivial source:
// a list of prompts, one turn each, never parked. The tool agent (agent/tool_agent.h) is a
// source whose conversations park while their tools run and resume with the observation.
//
// Call order (one engine run, on the calling thread; an exception from a call ends the run):
//   1. sequences() once, then bounds() once.
//   2. A sequence is admitted in the order sequences() lists it, when a slot is free:
//      start_turn(id), then its turn is sampled.
//   3. When the turn ends (EOS, a stop id, a stop string, or spec.max_tokens tokens), end_turn(id,
//      turn). false: the sequence is finished and its slot freed. true: it is *parked*: it keeps
//      its slot and its K/V while the other slots go on decoding.
//   4. collect(timeout) is called only while at least one sequence is parked. It returns the
//      parked sequences whose continuation is ready, each exactly once (in any order, possibly
//      none), waiting up to timeout_s for the first when none is. A sequence returned `finished`
//      frees its slot; any other gets start_turn(id) and resumes: the turn's last token (sampled,
//      never fed) and `tokens` are prefilled after what its slot holds, and its next turn is
//      sampled from there. Back to 3.
//   The run ends when every sequence is finished.
//
// Ownership: the engine copies what it needs out of every argument and return value; a Turn's
// views are valid during the end_turn call only. The source outlives the run.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "rlpt/rollout/generator.h"

namespace rlpt::rollout {

// A sequence to generate: the source's id for it (each id once per run) and the tokens its first
// turn is sampled after (non-empty, ids in the vocabulary).
struct QueuedSequence {
    size_t id = 0;
    std::vector<int64_t> tokens;
};

// What bounds every sequence of the run: its first tokens (prompt) hold at most longest_prompt
// tokens, and everything added after them (turns and appended tokens) at most response_budget.
// A slot of the KV cache holds longest_prompt + response_budget - 1 positions (the last token is
// never fed); the source must keep its sequences within that.
struct SequenceBounds {
    int64_t longest_prompt = 0;
    int64_t response_budget = 0;
};

// One turn's settings.
struct TurnSpec {
    uint64_t seed = 0;       // the turn's random stream: its token c is drawn with uniform_draw(seed, c)
    int64_t max_tokens = 1;  // the turn ends with kLength after this many tokens (>= 1)
};

// A finished turn.
struct Turn {
    std::span<const int64_t> tokens;   // what was sampled, the token that ended the turn last
    std::span<const float> log_probs;  // one per token: log softmax(logits / T)[token]
    FinishReason finish = FinishReason::kLength;
    // The turn's text as stop_strings.h shows it (cut at a stop string) when the sampling
    // parameters have token_texts, else empty.
    std::string text;
    // With SamplingParams::record_routes on a mixture-of-experts model: the experts of every
    // position the sequence's slot holds, [positions, num_moe_layers, top_k] int64 on the host
    // (its first tokens, every turn so far and what was appended, this turn's last token
    // excluded: it was never fed). Undefined otherwise.
    torch::Tensor routes;
};

// What a parked sequence does next.
struct Continuation {
    size_t id = 0;
    bool finished = false;        // true: the sequence ends here (tokens are not read)
    std::vector<int64_t> tokens;  // else: appended after the turn before the next one (may be empty)
};

class SequenceSource {
  public:
    virtual ~SequenceSource() = default;
    // The run's sequences, in the order they are admitted.
    virtual std::vector<QueuedSequence> sequences() = 0;
    virtual SequenceBounds bounds() const = 0;
    // The next turn of sequence `id`: its first at admission, the next at each resumption.
    virtual TurnSpec start_turn(size_t id) = 0;
    // Turn ended; true parks the sequence (see the call order).
    virtual bool end_turn(size_t id, const Turn& turn) = 0;
    // Ready continuations of parked sequences. A source whose end_turn never returns true need not
    // override it (the default throws InternalError: a parked sequence could never resume).
    virtual std::vector<Continuation> collect(double timeout_s);
};

}  // namespace rlpt::rollout
