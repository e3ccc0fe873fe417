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
#include <vector>

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
    // All-gather of slices straight into their places (TensorParallel::allgather_into): `local`
    // (contiguous) is this rank's tensor, `out` (contiguous; same dtype, device and sizes as
    // `local` except along `dim`) receives rank r's local.narrow(dim, 0, counts[r]) at
    // out.narrow(dim, starts[r], counts[r]), r's own slice included. counts[r] may be 0; the
    // regions must not overlap; every rank passes the same starts and counts. Any dtype (bytes
    // are moved). Blocking. Returns false, having moved nothing, when this transport cannot
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

// The shape of a slice gather: `out` as [outer, full, inner] along `dim`, inner in bytes.
struct SliceGeometry {
    int64_t outer = 1, full = 0, local = 0, inner_bytes = 0;
};
SliceGeometry slice_geometry(const torch::Tensor& local, const torch::Tensor& out, int64_t dim);
// True when counts are equal and starts[r] = r·counts[0] (ncclAllGather's / MPI_Allgather's
// placement).
bool equal_slices_in_rank_order(const std::vector<int64_t>& starts, const std::vector<int64_t>& counts);

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
