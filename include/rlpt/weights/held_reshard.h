#pragma once
// Resharding from what the ranks hold (DESIGN §4b, §4e): the hybrid engine and the ZeRO-3 weight
// sync. Implemented in src/weights/held_reshard.cpp; the bytes move by RegionExchange
// (rlpt/weights/weight_reshard.h), the split rules are rlpt/model/tensor_parallel.h's shard_spec,
// the held slices and lent memory come from the training engine (rlpt/engine/param_memory.h).
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rlpt/engine/param_memory.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/tensor_parallel.h"
#include "rlpt/weights/weight_reshard.h"

namespace rlpt::weights {

// ---- Resharding from what the ranks hold: the hybrid engine and the ZeRO-3 weight sync -------
//
// Fills a destination model (a rollout, in its own tensor-parallel layout) straight from what
// the ranks hold of a source model (the actor: TrainEngine::held_parameters, its ZeRO-3 shard,
// or its whole tp slice at other stages), point to point (RegionExchange). A rank of the
// exchange is a source (it holds slices), a destination (it has a destination module) or both:
//   colocated (the hybrid engine, DESIGN §4b): actor and rollout on the same ranks with another
//     tp (verl's rollout.tensor_model_parallel_size): every rank is both, before each
//     generation; release_parameter_storage() frees the rollout copy after it;
//   disaggregated ZeRO-3 sync (issue 11): every actor rank (each DP and tp rank: they own the
//     shards) is a source only, every rollout rank on ranks of its own a destination only.
// Each destination rank receives exactly the rows/columns of its slices it does not hold itself,
// each from one holder: itself when it holds them, else among the ranks holding the same bytes
// (replicated tensors, shared KV heads, DP replicas under hybrid shard) the one that has been
// given the fewest bytes to send so far (ties: the first after the destination), so the sends
// spread; a destination tensor the rank holds whole is that memory (run). Nothing is gathered:
// no ZeRO-3 unit, no full tensor. A piece lands in the destination tensor in place when it is
// contiguous there (row slices, whole tensors, a column slice into a rank that keeps exactly
// those columns) and is sent in place when it is contiguous in the holder's shard; the other
// ends are staged, at most one bucket at a time. Padding rows of a vocabulary slice are zeroed.
// Peak memory per rank: what it holds + its destination parameters not aliased to it (in lent
// scratch memory when the caller has some) + one bucket (no gathered copy on top). verl's sharding managers do the colocated job with FSDP's
// full state dict per layer.

// Host memory of one anonymous mmap of at least `bytes`, 2 MiB-aligned and advised as transparent
// huge pages, unmapped when the object goes (std::bad_alloc when mmap fails). What of the
// colocated rollout copy is neither aliased nor placed in lent scratch memory lives in one for a
// generation window (HeldReshard::run allocates it, the last of its parameters' storages to be
// freed unmaps it).
class HostBlock {
  public:
    explicit HostBlock(size_t bytes);
    ~HostBlock();
    HostBlock(const HostBlock&) = delete;
    HostBlock& operator=(const HostBlock&) = delete;
    char* data() const { return data_; }

  private:
    void* base_ = nullptr;
    size_t mapped_ = 0;
    char* data_ = nullptr;
};

// A source rank's part: what it holds of every parameter (named_parameters() order) of the
// source model split over `tp` ranks, as tp rank `tp_rank`.
struct HeldSource {
    std::vector<engine::HeldSlice> held;
    int64_t tp = 1, tp_rank = 0;
};

struct HeldReshardStats {
    int64_t dst_bytes = 0;       // bytes of the destination's parameters (this rank; 0: no destination)
    int64_t scratch_bytes = 0;   // of which were placed in `scratch` in this call (storage allocated here)
    int64_t aliased_bytes = 0;   // of which are this rank's held memory itself (nothing copied)
    int64_t copied_bytes = 0;    // bytes landed in them (+ aliased_bytes == dst_bytes minus vocabulary padding)
    int64_t received_bytes = 0;  // of which came from other ranks
    int64_t sent_bytes = 0;      // bytes this rank sent to others
    int64_t staged_bytes = 0;    // bytes this rank packed or unpacked (strided pieces)
    int64_t staging_bytes = 0;   // the largest staging buffer this rank held (<= one bucket)
    int64_t n_messages = 0;      // messages this rank sent or received
    bool planned = false;        // the transfer list was computed in this call (else reused)
    double wait_seconds = 0, copy_seconds = 0, seconds = 0;
};

// One reshard relation over one exchange, reused across calls (every generation window, every
// weight sync): the transfer list is computed at the first call and kept while every rank's
// layouts and held ranges stay the same (checked at each call by an all-gather of them, a few
// KB); later calls only rebind the regions to the tensors' current storage.
class HeldReshard {
  public:
    // `exchange` (its communicator: every rank of the source, all its DP and tp ranks, plus the
    // destination ranks) must outlive this object. Local.
    HeldReshard(const model::ModelArgs& args, RegionExchange& exchange);

    // Collective on exchange.comm(), every rank passing its own part: `src` what it holds (null
    // on a destination-only rank), `dst` its destination module in `dst_layout` (null on a
    // source-only rank; `dst_layout` is then ignored). Every parameter of `dst` (storage allocated
    // first when released) gets its slice of the source model; a rank with both must pass the
    // same parameter names, dtypes and full shapes in both, and every rank the same as the others
    // (InternalError naming the parameter or the rank otherwise, on every rank). Sources must all
    // be split over the same tp, and every element of it must be held by some rank (InternalError
    // naming the first one missing). Deadline: exchange.options().timeout_s for the all-gathers
    // (TimeoutError) and the exchange itself. Runs under NoGradGuard.
    // Storage of destination parameters that have none: on a rank that is both, a parameter
    // whose destination slice lies whole, in its row-major order and without padding, inside
    // what the rank holds of it (a row slice of a row-split weight inside a ZeRO-3 shard, a
    // replicated norm) gets that memory itself, nothing copied (aliased_bytes; the held slice
    // must not change while the destination lives: the colocated actor trains only after the
    // rollout copy is released). The rest are placed, in order, in the first span of `scratch`
    // (on their device) with room left, 64-byte aligned; what is left (host) shares one fresh
    // HostBlock or (device) comes from the tensors' allocator. Storages placed in scratch hold
    // scratch.owner, aliased ones the held tensor, until they are freed (release_parameter_storage).
    // When the call throws, the storage it gave the destination is freed again.
    HeldReshardStats run(const HeldSource* src, torch::nn::Module* dst, const model::TpLayout& dst_layout,
                         const engine::ScratchMemory& scratch = {});

    struct Plan;  // the cached transfer list (src/weights/held_reshard.cpp)

  private:
    HeldReshardStats fill(const HeldSource* src, torch::nn::Module* dst, const model::TpLayout& dst_layout,
                          const engine::ScratchMemory& scratch);
    model::ModelArgs args_;
    RegionExchange& exchange_;
    std::shared_ptr<Plan> plan_;
};

// Frees the storage of every parameter of `m` (after a generation); HeldReshard::run allocates
// it again. Local.
void release_parameter_storage(torch::nn::Module& m);
// Bytes of `m`'s parameters that currently hold storage (released ones count 0).
int64_t allocated_parameter_bytes(const torch::nn::Module& m);

}  // namespace rlpt::weights
