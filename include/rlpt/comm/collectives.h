#pragma once
// The collectives of a group of ranks on flat tensors: the TrainEngine's gradient all-reduce,
// ZeRO all-gathers and reduce-scatters, tensor parallelism's all-reduces and all-gathers. One
// interface so the callers' code is the same for every implementation (Horovod's
// ops-behind-an-interface idea):
//   self        one rank: every collective is the identity (no MPI call at all);
//   mpi         CPU tensors over the group's MPI communicator (non-blocking MPI + back-off waits);
//   mpi-staged  any tensors (CUDA ones in practice) over MPI through host copies: each call copies
//               its tensors to host memory, runs the MPI collective there and copies the result
//               back (an async start/finish pair copies back in finish). For ranks that share a GPU
//               (NCCL cannot connect them) and builds without NCCL;
//   nccl        CUDA tensors over an NCCL communicator bootstrapped over the group (comm/
//               nccl_collectives.cpp, builds with NCCL only), on the legacy default stream.
// Which one a group gets: choose_collectives() below; device tensors follow the process's
// device-collectives setting (rlpt/comm/device.h, trainer.device_collectives).
//
// Every call is collective over the group and must be issued in the same order on every rank.
// Not thread-safe: one thread at a time, and only where MPI may be called (rlpt/comm/mpi.h: the
// MPI thread, or autograd's device thread while the MPI thread waits in backward()).

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/comm/mpi.h"

namespace rlpt::comm {

// Shards (and the padded flat buffers they come from) are multiples of this many elements.
inline constexpr int64_t kShardAlign = 64;

// Deadline of the NCCL bootstrap of the engine's and tensor parallelism's communicators. NCCL
// connects in seconds; a rank that never arrives should not hold the job for the whole
// trainer.call_timeout_s (whose watchdog still ends the wait sooner when it is shorter). The weight
// sync and reshard bound theirs by WeightSyncOptions::timeout_s instead (trainer.call_timeout_s).
inline constexpr double kNcclBootstrapTimeoutS = 300.0;

class Collectives {
  public:
    virtual ~Collectives() = default;
    // "self", "mpi", "mpi-staged" or "nccl".
    virtual const char* name() const = 0;
    // Starts an in-place SUM all-reduce of `t` (contiguous float32, at most kMaxMessageBytes).
    // The data is undefined until finish_allreduces() returns.
    virtual void start_allreduce_sum(const torch::Tensor& t) = 0;
    // Completes every all-reduce started since the last call. `what` names them in errors.
    virtual void finish_allreduces(const std::string& what) = 0;
    // In-place all-gather of equal shards: `t` (contiguous) holds n_ranks · shard elements and
    // rank r contributes elements [r · shard, (r + 1) · shard). `shard` is a multiple of
    // kShardAlign elements. Blocking: start_allgather_shards + finish_allgathers.
    void allgather_shards(const torch::Tensor& t, int64_t shard) {
        start_allgather_shards(t, shard);
        finish_allgathers("parameter all-gather");
    }
    // The same, non-blocking: `t` is undefined until finish_allgathers() returns (ZeRO-3
    // prefetch of the next layer).
    virtual void start_allgather_shards(const torch::Tensor& t, int64_t shard) = 0;
    virtual void finish_allgathers(const std::string& what) = 0;
    // Sum over ranks of `full` (contiguous float32, n_ranks · shard elements), rank r receiving
    // elements [r · shard, (r + 1) · shard) of the sum in `out` (contiguous float32 [shard],
    // overwritten). Blocking. ZeRO-2/3 gradients.
    virtual void reduce_scatter_sum(const torch::Tensor& full, const torch::Tensor& out) = 0;
    // In-place broadcast of a contiguous tensor from group rank `root`.
    virtual void broadcast(const torch::Tensor& t, int root) = 0;
    // All-gather of slices straight into their places (TensorParallel::allgather_into): `local`
    // (contiguous) is this rank's tensor, `out` (contiguous; same dtype, device and sizes as
    // `local` except along `dim`) receives rank r's local.narrow(dim, 0, counts[r]) at
    // out.narrow(dim, starts[r], counts[r]), r's own slice included. counts[r] may be 0; the
    // regions must not overlap; every rank passes the same starts and counts. Any dtype (bytes
    // are moved). Blocking. Returns false, having moved nothing, when this implementation cannot
    // place these slices directly (the caller then gathers every rank's whole `local` through
    // this call into a contiguous buffer and copies); always true when every slice is one
    // contiguous range of `out` (the product of the sizes before `dim` is 1). MPI: one
    // MPI_Allgatherv of contiguous slices, or an MPI_Allgather whose receive type is a strided
    // vector when the slices are equal and in rank order (starts[r] = r·counts[0]); NCCL:
    // ncclAllGather of equal contiguous slices in rank order, one grouped ncclBroadcast per
    // rank for other contiguous slices, false for strided ones.
    virtual bool allgather_slices(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                                  const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) = 0;
};

enum class CollectivesKind : uint8_t { kSelf, kMpi, kStagedMpi, kNccl };
const char* collectives_kind_name(CollectivesKind k);  // as Collectives::name()

// Pure: the collectives of a group of `n_ranks` ranks for tensors on `device`. One rank: self;
// CPU tensors: mpi; CUDA tensors: nccl when `nccl_for_device` (callers pass
// nccl_for_device_tensors()), else mpi-staged. Other devices: ValueError.
CollectivesKind choose_collectives(int n_ranks, const torch::Device& device, bool nccl_for_device);

// The collectives of `group` (null: a one-rank group) for tensors on `device`, as
// choose_collectives(group size, device, nccl_for_device_tensors()) picks them. `group` must
// outlive the result. `name` names the group in errors ("TrainEngine data-parallel group").
// Collective on `group` when it picks NCCL (bootstrap bounded by kNcclBootstrapTimeoutS).
std::unique_ptr<Collectives> make_collectives(const Communicator* group, const torch::Device& device,
                                              const std::string& name);
// The same with the kind given: kSelf ignores `group`; kMpi needs CPU tensors in every call;
// kStagedMpi takes tensors on any device (CPU ones are staged through host copies too, which is
// how its CPU tests exercise it); kNccl bootstraps on `device` (a CUDA device; its index, or the
// current device when it has none) before `bootstrap` and throws ValueError in builds without
// NCCL.
std::unique_ptr<Collectives> make_collectives(CollectivesKind kind, const Communicator* group,
                                              const torch::Device& device, const std::string& name,
                                              const Deadline& bootstrap);

}  // namespace rlpt::comm
