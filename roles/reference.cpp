// The reference policy: the initial weights, frozen. With ref.zero_stage 3 (by default when the
// actor runs ZeRO-3) its parameters are sharded over the reference's DP ranks by a frozen
// TrainEngine (no gradients, no optimizer state) and each decoder layer is gathered for its
// forward, as the actor's ZeRO-3 does.
#include "rlpt/roles/reference.h"

#include "model_setup.h"
#include "rlpt/core/log.h"
#include "role_common.h"
#include "train_common.h"

namespace rlpt::roles {
namespace {

using protocol::RoleWorker;
using protocol::WorkerContext;

class ReferenceWorker : public RoleWorker {
  public:
    ReferenceSettings settings;  // from kInit
    std::shared_ptr<model::CausalLM> model;
    std::unique_ptr<engine::TrainEngine> shards;  // ref.zero_stage 3: owns the parameter slices
};

Batch init(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::InitWith<ReferenceSettings>& args) {
    auto& r = static_cast<ReferenceWorker&>(w);
    r.settings = args.settings;
    const ReferenceSettings& s = r.settings;
    const auto device = protocol::handler_device();
    r.model = detail::build_policy(s.model, device, args.run.vocab_size, detail::tensor_parallel(ctx, device));
    for (auto& p : r.model->parameters()) p.set_requires_grad(false);
    if (s.zero_stage == 3) {
        engine::OptimOptions o;
        o.zero_stage = 3;
        o.frozen = true;
        o.shard_group_size =
            comm::zero_shard_group_size(ctx.topology->placement(), "reference", s.fsdp_size, "actor.optim.fsdp_size");
        r.shards = std::make_unique<engine::TrainEngine>(r.model, ctx.comms->dp, o, 0);
        if (ctx.comms->role_rank == 0)
            RLPT_LOG_INFO("reference: parameters sharded over {} rank(s) (ZeRO-3, frozen): {} bytes on this rank",
                          r.shards->shard_group_size(), r.shards->memory_bytes().total());
    }
    return Batch(0);
}

Batch compute_log_prob(RoleWorker& w, WorkerContext&, const Batch& in, const ReferenceLogProbArgs& args) {
    auto& r = static_cast<ReferenceWorker&>(w);
    RLPT_CHECK_KIND(InternalError, r.model != nullptr, "reference used before kInit");
    torch::NoGradGuard no_grad;
    const double temperature = args.temperature;
    Batch out =
        detail::forward_micro_batches(in, r.settings.log_prob_micro_batch_size_per_rank, {{"ref_log_prob"}},
                                      [&](const Batch&, const engine::SequenceBatch& seq) {
                                          return std::vector<torch::Tensor>{
                                              engine::compute_log_probs(*r.model, seq, temperature, false).log_probs};
                                      });
    if (r.shards) r.shards->release_parameters();  // the root unit gathered by the forwards
    return out;
}

std::unique_ptr<RoleWorker> make_reference(WorkerContext&) { return std::make_unique<ReferenceWorker>(); }

}  // namespace

const protocol::RoleSpec& reference_spec() {
    static const protocol::RoleSpec spec = [] {
        using protocol::method;
        using protocol::tensors;
        protocol::RoleSpec s;
        s.name = "reference";
        s.method_count = static_cast<uint16_t>(ReferenceMethod::kCount);
        s.factory = make_reference;
        s.methods = {
            detail::ping_spec(),
            method<ReferenceMethod::kInit, init>("init").receives_settings(),
            method<ReferenceMethod::kComputeLogProb, compute_log_prob>("compute_log_prob")
                .split_over_dp()
                .takes(tensors("input_ids", "attention_mask", "position_ids", "responses"))
                .concat_outputs(tensors("ref_log_prob")),
        };
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
