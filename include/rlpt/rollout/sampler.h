#pragma once
// Next-token choice for the rollout engine (generator.h), exposed for tests and tools.
//
// Random numbers: every sequence owns a counter-based stream. Draw number c (the index of the
// response token being sampled, 0-based) of the stream seeded with s is
//   uniform_draw(s, c) = (splitmix64_mix(s + (c + 1) * 0x9E3779B97F4A7C15) >> 11) * 2^-53,
// i.e. the (c+1)-th output of a SplitMix64 generator seeded with s, reduced to a double in
// [0, 1) with 53 random bits. No state is carried between steps, so a draw depends only on
// (seed, token index): never on the batch, the micro-batch or the order rows finish in.
//
// Choice for one row of fp32 logits z[0..V) (T = temperature):
//   greedy:   the first index of max z. Its log-prob is log_softmax(z / T) with T = temperature
//             when temperature > 0, else T = 1 (greedy with temperature 0 reports log-probs of
//             the untempered distribution).
//   sampling: p = softmax(z / T). Candidates are ranked by (z descending, index ascending).
//             top-k (k >= 1 and k < V): keep the k best-ranked tokens. top-p (< 1): among the
//             kept tokens, with probabilities renormalised over them, keep the smallest
//             best-ranked prefix whose cumulative probability reaches top_p (at least one token).
//             Then with u = uniform_draw(seed, c) walk the kept tokens in index order accumulating
//             p in double precision and take the first token whose running sum exceeds
//             u * (sum of kept p, also in double). Tokens with p = 0 are never chosen.
//   The filters need no sort: a radix select over the logits' bit patterns (three histogram
//   passes) finds the last kept rank, so a row costs a few passes over V even when the
//   nucleus holds most of the vocabulary. Prefix sums are in double; a nucleus boundary that
//   sits within rounding of top_p may differ from a sorted cumulative sum's by one token.
//   The reported log-prob is always log_softmax(z / T)[token] over the full vocabulary (the
//   unfiltered distribution, which is what the actor recomputes), never the filtered one.
//   Greedy rows get it from kernels::logprob_forward (the fused kernel the actor's log-prob
//   pass uses); sampled rows as log(softmax(z / T)[token]) from the fp32 probabilities the draw
//   used (a chosen token always has p > 0). The two agree to ~1e-6.
//   Consequences: top_k = 1 and a tiny top_p choose exactly the tokens greedy chooses.
// A row whose chosen log-prob is not finite (NaN or infinite logits) is a ValueError.
#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "rlpt/rollout/generator.h"

namespace rlpt::rollout {

// SplitMix64's output function (Steele, Lea, Flood 2014): a bijective 64-bit mixer.
uint64_t splitmix64_mix(uint64_t x);

// Uniform double in [0, 1), see the header comment. counter >= 0.
double uniform_draw(uint64_t seed, int64_t counter);

struct TokenChoices {
    std::vector<int64_t> tokens;   // [b]
    std::vector<float> log_probs;  // [b] log_softmax(z / T)[token]
};

// Chooses one token per row of `logits` ([b, V] float32 on the CPU; other dtypes are converted).
// CUDA logits are sampled on their device by choose_tokens_on_device (rollout/device_sampler.h: the
// same rule in torch ops, one [2, b] download per call; it may differ from this CPU path only where
// a draw or a nucleus boundary sits within double rounding of a running sum). Rows run in parallel on LibTorch's intra-op threads; each row's result does not
// depend on the thread count or on the other rows. `uniforms` holds one draw per row (ignored when params.greedy; may then be
// empty). Only the sampling fields of `params` are read (temperature, top_p, top_k, greedy);
// they must be valid (see validate_sampling_params).
TokenChoices choose_tokens(const torch::Tensor& logits, const SamplingParams& params,
                           const std::vector<double>& uniforms);

}  // namespace rlpt::rollout
