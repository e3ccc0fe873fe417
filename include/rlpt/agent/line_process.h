#pragma once
// A child process that speaks newline-delimited text over its stdin/stdout: the transport of MCP
// servers (agent/mcp_client.h) and of environments (agent/environment.h). Torch-free, MPI-free.
//
// Process tree, so that nothing outlives the rank (no orphans, also when the rank is SIGKILLed):
//   rank ──fork──> guard (own process group, PR_SET_PDEATHSIG=SIGTERM) ──fork──> `/bin/sh -c command`
// The guard only waits for the command; when the rank dies (or stop() signals the group) it kills
// the whole process group with SIGKILL, so a command that spawns its own children (`npx` starting
// `node`) is cleaned up too, unless a grandchild leaves the group on purpose (setsid). The guard
// exits with the command's status (128 + signal when the command was killed).
// PR_SET_PDEATHSIG fires when the *thread* that forked ends: construct (and restart) processes
// from a thread that lives as long as the process (the rollout's main thread); this class starts
// no threads and never calls MPI.
//
// stdin and stdout are one socket (so a write to a process that exited is an error, never a
// SIGPIPE). stderr is inherited (a server's logging lands in the rank's log). stdout carries lines; a
// trailing "\r" is stripped. Not thread-safe: one owner thread.
#include <sys/types.h>

#include <optional>
#include <string>

namespace rlpt::agent {

class LineProcess {
  public:
    // Starts the command; `who` names it in every error ("MCP server 'npx ...'").
    // IoError when pipe/fork fails.
    LineProcess(std::string command, std::string who);
    ~LineProcess();  // stop()
    LineProcess(const LineProcess&) = delete;
    LineProcess& operator=(const LineProcess&) = delete;

    // Writes `line` + "\n", waiting up to timeout_s for room in the pipe. IoError when the
    // process no longer reads its input (it exited) or the write does not finish in time.
    void send_line(const std::string& line, double timeout_s);

    // The fd to poll for input (-1 once closed).
    int read_fd() const { return fd_; }
    // Reads whatever is available without blocking. False once the process closed its stdout
    // (EOF); complete lines stay available to pop_line().
    bool pump();
    // The next complete line read so far, if any.
    std::optional<std::string> pop_line();
    // Waits up to timeout_s for one line (pumping). nullopt on timeout; IoError "<who> exited
    // with status N" / "was killed by signal S" at EOF.
    std::optional<std::string> read_line(double timeout_s);

    // True until EOF on stdout was seen or stop() ran.
    bool running() const { return fd_ >= 0 && !eof_; }
    // "exited with status 3" once it ended (waits up to 1 s for the exit), else "closed its output".
    std::string exit_description();
    pid_t pid() const { return pid_; }
    const std::string& who() const { return who_; }

    // Closes its stdin, gives it `grace_s` to exit, then kills the process group (SIGKILL) and
    // reaps it. Idempotent; never throws.
    void stop(double grace_s = 1.0);

  private:
    std::string command_;
    std::string who_;
    pid_t pid_ = -1;  // the guard; also the process group id
    int fd_ = -1;     // our end of the socket that is its stdin and stdout (non-blocking)
    bool eof_ = false;
    std::string pending_;        // bytes past the last complete line
    std::optional<int> status_;  // waitpid status once reaped
};

// Seconds since an arbitrary fixed point (CLOCK_MONOTONIC).
double monotonic_s();

}  // namespace rlpt::agent
