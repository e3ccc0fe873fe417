#pragma once
// Attention of one new query position per sequence over its KV cache (the decode step), one
// pass per (sequence, KV head) that reads the cached K and V in place:
//   scores[g, s] = (q[g] . k[s]) * scale;  masked keys get the lowest float;
//   p[g, :] = softmax(scores[g, :]) in float32;  out[g] = sum_s p[g, s] v[s].
// The LibTorch expression it replaces (matmul, scale, masked_fill, softmax, matmul) runs ~8 ops
// per layer and lets BLAS pack (copy) K and V for every (sequence, head) per step.
//
// Shapes: q [B, n_kv, G, hd] (the G query heads sharing KV head n), k and v [B, n_kv, S, hd]
// whose [S, hd] blocks are row-major (KVCache::store's views; any batch/head strides, others
// are copied), key_masked [B, S] bool (true: may not attend). Returns [B, n_kv, G, hd] in q's
// dtype. q, k, v all float32 or all bfloat16; CPU. Parallel over B * n_kv (at::parallel_for).
// A row with every key masked gets the uniform average of v (as softmax over equal scores).
// Not differentiable; re-entrant.
//
// decode_attention_slots: the same over a cache whose rows are sequence slots of their own
// lengths (KVCache slots, continuous batching): query row b attends to keys [0, lengths[b]) of
// cache row slots[b], reading nothing past them. q [B, n_kv, G, hd]; k and v [N, n_kv, T, hd]
// (the whole cache buffer of one layer); slots [B] int64 in [0, N) and lengths [B] int64 in
// [1, T], CPU. No key mask: a slot holds only real positions.

#include <torch/torch.h>

namespace rlpt::kernels {

// True when decode_attention is meant for this call: CPU, float32 or bfloat16 alike, 4-D
// shapes as above, no autograd graph wanted. Cheap.
bool decode_attention_applies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// ValueError on bad shapes, dtypes or devices.
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& key_masked, double scale);

// Plain reference (kernels/decode_attention_ref.cpp): double-precision loops, no threads.
torch::Tensor decode_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                         const torch::Tensor& key_masked, double scale);

// decode_attention_applies without the batch match (k and v have N >= B slot rows).
bool decode_attention_slots_applies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
// ValueError on bad shapes, dtypes, devices, or a slot / length out of range (naming the row).
torch::Tensor decode_attention_slots(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const torch::Tensor& slots, const torch::Tensor& lengths, double scale);
torch::Tensor decode_attention_slots_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const torch::Tensor& slots, const torch::Tensor& lengths, double scale);

}  // namespace rlpt::kernels
