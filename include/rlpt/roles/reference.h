#pragma once
// The reference role's remote methods (its dispatch table is in roles/reference.cpp).
#include <cstdint>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles {

enum class ReferenceMethod : uint16_t {
    kPing = 0,  // one_to_all / all: identity of every rank (start-up health check)
    kCount
};

const protocol::RoleSpec& reference_spec();

}  // namespace rlpt::roles

template <>
struct rlpt::protocol::RoleOf<rlpt::roles::ReferenceMethod> {
    static constexpr const char* kName = "reference";
};
