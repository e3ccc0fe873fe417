#pragma once
// The random streams of a run, named in one place (torch-free).
//
// Rollout samples. Every sample draws from its own stream,
//     rollout::sample_seed(trainer.seed, stream, sample_index),
// and no two purposes share a (stream, sample_index) pair:
//   purpose              stream                          sample_index
//   training rollouts    step                 (< 2^40)   training_sample_index(step, round, rows) + i
//                                                          (< 2^41: checked)
//   ReMax baselines      step                            2^41 + i         (kBaselineIndexBase)
//   validation           2^40 + step                     first row of the chunk * n + i
//   SFT validation       step (an SFT run has no training rollouts)
// Disjointness: training indices stay below kBaselineIndexBase and training streams below
// kValidationStreamBase; a step has at most kMaxGenRoundsPerStep generation rounds (dynamic
// sampling), so the indices of consecutive steps never overlap.
//
// Training engines: the actor's and the critic's engine seeds (their own torch generators).
// Losses that draw (clip_cov) key a stream by (run seed, optimizer step, DP rank, micro-batch)
// with roles/train_common.h stream_seed().
#include <cstdint>

#include "rlpt/core/error.h"

namespace rlpt::streams {

constexpr int64_t kValidationStreamBase = int64_t(1) << 40;
constexpr int64_t kBaselineIndexBase = int64_t(1) << 41;
constexpr int64_t kMaxGenRoundsPerStep = 1000;

inline int64_t validation_stream(int64_t step) { return kValidationStreamBase + step; }

// The first sample index of generation round `round` (0-based) of training step `step`, whose
// rounds have `rows` samples each.
inline int64_t training_sample_index(int64_t step, int64_t round, int64_t rows) {
    RLPT_CHECK(round < kMaxGenRoundsPerStep,
               "step {}: more than {} generation rounds in one step (the random streams "
               "of the next step would repeat)",
               step + 1, kMaxGenRoundsPerStep);
    const int64_t first = (step * kMaxGenRoundsPerStep + round) * rows;
    RLPT_CHECK(first + rows <= kBaselineIndexBase,
               "step {}: training sample indices reach 2^41 (the ReMax baseline "
               "streams); too many steps x samples per step",
               step + 1);
    return first;
}

inline int64_t baseline_sample_index(int64_t row) { return kBaselineIndexBase + row; }

inline uint64_t actor_engine_seed(int64_t run_seed) { return static_cast<uint64_t>(run_seed) * 7919 + 17; }
inline uint64_t critic_engine_seed(int64_t run_seed) { return static_cast<uint64_t>(run_seed) * 104729 + 3; }

}  // namespace rlpt::streams
