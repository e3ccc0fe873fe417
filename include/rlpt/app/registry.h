#pragma once
// Every role's dispatch table, in a fixed order (the order is the role id on the wire).
#include <vector>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::app {
const std::vector<protocol::RoleSpec>& role_registry();
}  // namespace rlpt::app
