#pragma once
// NCCL error checks, move-only RAII owners and the one NCCL bootstrap, for the NCCL transports:
// comm's collectives (comm/nccl_*.cpp) and the weight movement's (src/weights/nccl_*.cpp).
// Include it only from sources compiled in builds with NCCL (it needs the CUDA and NCCL headers);
// the names stay in comm::detail, out of the way of the roles.
//
// RLPT_NCCL_CHECK(owner, call): on a result other than ncclSuccess / ncclInProgress (the
//   latter is how a non-blocking communicator says "queued", see wait_ready()), aborts
//   `owner` (an NcclComm*, may be null) and throws CommError with ncclGetErrorString, the
//   communicator's ncclGetLastError text and the call text (Horovod NCCLContext::ErrorCheck).
// CUDA results: RLPT_CUDA_CHECK (rlpt/core/cuda_check.h, included here).

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "rlpt/comm/mpi.h"
#include "rlpt/core/cuda_check.h"
#include "rlpt/core/error.h"

namespace rlpt::comm::detail {

class NcclComm;
[[noreturn]] void throw_nccl_error(NcclComm* comm, ncclResult_t result, const char* call, const char* file, int line);

// Owns an ncclComm_t: ncclCommFinalize + ncclCommDestroy on destruction when healthy,
// ncclCommAbort after abort() or when finalizing fails.
class NcclComm {
  public:
    NcclComm() = default;
    explicit NcclComm(ncclComm_t c) : comm_(c) {}
    ~NcclComm();
    NcclComm(NcclComm&& o) noexcept : comm_(o.comm_) { o.comm_ = nullptr; }
    NcclComm& operator=(NcclComm&& o) noexcept;
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;

    ncclComm_t get() const { return comm_; }
    explicit operator bool() const { return comm_ != nullptr; }
    // ncclCommAbort (never throws): kernels are torn down, pending work is dropped.
    void abort() noexcept;
    // Last error text of this communicator ("" when none).
    std::string last_error() const;
    // Polls ncclCommGetAsyncError until the communicator is no longer ncclInProgress
    // (non-blocking init or a queued call). Aborts and throws CommError on an error or at
    // the deadline (`what` names the operation; the wait is reported to the WaitObserver).
    void wait_ready(const Deadline& deadline, const std::string& what);
    // After an NCCL call `call` on this communicator returned `r`: waits (wait_ready) when it
    // is ncclInProgress, aborts and throws CommError when it failed.
    void enqueued(ncclResult_t r, const char* call, const Deadline& deadline);

  private:
    ncclComm_t comm_ = nullptr;
};

// Owns a non-blocking CUDA stream.
class CudaStream {
  public:
    CudaStream() = default;
    static CudaStream create();
    ~CudaStream();
    CudaStream(CudaStream&& o) noexcept : stream_(o.stream_) { o.stream_ = nullptr; }
    CudaStream& operator=(CudaStream&& o) noexcept;
    CudaStream(const CudaStream&) = delete;
    CudaStream& operator=(const CudaStream&) = delete;
    cudaStream_t get() const { return stream_; }
    explicit operator bool() const { return stream_ != nullptr; }

  private:
    cudaStream_t stream_ = nullptr;
};

// Owns `bytes` of device memory on the current CUDA device, taken from PyTorch's caching
// allocator (raw_alloc_with_stream) for use on `stream`: a weight sync runs after the model and
// optimizer hold most of the device, and memory cudaMalloc'd beside the allocator is memory it
// cannot reuse or release (empty_cache), nor count in its statistics. The block is freed back to
// the allocator's pool for `stream`, so only work queued on `stream` may still use it when this
// is destroyed (the stream must outlive the buffer). Throws CudaError (naming the size) when the
// device has no room.
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    DeviceBuffer(size_t bytes, cudaStream_t stream);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
        o.ptr_ = nullptr;
        o.bytes_ = 0;
    }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    char* get() const { return static_cast<char*>(ptr_); }
    size_t size() const { return bytes_; }
    // Gives up ownership without freeing (for buffers a failed collective may still use).
    void leak() {
        ptr_ = nullptr;
        bytes_ = 0;
    }

  private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// Polls cudaStreamQuery(stream) and ncclCommGetAsyncError(comm) with back-off until the
// stream is idle (nccl-tests' testStreamSynchronize). On an asynchronous NCCL error, a CUDA
// error or at the deadline: aborts `comm` and throws CommError/CudaError naming `what`.
void wait_stream(NcclComm& comm, cudaStream_t stream, const Deadline& deadline, const std::string& what);
// The same for one recorded event.
void wait_event(NcclComm& comm, cudaEvent_t event, const Deadline& deadline, const std::string& what);

// The one NCCL bootstrap of rlpt: a non-blocking NCCL communicator over `comm` on CUDA `device`
// (collective on `comm`), called `name` in every message and in NCCL's own logs (`name` must
// outlive the communicator). Inside bootstrap_rendezvous (rlpt/comm/bootstrap.h): every rank
// reports whether cudaSetDevice(device) worked, so a rank that cannot take part is named on
// every rank; the root applies the interface policy (apply_nccl_ifname_policy, rlpt/comm/
// nccl_env.h) and creates the unique id; the others apply the policy when the id arrives, before
// their first NCCL call. Then ncclCommInitRankConfig (blocking = 0) polled against `deadline`.
// CommError / TimeoutError name the communicator and the rank(s) at fault. `n_nodes`
// (optional) receives the node count.
NcclComm nccl_bootstrap(const Communicator& comm, int device, const char* name, const Deadline& deadline,
                        int64_t* n_nodes = nullptr);

}  // namespace rlpt::comm::detail

#define RLPT_NCCL_CHECK(owner, call)                                                                   \
    do {                                                                                               \
        ncclResult_t rlpt_nccl_rc_ = (call);                                                           \
        if (rlpt_nccl_rc_ != ncclSuccess && rlpt_nccl_rc_ != ncclInProgress) {                         \
            ::rlpt::comm::detail::throw_nccl_error((owner), rlpt_nccl_rc_, #call, __FILE__, __LINE__); \
        }                                                                                              \
    } while (0)
