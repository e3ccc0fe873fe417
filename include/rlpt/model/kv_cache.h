#pragma once
// Preallocated key/value cache for batched autoregressive generation.
//
// Per layer: K and V of shape [B, n_kv_heads, T_max, head_dim] in the model's dtype/device.
// All rows share one cached length T_cached (prompts are left-padded to a common length, so
// every row advances one position per decode step); padding is expressed through the
// attention mask, not through per-row lengths.
//
// Usage (under torch::NoGradGuard; the cache is not meant to carry autograd history):
//   KVCache cache = model.make_cache(B, T_prompt + max_new_tokens);
//   model.forward_logits(prompt_ids [B,T], prompt_mask [B,T], prompt_pos [B,T], &cache);  // prefill
//   loop: model.forward_logits(ids [B,1], mask [B, cache.length()+1], pos [B,1], &cache);
//         cache.keep_rows(unfinished_rows);  // drop finished sequences; slice ids/mask/pos alike
//   n samples of one prefilled prompt: prefill B prompts, then cache.repeat_rows(n) (rows
//   repeat_interleave'd, as the ids/mask/pos of the decode steps must be).
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
    // Forgets all cached positions (length() = 0), keeping the buffers.
    void reset() { length_ = 0; }

    // ---- used by the model's attention layers ----
    // Writes k, v ([B, n_kv, T_new, head_dim]) at positions [length(), length()+T_new) of
    // `layer` and returns views of the cached K, V over [0, length()+T_new). ValueError when
    // the cache would overflow or shapes don't match.
    std::pair<torch::Tensor, torch::Tensor> store(int64_t layer, const torch::Tensor& k, const torch::Tensor& v);
    // Commits T_new positions after every layer has stored them.
    void advance(int64_t n_new);

  private:
    std::vector<torch::Tensor> k_, v_;  // full buffers, batch dim narrowed to batch_
    int64_t batch_;
    int64_t max_length_;
    int64_t length_ = 0;
};

}  // namespace rlpt::model
