// ZeRO-2/3 mechanics of the TrainEngine: per-unit (decoder layer / root) gathers, frees and
// gradient reduce-scatters, driven by the hooks a Backbone calls around its layers
// (model::LayerHooks). The step and the set-up are in train_engine.cpp.
#include "engine/engine_impl.h"
#include "rlpt/model/transformer.h"
#include <fmt/ranges.h>

namespace rlpt::engine::detail {

std::vector<size_t> unit_groups(const EngineState& st, int64_t unit) {
    std::vector<size_t> out;
    for (size_t gi = 0; gi < st.groups.size(); ++gi)
        if (st.groups[gi].unit == unit) out.push_back(gi);
    return out;
}

void start_gather_unit(EngineState& st, int64_t unit) {
    for (size_t gi : unit_groups(st, unit)) {
        Group& g = st.groups[gi];
        if (g.params_full || g.gather_in_flight) continue;
        alloc_storage(g.flat_param);
        g.flat_param.narrow(0, st.shard_rank * g.shard, g.shard).copy_(g.param_shard);
        st.shard_tx->start_allgather_shards(g.flat_param, g.shard);
        g.gather_in_flight = true;
    }
    st.note_memory();
}

void finish_gathers(EngineState& st) {
    bool any = false;
    for (const auto& g : st.groups) any = any || g.gather_in_flight;
    if (!any) return;
    st.shard_tx->finish_allgathers("parameter all-gather (ZeRO-3)");
    for (auto& g : st.groups) {
        if (!g.gather_in_flight) continue;
        g.gather_in_flight = false;
        g.params_full = true;
    }
}

void gather_unit(EngineState& st, int64_t unit) {
    bool needed = false;
    for (size_t gi : unit_groups(st, unit)) needed = needed || !st.groups[gi].params_full;
    if (!needed) return;
    start_gather_unit(st, unit);
    finish_gathers(st);
}

void release_unit(EngineState& st, int64_t unit) {
    if (!st.shards_params() || st.hold_count > 0) return;
    for (size_t gi : unit_groups(st, unit)) {
        Group& g = st.groups[gi];
        if (!g.params_full || g.gather_in_flight) continue;
        free_storage(g.flat_param);
        g.params_full = false;
    }
}

void attach_grad(ParamSlot& s, const Group& g) {
    const auto* storage = g.flat_param.storage().unsafeGetStorageImpl();
    RLPT_CHECK(s.param.storage().unsafeGetStorageImpl() == storage && s.param.storage_offset() == s.offset &&
                   s.param.sizes() == s.grad_view.sizes(),
               "TrainEngine: parameter '{}' was moved or re-created after the engine was built (Module::to, "
               "assigning a new tensor); copy values into it in place instead",
               s.name);
    auto& grad = s.param.mutable_grad();
    if (!g.grad_allocated) {
        // ZeRO-2/3, reduce-scattered already: nothing may have arrived since.
        RLPT_CHECK(!grad.defined() || grad.is_same(s.grad_view),
                   "TrainEngine: a gradient of '{}' arrived after its layer's gradients were reduce-scattered (a "
                   "backward that bypassed the engine's hooks)",
                   s.name);
    } else if (!grad.defined()) {
        s.grad_view.zero_();
    } else if (!grad.is_same(s.grad_view)) {
        // Replaced (e.g. dropped by zero_grad(true) and re-created by backward in the parameter's
        // dtype): take its values, converted to fp32.
        RLPT_CHECK(grad.sizes() == s.grad_view.sizes(), "TrainEngine: gradient of '{}' has shape {}, expected {}",
                   s.name, grad.sizes(), s.grad_view.sizes());
        if (grad.data_ptr() != s.grad_view.data_ptr()) s.grad_view.copy_(grad);
    }
    grad = s.grad_view;
}

void reduce_group_grads(EngineState& st, size_t gi) {
    Group& g = st.groups[gi];
    if (!g.grad_allocated) return;
    torch::NoGradGuard no_grad;
    for (auto& s : st.slots)
        if (s.group == gi) attach_grad(s, g);
    // The sum over the shard group of this rank's slice (a one-rank group: the whole buffer) ...
    torch::Tensor part = g.flat_grad;
    if (st.shard_size > 1) {
        part = torch::empty_like(g.grad_shard);
        st.shard_tx->reduce_scatter_sum(g.flat_grad, part);
    }
    // ... then (hybrid shard) over the ranks holding the same slice in the other groups.
    if (st.replica_tx != nullptr) {
        const int64_t chunk = comm::kMaxMessageBytes / 4;
        for (int64_t b = 0; b < part.numel(); b += chunk)
            st.replica_tx->start_allreduce_sum(part.narrow(0, b, std::min(chunk, part.numel() - b)));
        st.replica_tx->finish_allreduces("gradient slice all-reduce across shard groups (hybrid shard)");
    }
    g.grad_shard.add_(part);
    if (st.hooks != nullptr) {
        free_storage(g.flat_grad);
        g.grad_allocated = false;
    } else {
        g.flat_grad.zero_();  // no hooks: the buffer is the accumulation target of every backward
    }
}

void prepare_unit_grads(EngineState& st, int64_t unit) {
    if (st.frozen()) return;  // forwards only: no gradient buffers
    for (size_t gi : unit_groups(st, unit)) {
        Group& g = st.groups[gi];
        if (g.grad_allocated) continue;
        alloc_storage(g.flat_grad);
        g.flat_grad.zero_();
        g.grad_allocated = true;
    }
    st.note_memory();
}

// The hooks a Backbone calls. They hold the engine's state by pointer; the engine clears it
// when it dies, after which a late call (a graph outliving its engine) is an error.
class ZeroHooks final : public model::LayerHooks {
  public:
    explicit ZeroHooks(EngineState* st, bool prefetch) : st_(st), prefetch_(prefetch) {}
    void detach() { st_ = nullptr; }
    bool attached() const { return st_ != nullptr; }

    void before_forward(int64_t layer) override {
        EngineState& st = state();
        if (layer == kRootUnit && torch::GradMode::is_enabled()) prepare_unit_grads(st, layer);
        if (!st.shards_params()) return;
        gather_unit(st, layer);
        prefetch(st, layer == kRootUnit ? 0 : layer + 1);
    }
    void after_forward(int64_t layer) override { release_unit(state(), layer); }
    void before_backward(int64_t layer) override {
        EngineState& st = state();
        prepare_unit_grads(st, layer);
        if (!st.shards_params()) return;
        gather_unit(st, layer);
        prefetch(st, layer - 1);
    }
    void after_backward(int64_t layer) override {
        EngineState& st = state();
        for (size_t gi : unit_groups(st, layer)) reduce_group_grads(st, gi);
        release_unit(st, layer);
    }
    std::shared_ptr<void> hold_full_parameters() override { return hold_full(state()); }

  private:
    EngineState& state() const {
        RLPT_CHECK_KIND(InternalError, st_ != nullptr,
                        "a model hook ran after its TrainEngine was destroyed (a graph outlived the engine)");
        return *st_;
    }
    void prefetch(EngineState& st, int64_t layer) const {
        if (prefetch_ && st.hold_count == 0 && layer >= 0 && st.backbone != nullptr &&
            layer < st.backbone->num_layers())
            start_gather_unit(st, layer);
    }

    EngineState* st_;
    bool prefetch_;
};

void install_hooks(EngineState& st) {
    if (st.backbone == nullptr || !st.shards_grads()) return;
    st.hooks = std::make_shared<ZeroHooks>(&st, st.opts.zero3_prefetch);
    st.backbone->set_layer_hooks(st.hooks);
}

void remove_hooks(EngineState& st) {
    if (st.hooks == nullptr) return;
    st.hooks->detach();
    if (st.backbone != nullptr && st.backbone->layer_hooks() == st.hooks) st.backbone->set_layer_hooks(nullptr);
    st.hooks = nullptr;
}

void invalidate_gathered(EngineState& st) {
    if (!st.shards_params()) return;
    finish_gathers(st);  // never free a buffer a gather still writes into
    for (auto& g : st.groups) {
        g.params_full = false;
        if (st.hold_count == 0) free_storage(g.flat_param);
    }
    if (st.hold_count == 0) return;
    for (const auto& g : st.groups) start_gather_unit(st, g.unit);
    finish_gathers(st);
}

namespace {

// Keeps the engine's hooks object alive so that a handle outliving its engine only does nothing.
struct Hold {
    std::shared_ptr<ZeroHooks> hooks;
    EngineState* st = nullptr;
    Hold() = default;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() {
        // The engine may be gone: its hooks were detached then, and the parameters stay full.
        if (hooks == nullptr || !hooks->attached()) return;
        if (--st->hold_count > 0) return;
        for (const auto& g : st->groups) release_unit(*st, g.unit);
    }
};

}  // namespace

std::shared_ptr<void> hold_full(EngineState& st) {
    if (!st.shards_params()) return nullptr;
    finish_gathers(st);
    for (const auto& g : st.groups) start_gather_unit(st, g.unit);
    finish_gathers(st);
    ++st.hold_count;
    auto hold = std::make_shared<Hold>();  // built in place: a moved-from temporary would release
    hold->hooks = st.hooks;
    hold->st = &st;
    return hold;
}

}  // namespace rlpt::engine::detail
