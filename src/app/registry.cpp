// The one place that lists every role (STYLE §5): reading this file and the role headers
// tells you every remote method, how its data moves and what it returns.
#include "rlpt/app/registry.h"

#include "rlpt/roles/actor.h"
#include "rlpt/roles/critic.h"
#include "rlpt/roles/reference.h"
#include "rlpt/roles/reward_model.h"
#include "rlpt/roles/rollout.h"

namespace rlpt::app {

const std::vector<protocol::RoleSpec>& role_registry() {
    static const std::vector<protocol::RoleSpec> registry{
        roles::actor_spec(),  roles::rollout_spec(),      roles::reference_spec(),
        roles::critic_spec(), roles::reward_model_spec(),
    };
    return registry;
}

std::vector<std::string> role_names() {
    std::vector<std::string> names;
    for (const auto& spec : role_registry()) names.push_back(spec.name);
    return names;
}

uint16_t method_id(const std::string& role, const std::string& method) {
    const auto& reg = role_registry();
    const int r = protocol::find_role(reg, role);
    RLPT_CHECK_KIND(InternalError, r >= 0, "no role '{}' in the registry", role);
    for (const auto& m : reg[static_cast<size_t>(r)].methods)
        if (m.name == method) return m.id;
    throw InternalError(fmt::format("role '{}' has no method '{}'", role, method));
}

}  // namespace rlpt::app
