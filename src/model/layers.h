#pragma once
// Building blocks of the transformer (internal to src/model). Each block registers its
// parameters under Hugging Face's names.

#include <torch/torch.h>

#include "rlpt/model/kv_cache.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/moe_routing.h"
#include "rlpt/model/tensor_parallel.h"

namespace rlpt::model::detail {

// y = x W^T (+ b). weight [out, in], bias [out]: this rank's slice under tensor parallelism
// (tensor_parallel.h). Decode-sized calls (few rows, no autograd graph, CPU) go through
// kernels::small_matmul, which streams the weight once instead of BLAS re-packing it per call;
// everything else (training, prefill) through torch::linear.
class Linear : public torch::nn::Module {
  public:
    Linear(int64_t in, int64_t out, bool bias, const torch::TensorOptions& options);
    torch::Tensor forward(const torch::Tensor& x) const { return matmul(x, weight_, bias_); }
    // x w^T with another tensor standing for the weight (e.g. tp_copy(weight())), no bias, through
    // the same kernels as forward().
    torch::Tensor matmul_with(const torch::Tensor& x, const torch::Tensor& w) const { return matmul(x, w, {}); }
    // Row-parallel: the partial products are summed over the block, then the (replicated) bias
    // is added once. With tp = 1 exactly forward().
    torch::Tensor forward_row_parallel(const torch::Tensor& x, const TensorParallel* tp) const;
    // A KV projection whose head may be replicated over the block (gradients summed over the
    // ranks sharing it). With split heads exactly forward().
    torch::Tensor forward_kv(const torch::Tensor& x, const TensorParallel* tp, const TpLayout& layout) const;
    const torch::Tensor& weight() const { return weight_; }
    const torch::Tensor& bias() const { return bias_; }  // undefined without bias
    // Off: always torch::linear (the BLAS baseline of the decode benchmark). Default on.
    void use_small_matmul(bool on) { small_matmul_ = on; }

  private:
    torch::Tensor matmul(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const;
    torch::Tensor weight_, bias_;
    bool small_matmul_ = true;
};

// Rows up to which a float32 decode step's matmuls (the fused step's and the LM head's) run
// through the small_matmul kernels rather than BLAS. At 64 rows of the 125M model (2026-11-26,
// README "Rollout decode"): the kernel's step is 1.9x OpenBLAS's with the Prescott kernels
// OpenBLAS 0.3.21 falls back to on CPUs it does not know (this VM), 0.91x (1 thread) to 1.16x
// (2 threads) of its tuned Cooperlake kernels; the kernel does not depend on that detection.
// Past ~64 rows of K = 2048 the x rows no longer stay in L2. (Other callers stop at
// kernels::kSmallMatmulMaxRows.)
constexpr int64_t kDecodeKernelMaxRows = 64;

// Whether DecoderLayer::decode_step applies to a forward of hidden states h [B, 1, H] with
// `cache` (slots bound, a decode step): CPU, float32, grad mode off, no tensor parallelism.
bool fused_decode_applies(const torch::Tensor& h, const KVCache& cache, const TensorParallel* tp);

// x w^T + b through kernels::small_matmul when `small_matmul` is on and it applies, else
// torch::linear.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, bool small_matmul);

// HF RMSNorm: normalise in fp32, cast back, multiply by the weight in the input dtype.
class RMSNorm : public torch::nn::Module {
  public:
    RMSNorm(int64_t dim, double eps, const torch::TensorOptions& options);
    torch::Tensor forward(const torch::Tensor& x) const { return normalise(x, weight_); }
    // A norm over head_dim of one rank's heads (Qwen3's q/k norms): the weight is replicated over
    // the block while each rank sees its own heads, so its gradient is summed over the block
    // (tp_copy). With tp = 1 exactly forward().
    torch::Tensor forward_split(const torch::Tensor& x, const TensorParallel* tp) const {
        return normalise(x, tp_copy(weight_, tp));
    }
    const torch::Tensor& weight() const { return weight_; }
    double eps() const { return eps_; }

  private:
    torch::Tensor normalise(const torch::Tensor& x, const torch::Tensor& w) const;
    torch::Tensor weight_;
    double eps_;
};

// Rotary tables for one forward: cos/sin [B, T, 1, head_dim] in the model dtype.
struct Rotary {
    torch::Tensor cos, sin;
};
// inv_freq [head_dim/2] fp32 for the config (rope_theta, optional llama3 scaling).
torch::Tensor rotary_inv_freq(const ModelArgs& args);
Rotary rotary_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids, torch::Dtype dtype);

// The attention masks of one forward, built once by Backbone::forward for every layer.
struct AttentionMask {
    // [B, 1, 1, T, S] bool, true = the query may not attend the key: the decode paths and the
    // materialised path (scores filled with lowest(), so a row that may see no key, a left-padding
    // position, gets uniform weights over all S keys).
    torch::Tensor masked_out;
    // Defined when the forward attends through at::scaled_dot_product_attention
    // (model::sdpa_attention_applies): bias [B, 1, T, S] in the model dtype, added to the scores
    // (0 = may attend, -inf = may not), with every key allowed on the rows that may see none, and
    // no_key [B, 1, T, 1] bool marking those rows, whose queries are zeroed: all their scores are
    // 0, so their weights are uniform over all keys, the materialised path's result (never the NaN
    // of an all-masked row), and their query gradient is 0 as there. Additive rather than bool:
    // SDPA converts a bool mask to this per call and keeps the copy for the backward, one per
    // layer; this one tensor is shared by every layer.
    torch::Tensor bias, no_key;
};

// The SDPA masks of masked_out [B, 1, 1, T, S] (AttentionMask::bias in `dtype`, and no_key).
AttentionMask attention_sdpa_mask(torch::Tensor masked_out, torch::Dtype dtype);

// Modules below hold this rank's slices per `layout` (tp = 1: everything) and run their
// collectives on `tp` (null when tp = 1).
class Attention : public torch::nn::Module {
  public:
    Attention(const ModelArgs& args, const TpLayout& layout, const TensorParallel* tp,
              const torch::TensorOptions& options);
    // x [B, T, H]; mask.masked_out [B, 1, 1, T, S] bool (true = may not attend); returns [B, T, H].
    // With args.qk_norm, q and k are RMS-normed per head (q_norm, k_norm over head_dim) between
    // the projections and the rotary embedding, in every path below.
    // With mask.bias defined (a forward that is not a decode step, sdpa_attention_applies) through
    // at::scaled_dot_product_attention (the CPU's fused flash kernel; CUDA's memory-efficient one):
    // nothing of size [B, heads, T, S] is kept for the backward. Otherwise materialised: fp32 scores
    // and probabilities [B, heads, T, S], the probabilities cast to the model dtype (HF eager).
    // A decode step (T = 1, cache, no autograd graph, CPU) attends through
    // kernels::decode_attention, reading the cache in place; with the cache's slots bound
    // (KVCache::bind_slots), through kernels::decode_attention_slots (each row its slot's
    // length; elsewhere the slots are gathered and masked_out is [B, 1, 1, 1, longest]).
    torch::Tensor forward(const torch::Tensor& x, const Rotary& rope, const AttentionMask& mask, KVCache* cache,
                          int64_t layer);
    // Off: always the LibTorch expression (the decode benchmark's baseline). Default on.
    void use_decode_attention(bool on) { decode_attention_ = on; }
    // The fused CPU decode step's attention (see DecoderLayer::decode_step): xn [B, H] the
    // normed input, h [B, H] the residual stream, h += o_proj(attention(xn)) in place.
    void decode_step(const torch::Tensor& xn, const torch::Tensor& h, const Rotary& rope, KVCache& cache,
                     int64_t layer) const;

  private:
    bool decode_attention_ = true;
    int64_t n_heads_, n_kv_heads_, head_dim_;  // this rank's heads
    TpLayout layout_;
    const TensorParallel* tp_;
    std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_;
    std::shared_ptr<RMSNorm> q_norm_, k_norm_;  // null without args.qk_norm
};

// A SwiGLU MLP of `width` intermediate columns on this rank (the dense layer's layout.inter, or an
// expert's layout.moe_inter).
class Mlp : public torch::nn::Module {
  public:
    Mlp(const ModelArgs& args, int64_t width, const TensorParallel* tp, const torch::TensorOptions& options);
    torch::Tensor forward(const torch::Tensor& x) const;
    // down(silu(gate(x)) * up(x)) of this rank's columns, without the block's collectives: an
    // expert's partial output (SparseMoe sums the experts, then reduces once). With tp = 1 the
    // whole output.
    torch::Tensor forward_local(const torch::Tensor& x) const;
    // h += down(silu(gate(xn)) * up(xn)) in place (DecoderLayer::decode_step).
    void decode_step(const torch::Tensor& xn, const torch::Tensor& h, KVCache& cache) const;

  private:
    const TensorParallel* tp_;
    std::shared_ptr<Linear> gate_proj_, up_proj_, down_proj_;
};

// Qwen3-MoE's sparse block (ModelArgs::num_experts): the router `gate` (Linear [E, H], no bias,
// replicated over the block; its gradient summed over the block) and the experts
// `experts.{e}` (Mlp of moe_intermediate_size, columns split over the block like the dense MLP).
// Every row goes to its top-k experts (or the replayed ones, MoeRouting::replay); the experts run
// grouped: rows sorted by expert (a stable sort), one matmul chain per expert over its rows,
// results put back in row order and summed over the k choices in a fixed order (no atomics, so
// runs repeat bit for bit on every device). With gradients recorded, an expert that gets no row still
// runs on zero rows, so its gradients exist (zeros) on every rank and the gradient collectives stay
// aligned; without (generation, log-probs) it is skipped.
class SparseMoe : public torch::nn::Module {
  public:
    SparseMoe(const ModelArgs& args, const TpLayout& layout, const TensorParallel* tp, int64_t moe_layer,
              const torch::TensorOptions& options);
    // x [B, T, H] -> [B, T, H]. `routing` (may be null): MoeRouting's replay / recording, for this
    // block's MoE-layer index.
    torch::Tensor forward(const torch::Tensor& x, MoeRouting* routing) const;

  private:
    const TensorParallel* tp_;
    int64_t moe_layer_, top_k_;
    bool norm_topk_;
    std::shared_ptr<Linear> gate_;
    std::vector<std::shared_ptr<Mlp>> experts_;
};

class DecoderLayer : public torch::nn::Module {
  public:
    // `moe_layer`: this layer's index among the sparse layers, -1 for a dense layer.
    DecoderLayer(const ModelArgs& args, const TpLayout& layout, const TensorParallel* tp, int64_t moe_layer,
                 const torch::TensorOptions& options);
    torch::Tensor forward(const torch::Tensor& x, const Rotary& rope, const AttentionMask& mask, KVCache* cache,
                          int64_t layer, MoeRouting* routing = nullptr);
    // The fused CPU decode step of this layer: one new position per row with the cache's slots
    // bound (decode, not extend), float32, no autograd, no tensor parallelism (fused_decode_applies).
    // h [B, H] float32 contiguous is the residual stream, updated in place. Every buffer is the
    // cache's scratch; matmuls go through kernels::small_matmul_into with q/k/v and gate/up each
    // in one parallel region and the residual adds fused; RMSNorm and rotary through
    // kernels/decode_ops.h (the q/k norms too, one row per head); the K/V row written straight into its slot; attention through
    // kernels::decode_attention_slots. The same function as forward() (same matmul and
    // attention kernels; RMSNorm's mean summed in double). A sparse layer's MLP runs
    // SparseMoe::forward on the normed rows and adds its output.
    void decode_step(const torch::Tensor& h, const Rotary& rope, KVCache& cache, int64_t layer,
                     MoeRouting* routing = nullptr) const;

  private:
    std::shared_ptr<Attention> self_attn_;
    std::shared_ptr<Mlp> mlp_;        // dense layers
    std::shared_ptr<SparseMoe> moe_;  // sparse layers (registered as "mlp" too)
    std::shared_ptr<RMSNorm> input_layernorm_, post_attention_layernorm_;
};

}  // namespace rlpt::model::detail
