#pragma once
// Shard-to-shard weight sync between two tensor-parallel layouts (DESIGN §4b, issue 11): the
// actor's first model-parallel block sends, the rollout ranks on other ranks receive, and each
// rollout rank gets exactly the slices its layout needs, from the actor ranks that own them,
// point to point, in buckets. NeMo-RL's `nccl_reshard` does the same job.
//
// This module knows nothing about models: the caller gives the plan (which slice of which
// tensor goes from which rank to which rank; reshard_plan() (rlpt/weights/reshard_plan.h) computes it from the two
// layouts' split rules) and every rank's local tensors. It moves bytes and checks agreement.
//
// Who takes part. The sync communicator holds the senders first (ranks [0, n_senders): the
// actor block's mp ranks 0..tp-1, in order) and then the receivers. Build it with
// Communicator::create_group; make_weight_reshard() duplicates it.
//
// Protocol of one sync() (collective on the duplicated communicator):
//   1. Agreement, one all-gather of a small card per rank: a hash of the plan, names and dtypes it
//      was given; an ok flag (each piece it sends or receives lies inside its tensors); its
//      bucket size and version (rank 0's are the sync's); whether its plan, names, dtypes and its
//      tensors' data pointers, sizes and strides are exactly (word for word, not hashed) those of
//      the sync that built its cached message list, and that sync's number. Any disagreement (a
//      rank not ok, a hash other than rank 0's) makes every rank take part in one broadcast of
//      rank 0's plan text and one all-gather of every rank's problem, and throws a CommError on
//      every rank naming each disagreeing rank and its problem; no payload has moved, the cache
//      is kept, the object stays usable.
//      The message list (step 2) is used again when every rank's card says "cached" with the same
//      sync number and rank 0's bucket size is the cached one (the same decision on every rank);
//      otherwise every rank computes it again (with an all-gather of every rank's local sizes) and
//      caches it. The cache holds the list with regions that borrow the tensors' memory
//      (torch::from_blob, no ownership): it keeps no tensor alive and is used only while every
//      rank's pointers, sizes and strides are unchanged.
//   2. The pieces move as RegionExchange transfers (below): each piece is cut along its first
//      dimension into messages of at most `bucket_bytes` (one row larger than that travels
//      alone). Between single-copy pairs (below) one end copies each message straight between
//      the sender's tensor and the receiver's, strided ends included. Otherwise every message goes
//      straight from / into the tensors on each end where its region is contiguous there (row
//      slices and whole tensors on both ends; a row-parallel weight's column slice on the end
//      holding exactly that slice; every rank's local sizes are all-gathered to know the other
//      ends), through a staging buffer otherwise. All messages of a round are started at once,
//      in plan order on every rank; a round ends where some rank's staging would pass one
//      bucket. Small pieces are not packed together (one message each; measured on the ~100M
//      model, the message count is not what costs).
//   3. Receivers set `version` only after their last byte landed; no rank returns before every
//      single-copy peer said it finished copying from / into its tensors.
// Memory per rank: the local tensors plus at most one bucket of staging (never a full model;
// none for single-copy pairs), kept between syncs like WeightSync's buffers, plus the cached
// message list (a few hundred bytes per message, no tensor memory).
// WeightSyncOptions::inplace_min_bytes and n_buffers are not used here.
//
// Transport (chosen at the first sync, like WeightSync's "auto"): "mpi" - host memory, by
// MPI_Isend/Irecv or single copy; "nccl" - ncclSend/ncclRecv of device memory on the tensors'
// CUDA device (builds with NCCL, device collectives NCCL, every rank's tensors on CUDA); "auto" -
// nccl when possible (weights_over_nccl, rlpt/weights/weight_sync.h), mpi otherwise. Packing and unpacking are torch copies (narrow + copy_), so tensors may be strided.
// Single copy ("mpi" only, src/weights/single_copy.h): at the first sync, when every rank's tensors are
// on the host and WeightSyncOptions::single_copy is set (default; RLPT_RESHARD_CMA=0 turns it
// off per rank), the ranks exchange pids and host identities and each reads a known word of
// every same-host peer with process_vm_readv (Linux cross-memory attach, as Open MPI's
// shared-memory transport does for large messages). Where that works both ways, the pair moves
// its messages that way: one end copies, the receiver by process_vm_readv or the sender by
// process_vm_writev - the end whose region alone is strided (short runs are cheaper locally),
// else the end that copies fewer bytes so far (computed from the agreed list, so idle senders
// share a receiver's work); the other end sends one small MPI message with its regions' layouts
// (address, sizes, strides, and the shared weight arena that holds them, if any), the copying
// end copies the contiguous runs of both (with memcpy through its mapping of the peer's arena,
// rlpt/comm/shared_arena.h; else by CMA, at most IOV_MAX per call and side) and sends "done";
// the other end waits for that "done" (with the deadline) before it returns. When the cached
// list is used, the layouts do not move again (the copying end keeps the ones of the sync that
// built the list; the all-gather of step 1 already told it that every rank entered this sync):
// one "done" per pair and sync is all the single-copy pairs exchange. Every other pair (another
// host, EPERM under ptrace restrictions or in a container) uses MPI messages, logged once. Local pieces (src == dst) are torch copies.
// last_stats() splits the time of a sync into its phases (plan, pack, unpack, wait; the
// single-copy reads count as wait).
//
// Failure model: as WeightSync (weight_sync.h): a transport error or timeout mid-transfer
// leaves the object refusing further syncs, and the job is expected to abort. Every wait has the
// deadline, the single-copy "done" included: a failed copy (CommError naming the peer and errno)
// is reported in the "done" and throws on both ends; a copying peer that dies leaves the other
// end a TimeoutError. A rank that gives up at its deadline may free memory a late peer still
// copies: that peer gets EFAULT or stale bytes and the object is unusable anyway.
//
// A colocated rollout with another tp than the actor's (the hybrid engine's in-place half) and a
// ZeRO-3 actor's sync to separate rollout ranks (every actor rank sends from its shards) go
// through RegionExchange below (same transports, same ordering rule): any rank may send and
// receive there, and the regions are arbitrary strided views (HeldReshard,
// rlpt/weights/held_reshard.h, computes them from the ZeRO shards and both tp layouts).
// Thread safety: none; one thread per rank.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/comm/mpi.h"
#include "rlpt/weights/weight_sync.h"

namespace rlpt::weights {

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
    int64_t n_pieces = 0;                // pieces this rank sent or received
    int64_t n_messages = 0;              // messages this rank sent or received
    int64_t n_direct_messages = 0;       // of which went straight from / into tensor memory on this end
    int64_t n_single_copy_messages = 0;  // of which one end copied from / into the other's memory
    // Of those, the ones this rank copied itself through its mapping of the peer's shared weight
    // arena (memcpy; rlpt/comm/shared_arena.h), and their bytes; the rest went by CMA.
    int64_t n_mapped_messages = 0, mapped_bytes = 0;
    int64_t packed_bytes = 0;    // bytes this rank staged before sending (strided source)
    int64_t unpacked_bytes = 0;  // bytes this rank copied out of its staging (strided destination)
    // Where sync() spent its time on this rank (the rest: bookkeeping): agreeing on the plan and
    // computing the messages (agree_seconds: the agreement alone, a part of plan_seconds);
    // packing; unpacking; waiting for messages to complete.
    double plan_seconds = 0.0, agree_seconds = 0.0, pack_seconds = 0.0, unpack_seconds = 0.0, wait_seconds = 0.0;
    bool reused_transfers = false;  // the message list of the previous sync was used again (step 2)
    int64_t bytes_sent = 0;         // payload bytes out of this rank
    int64_t bytes_received = 0;     // payload bytes into this rank
    int64_t plan_bytes = 0;         // payload bytes of the whole plan (every rank)
    double seconds = 0.0;           // wall time of sync() on this rank
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
    void sync(const ReshardPlan& plan, const std::vector<std::string>& names, std::vector<torch::Tensor>& tensors,
              uint64_t& version);

    // "mpi", "nccl", or "auto" before the first sync of an "auto" object.
    virtual std::string backend_name() const = 0;
    const WeightReshardStats& last_stats() const { return stats_; }
    const WeightSyncOptions& options() const { return options_; }

  protected:
    explicit WeightReshard(WeightSyncOptions options);
    virtual void do_sync(const ReshardPlan& plan, const std::vector<std::string>& names,
                         std::vector<torch::Tensor>& tensors, uint64_t& version, WeightReshardStats& stats) = 0;

  private:
    WeightSyncOptions options_;
    WeightReshardStats stats_;
};

// ---- Region exchange: any rank to any rank, straight between tensor views -------------------
//
// One transfer moves `bytes` bytes from a region of a tensor on rank `src` to a region of the
// same shape and dtype on rank `dst` (communicator ranks; src == dst is a local copy). Every rank
// passes the same list of transfers between two ranks (local copies are each rank's own: a rank
// may list its own that others do not; src, dst, bytes, contiguity and arena flags, in the same order: checked
// by one all-gather of a hash and an ok flag per rank, a CommError on every rank otherwise naming the ranks and
// their problems, nothing moved); the regions are given on their own rank only (undefined
// elsewhere). A region flagged contiguous must be one contiguous range of memory on the
// transport's device: it is sent from / received into in place. A strided one goes through a
// staging buffer on that end (a torch copy), except between single-copy pairs (WeightReshard
// above), where both regions are used in place whatever the flags say (the flags help choose
// which end copies: when exactly one end's region lies in a shared weight arena, the other end
// copies, through its mapping of that arena, with memcpy into or out of its own memory; a push
// into memory outside an arena would go by CMA, which also has to fault in the other process's
// fresh pages). Both ends are read / written in
// row-major order. Each transfer must fit kMaxMessageBytes.
//
// Schedule of run(): single-copy pairs first (no staging), then the other pairs: the list is cut into rounds so that no rank stages more than
// `bucket_bytes` at once (a transfer staging more goes alone); within a round every rank starts
// its sends and receives in list order (the same order on both ends of every pair, which keeps
// blocking NCCL point-to-point deadlock-free as in WeightReshard), does its local copies while
// they are in flight, then completes them in order and unpacks its staged receives; last, a rank
// waits until its single-copy peers are done with its regions. Memory per rank: the tensors
// plus at most one bucket of staging. Collective on the communicator.
struct RegionTransfer {
    int src = 0, dst = 0;
    int64_t bytes = 0;
    bool src_contiguous = true, dst_contiguous = true;
    // The region lies in a shared weight arena on its rank (rlpt/comm/shared_arena.h); a hint for
    // the choice of the copying end, the same on every rank like the rest of the list.
    bool src_shared = false, dst_shared = false;
    torch::Tensor src_region, dst_region;  // on this rank's end only
};

struct RegionExchangeStats {
    int64_t n_messages = 0;              // transfers this rank sent or received (local copies excluded)
    int64_t n_inplace_messages = 0;      // of which went straight from / into the tensors on this end
    int64_t n_single_copy_messages = 0;  // of which one end copied from / into the other's memory (both in place)
    // Of those, the ones this rank copied itself through its mapping of the peer's shared weight
    // arena (memcpy; rlpt/comm/shared_arena.h), and their bytes; the rest went by CMA.
    int64_t n_mapped_messages = 0, mapped_bytes = 0;
    int64_t n_rounds = 0;
    int64_t bytes_sent = 0, bytes_received = 0, bytes_local = 0;
    std::vector<int64_t> sent_to, received_from;   // per communicator rank
    int64_t packed_bytes = 0, unpacked_bytes = 0;  // bytes this rank staged (strided ends)
    int64_t staging_bytes = 0;                     // the size of this rank's staging buffer (freed after the call)
    double pack_seconds = 0.0, unpack_seconds = 0.0, local_seconds = 0.0, wait_seconds = 0.0, seconds = 0.0;
};

class RegionExchange {
  public:
    virtual ~RegionExchange() = default;
    RegionExchange(const RegionExchange&) = delete;
    RegionExchange& operator=(const RegionExchange&) = delete;
    // Collective. Throws CommError on disagreement (nothing moved; the object stays usable),
    // TimeoutError past options().timeout_s, CommError on transport errors (then unusable).
    virtual void run(const std::vector<RegionTransfer>& transfers) = 0;
    // The duplicated communicator the transfers' ranks refer to.
    virtual const comm::Communicator& comm() const = 0;
    virtual std::string backend_name() const = 0;
    const RegionExchangeStats& last_stats() const { return stats_; }
    const WeightSyncOptions& options() const { return options_; }

  protected:
    explicit RegionExchange(WeightSyncOptions options) : options_(options) {}
    RegionExchangeStats stats_;

  private:
    WeightSyncOptions options_;
};

// Collective on `comm`; backends and options as make_weight_reshard's (bucket_bytes bounds the
// staging; n_buffers and inplace_min_bytes are not used).
std::unique_ptr<RegionExchange> make_region_exchange(const std::string& backend, const comm::Communicator& comm,
                                                     const WeightSyncOptions& options = {});

// Collective on `comm` (every member passes the same backend and options): "auto", "mpi" or
// "nccl" (ConfigError when this build has no NCCL; at the first sync when a rank's tensors are
// not on CUDA). Options as WeightSync's.
std::unique_ptr<WeightReshard> make_weight_reshard(const std::string& backend, const comm::Communicator& comm,
                                                   const WeightSyncOptions& options = {});

}  // namespace rlpt::weights
