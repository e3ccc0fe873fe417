#pragma once
// Deterministic epoch sampler: the dataloader's order. Torch-free, single-threaded.
//
// Epoch e visits every index of [0, dataset_size) once, in the order epoch_permutation(e):
// a Fisher-Yates shuffle driven by SplitMix64 seeded from (seed, e) alone, so it never
// depends on the number of ranks, on batch sizes or on the standard library. With
// shuffle = false every epoch is 0, 1, 2, ...
//
// next_batch(b) returns the next b indices of the current epoch. When the epoch cannot
// supply them, the sampler moves to the next epoch first:
//   drop_last = true:  an epoch yields floor(n / b) batches; the last n % b indices are
//                      skipped (b > n is an error: no batch could ever be formed);
//   drop_last = false: the last batch of an epoch may be short.
// A batch never spans two epochs.
//
// state() / set_state() save and restore the position exactly. {epoch e, position n}
// (the epoch fully consumed, which is what a checkpoint taken after the last step of an
// epoch holds) resumes with epoch e + 1's first batch. So N steps straight give the same
// batches as N/2 steps, save, a new sampler, restore, N/2 steps.

#include <cstdint>
#include <vector>

namespace rlpt::data {

struct SamplerState {
    int64_t epoch = 0;         // epoch the next indices come from (unless it is consumed)
    int64_t position = 0;      // indices of `epoch` already returned, in [0, dataset_size]
    int64_t dataset_size = 0;  // checked on restore
    uint64_t seed = 0;         // checked on restore
};

class EpochSampler {
  public:
    // Throws ValueError when dataset_size < 1.
    EpochSampler(int64_t dataset_size, uint64_t seed, bool shuffle = true, bool drop_last = true);

    // The next batch of dataset indices (size batch_size, or shorter only at the end of an
    // epoch without drop_last). Throws ValueError when batch_size < 1, or when drop_last and
    // batch_size > dataset_size.
    std::vector<int64_t> next_batch(int64_t batch_size);

    SamplerState state() const;
    // Throws ConfigError when the state's dataset_size or seed differ from this sampler's
    // (resuming on different data), ValueError when epoch < 0 or position is outside
    // [0, dataset_size].
    void set_state(const SamplerState& state);

    // The visiting order of epoch `epoch` (a permutation of [0, dataset_size)).
    std::vector<int64_t> epoch_permutation(int64_t epoch) const;

    // Batches one epoch yields: floor(n / b) with drop_last, ceil(n / b) without.
    int64_t batches_per_epoch(int64_t batch_size) const;

    int64_t dataset_size() const { return dataset_size_; }
    uint64_t seed() const { return seed_; }
    int64_t epoch() const { return epoch_; }

  private:
    void start_epoch(int64_t epoch);

    int64_t dataset_size_;
    uint64_t seed_;
    bool shuffle_;
    bool drop_last_;
    int64_t epoch_ = 0;
    int64_t position_ = 0;
    std::vector<int64_t> order_;  // epoch_permutation(epoch_)
};

}  // namespace rlpt::data
