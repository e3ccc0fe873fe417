#include "rlpt/roles/critic.h"

#include "role_common.h"

namespace rlpt::roles {
namespace {

class CriticWorker : public protocol::RoleWorker {};

std::unique_ptr<protocol::RoleWorker> make_critic(protocol::WorkerContext&) { return std::make_unique<CriticWorker>(); }

}  // namespace

const protocol::RoleSpec& critic_spec() {
    static const protocol::RoleSpec spec = [] {
        protocol::RoleSpec s;
        s.name = "critic";
        s.method_count = static_cast<uint16_t>(CriticMethod::kCount);
        s.factory = make_critic;
        s.methods = {detail::ping_spec()};
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
