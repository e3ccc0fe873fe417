// The decode path's attention reads the KV cache in place: KVCache::store hands back views of
// its preallocated buffers (no concatenation or copy of the cached positions per step); slots
// (continuous batching) write each row at its own length into the same buffers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "rlpt/core/error.h"
#include "rlpt/model/kv_cache.h"

namespace rlpt::model {
namespace {

TEST(KvCacheViews, StoreReturnsGrowingViewsOfOneBuffer) {
    KVCache cache(/*n_layers=*/2, /*batch_size=*/3, /*n_kv_heads=*/2, /*head_dim=*/8, /*max_length=*/10,
                  torch::TensorOptions().dtype(torch::kFloat32));
    auto k0 = torch::randn({3, 2, 4, 8}), v0 = torch::randn({3, 2, 4, 8});
    auto [k_prefill, v_prefill] = cache.store(0, k0, v0);
    cache.store(1, k0, v0);
    cache.advance(4);
    const void* k_base = k_prefill.data_ptr();
    const void* v_base = v_prefill.data_ptr();
    for (int64_t step = 0; step < 3; ++step) {
        auto k1 = torch::randn({3, 2, 1, 8}), v1 = torch::randn({3, 2, 1, 8});
        auto [k, v] = cache.store(0, k1, v1);
        cache.store(1, k1, v1);
        cache.advance(1);
        // Same storage, same start, one more position each step; earlier positions untouched.
        EXPECT_EQ(k.data_ptr(), k_base);
        EXPECT_EQ(v.data_ptr(), v_base);
        EXPECT_EQ(k.size(2), 5 + step);
        EXPECT_TRUE(torch::equal(k.narrow(2, 0, 4), k0));
        EXPECT_TRUE(torch::equal(v.narrow(2, 4 + step, 1), v1));
        // Rows of one (batch, head) are contiguous [S, head_dim] blocks, as matmul/BLAS take
        // them without a copy (leading dimension = head_dim).
        EXPECT_EQ(k.stride(3), 1);
        EXPECT_EQ(k.stride(2), 8);
    }
}

TEST(KvCacheViews, SlotsWriteAtTheirOwnLengthsInOneBuffer) {
    KVCache cache(/*n_layers=*/1, /*batch_size=*/4, /*n_kv_heads=*/2, /*head_dim=*/8, /*max_length=*/6,
                  torch::TensorOptions().dtype(torch::kFloat32));
    // Prefill slots 2 and 0 with 3 positions (slot 0's prompt is 2 long: drop its padding).
    auto kp = torch::randn({2, 2, 3, 8}), vp = torch::randn({2, 2, 3, 8});
    cache.bind_slots({2, 0});
    auto [k_ret, v_ret] = cache.store(0, kp, vp);
    EXPECT_TRUE(torch::equal(k_ret, kp));  // a prefill attends to its own positions
    cache.advance(3);
    EXPECT_FALSE(cache.slots_bound());
    cache.set_slot_length(0, 2);
    EXPECT_EQ(cache.slot_length(2), 3);
    EXPECT_EQ(cache.slot_length(0), 2);
    EXPECT_EQ(cache.slot_length(1), 0);
    // Slot 3 shares slot 2's prompt.
    cache.copy_slot(3, 2, 3);
    EXPECT_EQ(cache.slot_length(3), 3);
    // A decode step of slots 0, 3, 2: each row lands at its slot's length; the whole buffer comes back.
    auto k1 = torch::randn({3, 2, 1, 8}), v1 = torch::randn({3, 2, 1, 8});
    cache.bind_slots({0, 3, 2});
    EXPECT_TRUE(torch::equal(cache.bound_lengths(), torch::tensor({3, 4, 4}, torch::kInt64)));
    auto [kb, vb] = cache.store(0, k1, v1);
    cache.advance(1);
    EXPECT_EQ(kb.sizes(), (std::vector<int64_t>{4, 2, 6, 8}));
    EXPECT_TRUE(torch::equal(kb[2].narrow(1, 0, 3), kp[0]));
    EXPECT_TRUE(torch::equal(kb[3].narrow(1, 0, 3), kp[0]));
    EXPECT_TRUE(torch::equal(kb[0].narrow(1, 0, 2), kp[1].narrow(1, 0, 2)));
    EXPECT_TRUE(torch::equal(kb[0].select(1, 2), k1[0].select(1, 0)));
    EXPECT_TRUE(torch::equal(kb[3].select(1, 3), k1[1].select(1, 0)));
    EXPECT_TRUE(torch::equal(vb[2].select(1, 3), v1[2].select(1, 0)));
    EXPECT_EQ(cache.slot_length(0), 3);
    EXPECT_EQ(cache.slot_length(3), 4);
    // Freeing and misuse.
    cache.set_slot_length(3, 0);
    EXPECT_EQ(cache.slot_length(3), 0);
    EXPECT_THROW(cache.bind_slots({1, 1}), rlpt::ValueError);
    EXPECT_THROW(cache.bind_slots({4}), rlpt::ValueError);
    EXPECT_THROW(cache.set_slot_length(0, 5), rlpt::ValueError);
    EXPECT_THROW(cache.keep_rows(torch::tensor({0}, torch::kInt64)), rlpt::ValueError);
    EXPECT_THROW(cache.store(0, k1, v1), rlpt::ValueError);  // slots must be bound first
    cache.bind_slots({2});                                   // a prefill into a slot that holds positions
    EXPECT_THROW(cache.store(0, torch::randn({1, 2, 2, 8}), torch::randn({1, 2, 2, 8})), rlpt::ValueError);
    cache.advance(0);
    // Full slots refuse another position.
    for (int i = 0; i < 2; ++i) {
        cache.bind_slots({2});
        cache.store(0, torch::randn({1, 2, 1, 8}), torch::randn({1, 2, 1, 8}));
        cache.advance(1);
    }
    EXPECT_EQ(cache.slot_length(2), 6);
    EXPECT_THROW(cache.bind_slots({2}), rlpt::ValueError);
}

}  // namespace
}  // namespace rlpt::model
