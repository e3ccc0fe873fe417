#pragma once
// Host memory that other processes of this host can map: the long-lived weight buffers the
// weight transfer moves between ranks of one host (the actor's parameters and ZeRO-3 shards, a
// separate rollout's parameters). The single copy (src/weights/single_copy.h) maps a peer's arena and
// copies with memcpy, where it would otherwise copy with process_vm_readv / writev, which costs
// 2-5x the CPU per byte on short strided runs (README "Weight resharding"). Torch-free; the
// tensor helpers are rlpt/comm/shared_tensor.h.
//
// An arena is an anonymous memory file (memfd_create, close-on-exec) of `bytes`, mapped
// MAP_SHARED in this process for the arena's lifetime; its descriptor stays open so a peer can
// open it as /proc/<pid>/fd/<fd> (which needs the same permission as process_vm_readv: same user,
// no ptrace restriction) and map it. Each arena has a random 64-bit id and the file's inode
// number, so a peer never mistakes a later arena (a reused descriptor number or address) for an
// earlier one. Pages a peer has mapped stay allocated until the peer unmaps them, even after the
// arena is freed here: map only long-lived buffers (the single copy unmaps a peer's arena when an
// exchange with that peer no longer uses it, and all of them when it is destroyed).
//
// RLPT_SHARED_WEIGHTS=0 in a process's environment turns arenas off there (create returns null,
// callers keep ordinary memory; the single copy maps no peer's arena and uses process_vm_readv /
// writev). Thread-safe.

#include <cstddef>
#include <cstdint>
#include <memory>

namespace rlpt::comm {

class SharedArena {
  public:
    // A zero-filled arena of `bytes` (> 0), its pages touched here; null when arenas are off or
    // the memory file cannot be made (logged once per process; the caller falls back to
    // ordinary memory). `what` names the arena in messages.
    static std::shared_ptr<SharedArena> create(size_t bytes, const char* what);
    ~SharedArena();
    SharedArena(const SharedArena&) = delete;
    SharedArena& operator=(const SharedArena&) = delete;

    void* data() const { return data_; }
    size_t size() const { return bytes_; }

  private:
    SharedArena() = default;
    void* data_ = nullptr;
    size_t bytes_ = 0;
    int fd_ = -1;
};

// Where a live arena of this process lies, for a peer to map it (RegionLayout carries it).
struct ArenaRef {
    uint64_t id = 0;  // 0: not in an arena
    uint64_t inode = 0;
    int64_t fd = -1;
    uint64_t base = 0;  // its address in this process
    uint64_t bytes = 0;
};

// The live arena that holds [address, address + bytes), or an ArenaRef with id 0.
ArenaRef arena_of(const void* address, size_t bytes);

// Whether this process makes and maps arenas (RLPT_SHARED_WEIGHTS is not "0"; read at each call).
bool shared_arenas_enabled();

}  // namespace rlpt::comm
