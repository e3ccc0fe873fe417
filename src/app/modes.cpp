#include "modes.h"

#include <map>

#include "rl_trainer.h"
#include "rlpt/app/role_settings.h"
#include "rlpt/core/log.h"
#include "sft_trainer.h"

namespace rlpt::app {

void check_ranks(protocol::Controller& ctl, const RunContext& run) {
    std::map<int64_t, std::string> lines;
    Batch none(0);
    for (const auto& layout : run.topology->placement().roles) {
        // Method 0 is kPing in every role's table.
        auto p = ctl.submit_raw(ctl.role_index(layout.role), 0, &none, nullptr);
        for (const Batch& b : ctl.wait_all(p)) {
            int64_t rank = b.ints("world_rank")[0];
            lines[rank] =
                fmt::format("  rank {:>3}  host {}  node {}  local rank {}  threads {}  cpus {}  pid {}  roles {}",
                            rank, b.strings("host")[0], b.ints("node")[0], b.ints("local_rank")[0],
                            b.ints("threads")[0], b.strings("cpus")[0], b.ints("pid")[0], b.strings("roles")[0]);
        }
    }
    std::string all;
    for (const auto& kv : lines) all += "\n" + kv.second;
    RLPT_LOG_INFO("all {} worker rank(s) answered:{}", lines.size(), all);
}

int run_mode(protocol::Controller& ctl, const RunContext& run) {
    check_ranks(ctl, run);
    give_role_settings(ctl, *run.config);  // resolved once, before any role's kInit
    if (run.config->trainer.mode == "sft") return run_sft(ctl, run);
    RlTrainer trainer(ctl, run);
    return trainer.run();
}

}  // namespace rlpt::app
