#pragma once
// Running `rlpt CONFIG [key=value ...]` as an MPI job: start-up (config on rank 0 and
// broadcast, placement, communicators, table agreement), the mode's body on the controller
// and the worker loop elsewhere, and the error policy:
//   * a broken config or impossible layout: one message from rank 0, every rank exits 2;
//   * any error after start-up: the rank that sees it prints it (for worker errors that is
//     the controller, which names rank, role, method and step) and aborts the whole job.
#include <string>
#include <vector>

namespace rlpt::app {

// Exit codes (documented in the README).
constexpr int kExitOk = 0;
constexpr int kExitError = 1;        // an error during the run
constexpr int kExitConfig = 2;       // bad config / command line / layout
constexpr int kExitWorkerError = 3;  // a worker reported an error
constexpr int kExitTimeout = 4;      // a rank stopped answering (watchdog)
constexpr int kExitPreempted = 75;   // stopped by SIGTERM/SIGUSR1 after writing a checkpoint (EX_TEMPFAIL)

struct JobOptions {
    std::string config_path;
    std::vector<std::string> overrides;
};

int run_job(const JobOptions& opts, int* argc, char*** argv);

}  // namespace rlpt::app
