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
        roles::actor_spec(), roles::rollout_spec(), roles::reference_spec(), roles::critic_spec(),
        roles::reward_model_spec(),
    };
    return registry;
}

}  // namespace rlpt::app
