#pragma once
// What a mixture-of-experts forward routes, for the callers that need it: router replay (the
// rollout's or the old-log-prob pass's choices imposed on a later forward), the rollout/training
// route mismatch metric and the load-balancing loss. Attach one to a Backbone
// (Backbone::set_routing) for the forwards that use it; a dense model ignores it.
//
// Rows: a forward over input_ids [B, T] routes B*T rows, row b*T + t for position t of row b
// (padding positions too: callers mask them). "MoE layers" are the decoder layers that are sparse
// (ModelArgs::is_moe_layer), numbered 0.. in layer order; k = num_experts_per_tok.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "rlpt/model/model_config.h"

namespace rlpt::model {

struct MoeRouting {
    // In: when defined, [B*T, num_moe_layers, k] integer expert indices (any device): the experts
    // each row is sent to instead of the router's top-k (router replay); a row whose entries are
    // negative (a position nothing was recorded for: padding, a sequence's last token) takes the
    // router's top-k. The gate weights are the router's current probabilities of those experts
    // (renormalised when norm_topk_prob), so the router still learns. A row's k experts must be
    // distinct and in [0, num_experts).
    torch::Tensor replay;
    // In: keep each MoE layer's choices in `chosen`, the router's own top-k in `preferred`, the
    // probabilities in `probs`.
    bool record_choices = false;
    bool record_preferred = false;
    bool record_probs = false;
    // Out, one entry per MoE layer in order, appended by every forward (clear() between uses):
    // chosen [B*T, k] int64 (the experts used, replayed or not; no gradient), preferred [B*T, k]
    // int64 (the router's top-k, what it would have chosen without replay), probs [B*T, E]
    // float32 router probabilities (with gradient when the forward has one).
    std::vector<torch::Tensor> chosen;
    std::vector<torch::Tensor> preferred;
    std::vector<torch::Tensor> probs;

    void clear() {
        chosen.clear();
        preferred.clear();
        probs.clear();
    }
    // chosen / preferred stacked: [B*T, num_moe_layers, k] int64 (the layout `replay` takes).
    torch::Tensor chosen_stacked() const;
    torch::Tensor preferred_stacked() const;
};

// transformers' load-balancing loss (Switch Transformer eq. 4-6 over all MoE layers at once):
// E · Σ_e f_e · P_e, where f_e = (rows routed to e, counting every one of a row's k choices) and
// P_e = (router probability of e), both summed over every MoE layer's rows and divided by the
// number of those rows; rows where `mask` ([B*T], 1 = real token) is 0 are left out. Needs
// routing.record_choices and record_probs; differentiable through probs. A scalar float32.
torch::Tensor load_balancing_loss(const MoeRouting& routing, const torch::Tensor& mask, int64_t num_experts);

// How many (row, MoE layer) pairs differ in their set of k experts between `a` and `b`
// ([N, num_moe_layers, k] integers each, any order within a row's k), over rows where `mask`
// ([N], nonzero = count it) is set and both have experts recorded (>= 0): {differing, counted}.
struct RouteMismatch {
    int64_t differing = 0, counted = 0;
    double fraction() const { return counted == 0 ? 0.0 : static_cast<double>(differing) / counted; }
};
RouteMismatch route_mismatch(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask);
// route_mismatch(a, b, mask).fraction(): a float in [0, 1], 0 when no row counts.
double route_mismatch_fraction(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& mask);

}  // namespace rlpt::model
