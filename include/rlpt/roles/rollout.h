#pragma once
// The rollout role's remote methods (its dispatch table is in roles/rollout.cpp).
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class RolloutMethod : uint16_t {
    kPing = 0,  // one_to_all / all: identity of every rank (start-up health check)
    kCount
};

const protocol::RoleSpec& rollout_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::RolloutMethod> {
    static constexpr const char* kName = "rollout";
};
