#include "model_setup.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "rlpt/ckpt/h5_store.h"

#include "rlpt/core/log.h"
#include "rlpt/weights/reshard_plan.h"

namespace rlpt::roles::detail {

torch::Dtype dtype_for(const std::string& dtype) { return dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32; }

std::shared_ptr<const model::TensorParallel> tensor_parallel(const protocol::WorkerContext& ctx, torch::Device device) {
    if (!ctx.comms->mp.valid() || ctx.comms->mp.size() <= 1) return nullptr;
    return model::TensorParallel::over(ctx.comms->mp, device);
}

engine::TensorParallelInfo engine_tp_info(const protocol::WorkerContext& ctx, const torch::nn::Module& m,
                                          const model::TpLayout& layout) {
    engine::TensorParallelInfo info;
    if (layout.tp <= 1) return info;
    info.block = &ctx.comms->mp;
    info.not_counted = model::uncounted_parameters(m, layout);
    return info;
}

namespace {

std::shared_ptr<model::CausalLM> build_policy_model(const ModelSettings& m, torch::Device device, int64_t vocab_size,
                                                    std::shared_ptr<const model::TensorParallel> tp) {
    if (!m.path.empty()) {
        return model::load_pretrained(m.path, dtype_for(m.dtype), device, std::move(tp));
    }
    RLPT_CHECK_KIND(ConfigError, vocab_size > 0, "a built-in model needs the tokenizer's vocabulary size");
    const auto& b = m.builtin;
    model::ModelArgs a = model::builtin_model_args(b, vocab_size);
    a.torch_dtype = m.dtype;
    return model::make_random_causal_lm(a, static_cast<uint64_t>(b.init_seed), dtype_for(m.dtype), device,
                                        std::move(tp));
}

}  // namespace

std::shared_ptr<model::CausalLM> build_policy(const ModelSettings& s, torch::Device device, int64_t vocab_size,
                                              std::shared_ptr<const model::TensorParallel> tp) {
    auto m = build_policy_model(s, device, vocab_size, std::move(tp));
    const auto precision = model::head_precision_from_name(s.head_precision);
    m->set_head_precision(precision);
    if (precision == model::HeadPrecision::kTf32 && !device.is_cuda())
        RLPT_LOG_INFO("model.head_precision: tf32 changes nothing on {} (no TF32 there): the head runs in fp32",
                      device.str());
    return m;
}

std::vector<torch::Tensor> parameter_list(torch::nn::Module& m) {
    std::vector<torch::Tensor> out;
    for (auto& p : m.named_parameters(/*recurse=*/true)) out.push_back(p.value());
    return out;
}

weights::WeightSyncOptions weight_sync_options(const WeightSyncSettings& s) {
    weights::WeightSyncOptions opts;
    opts.bucket_bytes = static_cast<int64_t>(s.bucket_mb * 1024 * 1024);
    opts.timeout_s = s.timeout_s;
    return opts;
}

bool weight_sync_from_shards(const WeightSyncSettings& s, const protocol::WorkerContext& ctx) {
    return s.actor_zero_stage == 3 && !comm::weight_exchange_ranks(ctx.topology->placement()).empty();
}

namespace {

// The ZeRO-3 actor's sync: every actor rank sends what it holds of its shards, every separate
// rollout rank receives its slices (weights::HeldReshard), then the version from the group's rank
// 0 (the actor's first rank) by one broadcast with the deadline.
void sync_from_shards(PolicySync& sync, const WeightSyncSettings& s, const protocol::WorkerContext& ctx,
                      model::CausalLM& m, uint64_t& version,
                      const std::function<std::vector<engine::HeldSlice>()>& held) {
    const auto ranks = comm::weight_exchange_ranks(ctx.topology->placement());
    if (std::find(ranks.begin(), ranks.end(), ctx.world_rank) == ranks.end()) return;
    if (!sync.comm.valid()) {
        sync.comm = ctx.topology->control().create_group(ranks, kWeightExchangeGroupTag);
        sync.exchange = weights::make_region_exchange(s.backend, sync.comm, weight_sync_options(s));
        sync.from_shards = std::make_unique<weights::HeldReshard>(m.args(), *sync.exchange);
    }
    weights::HeldReshardStats st;
    if (held) {
        const weights::HeldSource src{held(), m.tp_layout().tp, m.tp_layout().rank};
        st = sync.from_shards->run(&src, nullptr, {});
    } else {
        st = sync.from_shards->run(nullptr, &m, m.tp_layout());
    }
    sync.exchange->comm().bcast(&version, sizeof(version), 0,
                                comm::Deadline::after_seconds(sync.exchange->options().timeout_s));
    if (st.planned && sync.comm.rank() == 0) {
        const auto& p = ctx.topology->placement();
        RLPT_LOG_INFO("weight sync from the ZeRO-3 shards: {} actor ranks (tp {}) -> {} rollout ranks (tp {}), no full "
                      "model gathered; this rank sent {:.3f} MB in {:.3f} s",
                      p.at("actor").world_ranks.size(), p.at("actor").mp_size,
                      ranks.size() - p.at("actor").world_ranks.size(), p.at("rollout").mp_size, st.sent_bytes / 1e6,
                      st.seconds);
    }
}

}  // namespace

void sync_policy_weights(PolicySync& sync, const WeightSyncSettings& s, const protocol::WorkerContext& ctx,
                         model::CausalLM& m, uint64_t& version,
                         const std::function<std::vector<engine::HeldSlice>()>& held) {
    if (weight_sync_from_shards(s, ctx)) {
        sync_from_shards(sync, s, ctx, m, version, held);
        return;
    }
    const comm::Placement& placement = ctx.topology->placement();
    const auto reshard_ranks = comm::weight_reshard_ranks(placement);
    const auto ranks = reshard_ranks.empty() ? weight_sync_ranks(placement, ctx.comms->mp_rank) : reshard_ranks;
    if (std::find(ranks.begin(), ranks.end(), ctx.world_rank) == ranks.end()) return;
    if (!sync.comm.valid()) {
        const weights::WeightSyncOptions opts = weight_sync_options(s);
        if (reshard_ranks.empty()) {
            sync.comm = ctx.topology->control().create_group(ranks, kWeightSyncGroupTag + ctx.comms->mp_rank);
            sync.broadcast = weights::make_weight_sync(s.backend, sync.comm, opts);
        } else {
            sync.comm = ctx.topology->control().create_group(ranks, kWeightReshardGroupTag);
            sync.reshard = weights::make_weight_reshard(s.backend, sync.comm, opts);
            const int tp_from = placement.at("actor").mp_size, tp_to = placement.at("rollout").mp_size;
            const int64_t n_blocks = (static_cast<int64_t>(ranks.size()) - tp_from) / tp_to;
            sync.plan = weights::reshard_plan(m, m.tp_layout(), m.args(), tp_from, tp_to, n_blocks, &sync.names);
        }
    }
    auto params = parameter_list(m);
    torch::NoGradGuard no_grad;
    if (sync.reshard) {
        sync.reshard->sync(sync.plan, sync.names, params, version);
    } else {
        sync.broadcast->sync(params, version);
    }
}

namespace {

// The full tensor of parameter `name` from the slices of every rank of a tp block.
torch::Tensor assemble_full(const std::string& name, const std::vector<torch::Tensor>& locals,
                            const model::ModelArgs& args) {
    const int64_t tp = static_cast<int64_t>(locals.size());
    const model::ShardSpec s0 = model::shard_spec(name, model::tp_layout(args, tp, 0));
    if (s0.dim < 0) return locals[0];
    auto full = torch::empty(model::full_shape(s0, locals[0].sizes().vec()), locals[0].options());
    for (int64_t r = 0; r < tp; ++r) {
        const auto spec = model::shard_spec(name, model::tp_layout(args, tp, r));
        if (spec.real() > 0)
            full.narrow(spec.dim, spec.start, spec.real())
                .copy_(locals[static_cast<size_t>(r)].narrow(spec.dim, 0, spec.real()));
    }
    return full;
}

// `like`-shaped slice of `full` in `layout` (padding rows zero).
torch::Tensor slice_for(const std::string& name, const torch::Tensor& full, const torch::Tensor& like,
                        const model::TpLayout& layout, torch::ScalarType dtype) {
    const auto spec = model::shard_spec(name, layout);
    if (spec.dim < 0) return full.to(dtype);
    auto out = torch::zeros(like.sizes(), torch::TensorOptions().dtype(dtype));
    if (spec.real() > 0) out.narrow(spec.dim, 0, spec.real()).copy_(full.narrow(spec.dim, spec.start, spec.real()));
    return out;
}

class ResliceState final : public engine::SavedState {
  public:
    ResliceState(std::vector<std::unique_ptr<engine::ShardedState>> old, size_t own, const ResliceTarget& m)
        : old_(std::move(old)), own_(own), m_(m) {}
    std::string where() const override {
        return fmt::format("{} (tensor parallelism {})", old_.front()->where(), old_.size());
    }
    std::string written_by() override { return old_[own_]->written_by(); }
    std::string tensor_parallel() override {
        const auto& l = m_.layout;
        return l.tp > 1 ? fmt::format("{} rank {}", l.tp, l.rank) : "";
    }
    const std::map<std::string, Tensor>& tensors() override {
        if (tensors_.empty()) {
            const auto mine = m_.module->named_parameters(/*recurse=*/true);
            for (const auto& [name, t] : old_.front()->tensors()) {
                Tensor out = t;
                if (const auto* p = mine.find(name)) out.shape = p->sizes().vec();
                tensors_[name] = out;
            }
        }
        return tensors_;
    }
    torch::Tensor read(Kind kind, const std::string& name, int64_t begin, int64_t end) override {
        if (cached_kind_ != kind || cached_name_ != name) {
            cached_ = torch::Tensor();
            std::vector<torch::Tensor> locals;
            for (auto& o : old_) {
                const auto& meta = o->tensors().at(name);
                int64_t n = 1;
                for (int64_t d : meta.shape) n *= d;
                locals.push_back(o->read(kind, name, 0, n).view(meta.shape));
            }
            const auto params = m_.module->named_parameters(/*recurse=*/true);
            const auto* like = params.find(name);
            RLPT_CHECK_KIND(IoError, like != nullptr, "checkpoint {}: tensor '{}' matches no parameter of the model",
                            where(), name);
            const auto dtype = kind == Kind::kParam ? like->scalar_type() : torch::kFloat32;
            cached_ = slice_for(name, assemble_full(name, locals, m_.args), *like, m_.layout, dtype).flatten();
            cached_kind_ = kind;
            cached_name_ = name;
        }
        return cached_.narrow(0, begin, end - begin);
    }
    const ckpt::H5Reader& own() override { return old_[own_]->own(); }
    std::string prefix() const override { return old_[own_]->prefix(); }

  private:
    std::vector<std::unique_ptr<engine::ShardedState>> old_;
    size_t own_;
    ResliceTarget m_;
    std::map<std::string, Tensor> tensors_;
    Kind cached_kind_ = Kind::kParam;
    std::string cached_name_;
    torch::Tensor cached_;
};

}  // namespace

ResliceTarget reslice_target(const model::CausalLM& m) { return {&m, m.tp_layout(), m.args()}; }
ResliceTarget reslice_target(const model::ValueModel& m) { return {&m, m.backbone().tp_layout(), m.args()}; }

std::unique_ptr<engine::SavedState> resliced_checkpoint(std::vector<std::unique_ptr<engine::ShardedState>> old_tp_ranks,
                                                        size_t own_tp, const ResliceTarget& target) {
    RLPT_CHECK(target.module != nullptr, "resliced_checkpoint: no model");
    return std::make_unique<ResliceState>(std::move(old_tp_ranks), own_tp, target);
}

}  // namespace rlpt::roles::detail
