// The critic: value predictions and their clipped-loss update.
#include "rlpt/roles/critic.h"

#include "model_setup.h"
#include "rlpt/algo/agg_loss.h"
#include "rlpt/algo/value_loss.h"
#include "rlpt/core/rng_streams.h"
#include "role_common.h"
#include "train_common.h"

namespace rlpt::roles {
namespace {

using protocol::RoleWorker;
using protocol::WorkerContext;

class CriticWorker : public RoleWorker {
  public:
    std::shared_ptr<model::ValueModel> model;
    std::unique_ptr<engine::TrainEngine> engine;
    CriticSettings settings;  // from kInit
};

CriticWorker& ready(RoleWorker& w) {
    auto& c = static_cast<CriticWorker&>(w);
    RLPT_CHECK_KIND(InternalError, c.engine != nullptr, "critic used before kInit");
    return c;
}

Batch init(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::InitWith<CriticSettings>& args) {
    auto& cw = static_cast<CriticWorker&>(w);
    cw.settings = args.settings;
    const CriticSettings& s = cw.settings;
    auto device = protocol::handler_device();
    auto dtype = detail::dtype_for(s.policy.dtype);
    auto tp = detail::tensor_parallel(ctx, device);
    if (!s.model_path.empty()) {
        cw.model = model::load_value_model(s.model_path, dtype, device, tp);
    } else if (!s.policy.path.empty()) {
        cw.model =
            model::value_model_from_policy_checkpoint(s.policy.path, dtype, device, model::ValueHeadInit::kZero, 0, tp);
    } else {
        auto policy = detail::build_policy(s.policy, device, args.run.vocab_size, tp);
        cw.model = model::value_model_from_policy(*policy, dtype, device, model::ValueHeadInit::kZero);
    }
    auto opts = detail::optim_options(s.optim, args.run.total_steps);
    opts.shard_group_size =
        comm::zero_shard_group_size(ctx.topology->placement(), "critic", s.optim.fsdp_size, "critic.optim.fsdp_size");
    cw.engine =
        std::make_unique<engine::TrainEngine>(cw.model, ctx.comms->dp, opts, streams::critic_engine_seed(s.seed),
                                              detail::engine_tp_info(ctx, *cw.model, cw.model->backbone().tp_layout()));
    return Batch(0);
}

Batch compute_values(RoleWorker& w, WorkerContext&, const Batch& in) {
    CriticWorker& cw = ready(w);
    torch::NoGradGuard no_grad;
    Batch out =
        detail::forward_micro_batches(in, cw.settings.forward_micro_batch_size_per_rank, {{"values"}},
                                      [&](const Batch&, const engine::SequenceBatch& seq) {
                                          return std::vector<torch::Tensor>{engine::compute_values(*cw.model, seq)};
                                      });
    cw.engine->release_parameters();  // ZeRO-3: the root unit gathered by the forwards
    return out;
}

Batch update(RoleWorker& w, WorkerContext& ctx, const Batch& in, const CriticUpdateArgs& args) {
    CriticWorker& cw = ready(w);
    const CriticSettings& c = cw.settings;
    const detail::PpoLoop loop = detail::make_ppo_loop("critic", args, c.ppo, "critic/vf_loss");
    Batch metrics(0);
    detail::ppo_update_loop(*cw.engine, ctx.comms->dp, ctx.dp_size(), in, loop, metrics,
                            [&](const Batch& mb, const algo::GlobalBatchInfo& info, int64_t) {
                                int64_t r = 0;
                                auto seq = detail::trimmed_sequences(mb, &r);
                                auto vpred = engine::compute_values(*cw.model, seq);
                                auto out = algo::compute_value_loss(vpred, detail::first_columns(mb.at("returns"), r),
                                                                    detail::first_columns(mb.at("values"), r),
                                                                    detail::first_columns(mb.at("response_mask"), r),
                                                                    c.cliprange_value, c.loss_agg_mode, info);
                                out.loss.backward();
                                for (const auto& [k, v] : out.metrics)
                                    if (k != "critic/vf_loss") metrics.add_metric(k, v);
                                return out.loss.item<double>();
                            });
    return metrics;
}

Batch save(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::DirArgs& args) {
    return detail::save_engine_checkpoint(*ready(w).engine, args.dir, "critic", ctx.comms->role_rank);
}

Batch load(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::DirArgs& args) {
    CriticWorker& cw = ready(w);
    const detail::ResliceTarget reslice = detail::reslice_target(*cw.model);
    detail::load_engine_checkpoint(*cw.engine, args.dir, "critic", ctx.comms->role_rank, ctx.comms->role, {}, &reslice);
    return Batch(0);
}

std::unique_ptr<RoleWorker> make_critic(WorkerContext&) { return std::make_unique<CriticWorker>(); }

}  // namespace

const protocol::RoleSpec& critic_spec() {
    static const protocol::RoleSpec spec = [] {
        using protocol::method;
        using protocol::tensors;
        const auto sequences = tensors("input_ids", "attention_mask", "position_ids", "responses");
        protocol::RoleSpec s;
        s.name = "critic";
        s.method_count = static_cast<uint16_t>(CriticMethod::kCount);
        s.factory = make_critic;
        s.methods = {
            detail::ping_spec(),
            method<CriticMethod::kInit, init>("init").receives_settings(),
            method(CriticMethod::kComputeValues, "compute_values", compute_values)
                .split_over_dp()
                .takes(sequences)
                .concat_outputs(tensors("values")),
            method<CriticMethod::kUpdate, update>("update")
                .split_over_dp()
                .unpadded()
                .takes(sequences)
                .takes(tensors("response_mask", "values", "returns"))
                .concat_outputs({}),
            method<CriticMethod::kSave, save>("save").every_output({protocol::string_field("file")}),
            method<CriticMethod::kLoad, load>("load"),
        };
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
