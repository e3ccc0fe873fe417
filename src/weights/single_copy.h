#pragma once
// Single-copy moves between processes of one host: one end copies straight between the other
// end's (possibly strided) region and its own (possibly strided) region; no staging on either
// end, one pass over the bytes. When the other end's region lies in a shared weight arena
// (rlpt/comm/shared_arena.h: the actor's parameters and shards, a separate rollout's
// parameters), the copying end maps that arena once (cached across exchanges) and copies with
// memcpy; otherwise with Linux cross-memory attach (CMA: process_vm_readv / process_vm_writev),
// which costs 2-5x the CPU per byte on short runs. Behind the "mpi" transport of WeightReshard
// and RegionExchange (rlpt/weights/weight_reshard.h); private to rlpt_weights. Torch-free.
//
// Which end copies (the "active" end, Move::push; the caller decides, the same on both ends:
// move_regions in weight_reshard.cpp): the end that can map the other's region when only one
// of the two lies in an arena (RegionTransfer::src_shared / dst_shared); else the end whose
// region alone is strided, since the kernel pins the remote process's pages run by run and the
// many short runs of a column slice cost less on the local side (measured on this VM: 6 KiB runs
// 3.6 GB/s remote against 4.4 GB/s local, 1.5 KiB runs 1.7 against 2.4 GB/s); otherwise the end
// with less to copy so far.
// Protocol of one exchange (every rank of the communicator calls start(), copy() and finish(),
// in that order; between copy() and finish() the rank may do other point-to-point work):
//   start:  the passive end of each move posts one message per peer with the layouts of its
//           regions (RegionLayout, in list order) and a receive for the peer's "done". With
//           `same_layouts` (every rank passes the same value: the caller agreed collectively that
//           every rank's moves are those of the previous exchange, same addresses, and that every
//           rank has entered this exchange) no layouts move: the active end reuses the ones it
//           received last time.
//   copy:   the active end waits for the peer's layouts and copies every region (through its
//           mapping of the peer's arena, else by CMA at most IOV_MAX contiguous runs per side
//           and call, partial copies continuing where they stopped), then sends "done" (with an
//           ok flag) to that peer.
//   finish: a rank waits for "done" from each peer that copies from or into its memory: until
//           then its regions must not change or be freed (a sender's) or be read (a
//           receiver's). A failed copy (CommError naming the peer and errno) throws here on both
//           ends, after every "done" was sent, so no peer waits for it. The active end then
//           unmaps each arena of a peer it copied with in this exchange that the exchange no
//           longer used (a freed or replaced arena's pages stay allocated while mapped).
// Mapping a peer's arena: open /proc/<pid>/fd/<fd> (the same permission as CMA), check the
// file's inode and size against the layout's, mmap it shared, read-write. A failure (logged once)
// leaves that arena to CMA; RLPT_SHARED_WEIGHTS=0 on the active end does the same for all.
// Every wait polls with the deadline (TimeoutError) and reports to the WaitObserver (poll_until's
// back-off: polling these waits with sched_yield and no sleep measured no better on the 6-rank
// 2-core bench, within its noise, README "Weight resharding").
// Which pairs: decided once, when the object is built (collective): ranks exchange pid, host
// identity (hostname and boot id) and the address of a random 64-bit word; every rank reads each
// same-host peer's word and the pair is used only where that read returned the peer's value
// (EPERM under ptrace restrictions or in a container, another pid namespace: MPI for that pair,
// logged once). RLPT_RESHARD_CMA=0 in a rank's environment keeps that rank out of every pair.

#include <sys/uio.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/comm/mpi.h"

namespace rlpt::weights::detail {

constexpr int kMaxRegionDims = 6;

// A strided region of this process's memory: `ndim` dimensions (sizes and strides in elements)
// of `element_size`-byte elements from `address`. ndim -1: a region that cannot be described
// (not host memory, or more than kMaxRegionDims dimensions left after merging): both ends fail.
struct RegionLayout {
    uint64_t address = 0;
    int64_t element_size = 0;
    int64_t ndim = 0;
    int64_t sizes[kMaxRegionDims] = {};
    int64_t strides[kMaxRegionDims] = {};
    // The shared arena (rlpt/comm/shared_arena.h) that holds the whole region, if any (id 0: none).
    uint64_t arena_id = 0, arena_inode = 0, arena_base = 0, arena_bytes = 0;
    int64_t arena_fd = -1;
    int64_t bytes() const;
};

// The region as a RegionLayout: size-1 dimensions dropped and neighbouring dimensions merged
// where they are contiguous with each other, so a column slice of a row-major matrix has two
// dimensions and a contiguous region one. Records the shared arena that holds it, if any.
RegionLayout describe_region(const void* address, int64_t element_size, const int64_t* sizes, const int64_t* strides,
                             int64_t ndim);
// The region's contiguous byte runs in row-major order (one per row of a column slice).
void append_runs(const RegionLayout& r, std::vector<iovec>& out);
// Copies `remote` (runs of process `pid`) into `local` (runs of this process), or `local` into
// `remote` when `write`, both in order and of the same total; "" on success, the reason otherwise.
std::string copy_runs(int pid, bool write, std::vector<iovec> local, std::vector<iovec> remote);

class SingleCopy {
  public:
    // Collective on `comm` (which must outlive the object): the probe described above. `enabled`
    // false keeps this rank out of every pair (the environment may also do so).
    SingleCopy(const comm::Communicator& comm, bool enabled, const comm::Deadline& deadline);
    ~SingleCopy();
    SingleCopy(const SingleCopy&) = delete;
    SingleCopy& operator=(const SingleCopy&) = delete;

    // Whether ranks `a` and `b` may copy from / into each other's memory (the same answer on every
    // rank; both directions probed).
    bool connects(int a, int b) const;
    int pairs() const { return n_pairs_; }  // rank pairs that do

    // One move of an exchange that involves this rank; `region` is this rank's end.
    struct Move {
        int src = 0, dst = 0;
        int64_t bytes = 0;
        bool push = false;  // the sender writes (else the receiver reads); the same on both ends
        RegionLayout region;
        bool active(int me) const { return (push ? src : dst) == me; }
    };
    // `moves`: this rank's moves (connects(src, dst) for each), in the order of the agreed list.
    void start(std::vector<Move> moves, bool same_layouts = false);
    void copy(const comm::Deadline& deadline);
    void finish(const comm::Deadline& deadline);
    // After a failure: leaves the buffers MPI may still use alive (never throws).
    void abandon() noexcept;
    // Moves of the last exchange this rank copied through a mapping of the peer's arena (memcpy,
    // no system call), and their bytes; the other single-copy moves it copied went by CMA.
    int64_t mapped_moves() const { return mapped_moves_; }
    int64_t mapped_bytes() const { return mapped_bytes_; }
    int64_t mapped_arenas() const { return static_cast<int64_t>(mappings_.size()); }  // cached now

  private:
    struct Mapping {
        char* data = nullptr;  // null: mapping failed, use CMA
        size_t bytes = 0;
        bool used = false;  // by the exchange in flight
    };
    // This rank's mapping of `there`'s arena (of rank `peer`), made on first use; null on failure.
    char* mapping(int peer, const RegionLayout& there);
    void unmap_unused();

    std::map<std::pair<int, uint64_t>, Mapping> mappings_;  // by (peer, arena id)
    int64_t mapped_moves_ = 0, mapped_bytes_ = 0;
    bool map_warned_ = false;
    const comm::Communicator& comm_;
    std::unique_ptr<uint64_t> probe_word_;
    std::vector<int64_t> pids_;
    std::vector<char> reads_;  // [a * n + b]: the probe of a read b's memory
    int n_pairs_ = 0;
    // The exchange in flight.
    std::vector<Move> moves_;
    std::vector<std::vector<RegionLayout>> out_layouts_, in_layouts_;  // per peer (in: kept for same_layouts)
    bool have_layouts_ = false;                                        // in_layouts_ hold the last completed exchange's
    std::vector<MPI_Request> out_requests_;                            // layouts sent, "done" sent
    std::vector<MPI_Request> layout_requests_;                         // per peer: its layouts
    std::vector<MPI_Request> done_requests_;                           // per active peer: its "done"
    std::vector<int64_t> done_status_, sent_status_;                   // per peer: 0 ok, 1 failed
    std::string error_;
};

}  // namespace rlpt::weights::detail
