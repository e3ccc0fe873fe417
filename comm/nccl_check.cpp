// NCCL error checks, RAII owners and the NCCL bootstrap (rlpt/comm/nccl_check.h). Built only with NCCL.
#include "rlpt/comm/nccl_check.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <fmt/format.h>

#include <cstring>

#include "rlpt/comm/bootstrap.h"
#include "rlpt/comm/nccl_env.h"

namespace rlpt::comm::detail {

void throw_nccl_error(NcclComm* comm, ncclResult_t result, const char* call, const char* file, int line) {
    std::string msg = fmt::format("NCCL error: {}", ncclGetErrorString(result));
    if (comm && *comm) {
        const std::string last = comm->last_error();
        if (!last.empty()) msg += ": " + last;
        comm->abort();
        msg += " (NCCL communicator aborted)";
    }
    throw CommError(msg, file, line, call);
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
    Backoff backoff(&what);
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

void NcclComm::enqueued(ncclResult_t r, const char* call, const Deadline& deadline) {
    if (r == ncclInProgress) {
        wait_ready(deadline, fmt::format("{} (enqueue)", call));
    } else if (r != ncclSuccess) {
        throw_nccl_error(this, r, call, __FILE__, __LINE__);
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

DeviceBuffer::DeviceBuffer(size_t bytes, cudaStream_t stream) : bytes_(bytes) {
    if (bytes == 0) return;
    try {
        ptr_ = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream);
    } catch (const c10::Error& e) {
        bytes_ = 0;
        throw CudaError(fmt::format("a device buffer of {} bytes from PyTorch's caching allocator: {}", bytes,
                                    e.what_without_backtrace()),
                        __FILE__, __LINE__, "CUDACachingAllocator::raw_alloc_with_stream");
    }
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) c10::cuda::CUDACachingAllocator::raw_delete(ptr_);
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
            throw CudaError(fmt::format("CUDA error {} while waiting for {}: {} (NCCL communicator aborted)",
                                        cudaGetErrorName(q), what, cudaGetErrorString(q)),
                            __FILE__, __LINE__, "cudaStreamQuery / cudaEventQuery");
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

void wait_stream(NcclComm& comm, cudaStream_t stream, const Deadline& deadline, const std::string& what) {
    wait_cuda(
        comm, [&] { return cudaStreamQuery(stream); }, deadline, what);
}

void wait_event(NcclComm& comm, cudaEvent_t event, const Deadline& deadline, const std::string& what) {
    wait_cuda(
        comm, [&] { return cudaEventQuery(event); }, deadline, what);
}

static_assert(sizeof(ncclUniqueId) == kBootstrapIdBytes, "rlpt/comm/bootstrap.h: kBootstrapIdBytes");

NcclComm nccl_bootstrap(const Communicator& comm, int device, const char* name, const Deadline& deadline,
                        int64_t* n_nodes) {
    std::string not_ready;
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
        not_ready = fmt::format("cudaSetDevice({}): {} ({})", device, cudaGetErrorString(e), cudaGetErrorName(e));
        cudaGetLastError();  // clear it: the error is reported through the rendezvous
    }
    const BootstrapResult agreed = bootstrap_rendezvous(
        comm, name, not_ready,
        [](int64_t nodes, BootstrapId& id) {
            apply_nccl_ifname_policy(static_cast<int>(nodes));  // before this process's first NCCL call
            ncclUniqueId unique{};
            const ncclResult_t r = ncclGetUniqueId(&unique);
            if (r != ncclSuccess)
                return fmt::format("ncclGetUniqueId: {}: {}", ncclGetErrorString(r), ncclGetLastError(nullptr));
            std::memcpy(id.data(), &unique, sizeof(unique));
            return std::string();
        },
        deadline);
    if (comm.rank() != 0) apply_nccl_ifname_policy(static_cast<int>(agreed.n_nodes));
    if (n_nodes) *n_nodes = agreed.n_nodes;

    ncclUniqueId unique{};
    std::memcpy(&unique, agreed.id.data(), sizeof(unique));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // init and calls return at once; we poll against the deadline
    config.commName = name;
    ncclComm_t raw = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&raw, comm.size(), unique, comm.rank(), &config);
    NcclComm out(raw);
    if (r != ncclSuccess && r != ncclInProgress)
        throw_nccl_error(&out, r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    out.wait_ready(deadline, fmt::format("ncclCommInitRankConfig of {} (NCCL bootstrap)", name));
    return out;
}

}  // namespace rlpt::comm::detail
