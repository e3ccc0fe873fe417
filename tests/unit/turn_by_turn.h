#pragma once
// The turn-by-turn schedule, test code only: rlpt's agent loop before continuous batching, kept
// as the reference the engine's schedule (rollout/engine.h) is compared with
// (tests/unit/test_agent_loop.cpp, test_rollout_engine.cpp) and as the peer figure of
// scripts/bench_agent.sh. It drives any rollout::SequenceSource in the order its contract gives
// (sequence_source.h), but in rounds: one generation call per turn over every sequence still
// going, each prompted with its whole sequence so far (prompt, turns, appended tokens: prefilled
// again every turn), then a barrier on every parked sequence's continuation.
// The generation call is a parameter: rollout::generate for the reference, a script for tests of
// a source's logic (it must return responses, response_mask, rollout_log_probs and
// finish_reasons; texts when the sampling parameters have token_texts).
#include <algorithm>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "rlpt/rollout/generator.h"
#include "rlpt/rollout/sequence_source.h"

namespace rlpt::rollout::testing {

using TurnGenerator = std::function<GenerationOutput(const std::vector<std::vector<int64_t>>& prompts,
                                                     const std::vector<uint64_t>& seeds, const SamplingParams& params)>;

// Runs every sequence of `source` to its end. Each round's call gets max_new_tokens = the largest
// TurnSpec::max_tokens of the round; a row longer than its own is cut there (kLength).
inline void run_turn_by_turn(SequenceSource& source, const TurnGenerator& generate_turn, const SamplingParams& params) {
    std::map<size_t, std::vector<int64_t>> sequence;  // by id: everything so far
    std::vector<size_t> active;
    for (auto& q : source.sequences()) {
        active.push_back(q.id);
        sequence[q.id] = std::move(q.tokens);
    }
    std::sort(active.begin(), active.end());
    while (!active.empty()) {
        std::vector<std::vector<int64_t>> prompts;
        std::vector<uint64_t> seeds;
        std::vector<int64_t> budget;
        SamplingParams p = params;
        p.max_new_tokens = 1;
        for (size_t id : active) {
            const TurnSpec spec = source.start_turn(id);
            prompts.push_back(sequence[id]);
            seeds.push_back(spec.seed);
            budget.push_back(spec.max_tokens);
            p.max_new_tokens = std::max(p.max_new_tokens, spec.max_tokens);
        }
        const GenerationOutput g = generate_turn(prompts, seeds, p);
        const auto responses = g.responses.contiguous();
        const auto log_probs = g.rollout_log_probs.contiguous();
        size_t parked = 0;
        for (size_t j = 0; j < active.size(); ++j) {
            const auto row = static_cast<int64_t>(j);
            const int64_t n = g.response_mask[row].sum().item<int64_t>();
            const int64_t cut = std::min(n, budget[j]);
            const std::span<const int64_t> tokens(responses[row].data_ptr<int64_t>(), static_cast<size_t>(cut));
            const std::span<const float> lps(log_probs[row].data_ptr<float>(), static_cast<size_t>(cut));
            const Turn turn{tokens, lps, cut < n ? FinishReason::kLength : g.finish_reasons[j],
                            g.texts.empty() ? std::string() : g.texts[j]};
            if (source.end_turn(active[j], turn)) {
                sequence[active[j]].insert(sequence[active[j]].end(), tokens.begin(), tokens.end());
                ++parked;
            }
        }
        // The round's tools and environment steps all finish before the next turn (a barrier).
        std::vector<size_t> next;
        while (parked > 0) {
            for (const auto& c : source.collect(3600.0)) {
                --parked;
                if (c.finished) continue;
                sequence[c.id].insert(sequence[c.id].end(), c.tokens.begin(), c.tokens.end());
                next.push_back(c.id);
            }
        }
        std::sort(next.begin(), next.end());
        active.swap(next);
    }
}

}  // namespace rlpt::rollout::testing
