#pragma once
// Point-to-point byte movers behind WeightReshard and RegionExchange (rlpt/weights/weight_reshard.h).
// Private to rlpt_weights; the NCCL one exists only in builds with NCCL (nccl_reshard.cpp).

#include <torch/torch.h>

#include <memory>

#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"

namespace rlpt::weights::detail {

class SingleCopy;  // single_copy.h

class P2pTransport {
  public:
    virtual ~P2pTransport() = default;
    virtual const char* name() const = 0;
    // Where bucket buffers live (CPU for MPI, the CUDA device for NCCL).
    virtual torch::Device device() const = 0;
    // Once per sync before any start(), on every rank of the sync communicator (collective:
    // NCCL bootstraps its communicator at the first call).
    virtual void begin(const comm::Deadline& deadline) = 0;
    // Starts sending (or receiving into) `bytes` bytes at `data` (memory on device(), written
    // by torch before the call, read by torch after finish_oldest() returned it) to / from sync
    // rank `peer`. Between two ranks, starts happen in the same order on both ends.
    virtual void start(bool send, void* data, int64_t bytes, int peer, const comm::Deadline& deadline) = 0;
    // Waits (polling, with the deadline; reported to the WaitObserver) until the oldest
    // started transfer has completed.
    virtual void finish_oldest(const comm::Deadline& deadline) = 0;
    // After a failure mid-transfer: tear down what may still be in flight (never throws).
    virtual void abandon() noexcept {}
    // The pairs where one end copies from / into the other's memory itself (process_vm_readv /
    // writev, strided regions included: no start() for their transfers); null when none. Valid
    // after begin().
    virtual SingleCopy* single_copy() { return nullptr; }
};

// `comm` must outlive the transport. `single_copy`: probe at the first begin() (collective) which
// same-host pairs may copy from / into each other's memory (single_copy.h); every rank passes the same.
std::unique_ptr<P2pTransport> make_mpi_p2p(const comm::Communicator& comm, bool single_copy);
#if RLPT_HAVE_NCCL
// CUDA buffers on `device`; the NCCL communicator over `comm` is created by the first begin().
std::unique_ptr<P2pTransport> make_nccl_p2p(const comm::Communicator& comm, int device);
#endif

}  // namespace rlpt::weights::detail
