#include "rlpt/model/kv_cache.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "rlpt/core/error.h"

namespace rlpt::model {

KVCache::KVCache(int64_t n_layers, int64_t batch_size, int64_t n_kv_heads, int64_t head_dim, int64_t max_length,
                 torch::TensorOptions options)
    : batch_(batch_size), max_length_(max_length), slot_len_(static_cast<size_t>(std::max<int64_t>(batch_size, 0)), 0) {
    RLPT_CHECK(n_layers > 0 && batch_size > 0 && n_kv_heads > 0 && head_dim > 0 && max_length > 0,
               "KVCache: sizes must be positive (layers {}, batch {}, kv heads {}, head_dim {}, max_length {})",
               n_layers, batch_size, n_kv_heads, head_dim, max_length);
    // Zeroed, not empty: memory past a row's length gets read. oneDNN's bfloat16 matmul on CPUs
    // without AVX512_BF16 (avx512_core_vnni and older) reads one V row past the end of an
    // odd-length view and multiplies it by zero; uninitialised NaN bits there made the logits
    // NaN on CI's CPU (2026-11-24; tests/CMakeLists.txt runs the rollout tests at that ISA).
    for (int64_t i = 0; i < n_layers; ++i) {
        k_.push_back(torch::zeros({batch_size, n_kv_heads, max_length, head_dim}, options));
        v_.push_back(torch::zeros({batch_size, n_kv_heads, max_length, head_dim}, options));
    }
}

void KVCache::reset() {
    length_ = 0;
    std::fill(slot_len_.begin(), slot_len_.end(), int64_t{0});
    bound_ = bound_len_ = bound_dev_ = bound_len_dev_ = bound_pos_dev_ = ext_prefix_ = ext_new_ = torch::Tensor();
}

void KVCache::keep_rows(const torch::Tensor& rows) {
    RLPT_CHECK(!slotted_, "KVCache::keep_rows: the cache holds slots (free them with set_slot_length)");
    RLPT_CHECK(rows.defined() && rows.dim() == 1 && rows.scalar_type() == torch::kInt64,
               "KVCache::keep_rows: rows must be a 1-D int64 tensor");
    const int64_t n = rows.size(0);
    auto rows_cpu = rows.to(torch::kCPU);
    if (n > 0) {
        const int64_t lo = rows_cpu.min().item<int64_t>(), hi = rows_cpu.max().item<int64_t>();
        RLPT_CHECK(lo >= 0 && hi < batch_, "KVCache::keep_rows: row indices must be in [0, {}), got [{}, {}]", batch_,
                   lo, hi);
        RLPT_CHECK(std::get<0>(torch::_unique(rows_cpu)).numel() == n,
                   "KVCache::keep_rows: row indices must be distinct");
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
    slot_len_.assign(static_cast<size_t>(n), 0);
}

void KVCache::fork_rows(const torch::Tensor& rows) {
    RLPT_CHECK(!slotted_, "KVCache::fork_rows: the cache holds slots (share a prefix with copy_slot)");
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
            if (length_ > 0 && n > 0)
                fresh.narrow(2, 0, length_).copy_(buf->narrow(2, 0, length_).index_select(0, idx));
            fresh.narrow(2, length_, max_length_ - length_).zero_();  // as in the constructor
            *buf = fresh;
        }
    }
    batch_ = n;
    slot_len_.assign(static_cast<size_t>(n), 0);
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
    const int64_t rows = slots_bound() ? bound_.size(0) : batch_;
    RLPT_CHECK(k.dim() == 4 && k.sizes() == v.sizes() && k.size(0) == rows && k.size(1) == kb.size(1) &&
                   k.size(3) == kb.size(3),
               "KVCache::store: expected k/v [{}, {}, T, {}], got k {} v {}", rows, kb.size(1), kb.size(3), k.sizes(),
               v.sizes());
    const int64_t t_new = k.size(2);
    if (slots_bound() && extending()) {
        // Each row's first n[b] positions after its slot's; returns the bound slots' K/V over
        // [0, longest prefix + n) (the forward's mask hides the rest).
        const auto* s = bound_.data_ptr<int64_t>();
        const auto* pre = ext_prefix_.data_ptr<int64_t>();
        const auto* n = ext_new_.data_ptr<int64_t>();
        int64_t longest = 0;
        for (int64_t i = 0; i < rows; ++i) {
            RLPT_CHECK(n[i] <= t_new, "KVCache::store: row {} extends by {} positions, the input has {}", i, n[i],
                       t_new);
            kb.select(0, s[i]).narrow(1, pre[i], n[i]).copy_(k.select(0, i).narrow(1, 0, n[i]));
            vb.select(0, s[i]).narrow(1, pre[i], n[i]).copy_(v.select(0, i).narrow(1, 0, n[i]));
            longest = std::max(longest, pre[i] + n[i]);
        }
        return {kb.index_select(0, bound_dev_).narrow(2, 0, longest),
                vb.index_select(0, bound_dev_).narrow(2, 0, longest)};
    }
    if (slots_bound()) {
        if (t_new > 1) {  // prefill of empty slots
            const auto* s = bound_.data_ptr<int64_t>();
            for (int64_t i = 0; i < rows; ++i)
                RLPT_CHECK(slot_len_[static_cast<size_t>(s[i])] == 0,
                           "KVCache::store: a prefill ({} positions) into slot {} that already holds {}", t_new, s[i],
                           slot_len_[static_cast<size_t>(s[i])]);
            RLPT_CHECK(t_new <= max_length_, "KVCache overflow: a prefill of {} positions > max_length {}", t_new,
                       max_length_);
            kb.narrow(2, 0, t_new).index_copy_(0, bound_dev_, k);
            vb.narrow(2, 0, t_new).index_copy_(0, bound_dev_, v);
            return {k, v};
        }
        // One new position per row at its slot's length: kb[slot[b], :, len[b], :] = k[b, :, 0, :].
        if (kb.is_cpu() && k.is_cpu() && v.is_cpu() && k.scalar_type() == kb.scalar_type() &&
            v.scalar_type() == kb.scalar_type() && k.stride(3) == 1 && v.stride(3) == 1 && kb.stride(3) == 1) {
            // CPU: one row copy per (row, head), no index tensors (index_put_ builds ~5 per call).
            const auto* s = bound_.data_ptr<int64_t>();
            const auto* len = bound_len_.data_ptr<int64_t>();
            const int64_t heads = k.size(1), row_bytes = k.size(3) * static_cast<int64_t>(k.element_size());
            const int64_t es = static_cast<int64_t>(kb.element_size());
            for (auto [buf, src] : {std::pair{&kb, &k}, std::pair{&vb, &v}}) {
                auto* dst = static_cast<char*>(buf->data_ptr());
                const auto* from = static_cast<const char*>(src->data_ptr());
                for (int64_t i = 0; i < rows; ++i)
                    for (int64_t h = 0; h < heads; ++h)
                        std::memcpy(dst + (s[i] * buf->stride(0) + h * buf->stride(1) + (len[i] - 1) * buf->stride(2)) *
                                              es,
                                    from + (i * src->stride(0) + h * src->stride(1)) * es,
                                    static_cast<size_t>(row_bytes));
            }
            return {kb, vb};
        }
        kb.index_put_({bound_dev_, torch::indexing::Slice(), bound_pos_dev_}, k.select(2, 0));
        vb.index_put_({bound_dev_, torch::indexing::Slice(), bound_pos_dev_}, v.select(2, 0));
        return {kb, vb};
    }
    RLPT_CHECK(!slotted_, "KVCache::store: the cache holds slots; bind_slots before each forward");
    RLPT_CHECK(length_ + t_new <= max_length_, "KVCache overflow: {} cached + {} new positions > max_length {}",
               length_, t_new, max_length_);
    kb.narrow(2, length_, t_new).copy_(k);
    vb.narrow(2, length_, t_new).copy_(v);
    return {kb.narrow(2, 0, length_ + t_new), vb.narrow(2, 0, length_ + t_new)};
}

void KVCache::advance(int64_t n_new) {
    if (slots_bound()) {
        RLPT_CHECK(n_new >= 0, "KVCache::advance: {} new positions", n_new);
        const auto* s = bound_.data_ptr<int64_t>();
        const int64_t* n = extending() ? ext_new_.data_ptr<int64_t>() : nullptr;
        for (int64_t i = 0; i < bound_.size(0); ++i) slot_len_[static_cast<size_t>(s[i])] += n ? n[i] : n_new;
        bound_ = bound_len_ = bound_dev_ = bound_len_dev_ = bound_pos_dev_ = ext_prefix_ = ext_new_ = torch::Tensor();
        return;
    }
    RLPT_CHECK(n_new >= 0 && length_ + n_new <= max_length_, "KVCache::advance: {} + {} exceeds max_length {}", length_,
               n_new, max_length_);
    length_ += n_new;
}

torch::Tensor KVCache::scratch(size_t index, int64_t rows, int64_t cols) {
    RLPT_CHECK(rows >= 0 && cols >= 0, "KVCache::scratch: [{}, {}]", rows, cols);
    if (scratch_.size() <= index) scratch_.resize(index + 1);
    auto& buf = scratch_[index];
    if (!buf.defined() || buf.numel() < rows * cols)
        buf = torch::empty({std::max(rows, batch_) * cols}, k_[0].options().dtype(torch::kFloat32));
    return buf.narrow(0, 0, rows * cols).view({rows, cols});
}

void KVCache::bind_slots(const std::vector<int64_t>& slots) {
    RLPT_CHECK(length_ == 0, "KVCache::bind_slots: the cache holds {} shared-length positions", length_);
    RLPT_CHECK(!slots.empty(), "KVCache::bind_slots: no slots");
    ext_prefix_ = ext_new_ = torch::Tensor();
    std::vector<int64_t> lens;
    std::vector<bool> seen(static_cast<size_t>(batch_), false);
    lens.reserve(slots.size());
    for (int64_t s : slots) {
        RLPT_CHECK(s >= 0 && s < batch_ && !seen[static_cast<size_t>(s)],
                   "KVCache::bind_slots: slot {} is out of range [0, {}) or repeated", s, batch_);
        seen[static_cast<size_t>(s)] = true;
        const int64_t len = slot_len_[static_cast<size_t>(s)];
        RLPT_CHECK(len < max_length_, "KVCache overflow: slot {} holds {} positions, max_length {}", s, len,
                   max_length_);
        lens.push_back(len + 1);
    }
    slotted_ = true;
    bound_ = torch::tensor(slots, torch::kInt64);
    bound_len_ = torch::tensor(lens, torch::kInt64);
    bound_dev_ = bound_.to(k_[0].device());
    bound_len_dev_ = bound_len_.to(k_[0].device());
    bound_pos_dev_ = bound_len_dev_ - 1;
}

void KVCache::bind_slots(const std::vector<int64_t>& slots, const std::vector<int64_t>& new_lengths) {
    RLPT_CHECK(slots.size() == new_lengths.size(), "KVCache::bind_slots: {} slots, {} new lengths", slots.size(),
               new_lengths.size());
    std::vector<int64_t> prefix;
    for (size_t i = 0; i < slots.size(); ++i) {
        RLPT_CHECK(slots[i] >= 0 && slots[i] < batch_, "KVCache::bind_slots: slot {} is out of range [0, {})", slots[i],
                   batch_);
        const int64_t len = slot_len_[static_cast<size_t>(slots[i])];
        RLPT_CHECK(new_lengths[i] >= 1 && len + new_lengths[i] <= max_length_,
                   "KVCache overflow: slot {} holds {} positions, extending by {} exceeds max_length {}", slots[i], len,
                   new_lengths[i], max_length_);
        prefix.push_back(len);
    }
    bind_slots(slots);
    ext_prefix_ = torch::tensor(prefix, torch::kInt64);
    ext_new_ = torch::tensor(new_lengths, torch::kInt64);
}

int64_t KVCache::slot_length(int64_t slot) const {
    RLPT_CHECK(slot >= 0 && slot < batch_, "KVCache: slot {} out of range [0, {})", slot, batch_);
    return slot_len_[static_cast<size_t>(slot)];
}

void KVCache::set_slot_length(int64_t slot, int64_t length) {
    RLPT_CHECK(length >= 0 && length <= slot_length(slot),
               "KVCache::set_slot_length: slot {} holds {} positions, cannot set {}", slot, slot_length(slot), length);
    slotted_ = true;
    slot_len_[static_cast<size_t>(slot)] = length;
}

void KVCache::copy_slot(int64_t dst, int64_t src, int64_t length) {
    RLPT_CHECK(length >= 0 && length <= slot_length(src) && dst != src && dst >= 0 && dst < batch_,
               "KVCache::copy_slot: {} positions of slot {} (holding {}) into slot {} of [0, {})", length, src,
               slot_length(src), dst, batch_);
    RLPT_CHECK(!slots_bound(), "KVCache::copy_slot: slots are bound to a forward");
    for (size_t l = 0; l < k_.size(); ++l)
        for (auto* buf : {&k_[l], &v_[l]})
            buf->select(0, dst).narrow(1, 0, length).copy_(buf->select(0, src).narrow(1, 0, length));
    if (routes_.defined()) routes_[dst].narrow(0, 0, length).copy_(routes_[src].narrow(0, 0, length));
    slot_len_[static_cast<size_t>(dst)] = length;
}

void KVCache::enable_routes(int64_t moe_layers, int64_t top_k) {
    RLPT_CHECK(moe_layers >= 1 && top_k >= 1, "KVCache::enable_routes: {} MoE layers, top-{}", moe_layers, top_k);
    routes_ = torch::full({batch_, max_length_, moe_layers, top_k}, -1,
                          torch::TensorOptions().dtype(torch::kInt16).device(k_.at(0).device()));
}

void KVCache::store_routes(int64_t moe_layer, const torch::Tensor& chosen) {
    if (!routes_.defined()) return;
    RLPT_CHECK(slots_bound(), "KVCache::store_routes: routes are kept for slot forwards only");
    const int64_t b = bound_.size(0), k = routes_.size(3);
    RLPT_CHECK(chosen.dim() == 2 && chosen.size(1) == k && chosen.size(0) % b == 0 && moe_layer >= 0 &&
                   moe_layer < routes_.size(2),
               "KVCache::store_routes: choices {} of MoE layer {} for {} bound rows, top-{} of {} layers",
               chosen.sizes(), moe_layer, b, k, routes_.size(2));
    const int64_t t = chosen.size(0) / b;
    const auto rows = chosen.to(routes_.device(), torch::kInt16).view({b, t, k});
    const auto* slot = bound_.data_ptr<int64_t>();
    for (int64_t r = 0; r < b; ++r) {
        // Where this row's K/V go: after what the slot holds (decode, extend), or from 0 (prefill,
        // right padding included; set_slot_length drops it, and its routes are overwritten later).
        const int64_t start = slot_len_[static_cast<size_t>(slot[r])];
        const int64_t n = extending() ? ext_new_.data_ptr<int64_t>()[r] : t;
        routes_[slot[r]].narrow(0, start, n).select(1, moe_layer).copy_(rows[r].narrow(0, 0, n));
    }
}

torch::Tensor KVCache::routes(int64_t slot, int64_t length) const {
    RLPT_CHECK(routes_.defined(), "KVCache::routes: routes are not kept (enable_routes)");
    RLPT_CHECK(slot >= 0 && slot < batch_ && length >= 0 && length <= slot_length(slot),
               "KVCache::routes: {} positions of slot {} (holding {})", length, slot, slot_length(slot));
    return routes_[slot].narrow(0, 0, length).to(torch::kCPU, torch::kInt64);
}

}  // namespace rlpt::model
