#pragma once
// Resharding a model between tensor-parallel layouts (DESIGN §4b, issue 11): the plan half.
// The bytes move in comm/weight_reshard.h; the split rules are tensor_parallel.h's shard_spec.
// Implemented in src/model/tensor_parallel.cpp.
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

#include "rlpt/comm/weight_reshard.h"
#include "rlpt/model/model_config.h"
#include "rlpt/model/tensor_parallel.h"

namespace rlpt::model {

// The shard-to-shard plan (comm/weight_reshard.h) that moves every parameter of a model from one
// block of `tp_from` ranks (sync ranks [0, tp_from), mp rank order) to `n_blocks` blocks of
// `tp_to` ranks (block b's mp rank j is sync rank tp_from + b·tp_to + j), from the two layouts'
// split rules (shard_spec): each receiver gets exactly its slice's real rows/columns (padding
// rows are left alone), cut into one piece per source rank that owns part of it. Where several
// sources hold the same bytes (replicated tensors, replicated KV heads) the receiver's index
// picks a different one first, spreading the sends. `local` is this rank's module in its own
// layout `local_layout` (either side; only names and full shapes are read, identical on every
// rank); `names` receives named_parameters() order, the plan's tensor order. Local, not
// collective; every rank computes the same plan.
comm::ReshardPlan reshard_plan(const torch::nn::Module& local, const TpLayout& local_layout, const ModelArgs& args,
                               int64_t tp_from, int64_t tp_to, int64_t n_blocks, std::vector<std::string>* names);

// ---- Colocated resharding: the hybrid engine's in-place half (DESIGN §4b) -------------------
//
// An actor and a rollout on the same ranks with different tensor-parallel sizes (verl's
// rollout.tensor_model_parallel_size): training runs in the actor's layout (ZeRO shards x actor
// tp), generation in the rollout's. Before a generation every rank fills its rollout-layout
// parameters straight from what the ranks hold of the actor (TrainEngine::held_parameters: its
// ZeRO-3 shard, or its whole tp slice at other stages), point to point over the colocated ranks
// (comm::RegionExchange): each rollout rank receives exactly the rows/columns of its slices it
// does not hold itself, each from one holder (itself first, then the next ranks after it), and
// copies the rest locally. Nothing is gathered: no ZeRO-3 unit, no full tensor. A piece lands in
// the rollout tensor in place when it is contiguous there (row slices, whole tensors, a column
// slice into a rollout that keeps exactly those columns) and is sent in place when it is
// contiguous in the holder's shard; the other ends are staged, at most one bucket at a time.
// After the generation release_parameter_storage() frees the rollout copy. Peak memory per rank:
// the training shards + the rollout-layout parameters + one bucket (the rule).
// verl's sharding managers do the same job with FSDP's full state dict per layer.

// Storage of `t` freed (metadata, shape and views kept; data pointer null) / allocated again if
// freed (values undefined). How FSDP frees a gathered parameter while autograd holds views; the
// training engine's ZeRO-3 buffers use the same two calls.
void free_storage(const torch::Tensor& t);
void alloc_storage(const torch::Tensor& t);

// What one rank holds of one parameter of the source model: elements [begin, end) of its local
// tensor (this rank's slice in the source tp layout) flattened row-major, as a 1-D tensor `data`
// of end - begin elements (TrainEngine::held_parameters).
struct HeldSlice {
    std::string name;
    int64_t begin = 0, end = 0;
    torch::Tensor data;
};

struct ColocatedReshardStats {
    int64_t dst_bytes = 0;       // bytes of the destination's parameters (this rank)
    int64_t copied_bytes = 0;    // bytes landed in them (== dst_bytes minus vocabulary padding)
    int64_t received_bytes = 0;  // of which came from other ranks
    int64_t sent_bytes = 0;      // bytes this rank sent to others
    int64_t staged_bytes = 0;    // bytes this rank packed or unpacked (strided pieces)
    int64_t staging_bytes = 0;   // the largest staging buffer this rank held (<= one bucket)
    int64_t n_messages = 0;      // messages this rank sent or received
    double wait_seconds = 0, copy_seconds = 0, seconds = 0;
};

// Fills every parameter of `dst` (this rank's slices in `dst_layout`; storage allocated first
// when released) from the source model of `args` split over `src_tp` ranks, of which this rank
// holds `held` (every parameter, in dst's named_parameters() order: same names, checked,
// InternalError naming the parameter) as tp rank `src_tp_rank`. Collective on
// `exchange.comm()`, which must hold every rank of the source (all its DP and tp ranks) and only
// ranks that also hold the destination; each passes its own layouts. Padding rows of a
// vocabulary slice are zeroed. Runs under NoGradGuard. The plan is recomputed each call from an
// all-gather of every rank's layouts and held ranges (a few KB).
ColocatedReshardStats reshard_colocated(const std::vector<HeldSlice>& held, const ModelArgs& args, int64_t src_tp,
                                        int64_t src_tp_rank, comm::RegionExchange& exchange, torch::nn::Module& dst,
                                        const TpLayout& dst_layout);
// Frees the storage of every parameter of `m` (after a generation); reshard_colocated allocates
// it again. Local.
void release_parameter_storage(torch::nn::Module& m);
// Bytes of `m`'s parameters that currently hold storage (released ones count 0).
int64_t allocated_parameter_bytes(const torch::nn::Module& m);

}  // namespace rlpt::model
