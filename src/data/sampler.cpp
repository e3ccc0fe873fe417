#include "rlpt/data/sampler.h"

#include <numeric>
#include <utility>

#include "data/rng.h"
#include "rlpt/core/error.h"

namespace rlpt::data {

namespace {
constexpr uint64_t kEpochSalt = 0x65706F6368ULL;  // "epoch"
}  // namespace

EpochSampler::EpochSampler(int64_t dataset_size, uint64_t seed, bool shuffle, bool drop_last)
    : dataset_size_(dataset_size), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
    RLPT_CHECK(dataset_size >= 1, "sampler: dataset size must be >= 1, got {}", dataset_size);
    start_epoch(0);
}

std::vector<int64_t> EpochSampler::epoch_permutation(int64_t epoch) const {
    RLPT_CHECK(epoch >= 0, "sampler: epoch must be >= 0, got {}", epoch);
    std::vector<int64_t> order(static_cast<std::size_t>(dataset_size_));
    std::iota(order.begin(), order.end(), int64_t{0});
    if (!shuffle_) return order;
    detail::SplitMix64 rng(detail::mix64(seed_) ^ detail::mix64(static_cast<uint64_t>(epoch) + kEpochSalt));
    for (std::size_t i = order.size() - 1; i > 0; --i) {
        std::size_t j = static_cast<std::size_t>(rng.below(i + 1));
        std::swap(order[i], order[j]);
    }
    return order;
}

void EpochSampler::start_epoch(int64_t epoch) {
    epoch_ = epoch;
    position_ = 0;
    order_ = epoch_permutation(epoch);
}

std::vector<int64_t> EpochSampler::next_batch(int64_t batch_size) {
    RLPT_CHECK(batch_size >= 1, "sampler: batch size must be >= 1, got {}", batch_size);
    RLPT_CHECK(!drop_last_ || batch_size <= dataset_size_,
               "sampler: batch size {} exceeds the dataset size {} with drop_last: no batch can be formed", batch_size,
               dataset_size_);
    const int64_t remaining = dataset_size_ - position_;
    if (remaining == 0 || (drop_last_ && remaining < batch_size)) start_epoch(epoch_ + 1);
    const int64_t take = std::min(batch_size, dataset_size_ - position_);
    std::vector<int64_t> batch(order_.begin() + position_, order_.begin() + position_ + take);
    position_ += take;
    return batch;
}

SamplerState EpochSampler::state() const {
    SamplerState s;
    s.epoch = epoch_;
    s.position = position_;
    s.dataset_size = dataset_size_;
    s.seed = seed_;
    return s;
}

void EpochSampler::set_state(const SamplerState& s) {
    RLPT_CHECK_KIND(ConfigError, s.dataset_size == dataset_size_,
                    "sampler: the saved state is for a dataset of {} prompts, this dataset has {} (resuming on "
                    "different data or filtering?)",
                    s.dataset_size, dataset_size_);
    RLPT_CHECK_KIND(ConfigError, s.seed == seed_, "sampler: the saved state used seed {}, this sampler uses seed {}",
                    s.seed, seed_);
    RLPT_CHECK(s.epoch >= 0, "sampler: saved epoch must be >= 0, got {}", s.epoch);
    RLPT_CHECK(s.position >= 0 && s.position <= dataset_size_, "sampler: saved position {} is outside [0, {}]",
               s.position, dataset_size_);
    if (s.epoch != epoch_) order_ = epoch_permutation(s.epoch);
    epoch_ = s.epoch;
    position_ = s.position;
}

int64_t EpochSampler::batches_per_epoch(int64_t batch_size) const {
    RLPT_CHECK(batch_size >= 1, "sampler: batch size must be >= 1, got {}", batch_size);
    return drop_last_ ? dataset_size_ / batch_size : (dataset_size_ + batch_size - 1) / batch_size;
}

}  // namespace rlpt::data
