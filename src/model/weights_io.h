#pragma once
// Moving a module's parameters to and from safetensors checkpoints, and HF-style random init
// (internal to src/model).

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "rlpt/model/model_config.h"
#include "rlpt/model/safetensors.h"
#include "rlpt/model/tensor_parallel.h"

namespace rlpt::model::detail {

struct LoadRules {
    // Checkpoint tensors to skip silently (e.g. rotary_emb.inv_freq, a tied lm_head).
    std::function<bool(const std::string&)> ignore;
    // Module parameters that may be absent from the checkpoint (left untouched).
    std::set<std::string> optional;
    // Which slice of each checkpoint tensor this rank holds (tensor_parallel.h); the default
    // (tp = 1) loads whole tensors. Shapes are checked against the full tensors.
    TpLayout layout;
};

// Validates the whole checkpoint against `module`'s named_parameters() first (IoError naming
// the tensor and file for: unexpected tensors, missing parameters, shape mismatches, non-float
// tensors), then copies every tensor into its parameter (converting dtype/device). Returns the
// names of the parameters loaded. Under tensor parallelism only this rank's slice of each
// tensor is read from the (memory-mapped) file: narrowed first, then copied.
std::set<std::string> load_parameters(torch::nn::Module& module, const SafetensorsCheckpoint& ck,
                                      const LoadRules& rules);

// Parameters as (name, detached tensor) in named_parameters() order.
NamedTensors parameter_list(const torch::nn::Module& module);

// HF _init_weights by parameter name: "*norm.weight" = 1, "*.bias" = 0, everything else
// ~ normal(0, args.initializer_range) drawn in fp32 on the CPU from one generator seeded with
// `seed`, in named_parameters() order; the embedding row args.pad_token_id is zeroed. Random
// tensors are drawn at their full (tp = 1) shape and sliced per `layout`, so every layout of
// the same seed holds the same model.
void init_parameters(torch::nn::Module& module, const ModelArgs& args, const TpLayout& layout, uint64_t seed);

// Copies the slice `spec` of a full tensor into `param` (padding rows zeroed).
void copy_slice(torch::Tensor& param, const torch::Tensor& full, const ShardSpec& spec);

bool ends_with(const std::string& s, const std::string& suffix);

}  // namespace rlpt::model::detail
