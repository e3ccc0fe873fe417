#include "rlpt/roles/reward_model.h"

#include "role_common.h"

namespace rlpt::roles {
namespace {

class RewardModelWorker : public protocol::RoleWorker {};

std::unique_ptr<protocol::RoleWorker> make_reward_model(protocol::WorkerContext&) { return std::make_unique<RewardModelWorker>(); }

}  // namespace

const protocol::RoleSpec& reward_model_spec() {
    static const protocol::RoleSpec spec = [] {
        protocol::RoleSpec s;
        s.name = "reward_model";
        s.method_count = static_cast<uint16_t>(RewardModelMethod::kCount);
        s.factory = make_reward_model;
        s.methods = {detail::ping_spec()};
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
