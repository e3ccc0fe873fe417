#include "role_common.h"

#include <unistd.h>

#include "rlpt/core/cpu_cores.h"

namespace rlpt::roles::detail {

Batch ping(protocol::RoleWorker&, protocol::WorkerContext& ctx, const Batch&) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    const auto& placement = ctx.topology->placement();
    Batch out(1);
    out.set_ints("world_rank", {ctx.world_rank});
    out.set_ints("node", {placement.node_of_rank[static_cast<size_t>(ctx.world_rank)]});
    out.set_ints("local_rank", {placement.local_rank(ctx.world_rank)});
    out.set_ints("threads", {static_cast<int64_t>(torch::get_num_threads())});
    out.set_strings("cpus", {affinity_list()});  // the affinity mask (mpirun --bind-to/--rankfile, taskset, Slurm)
    out.set_ints("pid", {static_cast<int64_t>(getpid())});
    out.set_strings("host", {host});
    std::string roles;
    for (const auto& r : ctx.topology->hosted_roles()) roles += (roles.empty() ? "" : ",") + r;
    out.set_strings("roles", {roles});
    return out;
}

protocol::MethodSpec ping_spec() {
    return protocol::method(0, "ping", ping)
        .every_output({protocol::int_field("world_rank"), protocol::string_field("host")})
        .timeout(120);
}

}  // namespace rlpt::roles::detail
