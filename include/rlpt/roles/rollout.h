#pragma once
// The rollout role: generation. Dispatch table in roles/rollout.cpp.
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class RolloutMethod : uint16_t {
    kPing = 0,        // one_to_all / all: identity of every rank
    kInit,            // one_to_all / none. meta vocab_size. Uses the colocated actor's model when
                      //   this rank hosts the actor, else builds its own (weights come by sync).
    kGenerate,        // dp_split / concat.
                      //   in:  prompt_ids [B, P] int64 left-padded, prompt_mask [B, P]; int field
                      //        sample_index (global index: seeds the sample); meta temperature,
                      //        top_p, top_k, greedy, max_new_tokens, eos_id, pad_id, stop_ids
                      //        ("1,2"), seed, step
                      //   out: prompts [B, P], responses/response_mask/rollout_log_probs [B, R=max_new_tokens],
                      //        input_ids/attention_mask/position_ids [B, P+R], int field
                      //        finish_reason (0 eos, 1 stop, 2 length), int field weight_version
    kReceiveWeights,  // one_to_all / none: receive the actor's weights (with ActorMethod::kSendWeights)
    kCount
};

const protocol::RoleSpec& rollout_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::RolloutMethod> {
    static constexpr const char* kName = "rollout";
};
