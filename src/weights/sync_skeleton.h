#pragma once
// The one weight sync of every transport (rlpt/weights/weight_sync.h): SyncSkeleton runs the
// protocol (header, layout agreement, the plan of messages, versions, statistics, the failure
// model) and walks the plan; a SyncTransport ("mpi": MPI_Ibcast on host memory,
// mpi_weight_sync.cpp; "nccl": ncclBroadcast on one CUDA stream, nccl_weight_sync.cpp) gives it
// the transfer steps. Private to rlpt_weights. The NCCL constructors exist only in builds with NCCL.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/build_config.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/weights/weight_sync.h"
#include "weight_sync_plan.h"

namespace rlpt::weights::detail {

// One sync's payload (step 3 of the protocol), as the skeleton hands it to the transport's
// begin(); valid until the transport's finish() returns or the sync throws.
struct Payload {
    const SyncPlan& plan;
    std::vector<torch::Tensor>& tensors;  // the caller's sources (root) or destinations
    const std::vector<int64_t>& nbytes;   // per tensor (Layout::nbytes)
    const std::vector<bool>& direct;      // per tensor: SyncTransport::direct
    const comm::Deadline& deadline;
    WeightSyncStats& stats;  // the transport counts buffer_allocations; the skeleton the rest
    bool root = false;       // rank 0 of the sync communicator: sends
};

// The transfer steps of one transport. Per sync the skeleton calls, on every rank:
//   refuse(tensors)   before the agreement (a local veto, made collective by it);
//   prepare(deadline) after the agreement (collective set-up, e.g. NCCL's bootstrap);
//   direct(t)         for every tensor (after prepare);
//   begin(payload);
//   then for every message of the plan, in plan order:
//     in place (Message::inplace and its tensor direct): post(m, that tensor's memory + offset, -1);
//     otherwise: slot = take_slot(); buffer = slot_buffer(slot, largest packed message);
//                pack(message, buffer) on the root; post(m, buffer, slot);
//   finish().
// post() starts message m's broadcast from the root into every rank's `data`; a receiver's
// message with a slot must be unpacked into the tensors (Piece by Piece) before its slot is handed
// out again, and every tensor must hold its bytes when finish() returns. Any step may throw
// (TimeoutError, CommError): the skeleton then calls abort() and never calls the steps again.
class SyncTransport {
  public:
    // Takes ownership of an already duplicated communicator (the sync communicator, root rank 0).
    explicit SyncTransport(comm::Communicator comm) : comm_(std::move(comm)) {}
    virtual ~SyncTransport() = default;
    SyncTransport(const SyncTransport&) = delete;
    SyncTransport& operator=(const SyncTransport&) = delete;

    const comm::Communicator& comm() const { return comm_; }
    // "mpi", "nccl": WeightSync::backend_name() and error messages.
    virtual const char* name() const = 0;
    // Why this rank cannot take part in a sync of `tensors` ("" when it can).
    virtual std::string refuse(const std::vector<torch::Tensor>& tensors) = 0;
    virtual void prepare(const comm::Deadline& deadline) = 0;
    // Whether `t` can be broadcast straight from / into its own memory on this rank.
    virtual bool direct(const torch::Tensor& t) const = 0;
    virtual void begin(const Payload& payload) = 0;
    // A free pack buffer (waiting for an earlier message to finish if needed).
    virtual int take_slot() = 0;
    // The memory of `slot`, at least `bytes` (grown, and counted in buffer_allocations, when smaller).
    virtual char* slot_buffer(int slot, int64_t bytes) = 0;
    // Root: copies the message's pieces from the tensors into `buffer`.
    virtual void pack(const Message& message, char* buffer) = 0;
    virtual void post(int message, char* data, int slot) = 0;
    virtual void finish() = 0;
    // After a failure mid-sync: tear down what may still be in flight (never throws).
    virtual void abort() noexcept = 0;
    // At destruction after a failure: give up the pack buffers without freeing them, since a
    // broadcast that failed half-way may still write into them.
    virtual void leak_buffers() noexcept = 0;

  private:
    comm::Communicator comm_;
};

// The WeightSync of one transport: describe_layout, root_header and agree_on_layout (steps 1-2),
// make_plan and the walk above (step 3), the version (step 4); after a failure past the
// agreement it refuses every later sync and, when destroyed, leaks the header and the
// transport's buffers (weight_sync.h's failure model).
class SyncSkeleton final : public WeightSync {
  public:
    SyncSkeleton(std::unique_ptr<SyncTransport> transport, const WeightSyncOptions& options);
    ~SyncSkeleton() override;
    std::string backend_name() const override { return transport_->name(); }

  protected:
    void do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors, uint64_t& version,
                 WeightSyncStats& stats) override;

  private:
    void walk(const SyncPlan& plan, std::vector<torch::Tensor>& tensors, const std::vector<int64_t>& nbytes,
              const comm::Deadline& deadline, WeightSyncStats& stats);
    void fail(const std::string& why) noexcept;

    std::unique_ptr<SyncTransport> transport_;
    std::unique_ptr<WireHeader> header_ = std::make_unique<WireHeader>();
    bool broken_ = false;
    std::string broken_reason_;
};

// The weight sync over each transport; each takes ownership of an already duplicated
// communicator. "mpi": options.n_buffers pack buffers in flight.
std::unique_ptr<WeightSync> make_mpi_weight_sync(comm::Communicator comm, const WeightSyncOptions& options);

#if RLPT_HAVE_NCCL
// Number of CUDA devices this process can use; 0 when there is no driver or no device.
int cuda_device_count();
// The NCCL communicator is created at the first sync (collective), on the CUDA device of that
// sync's tensors; one pack buffer (one stream orders everything).
std::unique_ptr<WeightSync> make_nccl_weight_sync(comm::Communicator comm, const WeightSyncOptions& options);
#endif

}  // namespace rlpt::weights::detail
