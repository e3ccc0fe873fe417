#pragma once
// The weights a rollout generates from and their version (DESIGN §4e), held by the rollout role
// from its kInit on, across weight syncs and generations. Where they come from is fixed at kInit:
//   the actor's     colocated with the actor at the same layout: the actor's model itself (same
//                   tensors) and the version the actor publishes; nothing moves.
//   resharded       colocated with an actor of another tensor-parallel size (the hybrid engine,
//                   DESIGN §4b): a model of the rollout's own layout whose storage exists only
//                   inside a generation window, filled for each window from what the actor's
//                   ranks hold (HeldReshard over a RegionExchange of the actor's ranks, made at
//                   the first window) and released after it; the version is the actor's at the fill.
//   an own copy     on ranks of its own: a model filled by the actor -> rollout weight sync
//                   (receive()), with the version the sync delivered.
// The model generation runs with may be a copy in another dtype (rollout.dtype): for_generation()
// keeps one, refreshed when the served weights changed since. Not thread-safe.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rlpt/comm/mpi.h"
#include "rlpt/engine/param_memory.h"
#include "rlpt/model/transformer.h"
#include "rlpt/weights/held_reshard.h"
#include "rlpt/weights/weight_reshard.h"
#include "rlpt/weights/weight_sync.h"

namespace rlpt::weights {

// What a colocated actor publishes to the roles beside it (the worker's shared registry): its
// model and the weight version, updated by the actor after each update.
struct SharedPolicy {
    std::shared_ptr<model::CausalLM> model;
    uint64_t version = 0;
    // What this rank holds of the actor now (TrainEngine::held_parameters: its ZeRO-3 shard or
    // its whole tp slice) and the actor's role communicator (every actor rank): what a colocated
    // rollout with another tensor-parallel size reshards from (HeldReshard).
    std::function<std::vector<engine::HeldSlice>()> held;
    // The actor's gradient buffers as scratch memory until its next zero_grad() (TrainEngine::
    // lend_gradient_memory): where that rollout places its copy for a generation window.
    std::function<engine::ScratchMemory()> lend_scratch;
    const comm::Communicator* comm = nullptr;
};

class ServedWeights {
  public:
    // The actor's model and version themselves.
    static ServedWeights of_actor(std::shared_ptr<SharedPolicy> actor);
    // `model` (the rollout's layout, its storage released here) filled from `actor` for each
    // window, over a RegionExchange with `backend` and `options` (make_region_exchange).
    static ServedWeights resharded(std::shared_ptr<SharedPolicy> actor, std::shared_ptr<model::CausalLM> model,
                                   std::string backend, const WeightSyncOptions& options);
    // `model`, filled by receive().
    static ServedWeights own_copy(std::shared_ptr<model::CausalLM> model);

    // The served model, in the rollout's layout (resharded: without storage outside a window).
    model::CausalLM& model() const { return *served_->model; }
    // The version of the weights the model holds (the actor's: as of the last window's fill).
    uint64_t version() const { return served_->version; }

    // An own copy: runs `sync` (the weight sync, which fills the model in place and sets the
    // version it delivered) and keeps that version. Otherwise returns at once: there is nothing
    // to receive (colocated: the actor's tensors, or the window's fill).
    void receive(const std::function<void(model::CausalLM& model, uint64_t& version)>& sync);

    // A generation window: for a resharded model, fills it from the actor on construction
    // (collective on the actor's role communicator; `report`: log the first fill) and frees its
    // storage on destruction; otherwise nothing. Use it around each generation.
    class Window {
      public:
        ~Window();
        Window(const Window&) = delete;
        Window& operator=(const Window&) = delete;

      private:
        friend class ServedWeights;
        Window(ServedWeights& weights, bool report);
        ServedWeights& weights_;
        bool filled_ = false;
    };
    Window window(bool report) { return Window(*this, report); }

    // The model to generate with in `dtype`: model() when that is its dtype, else a copy in
    // `dtype` made at the first call and refreshed from model() whenever the version or a
    // receive() happened since the last call.
    model::CausalLM& for_generation(torch::Dtype dtype);

  private:
    ServedWeights() = default;

    std::shared_ptr<SharedPolicy> served_;  // the model generation reads and its version
    bool own_copy_ = false;
    uint64_t receives_ = 0;  // receive() calls that synced
    // for_generation()'s copy in another dtype and what it was made from (version, receives_).
    std::shared_ptr<model::CausalLM> cast_;
    std::pair<uint64_t, uint64_t> cast_from_{0, 0};
    // Resharded: the actor and the exchange over its ranks (made at the first window).
    std::shared_ptr<SharedPolicy> actor_;
    std::string backend_;
    WeightSyncOptions options_;
    std::unique_ptr<RegionExchange> exchange_;
    std::unique_ptr<HeldReshard> resharder_;  // its transfer list kept across windows
    bool reported_ = false;
};

}  // namespace rlpt::weights
