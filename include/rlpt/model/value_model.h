#pragma once
// Value model (PPO critic) / reward model: the transformer backbone plus a scalar head,
// laid out as Hugging Face's *ForTokenClassification with num_labels = 1 (what verl's critic
// loads through AutoModelForTokenClassification):
//   model.*        the backbone, names as in transformer.h
//   score.weight   [1, H]
//   score.bias     [1]      (TokenClassification; absent for *ForSequenceClassification)
// value[b, t] = score(final-normed hidden[b, t]).
//
// *ForSequenceClassification checkpoints (reward models, no score.bias) load too; the model
// then computes the same per-token score (HF pools it at the last non-pad token; the caller
// picks the position) and saves back as *ForSequenceClassification.

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "rlpt/model/model_config.h"
#include "rlpt/model/transformer.h"

namespace rlpt::model {

class ValueModel : public torch::nn::Module {
  public:
    // `args.head` must be kTokenClassification or kSequenceClassification with num_labels 1.
    // Parameters are uninitialised until init_weights() or loading.
    // Under tensor parallelism (`tp`) the backbone is split as in transformer.h; the score head
    // is replicated (its input, the final hidden state, is the same on every rank of the block).
    explicit ValueModel(ModelArgs args, torch::Dtype dtype = torch::kFloat32, torch::Device device = torch::kCPU,
                        std::shared_ptr<const TensorParallel> tp = nullptr);

    const ModelArgs& args() const { return args_; }
    torch::Dtype dtype() const { return score_weight_.scalar_type(); }
    torch::Device device() const { return score_weight_.device(); }
    Backbone& backbone() { return *model_; }
    const Backbone& backbone() const { return *model_; }

    // [B, T, H] final-normed hidden states (see transformer.h for the inputs).
    torch::Tensor forward_hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                 const torch::Tensor& position_ids);
    // [B, T] float32 values (head computed in the model dtype, then cast).
    torch::Tensor forward_values(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                 const torch::Tensor& position_ids);

    const torch::Tensor& score_weight() const { return score_weight_; }  // [1, H]
    const torch::Tensor& score_bias() const { return score_bias_; }      // [1], undefined without bias

    // HF-style deterministic init of everything (see CausalLM::init_weights); the head weight
    // ~ normal(0, initializer_range), bias 0.
    void init_weights(uint64_t seed);

  private:
    ModelArgs args_;
    std::shared_ptr<Backbone> model_;
    torch::Tensor score_weight_, score_bias_;
};

// How a fresh value head starts when the backbone comes from a policy.
enum class ValueHeadInit {
    kZero,    // weight 0, bias 0: initial values are exactly 0
    kNormal,  // weight ~ normal(0, initializer_range) from `seed` (HF's init, as verl gets), bias 0
};

// The policy's args turned into a TokenClassification (num_labels 1) config.
ModelArgs value_model_args(const ModelArgs& policy_args);

// Critic from a policy checkpoint directory (LlamaForCausalLM / Qwen2ForCausalLM): backbone
// tensors copied, lm_head ignored, head initialised per `init`. Loading errors as in
// load_pretrained (missing / mis-shaped / unexpected tensors name the tensor).
std::shared_ptr<ValueModel> value_model_from_policy_checkpoint(const std::string& dir, torch::Dtype dtype,
                                                               torch::Device device, ValueHeadInit init,
                                                               uint64_t seed = 0,
                                                               std::shared_ptr<const TensorParallel> tp = nullptr);
// Critic from an in-memory policy: backbone parameters copied (not shared) into `dtype` on
// `device`, head initialised per `init`; split like the policy.
std::shared_ptr<ValueModel> value_model_from_policy(CausalLM& policy, torch::Dtype dtype, torch::Device device,
                                                    ValueHeadInit init, uint64_t seed = 0);

// Loads a {Llama,Qwen2}For{Token,Sequence}Classification checkpoint with num_labels 1.
std::shared_ptr<ValueModel> load_value_model(const std::string& dir, torch::Dtype dtype = torch::kFloat32,
                                             torch::Device device = torch::kCPU,
                                             std::shared_ptr<const TensorParallel> tp = nullptr);
// Writes config.json (architecture from args().head, num_labels 1, torch_dtype = model dtype)
// and the safetensors, like save_pretrained.
void save_value_model(const ValueModel& model, const std::string& dir, uint64_t max_shard_bytes = 5'000'000'000ULL);

}  // namespace rlpt::model
