#pragma once
// Shard-to-shard weight sync between two tensor-parallel layouts (DESIGN §4b, issue 11): the
// actor's first model-parallel block sends, the rollout ranks on other ranks receive, and each
// rollout rank gets exactly the slices its layout needs, from the actor ranks that own them,
// point to point, in buckets. NeMo-RL's `nccl_reshard` does the same job.
//
// This module knows nothing about models: the caller gives the plan (which slice of which
// tensor goes from which rank to which rank; model::reshard_plan() computes it from the two
// layouts' split rules) and every rank's local tensors. It moves bytes and checks agreement.
//
// Who takes part. The sync communicator holds the senders first (ranks [0, n_senders): the
// actor block's mp ranks 0..tp-1, in order) and then the receivers. Build it with
// Communicator::create_group; make_weight_reshard() duplicates it.
//
// Protocol of one sync() (collective on the duplicated communicator):
//   1. Rank 0 broadcasts a header (magic, version, tensor count, plan bytes, plan hash). Every
//      rank hashes the plan it was given together with its tensors' names and dtypes, checks
//      that each piece it sends or receives lies inside its tensors, and all ranks agree (an
//      all-gather of ok flags). Any disagreement throws a CommError on every rank naming the
//      ranks and, on those ranks, the problem; no payload has moved, the object stays usable.
//   2. Pieces between a (sender, receiver) pair are packed, in plan order, into buckets of at
//      most `bucket_bytes` (a piece larger than a bucket is cut along its first dimension;
//      one row larger than a bucket travels alone). Pieces of at least `inplace_min_bytes`
//      travel as messages of their own, and each end moves such a message straight from /
//      into its tensor where that region is contiguous on the transport's device (no pack or
//      unpack copy, like WeightSync's in-place messages): row slices and whole tensors on both
//      ends, a row-parallel weight's column slice on the end holding exactly that slice.
//      Messages are ordered globally by (index within its pair, pair), so each round keeps
//      every pair busy, and every rank starts its own in that order with at most `n_buffers`
//      buffered ones (plus up to 64 in place) in flight. That order is the same on both ends of
//      every pair and makes the schedule deadlock-free for blocking (NCCL) and non-blocking
//      (MPI) sends alike: the oldest unfinished message always has both ends ready.
//   3. Receivers set `version` only after their last byte landed.
// Memory per rank: the local tensors plus n_buffers buckets (never a full model); up to 64
// direct messages more may be in flight (they need no buffer).
//
// Transport (chosen at the first sync, like WeightSync's "auto"): "mpi" - MPI_Isend/Irecv of
// host buckets; "nccl" - ncclSend/ncclRecv of device buckets on the tensors' CUDA device
// (builds with NCCL, every rank's tensors on CUDA); "auto" - nccl when possible, mpi otherwise.
// Packing and unpacking are torch copies (narrow + copy_), so tensors may be strided.
// last_stats() splits the time of a sync into its phases (plan, pack, unpack, wait).
//
// Failure model: as WeightSync (weight_sync.h): a transport error or timeout mid-transfer
// leaves the object refusing further syncs, and the job is expected to abort.
//
// A colocated rollout with another tp than the actor's (the hybrid engine's in-place half) does
// not come through here: both layouts live on the same ranks, so each rank fills its rollout
// slices from collectives the actor's layout already has (the ZeRO-3 unit all-gather, the tp
// block's all-gather) and local copies: model::reshard_colocated (rlpt/model/reshard_plan.h).
// Thread safety: none; one thread per rank.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/comm/mpi.h"
#include "rlpt/comm/weight_sync.h"

namespace rlpt::comm {

// One slice of one tensor moving from one sync rank to another. The slice is
// `length` entries along `dim` (every other dimension whole) starting at `src_offset` in the
// sender's local tensor and at `dst_offset` in the receiver's; `dim` -1 moves the whole tensor
// (offsets 0, length ignored). Both local tensors must have the same sizes in every other
// dimension.
struct ReshardPiece {
    int tensor = 0;
    int src = 0, dst = 0;  // sync-communicator ranks
    int64_t dim = -1;
    int64_t src_offset = 0, dst_offset = 0, length = 0;
};

struct ReshardPlan {
    int n_senders = 0;  // sync ranks [0, n_senders) send, the others receive
    // Per tensor: the shape of the whole (unsplit) tensor. A piece's region is this shape with
    // `dim` cut to `length`, so both ends of a pair compute the same bucket boundaries.
    std::vector<std::vector<int64_t>> full_shapes;
    std::vector<ReshardPiece> pieces;
    // One line per piece; identical on every rank that was given the same plan.
    std::string describe() const;
};

struct WeightReshardStats {
    uint64_t version = 0;
    int64_t n_pieces = 0;       // pieces this rank sent or received
    int64_t n_messages = 0;     // buckets this rank sent or received
    int64_t n_direct_messages = 0;  // of which went straight from / into tensor memory
    int64_t packed_bytes = 0;       // bytes this rank copied into send buckets
    int64_t unpacked_bytes = 0;     // bytes this rank copied out of received buckets
    // Where sync() spent its time on this rank (the rest: bucket bookkeeping): agreeing on the
    // plan and computing the buckets; packing; unpacking; waiting for messages to complete.
    double plan_seconds = 0.0, pack_seconds = 0.0, unpack_seconds = 0.0, wait_seconds = 0.0;
    int64_t bytes_sent = 0;     // payload bytes out of this rank
    int64_t bytes_received = 0; // payload bytes into this rank
    int64_t plan_bytes = 0;     // payload bytes of the whole plan (every rank)
    double seconds = 0.0;       // wall time of sync() on this rank
};

class WeightReshard {
  public:
    virtual ~WeightReshard() = default;
    WeightReshard(const WeightReshard&) = delete;
    WeightReshard& operator=(const WeightReshard&) = delete;

    // Collective on the sync communicator; every rank passes the same plan and the same names
    // (the tensors' local slices differ by rank). Senders: `tensors` are read and `version` is
    // published; receivers: the planned slices of `tensors` are overwritten in place (under
    // NoGradGuard, so leaf parameters are fine) and `version` is set on success. Throws
    // CommError on disagreement (every rank, nothing moved), TimeoutError past the deadline,
    // CommError on transport errors.
    void sync(const ReshardPlan& plan, const std::vector<std::string>& names,
              std::vector<torch::Tensor>& tensors, uint64_t& version);

    // "mpi", "nccl", or "auto" before the first sync of an "auto" object.
    virtual std::string backend_name() const = 0;
    const WeightReshardStats& last_stats() const { return stats_; }
    const WeightSyncOptions& options() const { return options_; }

  protected:
    explicit WeightReshard(WeightSyncOptions options);
    virtual void do_sync(const ReshardPlan& plan, const std::vector<std::string>& names,
                         std::vector<torch::Tensor>& tensors, uint64_t& version,
                         WeightReshardStats& stats) = 0;

  private:
    WeightSyncOptions options_;
    WeightReshardStats stats_;
};

// Collective on `comm` (every member passes the same backend and options): "auto", "mpi" or
// "nccl" (ConfigError when this build has no NCCL; at the first sync when a rank's tensors are
// not on CUDA). Options as WeightSync's.
std::unique_ptr<WeightReshard> make_weight_reshard(const std::string& backend, const Communicator& comm,
                                                   const WeightSyncOptions& options = {});

}  // namespace rlpt::comm
