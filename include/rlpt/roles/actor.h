#pragma once
// The actor role: the policy being trained. Dispatch table in roles/actor.cpp.
//
// Column layout shared by the RL methods (B rows, P prompt + R response columns):
//   input_ids, attention_mask, position_ids [B, P+R] int64; responses, response_mask [B, R].
#include <cstdint>

#include "rlpt/protocol/args.h"
#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class ActorMethod : uint16_t {
    kPing = 0,        // one_to_all / all: identity of every rank
    kInit,            // one_to_all / none. protocol::InitArgs (total_steps: training steps; the lr
                      //   schedule advances once per kUpdate, after all its mini-batches)
    kComputeLogProb,  // dp_split / concat. ActorLogProbArgs -> old_log_probs, entropy
                      //   (+ sum_pi_squared, Σ_v π_v²) [B, R] fp32
    kUpdate,          // dp_split unpadded / concat (metrics only). PPO epochs over mini-batches.
                      //   in: + old_log_probs, advantages [B, R] (+ ref_log_prob with use_kl_loss);
                      //   ActorUpdateArgs
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

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::ActorMethod> {
    static constexpr const char* kName = "actor";
};
