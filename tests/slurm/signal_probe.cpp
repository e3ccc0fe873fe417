// rlpt_signal_probe [--steps N] [--step-ms M] [other args ignored]: an MPI program that stops
// the way the rlpt trainer does, for testing how signals reach the ranks under mpirun, srun
// and sbatch.
//
// Every rank installs the stop handlers (rlpt/core/signals.h), then runs N steps (600) of M ms
// (100) of "work". At each step boundary rank 0 (the controller) checks its flag and
// broadcasts the decision; on a stop every rank reports which stop signal it saw itself, rank 0
// prints one summary line and all ranks exit 75 (app::kExitPreempted). Without a stop the
// probe exits 0 after the last step. Output (rank 0):
//   signal_probe: 3 ranks ready (pid 123 456 789)
//   signal_probe: stop at step 12 by SIGUSR1; signals seen per rank: 0=SIGUSR1 1=SIGUSR1 2=SIGUSR1
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "rlpt/app/job.h"
#include "rlpt/comm/mpi.h"
#include "rlpt/core/signals.h"

namespace {

std::string name_of(int64_t signo) {
    if (signo == SIGTERM) return "SIGTERM";
    if (signo == SIGUSR1) return "SIGUSR1";
    return signo == 0 ? "none" : "signal " + std::to_string(signo);
}

int run(int argc, char** argv) {
    // Other arguments are ignored, so the probe can stand in for rlpt in the sbatch examples.
    int64_t steps = 600, step_ms = 100;
    for (int i = 1; i + 1 < argc; ++i) {
        if (!std::strcmp(argv[i], "--steps")) steps = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--step-ms")) step_ms = std::atoll(argv[i + 1]);
    }
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    rlpt::install_stop_signal_handlers();
    auto world = rlpt::comm::Communicator::world();
    auto pids = world.allgather_i64(static_cast<int64_t>(getpid()));
    if (world.rank() == 0) {
        std::string list;
        for (auto p : pids) list += " " + std::to_string(p);
        std::printf("signal_probe: %d ranks ready (pid%s)\n", world.size(), list.c_str());
        std::fflush(stdout);
    }
    for (int64_t step = 0; step < steps; ++step) {
        std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        int64_t decision = world.rank() == 0 ? rlpt::stop_signal() : 0;
        world.bcast(&decision, sizeof(decision), 0);
        if (decision == 0) continue;
        auto seen = world.allgather_i64(rlpt::stop_signal());
        if (world.rank() == 0) {
            std::string per_rank;
            for (size_t r = 0; r < seen.size(); ++r) per_rank += " " + std::to_string(r) + "=" + name_of(seen[r]);
            std::printf("signal_probe: stop at step %lld by %s; signals seen per rank:%s\n",
                        static_cast<long long>(step), name_of(decision).c_str(), per_rank.c_str());
            std::fflush(stdout);
        }
        return rlpt::app::kExitPreempted;
    }
    if (world.rank() == 0) std::printf("signal_probe: finished %lld steps without a stop request\n",
                                       static_cast<long long>(steps));
    return rlpt::app::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "signal_probe: %s\n", e.what());
        return 1;
    }
}
