#include "rlpt/roles/reference.h"

#include "role_common.h"

namespace rlpt::roles {
namespace {

class ReferenceWorker : public protocol::RoleWorker {};

std::unique_ptr<protocol::RoleWorker> make_reference(protocol::WorkerContext&) { return std::make_unique<ReferenceWorker>(); }

}  // namespace

const protocol::RoleSpec& reference_spec() {
    static const protocol::RoleSpec spec = [] {
        protocol::RoleSpec s;
        s.name = "reference";
        s.method_count = static_cast<uint16_t>(ReferenceMethod::kCount);
        s.factory = make_reference;
        s.methods = {detail::ping_spec()};
        return s;
    }();
    return spec;
}

}  // namespace rlpt::roles
