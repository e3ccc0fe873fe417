// NCCL transport of the TrainEngine (CUDA parameters). The whole file is compiled only in
// builds with NCCL (RLPT_HAVE_NCCL); other builds get make_nccl_transport() throwing a
// ValueError that says so.
//
// Streams: LibTorch's ops and rlpt's CUDA kernels run on the legacy default stream, so the
// collectives are enqueued there too: they are ordered after the backward that produced the
// gradients and before the optimizer that consumes them without any event plumbing. Waits
// poll cudaStreamQuery + ncclCommGetAsyncError with the usual back-off (never a blocking
// cudaStreamSynchronize that could hang forever on a dead peer); on an asynchronous error the
// communicator is aborted and a CommError thrown.
#include "engine/transport.h"

#include <exception>
#include "rlpt/build_config.h"
#include "rlpt/core/error.h"

#if RLPT_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace rlpt::engine::detail {

#if RLPT_HAVE_NCCL
namespace {

#define RLPT_ENGINE_CUDA_CHECK(call)                                                                \
    do {                                                                                           \
        cudaError_t rlpt_rc_ = (call);                                                             \
        if (rlpt_rc_ != cudaSuccess)                                                               \
            throw ::rlpt::CudaError(cudaGetErrorString(rlpt_rc_), __FILE__, __LINE__, #call);      \
    } while (0)

ncclDataType_t nccl_type(torch::ScalarType t) {
    switch (t) {
        case torch::kFloat32: return ncclFloat32;
        case torch::kBFloat16: return ncclBfloat16;
        case torch::kFloat16: return ncclFloat16;
        default: RLPT_THROW(ValueError, "engine NCCL transport: unsupported dtype {}", c10::toString(t));
    }
}

class NcclTransport final : public Transport {
  public:
    NcclTransport(const comm::Communicator& dp, int device) : device_(device) {
        RLPT_ENGINE_CUDA_CHECK(cudaSetDevice(device_));
        ncclUniqueId id{};
        if (dp.rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        dp.bcast(&id, sizeof(id), 0);
        check(ncclCommInitRank(&comm_, dp.size(), id, dp.rank()), "ncclCommInitRank");
    }
    ~NcclTransport() override {
        if (comm_ == nullptr) return;
        if (healthy_) {
            ncclCommDestroy(comm_);
        } else {
            ncclCommAbort(comm_);
        }
    }
    NcclTransport(const NcclTransport&) = delete;
    NcclTransport& operator=(const NcclTransport&) = delete;

    const char* name() const override { return "nccl"; }

    void start_allreduce_sum(const torch::Tensor& t) override {
        check_tensor(t, "all-reduce");
        check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()),
                            ncclSum, comm_, cudaStreamLegacy),
              "ncclAllReduce");
    }

    void finish_allreduces(const std::string& what) override { wait(what); }

    void start_allgather_shards(const torch::Tensor& t, int64_t shard) override {
        check_tensor(t, "all-gather");
        int rank = 0;
        check(ncclCommUserRank(comm_, &rank), "ncclCommUserRank");
        auto* base = static_cast<char*>(t.data_ptr());
        // In place: rank r's send buffer is its own shard of the receive buffer.
        check(ncclAllGather(base + static_cast<size_t>(rank * shard) * t.element_size(), base,
                            static_cast<size_t>(shard), nccl_type(t.scalar_type()), comm_, cudaStreamLegacy),
              "ncclAllGather");
    }

    void finish_allgathers(const std::string& what) override { wait(what); }

    void reduce_scatter_sum(const torch::Tensor& full, const torch::Tensor& out) override {
        check_tensor(full, "reduce-scatter");
        check_tensor(out, "reduce-scatter");
        check(ncclReduceScatter(full.data_ptr(), out.data_ptr(), static_cast<size_t>(out.numel()),
                                nccl_type(full.scalar_type()), ncclSum, comm_, cudaStreamLegacy),
              "ncclReduceScatter");
        wait("gradient reduce-scatter (ZeRO-2/3)");
    }

    void broadcast(const torch::Tensor& t, int root) override {
        check_tensor(t, "broadcast");
        check(ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), nccl_type(t.scalar_type()),
                            root, comm_, cudaStreamLegacy),
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
        int rank = 0;
        check(ncclCommUserRank(comm_, &rank), "ncclCommUserRank");
        const auto* send = static_cast<const char*>(local.data_ptr());
        auto* recv = static_cast<char*>(out.data_ptr());
        if (equal_slices_in_rank_order(starts, counts)) {
            check(ncclAllGather(send, recv, static_cast<size_t>(counts[0] * g.inner_bytes), ncclUint8, comm_,
                                cudaStreamLegacy),
                  "ncclAllGather");
        } else {
            // Uneven slices (no ncclAllGatherv): every rank broadcasts its own, in one group.
            check(ncclGroupStart(), "ncclGroupStart");
            for (size_t r = 0; r < counts.size(); ++r) {
                if (counts[r] == 0) continue;
                check(ncclBroadcast(send, recv + starts[r] * g.inner_bytes,
                                    static_cast<size_t>(counts[r] * g.inner_bytes), ncclUint8, static_cast<int>(r),
                                    comm_, cudaStreamLegacy),
                      "ncclBroadcast");
            }
            check(ncclGroupEnd(), "ncclGroupEnd");
        }
        wait("tensor-parallel all-gather");
        return true;
    }

  private:
    void check_tensor(const torch::Tensor& t, const char* op) const {
        RLPT_CHECK(t.defined() && t.is_cuda() && t.is_contiguous() && t.device().index() == device_,
                   "engine NCCL transport: {} needs a contiguous tensor on cuda:{}", op, device_);
    }
    void check(ncclResult_t rc, const char* call) {
        if (rc == ncclSuccess) return;
        healthy_ = false;
        std::string last = comm_ ? ncclGetLastError(comm_) : "";
        throw CommError(fmt::format("{} failed: {} {}", call, ncclGetErrorString(rc), last), __FILE__, __LINE__, call);
    }
    void wait(const std::string& what) {
        // No deadline of its own: the watchdog (comm::WaitObserver) ends a wait that outlives
        // the call it belongs to; the communicator is then left unhealthy (aborted, not freed).
        struct MarkUnhealthyOnThrow {
            bool& healthy;
            ~MarkUnhealthyOnThrow() {
                if (std::uncaught_exceptions() > 0) healthy = false;
            }
        } guard{healthy_};
        comm::poll_until(
            [&] {
                const cudaError_t q = cudaStreamQuery(cudaStreamLegacy);
                if (q == cudaSuccess) return true;
                if (q != cudaErrorNotReady) {
                    healthy_ = false;
                    throw CudaError(fmt::format("{}: {}", what, cudaGetErrorString(q)), __FILE__, __LINE__,
                                    "cudaStreamQuery");
                }
                ncclResult_t async = ncclSuccess;
                check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
                if (async != ncclSuccess) check(async, what.c_str());
                return false;
            },
            comm::Deadline::never(), what);
    }

    int device_ = 0;
    ncclComm_t comm_ = nullptr;
    bool healthy_ = true;
};

}  // namespace

bool nccl_transport_built() { return true; }

std::unique_ptr<Transport> make_nccl_transport(const comm::Communicator& dp, int device_index) {
    RLPT_CHECK(dp.valid(), "engine: the NCCL transport needs a valid communicator");
    return std::make_unique<NcclTransport>(dp, device_index);
}

#else

bool nccl_transport_built() { return false; }

std::unique_ptr<Transport> make_nccl_transport(const comm::Communicator&, int device_index) {
    RLPT_THROW(ValueError,
               "engine: parameters on cuda:{} need a build with NCCL (this rlpt was built without it); "
               "train on the CPU or rebuild with RLPT_WITH_NCCL=ON",
               device_index);
}

#endif

}  // namespace rlpt::engine::detail
