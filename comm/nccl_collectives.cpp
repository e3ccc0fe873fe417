// NCCL collectives (rlpt/comm/collectives.h) for CUDA tensors. Built only with NCCL.
//
// Bootstrap: nccl_bootstrap (rlpt/comm/nccl_check.h), the one NCCL bootstrap of rlpt: every rank's
// readiness agreed over MPI, the interface policy before the first NCCL call, a non-blocking
// init polled against the deadline.
//
// Streams: LibTorch's ops and rlpt's CUDA kernels run on the legacy default stream, so the
// collectives are enqueued there too: they are ordered after the backward that produced the
// gradients and before the optimizer that consumes them without any event plumbing. Waits
// poll cudaStreamQuery + ncclCommGetAsyncError with the usual back-off (wait_stream; never a
// blocking cudaStreamSynchronize that could hang forever on a dead peer) and have no deadline of
// their own: the watchdog (comm::WaitObserver) ends a wait that outlives the call it belongs to.
// On any error, or an exception out of a wait, the communicator is aborted and stays unusable.
#include <exception>

#include "collectives_detail.h"
#include "rlpt/comm/nccl_check.h"

namespace rlpt::comm::detail {
namespace {

ncclDataType_t nccl_type(torch::ScalarType t) {
    switch (t) {
        case torch::kFloat32: return ncclFloat32;
        case torch::kBFloat16: return ncclBfloat16;
        case torch::kFloat16: return ncclFloat16;
        default: RLPT_THROW(ValueError, "NCCL collectives: unsupported dtype {}", c10::toString(t));
    }
}

class NcclCollectives final : public Collectives {
  public:
    NcclCollectives(const Communicator& group, int device, std::string name, const Deadline& bootstrap)
        : device_(device), name_(std::move(name)) {
        if (device_ < 0) RLPT_CUDA_CHECK(cudaGetDevice(&device_));
        nccl_ = nccl_bootstrap(group, device_, name_.c_str(), bootstrap);
        rank_ = group.rank();
    }

    const char* name() const override { return "nccl"; }

    void start_allreduce_sum(const torch::Tensor& t) override {
        check_tensor(t, "all-reduce");
        enqueue(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()),
                              ncclSum, live(), cudaStreamLegacy),
                "ncclAllReduce");
    }

    void finish_allreduces(const std::string& what) override { wait(what); }

    void start_allgather_shards(const torch::Tensor& t, int64_t shard) override {
        check_tensor(t, "all-gather");
        auto* base = static_cast<char*>(t.data_ptr());
        // In place: rank r's send buffer is its own shard of the receive buffer.
        enqueue(ncclAllGather(base + static_cast<size_t>(rank_ * shard) * t.element_size(), base,
                              static_cast<size_t>(shard), nccl_type(t.scalar_type()), live(), cudaStreamLegacy),
                "ncclAllGather");
    }

    void finish_allgathers(const std::string& what) override { wait(what); }

    void reduce_scatter_sum(const torch::Tensor& full, const torch::Tensor& out) override {
        check_tensor(full, "reduce-scatter");
        check_tensor(out, "reduce-scatter");
        enqueue(ncclReduceScatter(full.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                  nccl_type(full.scalar_type()), ncclSum, live(), cudaStreamLegacy),
                "ncclReduceScatter");
        wait("gradient reduce-scatter (ZeRO-2/3)");
    }

    void broadcast(const torch::Tensor& t, int root) override {
        check_tensor(t, "broadcast");
        enqueue(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()),
                              root, live(), cudaStreamLegacy),
                "ncclBroadcast");
        wait("parameter broadcast");
    }

    bool allgather_slices(const torch::Tensor& local, const torch::Tensor& out, int64_t dim,
                          const std::vector<int64_t>& starts, const std::vector<int64_t>& counts) override {
        check_tensor(local, "slice all-gather");
        check_tensor(out, "slice all-gather");
        const SliceGeometry g = slice_geometry(local, out, dim);
        if (g.outer != 1) return false;  // strided slices: no derived types in NCCL
        if (g.inner_bytes == 0) return true;
        const auto* send = static_cast<const char*>(local.data_ptr());
        auto* recv = static_cast<char*>(out.data_ptr());
        if (equal_slices_in_rank_order(starts, counts)) {
            enqueue(ncclAllGather(send, recv, static_cast<size_t>(counts[0] * g.inner_bytes), ncclUint8, live(),
                                  cudaStreamLegacy),
                    "ncclAllGather");
        } else {
            // Uneven slices (no ncclAllGatherv): every rank broadcasts its own, in one group.
            enqueue(ncclGroupStart(), "ncclGroupStart");
            for (size_t r = 0; r < counts.size(); ++r) {
                if (counts[r] == 0) continue;
                enqueue(ncclBroadcast(send, recv + starts[r] * g.inner_bytes,
                                      static_cast<size_t>(counts[r] * g.inner_bytes), ncclUint8, static_cast<int>(r),
                                      live(), cudaStreamLegacy),
                        "ncclBroadcast");
            }
            enqueue(ncclGroupEnd(), "ncclGroupEnd");
        }
        wait("tensor-parallel all-gather");
        return true;
    }

  private:
    void check_tensor(const torch::Tensor& t, const char* op) const {
        RLPT_CHECK(t.defined() && t.is_cuda() && t.is_contiguous() && t.device().index() == device_,
                   "NCCL collectives of {}: {} needs a contiguous tensor on cuda:{}", name_, op, device_);
    }
    // The communicator, checked before each call (the arguments' evaluation precedes the call).
    ncclComm_t live() const {
        RLPT_CHECK_KIND(CommError, nccl_,
                        "NCCL collectives of {}: unusable after an earlier failure aborted the communicator", name_);
        return nccl_.get();
    }
    void enqueue(ncclResult_t r, const char* call) { nccl_.enqueued(r, call, Deadline::never()); }
    void wait(const std::string& what) {
        try {
            wait_stream(nccl_, cudaStreamLegacy, Deadline::never(), what);
        } catch (...) {
            nccl_.abort();  // the watchdog may have ended the wait: the collective may still be running
            throw;
        }
    }

    int device_ = -1;
    std::string name_;
    int rank_ = 0;
    NcclComm nccl_;
};

}  // namespace

std::unique_ptr<Collectives> make_nccl_collectives(const Communicator& group, int device_index, const std::string& name,
                                                   const Deadline& bootstrap) {
    return std::make_unique<NcclCollectives>(group, device_index, name, bootstrap);
}

}  // namespace rlpt::comm::detail
