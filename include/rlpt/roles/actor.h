#pragma once
// The actor role: the policy being trained. Dispatch table in roles/actor.cpp.
//
// Column layout shared by the RL methods (B rows, P prompt + R response columns):
//   input_ids, attention_mask, position_ids [B, P+R] int64; responses, response_mask [B, R].
#include <cstdint>
#include <string>

#include "rlpt/algo/value_loss.h"
#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"
#include "rlpt/roles/settings.h"

namespace rlpt::roles {

enum class ActorMethod : uint16_t {
    kPing = 0,        // one_to_all / all: identity of every rank
    kInit,            // one_to_all / none. protocol::InitWith<ActorSettings> (total_steps: training
                      //   steps; the lr schedule advances once per kUpdate, after all its mini-batches)
    kComputeLogProb,  // dp_split / concat. ActorLogProbArgs -> old_log_probs, entropy
                      //   (+ sum_pi_squared, Σ_v π_v²) [B, R] fp32. Mixture-of-experts policies:
                      //   in: + routed_experts [B, P+R, moe layers, k] int16 (the rollout's; replayed
                      //   with R3); out: + old_routed_experts (same shape, -1 outside the sequences)
                      //   with R2
    kUpdate,          // dp_split unpadded / concat (metrics only). PPO epochs over mini-batches.
                      //   in: + old_log_probs, advantages [B, R] (+ ref_log_prob with use_kl_loss;
                      //   + routed_experts / old_routed_experts for MoE policies); ActorUpdateArgs.
                      //   MoE metrics: actor/router_mismatch_frac (the router's own top-k against the
                      //   rollout's routes), actor/router_aux_loss (with router_aux_loss_coef > 0)
    kSftStep,         // dp_split unpadded / concat (metrics only). in: input_ids, attention_mask,
                      //   position_ids, loss_mask [B, T]; SftStepArgs
    kSendWeights,     // one_to_all / none: actor role rank 0 broadcasts the weights to the
                      //   rollout ranks that do not host the actor (collective with
                      //   RolloutMethod::kReceiveWeights). meta: version
    kSave,            // one_to_all / all: protocol::DirArgs -> file, bytes, crc32 per rank
    kLoad,            // one_to_all / none: protocol::DirArgs
    kExport,          // one_to_all / none: role rank 0 writes a Hugging Face folder. protocol::DirArgs
    kCount
};

// The actor's settings (kInit), resolved once from the config by the run plan.
struct ActorSettings {
    ModelSettings model;
    OptimConfig optim;           // actor.optim, or sft.optim when trainer.mode is sft
    std::string optim_key;       // which of the two ("actor.optim" | "sft.optim"): names its keys in errors
    PpoSettings ppo;             // kUpdate's loop: actor.ppo_epochs, ppo_micro_batch_size_per_rank, ...
    algo::ActorLossConfig loss;  // kUpdate's objective: actor.policy_loss, the clip keys, entropy and KL terms
    // kComputeLogProb also returns the entropy (actor.calculate_entropy, or a non-zero entropy_coeff).
    bool log_prob_entropy = true;
    int64_t log_prob_micro_batch_size_per_rank = 1;  // kComputeLogProb's forwards
    int64_t sft_micro_batch_size_per_rank = 1;       // kSftStep's forwards (sft.micro_batch_size_per_rank)
    int64_t seed = 0;                                // trainer.seed: the engine's and the losses' random streams
    WeightSyncSettings weight_sync;                  // kSendWeights
    // Mixture-of-experts policies (refused for dense ones at kInit): actor.router_aux_loss_coef
    // and actor.router_replay.mode ("disabled" | "R2" | "R3").
    double router_aux_loss_coef = 0.0;
    std::string router_replay = "disabled";
    template <typename V>
    void visit(V& v) {
        v("model", model);
        v("optim", optim);
        v("optim_key", optim_key);
        v("ppo", ppo);
        v("loss", loss);
        v("log_prob_entropy", log_prob_entropy);
        v("log_prob_micro_batch_size_per_rank", log_prob_micro_batch_size_per_rank);
        v("sft_micro_batch_size_per_rank", sft_micro_batch_size_per_rank);
        v("seed", seed);
        v("weight_sync", weight_sync);
        v("router_aux_loss_coef", router_aux_loss_coef);
        v("router_replay", router_replay);
    }
};

struct ActorLogProbArgs {
    double temperature = 1.0;     // the rollout's: log-probs of softmax(logits / T)
    bool sum_pi_squared = false;  // also return Σ_v π_v² per token (optimal-token-baseline estimators)
    template <typename V>
    void visit(V& v) {
        v("temperature", temperature);
        v("sum_pi_squared", sum_pi_squared);
    }
};

struct ActorUpdateArgs {
    double temperature = 1.0;
    int64_t num_mini_batches = 1;       // per epoch; each rank's rows divide evenly into them
    double global_mini_batch_rows = 0;  // rows of one mini-batch over all DP ranks (loss scaling)
    template <typename V>
    void visit(V& v) {
        v("temperature", temperature);
        v("num_mini_batches", num_mini_batches);
        v("global_mini_batch_rows", global_mini_batch_rows);
    }
};

struct SftStepArgs {
    double global_tokens = 0;  // loss tokens of the whole step over all DP ranks (> 0)
    template <typename V>
    void visit(V& v) {
        v("global_tokens", global_tokens);
    }
};

const protocol::RoleSpec& actor_spec();

}  // namespace rlpt::roles

namespace rlpt::protocol {
template <>
struct RoleOf<roles::ActorMethod> {
    static constexpr const char* kName = "actor";
};
template <>
struct ArgsOf<roles::ActorMethod::kInit> {
    using type = InitWith<roles::ActorSettings>;
};
template <>
struct ArgsOf<roles::ActorMethod::kComputeLogProb> {
    using type = roles::ActorLogProbArgs;
};
template <>
struct ArgsOf<roles::ActorMethod::kUpdate> {
    using type = roles::ActorUpdateArgs;
};
template <>
struct ArgsOf<roles::ActorMethod::kSftStep> {
    using type = roles::SftStepArgs;
};
template <>
struct ArgsOf<roles::ActorMethod::kSave> {
    using type = DirArgs;
};
template <>
struct ArgsOf<roles::ActorMethod::kLoad> {
    using type = DirArgs;
};
template <>
struct ArgsOf<roles::ActorMethod::kExport> {
    using type = DirArgs;
};
}  // namespace rlpt::protocol
