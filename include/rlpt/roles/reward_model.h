#pragma once
// The reward-model role: a value-head model scoring whole sequences. Table in roles/reward_model.cpp.
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class RewardModelMethod : uint16_t {
    kPing = 0,      // one_to_all / all
    kInit,          // one_to_all / none: loads reward_model.model_path (a *ForSequence/TokenClassification model)
    kComputeScore,  // dp_split / concat: input_ids, attention_mask, position_ids, responses -> rm_scores [B] fp32
    kCount
};

const protocol::RoleSpec& reward_model_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::RewardModelMethod> {
    static constexpr const char* kName = "reward_model";
};
