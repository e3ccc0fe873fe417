// Sequence balancing. Partition vectors marked "verl" were produced once by running verl's own
// seqlen_balancing functions (karmarkar_karp, greedy_partition, get_seqlen_balanced_partitions and
// the rearrange/_balance_batch orderings) under /usr/bin/python3 on these inputs; rlpt must give
// exactly the same index lists. the vector of ALGORITHMS §4 (sums [148,154,149,145]) could not be
// reproduced: its inputs are not given. Properties and small hand cases cover the rest.
#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "rlpt/algo/seqlen_balancing.h"
#include "test_algo_util.h"

namespace rlpt::algo {
namespace {

// From verl's test script: random.Random(42), randint(1, 1000) x 20.
const std::vector<int64_t> kVals = {655, 115, 26,  760, 282, 251, 229, 143, 755, 105,
                                    693, 759, 914, 559, 90,  605, 433, 33,  31,  96};
// random.Random(42) continued: randint(20, 100) x 16 (sum 1007).
const std::vector<int64_t> kSeq = {47, 49, 84, 97, 23, 91, 45, 89, 73, 48, 77, 95, 55, 20, 40, 74};

int64_t part_sum(const std::vector<int64_t>& vals, const std::vector<int64_t>& part) {
    int64_t s = 0;
    for (auto i : part) s += vals[i];
    return s;
}

int64_t spread(const std::vector<int64_t>& vals, const Partitions& parts) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const auto& p : parts) {
        lo = std::min(lo, part_sum(vals, p));
        hi = std::max(hi, part_sum(vals, p));
    }
    return hi - lo;
}

void expect_cover(const Partitions& parts, size_t n) {
    std::vector<int64_t> all;
    for (const auto& p : parts) all.insert(all.end(), p.begin(), p.end());
    std::sort(all.begin(), all.end());
    std::vector<int64_t> want(n);
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(all, want);
}

TEST(Workload, Formula) {
    EXPECT_EQ(calculate_workload(0), 0);
    EXPECT_EQ(calculate_workload(100), 24576 * 100 + 100 * 100);  // hand: 2467600
    EXPECT_EQ(calculate_workloads({1, 2}), (std::vector<int64_t>{24577, 49156}));
    test::expect_value_error([] { calculate_workload(-1); }, ">= 0");
}

TEST(KarmarkarKarp, SmallCasesMatchVerl) {
    // hand for the first: sums 1+6+4 = 11 and 2+5+3 = 10.
    EXPECT_EQ(karmarkar_karp({1, 2, 3, 4, 5, 6}, 2, false), (Partitions{{0, 5, 3}, {1, 4, 2}}));
    EXPECT_EQ(karmarkar_karp({1, 2, 3, 4, 5, 6}, 2, true), (Partitions{{1, 4, 3}, {0, 5, 2}}));
    EXPECT_EQ(karmarkar_karp({5, 5, 5, 1}, 3, false), (Partitions{{3, 0}, {2}, {1}}));
}

TEST(KarmarkarKarp, TwentyItemsMatchVerl) {
    EXPECT_EQ(karmarkar_karp(kVals, 4, false),
              (Partitions{{6, 12, 0, 14}, {16, 8, 13, 18, 9}, {4, 11, 10, 17, 1}, {5, 3, 7, 15, 2, 19}}));
    EXPECT_EQ(karmarkar_karp(kVals, 4, true),
              (Partitions{{2, 6, 12, 15, 1}, {18, 16, 8, 13, 9}, {14, 4, 11, 0, 19}, {17, 5, 3, 10, 7}}));
}

TEST(GreedyPartition, HandAndVerl) {
    // hand: [5,1,1,1] -> item 0 alone, the rest to the lighter side; with equal_size a bias of 9.
    EXPECT_EQ(greedy_partition({5, 1, 1, 1}, 2, false), (Partitions{{0}, {1, 2, 3}}));
    EXPECT_EQ(greedy_partition({5, 1, 1, 1}, 2, true), (Partitions{{0, 3}, {1, 2}}));
    EXPECT_EQ(greedy_partition(kVals, 4, false),
              (Partitions{{0, 11, 15}, {1, 5, 7, 8, 13}, {2, 4, 6, 9, 10, 14, 16}, {3, 12, 17, 18, 19}}));
    EXPECT_EQ(greedy_partition(kVals, 4, true),
              (Partitions{{0, 6, 10, 14, 18}, {1, 5, 9, 12, 16}, {2, 4, 8, 13, 17}, {3, 7, 11, 15, 19}}));
}

// KK is a heuristic: on single instances in-order greedy can win (trial 28 below: KK spread
// 3097172 vs greedy 1485154, and verl's own karmarkar_karp gives the same 3097172). So balance is
// checked as: never worse than the largest single item, and better than greedy in total.
TEST(BalancedPartitions, PropertiesOnRandomWorkloads) {
    int64_t kk_total = 0, greedy_total = 0;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int64_t> len(1, 4096);
    for (int trial = 0; trial < 30; ++trial) {
        const int64_t k = 2 + trial % 7;
        const size_t n = static_cast<size_t>(k * (1 + trial % 5) + (trial % 2 ? 0 : 3));
        std::vector<int64_t> seqlens(n);
        for (auto& l : seqlens) l = len(rng);
        const auto w = calculate_workloads(seqlens);
        for (bool equal : {false, true}) {
            if (equal && n % static_cast<size_t>(k) != 0) continue;
            auto parts = get_seqlen_balanced_partitions(w, k, equal);
            ASSERT_EQ(parts.size(), static_cast<size_t>(k));
            expect_cover(parts, n);
            for (const auto& p : parts) {
                EXPECT_FALSE(p.empty());
                EXPECT_TRUE(std::is_sorted(p.begin(), p.end()));
                if (equal) EXPECT_EQ(p.size() * static_cast<size_t>(k), n);
            }
            const int64_t kk = spread(w, parts);
            EXPECT_LE(kk, *std::max_element(w.begin(), w.end())) << "trial " << trial;
            kk_total += kk;
            greedy_total += spread(w, greedy_partition(w, k, equal));
        }
    }
    EXPECT_LT(kk_total, greedy_total / 4);
}

TEST(BalancedPartitions, Errors) {
    test::expect_value_error([] { get_seqlen_balanced_partitions({1, 2}, 3, false); }, "at least k = 3");
    test::expect_value_error([] { karmarkar_karp({1, 2, 3}, 2, true); }, "multiple of k");
    test::expect_value_error([] { karmarkar_karp({1, -2}, 1, false); }, ">= 0");
    test::expect_value_error([] { greedy_partition({1, 2}, 0, false); }, ">= 1");
}

TEST(GroupBalanced, KeepsUidsTogether) {
    // verl's own test case: 4 uids x 4 samples with lengths 100/200/150/50, into 2 parts.
    std::vector<int64_t> seq, uid;
    const int64_t lens[] = {100, 200, 150, 50};
    for (int64_t g = 0; g < 4; ++g)
        for (int j = 0; j < 4; ++j) {
            seq.push_back(lens[g]);
            uid.push_back(g);
        }
    EXPECT_EQ(get_group_balanced_partitions(seq, uid, 2),
              (Partitions{{4, 5, 6, 7, 12, 13, 14, 15}, {0, 1, 2, 3, 8, 9, 10, 11}}));
    test::expect_value_error([&] { get_group_balanced_partitions(seq, uid, 3); }, "multiple of k = 3");
    test::expect_value_error([&] { get_group_balanced_partitions(seq, {1, 2}, 2); }, "uids");
}

TEST(MicroBatches, MatchVerlRearrange) {
    MicroBatchOptions opts;
    opts.max_token_len = 300;
    EXPECT_EQ(local_num_micro_batches(kSeq, 300), 4);  // ceil(1007/300)
    EXPECT_EQ(rearrange_micro_batches(kSeq, opts),
              (Partitions{{3, 4, 10, 12}, {0, 6, 7, 8}, {5, 9, 14, 15}, {1, 2, 11, 13}}));
    opts.balance_order = false;
    EXPECT_EQ(rearrange_micro_batches(kSeq, opts),
              (Partitions{{0, 6, 7, 8}, {5, 9, 14, 15}, {3, 4, 10, 12}, {1, 2, 11, 13}}));
    // Minimum 7 (e.g. the DP-wide max), rounded up to a multiple of 4 -> 8.
    opts.balance_order = true;
    opts.min_num_micro_batches = 7;
    opts.num_batches_divided_by = 4;
    EXPECT_EQ(rearrange_micro_batches(kSeq, opts),
              (Partitions{{4, 11}, {9, 10}, {0, 2}, {6, 7}, {5, 14}, {8, 12}, {1, 15}, {3, 13}}));
}

TEST(MicroBatches, CountsGroupsAndErrors) {
    MicroBatchOptions opts;
    opts.max_token_len = 100;
    // Σ = 0: still one micro-batch (choice).
    EXPECT_EQ(rearrange_micro_batches({0, 0, 0}, opts), (Partitions{{0, 1, 2}}));
    // force_group_size 2: pairs (0,1), (2,3), (4,5) stay together.
    opts.force_group_size = 2;
    auto parts = rearrange_micro_batches({60, 10, 50, 50, 20, 30}, opts);
    ASSERT_EQ(parts.size(), 3u);  // ceil(220/100) = 3 <= 3 groups
    for (const auto& p : parts) {
        ASSERT_EQ(p.size(), 2u);
        EXPECT_EQ(p[0] % 2, 0);
        EXPECT_EQ(p[1], p[0] + 1);
    }
    opts.force_group_size = 1;
    test::expect_value_error([&] { rearrange_micro_batches({60, 101}, opts); }, "smaller than a single sequence");
    opts.padded_width = 128;
    test::expect_value_error([&] { rearrange_micro_batches({60, 10}, opts); }, "padded width 128");
    opts.padded_width = 0;
    opts.min_num_micro_batches = 3;
    test::expect_value_error([&] { rearrange_micro_batches({60, 10}, opts); }, "only 2 samples");
    test::expect_value_error([] { local_num_micro_batches({}, 10); }, "empty");
    test::expect_value_error([] { local_num_micro_batches({1, 2, 3}, 10, 2); }, "force_group_size");
    test::expect_value_error([] { local_num_micro_batches({1}, 0); }, "max_token_len");
}

TEST(MicroBatches, PropertiesAndOrder) {
    std::mt19937 rng(11);
    std::uniform_int_distribution<int64_t> len(1, 512);
    std::vector<int64_t> seq(64);
    for (auto& l : seq) l = len(rng);
    MicroBatchOptions opts;
    opts.max_token_len = 1024;
    auto parts = rearrange_micro_batches(seq, opts);
    const int64_t total = std::accumulate(seq.begin(), seq.end(), int64_t{0});
    EXPECT_EQ(static_cast<int64_t>(parts.size()), (total + 1023) / 1024);
    expect_cover(parts, seq.size());
    // Small micro-batches at both ends: workload sums rise then fall.
    const auto w = calculate_workloads(seq);
    std::vector<int64_t> sums;
    for (const auto& p : parts) sums.push_back(part_sum(w, p));
    auto peak = std::max_element(sums.begin(), sums.end()) - sums.begin();
    EXPECT_TRUE(std::is_sorted(sums.begin(), sums.begin() + peak + 1));
    EXPECT_TRUE(std::is_sorted(sums.rbegin(), sums.rend() - peak));
}

TEST(BalanceBatch, MatchesVerlTrainerOrder) {
    EXPECT_EQ(balance_batch_order(kSeq, 4),
              (std::vector<int64_t>{6, 8, 7, 0, 14, 15, 5, 9, 4, 10, 3, 12, 13, 2, 11, 1}));
}

TEST(BalanceBatch, KeepMinibatchStaysInsideEachMinibatch) {
    const int64_t dp = 2, mb = 8;
    auto order = balance_batch_order(kSeq, dp, mb);
    ASSERT_EQ(order.size(), kSeq.size());
    expect_cover(Partitions{order}, kSeq.size());
    // Rank r's chunk = its part of mini-batch 0 then of mini-batch 1 (4 samples each).
    for (int64_t r = 0; r < dp; ++r)
        for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(order[r * 8 + i] / mb, i / 4) << "rank " << r << " pos " << i;
    test::expect_value_error([&] { balance_batch_order(kSeq, 3); }, "multiple of dp_size 3");
    test::expect_value_error([&] { balance_batch_order(kSeq, 2, 5); }, "mini-batch size 5");
}

TEST(ReverseIdx, InvertsAndValidates) {
    EXPECT_EQ(get_reverse_idx({2, 0, 1}), (std::vector<int64_t>{1, 2, 0}));
    test::expect_value_error([] { get_reverse_idx({0, 0}); }, "not a permutation");
    test::expect_value_error([] { get_reverse_idx({0, 2}); }, "not a permutation");
}

TEST(UnbalanceMetrics, Hand) {
    // Contiguous halves: 1+2 = 3 and 3+10 = 13; balanced {0,3} = 11, {1,2} = 5; mean 16/2.
    auto m = seqlen_unbalance_metrics({1, 2, 3, 10}, {{0, 3}, {1, 2}});
    EXPECT_EQ(m.at("global_seqlen/min"), 3);
    EXPECT_EQ(m.at("global_seqlen/max"), 13);
    EXPECT_EQ(m.at("global_seqlen/minmax_diff"), 10);
    EXPECT_EQ(m.at("global_seqlen/balanced_min"), 5);
    EXPECT_EQ(m.at("global_seqlen/balanced_max"), 11);
    EXPECT_EQ(m.at("global_seqlen/mean"), 8);
}

TEST(MicroBatches, MoreErrors) {
    MicroBatchOptions opts;
    opts.max_token_len = 100;
    opts.num_batches_divided_by = 0;
    test::expect_value_error([&] { rearrange_micro_batches({10, 20}, opts); }, "num_batches_divided_by");
    test::expect_value_error([] { seqlen_unbalance_metrics({1, 2}, {}); }, "partitions");
    test::expect_value_error([] { seqlen_unbalance_metrics({1, 2}, {{0}, {5}}); }, "index 5 out of range");
}

}  // namespace
}  // namespace rlpt::algo
