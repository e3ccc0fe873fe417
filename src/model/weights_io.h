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

namespace rlpt::model::detail {

struct LoadRules {
    // Checkpoint tensors to skip silently (e.g. rotary_emb.inv_freq, a tied lm_head).
    std::function<bool(const std::string&)> ignore;
    // Module parameters that may be absent from the checkpoint (left untouched).
    std::set<std::string> optional;
};

// Validates the whole checkpoint against `module`'s named_parameters() first (IoError naming
// the tensor and file for: unexpected tensors, missing parameters, shape mismatches, non-float
// tensors), then copies every tensor into its parameter (converting dtype/device). Returns the
// names of the parameters loaded.
std::set<std::string> load_parameters(torch::nn::Module& module, const SafetensorsCheckpoint& ck,
                                      const LoadRules& rules);

// Parameters as (name, detached tensor) in named_parameters() order.
NamedTensors parameter_list(const torch::nn::Module& module);

// HF _init_weights by parameter name: "*norm.weight" = 1, "*.bias" = 0, everything else
// ~ normal(0, args.initializer_range) drawn in fp32 on the CPU from one generator seeded with
// `seed`, in named_parameters() order; the embedding row args.pad_token_id is zeroed.
void init_parameters(torch::nn::Module& module, const ModelArgs& args, uint64_t seed);

bool ends_with(const std::string& s, const std::string& suffix);

}  // namespace rlpt::model::detail
