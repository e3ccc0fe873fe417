// Batch itself (include/rlpt/batch/batch.h): the row operations the trainer relies on, with
// columns, string and int fields, meta and metrics together.
#include <gtest/gtest.h>

#include <cmath>

#include "rlpt/batch/batch.h"
#include "rlpt/core/error.h"

namespace rlpt {
namespace {

// Rows i = 0..n-1: x[i] = [i, 10 i], uid "u<i>", k[i] = 100 + i, meta t = 0.5.
Batch rows(int64_t n, int64_t first = 0) {
    Batch b(n);
    auto i = torch::arange(first, first + n, torch::kInt64);
    b.set("x", torch::stack({i, i * 10}, 1));
    std::vector<std::string> uid;
    std::vector<int64_t> k;
    for (int64_t r = first; r < first + n; ++r) {
        uid.push_back("u" + std::to_string(r));
        k.push_back(100 + r);
    }
    b.set_strings("uid", uid);
    b.set_ints("k", k);
    b.set_meta("t", 0.5);
    return b;
}

std::vector<int64_t> first_col(const Batch& b) {
    auto c = b.at("x").select(1, 0).contiguous();
    return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

TEST(Batch, SliceIndexAndChunkKeepRowsAlignedAndMeta) {
    Batch b = rows(6);
    b.add_metric("m", 1.0);
    Batch s = b.slice(2, 5);
    EXPECT_EQ(s.size(), 3);
    EXPECT_EQ(first_col(s), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(s.strings("uid"), (std::vector<std::string>{"u2", "u3", "u4"}));
    EXPECT_EQ(s.ints("k"), (std::vector<int64_t>{102, 103, 104}));
    EXPECT_EQ(s.meta_double("t"), 0.5);
    EXPECT_TRUE(s.metrics().empty());  // metrics are not per row
    Batch ix = b.index(std::vector<int64_t>{5, 0, 5});
    EXPECT_EQ(first_col(ix), (std::vector<int64_t>{5, 0, 5}));
    EXPECT_EQ(ix.strings("uid"), (std::vector<std::string>{"u5", "u0", "u5"}));
    Batch masked = b.index(torch::tensor({true, false, true, false, false, true}));
    EXPECT_EQ(masked.ints("k"), (std::vector<int64_t>{100, 102, 105}));
    auto parts = b.chunk(3);
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(first_col(parts[2]), (std::vector<int64_t>{4, 5}));
    EXPECT_THROW(b.chunk(4), ValueError);
    auto uneven = b.chunk(4, /*allow_uneven=*/true);
    EXPECT_EQ(uneven[0].size() + uneven[1].size() + uneven[2].size() + uneven[3].size(), 6);
    auto sp = b.split(4);
    ASSERT_EQ(sp.size(), 2u);
    EXPECT_EQ(sp[1].size(), 2);
}

TEST(Batch, ConcatAppendsRowsAndMergesMetrics) {
    Batch a = rows(2), b = rows(3, 2);
    a.add_metric("loss", 1.0, Reduce::kSum);
    b.add_metric("loss", 2.5, Reduce::kSum);
    Batch c = Batch::concat({a, b});
    EXPECT_EQ(c.size(), 5);
    EXPECT_EQ(first_col(c), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(c.strings("uid").back(), "u4");
    EXPECT_EQ(reduce_metrics(c.metrics()).at("loss"), 3.5);
    EXPECT_EQ(Batch::concat({}).size(), 0);
    Batch other_meta = rows(1);
    other_meta.set_meta("t", 0.75);
    EXPECT_THROW(Batch::concat({a, other_meta}), ValueError);
    Batch missing = rows(1);
    missing.erase("x");
    EXPECT_THROW(Batch::concat({a, missing}), ValueError);
}

TEST(Batch, RepeatInterleaveGivesEachRowNTimesConsecutively) {
    Batch r = rows(2).repeat_interleave(3);
    EXPECT_EQ(r.size(), 6);
    EXPECT_EQ(first_col(r), (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
    EXPECT_EQ(r.strings("uid"), (std::vector<std::string>{"u0", "u0", "u0", "u1", "u1", "u1"}));
    EXPECT_EQ(r.ints("k"), (std::vector<int64_t>{100, 100, 100, 101, 101, 101}));
}

TEST(Batch, UpdateAddsColumnsAndRefusesConflicts) {
    Batch b = rows(3);
    Batch extra(3);
    extra.set("y", torch::ones({3, 2}));
    extra.set_strings("uid", {"u0", "u1", "u2"});  // the same values: fine
    extra.set_meta("step", int64_t(4));
    b.update(extra);
    EXPECT_TRUE(b.has("y"));
    EXPECT_EQ(b.meta_int("step"), 4);
    Batch conflict(3);
    conflict.set_strings("uid", {"u0", "u1", "zz"});
    EXPECT_THROW(b.update(conflict), ValueError);
    Batch wrong_rows(2);
    wrong_rows.set("z", torch::ones({2}));
    EXPECT_THROW(b.update(wrong_rows), ValueError);
    Batch sel = b.select({"y"}, {"k"});
    EXPECT_FALSE(sel.has("x"));
    EXPECT_EQ(sel.ints("k").size(), 3u);
    EXPECT_THROW(b.select({"nope"}), ValueError);
}

TEST(Batch, PadAndUnpadRoundTrip) {
    Batch b = rows(5);
    const int64_t pad = b.pad_to_multiple(4);
    EXPECT_EQ(pad, 3);
    EXPECT_EQ(b.size(), 8);
    EXPECT_EQ(first_col(b), (std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2}));  // real rows, no NaN padding
    b.unpad(pad);
    EXPECT_EQ(first_col(b), (std::vector<int64_t>{0, 1, 2, 3, 4}));
    EXPECT_EQ(b.strings("uid").size(), 5u);
}

TEST(Batch, MetricsReduceByTheirRule) {
    MetricMap m;
    add_metric(m, "mean", 1.0);
    add_metric(m, "mean", 4.0);
    add_metric(m, "sum", 1.0, Reduce::kSum);
    add_metric(m, "sum", 4.0, Reduce::kSum);
    add_metric(m, "max", -1.0, Reduce::kMax);
    add_metric(m, "max", -3.0, Reduce::kMax);
    add_metric(m, "min", 2.0, Reduce::kMin);
    add_metric(m, "min", 7.0, Reduce::kMin);
    auto r = reduce_metrics(m);
    EXPECT_EQ(r.at("mean"), 2.5);
    EXPECT_EQ(r.at("sum"), 5.0);
    EXPECT_EQ(r.at("max"), -1.0);
    EXPECT_EQ(r.at("min"), 2.0);
    EXPECT_THROW(add_metric(m, "sum", 1.0, Reduce::kMean), ValueError);  // rule mismatch
    MetricMap other;
    add_metric(other, "sum", 10.0, Reduce::kSum);
    merge_metrics(m, other);
    EXPECT_EQ(reduce_metrics(m).at("sum"), 15.0);
    EXPECT_TRUE(std::isnan(Metric{}.value()));
}

}  // namespace
}  // namespace rlpt
