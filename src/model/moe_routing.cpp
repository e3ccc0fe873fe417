#include "rlpt/model/moe_routing.h"

#include <fmt/ranges.h>

#include "rlpt/core/error.h"

namespace rlpt::model {

torch::Tensor MoeRouting::chosen_stacked() const {
    RLPT_CHECK(!chosen.empty(), "MoeRouting: no choices recorded (record_choices off, or a dense model)");
    return torch::stack(chosen, 1);
}

torch::Tensor MoeRouting::preferred_stacked() const {
    RLPT_CHECK(!preferred.empty(), "MoeRouting: no top-k recorded (record_preferred off, or a dense model)");
    return torch::stack(preferred, 1);
}

torch::Tensor load_balancing_loss(const MoeRouting& routing, const torch::Tensor& mask, int64_t num_experts) {
    RLPT_CHECK(!routing.probs.empty() && routing.probs.size() == routing.chosen.size(),
               "load_balancing_loss: needs the router's probabilities and choices of every MoE layer "
               "(record_probs and record_choices), got {} and {}",
               routing.probs.size(), routing.chosen.size());
    const auto device = routing.probs[0].device();
    const int64_t n = routing.probs[0].size(0);
    const auto weight = mask.defined() ? mask.reshape({-1}).to(device, torch::kFloat32)
                                       : torch::ones({n}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
    RLPT_CHECK(weight.size(0) == n, "load_balancing_loss: mask of {} rows for {} routed rows", weight.size(0), n);
    auto tokens = torch::zeros({num_experts}, weight.options());
    auto prob_sum = torch::zeros({num_experts}, weight.options());
    for (size_t l = 0; l < routing.probs.size(); ++l) {
        const auto& chosen = routing.chosen[l];
        tokens = tokens.scatter_add(0, chosen.reshape({-1}), weight.repeat_interleave(chosen.size(1)));
        prob_sum = prob_sum + (routing.probs[l] * weight.unsqueeze(1)).sum(0);
    }
    const auto rows = weight.sum() * static_cast<double>(routing.probs.size());
    return (tokens / rows * (prob_sum / rows)).sum() * static_cast<double>(num_experts);
}

RouteMismatch route_mismatch(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
    RLPT_CHECK(a.dim() == 3 && a.sizes() == b.sizes() && mask.dim() == 1 && mask.size(0) == a.size(0),
               "route_mismatch: routes {} and {} with a mask of {}", a.sizes(), b.sizes(), mask.sizes());
    // Sets compared as sorted lists.
    const auto sa = std::get<0>(a.to(torch::kCPU, torch::kInt64).sort(-1));
    const auto sb = std::get<0>(b.to(torch::kCPU, torch::kInt64).sort(-1));
    const auto differs = sa.ne(sb).any(-1);  // [N, layers]
    const auto counted =
        mask.to(torch::kCPU).ne(0).unsqueeze(1).logical_and(sa.ge(0).all(-1)).logical_and(sb.ge(0).all(-1));
    return {differs.logical_and(counted).sum().item<int64_t>(), counted.sum().item<int64_t>()};
}

double route_mismatch_fraction(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask) {
    return route_mismatch(a, b, mask).fraction();
}

}  // namespace rlpt::model
