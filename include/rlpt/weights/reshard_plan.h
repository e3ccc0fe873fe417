#pragma once
// The shard-to-shard plan between two tensor-parallel layouts of one model (DESIGN §4e): which
// slice of which parameter goes from which actor rank to which rollout rank. WeightReshard
// (rlpt/weights/weight_reshard.h) moves the bytes; the split rules are the model's own
// (rlpt/model/tensor_parallel.h's shard_spec). Implemented in src/weights/reshard_plan.cpp.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/model/model_config.h"
#include "rlpt/weights/weight_reshard.h"

namespace rlpt::weights {

// The plan that moves every parameter of a model from one block of `tp_from` ranks (sync ranks
// [0, tp_from), mp rank order) to `n_blocks` blocks of `tp_to` ranks (block b's mp rank j is sync
// rank tp_from + b·tp_to + j), from the two layouts' split rules (shard_spec): each receiver gets
// exactly its slice's real rows/columns (padding rows are left alone), cut into one piece per
// source rank that owns part of it. Where several sources hold the same bytes (replicated
// tensors, replicated KV heads) the receiver's index picks a different one first, spreading the
// sends. `local` is this rank's module in its own layout `local_layout` (either side; only names
// and full shapes are read, identical on every rank); `names` receives named_parameters() order,
// the plan's tensor order. Local, not collective; every rank computes the same plan.
ReshardPlan reshard_plan(const torch::nn::Module& local, const model::TpLayout& local_layout,
                         const model::ModelArgs& args, int64_t tp_from, int64_t tp_to, int64_t n_blocks,
                         std::vector<std::string>* names);

}  // namespace rlpt::weights
