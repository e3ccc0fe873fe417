// NCCL/CUDA error checks and RAII owners (comm/nccl_check.h). Built only with NCCL.
#include "nccl_check.h"

#include <fmt/format.h>

#include <cstdio>

#include "rlpt/comm/nccl_env.h"

namespace rlpt::comm::detail {

void throw_nccl_error(NcclComm* comm, ncclResult_t result, const char* call, const char* file,
                      int line) {
    std::string msg = fmt::format("NCCL error: {}", ncclGetErrorString(result));
    if (comm && *comm) {
        const std::string last = comm->last_error();
        if (!last.empty()) msg += ": " + last;
        comm->abort();
        msg += " (NCCL communicator aborted)";
    }
    throw CommError(msg, file, line, call);
}

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
    throw CudaError(fmt::format("CUDA error: {} ({})", cudaGetErrorString(err),
                                cudaGetErrorName(err)),
                    file, line, call);
}

// ---- NcclComm ---------------------------------------------------------------------------

NcclComm::~NcclComm() {
    if (!comm_) return;
    // Flush and release cleanly when healthy; a bounded wait, then abort.
    ncclResult_t state = ncclSuccess;
    bool healthy = ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclSuccess;
    if (healthy) {
        const ncclResult_t f = ncclCommFinalize(comm_);
        healthy = f == ncclSuccess || f == ncclInProgress;
    }
    if (healthy) {
        const Deadline d = Deadline::after_seconds(30.0);
        Backoff backoff;
        for (;;) {
            if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) {
                healthy = false;
                break;
            }
            if (state != ncclInProgress) {
                healthy = state == ncclSuccess;
                break;
            }
            if (d.expired()) {
                healthy = false;
                break;
            }
            backoff.pause();
        }
    }
    if (healthy) {
        ncclCommDestroy(comm_);
    } else {
        ncclCommAbort(comm_);
    }
    comm_ = nullptr;
}

NcclComm& NcclComm::operator=(NcclComm&& o) noexcept {
    if (this != &o) {
        NcclComm old(std::move(*this));
        comm_ = o.comm_;
        o.comm_ = nullptr;
    }
    return *this;
}

void NcclComm::abort() noexcept {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
}

std::string NcclComm::last_error() const {
    const char* s = comm_ ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
    return s ? std::string(s) : std::string();
}

void NcclComm::wait_ready(const Deadline& deadline, const std::string& what) {
    RLPT_ASSERT(comm_ != nullptr);
    Backoff backoff;
    for (;;) {
        ncclResult_t state = ncclSuccess;
        RLPT_NCCL_CHECK(this, ncclCommGetAsyncError(comm_, &state));
        if (state == ncclSuccess) return;
        if (state != ncclInProgress) throw_nccl_error(this, state, what.c_str(), __FILE__, __LINE__);
        if (deadline.expired()) {
            abort();
            RLPT_THROW(CommError,
                       "NCCL: {} did not finish before the deadline; communicator aborted. If "
                       "this is the first NCCL call of the job, NCCL's bootstrap interface is "
                       "the usual suspect: set NCCL_SOCKET_IFNAME to an interface the ranks "
                       "reach each other on",
                       what);
        }
        backoff.pause();
    }
}

// ---- CudaStream -------------------------------------------------------------------------

CudaStream CudaStream::create() {
    CudaStream s;
    RLPT_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
    return s;
}

CudaStream::~CudaStream() {
    if (stream_) cudaStreamDestroy(stream_);
}

CudaStream& CudaStream::operator=(CudaStream&& o) noexcept {
    if (this != &o) {
        CudaStream old(std::move(*this));
        stream_ = o.stream_;
        o.stream_ = nullptr;
    }
    return *this;
}

// ---- DeviceBuffer -----------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) RLPT_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        DeviceBuffer old(std::move(*this));
        ptr_ = o.ptr_;
        bytes_ = o.bytes_;
        o.ptr_ = nullptr;
        o.bytes_ = 0;
    }
    return *this;
}

// ---- waiting ----------------------------------------------------------------------------

namespace {
// Polls `query` (cudaStreamQuery / cudaEventQuery) and the communicator's async error.
template <typename Query>
void wait_cuda(NcclComm& comm, Query&& query, const Deadline& deadline, const std::string& what) {
    Backoff backoff(&what);  // reported to the WaitObserver: the watchdog may end this wait
    for (;;) {
        ncclResult_t state = ncclSuccess;
        RLPT_NCCL_CHECK(&comm, ncclCommGetAsyncError(comm.get(), &state));
        if (state != ncclSuccess && state != ncclInProgress) {
            throw_nccl_error(&comm, state, what.c_str(), __FILE__, __LINE__);
        }
        const cudaError_t q = query();
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) {
            comm.abort();
            throw_cuda_error(q, what.c_str(), __FILE__, __LINE__);
        }
        if (deadline.expired()) {
            comm.abort();
            RLPT_THROW(CommError,
                       "NCCL: timed out waiting for {} (stream still busy at the deadline); "
                       "communicator aborted",
                       what);
        }
        backoff.pause();
    }
}
}  // namespace

void wait_stream(NcclComm& comm, cudaStream_t stream, const Deadline& deadline,
                 const std::string& what) {
    wait_cuda(comm, [&] { return cudaStreamQuery(stream); }, deadline, what);
}

void wait_event(NcclComm& comm, cudaEvent_t event, const Deadline& deadline, const std::string& what) {
    wait_cuda(comm, [&] { return cudaEventQuery(event); }, deadline, what);
}

NcclComm nccl_bootstrap(const Communicator& comm, int device, const char* name, NcclBootstrapMessage& msg,
                        const Deadline& deadline, int64_t* n_nodes) {
    // Node count: one leader per shared-memory domain.
    Communicator node = comm.split_shared();
    int64_t nodes = node.rank() == 0 ? 1 : 0;
    comm.allreduce(&nodes, 1, MPI_INT64_T, MPI_SUM, deadline);
    apply_nccl_ifname_policy(static_cast<int>(nodes));
    if (n_nodes) *n_nodes = nodes;

    RLPT_CUDA_CHECK(cudaSetDevice(device));
    msg = NcclBootstrapMessage();
    if (comm.rank() == 0) {
        const ncclResult_t r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess ? 1 : 0;
        if (!msg.ok) {
            std::snprintf(msg.error, sizeof(msg.error), "ncclGetUniqueId: %s: %s", ncclGetErrorString(r),
                          ncclGetLastError(nullptr));
        }
    }
    comm.bcast(&msg, sizeof(msg), 0, deadline);
    RLPT_CHECK_KIND(CommError, msg.ok, "NCCL bootstrap failed on the sync root: {}", msg.error);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // init and calls return at once; we poll against the deadline
    config.commName = name;
    ncclComm_t raw = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&raw, comm.size(), msg.id, comm.rank(), &config);
    NcclComm out(raw);
    if (r != ncclSuccess && r != ncclInProgress) throw_nccl_error(&out, r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    out.wait_ready(deadline, "ncclCommInitRankConfig (NCCL bootstrap)");
    return out;
}

}  // namespace rlpt::comm::detail
