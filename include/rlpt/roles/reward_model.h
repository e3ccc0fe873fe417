#pragma once
// The reward_model role's remote methods (its dispatch table is in roles/reward_model.cpp).
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class RewardModelMethod : uint16_t {
    kPing = 0,  // one_to_all / all: identity of every rank (start-up health check)
    kCount
};

const protocol::RoleSpec& reward_model_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::RewardModelMethod> {
    static constexpr const char* kName = "reward_model";
};
