// The reference policy: the initial weights, frozen.
#include "rlpt/roles/reference.h"

#include "model_setup.h"
#include "role_common.h"
#include "train_common.h"

namespace rlpt::roles {
namespace {

using protocol::RoleWorker;
using protocol::WorkerContext;

class ReferenceWorker : public RoleWorker {
  public:
    std::shared_ptr<model::CausalLM> model;
};

Batch init(RoleWorker& w, WorkerContext& ctx, const Batch& in) {
    auto& r = static_cast<ReferenceWorker&>(w);
    const Config& c = *ctx.config;
    const auto device = detail::device_for(c, ctx.topology->placement(), ctx.world_rank);
    const auto args = protocol::decode_args<protocol::InitArgs>(in, "reference.init");
    r.model = detail::build_policy(c, device, args.vocab_size, detail::tensor_parallel(ctx, device));
    for (auto& p : r.model->parameters()) p.set_requires_grad(false);
    return Batch(0);
}

Batch compute_log_prob(RoleWorker& w, WorkerContext& ctx, const Batch& in) {
    auto& r = static_cast<ReferenceWorker&>(w);
    RLPT_CHECK_KIND(InternalError, r.model != nullptr, "reference used before kInit");
    torch::NoGradGuard no_grad;
    const double temperature =
        protocol::decode_args<ReferenceLogProbArgs>(in, "reference.compute_log_prob").temperature;
    return detail::forward_micro_batches(
        in, ctx.config->ref.log_prob_micro_batch_size_per_rank, {{"ref_log_prob"}}, [&](const engine::SequenceBatch& seq) {
            return std::vector<torch::Tensor>{engine::compute_log_probs(*r.model, seq, temperature, false).log_probs};
        });
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
            method(ReferenceMethod::kInit, "init", init).takes(protocol::args_schema<protocol::InitArgs>()),
            method(ReferenceMethod::kComputeLogProb, "compute_log_prob", compute_log_prob)
                .split_over_dp()
                .takes(tensors("input_ids", "attention_mask", "position_ids", "responses"))
                .takes(protocol::args_schema<ReferenceLogProbArgs>())
                .concat_outputs(tensors("ref_log_prob")),
        };
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
