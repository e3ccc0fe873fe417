#pragma once
// Decoder-only transformer compatible with Hugging Face Llama / Qwen2 / Qwen3 / Qwen3-MoE checkpoints.
//
// Parameter names (named_parameters()) are exactly Hugging Face's, so they map 1:1 to
// safetensors tensor names:
//   model.embed_tokens.weight                                    [V, H]
//   model.layers.{i}.self_attn.q_proj.{weight,bias}              [nh*hd, H], [nh*hd]  (bias: qkv_bias)
//   model.layers.{i}.self_attn.{k,v}_proj.{weight,bias}          [nkv*hd, H], [nkv*hd]
//   model.layers.{i}.self_attn.o_proj.{weight,bias}              [H, nh*hd], [H]      (bias: o_proj_bias)
//   model.layers.{i}.self_attn.{q,k}_norm.weight                 [hd]                 (qk_norm: Qwen3)
//   model.layers.{i}.mlp.{gate,up}_proj.{weight,bias}            [I, H], [I]          (bias: mlp_bias)
//   model.layers.{i}.mlp.down_proj.{weight,bias}                 [H, I], [H]
//   model.layers.{i}.mlp.gate.weight                             [E, H]    (MoE layers, instead of
//   model.layers.{i}.mlp.experts.{e}.{gate,up}_proj.weight       [Im, H]    the dense MLP:
//   model.layers.{i}.mlp.experts.{e}.down_proj.weight            [H, Im]    ModelArgs::is_moe_layer)
//   model.layers.{i}.{input,post_attention}_layernorm.weight     [H]
//   model.norm.weight                                            [H]
//   lm_head.weight                                               [V, H]  (absent when tied)
//
// Numerics follow HF's eager implementation: RMSNorm in fp32 then cast back and scaled by the
// weight in the model dtype; rotary cos/sin computed in fp32 (HF rotate-half convention) and
// cast to the model dtype; attention scores and softmax in fp32, probabilities cast back (or
// at::scaled_dot_product_attention, fp32 accumulation, nothing [T, S] kept:
// Backbone::use_sdpa_attention); SwiGLU MLP; grouped-query attention without copying K/V per head
// on the CPU. Parameters live in one dtype (kFloat32 or kBFloat16) and on one device.
//
// Inputs of every forward:
//   input_ids      [B, T] int64, each in [0, vocab_size)
//   attention_mask [B, S] any integer/bool dtype, 1 = real token, 0 = padding. S = T without a
//                  cache; with a cache S = cache->length() + T (mask over all cached positions).
//                  With the cache's slots bound (KVCache::bind_slots): S = T for a prefill of
//                  empty slots; ignored (may be undefined) for a decode step (T = 1), where
//                  each row sees its own slot's positions.
//   position_ids   [B, T] int64. For left-padded rows use clamp(cumsum(mask, 1) - 1, min=0);
//                  decode steps continue from the row's last position.
// Query positions that are padding (or see no real key) get a uniform attention over their
// keys: finite garbage, never NaN; callers ignore them.
//
// Tensor parallelism (tensor_parallel.h): built with a TensorParallel block of tp > 1 ranks,
// every rank holds its slices (shapes above with nh, nkv, I, V replaced by this rank's share,
// tp_layout()); named_parameters() keeps the HF names, shard_spec() says where each slice sits.
// Every forward is then collective on the block: all ranks call it with the same inputs.

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/model/chunked_head.h"
#include "rlpt/model/kv_cache.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/moe_routing.h"
#include "rlpt/model/tensor_parallel.h"

namespace rlpt::model {

namespace detail {
class DecoderLayer;
class RMSNorm;
struct Rotary;
struct AttentionMask;
}  // namespace detail

// Hooks a training engine installs on a Backbone to shard its parameters FSDP-style (ZeRO-3)
// or reduce-scatter gradients layer by layer (ZeRO-2): engine/train_engine.h. Backbone::forward
// calls before_forward(kRootUnit) first (parameters outside the decoder layers: embeddings,
// final norm, heads), then for each decoder layer i: before_forward(i), the layer,
// after_forward(i). With gradients enabled, the layer's output tensor gets a gradient hook
// calling before_backward(i) (runs before any of the layer's backward) and its input one
// calling after_backward(i) (runs after it: every parameter gradient of layer i has been
// accumulated into .grad). The calls are collective on whatever group the hooks shard over, so
// every rank of it must run the same forwards (and backwards) in the same order.
class LayerHooks {
  public:
    static constexpr int64_t kRootUnit = -1;
    virtual ~LayerHooks() = default;
    virtual void before_forward(int64_t layer) = 0;
    virtual void after_forward(int64_t layer) = 0;
    virtual void before_backward(int64_t layer) = 0;
    virtual void after_backward(int64_t layer) = 0;
    // Every parameter materialised (full values in the module's tensors) until the returned handle
    // is dropped; forwards inside the window run without gathers (e.g. generation, whose number
    // of decode steps differs per rank). Collective like the hooks; dropping it is local.
    virtual std::shared_ptr<void> hold_full_parameters() = 0;
};

// Whether a forward (not a decode step) of a `dtype` model on `device` over `keys` key positions
// attends through at::scaled_dot_product_attention (Backbone::use_sdpa_attention) rather than
// materialising fp32 scores and probabilities [B, heads, T, S]: everywhere but bfloat16 and float16
// on the CPU below 512 keys, where the materialised path is faster and small (measured: see the
// definition in src/model/transformer.cpp).
bool sdpa_attention_applies(torch::Dtype dtype, const torch::Device& device, int64_t keys);

// Hugging Face's `model.` submodule: embeddings, decoder layers, final norm. Shared by the
// causal LM and the value model.
class Backbone : public torch::nn::Module {
  public:
    // Parameters are allocated uninitialised (torch::empty) in `options`' dtype/device; load
    // or init them before use. `tp` null or of size 1: the whole model.
    Backbone(const ModelArgs& args, torch::TensorOptions options, std::shared_ptr<const TensorParallel> tp = nullptr);

    // Final-normed hidden states [B, T, H] in the model dtype. See the header comment for
    // inputs. With a cache: writes this call's K/V at positions [length, length+T) and advances
    // the cache by T (a slot cache keeping routes, KVCache::enable_routes, gets the MoE layers'
    // choices too). ValueError on shape/dtype/range mismatches.
    torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                          const torch::Tensor& position_ids, KVCache* cache = nullptr);

    const torch::Tensor& embed_weight() const { return embed_weight_; }  // [V, H] (this rank's rows)
    // A decode step over bound cache slots (KVCache::bind_slots, one position per row) on the
    // CPU in float32 without autograd or tensor parallelism runs each layer's fused step
    // (detail::DecoderLayer::decode_step: preallocated buffers in the cache, ~5 kernel calls per
    // layer instead of ~45 LibTorch operators) instead of its forward(). Default on;
    // CausalLM::use_decode_kernels sets it with the kernels.
    void use_fused_decode(bool on) { fused_decode_ = on; }
    // Forwards other than decode steps (training, log-probs, prefill) attend through
    // at::scaled_dot_product_attention where it applies (fp32 everywhere; bf16 on the CPU from 512
    // keys; sdpa_attention_applies): no [B, heads, T, S] scores or probabilities are kept
    // for the backward. Off: always the materialised fp32 scores and probabilities (HF eager; the
    // baseline of tests and benchmarks). Equal within rounding (tests/unit/test_model_attention.cpp).
    void use_sdpa_attention(bool on) { sdpa_attention_ = on; }
    // Forwards that took the fused step so far (for tests: that the path really runs).
    int64_t fused_decode_steps() const { return fused_decode_steps_; }
    // The block (null for tp = 1) and this rank's layout (tp = 1: everything).
    const TensorParallel* tp() const { return tp_ && tp_->size() > 1 ? tp_.get() : nullptr; }
    const std::shared_ptr<const TensorParallel>& tp_ptr() const { return tp_; }
    const TpLayout& tp_layout() const { return layout_; }

    int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
    // Decoder layer i (its parameters are model.layers.{i}.*).
    torch::nn::Module& layer(int64_t i);
    // Installs (or, with null, removes) the engine's hooks; see LayerHooks.
    void set_layer_hooks(std::shared_ptr<LayerHooks> hooks) { hooks_ = std::move(hooks); }
    const std::shared_ptr<LayerHooks>& layer_hooks() const { return hooks_; }
    // Mixture-of-experts routing of the forwards that follow (router replay, recording): see
    // moe_routing.h. Not owned; null (the default) routes by the router's top-k and records nothing.
    void set_routing(MoeRouting* routing) { routing_ = routing; }
    MoeRouting* routing() const { return routing_; }

  private:
    torch::Tensor hooked_layers(torch::Tensor h, const detail::Rotary& rope, const detail::AttentionMask& mask,
                                KVCache* cache, MoeRouting* routing);

    ModelArgs args_;
    std::shared_ptr<LayerHooks> hooks_;
    MoeRouting* routing_ = nullptr;
    std::shared_ptr<const TensorParallel> tp_;
    TpLayout layout_;
    torch::Tensor embed_weight_;
    std::vector<std::shared_ptr<detail::DecoderLayer>> layers_;
    std::shared_ptr<detail::RMSNorm> norm_;
    torch::Tensor inv_freq_;  // [head_dim/2] fp32 rotary frequencies (not a parameter)
    bool fused_decode_ = true;
    bool sdpa_attention_ = true;
    int64_t fused_decode_steps_ = 0;
};

// The policy: Hugging Face's *ForCausalLM. Construct it in the dtype/device you want (or load
// it); Module::to() also works, dtype()/device() read the parameters.
class CausalLM : public torch::nn::Module {
  public:
    // Validates `args` (and that `tp` can split it: ConfigError naming the numbers);
    // parameters are uninitialised until init_weights() or loading.
    explicit CausalLM(ModelArgs args, torch::Dtype dtype = torch::kFloat32, torch::Device device = torch::kCPU,
                      std::shared_ptr<const TensorParallel> tp = nullptr);

    // args().torch_dtype is the dtype the model was built with; save_pretrained writes dtype().
    const ModelArgs& args() const { return args_; }
    torch::Dtype dtype() const;
    torch::Device device() const;
    Backbone& backbone() { return *model_; }
    const Backbone& backbone() const { return *model_; }

    // [B, T, H] final-normed hidden states, model dtype.
    torch::Tensor forward_hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                 const torch::Tensor& position_ids, KVCache* cache = nullptr);
    // [V, H] output projection (the embedding matrix when tie_word_embeddings); this rank's
    // rows [Vl, H] under tensor parallelism. Shares storage with the parameter, so gradients
    // flow through it.
    torch::Tensor lm_head_weight() const;
    const TensorParallel* tp() const { return model_->tp(); }
    const TpLayout& tp_layout() const { return model_->tp_layout(); }
    // Precision of the log-prob head's matmuls (local_logits_fp32, and the chunked head of
    // engine::compute_log_probs): model/chunked_head.h's HeadPrecision, default kFp32.
    void set_head_precision(HeadPrecision p) { head_precision_ = p; }
    HeadPrecision head_precision() const { return head_precision_; }
    // Logits of this rank's vocabulary slice for hidden [N, H]: [N, Vl] float32, computed as
    // hidden.float() @ lm_head_weight().float()^T (at head_precision()); padding columns
    // (vocabulary padded to a multiple of tp) are -inf. Differentiable; collective on the block (its backward
    // all-reduces the hidden gradient). Feed it to vocab_parallel_logprob_entropy with
    // tp_layout().vocab_first. With tp = 1: the full [N, V] logits.
    torch::Tensor local_logits_fp32(const torch::Tensor& hidden) const;
    // The full [N, V] float32 logits of hidden [N, H] (matmul in the model dtype, then cast) on
    // every rank: gathered over the block for tp > 1 (sampling only; no gradient).
    torch::Tensor gathered_logits(const torch::Tensor& hidden) const;
    // [B, T, V] float32 logits = hidden @ lm_head_weight()^T (matmul in the model dtype, result
    // cast to fp32; gathered over the block for tp > 1). For log-probs over long sequences
    // prefer forward_hidden + a chunked head.
    torch::Tensor forward_logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                 const torch::Tensor& position_ids, KVCache* cache = nullptr);

    // A cache for `batch_size` rows and up to `max_length` positions, in the model's dtype/device.
    KVCache make_cache(int64_t batch_size, int64_t max_length) const;

    // CPU decode kernels, default on: decode-sized matmuls (few rows, no autograd graph: every
    // Linear and the LM head in gathered_logits) use kernels::small_matmul, decode steps (one
    // new position, with a cache) attend through kernels::decode_attention, and slot decode
    // steps run the fused per-layer step (Backbone::use_fused_decode). Off gives the plain
    // LibTorch path (torch::linear / OpenBLAS, matmul + softmax), the decode benchmark's
    // baseline.
    void use_decode_kernels(bool on);

    // Deterministic HF-style init from `seed`, independent of dtype/device: every Linear and
    // the embedding ~ normal(0, initializer_range) (drawn in fp32 on the CPU, in
    // named_parameters() order), biases 0, norm weights 1, the embedding row of pad_token_id 0.
    // Under tensor parallelism each rank draws every full tensor and keeps its slice, so the
    // model equals the tp = 1 model of the same seed.
    void init_weights(uint64_t seed);

  private:
    ModelArgs args_;
    std::shared_ptr<Backbone> model_;
    torch::Tensor lm_head_;  // undefined when tied
    bool small_matmul_ = true;
    HeadPrecision head_precision_ = HeadPrecision::kFp32;
};

// Loads a Hugging Face checkpoint directory: config.json (architecture LlamaForCausalLM or
// Qwen2ForCausalLM) + model.safetensors or model.safetensors.index.json with shards. Tensors
// are converted to `dtype` (kFloat32 or kBFloat16) on `device`. Errors (IoError, naming the
// tensor and the file): a parameter missing from the checkpoint, a tensor whose shape differs,
// a tensor the model doesn't have. `*.rotary_emb.inv_freq` buffers are ignored, as is a
// `lm_head.weight` in a tied checkpoint. Errors carry the context "loading '<dir>'".
// With `tp`, each rank reads only its slices (narrowed views of the memory-mapped file, one
// tensor copied at a time).
std::shared_ptr<CausalLM> load_pretrained(const std::string& dir, torch::Dtype dtype = torch::kBFloat16,
                                          torch::Device device = torch::kCPU,
                                          std::shared_ptr<const TensorParallel> tp = nullptr);

// Writes `dir`/config.json (torch_dtype = the model's dtype) and the parameters in the model's
// dtype as model.safetensors, or as shards of at most `max_shard_bytes` plus an index (HF
// naming), each file atomically. Stale shards from an earlier save in `dir` are removed. Other
// files (tokenizer, generation_config.json) are left alone: copy them yourself.
// Tensor-parallel models: collective on the block; the full tensors are gathered one at a time
// and block rank 0 writes them as they come (never the whole model on one rank).
// `local` (optional) supplies this rank's values of parameter i (named_parameters() order) when
// the module's own tensors do not hold them (a ZeRO-3 engine: TrainEngine::gather_parameter); it
// is called once per parameter, in order, on every rank that calls save_pretrained (also after a
// failed write, so that collectives inside it complete); its result is needed on block rank 0
// only (other ranks' results of a tp = 1 model are ignored).
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000ULL;
using LocalParameter = std::function<torch::Tensor(size_t index)>;
void save_pretrained(const CausalLM& model, const std::string& dir, uint64_t max_shard_bytes = kDefaultMaxShardBytes,
                     const LocalParameter& local = nullptr);

// CausalLM(args, dtype, device) + init_weights(seed).
std::shared_ptr<CausalLM> make_random_causal_lm(const ModelArgs& args, uint64_t seed,
                                                torch::Dtype dtype = torch::kFloat32,
                                                torch::Device device = torch::kCPU,
                                                std::shared_ptr<const TensorParallel> tp = nullptr);

// A deep copy of `src` (same args and tensor-parallel block, parameters copied, not shared) in
// `dtype` on `device`: e.g. the frozen reference policy of a built-in model that has no
// checkpoint directory.
std::shared_ptr<CausalLM> clone_causal_lm(const CausalLM& src, torch::Dtype dtype, torch::Device device);

// The Backbone inside `m` (a CausalLM, a ValueModel, or a Backbone itself), or null.
Backbone* find_backbone(torch::nn::Module& m);
// Every parameter of `m` holds its full values until the handle is dropped: a no-op (null
// handle) unless a training engine shards the parameters (ZeRO-3), then collective on the
// engine's data-parallel group (LayerHooks::hold_full_parameters). Use it around anything that
// reads parameters outside a forward: generation, weight sync, export, copies.
std::shared_ptr<void> hold_full_parameters(torch::nn::Module& m);

// "float32" / "bfloat16" / "float16" <-> torch dtype (ValueError otherwise).
std::string dtype_name(torch::Dtype dtype);
torch::Dtype dtype_from_name(const std::string& name);

}  // namespace rlpt::model
