// TrainEngine: set-up (flat buffers, agreement, initial broadcast) and the optimizer step.
// Checkpointing is in engine_state.cpp, the collectives in comm/ (rlpt/comm/collectives.h).
#include "rlpt/engine/train_engine.h"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "engine/engine_impl.h"
#include <fmt/ranges.h>

#include "rlpt/comm/shared_tensor.h"
#include "rlpt/core/error.h"
#include "rlpt/core/log.h"
#include "rlpt/engine/adamw.h"
#include "rlpt/model/transformer.h"

namespace rlpt::engine {

using detail::Group;
using detail::ParamSlot;

namespace detail {

std::string group_name(const Group& g) { return g.fp32() ? "float32" : "bfloat16"; }

}  // namespace detail

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

std::string options_line(const OptimOptions& o) {
    // The hybrid-shard and frozen fields only when set: earlier checkpoints keep their layout.
    return fmt::format("options lr={} betas=({},{}) eps={} wd={} warmup={} scheduler={} min_lr_ratio={} "
                       "num_cycles={} total_steps={} clip={} zero={} bucket={}{}{}",
                       o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.warmup_steps, o.scheduler, o.min_lr_ratio,
                       o.num_cycles, o.total_steps, o.clip_grad, o.zero_stage, o.grad_bucket_bytes,
                       o.shard_group_size > 0 ? fmt::format(" shard_group={}", o.shard_group_size) : "",
                       o.frozen ? " frozen" : "");
}

// Trainable parameters in named_parameters() order, each tensor once (tied weights are
// registered under one name only, but a module may register a tensor twice).
std::vector<ParamSlot> collect_parameters(torch::nn::Module& module, bool frozen) {
    std::vector<ParamSlot> slots;
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const auto& item : module.named_parameters(/*recurse=*/true)) {
        const torch::Tensor& p = item.value();
        if (!p.defined() || (!frozen && !p.requires_grad())) continue;
        if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
        ParamSlot s;
        s.name = item.key();
        s.param = p;
        s.numel = p.numel();
        s.shape = p.sizes().vec();
        s.decay = p.dim() >= 2;
        slots.push_back(std::move(s));
    }
    RLPT_CHECK(!slots.empty(), "TrainEngine: the module has no trainable parameters");
    const auto device = slots.front().param.device();
    for (const auto& s : slots) {
        const auto dt = s.param.scalar_type();
        RLPT_CHECK(dt == torch::kFloat32 || dt == torch::kBFloat16,
                   "TrainEngine: parameter '{}' is {}; the engine trains float32 and bfloat16 parameters", s.name,
                   c10::toString(dt));
        RLPT_CHECK(s.param.device() == device, "TrainEngine: parameter '{}' is on {} but '{}' is on {}", s.name,
                   s.param.device().str(), slots.front().name, device.str());
    }
    return slots;
}

// ZeRO-2/3: which decoder layer each parameter belongs to (absent: the root unit). Sets
// st.backbone when the module has one.
std::unordered_map<const c10::TensorImpl*, int64_t> parameter_units(detail::EngineState& st) {
    std::unordered_map<const c10::TensorImpl*, int64_t> out;
    if (!st.shards_grads()) return out;
    st.backbone = model::find_backbone(*st.module);
    if (st.backbone == nullptr) return out;
    for (int64_t i = 0; i < st.backbone->num_layers(); ++i)
        for (const auto& p : st.backbone->layer(i).parameters()) out.emplace(p.unsafeGetTensorImpl(), i);
    return out;
}

std::string describe_layout(const std::vector<ParamSlot>& slots, const OptimOptions& opts) {
    std::string out;
    for (const auto& s : slots)
        out += fmt::format("{} {} {}\n", s.name, c10::toString(s.param.scalar_type()), s.param.sizes());
    out += options_line(opts);
    return out;
}

// First line where two layout descriptions differ, for the error message.
std::string first_difference(const std::string& a, const std::string& b) {
    size_t pa = 0, pb = 0;
    while (pa < a.size() || pb < b.size()) {
        size_t ea = a.find('\n', pa), eb = b.find('\n', pb);
        if (ea == std::string::npos) ea = a.size();
        if (eb == std::string::npos) eb = b.size();
        std::string la = pa < a.size() ? a.substr(pa, ea - pa) : "<nothing>";
        std::string lb = pb < b.size() ? b.substr(pb, eb - pb) : "<nothing>";
        if (la != lb) return fmt::format("'{}' vs '{}'", la, lb);
        pa = ea + 1;
        pb = eb + 1;
    }
    return "(identical)";
}

// All ranks exchange their layout (or their set-up error) and throw together on a mismatch.
void agree_on_layout(const comm::Communicator* dp, const std::string& layout, std::exception_ptr local_error) {
    if (dp == nullptr) {
        if (local_error) std::rethrow_exception(local_error);
        return;
    }
    std::string mine = layout;
    if (local_error) {
        try {
            std::rethrow_exception(local_error);
        } catch (const std::exception& e) {
            mine = std::string("!") + e.what();
        }
    }
    const auto all = dp->allgather_strings(mine);
    std::string errors;
    for (size_t r = 0; r < all.size(); ++r)
        if (!all[r].empty() && all[r][0] == '!') errors += fmt::format(" [DP rank {}: {}]", r, all[r].substr(1));
    if (!errors.empty()) {
        if (local_error) std::rethrow_exception(local_error);
        RLPT_THROW(CommError, "TrainEngine set-up failed on another DP rank:{}", errors);
    }
    for (size_t r = 1; r < all.size(); ++r) {
        if (all[r] != all[0])
            RLPT_THROW(CommError,
                       "TrainEngine: DP ranks disagree on the parameters or options (every rank must build the "
                       "same model with the same options): DP rank 0 vs DP rank {}: {}",
                       r, first_difference(all[0], all[r]));
    }
}

}  // namespace

// ---- set-up ----------------------------------------------------------------------------------

TrainEngine::TrainEngine(std::shared_ptr<torch::nn::Module> module, const comm::Communicator& dp, OptimOptions opts,
                         uint64_t seed, TensorParallelInfo tp)
    : impl_(std::make_unique<Impl>()) {
    auto& st = *impl_;
    RLPT_CHECK(module != nullptr, "TrainEngine: module is null");
    st.module = std::move(module);
    st.opts = std::move(opts);
    if (dp.valid() && dp.size() > 1) {
        st.dp = &dp;
        st.dp_rank = dp.rank();
        st.dp_size = dp.size();
    }
    if (tp.block != nullptr && tp.block->valid() && tp.block->size() > 1) {
        st.tp = tp.block;
        st.tp_rank = tp.block->rank();
        st.tp_size = tp.block->size();
    }
    st.generator = at::make_generator<at::CPUGeneratorImpl>(seed);

    // 1. Local checks, then every rank compares layouts (a clean error everywhere, no hang).
    std::exception_ptr err;
    try {
        validate_optim_options(st.opts);
        const int64_t sg = st.opts.shard_group_size;
        RLPT_CHECK(sg == 0 || st.dp_size % sg == 0,
                   "TrainEngine: shard_group_size {} does not divide the {} DP ranks (hybrid shard groups must "
                   "be equal)",
                   sg, st.dp_size);
        RLPT_CHECK(!st.opts.frozen || st.opts.zero_stage == 0 || st.opts.zero_stage == 3,
                   "TrainEngine: a frozen engine shards parameters (zero_stage 3) or nothing (0), got zero_stage {}",
                   st.opts.zero_stage);
        st.slots = collect_parameters(*st.module, st.opts.frozen);
        for (auto& sl : st.slots) sl.counted = st.tp == nullptr || tp.not_counted.count(sl.name) == 0;
        st.device = st.slots.front().param.device();
        st.layout = describe_layout(st.slots, st.opts);
        // Only with tp > 1, so tp = 1 checkpoints of earlier versions keep their layout.
        if (st.tp != nullptr) st.layout += fmt::format("\ntensor_parallel {} rank {}", st.tp_size, st.tp_rank);
    } catch (...) {
        err = std::current_exception();
    }
    agree_on_layout(st.dp, st.layout, err);

    // The ZeRO shard group: all DP ranks, or (hybrid shard) groups of shard_group_size
    // consecutive DP ranks plus the replica groups across them. Collective on dp.
    st.shard_size = st.dp_size;
    st.shard_rank = st.dp_rank;
    st.shard_comm = st.dp;
    const int sg = static_cast<int>(st.opts.shard_group_size);
    if (st.dp != nullptr && sg > 0 && sg < st.dp_size) {
        st.own_shard_comm = st.dp->split(st.dp_rank / sg, st.dp_rank);
        st.replica_comm = st.dp->split(st.dp_rank % sg, st.dp_rank);
        st.shard_size = sg;
        st.shard_rank = st.dp_rank % sg;
        st.shard_comm = sg > 1 ? &st.own_shard_comm : nullptr;
    }

    // 2. Flat buffers: parameters and gradients become views into them.
    err = nullptr;
    try {
        torch::NoGradGuard no_grad;
        const int64_t shard_multiple = st.opts.zero_stage >= 1 ? st.shard_size * comm::kShardAlign : 1;
        const auto units = parameter_units(st);
        for (auto& s : st.slots) {
            const auto dt = s.param.scalar_type();
            const auto u = units.find(s.param.unsafeGetTensorImpl());
            const int64_t unit = u == units.end() ? -1 : u->second;
            size_t gi = 0;
            while (gi < st.groups.size() && (st.groups[gi].dtype != dt || st.groups[gi].unit != unit)) ++gi;
            if (gi == st.groups.size()) {
                st.groups.emplace_back();
                st.groups.back().dtype = dt;
                st.groups.back().unit = unit;
            }
            s.group = gi;
            s.offset = st.groups[gi].numel;
            st.groups[gi].numel += s.numel;
        }
        const int64_t bucket_elems =
            std::max<int64_t>(1, std::min(st.opts.grad_bucket_bytes, comm::kMaxMessageBytes) / 4);
        for (auto& g : st.groups) {
            g.padded = round_up(g.numel, shard_multiple);
            g.shard = st.opts.zero_stage >= 1 ? g.padded / st.shard_size : g.padded;
            auto topts = torch::TensorOptions().dtype(g.dtype).device(st.device);
            // zeros, not empty: the pages are touched here, once, not in the first step. On the
            // host, full parameters live in a shared arena: a same-host weight transfer maps it
            // (rlpt/comm/shared_arena.h). Not at ZeRO-3: its flat_param exists only while gathered.
            g.flat_param = st.device.is_cpu() && !st.shards_params()
                               ? comm::shared_zeros(g.padded, g.dtype, "rlpt-params")
                               : torch::zeros({g.padded}, topts);
            if (!st.frozen()) g.flat_grad = torch::zeros({g.padded}, topts.dtype(torch::kFloat32));
            g.grad_allocated = !st.frozen();
            for (int64_t b = 0; b < g.numel; b += bucket_elems)
                g.buckets.emplace_back(b, std::min(g.numel, b + bucket_elems));
        }
        for (auto& s : st.slots) {
            auto& g = st.groups[s.group];
            auto view = g.flat_param.narrow(0, s.offset, s.numel).view(s.shape);
            view.copy_(s.param);
            s.param.set_data(view);
            if (st.frozen()) continue;
            s.grad_view = g.flat_grad.narrow(0, s.offset, s.numel).view(s.shape);
            auto& grad = s.param.mutable_grad();
            if (grad.defined()) s.grad_view.copy_(grad);
            grad = s.grad_view;
        }
        RLPT_CHECK(!st.shards_params() || st.backbone != nullptr,
                   "TrainEngine: zero_stage 3 shards parameters layer by layer and needs a transformer model "
                   "(CausalLM, ValueModel); this module has no model::Backbone");
        st.transport = comm::make_collectives(st.dp, st.device, "the TrainEngine's data-parallel group");
        st.shard_tx = st.transport.get();
        if (st.shard_size < st.dp_size) {
            st.own_shard_tx = comm::make_collectives(st.shard_comm, st.device, "the TrainEngine's shard group");
            st.shard_tx = st.own_shard_tx.get();
            st.replica_tx = comm::make_collectives(&st.replica_comm, st.device, "the TrainEngine's replica group");
        }
    } catch (...) {
        err = std::current_exception();
    }
    st.agree<CommError>(err, "TrainEngine set-up");

    // 3. Rank 0's parameters everywhere, then the optimizer state of this rank's range.
    for (auto& g : st.groups) st.transport->broadcast(g.flat_param, 0);
    torch::NoGradGuard no_grad;
    for (auto& g : st.groups) {
        if (st.opts.zero_stage >= 1) {
            g.own_begin = st.shard_rank * g.shard;
            g.own_end = g.own_begin + g.shard;
        } else {
            g.own_begin = 0;
            g.own_end = g.numel;
        }
        const int64_t own = st.frozen() ? 0 : g.own_end - g.own_begin;  // frozen: no optimizer state
        auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(st.device);
        g.exp_avg = torch::zeros({own}, f32);
        g.exp_avg_sq = torch::zeros({own}, f32);
        if (!g.fp32() && !st.frozen())
            g.master = g.flat_param.narrow(0, g.own_begin, own).to(torch::kFloat32).contiguous();
        if (st.shards_params()) {
            // The module keeps its tensors (views into flat_param) but not their data.
            // On the host in a shared arena (what a same-host weight transfer maps).
            g.param_shard = st.device.is_cpu() ? comm::shared_zeros(g.shard, g.dtype, "rlpt-param-shard")
                                               : torch::empty({g.shard}, g.flat_param.options());
            g.param_shard.copy_(g.flat_param.narrow(0, g.own_begin, g.shard));
            free_storage(g.flat_param);
            g.params_full = false;
        }
    }
    if (st.shards_grads() && !st.frozen()) {
        // One buffer for every slice: lend_gradient_memory() lends it as one span.
        int64_t total = 0;
        for (const auto& g : st.groups) total += g.shard;
        st.grad_shards = torch::zeros({total}, torch::TensorOptions().dtype(torch::kFloat32).device(st.device));
        int64_t at = 0;
        for (auto& g : st.groups) {
            g.grad_shard = st.grad_shards.narrow(0, at, g.shard);
            at += g.shard;
        }
    }
    detail::install_hooks(st);
    if (st.hooks != nullptr) {
        // Full gradients exist only while a unit's backward runs (the root: from a forward with
        // gradients to the step).
        for (auto& g : st.groups) {
            if (g.flat_grad.defined()) free_storage(g.flat_grad);
            g.grad_allocated = false;
        }
    }
    st.note_memory();
    RLPT_LOG_DEBUG("TrainEngine: {} parameters in {} group(s), transport {}, ZeRO-{}, {} optimizer bytes",
                   num_parameters(), st.groups.size(), st.transport->name(), st.opts.zero_stage,
                   optimizer_state_bytes());
}

TrainEngine::~TrainEngine() {
    if (impl_) detail::remove_hooks(*impl_);
}

// ---- gradients ------------------------------------------------------------------------------

void TrainEngine::zero_grad() {
    auto& st = *impl_;
    RLPT_CHECK(!st.frozen(), "TrainEngine: zero_grad() on a frozen engine (it only runs forwards)");
    RLPT_CHECK_KIND(InternalError, st.grad_lease.expired(),
                    "TrainEngine: zero_grad() while the gradient memory is lent (lend_gradient_memory): what was "
                    "placed in it (the hybrid engine's rollout copy) must be released first");
    st.grads_lent = false;
    torch::NoGradGuard no_grad;
    for (auto& s : st.slots) {
        auto& grad = s.param.mutable_grad();
        if (!grad.is_same(s.grad_view)) grad = s.grad_view;
    }
    for (auto& g : st.groups) {
        if (g.grad_allocated) g.flat_grad.zero_();
        if (g.grad_shard.defined()) g.grad_shard.zero_();
    }
}

ScratchMemory TrainEngine::lend_gradient_memory() {
    auto& st = *impl_;
    ScratchMemory out;
    if (st.frozen()) return out;
    RLPT_CHECK_KIND(InternalError, st.grad_lease.expired(),
                    "TrainEngine: lend_gradient_memory() while an earlier lease is still held");
    // The lease keeps the buffers' storages alive as long as anything placed in them lives.
    auto buffers = std::make_shared<std::vector<torch::Tensor>>();
    if (st.grad_shards.defined()) buffers->push_back(st.grad_shards);
    for (const auto& g : st.groups)
        if (g.grad_allocated && g.flat_grad.defined()) buffers->push_back(g.flat_grad);
    for (const auto& b : *buffers)
        out.spans.push_back(
            torch::from_blob(b.data_ptr(), {b.numel() * b.element_size()}, b.options().dtype(torch::kUInt8)));
    out.owner = buffers;
    st.grad_lease = out.owner;
    st.grads_lent = true;
    return out;
}

// ---- the step -------------------------------------------------------------------------------

StepResult TrainEngine::step() { return step(true); }

StepResult TrainEngine::step(bool advance_schedule) {
    using Clock = std::chrono::steady_clock;
    const auto seconds_since = [](Clock::time_point t0) {
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    const auto t_begin = Clock::now();
    auto& st = *impl_;
    RLPT_CHECK(!st.frozen(), "TrainEngine: step() on a frozen engine (it only runs forwards)");
    RLPT_CHECK_KIND(InternalError, !st.grads_lent,
                    "TrainEngine: step() after lend_gradient_memory() without zero_grad(): the gradient buffers were "
                    "lent and hold something else");
    torch::NoGradGuard no_grad;
    std::exception_ptr err;
    try {
        for (auto& s : st.slots) detail::attach_grad(s, st.groups[s.group]);
    } catch (...) {
        err = std::current_exception();
    }
    st.agree<CommError>(err, "TrainEngine::step");

    // 1. Mean gradient over DP. ZeRO-0/1: all-reduced bucket by bucket, all buckets in flight at
    // once. ZeRO-2/3: what the layer hooks have not reduce-scattered yet (the root unit, or
    // everything without hooks) is reduce-scattered now; each rank keeps its slice.
    double sum_sq = 0;
    if (!st.shards_grads()) {
        for (auto& g : st.groups)
            for (const auto& [b, e] : g.buckets) st.transport->start_allreduce_sum(g.flat_grad.narrow(0, b, e - b));
        st.transport->finish_allreduces("gradient all-reduce");
        if (st.dp_size > 1)
            for (auto& g : st.groups) g.flat_grad.narrow(0, 0, g.numel).div_(static_cast<double>(st.dp_size));
        for (auto& g : st.groups) sum_sq += sum_of_squares(g.flat_grad.narrow(0, 0, g.numel));
    } else {
        detail::finish_gathers(st);
        for (size_t gi = 0; gi < st.groups.size(); ++gi) detail::reduce_group_grads(st, gi);
        for (auto& g : st.groups) {
            if (st.dp_size > 1) g.grad_shard.div_(static_cast<double>(st.dp_size));
            sum_sq += sum_of_squares(g.grad_shard);
        }
    }
    StepResult r;
    r.allreduce_s = seconds_since(t_begin);
    const auto t_reduced = Clock::now();
    // The slice of slot `s` this rank updates: [lo, hi) in its group's coordinates.
    const auto own_range = [&](const detail::ParamSlot& s) {
        const auto& g = st.groups[s.group];
        return std::make_pair(std::max(s.offset, g.own_begin), std::min(s.offset + s.numel, g.own_end));
    };
    const auto grad_of = [&](const detail::ParamSlot& s, int64_t lo, int64_t n) {
        const auto& g = st.groups[s.group];
        return st.shards_grads() ? g.grad_shard.narrow(0, lo - g.own_begin, n) : g.flat_grad.narrow(0, lo, n);
    };
    if (st.tp != nullptr) {
        // The block's norm: every slice once, every replicated parameter once.
        for (const auto& s : st.slots) {
            if (s.counted) continue;
            const auto [lo, hi] = st.shards_grads() ? own_range(s) : std::make_pair(s.offset, s.offset + s.numel);
            if (lo < hi) sum_sq -= sum_of_squares(grad_of(s, lo, hi - lo));
        }
    }
    // The slices of one shard group cover every element once (the groups hold replicas).
    if (st.shards_grads() && st.shard_comm != nullptr) sum_sq = st.shard_comm->allreduce_sum(sum_sq);
    if (st.tp != nullptr) sum_sq = st.tp->allreduce_sum(std::max(0.0, sum_sq));
    r.grad_norm = std::sqrt(sum_sq);
    r.lr = scheduled_lr(st.opts, st.schedule_step);

    // 2. Non-finite norm: skip (verl), zero the gradients, still count the step.
    if (!std::isfinite(r.grad_norm)) {
        r.skipped = true;
        for (auto& g : st.groups) {
            if (g.grad_allocated) g.flat_grad.zero_();
            if (g.grad_shard.defined()) g.grad_shard.zero_();
        }
        RLPT_LOG_WARN("TrainEngine: gradient norm is {} at step {}: update skipped", r.grad_norm, st.global_step);
    } else {
        // 3. Clip (torch's clip_grad_norm_: max_norm / (norm + 1e-6), at most 1) inside AdamW.
        AdamWStep a;
        a.lr = r.lr;
        a.beta1 = st.opts.beta1;
        a.beta2 = st.opts.beta2;
        a.eps = st.opts.eps;
        a.step = st.applied_updates + 1;
        if (st.opts.clip_grad > 0) a.grad_scale = std::min(1.0, st.opts.clip_grad / (r.grad_norm + 1e-6));
        // One fused multi-tensor AdamW per weight-decay class (adamw_update_multi_).
        std::vector<torch::Tensor> targets[2], grads[2], exp_avgs[2], exp_avg_sqs[2];
        for (const auto& s : st.slots) {
            auto& g = st.groups[s.group];
            const auto [lo, hi] = own_range(s);
            if (lo >= hi) continue;
            const int64_t n = hi - lo, own_off = lo - g.own_begin;
            const int d = s.decay ? 1 : 0;
            if (!g.fp32()) {
                targets[d].push_back(g.master.narrow(0, own_off, n));
            } else {
                targets[d].push_back(st.shards_params() ? g.param_shard.narrow(0, own_off, n)
                                                        : g.flat_param.narrow(0, lo, n));
            }
            grads[d].push_back(grad_of(s, lo, n));
            exp_avgs[d].push_back(g.exp_avg.narrow(0, own_off, n));
            exp_avg_sqs[d].push_back(g.exp_avg_sq.narrow(0, own_off, n));
        }
        for (int d : {0, 1}) {
            a.weight_decay = d == 1 ? st.opts.weight_decay : 0.0;
            adamw_update_multi_(targets[d], grads[d], exp_avgs[d], exp_avg_sqs[d], a);
        }
        const auto t0 = Clock::now();
        for (auto& g : st.groups) {
            const int64_t own = std::min(g.own_end, g.numel) - g.own_begin;
            if (!g.fp32() && own > 0) {
                auto dst =
                    st.shards_params() ? g.param_shard.narrow(0, 0, own) : g.flat_param.narrow(0, g.own_begin, own);
                dst.copy_(g.master.narrow(0, 0, own));
            }
            if (st.opts.zero_stage == 1 || st.opts.zero_stage == 2)
                st.shard_tx->allgather_shards(g.flat_param, g.shard);
        }
        detail::invalidate_gathered(st);
        r.allgather_s = st.opts.zero_stage >= 1 ? seconds_since(t0) : 0.0;
        // The data changed under the parameters' feet: let autograd see it.
        for (auto& s : st.slots) s.param.unsafeGetTensorImpl()->bump_version();
        ++st.applied_updates;
    }
    if (st.shards_params() && r.skipped && st.hold_count == 0)
        for (const auto& g : st.groups) detail::release_unit(st, g.unit);
    ++st.global_step;
    if (advance_schedule) ++st.schedule_step;
    r.optimizer_s = seconds_since(t_reduced) - r.allgather_s;
    st.note_memory();
    return r;
}

void TrainEngine::advance_schedule() { ++impl_->schedule_step; }

// ---- accessors ------------------------------------------------------------------------------

int64_t TrainEngine::global_step() const { return impl_->global_step; }
int64_t TrainEngine::schedule_step() const { return impl_->schedule_step; }
int64_t TrainEngine::applied_updates() const { return impl_->applied_updates; }
double TrainEngine::current_lr() const { return scheduled_lr(impl_->opts, impl_->schedule_step); }
const OptimOptions& TrainEngine::options() const { return impl_->opts; }
const char* TrainEngine::transport_name() const { return impl_->transport->name(); }
torch::Generator TrainEngine::generator() const { return impl_->generator; }

int64_t TrainEngine::optimizer_state_bytes() const {
    int64_t bytes = 0;
    for (const auto& g : impl_->groups) {
        bytes += (g.exp_avg.numel() + g.exp_avg_sq.numel()) * 4;
        if (g.master.defined()) bytes += g.master.numel() * 4;
    }
    return bytes;
}

TrainEngine::MemoryBytes TrainEngine::memory_bytes() const {
    const auto bytes = [](const torch::Tensor& t) {
        return t.defined() ? static_cast<int64_t>(t.storage().nbytes()) : int64_t{0};
    };
    MemoryBytes m;
    for (const auto& g : impl_->groups) {
        m.params += bytes(g.flat_param) + bytes(g.param_shard);
        m.grads += bytes(g.flat_grad);
    }
    m.grads += bytes(impl_->grad_shards);  // every group's grad_shard is a view into it
    m.optimizer = optimizer_state_bytes();
    return m;
}

int64_t TrainEngine::peak_memory_bytes() const { return impl_->peak_bytes; }
void TrainEngine::reset_peak_memory() {
    impl_->peak_bytes = 0;
    impl_->note_memory();
}
int TrainEngine::shard_group_size() const { return impl_->shard_size; }
int TrainEngine::shard_group_rank() const { return impl_->shard_rank; }

namespace detail {
int64_t EngineState::note_memory() {
    const auto bytes = [](const torch::Tensor& t) {
        return t.defined() ? static_cast<int64_t>(t.storage().nbytes()) : int64_t{0};
    };
    int64_t total = 0;
    for (const auto& g : groups) {
        total += bytes(g.flat_param) + bytes(g.param_shard) + bytes(g.flat_grad);
        total += (g.exp_avg.numel() + g.exp_avg_sq.numel()) * 4;
        if (g.master.defined()) total += g.master.numel() * 4;
    }
    total += bytes(grad_shards);  // every group's grad_shard is a view into it
    peak_bytes = std::max(peak_bytes, total);
    return total;
}
}  // namespace detail

std::shared_ptr<void> TrainEngine::hold_full_parameters() { return detail::hold_full(*impl_); }

void TrainEngine::release_parameters() {
    auto& st = *impl_;
    if (!st.shards_params()) return;
    detail::finish_gathers(st);
    for (const auto& g : st.groups) detail::release_unit(st, g.unit);
}

std::vector<HeldSlice> TrainEngine::held_parameters() const {
    const auto& st = *impl_;
    std::vector<HeldSlice> out;
    for (const auto& s : st.slots) {
        HeldSlice h{s.name, 0, s.numel, torch::Tensor(), s.param.sizes().vec()};
        if (!st.shards_params()) {
            h.data = s.param.detach().reshape({-1});  // a view: the parameters are contiguous in flat_param
        } else {
            const auto& g = st.groups[s.group];
            const int64_t lo = std::max(s.offset, g.own_begin),
                          hi = std::min(s.offset + s.numel, g.own_begin + g.shard);
            h.begin = std::min(std::max<int64_t>(lo - s.offset, 0), s.numel);
            h.end = std::max(h.begin, std::min(hi - s.offset, s.numel));
            h.data = g.param_shard.narrow(0, std::clamp<int64_t>(lo - g.own_begin, 0, g.shard), h.end - h.begin);
        }
        out.push_back(std::move(h));
    }
    return out;
}

int64_t TrainEngine::num_parameters() const {
    int64_t n = 0;
    for (const auto& g : impl_->groups) n += g.numel;
    return n;
}

}  // namespace rlpt::engine
