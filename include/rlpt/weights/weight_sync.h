#pragma once
// Actor -> rollout weight sync (DESIGN.md §4): a bucketed broadcast of a list of parameter
// tensors from the root of a sync communicator to every other member.
//
// Who takes part. The sync communicator holds the actor's role-rank 0 as its root (rank 0)
// and the rollout ranks as the other members. Build it with Communicator::split on the
// world (or role) communicator; make_weight_sync() duplicates it, so weight-sync traffic
// never interleaves with other collectives on the caller's communicator.
//
// Colocated roles. When actor and rollout live in the same process and share the very same
// parameter tensors, there is nothing to send: do not build a WeightSync for them, just bump
// the rollout's weight version. This is the integrator's job, not this module's.
//
// Wire protocol of one sync() (all on the duplicated communicator):
//   1. The root broadcasts a fixed header: magic, version, tensor count, total bytes, a hash
//      of the layout (names when given, dtypes, shapes), bucket size and in-place threshold.
//   2. Every rank compares the header with its own layout and all ranks all-gather an ok
//      flag. If any rank disagrees (different count, shape, dtype, name, undefined tensor,
//      ...) the root broadcasts its full layout text and every rank throws a CommError that
//      names the offending ranks and, on those ranks, the first differing tensor. No payload
//      byte has moved yet, so the WeightSync stays usable.
//   3. The payload follows as a sequence of messages whose boundaries are a pure function of
//      the header (see SyncPlan in src/weights/weight_sync_plan.h), so every rank agrees on them:
//      - tensors of at least `inplace_min_bytes` go as their own messages (in pieces of at
//        most `bucket_bytes`), broadcast straight from/into the tensor's memory when that
//        memory is contiguous and on the backend's device (no pack copy), through a pack
//        buffer otherwise;
//      - smaller tensors are packed back to back into buckets of `bucket_bytes`.
//      Packing bucket i+1 overlaps with the broadcast of bucket i (n_buffers pack buffers,
//      preallocated on first use and reused by every later sync).
//   4. Receivers set `version` from the header only after every byte has landed.
// Every backend runs this one protocol (src/weights/sync_skeleton.h); a backend only supplies the
// transfer steps of step 3 (how a message is packed, broadcast and unpacked).
//
// Failure model. Layout mismatches are clean (step 2). A timeout or a transport error in
// steps 1-3 may leave requests in flight (and receivers with partly written weights);
// the WeightSync then refuses further syncs (CommError) and, on destruction, keeps the pack
// buffers alive rather than free memory a pending broadcast could still write. The job is
// expected to abort (STYLE §3.5).
//
// Thread safety: none; one thread per rank drives sync() (the MPI thread, rlpt/comm/mpi.h).

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/comm/device.h"
#include "rlpt/comm/mpi.h"

namespace rlpt::weights {

struct WeightSyncOptions {
    // Pack bucket size in bytes, and the largest single message. Measured on 441 MB of fp32
    // (tests/bench/bench_weight_sync.cpp, 2 cores, shared memory): with in-place sends
    // (below) every size from 1 to 256 MiB is within noise of the raw MPI_Bcast; when
    // everything is packed, 1 MiB buckets (cache-resident) reach ~0.57x raw against ~0.45x
    // for 4-256 MiB. 64 MiB keeps the message count low for NCCL and large models.
    int64_t bucket_bytes = int64_t(64) << 20;
    // Tensors at least this large are sent as their own messages and skip packing when the
    // local memory allows it (measured ~2x faster than packing: two memory copies fewer).
    // Set it above every tensor size to always pack.
    int64_t inplace_min_bytes = int64_t(1) << 20;
    // Pack buffers in flight (>= 1; MPI backend). 2 overlaps packing with one broadcast in
    // flight. The NCCL backend queues everything on one stream and needs a single buffer.
    int n_buffers = 2;
    // Deadline for one whole sync() (header wait included), in seconds; <= 0: never.
    double timeout_s = 600.0;
    // WeightReshard and RegionExchange only ("mpi" transport, host tensors): ranks on one host
    // read each other's regions with process_vm_readv, strided ends included, instead of MPI
    // messages and staging (rlpt/weights/weight_reshard.h). false: MPI messages for every pair.
    // RLPT_RESHARD_CMA=0 in a rank's environment turns it off for that rank as well. Not a
    // config key. Must be the same on every rank.
    bool single_copy = true;
};

// Per-sync measurements of the last sync() on this rank.
struct WeightSyncStats {
    uint64_t version = 0;
    int64_t n_tensors = 0;
    int64_t total_bytes = 0;
    int64_t n_messages = 0;          // payload messages (broadcasts)
    int64_t n_inplace_messages = 0;  // of which went straight from/into tensor memory
    int64_t packed_bytes = 0;        // bytes that went through a pack buffer on this rank
    int64_t buffer_allocations = 0;  // pack buffers (re)allocated by this sync (0 when reused)
    double seconds = 0.0;            // wall time of sync() on this rank
};

class WeightSync {
  public:
    virtual ~WeightSync() = default;
    WeightSync(const WeightSync&) = delete;
    WeightSync& operator=(const WeightSync&) = delete;

    // Collective on the sync communicator.
    // Root (rank 0): `tensors` are the sources (any strides, any device; unchanged) and
    //   `version` is the version to publish.
    // Others: `tensors` are the destinations, filled in place; they must already exist with
    //   the root's shapes and dtypes, in the root's order. Their device may differ from the
    //   root's. Fast path: contiguous tensors on the backend's device (CPU for "mpi", the
    //   communicator's CUDA device for "nccl"); anything else is staged and copied with
    //   Tensor::copy_ under NoGradGuard (so leaf parameters with requires_grad are fine).
    //   `version` is set from the root's header on success and left unchanged on failure.
    // Throws CommError on a layout mismatch (on every rank), TimeoutError past the deadline,
    // CommError on transport errors.
    void sync(std::vector<torch::Tensor>& tensors, uint64_t& version);
    // Same, with parameter names folded into the layout hash (and named in mismatch errors).
    // `names.size()` must equal `tensors.size()`; either all ranks pass names or none does.
    void sync(const std::vector<std::string>& names, std::vector<torch::Tensor>& tensors, uint64_t& version);

    // "mpi" or "nccl" (an "auto" sync reports the backend it resolved to, or "auto" before
    // its first sync).
    virtual std::string backend_name() const = 0;
    const WeightSyncStats& last_stats() const { return stats_; }
    const WeightSyncOptions& options() const { return options_; }

  protected:
    explicit WeightSync(WeightSyncOptions options);
    // Runs one sync (header, agreement, payload): the skeleton of every transport, or "auto"
    // handing over to the one it resolved to.
    virtual void do_sync(const std::vector<std::string>* names, std::vector<torch::Tensor>& tensors, uint64_t& version,
                         WeightSyncStats& stats) = 0;

  private:
    WeightSyncOptions options_;
    WeightSyncStats stats_;
};

// Builds a weight sync over a duplicate of `comm` (collective on `comm`; every member must
// pass the same backend and options). backend:
//   "mpi"  - MPI_Ibcast of host buffers; tensors on any device (staged through the CPU).
//   "nccl" - ncclBroadcast on device buffers; needs a build with NCCL, device collectives
//            NCCL (trainer.device_collectives, rlpt/comm/device.h) and a CUDA device on every
//            rank, otherwise ConfigError (on every rank) saying which is missing or conflicting.
//            The NCCL communicator is bootstrapped at the first sync, on the CUDA device of
//            the tensors (all tensors of one rank on one device), by nccl_bootstrap (the
//            interface policy of rlpt/comm/nccl_env.h, bounded by options.timeout_s).
//   "auto" - decided collectively at the first sync: "nccl" when weights_over_nccl() says so
//            (NCCL built, device collectives NCCL, every rank's tensors all on CUDA), "mpi"
//            otherwise.
// Anything else, or invalid options (bucket_bytes < 1 or > 1 GiB, n_buffers < 1) ->
// ConfigError.
std::unique_ptr<WeightSync> make_weight_sync(const std::string& backend, const comm::Communicator& comm,
                                             const WeightSyncOptions& options = {});

// ---- the backend of weights on CUDA devices (weight sync, WeightReshard, RegionExchange) ----

// Throws ConfigError (naming `what`, e.g. "weight_sync") when `backend` cannot be used: not one
// of auto, mpi, nccl; "nccl" in a build without NCCL (`nccl_built` false); "nccl" while device
// collectives are MPI (the two settings conflict: ranks that share a GPU cannot use NCCL). Pure.
void check_weight_backend(const std::string& backend, bool nccl_built, comm::DeviceCollectives collectives,
                          const char* what);
// For a backend that passed check_weight_backend: whether NCCL moves the weights. "nccl": yes;
// "mpi": no; "auto": when NCCL is built, device collectives are NCCL and `all_cuda` (every rank's
// tensors are all on CUDA; the callers agree on it collectively). Pure.
bool weights_over_nccl(const std::string& backend, bool nccl_built, comm::DeviceCollectives collectives, bool all_cuda);

// 64-bit FNV-1a over the tensors' bytes in order, mixed with each tensor's byte count (so
// [ab][c] and [a][bc] differ) and processed a 64-bit little-endian word at a time (tail
// bytes one by one). Non-contiguous tensors hash their logical (row-major) bytes; device
// tensors are copied to the CPU. Undefined tensors hash as zero bytes. Local, not
// collective: compare the root's and the receivers' values to prove a sync was exact.
uint64_t weights_checksum(const std::vector<torch::Tensor>& tensors);

}  // namespace rlpt::weights
