#include "rlpt/model/transformer.h"

#include "model/layers.h"
#include "model/weights_io.h"
#include "rlpt/kernels/small_matmul.h"
#include <fmt/ranges.h>

#include "rlpt/core/error.h"

#include <limits>

namespace rlpt::model {

std::string dtype_name(torch::Dtype dtype) {
    if (dtype == torch::kFloat32) return "float32";
    if (dtype == torch::kBFloat16) return "bfloat16";
    if (dtype == torch::kFloat16) return "float16";
    RLPT_THROW(ValueError, "model dtype {} is not supported (float32, bfloat16, float16)", c10::toString(dtype));
}

torch::Dtype dtype_from_name(const std::string& name) {
    if (name == "float32") return torch::kFloat32;
    if (name == "bfloat16") return torch::kBFloat16;
    if (name == "float16") return torch::kFloat16;
    RLPT_THROW(ValueError, "model dtype '{}' is not supported (float32, bfloat16, float16)", name);
}

// ---- Backbone --------------------------------------------------------------------------------

// Below this many keys a bf16/fp16 forward + backward on the CPU is faster materialised. Measured
// on the development VM (2-core AMD EPYC, one thread; the same torch 2.13 CPU wheel, driven from
// Python, both paths with this file's masks), the flash kernel against the materialised path at
// [B, heads, T = S, hd] in bf16: 2.8x slower at [16, 4, 128, 32], 1.2x slower at [4, 12, 256, 64],
// even at [4, 12, 384, 64], 1.9x faster at [4, 12, 512, 64] and 2.7x at [2, 14, 1024, 64]; in
// float32 faster at every one of these shapes (1.5x to 2.7x). Short sequences hold little
// ([B, heads, T, T] at T = 256 is 1/16 of T = 1024's).
constexpr int64_t kSdpaCpuMinKeysBf16 = 512;

bool sdpa_attention_applies(torch::Dtype dtype, const torch::Device& device, int64_t keys) {
    return !device.is_cpu() || dtype == torch::kFloat32 || keys >= kSdpaCpuMinKeysBf16;
}

Backbone::Backbone(const ModelArgs& args, torch::TensorOptions options, std::shared_ptr<const TensorParallel> tp)
    : args_(args), tp_(std::move(tp)), layout_(model::tp_layout(args, tp_ ? tp_->size() : 1, tp_ ? tp_->rank() : 0)) {
    auto embed = register_module("embed_tokens", std::make_shared<torch::nn::Module>());
    embed_weight_ = embed->register_parameter("weight", torch::empty({layout_.vocab, args.hidden_size}, options));
    auto layers = register_module("layers", std::make_shared<torch::nn::Module>());
    for (int64_t i = 0, moe = 0; i < args.num_hidden_layers; ++i)
        layers_.push_back(layers->register_module(
            std::to_string(i), std::make_shared<detail::DecoderLayer>(args, layout_, this->tp(),
                                                                      args.is_moe_layer(i) ? moe++ : -1, options)));
    norm_ = register_module("norm", std::make_shared<detail::RMSNorm>(args.hidden_size, args.rms_norm_eps, options));
    inv_freq_ = detail::rotary_inv_freq(args).to(options.device());
}

torch::nn::Module& Backbone::layer(int64_t i) {
    RLPT_CHECK(i >= 0 && i < num_layers(), "Backbone::layer: {} is not in [0, {})", i, num_layers());
    return *layers_[static_cast<size_t>(i)];
}

// The layer loop with the engine's hooks (LayerHooks): the root unit is gathered by the caller
// (Backbone::forward, before the embedding).
torch::Tensor Backbone::hooked_layers(torch::Tensor h, const detail::Rotary& rope, const detail::AttentionMask& mask,
                                      KVCache* cache, MoeRouting* routing) {
    const bool grad = torch::GradMode::is_enabled();
    const std::shared_ptr<LayerHooks> hooks = hooks_;  // the gradient hooks keep it alive
    for (size_t i = 0; i < layers_.size(); ++i) {
        const auto li = static_cast<int64_t>(i);
        if (grad && h.requires_grad())
            h.register_hook([hooks, li](const torch::Tensor& g) {
                hooks->after_backward(li);
                return g;
            });
        hooks->before_forward(li);
        h = layers_[i]->forward(h, rope, mask, cache, li, routing);
        hooks->after_forward(li);
        if (grad && h.requires_grad())
            h.register_hook([hooks, li](const torch::Tensor& g) {
                hooks->before_backward(li);
                return g;
            });
    }
    return h;
}

torch::Tensor Backbone::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                const torch::Tensor& position_ids, KVCache* cache) {
    RLPT_CHECK(input_ids.defined() && input_ids.dim() == 2 && input_ids.scalar_type() == torch::kInt64,
               "forward: input_ids must be [B, T] int64, got {} {}", input_ids.sizes(),
               input_ids.defined() ? c10::toString(input_ids.scalar_type()) : "undefined");
    const int64_t b = input_ids.size(0), t = input_ids.size(1);
    // Slots bound (KVCache, continuous batching): a decode step needs no mask, a prefill of
    // empty slots is a plain forward whose K/V land in the slots.
    const bool slots = cache != nullptr && cache->slots_bound();
    const bool slot_decode = slots && t == 1 && !cache->extending();
    const int64_t past = cache && !slots ? cache->length() : 0;
    RLPT_CHECK(b > 0 && t > 0, "forward: empty input_ids {}", input_ids.sizes());
    RLPT_CHECK(position_ids.defined() && position_ids.sizes() == input_ids.sizes() &&
                   position_ids.scalar_type() == torch::kInt64,
               "forward: position_ids must be int64 shaped like input_ids {}, got {}", input_ids.sizes(),
               position_ids.sizes());
    if (!slot_decode)
        RLPT_CHECK(attention_mask.defined() && attention_mask.dim() == 2 && attention_mask.size(0) == b &&
                       attention_mask.size(1) == past + t,
                   "forward: attention_mask must be [{}, {}] (cached {} + new {}), got {}", b, past + t, past, t,
                   attention_mask.sizes());
    if (cache)
        RLPT_CHECK((slots ? cache->bound_slots().size(0) : cache->batch_size()) == b &&
                       cache->n_layers() == args_.num_hidden_layers,
                   "forward: cache {} {} rows / {} layers, input has {} rows / model {} layers",
                   slots ? "binds" : "holds", slots ? cache->bound_slots().size(0) : cache->batch_size(),
                   cache->n_layers(), b, args_.num_hidden_layers);
    const auto device = embed_weight_.device();
    const auto check_device = [&](const torch::Tensor& t, const char* name) {
        RLPT_CHECK(t.device() == device,
                   "forward: {} is on {} but the model is on {} (inputs must be on the model's device)", name,
                   t.device().str(), device.str());
    };
    check_device(input_ids, "input_ids");
    if (!slot_decode) check_device(attention_mask, "attention_mask");
    check_device(position_ids, "position_ids");
    // Token and position ranges (two host reads, a device sync on a GPU): checked for every forward
    // but the decode steps of a slotted cache, whose ids are the sampler's (in [0, V) by
    // construction) and whose prompts were checked by their prefill.
    if (!slot_decode) {
        auto lo_hi = torch::aminmax(input_ids);
        const int64_t lo = std::get<0>(lo_hi).item<int64_t>(), hi = std::get<1>(lo_hi).item<int64_t>();
        RLPT_CHECK(lo >= 0 && hi < args_.vocab_size, "forward: token ids must be in [0, {}), got [{}, {}]",
                   args_.vocab_size, lo, hi);
        RLPT_CHECK(position_ids.min().item<int64_t>() >= 0, "forward: position_ids must be non-negative");
    }

    // masked_out[b, 0, 0, i, j]: query i (absolute position past+i) may not see key j.
    torch::Tensor masked_out;
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
    if (slot_decode) {
        // Row b sees its slot's positions [0, bound_lengths[b]) out of the longest row's.
        const auto& lens = cache->bound_lengths();
        auto k_pos = torch::arange(lens.max().item<int64_t>(), i64);  // lens is on the host: no sync
        masked_out =
            (k_pos.unsqueeze(0) >= cache->bound_lengths_on_device().unsqueeze(1)).view({b, 1, 1, 1, k_pos.size(0)});
    } else if (slots && cache->extending()) {
        // Row b's query i sits at position prefix[b] + i and sees keys [0, prefix[b] + i] that
        // are real (< prefix[b] + new[b]), out of the longest row's prefix + new.
        auto pre = cache->extend_prefix_lengths().to(device).view({b, 1, 1});
        auto end = pre + cache->extend_new_lengths().to(device).view({b, 1, 1});
        auto k_pos = torch::arange(end.max().item<int64_t>(), i64).view({1, 1, -1});
        auto q_pos = pre + torch::arange(t, i64).view({1, t, 1});
        masked_out = (k_pos > q_pos).logical_or(k_pos >= end).view({b, 1, 1, t, k_pos.size(2)});
    } else {
        auto key_pad = (attention_mask == 0).view({b, 1, 1, 1, past + t});
        auto q_pos = torch::arange(past, past + t, i64);
        auto k_pos = torch::arange(past + t, i64);
        masked_out = key_pad.logical_or(k_pos.unsqueeze(0) > q_pos.unsqueeze(1));
    }

    const auto dtype = embed_weight_.scalar_type();
    detail::AttentionMask mask;
    if (!slot_decode && sdpa_attention_ && sdpa_attention_applies(dtype, device, masked_out.size(-1))) {
        mask = detail::attention_sdpa_mask(std::move(masked_out), dtype);
    } else {
        mask.masked_out = std::move(masked_out);
    }

    // A cache keeping routes (router replay R3) gets this forward's choices before advance().
    const bool keep_routes = cache != nullptr && cache->routes_enabled() && slots;
    MoeRouting kept;
    MoeRouting* routing = routing_;
    if (keep_routes) {
        RLPT_CHECK(routing_ == nullptr, "forward: a cache keeping routes and Backbone::set_routing do not mix");
        kept.record_choices = true;
        routing = &kept;
    }

    if (hooks_) hooks_->before_forward(LayerHooks::kRootUnit);
    auto rope = detail::rotary_tables(inv_freq_, position_ids, dtype);
    torch::Tensor h;
    if (tp() == nullptr) {
        h = torch::embedding(embed_weight_, input_ids);
    } else {
        // Vocabulary-parallel embedding: rows of other ranks' slices are looked up as zeros.
        auto local = input_ids - layout_.vocab_first;
        auto here = local.ge(0).logical_and(local.lt(layout_.vocab));
        h = torch::embedding(embed_weight_, torch::where(here, local, torch::zeros_like(local)));
        h = tp_reduce(h * here.unsqueeze(-1).to(h.scalar_type()), tp());
    }
    if (slot_decode && fused_decode_ && detail::fused_decode_applies(h, *cache, tp())) {
        // h is this forward's own embedding output: each layer updates it in place.
        const auto x = h.view({b, args_.hidden_size});
        ++fused_decode_steps_;
        for (size_t i = 0; i < layers_.size(); ++i) {
            const auto li = static_cast<int64_t>(i);
            if (hooks_) hooks_->before_forward(li);
            layers_[i]->decode_step(x, rope, *cache, li, routing);
            if (hooks_) hooks_->after_forward(li);
        }
    } else if (hooks_ == nullptr) {
        for (size_t i = 0; i < layers_.size(); ++i)
            h = layers_[i]->forward(h, rope, mask, cache, static_cast<int64_t>(i), routing);
    } else {
        h = hooked_layers(h, rope, mask, cache, routing);
    }
    if (keep_routes)
        for (size_t l = 0; l < kept.chosen.size(); ++l) cache->store_routes(static_cast<int64_t>(l), kept.chosen[l]);
    if (cache) cache->advance(t);
    return norm_->forward(h);
}

Backbone* find_backbone(torch::nn::Module& m) {
    if (auto* b = dynamic_cast<Backbone*>(&m)) return b;
    for (const auto& sub : m.modules(/*include_self=*/false))
        if (auto* b = dynamic_cast<Backbone*>(sub.get())) return b;
    return nullptr;
}

std::shared_ptr<void> hold_full_parameters(torch::nn::Module& m) {
    Backbone* b = find_backbone(m);
    if (b == nullptr || b->layer_hooks() == nullptr) return nullptr;
    return b->layer_hooks()->hold_full_parameters();
}

// ---- CausalLM --------------------------------------------------------------------------------

CausalLM::CausalLM(ModelArgs args, torch::Dtype dtype, torch::Device device, std::shared_ptr<const TensorParallel> tp)
    : args_(std::move(args)) {
    args_.validate();
    RLPT_CHECK(args_.head == ModelHead::kCausalLM, "CausalLM needs a causal-LM config, got {}", args_.architecture());
    args_.torch_dtype = dtype_name(dtype);
    auto options = torch::TensorOptions().dtype(dtype).device(device);
    model_ = register_module("model", std::make_shared<Backbone>(args_, options, std::move(tp)));
    if (!args_.tie_word_embeddings) {
        auto head = register_module("lm_head", std::make_shared<torch::nn::Module>());
        lm_head_ = head->register_parameter("weight", torch::empty({tp_layout().vocab, args_.hidden_size}, options));
    }
}

torch::Dtype CausalLM::dtype() const { return model_->embed_weight().scalar_type(); }
torch::Device CausalLM::device() const { return model_->embed_weight().device(); }

torch::Tensor CausalLM::forward_hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                       const torch::Tensor& position_ids, KVCache* cache) {
    return model_->forward(input_ids, attention_mask, position_ids, cache);
}

torch::Tensor CausalLM::lm_head_weight() const { return args_.tie_word_embeddings ? model_->embed_weight() : lm_head_; }

namespace {

// Padding columns of the last ranks' vocabulary slices get -inf (no probability).
torch::Tensor mask_vocab_padding(torch::Tensor logits, const TpLayout& l) {
    const int64_t real = l.vocab_real();
    if (real < logits.size(-1))
        logits.narrow(-1, real, logits.size(-1) - real).fill_(-std::numeric_limits<float>::infinity());
    return logits;
}

}  // namespace

torch::Tensor CausalLM::local_logits_fp32(const torch::Tensor& hidden) const {
    auto h = tp_copy(hidden, tp());
    auto logits = head_precision_ == HeadPrecision::kFp32
                      ? torch::matmul(h.to(torch::kFloat32), lm_head_weight().to(torch::kFloat32).t())
                      : head_mm(head_operand(h.reshape({-1, h.size(-1)}), head_precision_),
                                head_operand(lm_head_weight(), head_precision_).t(), head_precision_)
                            .view([&] {
                                auto sizes = h.sizes().vec();
                                sizes.back() = lm_head_weight().size(0);
                                return sizes;
                            }());
    return tp() ? mask_vocab_padding(logits, tp_layout()) : logits;
}

torch::Tensor CausalLM::gathered_logits(const torch::Tensor& hidden) const {
    const auto head = lm_head_weight();
    torch::Tensor local;
    if (!small_matmul_ && hidden.dim() == 2 && hidden.size(0) == 1 && hidden.scalar_type() == torch::kFloat32 &&
        !torch::GradMode::is_enabled()) {
        // BLAS path: a single fp32 row through gemv (OpenBLAS runs a 1-row sgemm 3-4x slower).
        local = torch::mv(head, hidden.select(0, 0)).unsqueeze(0);
    } else if (small_matmul_ && hidden.dim() == 2 && hidden.size(0) <= detail::kDecodeKernelMaxRows &&
               hidden.scalar_type() == torch::kFloat32 && head.scalar_type() == torch::kFloat32 && hidden.is_cpu() &&
               head.is_contiguous() && !torch::GradMode::is_enabled()) {
        local = kernels::small_matmul(hidden, head, {});  // a decode step's rows (see kDecodeKernelMaxRows)
    } else {
        local = detail::linear(hidden, head, {}, small_matmul_).to(torch::kFloat32);
    }
    if (tp() == nullptr) return local;
    torch::NoGradGuard no_grad;
    return tp()->allgather(local, -1).narrow(-1, 0, args_.vocab_size);
}

torch::Tensor CausalLM::forward_logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                       const torch::Tensor& position_ids, KVCache* cache) {
    auto hidden = forward_hidden(input_ids, attention_mask, position_ids, cache);
    return gathered_logits(hidden);
}

KVCache CausalLM::make_cache(int64_t batch_size, int64_t max_length) const {
    return KVCache(args_.num_hidden_layers, batch_size, tp_layout().kv_heads, args_.head_dim, max_length,
                   torch::TensorOptions().dtype(dtype()).device(device()));
}

void CausalLM::use_decode_kernels(bool on) {
    small_matmul_ = on;
    model_->use_fused_decode(on);
    for (const auto& m : modules(/*include_self=*/false)) {
        if (auto* lin = dynamic_cast<detail::Linear*>(m.get())) lin->use_small_matmul(on);
        if (auto* attn = dynamic_cast<detail::Attention*>(m.get())) attn->use_decode_attention(on);
    }
}

void CausalLM::init_weights(uint64_t seed) { detail::init_parameters(*this, args_, tp_layout(), seed); }

std::shared_ptr<CausalLM> make_random_causal_lm(const ModelArgs& args, uint64_t seed, torch::Dtype dtype,
                                                torch::Device device, std::shared_ptr<const TensorParallel> tp) {
    auto model = std::make_shared<CausalLM>(args, dtype, device, std::move(tp));
    model->init_weights(seed);
    return model;
}

std::shared_ptr<CausalLM> load_pretrained(const std::string& dir, torch::Dtype dtype, torch::Device device,
                                          std::shared_ptr<const TensorParallel> tp) {
    try {
        ModelArgs args = load_model_args(dir);
        RLPT_CHECK_KIND(ConfigError, args.head == ModelHead::kCausalLM,
                        "architecture {} is not a causal LM (expected LlamaForCausalLM or Qwen2ForCausalLM)",
                        args.architecture());
        auto model = std::make_shared<CausalLM>(args, dtype, device, std::move(tp));
        auto ck = SafetensorsCheckpoint::open(dir);
        detail::LoadRules rules;
        rules.layout = model->tp_layout();
        const bool tied = args.tie_word_embeddings;
        rules.ignore = [tied](const std::string& name) { return tied && name == "lm_head.weight"; };
        detail::load_parameters(*model, ck, rules);
        return model;
    } catch (const Error& e) {
        rethrow_with_context(fmt::format("loading '{}'", dir), e);
    }
}

std::shared_ptr<CausalLM> clone_causal_lm(const CausalLM& src, torch::Dtype dtype, torch::Device device) {
    auto out = std::make_shared<CausalLM>(src.args(), dtype, device, src.backbone().tp_ptr());
    auto from = src.named_parameters(/*recurse=*/true);
    torch::NoGradGuard no_grad;
    for (auto& p : out->named_parameters(/*recurse=*/true)) p.value().copy_(from[p.key()]);
    return out;
}

namespace {

// save_pretrained of a tensor-parallel model. Every rank of the block gathers the parameters in
// named_parameters() order; rank 0 declares their full shapes (meta tensors) and writes each as
// it is gathered. If rank 0 fails half-way it still takes part in the remaining gathers, then
// the block agrees on the outcome, so no rank is left waiting.
void save_split(const CausalLM& model, const std::string& dir, uint64_t max_shard_bytes, const ModelArgs& args,
                const LocalParameter& local) {
    const TensorParallel& tp = *model.tp();
    const auto params = detail::parameter_list(model);
    NamedTensors declared;
    for (const auto& [name, t] : params) {
        RLPT_CHECK(t.scalar_type() == params.front().second.scalar_type(),
                   "saving a split model: parameters of several dtypes ('{}')", name);
        declared.emplace_back(name, torch::empty(full_shape(shard_spec(name, model.tp_layout()), t.sizes().vec()),
                                                 t.options().device(torch::kMeta)));
    }
    size_t next = 0;
    auto gather = [&](size_t i) {
        RLPT_CHECK(i == next, "saving a split model: tensor {} requested, {} expected", i, next);
        ++next;
        return gather_full_parameter(params[i].first, local ? local(i) : params[i].second, args, tp);
    };
    std::string error;
    if (tp.rank() == 0) {
        try {
            save_safetensors_sharded(dir, declared, max_shard_bytes, "model", gather);
            save_model_args(args, dir);
        } catch (const std::exception& e) {
            error = e.what();
        }
    }
    while (next < params.size()) gather(next);
    auto failed = torch::full({1}, error.empty() ? 0.0f : 1.0f, torch::TensorOptions().device(model.device()));
    tp.allreduce_sum_(failed);
    if (!error.empty()) RLPT_THROW(IoError, "{}", error);
    RLPT_CHECK_KIND(IoError, failed.item<float>() == 0, "saving '{}' failed on tensor-parallel rank 0", dir);
}

}  // namespace

void save_pretrained(const CausalLM& model, const std::string& dir, uint64_t max_shard_bytes,
                     const LocalParameter& local) {
    try {
        ModelArgs args = model.args();
        args.torch_dtype = dtype_name(model.dtype());
        if (model.tp() == nullptr) {
            const auto params = detail::parameter_list(model);
            size_t next = 0;
            TensorFetch fetch;
            if (local) {
                fetch = [&](size_t i) {
                    RLPT_CHECK(i == next, "saving a model: tensor {} requested, {} expected", i, next);
                    ++next;
                    return local(i);
                };
            }
            try {
                save_safetensors_sharded(dir, params, max_shard_bytes, "model", fetch);
                save_model_args(args, dir);
            } catch (...) {
                // The caller's collectives inside `local` complete before the error leaves.
                if (local) {
                    while (next < params.size()) local(next++);
                }
                throw;
            }
            return;
        }
        save_split(model, dir, max_shard_bytes, args, local);
    } catch (const Error& e) {
        rethrow_with_context(fmt::format("saving '{}'", dir), e);
    }
}

}  // namespace rlpt::model
