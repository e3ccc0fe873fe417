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
// tp), generation in the rollout's. Before a generation each rank fills its rollout-layout
// parameters from the actor one parameter at a time: the walk hands over this rank's slice in
// the actor's tp layout (TrainEngine::for_each_full_parameter: under ZeRO-3 it all-gathers one
// unit - a decoder layer or the root - at a time over the actor's DP group and frees it after);
// with actor tp > 1 each split tensor is all-gathered over the actor's block, straight into the
// rollout parameter when the rollout keeps it whole (rollout tp 1: no copy at all), else into
// one full tensor of which this rank keeps its rollout slice (a narrow copy). After the generation
// release_parameter_storage() frees the rollout copy. Peak memory per rank: the training shards
// + the rollout-layout parameters + one gathered unit (ZeRO-3) + one full tensor (actor tp > 1
// and rollout tp > 1).
// verl's sharding managers do the same with FSDP's full state dict per layer.
//
// Not "exactly the slices" on the wire: a ZeRO-3 unit is all-gathered whole (the flat shards
// cut across tensors and rows, so an all-gather of the unit is the one collective that serves
// every rollout slice at once), and an actor tp block all-gathers each split tensor.

// Storage of `t` freed (metadata, shape and views kept; data pointer null) / allocated again if
// freed (values undefined). How FSDP frees a gathered parameter while autograd holds views; the
// training engine's ZeRO-3 buffers use the same two calls.
void free_storage(const torch::Tensor& t);
void alloc_storage(const torch::Tensor& t);

// Calls `visit(name, local)` once per parameter of the source model, in named_parameters()
// order; `local` is this rank's slice in the source layout, valid during the call only.
using ParameterVisitor = std::function<void(const std::string&, const torch::Tensor&)>;
using ParameterWalk = std::function<void(const ParameterVisitor&)>;

struct ColocatedReshardStats {
    int64_t dst_bytes = 0;        // bytes of the destination's parameters (this rank)
    int64_t copied_bytes = 0;     // bytes copied into them (== dst_bytes minus vocabulary padding)
    int64_t tp_gathered_bytes = 0;  // bytes of full tensors gathered over the source block
    int64_t max_full_bytes = 0;   // the largest full tensor held outside the destination (the
                                  // transient "bucket"): 0 for source tp 1 and for a rollout
                                  // that keeps whole tensors (its tp 1), gathered in place
    double seconds = 0;
};

// Fills every parameter of `dst` (this rank's slices in `dst_layout`; storage allocated first
// when released) from the source model walked by `walk` (layout: `args` split over `src_tp`,
// null for tp 1). The source and destination must be the same architecture (same parameter
// names, in the same order; checked, InternalError naming the parameter). Collective on
// whatever the walk is collective on (the actor's DP group under ZeRO-3) and on src_tp's block.
// Padding rows of a vocabulary slice are zeroed. Runs under NoGradGuard.
ColocatedReshardStats reshard_colocated(const ParameterWalk& walk, const ModelArgs& args, const TensorParallel* src_tp,
                                        torch::nn::Module& dst, const TpLayout& dst_layout);
// Frees the storage of every parameter of `m` (after a generation); reshard_colocated allocates
// it again. Local.
void release_parameter_storage(torch::nn::Module& m);
// Bytes of `m`'s parameters that currently hold storage (released ones count 0).
int64_t allocated_parameter_bytes(const torch::nn::Module& m);

}  // namespace rlpt::model
