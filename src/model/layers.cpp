#include "model/layers.h"

#include "rlpt/kernels/decode_attention.h"
#include "rlpt/kernels/decode_ops.h"
#include "rlpt/kernels/small_matmul.h"

#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "rlpt/core/error.h"

namespace rlpt::model::detail {

Linear::Linear(int64_t in, int64_t out, bool bias, const torch::TensorOptions& options) {
    weight_ = register_parameter("weight", torch::empty({out, in}, options));
    if (bias) bias_ = register_parameter("bias", torch::empty({out}, options));
}

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, bool small_matmul) {
    if (small_matmul && kernels::small_matmul_applies(x, w, b)) return kernels::small_matmul(x, w, b);
    return torch::linear(x, w, b);
}

bool fused_decode_applies(const torch::Tensor& h, const KVCache& cache, const TensorParallel* tp) {
    return tp == nullptr && !torch::GradMode::is_enabled() && h.is_cpu() && h.scalar_type() == torch::kFloat32 &&
           h.dim() == 3 && h.size(1) == 1 && cache.slots_bound() && !cache.extending();
}

namespace {

// The matmuls of a fused decode step: every target in one small_matmul_into call (one parallel
// region); past kDecodeKernelMaxRows rows (or for a weight that is not contiguous, never so for
// parameters) through BLAS into the same buffers.
void project(const torch::Tensor& x, const std::vector<kernels::MatmulTarget>& targets) {
    bool kernel = x.size(0) <= kDecodeKernelMaxRows;
    for (const auto& t : targets) kernel = kernel && t.w.is_contiguous();
    if (kernel) return kernels::small_matmul_into(x, targets);
    for (const auto& t : targets) {
        auto out = t.out;  // a handle on the same buffer
        if (t.accumulate) {
            out.addmm_(x, t.w.t());
            if (t.bias.defined()) out.add_(t.bias);
        } else if (t.bias.defined()) {
            torch::addmm_out(out, t.bias, x, t.w.t());
        } else {
            torch::mm_out(out, x, t.w.t());
        }
    }
}

}  // namespace

torch::Tensor Linear::matmul(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) const {
    return linear(x, w, b, small_matmul_);
}

torch::Tensor Linear::forward_row_parallel(const torch::Tensor& x, const TensorParallel* tp) const {
    if (tp == nullptr || tp->size() == 1) return forward(x);
    auto y = tp_reduce(matmul(x, weight_, {}), tp);
    return bias_.defined() ? y + bias_ : y;
}

torch::Tensor Linear::forward_kv(const torch::Tensor& x, const TensorParallel* tp, const TpLayout& layout) const {
    if (tp == nullptr || !layout.kv_replicated) return forward(x);
    return matmul(x, tp_kv_replica(weight_, tp, layout, layout.num_kv_heads),
                  tp_kv_replica(bias_, tp, layout, layout.num_kv_heads));
}

RMSNorm::RMSNorm(int64_t dim, double eps, const torch::TensorOptions& options) : eps_(eps) {
    weight_ = register_parameter("weight", torch::empty({dim}, options));
}

torch::Tensor RMSNorm::normalise(const torch::Tensor& x, const torch::Tensor& w) const {
    auto xf = x.to(torch::kFloat32);
    auto variance = xf.pow(2).mean(-1, /*keepdim=*/true);
    xf = xf * torch::rsqrt(variance + eps_);
    return w * xf.to(x.scalar_type());
}

torch::Tensor rotary_inv_freq(const ModelArgs& args) {
    const int64_t dim = args.head_dim;
    auto exponent = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / static_cast<double>(dim);
    auto inv_freq = torch::reciprocal(torch::pow(args.rope_theta, exponent));
    if (args.rope_scaling.type == RopeScalingType::kLlama3) {
        // Llama 3.1 frequency scaling: long wavelengths divided by `factor`, short ones kept,
        // a smooth blend in between.
        const auto& rs = args.rope_scaling;
        const double old_len = static_cast<double>(rs.original_max_position_embeddings);
        const double low_freq_wavelen = old_len / rs.low_freq_factor;
        const double high_freq_wavelen = old_len / rs.high_freq_factor;
        const double pi = 3.14159265358979323846;
        auto wavelen = 2 * pi / inv_freq;
        auto scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / rs.factor, inv_freq);
        auto smooth = (old_len / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        auto smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
        auto is_medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
        inv_freq = torch::where(is_medium, smoothed, scaled);
    }
    return inv_freq;
}

Rotary rotary_tables(const torch::Tensor& inv_freq, const torch::Tensor& position_ids, torch::Dtype dtype) {
    // [B, T, 1] x [hd/2] -> [B, T, hd/2], in fp32.
    auto freqs = position_ids.to(torch::kFloat32).unsqueeze(-1) * inv_freq.to(position_ids.device());
    auto emb = torch::cat({freqs, freqs}, -1).unsqueeze(2);  // [B, T, 1, hd]
    return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

namespace {

// x [B, T, heads, hd]: x*cos + rotate_half(x)*sin, rotate_half(x) = cat(-x2, x1).
torch::Tensor apply_rotary(const torch::Tensor& x, const Rotary& rope) {
    const int64_t half = x.size(-1) / 2;
    auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
    return x * rope.cos + rotated * rope.sin;
}

}  // namespace

Attention::Attention(const ModelArgs& args, const TpLayout& layout, const TensorParallel* tp,
                     const torch::TensorOptions& options)
    : n_heads_(layout.heads), n_kv_heads_(layout.kv_heads), head_dim_(args.head_dim), layout_(layout), tp_(tp) {
    const int64_t h = args.hidden_size;
    q_proj_ = register_module("q_proj", std::make_shared<Linear>(h, n_heads_ * head_dim_, args.qkv_bias, options));
    k_proj_ = register_module("k_proj", std::make_shared<Linear>(h, n_kv_heads_ * head_dim_, args.qkv_bias, options));
    v_proj_ = register_module("v_proj", std::make_shared<Linear>(h, n_kv_heads_ * head_dim_, args.qkv_bias, options));
    o_proj_ = register_module("o_proj", std::make_shared<Linear>(n_heads_ * head_dim_, h, args.o_proj_bias, options));
    if (args.qk_norm) {
        q_norm_ = register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, args.rms_norm_eps, options));
        k_norm_ = register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, args.rms_norm_eps, options));
    }
}

AttentionMask attention_sdpa_mask(torch::Tensor masked_out, torch::Dtype dtype) {
    AttentionMask m;
    const auto sizes = masked_out.sizes();
    RLPT_CHECK(masked_out.dim() == 5 && masked_out.scalar_type() == torch::kBool,
               "attention_sdpa_mask: masked_out must be [B, 1, 1, T, S] bool, got {}", sizes);
    const auto flat = masked_out.view({sizes[0], 1, sizes[3], sizes[4]});
    m.no_key = flat.all(-1, /*keepdim=*/true);
    const auto blocked = flat.logical_and(m.no_key.logical_not());
    m.bias = torch::zeros(flat.sizes(), masked_out.options().dtype(dtype))
                 .masked_fill_(blocked, -std::numeric_limits<double>::infinity());
    m.masked_out = std::move(masked_out);
    return m;
}

torch::Tensor Attention::forward(const torch::Tensor& x, const Rotary& rope, const AttentionMask& mask, KVCache* cache,
                                 int64_t layer) {
    const auto& masked_out = mask.masked_out;
    const int64_t b = x.size(0), t = x.size(1);
    const int64_t group = n_heads_ / n_kv_heads_;
    // Column-parallel q/k/v: this rank's heads only.
    const auto xin = tp_copy(x, tp_);
    auto q = q_proj_->forward(xin).view({b, t, n_heads_, head_dim_});
    auto k = k_proj_->forward_kv(xin, tp_, layout_).view({b, t, n_kv_heads_, head_dim_});
    if (q_norm_) {
        q = q_norm_->forward_split(q, tp_);
        k = k_norm_->forward_split(k, tp_);
    }
    q = apply_rotary(q, rope).transpose(1, 2);
    k = apply_rotary(k, rope).transpose(1, 2);
    auto v = v_proj_->forward_kv(xin, tp_, layout_).view({b, t, n_kv_heads_, head_dim_}).transpose(1, 2);
    const bool slot_decode = cache != nullptr && cache->slots_bound() && t == 1 && !cache->extending();
    if (cache != nullptr) std::tie(k, v) = cache->store(layer, k, v);
    const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));

    if (mask.bias.defined() && !(cache != nullptr && t == 1)) {  // not a decode step: SDPA
        // Grouped-query attention: the CPU flash kernel reads K/V head h / group in place
        // (enable_gqa); CUDA's memory-efficient kernel, the one that takes a mask, has no GQA
        // (SDPA would fall back to the materialising math kernel), so K/V are expanded per head
        // there: [B, heads, S, hd], still far below [B, heads, T, S].
        const bool expand = group > 1 && !x.is_cpu();
        if (expand) {
            k = k.repeat_interleave(group, 1);
            v = v.repeat_interleave(group, 1);
        }
        auto out = at::scaled_dot_product_attention(q.masked_fill(mask.no_key, 0), k, v, mask.bias,
                                                    /*dropout_p=*/0.0, /*is_causal=*/false, scale,
                                                    /*enable_gqa=*/group > 1 && !expand);
        out = out.transpose(1, 2).reshape({b, t, n_heads_ * head_dim_});
        return o_proj_->forward_row_parallel(out, tp_);
    }
    // Grouped-query attention: query heads h = kv*group + j share KV head kv. Folding the group
    // into the query length lets one batched matmul serve all heads of a group without
    // materialising repeated K/V.
    auto qg = q.reshape({b, n_kv_heads_, group * t, head_dim_});
    if (slot_decode) {
        // k, v: the whole cache, rows = slots. The kernel reads each row's slot in place.
        if (decode_attention_ && kernels::decode_attention_slots_applies(qg, k, v)) {
            auto out = kernels::decode_attention_slots(qg, k, v, cache->bound_slots(), cache->bound_lengths(), scale);
            return o_proj_->forward_row_parallel(out.reshape({b, 1, n_heads_ * head_dim_}), tp_);
        }
        // Elsewhere: gather the bound slots' positions (masked_out covers [0, longest)).
        const int64_t longest = masked_out.size(-1);
        k = k.index_select(0, cache->bound_slots_on_device()).narrow(2, 0, longest);
        v = v.index_select(0, cache->bound_slots_on_device()).narrow(2, 0, longest);
    }
    const int64_t s = k.size(2);
    if (!slot_decode && t == 1 && cache != nullptr && decode_attention_ &&
        kernels::decode_attention_applies(qg, k, v)) {
        auto out = kernels::decode_attention(qg, k, v, masked_out.reshape({b, s}), scale);
        return o_proj_->forward_row_parallel(out.reshape({b, 1, n_heads_ * head_dim_}), tp_);
    }
    auto scores = torch::matmul(qg, k.transpose(2, 3)).to(torch::kFloat32);
    scores.mul_(scale);
    scores = scores.view({b, n_kv_heads_, group, t, s});
    scores.masked_fill_(masked_out, std::numeric_limits<float>::lowest());
    auto probs = torch::softmax(scores, -1).to(x.scalar_type()).view({b, n_kv_heads_, group * t, s});
    auto out = torch::matmul(probs, v);  // [B, nkv, group*T, hd]
    out = out.view({b, n_heads_, t, head_dim_}).transpose(1, 2).reshape({b, t, n_heads_ * head_dim_});
    return o_proj_->forward_row_parallel(out, tp_);
}

void Attention::decode_step(const torch::Tensor& xn, const torch::Tensor& h, const Rotary& rope, KVCache& cache,
                            int64_t layer) const {
    const int64_t b = xn.size(0), hd = head_dim_;
    auto q = cache.scratch(1, b, n_heads_ * hd), k = cache.scratch(2, b, n_kv_heads_ * hd),
         v = cache.scratch(3, b, n_kv_heads_ * hd);
    project(xn, {{q_proj_->weight(), q_proj_->bias(), q},
                 {k_proj_->weight(), k_proj_->bias(), k},
                 {v_proj_->weight(), v_proj_->bias(), v}});
    if (q_norm_) {  // one row per head
        const auto qh = q.view({b * n_heads_, hd}), kh = k.view({b * n_kv_heads_, hd});
        kernels::rms_norm_into(qh, q_norm_->weight(), q_norm_->eps(), qh);
        kernels::rms_norm_into(kh, k_norm_->weight(), k_norm_->eps(), kh);
    }
    const auto cos = rope.cos.reshape({b, hd}), sin = rope.sin.reshape({b, hd});
    kernels::rotary_inplace(q, cos, sin, hd);
    kernels::rotary_inplace(k, cos, sin, hd);
    auto [kb, vb] = cache.store(layer, k.view({b, n_kv_heads_, 1, hd}), v.view({b, n_kv_heads_, 1, hd}));
    auto out = kernels::decode_attention_slots(q.view({b, n_kv_heads_, n_heads_ / n_kv_heads_, hd}), kb, vb,
                                               cache.bound_slots(), cache.bound_lengths(),
                                               1.0 / std::sqrt(static_cast<double>(hd)));
    project(out.view({b, n_heads_ * hd}), {{o_proj_->weight(), o_proj_->bias(), h, /*accumulate=*/true}});
}

Mlp::Mlp(const ModelArgs& args, int64_t width, const TensorParallel* tp, const torch::TensorOptions& options)
    : tp_(tp) {
    const int64_t h = args.hidden_size, i = width;
    gate_proj_ = register_module("gate_proj", std::make_shared<Linear>(h, i, args.mlp_bias, options));
    up_proj_ = register_module("up_proj", std::make_shared<Linear>(h, i, args.mlp_bias, options));
    down_proj_ = register_module("down_proj", std::make_shared<Linear>(i, h, args.mlp_bias, options));
}

torch::Tensor Mlp::forward(const torch::Tensor& x) const {
    const auto xin = tp_copy(x, tp_);
    return down_proj_->forward_row_parallel(torch::silu(gate_proj_->forward(xin)) * up_proj_->forward(xin), tp_);
}

torch::Tensor Mlp::forward_local(const torch::Tensor& x) const {
    return down_proj_->forward(torch::silu(gate_proj_->forward(x)) * up_proj_->forward(x));
}

void Mlp::decode_step(const torch::Tensor& xn, const torch::Tensor& h, KVCache& cache) const {
    const int64_t b = xn.size(0), inter = gate_proj_->weight().size(0);
    auto gate_up = cache.scratch(4, b, 2 * inter);
    auto gate = gate_up.narrow(1, 0, inter), up = gate_up.narrow(1, inter, inter);
    project(xn, {{gate_proj_->weight(), gate_proj_->bias(), gate}, {up_proj_->weight(), up_proj_->bias(), up}});
    auto act = cache.scratch(5, b, inter);
    at::silu_out(act, gate);  // the operators forward() runs, into the scratch
    act.mul_(up);
    project(act, {{down_proj_->weight(), down_proj_->bias(), h, /*accumulate=*/true}});
}

SparseMoe::SparseMoe(const ModelArgs& args, const TpLayout& layout, const TensorParallel* tp, int64_t moe_layer,
                     const torch::TensorOptions& options)
    : tp_(tp), moe_layer_(moe_layer), top_k_(args.num_experts_per_tok), norm_topk_(args.norm_topk_prob) {
    gate_ = register_module("gate", std::make_shared<Linear>(args.hidden_size, args.num_experts, false, options));
    auto experts = register_module("experts", std::make_shared<torch::nn::Module>());
    for (int64_t e = 0; e < args.num_experts; ++e)
        experts_.push_back(
            experts->register_module(std::to_string(e), std::make_shared<Mlp>(args, layout.moe_inter, tp, options)));
}

torch::Tensor SparseMoe::forward(const torch::Tensor& x, MoeRouting* routing) const {
    const auto sizes = x.sizes();
    const int64_t hidden = x.size(-1), k = top_k_, n_experts = static_cast<int64_t>(experts_.size());
    const auto rows = tp_copy(x, tp_).reshape({-1, hidden});  // [N, H]
    const int64_t n = rows.size(0);
    // The router: replicated weight, so each rank's partial gradient is summed over the block.
    const auto logits = gate_->matmul_with(rows, tp_copy(gate_->weight(), tp_));
    const auto probs = torch::softmax(logits.to(torch::kFloat32), -1);  // [N, E]
    auto [weights, chosen] = torch::topk(probs, k, -1);
    const auto preferred = chosen;
    if (routing != nullptr && routing->replay.defined()) {
        const auto& r = routing->replay;
        RLPT_CHECK(r.dim() == 3 && r.size(0) == n && moe_layer_ < r.size(1) && r.size(2) == k,
                   "MoE router replay: expected [{}, >{}, {}] expert indices, got {}", n, moe_layer_, k, r.sizes());
        // Rows replayed where the recorded experts exist (>= 0), the router's own top-k elsewhere.
        const auto replayed = r.select(1, moe_layer_).to(x.device(), torch::kInt64);
        chosen = torch::where(replayed.ge(0).all(-1, /*keepdim=*/true), replayed, chosen);
        weights = probs.gather(1, chosen);
    }
    if (norm_topk_) weights = weights / weights.sum(-1, /*keepdim=*/true);
    weights = weights.to(x.scalar_type());
    if (routing != nullptr) {
        if (routing->record_choices) routing->chosen.push_back(chosen.detach());
        if (routing->record_preferred) routing->preferred.push_back(preferred.detach());
        if (routing->record_probs) routing->probs.push_back(probs);
    }
    // Group the N*k (row, choice) pairs by expert: a stable sort keeps rows in order per expert.
    const auto flat = chosen.reshape({-1});
    const auto order = std::get<1>(torch::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false));
    const auto counts = torch::bincount(flat, {}, n_experts).to(torch::kCPU);
    const auto* count = counts.data_ptr<int64_t>();
    const auto sorted_rows = rows.index_select(0, order.div(k, "floor"));
    std::vector<torch::Tensor> outs;
    outs.reserve(static_cast<size_t>(n_experts));
    int64_t start = 0;
    // An expert without rows still runs when gradients are recorded (see the class comment); a
    // forward without them (generation, log-probs) skips it.
    const bool all_experts = torch::GradMode::is_enabled();
    for (int64_t e = 0; e < n_experts; ++e) {
        if (count[e] > 0 || all_experts)
            outs.push_back(experts_[static_cast<size_t>(e)]->forward_local(sorted_rows.narrow(0, start, count[e])));
        start += count[e];
    }
    auto out = torch::cat(outs, 0) * weights.reshape({-1}).index_select(0, order).unsqueeze(1);  // [N*k, H]
    // Back to (row, choice) order (the inverse permutation of `order`), then the k choices summed
    // in choice order.
    const auto inverse = torch::empty_like(order).scatter_(0, order, torch::arange(n * k, order.options()));
    out = out.index_select(0, inverse).view({n, k, hidden}).sum(1);
    return tp_reduce(out, tp_).view(sizes);
}

DecoderLayer::DecoderLayer(const ModelArgs& args, const TpLayout& layout, const TensorParallel* tp, int64_t moe_layer,
                           const torch::TensorOptions& options) {
    self_attn_ = register_module("self_attn", std::make_shared<Attention>(args, layout, tp, options));
    if (moe_layer >= 0) {
        moe_ = register_module("mlp", std::make_shared<SparseMoe>(args, layout, tp, moe_layer, options));
    } else {
        mlp_ = register_module("mlp", std::make_shared<Mlp>(args, layout.inter, tp, options));
    }
    input_layernorm_ =
        register_module("input_layernorm", std::make_shared<RMSNorm>(args.hidden_size, args.rms_norm_eps, options));
    post_attention_layernorm_ =
        register_module("post_attention_layernorm",
                        std::make_shared<RMSNorm>(args.hidden_size, args.rms_norm_eps, options));
}

torch::Tensor DecoderLayer::forward(const torch::Tensor& x, const Rotary& rope, const AttentionMask& mask,
                                    KVCache* cache, int64_t layer, MoeRouting* routing) {
    auto h = x + self_attn_->forward(input_layernorm_->forward(x), rope, mask, cache, layer);
    const auto xn = post_attention_layernorm_->forward(h);
    return h + (moe_ ? moe_->forward(xn, routing) : mlp_->forward(xn));
}

void DecoderLayer::decode_step(const torch::Tensor& h, const Rotary& rope, KVCache& cache, int64_t layer,
                               MoeRouting* routing) const {
    auto xn = cache.scratch(0, h.size(0), h.size(1));
    kernels::rms_norm_into(h, input_layernorm_->weight(), input_layernorm_->eps(), xn);
    self_attn_->decode_step(xn, h, rope, cache, layer);
    kernels::rms_norm_into(h, post_attention_layernorm_->weight(), post_attention_layernorm_->eps(), xn);
    if (moe_) {
        h.add_(moe_->forward(xn, routing));
    } else {
        mlp_->decode_step(xn, h, cache);
    }
}

}  // namespace rlpt::model::detail
