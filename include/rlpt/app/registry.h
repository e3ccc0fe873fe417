#pragma once
// Every role's dispatch table, in a fixed order (the order is the role id on the wire).
#include <cstdint>
#include <string>
#include <vector>

#include "rlpt/protocol/role_spec.h"

namespace rlpt::app {
const std::vector<protocol::RoleSpec>& role_registry();
// The registry's role names, in its order (what comm::compute_placement places).
std::vector<std::string> role_names();
// The id of `role`'s method named `method` (InternalError when the table has none).
uint16_t method_id(const std::string& role, const std::string& method);
}  // namespace rlpt::app
