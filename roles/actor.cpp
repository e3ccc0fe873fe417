#include "rlpt/roles/actor.h"

#include "role_common.h"

namespace rlpt::roles {
namespace {

class ActorWorker : public protocol::RoleWorker {};

std::unique_ptr<protocol::RoleWorker> make_actor(protocol::WorkerContext&) { return std::make_unique<ActorWorker>(); }

}  // namespace

const protocol::RoleSpec& actor_spec() {
    static const protocol::RoleSpec spec = [] {
        protocol::RoleSpec s;
        s.name = "actor";
        s.method_count = static_cast<uint16_t>(ActorMethod::kCount);
        s.factory = make_actor;
        s.methods = {detail::ping_spec()};
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
