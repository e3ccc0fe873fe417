#include "rlpt/model/kv_cache.h"

#include <fmt/ranges.h>

#include "rlpt/core/error.h"

namespace rlpt::model {

KVCache::KVCache(int64_t n_layers, int64_t batch_size, int64_t n_kv_heads, int64_t head_dim, int64_t max_length,
                 torch::TensorOptions options)
    : batch_(batch_size), max_length_(max_length) {
    RLPT_CHECK(n_layers > 0 && batch_size > 0 && n_kv_heads > 0 && head_dim > 0 && max_length > 0,
               "KVCache: sizes must be positive (layers {}, batch {}, kv heads {}, head_dim {}, max_length {})",
               n_layers, batch_size, n_kv_heads, head_dim, max_length);
    for (int64_t i = 0; i < n_layers; ++i) {
        k_.push_back(torch::empty({batch_size, n_kv_heads, max_length, head_dim}, options));
        v_.push_back(torch::empty({batch_size, n_kv_heads, max_length, head_dim}, options));
    }
}

void KVCache::keep_rows(const torch::Tensor& rows) {
    RLPT_CHECK(rows.defined() && rows.dim() == 1 && rows.scalar_type() == torch::kInt64,
               "KVCache::keep_rows: rows must be a 1-D int64 tensor");
    const int64_t n = rows.size(0);
    auto rows_cpu = rows.to(torch::kCPU);
    if (n > 0) {
        const int64_t lo = rows_cpu.min().item<int64_t>(), hi = rows_cpu.max().item<int64_t>();
        RLPT_CHECK(lo >= 0 && hi < batch_, "KVCache::keep_rows: row indices must be in [0, {}), got [{}, {}]", batch_,
                   lo, hi);
        RLPT_CHECK(std::get<0>(torch::_unique(rows_cpu)).numel() == n, "KVCache::keep_rows: row indices must be distinct");
    }
    auto idx = rows.to(k_[0].device());
    for (size_t l = 0; l < k_.size(); ++l) {
        for (auto* buf : {&k_[l], &v_[l]}) {
            if (length_ > 0 && n > 0) {
                auto kept = buf->narrow(2, 0, length_).index_select(0, idx);
                buf->narrow(0, 0, n).narrow(2, 0, length_).copy_(kept);
            }
            *buf = buf->narrow(0, 0, n);
        }
    }
    batch_ = n;
}

void KVCache::fork_rows(const torch::Tensor& rows) {
    RLPT_CHECK(rows.defined() && rows.dim() == 1 && rows.scalar_type() == torch::kInt64,
               "KVCache::fork_rows: rows must be a 1-D int64 tensor");
    const int64_t n = rows.size(0);
    if (n > 0) {
        auto rows_cpu = rows.to(torch::kCPU);
        const int64_t lo = rows_cpu.min().item<int64_t>(), hi = rows_cpu.max().item<int64_t>();
        RLPT_CHECK(lo >= 0 && hi < batch_, "KVCache::fork_rows: row indices must be in [0, {}), got [{}, {}]", batch_,
                   lo, hi);
    }
    auto idx = rows.to(k_[0].device());
    for (size_t l = 0; l < k_.size(); ++l) {
        for (auto* buf : {&k_[l], &v_[l]}) {
            auto fresh = torch::empty({n, buf->size(1), max_length_, buf->size(3)}, buf->options());
            if (length_ > 0 && n > 0) fresh.narrow(2, 0, length_).copy_(buf->narrow(2, 0, length_).index_select(0, idx));
            *buf = fresh;
        }
    }
    batch_ = n;
}

void KVCache::repeat_rows(int64_t n) {
    RLPT_CHECK(n >= 1, "KVCache::repeat_rows: n must be >= 1, got {}", n);
    if (n == 1) return;
    fork_rows(torch::arange(batch_, torch::kInt64).repeat_interleave(n));
}

std::pair<torch::Tensor, torch::Tensor> KVCache::store(int64_t layer, const torch::Tensor& k, const torch::Tensor& v) {
    RLPT_CHECK(layer >= 0 && layer < n_layers(), "KVCache::store: layer {} out of range [0, {})", layer, n_layers());
    auto& kb = k_[static_cast<size_t>(layer)];
    auto& vb = v_[static_cast<size_t>(layer)];
    RLPT_CHECK(k.dim() == 4 && k.sizes() == v.sizes() && k.size(0) == batch_ && k.size(1) == kb.size(1) &&
                   k.size(3) == kb.size(3),
               "KVCache::store: expected k/v [{}, {}, T, {}], got k {} v {}", batch_, kb.size(1), kb.size(3),
               k.sizes(), v.sizes());
    const int64_t t_new = k.size(2);
    RLPT_CHECK(length_ + t_new <= max_length_, "KVCache overflow: {} cached + {} new positions > max_length {}",
               length_, t_new, max_length_);
    kb.narrow(2, length_, t_new).copy_(k);
    vb.narrow(2, length_, t_new).copy_(v);
    return {kb.narrow(2, 0, length_ + t_new), vb.narrow(2, 0, length_ + t_new)};
}

void KVCache::advance(int64_t n_new) {
    RLPT_CHECK(n_new >= 0 && length_ + n_new <= max_length_, "KVCache::advance: {} + {} exceeds max_length {}", length_,
               n_new, max_length_);
    length_ += n_new;
}

}  // namespace rlpt::model
