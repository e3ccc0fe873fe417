#include "rlpt/roles/rollout.h"

#include "role_common.h"

namespace rlpt::roles {
namespace {

class RolloutWorker : public protocol::RoleWorker {};

std::unique_ptr<protocol::RoleWorker> make_rollout(protocol::WorkerContext&) { return std::make_unique<RolloutWorker>(); }

}  // namespace

const protocol::RoleSpec& rollout_spec() {
    static const protocol::RoleSpec spec = [] {
        protocol::RoleSpec s;
        s.name = "rollout";
        s.method_count = static_cast<uint16_t>(RolloutMethod::kCount);
        s.factory = make_rollout;
        s.methods = {detail::ping_spec()};
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
