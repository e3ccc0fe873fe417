#include "model/weights_io.h"

#include <ATen/CPUGeneratorImpl.h>

#include <fmt/ranges.h>

#include <map>

#include "rlpt/core/error.h"

namespace rlpt::model::detail {

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

namespace {

std::string name_list(const std::vector<std::string>& names) {
    std::string out;
    const size_t shown = std::min<size_t>(names.size(), 8);
    for (size_t i = 0; i < shown; ++i) out += fmt::format("{}'{}'", i ? ", " : "", names[i]);
    if (names.size() > shown) out += fmt::format(" and {} more", names.size() - shown);
    return out;
}

std::string shape_str(const std::vector<int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

}  // namespace

std::set<std::string> load_parameters(torch::nn::Module& module, const SafetensorsCheckpoint& ck,
                                      const LoadRules& rules) {
    auto params = module.named_parameters(/*recurse=*/true);
    std::map<std::string, torch::Tensor> by_name;
    for (const auto& p : params) by_name.emplace(p.key(), p.value());

    std::vector<std::string> unexpected;
    std::vector<std::pair<std::string, torch::Tensor>> to_load;
    for (const auto& name : ck.names()) {
        if (ends_with(name, "rotary_emb.inv_freq") || (rules.ignore && rules.ignore(name))) continue;
        auto it = by_name.find(name);
        if (it == by_name.end()) {
            unexpected.push_back(name);
            continue;
        }
        const auto& info = ck.info(name);
        const auto expected = full_shape(shard_spec(name, rules.layout), it->second.sizes().vec());
        RLPT_CHECK_KIND(IoError, info.shape == expected,
                        "checkpoint tensor '{}' in '{}' has shape {}, the model expects {}", name, ck.file_of(name),
                        shape_str(info.shape), shape_str(expected));
        RLPT_CHECK_KIND(IoError, c10::isFloatingType(info.dtype),
                        "checkpoint tensor '{}' in '{}' has dtype {}, expected a floating-point type", name,
                        ck.file_of(name), c10::toString(info.dtype));
        to_load.emplace_back(name, it->second);
    }
    RLPT_CHECK_KIND(IoError, unexpected.empty(), "checkpoint '{}' has {} tensor(s) the model does not: {}", ck.source(),
                    unexpected.size(), name_list(unexpected));

    std::set<std::string> loaded;
    for (const auto& nt : to_load) loaded.insert(nt.first);
    std::vector<std::string> missing;
    for (const auto& kv : by_name)
        if (!loaded.count(kv.first) && !rules.optional.count(kv.first)) missing.push_back(kv.first);
    RLPT_CHECK_KIND(IoError, missing.empty(), "checkpoint '{}' is missing {} tensor(s): {}", ck.source(),
                    missing.size(), name_list(missing));

    torch::NoGradGuard no_grad;
    for (auto& [name, param] : to_load) copy_slice(param, ck.get(name), shard_spec(name, rules.layout));
    return loaded;
}

NamedTensors parameter_list(const torch::nn::Module& module) {
    NamedTensors out;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value().detach());
    return out;
}

void copy_slice(torch::Tensor& param, const torch::Tensor& full, const ShardSpec& spec) {
    if (spec.dim < 0 || (spec.start == 0 && spec.length == spec.full)) {
        param.copy_(full);
        return;
    }
    const int64_t real = spec.real();
    if (real < spec.length) param.narrow(spec.dim, real, spec.length - real).zero_();
    if (real > 0) param.narrow(spec.dim, 0, real).copy_(full.narrow(spec.dim, spec.start, real));
}

void init_parameters(torch::nn::Module& module, const ModelArgs& args, const TpLayout& layout, uint64_t seed) {
    torch::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (auto& p : module.named_parameters(/*recurse=*/true)) {
        const std::string& name = p.key();
        torch::Tensor& param = p.value();
        if (ends_with(name, "norm.weight")) {
            param.fill_(1.0);
        } else if (ends_with(name, ".bias")) {
            param.zero_();
        } else {
            const auto spec = shard_spec(name, layout);
            auto values = torch::empty(full_shape(spec, param.sizes().vec()), torch::kFloat32)
                              .normal_(0.0, args.initializer_range, gen);
            if (name == "model.embed_tokens.weight" && args.pad_token_id >= 0 && args.pad_token_id < args.vocab_size)
                values[args.pad_token_id].zero_();
            copy_slice(param, values, spec);
        }
    }
}

}  // namespace rlpt::model::detail
