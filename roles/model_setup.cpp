#include "model_setup.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "rlpt/ckpt/h5_store.h"

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
            full.narrow(spec.dim, spec.start, spec.real()).copy_(locals[static_cast<size_t>(r)].narrow(spec.dim, 0, spec.real()));
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

std::string layout_value(const std::string& text, const std::string& key) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(key + " ", 0) == 0) return line.substr(key.size() + 1);
    }
    return {};
}

}  // namespace

bool convert_tp_checkpoint(const std::string& dir, const std::string& role, const model::CausalLM& m, int mp_rank,
                           const std::string& out_path) {
    namespace fs = std::filesystem;
    const std::string prefix = role + "/";
    const auto file = [&](int k) { return (fs::path(dir) / fmt::format("{}_rank{}.h5", role, k)).string(); };
    ckpt::H5Reader first(file(0));
    const std::string saved = first.read_blob(prefix + "engine/layout");
    const std::string tp_line = layout_value(saved, "tensor_parallel");
    const int tp_old = tp_line.empty() ? 1 : std::stoi(tp_line);
    const model::TpLayout& layout = m.tp_layout();
    if (tp_old == layout.tp) return false;
    const std::string zero = layout_value(saved, "zero_stage");
    RLPT_CHECK_KIND(IoError, zero != "1",
                    "checkpoint {} was written at tensor parallelism {} under ZeRO-1 (one DP rank's optimizer ranges "
                    "per file): it resumes only at tp {}; ZeRO-0/2/3 checkpoints reshard to another tp",
                    dir, tp_old, tp_old);
    std::vector<ckpt::H5Reader> old;
    for (int k = 0; k < tp_old; ++k) old.emplace_back(file(k));
    const model::ModelArgs& args = m.args();
    const auto dtype_name = [](torch::ScalarType dt) { return dt == torch::kFloat32 ? "float32" : "bfloat16"; };
    std::map<torch::ScalarType, std::vector<torch::Tensor>> opt_old[3];  // per kind: per old rank
    std::map<torch::ScalarType, std::vector<int64_t>> offset;            // per old rank
    std::map<torch::ScalarType, std::vector<torch::Tensor>> opt_new[3];
    const char* kinds[3] = {"exp_avg", "exp_avg_sq", "master"};
    ckpt::H5Writer w(out_path);
    std::vector<torch::ScalarType> order;
    torch::NoGradGuard no_grad;
    for (const auto& item : m.named_parameters(/*recurse=*/true)) {
        const std::string& name = item.key();
        const auto dt = item.value().scalar_type();
        if (offset.count(dt) == 0) {
            order.push_back(dt);
            offset[dt].assign(static_cast<size_t>(tp_old), 0);
            for (int k = 0; k < 3; ++k) {
                if (k == 2 && dt == torch::kFloat32) continue;
                for (auto& r : old) opt_old[k][dt].push_back(r.read_tensor(prefix + "optimizer/" + dtype_name(dt) + "/" + kinds[k]));
            }
        }
        std::vector<torch::Tensor> locals;
        for (auto& r : old) locals.push_back(r.read_tensor(prefix + "params/" + name));
        w.write_tensor(prefix + "params/" + name,
                       slice_for(name, assemble_full(name, locals, args), item.value(), layout, dt));
        for (int k = 0; k < 3; ++k) {
            if (k == 2 && dt == torch::kFloat32) continue;
            std::vector<torch::Tensor> segs;
            for (int j = 0; j < tp_old; ++j) {
                const auto& l = locals[static_cast<size_t>(j)];
                segs.push_back(opt_old[k][dt][static_cast<size_t>(j)].narrow(0, offset[dt][static_cast<size_t>(j)], l.numel()).view(l.sizes()));
            }
            opt_new[k][dt].push_back(
                slice_for(name, assemble_full(name, segs, args), item.value(), layout, torch::kFloat32).flatten());
        }
        for (int j = 0; j < tp_old; ++j) offset[dt][static_cast<size_t>(j)] += locals[static_cast<size_t>(j)].numel();
    }
    std::string text = fmt::format("rlpt-train-engine-state 1\nzero_stage {}\ndp_size {}\ndp_rank {}\n", zero,
                                   layout_value(saved, "dp_size"), layout_value(saved, "dp_rank"));
    for (auto dt : order) {
        const auto exp_avg = torch::cat(opt_new[0][dt]);
        const int64_t n = exp_avg.numel();
        text += fmt::format("group {} numel {} padded {} own 0 {}\n", dtype_name(dt), n, n, n);
        const std::string base = prefix + "optimizer/" + dtype_name(dt) + "/";
        w.write_tensor(base + "exp_avg", exp_avg);
        w.write_tensor(base + "exp_avg_sq", torch::cat(opt_new[1][dt]));
        if (dt != torch::kFloat32) w.write_tensor(base + "master", torch::cat(opt_new[2][dt]));
    }
    if (layout.tp > 1) text += fmt::format("tensor_parallel {} rank {}\n", layout.tp, layout.rank);
    w.write_blob(prefix + "engine/layout", text);
    const ckpt::H5Reader& mine = old[static_cast<size_t>(mp_rank % tp_old)];
    for (const char* t : {"global_step", "schedule_step", "applied_updates", "rng_state"})
        w.write_tensor(prefix + "engine/" + t, mine.read_tensor(prefix + "engine/" + t));
    if (mine.has_attr(prefix + "weight_version"))
        w.set_int_attr(prefix + "weight_version", mine.int_attr(prefix + "weight_version"));
    w.commit();
    return true;
}

}  // namespace rlpt::roles::detail
