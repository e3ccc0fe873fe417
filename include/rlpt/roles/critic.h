#pragma once
// The critic role's remote methods (its dispatch table is in roles/critic.cpp).
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class CriticMethod : uint16_t {
    kPing = 0,  // one_to_all / all: identity of every rank (start-up health check)
    kCount
};

const protocol::RoleSpec& critic_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::CriticMethod> {
    static constexpr const char* kName = "critic";
};
