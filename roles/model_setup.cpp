#include "model_setup.h"

#include <algorithm>

#include "rlpt/core/log.h"
#include "rlpt/model/reshard_plan.h"

namespace rlpt::roles::detail {

torch::Device device_for(const Config& c, const comm::Placement& p, int world_rank) {
    bool cuda = torch::cuda::is_available();
    if (c.model.device == "cuda" && !cuda) {
        throw ConfigError("model.device=cuda but this rank sees no CUDA device (or LibTorch was built without CUDA)");
    }
    if (c.model.device == "cpu" || !cuda) return torch::Device(torch::kCPU);
    int n = static_cast<int>(torch::cuda::device_count());
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(p.local_rank(world_rank) % n));
}

torch::Dtype dtype_for(const Config& c) { return c.model.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32; }

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

std::shared_ptr<model::CausalLM> build_policy(const Config& c, torch::Device device, int64_t vocab_size,
                                              std::shared_ptr<const model::TensorParallel> tp) {
    if (!c.model.path.empty()) {
        return model::load_pretrained(c.model.path, dtype_for(c), device, std::move(tp));
    }
    RLPT_CHECK_KIND(ConfigError, vocab_size > 0, "a built-in model needs the tokenizer's vocabulary size");
    const auto& b = c.model.builtin;
    model::ModelArgs a = model::builtin_model_args(b, vocab_size);
    a.torch_dtype = c.model.dtype;
    return model::make_random_causal_lm(a, static_cast<uint64_t>(b.init_seed), dtype_for(c), device, std::move(tp));
}

std::vector<torch::Tensor> parameter_list(torch::nn::Module& m) {
    std::vector<torch::Tensor> out;
    for (auto& p : m.named_parameters(/*recurse=*/true)) out.push_back(p.value());
    return out;
}

void sync_policy_weights(PolicySync& sync, const protocol::WorkerContext& ctx, model::CausalLM& m,
                         uint64_t& version) {
    const comm::Placement& placement = ctx.topology->placement();
    const auto reshard_ranks = comm::weight_reshard_ranks(placement);
    const auto ranks = reshard_ranks.empty() ? weight_sync_ranks(placement, ctx.comms->mp_rank) : reshard_ranks;
    if (std::find(ranks.begin(), ranks.end(), ctx.world_rank) == ranks.end()) return;
    if (!sync.comm.valid()) {
        const auto& c = ctx.config->rollout.weight_sync;
        comm::WeightSyncOptions opts;
        opts.bucket_bytes = static_cast<int64_t>(c.bucket_mb * 1024 * 1024);
        opts.timeout_s = ctx.config->trainer.call_timeout_s;
        if (reshard_ranks.empty()) {
            sync.comm = ctx.topology->control().create_group(ranks, kWeightSyncGroupTag + ctx.comms->mp_rank);
            sync.broadcast = comm::make_weight_sync(c.backend, sync.comm, opts);
        } else {
            sync.comm = ctx.topology->control().create_group(ranks, kWeightReshardGroupTag);
            sync.reshard = comm::make_weight_reshard(c.backend, sync.comm, opts);
            const int tp_from = placement.at("actor").mp_size, tp_to = placement.at("rollout").mp_size;
            const int64_t n_blocks = (static_cast<int64_t>(ranks.size()) - tp_from) / tp_to;
            sync.plan = model::reshard_plan(m, m.tp_layout(), m.args(), tp_from, tp_to, n_blocks, &sync.names);
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

}  // namespace rlpt::roles::detail
