#pragma once
// The actor role's remote methods (its dispatch table is in roles/actor.cpp).
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class ActorMethod : uint16_t {
    kPing = 0,  // one_to_all / all: identity of every rank (start-up health check)
    kCount
};

const protocol::RoleSpec& actor_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::ActorMethod> {
    static constexpr const char* kName = "actor";
};
