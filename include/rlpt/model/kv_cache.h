#pragma once
// Preallocated key/value cache for batched autoregressive generation.
//
// Per layer: K and V of shape [B, n_kv_heads, T_max, head_dim] in the model's dtype/device.
// Two ways to use it (one per cache, they do not mix):
//
// Shared length: all rows share one cached length T_cached (prompts are left-padded to a
// common length, so every row advances one position per decode step); padding is expressed
// through the attention mask, not through per-row lengths.
//   KVCache cache = model.make_cache(B, T_prompt + max_new_tokens);
//   model.forward_logits(prompt_ids [B,T], prompt_mask [B,T], prompt_pos [B,T], &cache);  // prefill
//   loop: model.forward_logits(ids [B,1], mask [B, cache.length()+1], pos [B,1], &cache);
//         cache.keep_rows(unfinished_rows);  // drop finished sequences; slice ids/mask/pos alike
//   n samples of one prefilled prompt: prefill B prompts, then cache.repeat_rows(n) (rows
//   repeat_interleave'd, as the ids/mask/pos of the decode steps must be).
//
// Slots (continuous batching, rollout/generator.cpp): every row is a slot holding one sequence
// from position 0, with its own length (slot_length); no padding is ever cached. Before each
// forward, bind_slots(s) makes the forward's B rows the slots s (distinct, any order):
//   prefill (T > 1, every bound slot empty): K/V of the T positions go to [0, T) of each slot;
//     the attention is the plain causal one over these T positions (right-pad shorter prompts
//     and mask them, then set_slot_length(s, real length) to drop the padding);
//   decode (T = 1): row b writes its position at slot_length(s[b]) and attends to the slot's
//     positions [0, slot_length + 1) (attention_mask may be undefined; positions are the
//     caller's, normally slot_length(s[b])).
//   extend (bind_slots(s, n): bound slots may hold positions): row b appends its first n[b]
//     positions (T = max n, shorter rows right-padded) at slot_length(s[b]); query i of row b
//     attends to the slot's positions [0, slot_length + i] (a multi-turn conversation's new
//     turn prefilled after what the slot holds: prefix reuse, agent/tool_agent.h).
// The forward's advance() grows each bound slot by T (extend: by n[b]) and unbinds. copy_slot shares a prefilled
// prompt with other slots (n samples of one prompt); set_slot_length(s, 0) frees a slot. The
// buffers are allocated once, at construction: slots never reallocate or compact.
//
// Not thread-safe; one cache per generation batch.

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace rlpt::model {

class KVCache {
  public:
    KVCache(int64_t n_layers, int64_t batch_size, int64_t n_kv_heads, int64_t head_dim, int64_t max_length,
            torch::TensorOptions options);
    // Move-only: a copy would share the buffers but not the length.
    KVCache(KVCache&&) = default;
    KVCache& operator=(KVCache&&) = default;
    KVCache(const KVCache&) = delete;
    KVCache& operator=(const KVCache&) = delete;

    int64_t n_layers() const { return static_cast<int64_t>(k_.size()); }
    int64_t batch_size() const { return batch_; }
    int64_t length() const { return length_; }          // T_cached: positions written so far
    int64_t max_length() const { return max_length_; }  // T_max

    // Keeps only the given rows, in the given order: `rows` is a 1-D int64 tensor of distinct
    // indices in [0, batch_size()). Compacts in place (no new cache buffers): later steps cost
    // compute for the kept rows only. ValueError on bad indices.
    void keep_rows(const torch::Tensor& rows);
    // Rows may repeat: row i of the result is row rows[i] of this cache (its cached positions
    // copied), e.g. beam-search forks, or one prefilled prompt shared by n samples. `rows` is a
    // 1-D int64 tensor of indices in [0, batch_size()), any length >= 0. Allocates new buffers
    // of rows.size(0) rows (keep_rows compacts in place). ValueError on bad indices.
    void fork_rows(const torch::Tensor& rows);
    // Each row repeated n times consecutively (row i -> rows i*n .. i*n+n-1): n samples of
    // each prompt after one prefill. n >= 1.
    void repeat_rows(int64_t n);
    // Forgets all cached positions (length() = 0, every slot empty), keeping the buffers.
    void reset();

    // ---- slots (see the header comment) ----
    // The next forward's rows are these slots: distinct, in [0, batch_size()), at least one.
    // ValueError otherwise, or when the cache already holds shared-length positions.
    void bind_slots(const std::vector<int64_t>& slots);
    // Extend binding (see the header comment): new_lengths[b] >= 1 positions go after what
    // slot slots[b] holds; ValueError when a slot would exceed max_length().
    void bind_slots(const std::vector<int64_t>& slots, const std::vector<int64_t>& new_lengths);
    // The bound slots' lengths before the forward [B] and new positions [B] (int64 CPU), defined
    // for an extend binding only.
    const torch::Tensor& extend_prefix_lengths() const { return ext_prefix_; }
    const torch::Tensor& extend_new_lengths() const { return ext_new_; }
    bool extending() const { return ext_new_.defined(); }
    bool slots_bound() const { return bound_.defined(); }
    const torch::Tensor& bound_slots() const { return bound_; }  // [B] int64 CPU
    // [B] int64 CPU: the keys each bound row attends to in a decode step (slot length + 1).
    const torch::Tensor& bound_lengths() const { return bound_len_; }
    const torch::Tensor& bound_slots_on_device() const { return bound_dev_; }  // bound_slots() on the cache's device
    // bound_lengths() on the cache's device, and each bound row's write position (length - 1) there:
    // uploaded once per bind_slots, not once per layer (defined for a decode binding only).
    const torch::Tensor& bound_lengths_on_device() const { return bound_len_dev_; }
    const torch::Tensor& bound_positions_on_device() const { return bound_pos_dev_; }
    int64_t slot_length(int64_t slot) const;
    // Shortens a slot to `length` <= slot_length(slot) positions (0 frees it).
    void set_slot_length(int64_t slot, int64_t length);
    // Copies positions [0, length) of slot `src` into slot `dst` (every layer), whose length
    // becomes `length`; length <= slot_length(src), dst != src.
    void copy_slot(int64_t dst, int64_t src, int64_t length);

    // ---- routes (slot use, mixture-of-experts models; router replay R3) ----
    // Keeps, beside each slot position's K/V, the experts its row was routed to in each of
    // `moe_layers` MoE layers ([batch, max_length, moe_layers, top_k] int16 on the cache's device,
    // -1 where nothing was routed): written by the model's forwards (store_routes), copied by
    // copy_slot, read with routes(). Call once, before the first forward.
    void enable_routes(int64_t moe_layers, int64_t top_k);
    bool routes_enabled() const { return routes_.defined(); }
    // The model (Backbone::forward, slots bound, before advance): the experts of MoE layer
    // `moe_layer` for the forward's rows, chosen [B*T, top_k] (row b*T + t: input position t of
    // bound row b), stored at the positions the forward's K/V go to (prefill, decode, extend).
    void store_routes(int64_t moe_layer, const torch::Tensor& chosen);
    // Positions [0, length) of `slot`: [length, moe_layers, top_k] int64 on the host.
    torch::Tensor routes(int64_t slot, int64_t length) const;

    // ---- used by the model's attention layers ----
    // Writes k, v ([B, n_kv, T_new, head_dim]) at positions [length(), length()+T_new) of
    // `layer` and returns views of the cached K, V over [0, length()+T_new). ValueError when
    // the cache would overflow or shapes don't match.
    // Slots bound: writes at each bound slot's own length (see the header comment) and
    // returns, for a decode step, the layer's whole K and V buffers [batch_size(), n_kv, T_max,
    // head_dim] (rows = slots; read through bound_slots() / bound_lengths()), for a prefill
    // k and v themselves.
    std::pair<torch::Tensor, torch::Tensor> store(int64_t layer, const torch::Tensor& k, const torch::Tensor& v);
    // Commits T_new positions after every layer has stored them (slots bound: each bound slot
    // grows by T_new, and the slots are unbound).
    void advance(int64_t n_new);
    // Scratch buffer `index` of the model's fused CPU decode step (DecoderLayer::decode_step):
    // a float32 [rows, cols] tensor on the cache's device, allocated on first use for
    // max(rows, batch_size()) rows and reused after (so a step writes into warm memory instead of
    // fresh allocations). Kept here because a cache belongs to one generation batch: concurrent
    // generations on one model never share it. Contents are undefined between calls.
    torch::Tensor scratch(size_t index, int64_t rows, int64_t cols);

  private:
    std::vector<torch::Tensor> k_, v_;  // full buffers, batch dim narrowed to batch_
    int64_t batch_;
    int64_t max_length_;
    int64_t length_ = 0;
    std::vector<int64_t> slot_len_;                // per row, slot use only
    bool slotted_ = false;                         // bind_slots was called: no shared-length use
    torch::Tensor bound_, bound_len_, bound_dev_;  // the bound slots (undefined: none)
    torch::Tensor bound_len_dev_, bound_pos_dev_;  // decode binding: lengths and write positions on the device
    torch::Tensor ext_prefix_, ext_new_;           // extend binding (undefined: none)
    std::vector<torch::Tensor> scratch_;           // scratch(): flat float32 buffers
    torch::Tensor routes_;                         // enable_routes: [batch, max_length, moe_layers, k] int16
};

}  // namespace rlpt::model
