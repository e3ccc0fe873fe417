#pragma once
// Internals of the weight sync (the skeleton, sync_skeleton.h, and the option check WeightReshard
// shares): layout description, the wire header and the layout agreement, and the message plan.
// Private to rlpt_weights.

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/comm/mpi.h"
#include "rlpt/core/fnv.h"
#include "rlpt/weights/weight_sync.h"

namespace rlpt::weights::detail {

// One rank's view of its tensor list.
struct Layout {
    std::vector<int64_t> nbytes;  // per tensor (0 for undefined tensors)
    std::string text;             // one line per tensor: "<index> <name> <dtype> [d0, d1]"
    uint64_t hash = 0;            // FNV-1a 64 of `text`
    int64_t total_bytes = 0;
    bool has_names = false;
    // A local problem that makes this rank unable to take part (undefined or sparse tensor,
    // names/tensors count mismatch); empty when fine. Reported through the agreement so the
    // failure is collective.
    std::string local_error;
};
Layout describe_layout(const std::vector<std::string>* names, const std::vector<torch::Tensor>& tensors);

// Fixed-size header broadcast by the root at the start of every sync.
struct WireHeader {
    uint64_t magic = 0;
    uint64_t version = 0;
    uint64_t n_tensors = 0;
    uint64_t total_bytes = 0;
    uint64_t layout_hash = 0;
    uint64_t bucket_bytes = 0;
    uint64_t inplace_min_bytes = 0;
    uint64_t has_names = 0;
};
constexpr uint64_t kWireMagic = 0x524c5054'5753594eULL;  // "RLPTWSYN"

// The header the root publishes for `layout` at `version` with its options.
WireHeader root_header(const Layout& layout, uint64_t version, const WeightSyncOptions& options);

// Steps 1-2 of the protocol (weight_sync.h), collective on `comm`. `header` is the broadcast
// buffer: filled by the root, overwritten on receivers. It must outlive a failed broadcast
// (keep it in heap memory the backend leaks when broken). Returns an empty string when all
// ranks agree, else the CommError message for this rank (every rank gets one; nothing is
// left in flight). `backend_error` lets a backend veto locally (e.g. tensors on two CUDA
// devices for NCCL), which fails the sync collectively too. Throws (TimeoutError,
// CommError) only on transport failures, which may leave requests in flight.
std::string agree_on_layout(const comm::Communicator& comm, WireHeader& header, const Layout& layout,
                            const std::string& backend_error, const comm::Deadline& deadline);

// A contiguous byte range of one tensor inside one message.
struct Piece {
    int tensor = 0;
    int64_t tensor_offset = 0;   // bytes into the tensor (row-major logical order)
    int64_t message_offset = 0;  // bytes into the message
    int64_t bytes = 0;
};

// One broadcast. `inplace` messages hold exactly one piece (a tensor or a piece of one) and
// may go straight from/into tensor memory; the others are packed buckets.
struct Message {
    bool inplace = false;
    int64_t bytes = 0;
    std::vector<Piece> pieces;
};

struct SyncPlan {
    std::vector<Message> messages;
    // Index of the last message carrying a piece of each tensor (-1 for empty tensors), so
    // a staged tensor can be finished (copied out / freed) as soon as its last piece lands.
    std::vector<int> last_message_of_tensor;
};

// Size of the pack buffers this rank needs: the largest message it cannot send or receive
// straight from/into tensor memory (`direct[t]`: tensor t is usable in place here). 0 when
// every message goes in place, so in-place-only syncs allocate no buffer at all.
int64_t pack_buffer_bytes(const SyncPlan& plan, const std::vector<bool>& direct);

// Pure function of the byte counts and the two sizes: identical on every rank.
SyncPlan make_plan(const std::vector<int64_t>& nbytes, int64_t bucket_bytes, int64_t inplace_min_bytes);

// 64-bit FNV-1a (rlpt/core/fnv.h) and its word-wise variant used by weights_checksum (see
// weight_sync.h).
using rlpt::fnv1a_bytes;
using rlpt::kFnvOffset;
using rlpt::kFnvPrime;
uint64_t fnv1a_words(uint64_t h, const void* data, int64_t bytes);

// Validates user options (ConfigError naming the field).
void check_options(const WeightSyncOptions& options);

}  // namespace rlpt::weights::detail
