// Deterministic epoch sampler: order, drop_last, and exact resume (including at an epoch
// boundary, where verl once resumed into zero training steps).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "rlpt/core/error.h"
#include "rlpt/data/sampler.h"

using rlpt::data::EpochSampler;
using rlpt::data::SamplerState;

namespace {

std::vector<int64_t> slice(const std::vector<int64_t>& v, int64_t begin, int64_t end) {
    return std::vector<int64_t>(v.begin() + begin, v.begin() + end);
}

}  // namespace

TEST(DataSampler, PermutationMatchesIndependentReference) {
    // SplitMix64 + Fisher-Yates computed independently in Python for (seed, epoch).
    EpochSampler s42(10, 42);
    EXPECT_EQ(s42.epoch_permutation(0), (std::vector<int64_t>{7, 2, 0, 5, 8, 3, 4, 9, 6, 1}));
    EXPECT_EQ(s42.epoch_permutation(1), (std::vector<int64_t>{7, 3, 0, 1, 8, 5, 9, 6, 2, 4}));
    EXPECT_EQ(EpochSampler(10, 7).epoch_permutation(0), (std::vector<int64_t>{8, 9, 0, 4, 3, 2, 6, 5, 7, 1}));
}

TEST(DataSampler, EveryEpochIsAPermutationAndDependsOnlyOnSeedAndEpoch) {
    EpochSampler a(1000, 5, true, true);
    EpochSampler b(1000, 5, true, false);  // drop_last does not change the order
    for (int64_t epoch : {0, 1, 17}) {
        std::vector<int64_t> p = a.epoch_permutation(epoch);
        EXPECT_EQ(p, b.epoch_permutation(epoch));
        std::vector<int64_t> sorted = p;
        std::sort(sorted.begin(), sorted.end());
        std::vector<int64_t> iota(1000);
        std::iota(iota.begin(), iota.end(), int64_t{0});
        EXPECT_EQ(sorted, iota);
        EXPECT_NE(p, iota);
    }
    EXPECT_NE(a.epoch_permutation(0), a.epoch_permutation(1));
    EXPECT_NE(a.epoch_permutation(0), EpochSampler(1000, 6).epoch_permutation(0));
    // Batch size does not change which indices come in which order.
    EpochSampler by1(12, 3, true, false), by4(12, 3, true, false);
    std::vector<int64_t> seq1, seq4;
    for (int i = 0; i < 24; ++i) {
        auto x = by1.next_batch(1);
        seq1.insert(seq1.end(), x.begin(), x.end());
    }
    for (int i = 0; i < 6; ++i) {
        auto x = by4.next_batch(4);
        seq4.insert(seq4.end(), x.begin(), x.end());
    }
    EXPECT_EQ(seq1, seq4);
}

TEST(DataSampler, NoShuffleIsIdentity) {
    EpochSampler s(5, 99, false, false);
    EXPECT_EQ(s.next_batch(2), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(s.next_batch(2), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(s.next_batch(2), (std::vector<int64_t>{4}));  // short last batch
    EXPECT_EQ(s.next_batch(2), (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(s.epoch(), 1);
}

TEST(DataSampler, DropLastSkipsTheRemainder) {
    EpochSampler s(10, 1, true, true);
    const auto p0 = s.epoch_permutation(0), p1 = s.epoch_permutation(1);
    EXPECT_EQ(s.batches_per_epoch(3), 3);
    EXPECT_EQ(s.next_batch(3), slice(p0, 0, 3));
    EXPECT_EQ(s.next_batch(3), slice(p0, 3, 6));
    EXPECT_EQ(s.next_batch(3), slice(p0, 6, 9));
    SamplerState st = s.state();
    EXPECT_EQ(st.epoch, 0);
    EXPECT_EQ(st.position, 9);
    EXPECT_EQ(s.next_batch(3), slice(p1, 0, 3));  // p0[9] is dropped
    EXPECT_EQ(s.epoch(), 1);
}

TEST(DataSampler, KeepLastGivesAShortBatch) {
    EpochSampler s(10, 1, true, false);
    const auto p0 = s.epoch_permutation(0), p1 = s.epoch_permutation(1);
    EXPECT_EQ(s.batches_per_epoch(4), 3);
    EXPECT_EQ(s.next_batch(4), slice(p0, 0, 4));
    EXPECT_EQ(s.next_batch(4), slice(p0, 4, 8));
    EXPECT_EQ(s.next_batch(4), slice(p0, 8, 10));
    EXPECT_EQ(s.next_batch(4), slice(p1, 0, 4));
    // A batch larger than the dataset is one whole epoch without drop_last.
    EpochSampler big(3, 1, false, false);
    EXPECT_EQ(big.next_batch(5), (std::vector<int64_t>{0, 1, 2}));
}

TEST(DataSampler, ResumeAtEpochBoundaryStartsTheNextEpoch) {
    EpochSampler s(8, 11, true, true);
    s.next_batch(4);
    s.next_batch(4);
    const SamplerState saved = s.state();
    EXPECT_EQ(saved.epoch, 0);
    EXPECT_EQ(saved.position, 8);  // epoch 0 fully consumed

    EpochSampler resumed(8, 11, true, true);
    resumed.set_state(saved);
    const std::vector<int64_t> first = resumed.next_batch(4);
    EXPECT_EQ(first, slice(resumed.epoch_permutation(1), 0, 4));
    EXPECT_EQ(resumed.state().epoch, 1);
    EXPECT_EQ(resumed.state().position, 4);
    EXPECT_EQ(first, s.next_batch(4));  // same as never stopping
}

TEST(DataSampler, HalfSaveRestoreHalfEqualsStraightRun) {
    struct Case {
        int64_t n, batch;
        bool drop_last;
        int steps;
    };
    for (const Case& c : {Case{10, 3, true, 12}, Case{10, 4, false, 12}, Case{8, 4, true, 8}, Case{8, 4, true, 4},
                          Case{7, 7, true, 6}, Case{5, 2, false, 10}}) {
        SCOPED_TRACE(::testing::Message()
                     << "n=" << c.n << " batch=" << c.batch << " drop_last=" << c.drop_last << " steps=" << c.steps);
        EpochSampler straight(c.n, 2024, true, c.drop_last);
        std::vector<std::vector<int64_t>> expected;
        for (int i = 0; i < c.steps; ++i) expected.push_back(straight.next_batch(c.batch));

        EpochSampler first(c.n, 2024, true, c.drop_last);
        std::vector<std::vector<int64_t>> got;
        for (int i = 0; i < c.steps / 2; ++i) got.push_back(first.next_batch(c.batch));
        const SamplerState saved = first.state();
        EpochSampler second(c.n, 2024, true, c.drop_last);
        second.set_state(saved);
        for (int i = c.steps / 2; i < c.steps; ++i) got.push_back(second.next_batch(c.batch));
        EXPECT_EQ(got, expected);
        for (const auto& b : got) EXPECT_FALSE(b.empty());
    }
}

TEST(DataSampler, RestoreValidatesTheState) {
    EpochSampler s(10, 3);
    SamplerState st = s.state();
    EXPECT_EQ(st.dataset_size, 10);
    EXPECT_EQ(st.seed, 3u);

    SamplerState other_size = st;
    other_size.dataset_size = 11;
    try {
        s.set_state(other_size);
        FAIL() << "no throw";
    } catch (const rlpt::ConfigError& e) {
        EXPECT_NE(e.message().find("dataset of 11 prompts, this dataset has 10"), std::string::npos) << e.message();
    }
    SamplerState other_seed = st;
    other_seed.seed = 4;
    EXPECT_THROW(s.set_state(other_seed), rlpt::ConfigError);
    SamplerState bad = st;
    bad.position = 11;
    EXPECT_THROW(s.set_state(bad), rlpt::ValueError);
    bad.position = -1;
    EXPECT_THROW(s.set_state(bad), rlpt::ValueError);
    bad = st;
    bad.epoch = -1;
    EXPECT_THROW(s.set_state(bad), rlpt::ValueError);
    // A rejected state leaves the sampler untouched.
    EXPECT_EQ(s.next_batch(2), slice(s.epoch_permutation(0), 0, 2));
}

TEST(DataSampler, BadArguments) {
    EXPECT_THROW(EpochSampler(0, 1), rlpt::ValueError);
    EpochSampler s(4, 1, true, true);
    EXPECT_THROW(s.next_batch(0), rlpt::ValueError);
    try {
        s.next_batch(5);
        FAIL() << "no throw";
    } catch (const rlpt::ValueError& e) {
        EXPECT_NE(e.message().find("batch size 5 exceeds the dataset size 4"), std::string::npos) << e.message();
    }
    EXPECT_THROW(s.batches_per_epoch(0), rlpt::ValueError);
    EXPECT_THROW(s.epoch_permutation(-1), rlpt::ValueError);
}
