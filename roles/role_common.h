#pragma once
// Pieces every role's table shares (private to roles/).
#include "rlpt/protocol/role_spec.h"

namespace rlpt::roles::detail {

// kPing: one_to_all / all. Each rank answers with its identity: world rank, host, node,
// local rank, device, torch threads, roles hosted. Used at start-up to check every rank is
// alive and to log the placement with host names.
Batch ping(protocol::RoleWorker& self, protocol::WorkerContext& ctx, const Batch& in);
protocol::MethodSpec ping_spec();

}  // namespace rlpt::roles::detail
