// The decode path's attention reads the KV cache in place: KVCache::store hands back views of
// its preallocated buffers (no concatenation or copy of the cached positions per step).
#include <gtest/gtest.h>
#include <torch/torch.h>

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

}  // namespace
}  // namespace rlpt::model
