#pragma once
// The actor role: the policy being trained. Dispatch table in roles/actor.cpp.
//
// Column layout shared by the RL methods (B rows, P prompt + R response columns):
//   input_ids, attention_mask, position_ids [B, P+R] int64; responses, response_mask [B, R].
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class ActorMethod : uint16_t {
    kPing = 0,         // one_to_all / all: identity of every rank
    kInit,             // one_to_all / none, collective. meta: vocab_size, total_steps (training steps:
                       //   the lr schedule advances once per kUpdate, after all its mini-batches)
    kComputeLogProb,   // dp_split / concat. meta temperature (+ sum_pi_squared = 1) -> old_log_probs,
                       //   entropy (+ sum_pi_squared, Σ_v π_v²) [B, R] fp32
    kUpdate,           // dp_split / concat (metrics only), collective. PPO epochs over mini-batches.
                       //   in: + old_log_probs, advantages [B, R] (+ ref_log_prob with use_kl_loss);
                       //   meta: temperature, num_mini_batches, global_mini_batch_rows
    kSftStep,          // dp_split / concat (metrics only), collective. in: input_ids, attention_mask,
                       //   position_ids, loss_mask [B, T]; meta: global_tokens
    kSendWeights,      // one_to_all / none: actor role rank 0 broadcasts the weights to the
                       //   rollout ranks that do not host the actor (collective with
                       //   RolloutMethod::kReceiveWeights). meta: version
    kSave,             // one_to_all / all, collective: meta dir -> file, bytes, crc32 per rank
    kLoad,             // one_to_all / none, collective: meta dir
    kExport,           // one_to_all / none: role rank 0 writes a Hugging Face folder. meta: dir
    kCount
};

const protocol::RoleSpec& actor_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::ActorMethod> {
    static constexpr const char* kName = "actor";
};
