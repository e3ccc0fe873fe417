#include "rlpt/model/value_model.h"

#include <ATen/CPUGeneratorImpl.h>

#include "model/weights_io.h"
#include "rlpt/core/error.h"

namespace rlpt::model {

ValueModel::ValueModel(ModelArgs args, torch::Dtype dtype, torch::Device device,
                       std::shared_ptr<const TensorParallel> tp)
    : args_(std::move(args)) {
    args_.validate();
    RLPT_CHECK(args_.head == ModelHead::kTokenClassification || args_.head == ModelHead::kSequenceClassification,
               "ValueModel needs a token/sequence classification config, got {}", args_.architecture());
    args_.torch_dtype = dtype_name(dtype);
    auto options = torch::TensorOptions().dtype(dtype).device(device);
    model_ = register_module("model", std::make_shared<Backbone>(args_, options, std::move(tp)));
    auto score = register_module("score", std::make_shared<torch::nn::Module>());
    score_weight_ = score->register_parameter("weight", torch::empty({1, args_.hidden_size}, options));
    if (args_.head == ModelHead::kTokenClassification)
        score_bias_ = score->register_parameter("bias", torch::empty({1}, options));
}

torch::Tensor ValueModel::forward_hidden(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         const torch::Tensor& position_ids) {
    return model_->forward(input_ids, attention_mask, position_ids, nullptr);
}

torch::Tensor ValueModel::forward_values(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         const torch::Tensor& position_ids) {
    auto hidden = forward_hidden(input_ids, attention_mask, position_ids);
    return torch::linear(hidden, score_weight_, score_bias_).squeeze(-1).to(torch::kFloat32);
}

void ValueModel::init_weights(uint64_t seed) { detail::init_parameters(*this, args_, model_->tp_layout(), seed); }

ModelArgs value_model_args(const ModelArgs& policy_args) {
    ModelArgs a = policy_args;
    a.head = ModelHead::kTokenClassification;
    a.num_labels = 1;
    return a;
}

namespace {

void init_head(ValueModel& vm, ValueHeadInit init, uint64_t seed) {
    torch::NoGradGuard no_grad;
    if (init == ValueHeadInit::kZero) {
        vm.score_weight().zero_();
    } else {
        auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
        vm.score_weight().copy_(
            torch::empty(vm.score_weight().sizes(), torch::kFloat32).normal_(0.0, vm.args().initializer_range, gen));
    }
    if (vm.score_bias().defined()) vm.score_bias().zero_();
}

}  // namespace

std::shared_ptr<ValueModel> value_model_from_policy_checkpoint(const std::string& dir, torch::Dtype dtype,
                                                               torch::Device device, ValueHeadInit init, uint64_t seed,
                                                               std::shared_ptr<const TensorParallel> tp) {
    try {
        ModelArgs policy_args = load_model_args(dir);
        RLPT_CHECK_KIND(ConfigError, policy_args.head == ModelHead::kCausalLM,
                        "architecture {} is not a policy (causal LM) checkpoint", policy_args.architecture());
        auto vm = std::make_shared<ValueModel>(value_model_args(policy_args), dtype, device, std::move(tp));
        auto ck = SafetensorsCheckpoint::open(dir);
        detail::LoadRules rules;
        rules.layout = vm->backbone().tp_layout();
        rules.ignore = [](const std::string& name) { return name == "lm_head.weight"; };
        rules.optional = {"score.weight", "score.bias"};
        detail::load_parameters(*vm, ck, rules);
        init_head(*vm, init, seed);
        return vm;
    } catch (const Error& e) {
        rethrow_with_context(fmt::format("initialising a value model from policy '{}'", dir), e);
    }
}

std::shared_ptr<ValueModel> value_model_from_policy(CausalLM& policy, torch::Dtype dtype, torch::Device device,
                                                    ValueHeadInit init, uint64_t seed) {
    auto vm = std::make_shared<ValueModel>(value_model_args(policy.args()), dtype, device, policy.backbone().tp_ptr());
    auto src = policy.backbone().named_parameters(/*recurse=*/true);
    auto dst = vm->backbone().named_parameters(/*recurse=*/true);
    RLPT_ASSERT(src.size() == dst.size());
    {
        torch::NoGradGuard no_grad;
        for (const auto& p : src) dst[p.key()].copy_(p.value());
    }
    init_head(*vm, init, seed);
    return vm;
}

std::shared_ptr<ValueModel> load_value_model(const std::string& dir, torch::Dtype dtype, torch::Device device,
                                             std::shared_ptr<const TensorParallel> tp) {
    try {
        ModelArgs args = load_model_args(dir);
        RLPT_CHECK_KIND(ConfigError, args.head != ModelHead::kCausalLM,
                        "architecture {} is a causal LM, not a value/reward model (use "
                        "value_model_from_policy_checkpoint to start a critic from it)",
                        args.architecture());
        auto vm = std::make_shared<ValueModel>(args, dtype, device, std::move(tp));
        auto ck = SafetensorsCheckpoint::open(dir);
        detail::LoadRules rules;
        rules.layout = vm->backbone().tp_layout();
        detail::load_parameters(*vm, ck, rules);
        return vm;
    } catch (const Error& e) {
        rethrow_with_context(fmt::format("loading value model '{}'", dir), e);
    }
}

void save_value_model(const ValueModel& model, const std::string& dir, uint64_t max_shard_bytes) {
    try {
        ModelArgs args = model.args();
        args.torch_dtype = dtype_name(model.dtype());
        save_safetensors_sharded(dir, detail::parameter_list(model), max_shard_bytes);
        save_model_args(args, dir);
    } catch (const Error& e) {
        rethrow_with_context(fmt::format("saving value model '{}'", dir), e);
    }
}

}  // namespace rlpt::model
