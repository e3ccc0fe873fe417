#pragma once
// Beam search (rollout.generator: beam_search), with vLLM's LLM.beam_search semantics.
//
// For each distinct prompt, with W = beam_width and log-probs lp = log_softmax(logits / T)
// (T = temperature when > 0, else 1: the distribution the actor recomputes, as for greedy):
//   beams = {empty response, cumulative log-prob 0}
//   each step (at most max_new_tokens): every live beam proposes its 2W most likely next tokens
//     (ties: lower id first), each with cumulative log-prob cum + lp[token]. A proposal ending
//     in eos_id or a stop token id is a finished hypothesis (kEos / kStop, the token kept); the
//     other proposals, ordered by cumulative log-prob (ties: earlier beam, then its more likely
//     token), give the next W live beams. The loop ends early only when no beam is live.
//   after the last step the live beams are finished hypotheses too (kLength);
//   every finished hypothesis is scored cum / L^length_penalty, L = its token count without a
//     final eos (at least 1), and the W best (ties: the one finished first) are the result, best
//     first.
// Differences from vLLM: L counts the response only (vLLM counts the prompt too, so there the
// length penalty barely acts on long prompts; Hugging Face counts the response, as here), and
// stop token ids finish a hypothesis as EOS does (vLLM's beam search knows only EOS).
// Stop strings are refused (ValueError): vLLM's beam search has none either.
//
// Rows: rows with identical prompts share one search; row i returns the beam of rank
// sample_rank[i] (0 = best), so a prompt's n samples (rollout.n <= W) are its n best beams. When
// a search finishes with fewer than W hypotheses (a vocabulary of mostly stop ids), rank k takes
// hypothesis k mod count. The rollout log-probs of a row are its beam's per-token lp, so their
// sum is the beam's cumulative log-prob. Beams fork the KV cache (KVCache::fork_rows) instead of
// recomputing the prefix. With params.token_texts, texts[i] is the beam's text.
#include <cstdint>
#include <vector>

#include "rlpt/rollout/generator.h"

namespace rlpt::rollout {

struct BeamSearchParams {
    int64_t beam_width = 4;       // W >= 1
    double length_penalty = 1.0;  // finite; 0: rank by cumulative log-prob alone
    template <typename V>
    void visit(V& v) {  // every field, for the rollout's settings on the wire (rlpt/protocol/args.h)
        v("beam_width", beam_width);
        v("length_penalty", length_penalty);
    }
};

// ValueError naming the field for beam_width < 1 or a non-finite length_penalty.
void validate_beam_search_params(const BeamSearchParams& p);

// `sample_rank`: empty (every row gets the best beam) or one rank per prompt in [0, W).
// Distinct prompts are searched `max(1, micro_batch_size / W)` at a time. Reads temperature,
// max_new_tokens, eos_id, stop_token_ids, pad_id, token_texts of `params` (the sampling fields
// and seeds are unused: the search is deterministic). Errors as generate()'s, plus the above.
GenerationOutput beam_search(model::CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                             const SamplingParams& params, const BeamSearchParams& beam,
                             const std::vector<int64_t>& sample_rank, int64_t micro_batch_size = 256);

// The score the final ranking uses: cum / L^length_penalty with L = max(1, n_tokens - ends_in_eos).
double beam_score(double cumulative_log_prob, int64_t n_tokens, bool ends_in_eos, double length_penalty);

}  // namespace rlpt::rollout
