// DAPO overlong shaping and dynamic-sampling group filter (hand-checked).
#include <cmath>

#include "rlpt/algo/dapo.h"
#include "test_algo_util.h"

namespace rlpt::algo {
namespace {

TEST(Overlong, PenaltyByHand) {
    // L = 20, L_b = 4, f = 1: expected = 16; len 18 -> -(2/4), len 20 -> -1.
    OverlongBuffer cfg{20, 4, 1.0};
    EXPECT_EQ(overlong_penalty(10, cfg), 0.0);
    EXPECT_EQ(overlong_penalty(16, cfg), 0.0);
    EXPECT_FALSE(std::signbit(overlong_penalty(16, cfg)));
    EXPECT_DOUBLE_EQ(overlong_penalty(17, cfg), -0.25);
    EXPECT_DOUBLE_EQ(overlong_penalty(18, cfg), -0.5);
    EXPECT_DOUBLE_EQ(overlong_penalty(20, cfg), -1.0);
    cfg.penalty_factor = 0.5;
    EXPECT_EQ(overlong_penalties({0, 18, 20}, cfg), (std::vector<double>{0.0, -0.25, -0.5}));
}

TEST(Overlong, Errors) {
    test::expect_value_error([] { overlong_penalty(5, OverlongBuffer{20, 0, 1.0}); }, "len must be > 0");
    test::expect_value_error([] { overlong_penalty(5, OverlongBuffer{3, 4, 1.0}); }, "max_resp_len (3)");
    test::expect_value_error([] { overlong_penalty(5, OverlongBuffer{20, 4, -1.0}); }, "penalty_factor");
    test::expect_value_error([] { overlong_penalty(-1, OverlongBuffer{20, 4, 1.0}); }, "response length");
}

TEST(FilterGroups, KeepsVariedGroupsAndSingletonsByChoice) {
    // a: varied -> kept; b: all 1 -> dropped; c: singleton; d: varied.
    std::vector<double> v = {1, 0, 1, 1, 1, 0.5, 2, 2, 3};
    std::vector<std::string> uids = {"a", "a", "a", "b", "b", "c", "d", "d", "d"};
    auto keep = filter_groups_by_metric(v, uids);
    EXPECT_EQ(keep.kept_rows, (std::vector<int64_t>{0, 1, 2, 5, 6, 7, 8}));
    EXPECT_EQ(keep.num_groups, 4);
    EXPECT_EQ(keep.num_kept_groups, 3);
    auto drop = filter_groups_by_metric(v, uids, /*keep_singletons=*/false);
    EXPECT_EQ(drop.kept_rows, (std::vector<int64_t>{0, 1, 2, 6, 7, 8}));
    EXPECT_EQ(drop.num_kept_groups, 2);
}

TEST(FilterGroups, ExactEqualityInterleavedUidsAndNan) {
    // Three equal 0.1 values (np.std may be a few ulp above 0 here; equality is exact) -> dropped.
    // Interleaved uids group by label; a NaN makes its group count as varied.
    std::vector<double> v = {0.1, 7.0, 0.1, 7.0, 0.1, NAN, 3.0};
    std::vector<int64_t> uids = {1, 2, 1, 2, 1, 3, 3};
    auto r = filter_groups_by_metric(v, uids);
    EXPECT_EQ(r.kept_rows, (std::vector<int64_t>{5, 6}));
    EXPECT_EQ(r.num_groups, 3);
    EXPECT_EQ(r.num_kept_groups, 1);
    auto empty = filter_groups_by_metric(std::vector<double>{}, std::vector<int64_t>{});
    EXPECT_TRUE(empty.kept_rows.empty());
    EXPECT_EQ(empty.num_groups, 0);
    test::expect_value_error([] { filter_groups_by_metric({1.0}, std::vector<int64_t>{1, 2}); }, "2 uids");
}

}  // namespace
}  // namespace rlpt::algo
