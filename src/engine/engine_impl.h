#pragma once
// TrainEngine internals shared by train_engine.cpp (set-up, step) and engine_state.cpp
// (checkpointing). Private to rlpt_core.
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/transport.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"
#include "rlpt/engine/train_engine.h"

namespace rlpt::engine::detail {

// One trainable parameter: where it lives in its dtype group's flat buffers.
struct ParamSlot {
    std::string name;
    torch::Tensor param;         // the module's tensor (a view into Group::flat_param after set-up)
    size_t group = 0;
    int64_t offset = 0;          // first element in the group's flat buffers
    int64_t numel = 0;
    std::vector<int64_t> shape;
    bool decay = false;          // weight decay applies: matrices and embeddings (dim >= 2)
    bool counted = true;         // counts in the gradient norm (false: another TP rank counts it)
    torch::Tensor grad_view;     // float32 view into Group::flat_grad, shaped like the parameter
};

// All parameters of one dtype, flattened in named_parameters() order.
struct Group {
    torch::ScalarType dtype = torch::kFloat32;
    int64_t numel = 0;    // real elements
    int64_t padded = 0;   // buffer length: numel rounded up so that ZeRO-1 shards are equal
    torch::Tensor flat_param;  // [padded] dtype: the parameters' storage
    // [padded] float32 for every dtype: the .grad storage and the all-reduce buffer. bf16
    // parameters get float32 .grad views (autograd's in-place accumulation promotes), so
    // micro-batch gradients accumulate in fp32 as with FSDP mixed precision.
    torch::Tensor flat_grad;
    // The range [own_begin, own_end) this rank updates: [0, numel) without ZeRO, its shard
    // [r·padded/D, (r+1)·padded/D) with ZeRO-1. Optimizer state covers exactly this range.
    int64_t own_begin = 0, own_end = 0;
    torch::Tensor master;      // fp32 [own_end - own_begin], bf16 groups only
    torch::Tensor exp_avg;     // fp32 [own_end - own_begin]
    torch::Tensor exp_avg_sq;  // fp32 [own_end - own_begin]
    std::vector<std::pair<int64_t, int64_t>> buckets;  // [begin, end) over [0, numel)
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
    std::unique_ptr<Transport> transport;
    std::vector<ParamSlot> slots;
    std::vector<Group> groups;
    std::string layout;  // parameter table + options: identical on every DP rank
    torch::Generator generator;
    int64_t global_step = 0;
    int64_t schedule_step = 0;
    int64_t applied_updates = 0;

    // Every rank passes its local outcome; returns normally only when all ranks succeeded.
    // Otherwise a rank whose `local_error` is set rethrows it and the others throw `Kind`
    // naming the failing ranks. One 8-byte all-reduce when everybody succeeded (plus an
    // all-gather of the messages otherwise); nothing when the group has one rank.
    template <typename Kind>
    void agree(std::exception_ptr local_error, const std::string& what) const;
};

std::string group_name(const Group& g);

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
