// The rollout's served weights (rlpt/weights/served_weights.h).
#include "rlpt/weights/served_weights.h"

#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::weights {

ServedWeights ServedWeights::of_actor(std::shared_ptr<SharedPolicy> actor) {
    ServedWeights w;
    w.served_ = std::move(actor);
    return w;
}

ServedWeights ServedWeights::resharded(std::shared_ptr<SharedPolicy> actor, std::shared_ptr<model::CausalLM> model,
                                       std::string backend, const WeightSyncOptions& options) {
    ServedWeights w;
    release_parameter_storage(*model);  // no storage until a generation needs it
    w.served_ = std::make_shared<SharedPolicy>();
    w.served_->model = std::move(model);
    w.actor_ = std::move(actor);
    w.backend_ = std::move(backend);
    w.options_ = options;
    return w;
}

ServedWeights ServedWeights::own_copy(std::shared_ptr<model::CausalLM> model) {
    ServedWeights w;
    w.served_ = std::make_shared<SharedPolicy>();
    w.served_->model = std::move(model);
    w.own_copy_ = true;
    return w;
}

void ServedWeights::receive(const std::function<void(model::CausalLM& model, uint64_t& version)>& sync) {
    if (!own_copy_) return;
    uint64_t version = served_->version;
    sync(*served_->model, version);
    served_->version = version;
    ++receives_;
}

ServedWeights::Window::Window(ServedWeights& w, bool report) : weights_(w) {
    if (!w.actor_) return;
    model::CausalLM& m = *w.served_->model;
    if (!w.exchange_) {
        w.exchange_ = make_region_exchange(w.backend_, *w.actor_->comm, w.options_);
        w.resharder_ = std::make_unique<HeldReshard>(m.args(), *w.exchange_);
    }
    const auto& src_layout = w.actor_->model->tp_layout();
    const HeldSource src{w.actor_->held(), src_layout.tp, src_layout.rank};
    // What this rank holds whole of a rollout tensor is that memory (HeldReshard::run); the
    // rest lives in the actor's gradient buffers, unused until its next zero_grad(), which
    // the window's end makes possible again by releasing the copy: warm memory, nothing
    // allocated on top of the training state while it fits.
    const auto st = w.resharder_->run(&src, &m, m.tp_layout(),
                                      w.actor_->lend_scratch ? w.actor_->lend_scratch() : engine::ScratchMemory{});
    w.served_->version = w.actor_->version;
    filled_ = true;
    if (report && !w.reported_) {
        RLPT_LOG_INFO("rollout: hybrid engine resharded the actor (tp {}) into the rollout layout (tp {}): {:.3f} MB "
                      "of rollout parameters on this rank ({:.3f} MB of them the actor's own memory, {:.3f} MB "
                      "in its gradient buffers), {:.3f} MB received from other ranks, {:.3f} s; freed after each "
                      "generation",
                      src.tp, m.tp_layout().tp, st.dst_bytes / 1e6, st.aliased_bytes / 1e6, st.scratch_bytes / 1e6,
                      st.received_bytes / 1e6, st.seconds);
        w.reported_ = true;
    }
}

ServedWeights::Window::~Window() {
    if (filled_) release_parameter_storage(*weights_.served_->model);
}

model::CausalLM& ServedWeights::for_generation(torch::Dtype dtype) {
    model::CausalLM& served = *served_->model;
    if (served.dtype() == dtype) return served;
    const std::pair<uint64_t, uint64_t> now{served_->version, receives_};
    if (cast_ == nullptr) {
        cast_ = model::clone_causal_lm(served, dtype, served.device());
        RLPT_LOG_INFO("rollout: generating with {} weights (rollout.dtype), a copy of the {} policy",
                      model::dtype_name(dtype), model::dtype_name(served.dtype()));
    } else if (cast_from_ != now) {
        auto from = served.named_parameters(/*recurse=*/true);
        torch::NoGradGuard no_grad;
        for (auto& p : cast_->named_parameters(/*recurse=*/true)) p.value().copy_(from[p.key()]);
    }
    cast_from_ = now;
    return *cast_;
}

}  // namespace rlpt::weights
