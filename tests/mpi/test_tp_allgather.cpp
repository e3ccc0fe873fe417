// TensorParallel's all-gathers (rlpt/model/tensor_parallel.h) over the whole world as one block,
// at 1-4 ranks (tests/mpi/tensor_parallel.cmake): allgather along every dimension and dtype, and
// allgather_into's paths - contiguous slices (MPI_Allgatherv, uneven and empty ones included),
// strided equal slices in rank order (the strided receive type), strided uneven or permuted ones
// (the buffered fallback) - against slices computed locally on every rank, with the parts of
// the destination no slice covers left untouched; overlapping slices refused on every rank.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/model/tensor_parallel.h"

namespace rlpt::model {
namespace {

// Rank r's tensor: distinct values everywhere (exact in bf16 for the sizes used).
torch::Tensor local_of(int64_t r, const std::vector<int64_t>& shape, torch::ScalarType dtype) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return (torch::arange(n, torch::kInt64) + 200 * r).view(shape).to(dtype);
}

class TpAllGatherTest : public ::testing::Test {
  protected:
    void SetUp() override {
        torch::set_num_threads(1);
        tp_ = TensorParallel::over(world_, torch::kCPU);
    }
    comm::Communicator world_ = comm::Communicator::world();
    std::shared_ptr<TensorParallel> tp_;
    int64_t n() const { return world_.size(); }
    int64_t me() const { return world_.rank(); }

    // allgather_into of slices [starts[r], +counts[r]) along `dim` of a [4, full, 3] destination
    // (dim 1; dim 0 of a [full, 3] one when `contiguous`), checked on every rank.
    void check_into(const std::vector<int64_t>& starts, const std::vector<int64_t>& counts, int64_t local_len,
                    int64_t full, bool contiguous, torch::ScalarType dtype) {
        const int64_t dim = contiguous ? 0 : 1;
        auto shape_of = [&](int64_t len) {
            return contiguous ? std::vector<int64_t>{len, 3} : std::vector<int64_t>{4, len, 3};
        };
        auto out = torch::full(shape_of(full), -7, torch::TensorOptions().dtype(dtype));
        tp_->allgather_into(local_of(me(), shape_of(local_len), dtype), out, dim, starts, counts);
        auto expected = torch::full(shape_of(full), -7, torch::TensorOptions().dtype(dtype));
        for (int64_t r = 0; r < n(); ++r) {
            const auto i = static_cast<size_t>(r);
            if (counts[i] > 0)
                expected.narrow(dim, starts[i], counts[i])
                    .copy_(local_of(r, shape_of(local_len), dtype).narrow(dim, 0, counts[i]));
        }
        EXPECT_TRUE(torch::equal(out, expected)) << "rank " << me() << " dim " << dim << " " << c10::toString(dtype);
    }
};

TEST_F(TpAllGatherTest, AllgatherEveryDimension) {
    for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kInt64}) {
        const std::vector<int64_t> shape{2, 3, 5};
        for (int64_t dim : {0, 1, 2, -1}) {
            const auto got = tp_->allgather(local_of(me(), shape, dtype), dim);
            std::vector<torch::Tensor> parts;
            for (int64_t r = 0; r < n(); ++r) parts.push_back(local_of(r, shape, dtype));
            EXPECT_TRUE(torch::equal(got, torch::cat(parts, dim))) << "dim " << dim << " " << c10::toString(dtype);
        }
    }
    // A non-contiguous slice (a transposed view) gathers as its values.
    const auto t = local_of(me(), {3, 4}, torch::kFloat32).t();
    std::vector<torch::Tensor> parts;
    for (int64_t r = 0; r < n(); ++r) parts.push_back(local_of(r, {3, 4}, torch::kFloat32).t());
    EXPECT_TRUE(torch::equal(tp_->allgather(t, 1), torch::cat(parts, 1)));
}

TEST_F(TpAllGatherTest, ContiguousUnevenSlicesWithGapsAndEmptyOnes) {
    // Rank r sends r % 3 rows (rank 0 nothing), placed in reverse rank order with one-row gaps.
    std::vector<int64_t> starts(static_cast<size_t>(n())), counts(static_cast<size_t>(n()));
    int64_t at = 1;
    for (int64_t r = n() - 1; r >= 0; --r) {
        counts[static_cast<size_t>(r)] = r % 3;
        starts[static_cast<size_t>(r)] = at;
        at += r % 3 + 1;
    }
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) check_into(starts, counts, 2, at + 1, true, dtype);
}

TEST_F(TpAllGatherTest, StridedEqualSlicesInRankOrder) {
    std::vector<int64_t> starts, counts(static_cast<size_t>(n()), 2);
    for (int64_t r = 0; r < n(); ++r) starts.push_back(2 * r);
    // Local slices of 2 (whole) and of 3 (the first 2 of each taken: a strided send too).
    check_into(starts, counts, 2, 2 * n(), false, torch::kFloat32);
    check_into(starts, counts, 3, 2 * n() + 1, false, torch::kBFloat16);
}

TEST_F(TpAllGatherTest, StridedUnevenOrPermutedSlicesGoThroughOneBuffer) {
    std::vector<int64_t> starts(static_cast<size_t>(n())), counts(static_cast<size_t>(n()));
    int64_t at = 0;
    for (int64_t r = 0; r < n(); ++r) {
        counts[static_cast<size_t>(r)] = 1 + r % 2;
        starts[static_cast<size_t>(r)] = at;
        at += 1 + r % 2;
    }
    check_into(starts, counts, 2, at, false, torch::kFloat32);
    // Equal slices, reverse rank order.
    std::vector<int64_t> rev, twos(static_cast<size_t>(n()), 2);
    for (int64_t r = 0; r < n(); ++r) rev.push_back(2 * (n() - 1 - r));
    check_into(rev, twos, 2, 2 * n(), false, torch::kFloat32);
}

TEST_F(TpAllGatherTest, OverlappingSlicesAreRefusedOnEveryRank) {
    if (n() < 2) GTEST_SKIP() << "needs two ranks";
    std::vector<int64_t> starts(static_cast<size_t>(n()), 0), counts(static_cast<size_t>(n()), 2);
    auto out = torch::zeros({2 * n(), 3});
    try {
        tp_->allgather_into(torch::ones({2, 3}), out, 0, starts, counts);
        ADD_FAILURE() << "overlapping slices accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kInternal);
        EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << e.what();
    }
    // The block is still in step: a gather afterwards works.
    EXPECT_EQ(tp_->allgather(torch::ones({1}), 0).numel(), n());
}

}  // namespace
}  // namespace rlpt::model
