#pragma once
// TrainEngine internals shared by train_engine.cpp (set-up, step) and engine_state.cpp
// (checkpointing). Private to rlpt_core.
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rlpt/comm/collectives.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/train_engine.h"
#include "rlpt/engine/param_memory.h"

namespace rlpt::model {
class Backbone;
}

namespace rlpt::engine::detail {

class ZeroHooks;

// One trainable parameter: where it lives in its dtype group's flat buffers.
struct ParamSlot {
    std::string name;
    torch::Tensor param;  // the module's tensor (a view into Group::flat_param after set-up)
    size_t group = 0;
    int64_t offset = 0;  // first element in the group's flat buffers
    int64_t numel = 0;
    std::vector<int64_t> shape;
    bool decay = false;       // weight decay applies: matrices and embeddings (dim >= 2)
    bool counted = true;      // counts in the gradient norm (false: another TP rank counts it)
    torch::Tensor grad_view;  // float32 view into Group::flat_grad, shaped like the parameter
};

// All parameters of one dtype (ZeRO-2/3 with a transformer Backbone: of one dtype and one
// unit, the decoder layer or the root), flattened in named_parameters() order.
struct Group {
    torch::ScalarType dtype = torch::kFloat32;
    int64_t unit = -1;         // -1: the root unit (everything outside the decoder layers, or the whole
                               // module without a Backbone); i >= 0: decoder layer i
    int64_t shard = 0;         // padded / dp_size (ZeRO-1/2/3); padded without ZeRO
    int64_t numel = 0;         // real elements
    int64_t padded = 0;        // buffer length: numel rounded up so that ZeRO-1 shards are equal
    torch::Tensor flat_param;  // [padded] dtype: the parameters' storage
    // [padded] float32 for every dtype: the .grad storage and the all-reduce buffer. bf16
    // parameters get float32 .grad views (autograd's in-place accumulation promotes), so
    // micro-batch gradients accumulate in fp32 as with FSDP mixed precision.
    torch::Tensor flat_grad;
    // The range [own_begin, own_end) this rank updates: [0, numel) without ZeRO, its shard
    // [r·padded/D, (r+1)·padded/D) with ZeRO-1. Optimizer state covers exactly this range.
    int64_t own_begin = 0, own_end = 0;
    torch::Tensor master;                              // fp32 [own_end - own_begin], bf16 groups only
    torch::Tensor exp_avg;                             // fp32 [own_end - own_begin]
    torch::Tensor exp_avg_sq;                          // fp32 [own_end - own_begin]
    std::vector<std::pair<int64_t, int64_t>> buckets;  // [begin, end) over [0, numel)
    // ZeRO-2/3: fp32 [shard], the sum over DP ranks of this rank's slice of the gradients since
    // zero_grad() (reduce-scattered from flat_grad), divided by dp_size in step().
    torch::Tensor grad_shard;
    // ZeRO-3: [shard] in dtype, this rank's slice of the parameters: the persistent copy.
    // flat_param's storage is then allocated only while the unit is gathered.
    torch::Tensor param_shard;
    bool params_full = true;        // flat_param holds the current full parameters
    bool gather_in_flight = false;  // a non-blocking all-gather into flat_param is running
    bool grad_allocated = true;     // flat_grad's storage is allocated (ZeRO-2/3 free it)
    bool fp32() const { return dtype == torch::kFloat32; }
};

struct EngineState {
    std::shared_ptr<torch::nn::Module> module;
    const comm::Communicator* dp = nullptr;  // null: a one-rank group (no MPI calls)
    int dp_rank = 0;
    int dp_size = 1;
    const comm::Communicator* tp = nullptr;  // the tensor-parallel block; null: none (tp = 1)
    int tp_rank = 0;
    int tp_size = 1;
    OptimOptions opts;
    torch::Device device = torch::kCPU;
    std::unique_ptr<comm::Collectives> transport;  // over dp: gradient all-reduce (ZeRO-0/1), broadcast
    // The ZeRO shard group (OptimOptions::shard_group_size): shards are padded / shard_size
    // elements and this rank owns shard number shard_rank. Without hybrid shard it is the DP
    // group (shard_comm == dp, shard_tx == transport).
    int shard_rank = 0;
    int shard_size = 1;
    const comm::Communicator* shard_comm = nullptr;  // null: a one-rank shard group
    comm::Collectives* shard_tx = nullptr;           // all-gathers and reduce-scatters
    // Hybrid shard only: the owned group communicators and transports. replica_tx all-reduces
    // a ZeRO-2/3 gradient slice over the ranks at the same position in every shard group.
    comm::Communicator own_shard_comm, replica_comm;
    std::unique_ptr<comm::Collectives> own_shard_tx, replica_tx;
    int64_t peak_bytes = 0;  // TrainEngine::peak_memory_bytes()
    std::vector<ParamSlot> slots;
    std::vector<Group> groups;
    std::string layout;  // parameter table + options: identical on every DP rank
    torch::Generator generator;
    int64_t global_step = 0;
    int64_t schedule_step = 0;
    int64_t applied_updates = 0;
    // ZeRO-2/3 on a module with a Backbone: its hooks (engine/zero_shard.cpp).
    model::Backbone* backbone = nullptr;
    std::shared_ptr<ZeroHooks> hooks;
    int hold_count = 0;  // active hold_full_parameters() handles
    // lend_gradient_memory(): the lease (expired once every storage placed in the buffers is
    // freed), and whether the buffers hold something else than gradients until zero_grad().
    std::weak_ptr<void> grad_lease;
    bool grads_lent = false;
    // ZeRO-2/3: every group's grad_shard is a view into this one buffer (what is lent).
    torch::Tensor grad_shards;

    bool shards_grads() const { return opts.zero_stage >= 2; }
    bool shards_params() const { return opts.zero_stage >= 3; }
    bool frozen() const { return opts.frozen; }
    // memory_bytes().total() now; raises peak_bytes.
    int64_t note_memory();

    // Every rank passes its local outcome; returns normally only when all ranks succeeded.
    // Otherwise a rank whose `local_error` is set rethrows it and the others throw `Kind`
    // naming the failing ranks. One 8-byte all-reduce when everybody succeeded (plus an
    // all-gather of the messages otherwise); nothing when the group has one rank.
    template <typename Kind>
    void agree(std::exception_ptr local_error, const std::string& what) const;
};

std::string group_name(const Group& g);

// ---- ZeRO-2/3 (engine/zero_shard.cpp) --------------------------------------------------------
// Group indices of a unit (-1: root), in order.
std::vector<size_t> unit_groups(const EngineState& st, int64_t unit);
// ZeRO-3: the unit's full parameters in flat_param (blocking; finishes a prefetch). Collective.
void gather_unit(EngineState& st, int64_t unit);
// ZeRO-3: starts the unit's all-gather without waiting (prefetch). Collective.
void start_gather_unit(EngineState& st, int64_t unit);
// Waits for every started gather.
void finish_gathers(EngineState& st);
// ZeRO-3: frees the unit's full parameters (local; nothing while a hold is active).
void release_unit(EngineState& st, int64_t unit);
// ZeRO-2/3: reduce-scatters group gi's full gradient into grad_shard (adds). Collective.
void reduce_group_grads(EngineState& st, size_t gi);
// ZeRO-2/3: allocates and zeroes a unit's full gradient buffer (no-op when allocated).
void prepare_unit_grads(EngineState& st, int64_t unit);
// The slot's .grad is its view into flat_grad again; a replaced gradient's values are copied in.
void attach_grad(ParamSlot& s, const Group& g);
// Installs the hooks on st.backbone (ZeRO-2/3) / removes them.
void install_hooks(EngineState& st);
void remove_hooks(EngineState& st);
// ZeRO-3 after the parameter slices changed (step, load): gathered units freed, or gathered
// again inside a hold. Collective when a hold is active.
void invalidate_gathered(EngineState& st);
// hold_full_parameters(): every unit gathered until the handle is dropped (ZeRO-3; else null).
std::shared_ptr<void> hold_full(EngineState& st);

}  // namespace rlpt::engine::detail

namespace rlpt::engine {
struct TrainEngine::Impl : detail::EngineState {};
}  // namespace rlpt::engine

// ---- template implementation ----------------------------------------------------------------
template <typename Kind>
void rlpt::engine::detail::EngineState::agree(std::exception_ptr local_error, const std::string& what) const {
    if (dp == nullptr) {
        if (local_error) std::rethrow_exception(local_error);
        return;
    }
    // Common case first: one small all-reduce says whether anybody failed (named after `what`
    // for the watchdog, which lists the ranks waiting in it).
    int64_t anybody_failed = local_error ? 1 : 0;
    MPI_Request req = MPI_REQUEST_NULL;
    RLPT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &anybody_failed, 1, MPI_INT64_T, MPI_MAX, dp->get(), &req));
    comm::wait_one(req, comm::Deadline::never(), what + " (error agreement)");
    if (anybody_failed == 0) return;
    std::string mine;
    if (local_error) {
        try {
            std::rethrow_exception(local_error);
        } catch (const Error& e) {
            mine = e.message();
        } catch (const std::exception& e) {
            mine = e.what();
        }
        if (mine.empty()) mine = "error";
    }
    const auto all = dp->allgather_strings(mine);
    std::string failed;
    for (size_t r = 0; r < all.size(); ++r) {
        if (all[r].empty()) continue;
        failed += fmt::format("{}DP rank {}: {}", failed.empty() ? "" : "; ", r, all[r]);
    }
    if (failed.empty()) return;
    if (local_error) std::rethrow_exception(local_error);
    throw Kind(fmt::format("{} failed on another rank: {}", what, failed));
}
