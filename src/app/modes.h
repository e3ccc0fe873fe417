#pragma once
// What the controller runs, per trainer.mode. Private to src/app.
#include <string>

#include "rlpt/comm/topology.h"
#include "rlpt/config/config.h"
#include "rlpt/protocol/runtime.h"

namespace rlpt::app {

struct RunContext {
    const Config* config = nullptr;
    const comm::Topology* topology = nullptr;
    std::string run_dir;
};

// Runs the configured mode on the controller, after giving the roles' settings to `ctl`
// (app/role_settings.h); returns the process exit code.
int run_mode(protocol::Controller& ctl, const RunContext& run);

// Pings every placed role and logs one line per rank (host, node, threads, roles).
void check_ranks(protocol::Controller& ctl, const RunContext& run);

}  // namespace rlpt::app
