#pragma once
// The collectives the TrainEngine needs on its flat buffers, behind one small interface so the
// buffer code is the same for every transport (Horovod's ops-behind-an-interface idea):
//   SelfTransport  one rank: every collective is the identity (no MPI call at all);
//   MpiTransport   CPU tensors over the DP communicator (non-blocking MPI + back-off waits);
//   NcclTransport  CUDA tensors (engine/nccl_transport.cpp, builds with NCCL only).
// Every call is collective over the DP group and must be issued in the same order on every
// rank. Private to rlpt_core.
#include <torch/torch.h>

#include <memory>
#include <string>

#include "rlpt/comm/mpi.h"

namespace rlpt::engine::detail {

class Transport {
  public:
    virtual ~Transport() = default;
    virtual const char* name() const = 0;
    // Starts an in-place SUM all-reduce of `t` (contiguous float32, at most
    // comm::kMaxMessageBytes). The data is undefined until finish_allreduces() returns.
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
    // In-place broadcast of a contiguous tensor from DP rank `root`.
    virtual void broadcast(const torch::Tensor& t, int root) = 0;
};

// Shards (and the padded flat buffers they come from) are multiples of this many elements.
inline constexpr int64_t kShardAlign = 64;

std::unique_ptr<Transport> make_self_transport();
// `dp` must outlive the transport. CPU tensors only.
std::unique_ptr<Transport> make_mpi_transport(const comm::Communicator& dp);
// True when this build can move CUDA tensors (RLPT_HAVE_NCCL).
bool nccl_transport_built();
// CUDA tensors on `device_index`; bootstraps an NCCL communicator over `dp` (collective).
// ValueError in builds without NCCL.
std::unique_ptr<Transport> make_nccl_transport(const comm::Communicator& dp, int device_index);

}  // namespace rlpt::engine::detail
