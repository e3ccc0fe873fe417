#include "rlpt/model/tensor_parallel.h"

#include <algorithm>
#include <chrono>

#include "rlpt/comm/collectives.h"
#include "model/weights_io.h"
#include "rlpt/comm/mpi.h"
#include <fmt/ranges.h>

#include "rlpt/core/error.h"
#include "rlpt/kernels/logprob.h"

namespace rlpt::model {

// ---- the block's collectives ---------------------------------------------------------------

std::shared_ptr<TensorParallel> TensorParallel::over(const comm::Communicator& mp, torch::Device device) {
    RLPT_CHECK(mp.valid(), "TensorParallel: invalid model-parallel communicator");
    std::shared_ptr<TensorParallel> tp(new TensorParallel());
    tp->rank_ = mp.rank();
    tp->size_ = mp.size();
    tp->collectives_ = comm::make_collectives(&mp, device, "the tensor-parallel block");
    return tp;
}

TensorParallel::~TensorParallel() = default;

void TensorParallel::allreduce_sum_(const torch::Tensor& t) const {
    if (size_ == 1 || t.numel() == 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    auto buf = t.to(torch::kFloat32).contiguous();  // no copy for a contiguous fp32 tensor
    auto flat = buf.view({-1});
    const int64_t chunk = comm::kMaxMessageBytes / 4;
    for (int64_t b = 0; b < flat.numel(); b += chunk)
        collectives_->start_allreduce_sum(flat.narrow(0, b, std::min(chunk, flat.numel() - b)));
    collectives_->finish_allreduces("tensor-parallel all-reduce");
    if (!buf.is_same(t)) t.copy_(buf);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

torch::Tensor TensorParallel::allgather(const torch::Tensor& t, int64_t dim) const {
    if (size_ == 1) return t;
    if (dim < 0) dim += t.dim();
    RLPT_CHECK(dim >= 0 && dim < t.dim(), "TensorParallel::allgather: dim {} of a {}-d tensor", dim, t.dim());
    auto shape = t.sizes().vec();
    const int64_t n = shape[static_cast<size_t>(dim)];
    shape[static_cast<size_t>(dim)] *= size_;
    auto out = torch::empty(shape, t.options());
    std::vector<int64_t> starts, counts(static_cast<size_t>(size_), n);
    for (int64_t r = 0; r < size_; ++r) starts.push_back(r * n);
    allgather_into(t, out, dim, starts, counts);
    return out;
}

void TensorParallel::allgather_into(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                                    const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) const {
    const auto t0 = std::chrono::steady_clock::now();
    torch::NoGradGuard no_grad;
    RLPT_CHECK_KIND(InternalError,
                    local.defined() && out.defined() && out.is_contiguous() && local.dim() == out.dim() && dim >= 0 &&
                        dim < out.dim() && local.scalar_type() == out.scalar_type() && local.device() == out.device(),
                    "TensorParallel::allgather_into: a {} {} slice on {} into a contiguous {} {} on {} along dim {}",
                    local.sizes(), c10::toString(local.scalar_type()), local.device().str(), out.sizes(),
                    c10::toString(out.scalar_type()), out.device().str(), dim);
    for (int64_t d = 0; d < out.dim(); ++d)
        RLPT_CHECK_KIND(InternalError, d == dim || local.size(d) == out.size(d),
                        "TensorParallel::allgather_into: slice {} and destination {} differ outside dim {}",
                        local.sizes(), out.sizes(), dim);
    RLPT_CHECK_KIND(InternalError, starts.size() == static_cast<size_t>(size_) && counts.size() == starts.size(),
                    "TensorParallel::allgather_into: {} starts and {} counts for {} ranks", starts.size(),
                    counts.size(), size_);
    std::vector<std::pair<int64_t, int64_t>> regions;
    for (size_t r = 0; r < counts.size(); ++r) {
        RLPT_CHECK_KIND(InternalError,
                        counts[r] >= 0 && counts[r] <= local.size(dim) && starts[r] >= 0 &&
                            starts[r] + counts[r] <= out.size(dim),
                        "TensorParallel::allgather_into: rank {}'s slice [{}, +{}) of a local size {} into {}", r,
                        starts[r], counts[r], local.size(dim), out.size(dim));
        if (counts[r] > 0) regions.emplace_back(starts[r], starts[r] + counts[r]);
    }
    std::sort(regions.begin(), regions.end());
    for (size_t i = 1; i < regions.size(); ++i)
        RLPT_CHECK_KIND(InternalError, regions[i].first >= regions[i - 1].second,
                        "TensorParallel::allgather_into: slices [{}, {}) and [{}, {}) overlap", regions[i - 1].first,
                        regions[i - 1].second, regions[i].first, regions[i].second);
    const auto src = local.contiguous();
    if (!collectives_->allgather_slices(src, out, dim, starts, counts)) {
        // Every rank's whole slice into one contiguous buffer (always placeable), then copies.
        auto all = torch::empty({size_, src.numel()}, src.options());
        std::vector<int64_t> rows, ones(static_cast<size_t>(size_), 1);
        for (int64_t r = 0; r < size_; ++r) rows.push_back(r);
        collectives_->allgather_slices(src.view({1, src.numel()}), all, 0, rows, ones);
        for (int64_t r = 0; r < size_; ++r) {
            const auto i = static_cast<size_t>(r);
            if (counts[i] > 0)
                out.narrow(dim, starts[i], counts[i]).copy_(all[r].view(src.sizes()).narrow(dim, 0, counts[i]));
        }
    }
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- which slice a parameter is --------------------------------------------------------------

int64_t ShardSpec::real() const { return dim < 0 ? 0 : std::max<int64_t>(0, std::min(length, full - start)); }

namespace {

using detail::ends_with;

ShardSpec slice(int64_t dim, int64_t start, int64_t length, int64_t full) {
    ShardSpec s;
    s.dim = dim;
    s.start = start;
    s.length = length;
    s.full = full;
    return s;
}

}  // namespace

ShardSpec shard_spec(const std::string& name, const TpLayout& l) {
    if (l.tp <= 1) return ShardSpec{};
    const int64_t hd = l.head_dim;
    const bool weight = ends_with(name, ".weight");
    auto is = [&](const char* module) {
        return ends_with(name, std::string(module) + ".weight") || ends_with(name, std::string(module) + ".bias");
    };
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight")
        return slice(0, l.vocab_first, l.vocab, l.vocab_size);
    if (is("q_proj")) return slice(0, l.head_first * hd, l.heads * hd, l.tp * l.heads * hd);
    if (is("k_proj") || is("v_proj")) {
        ShardSpec s = slice(0, l.kv_first * hd, l.kv_heads * hd, l.num_kv_heads * hd);
        s.kv_replica = l.kv_replicated;
        // tp / nkv consecutive ranks share a replicated head; the first of them counts it.
        s.counted = !l.kv_replicated || l.rank % (l.tp / l.num_kv_heads) == 0;
        return s;
    }
    if (name.find(".mlp.experts.") != std::string::npos) {  // an expert: its own width, split the same way
        if (is("gate_proj") || is("up_proj")) return slice(0, l.moe_inter_first, l.moe_inter, l.tp * l.moe_inter);
        if (weight && ends_with(name, "down_proj.weight"))
            return slice(1, l.moe_inter_first, l.moe_inter, l.tp * l.moe_inter);
    }
    if (is("gate_proj") || is("up_proj")) return slice(0, l.inter_first, l.inter, l.tp * l.inter);
    if (weight && ends_with(name, "o_proj.weight"))
        return slice(1, l.head_first * hd, l.heads * hd, l.tp * l.heads * hd);
    if (weight && ends_with(name, "down_proj.weight")) return slice(1, l.inter_first, l.inter, l.tp * l.inter);
    ShardSpec s;  // norms, row-parallel biases, the value head: replicated
    s.counted = l.rank == 0;
    return s;
}

std::set<std::string> uncounted_parameters(const torch::nn::Module& module, const TpLayout& layout) {
    std::set<std::string> out;
    for (const auto& p : module.named_parameters(/*recurse=*/true))
        if (!shard_spec(p.key(), layout).counted) out.insert(p.key());
    return out;
}

std::vector<int64_t> full_shape(const ShardSpec& s, std::vector<int64_t> local) {
    if (s.dim >= 0) local[static_cast<size_t>(s.dim)] = s.full;
    return local;
}

torch::Tensor gather_full_parameter(const std::string& name, const torch::Tensor& local, const ModelArgs& args,
                                    const TensorParallel& tp) {
    if (tp.size() == 1) return local;
    const ShardSpec spec = shard_spec(name, tp_layout(args, tp.size(), tp.rank()));
    if (spec.dim < 0) return local;
    auto full = torch::empty(full_shape(spec, local.sizes().vec()), local.options());
    // One all-gather, each rank's real rows/columns straight into their place: a replicated KV
    // head comes from the first rank holding it, padding rows from none.
    std::vector<int64_t> starts, counts;
    for (int64_t r = 0; r < tp.size(); ++r) {
        const ShardSpec s = shard_spec(name, tp_layout(args, tp.size(), r));
        const bool first = std::find(starts.begin(), starts.end(), s.start) == starts.end();
        starts.push_back(s.start);
        counts.push_back(first ? s.real() : 0);
    }
    tp.allgather_into(local, full, spec.dim, starts, counts);
    return full;
}

// ---- autograd collectives --------------------------------------------------------------------

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

int64_t to_handle(const TensorParallel* tp) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(tp)); }
const TensorParallel& from_handle(AutogradContext* ctx) {
    return *reinterpret_cast<const TensorParallel*>(static_cast<intptr_t>(ctx->saved_data["tp"].toInt()));
}

struct CopyToBlock : torch::autograd::Function<CopyToBlock> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
        ctx->saved_data["tp"] = tp;
        return x.view_as(x);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        auto g = grads[0].clone();
        from_handle(ctx).allreduce_sum_(g);
        return {g, torch::Tensor()};
    }
};

struct ReduceFromBlock : torch::autograd::Function<ReduceFromBlock> {
    static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, int64_t tp) {
        auto out = x.clone();
        reinterpret_cast<const TensorParallel*>(static_cast<intptr_t>(tp))->allreduce_sum_(out);
        return out;
    }
    static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

struct KvReplica : torch::autograd::Function<KvReplica> {
    static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& w, int64_t tp, int64_t head,
                                 int64_t n_heads) {
        ctx->saved_data["tp"] = tp;
        ctx->saved_data["head"] = head;
        ctx->saved_data["n"] = n_heads;
        return w.view_as(w);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const auto& g = grads[0];
        const int64_t head = ctx->saved_data["head"].toInt(), n = ctx->saved_data["n"].toInt();
        // Slot per KV head: the ranks sharing head `head` add into the same slot.
        auto slots = torch::zeros({n, g.numel()}, g.options().dtype(torch::kFloat32));
        slots[head].copy_(g.reshape({-1}));
        from_handle(ctx).allreduce_sum_(slots);
        return {slots[head].view(g.sizes()).to(g.scalar_type()), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
};

struct VocabParallelLogProb : torch::autograd::Function<VocabParallelLogProb> {
    static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& labels,
                                 int64_t vocab_first, int64_t tp_handle, double temperature, bool with_entropy) {
        const auto& tp = *reinterpret_cast<const TensorParallel*>(static_cast<intptr_t>(tp_handle));
        const int64_t n = logits.size(0), vl = logits.size(1), p = tp.size(), r = tp.rank();
        auto local = labels - vocab_first;
        auto here = local.ge(0).logical_and(local.lt(vl));
        auto lab = torch::where(here, local, torch::zeros_like(local));
        // This rank's statistics over its columns: lse_r, entropy H_r, log p_r(label).
        auto f = kernels::logprob_forward(logits, lab, temperature, with_entropy);
        auto buf = torch::zeros({2 * p + 1, n}, logits.options().dtype(torch::kFloat32));
        buf[r].copy_(f.lse);
        if (with_entropy) buf[p + r].copy_(f.entropy);
        buf[2 * p].copy_(torch::where(here, f.logp + f.lse, torch::zeros_like(f.lse)));  // z_label
        tp.allreduce_sum_(buf);
        auto lses = buf.narrow(0, 0, p);
        auto lse = torch::logsumexp(lses, 0);
        auto logp = buf[2 * p] - lse;
        torch::Tensor entropy;
        if (with_entropy) {
            // Σ_j p_j z_j = Σ_r exp(lse_r − lse)·(lse_r − H_r)  (rank r's Σ_j exp(z_j − lse_r) z_j).
            auto w = torch::exp(lses - lse);
            entropy = lse - (w * (lses - buf.narrow(0, p, p))).sum(0);
        }
        ctx->save_for_backward({logits, lab, here, lse, with_entropy ? entropy : torch::Tensor()});
        ctx->saved_data["t"] = temperature;
        return with_entropy ? variable_list{logp, entropy} : variable_list{logp};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        auto saved = ctx->get_saved_variables();
        const auto &logits = saved[0], &lab = saved[1], &here = saved[2], &lse = saved[3], &entropy = saved[4];
        const double t = ctx->saved_data["t"].toDouble();
        const torch::Tensor grad_logp = grads[0];
        const torch::Tensor grad_ent = grads.size() > 1 ? grads[1] : torch::Tensor();
        // The fused kernel's backward with the block's lse and entropy gives every local column's
        // gradient, except that it adds the one-hot term of the (placeholder) label 0 on rows
        // whose label lives on another rank: take it back out.
        auto g = kernels::logprob_backward(logits, lab, lse, grad_ent.defined() ? entropy : torch::Tensor(), grad_logp,
                                           grad_ent, t);
        if (grad_logp.defined()) g.select(1, 0).sub_(torch::where(here, torch::zeros_like(grad_logp), grad_logp) / t);
        return {g, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
};

}  // namespace

torch::Tensor tp_copy(const torch::Tensor& x, const TensorParallel* tp) {
    if (tp == nullptr || tp->size() == 1) return x;
    return CopyToBlock::apply(x, to_handle(tp));
}

torch::Tensor tp_reduce(const torch::Tensor& x, const TensorParallel* tp) {
    if (tp == nullptr || tp->size() == 1) return x;
    return ReduceFromBlock::apply(x, to_handle(tp));
}

torch::Tensor tp_kv_replica(const torch::Tensor& w, const TensorParallel* tp, const TpLayout& layout,
                            int64_t num_kv_heads) {
    if (tp == nullptr || !layout.kv_replicated || !w.defined()) return w;
    return KvReplica::apply(w, to_handle(tp), layout.kv_first, num_kv_heads);
}

VocabLogProbs vocab_parallel_logprob_entropy(const torch::Tensor& local_logits, const torch::Tensor& labels,
                                             int64_t vocab_first, const TensorParallel* tp, double temperature,
                                             bool with_entropy) {
    if (tp == nullptr || tp->size() == 1) {
        auto out = kernels::logprob_entropy(local_logits, labels, temperature, with_entropy);
        return {out.logp, out.entropy};
    }
    RLPT_CHECK(local_logits.dim() == 2 && labels.dim() == 1 && labels.size(0) == local_logits.size(0),
               "vocab_parallel_logprob_entropy: logits [N, Vl] and labels [N], got {} and {}", local_logits.sizes(),
               labels.sizes());
    auto out = VocabParallelLogProb::apply(local_logits, labels, vocab_first, to_handle(tp), temperature, with_entropy);
    VocabLogProbs res;
    res.logp = out[0];
    if (with_entropy) res.entropy = out[1];
    return res;
}

}  // namespace rlpt::model
