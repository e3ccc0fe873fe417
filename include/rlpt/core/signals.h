#pragma once
// Stop requests by signal (DESIGN §6 "Operations"): SIGTERM or SIGUSR1 asks the run to
// stop at the next step boundary, write a checkpoint on every role and exit with code 75
// (app::kExitPreempted) so a requeued job resumes (trainer.resume=auto).
//
// install_stop_signal_handlers() makes SIGTERM and SIGUSR1 non-fatal on the calling process:
// the handler only records the request (async-signal-safe: lock-free atomics, nothing else).
// run_job calls it on every rank right after MPI_Init, so a worker never dies on SIGTERM
// before the controller tells it to stop. Only the controller decides: at each step boundary
// (between calls, never inside one) the trainers ask protocol::Controller::stop_requested(),
// which is true when the controller's own process got a stop signal OR any worker reported
// one: every worker reply carries its process's stop_signal() (wire::ReplyHeader), so a signal
// that reached a single rank (kill -USR1 <pid of rank 3>) still stops the job, at the latest
// one step later. The controller then finishes the step, makes every role checkpoint, sends
// shutdown with exit code 75 and every rank exits 75. Workers keep serving commands until then.
// SIGINT (Ctrl-C) keeps its default action: it ends the run at once.
//
// How the signals reach the ranks (measured with Open MPI 4.1.4 and Slurm 22.05.8, see
// scripts/slurm/README.md for the table):
//   * mpirun forwards SIGUSR1 and SIGUSR2 to every rank ("Forwarding signal 10 to job").
//     SIGTERM to mpirun is NOT forwarded: mpirun aborts the job: SIGCONT to the ranks, then
//     SIGTERM after odls_base_sigkill_timeout (1 s), then SIGKILL after as long again. It
//     cannot be added to ess_base_forward_signals. So: under mpirun stop a run with SIGUSR1.
//   * srun forwards SIGUSR1 (kill -USR1 <srun pid>) to every task. SIGTERM to srun itself
//     cancels the step: tasks get SIGKILL at once and never see SIGTERM (so does `timeout`).
//   * Slurm's own signals go to the tasks of each step directly: `scancel --signal=TERM|USR1`
//     (only that signal), `scancel` and the time limit (SIGCONT + SIGTERM, then SIGKILL after
//     KillWait, often only 10-30 s: too short for a checkpoint of a large model), and
//     `sbatch --signal=USR1@120` (120 s before the limit, to steps started by srun; a program
//     that mpirun starts inside the batch script is in no step and gets nothing: use
//     `--signal=B:USR1@120` with a trap that forwards to mpirun, see rlpt_1node.sbatch).
//
// Thread safety: all functions may be called from any thread; the handler may run on any
// thread of the process. The state is per process (a signal is per process); it is the one
// file-scope mutable state in rlpt, which a signal handler cannot do without.

#include <string>

namespace rlpt {

// Installs the handlers for SIGTERM and SIGUSR1 (sigaction, SA_RESTART so an interrupted
// system call resumes). Idempotent. Throws rlpt::Error if sigaction fails.
void install_stop_signal_handlers();

// True once SIGTERM or SIGUSR1 has arrived since installation (or the last clear).
bool stop_requested();

// The first stop signal received (SIGTERM or SIGUSR1), 0 when none.
int stop_signal();

// "SIGTERM", "SIGUSR1", or "" when no stop was requested.
const char* stop_signal_name();

// "SIGTERM", "SIGUSR1", "" for 0, "signal <n>" otherwise (a number another rank reported).
std::string signal_name(int signo);

// How many stop signals have arrived (the launcher may forward the same request twice, e.g.
// `scancel --full` reaches a rank directly and through mpirun).
int stop_signal_count();

// Forgets a request (tests; a trainer never clears a stop).
void clear_stop_request();

// Records a stop request as the handler would, without a signal (tests, and a controller that
// decides to stop for another reason). `signo` is SIGTERM or SIGUSR1.
void request_stop(int signo);

}  // namespace rlpt
