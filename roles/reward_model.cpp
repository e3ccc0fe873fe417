// The reward model: a value-head model whose output at the last real token is the score.
#include "rlpt/roles/reward_model.h"

#include "model_setup.h"
#include "role_common.h"
#include "train_common.h"

namespace rlpt::roles {
namespace {

using protocol::RoleWorker;
using protocol::WorkerContext;

class RewardModelWorker : public RoleWorker {
  public:
    RewardModelSettings settings;  // from kInit
    std::shared_ptr<model::ValueModel> model;
};

Batch init(RoleWorker& w, WorkerContext& ctx, const Batch&, const protocol::InitWith<RewardModelSettings>& args) {
    auto& r = static_cast<RewardModelWorker&>(w);
    r.settings = args.settings;
    const auto device = protocol::handler_device();
    r.model = model::load_value_model(r.settings.model_path, detail::dtype_for(r.settings.dtype), device,
                                      detail::tensor_parallel(ctx, device));
    for (auto& p : r.model->parameters()) p.set_requires_grad(false);
    return Batch(0);
}

Batch compute_score(RoleWorker& w, WorkerContext&, const Batch& in) {
    auto& r = static_cast<RewardModelWorker&>(w);
    RLPT_CHECK_KIND(InternalError, r.model != nullptr, "reward model used before kInit");
    torch::NoGradGuard no_grad;
    return detail::forward_micro_batches(in, r.settings.micro_batch_size_per_rank, {{"rm_scores", /*per_token=*/false}},
                                         [&](const Batch&, const engine::SequenceBatch& seq) {
                                             return std::vector<torch::Tensor>{
                                                 engine::compute_sequence_scores(*r.model, seq)};
                                         });
}

std::unique_ptr<RoleWorker> make_reward_model(WorkerContext&) { return std::make_unique<RewardModelWorker>(); }

}  // namespace

const protocol::RoleSpec& reward_model_spec() {
    static const protocol::RoleSpec spec = [] {
        using protocol::method;
        using protocol::tensors;
        protocol::RoleSpec s;
        s.name = "reward_model";
        s.method_count = static_cast<uint16_t>(RewardModelMethod::kCount);
        s.factory = make_reward_model;
        s.methods = {
            detail::ping_spec(),
            method<RewardModelMethod::kInit, init>("init").receives_settings(),
            method(RewardModelMethod::kComputeScore, "compute_score", compute_score)
                .split_over_dp()
                .takes(tensors("input_ids", "attention_mask", "position_ids", "responses"))
                .concat_outputs(tensors("rm_scores")),
        };
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
