#include "rlpt/agent/line_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "rlpt/core/error.h"

namespace rlpt::agent {
namespace {

void kill_own_group(int) { ::kill(0, SIGKILL); }

// Closes every fd >= 3 (the rank's MPI sockets and files must not leak into tools).
void close_fds_from_3() {
#ifdef SYS_close_range
    if (::syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
#endif
    for (int fd = 3; fd < 4096; ++fd) ::close(fd);
}

// The guard (see the header): runs in the child of fork(), so only async-signal-safe calls.
[[noreturn]] void run_guard(int sock, pid_t parent, const char* command) {
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction sa {};
    sa.sa_handler = kill_own_group;
    ::sigaction(SIGTERM, &sa, nullptr);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) kill_own_group(0);  // the rank died before prctl
    ::dup2(sock, 0);
    ::dup2(sock, 1);
    const pid_t cmd = ::fork();
    if (cmd == 0) {
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        ::sigaction(SIGTERM, &dfl, nullptr);
        close_fds_from_3();
        ::execl("/bin/sh", "sh", "-c", command, static_cast<char*>(nullptr));
        ::_exit(127);
    }
    // The guard keeps no end of the socket: EOF reaches the rank when the command ends.
    const int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    close_fds_from_3();
    if (cmd < 0) ::_exit(127);
    int status = 0;
    while (::waitpid(cmd, &status, 0) < 0 && errno == EINTR) {
    }
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
}

std::string describe_status(int status) {
    if (WIFEXITED(status)) {
        const int code = WEXITSTATUS(status);
        return code > 128 ? fmt::format("was killed by signal {}", code - 128)
                          : fmt::format("exited with status {}", code);
    }
    if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
    return "stopped";
}

}  // namespace

double monotonic_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

LineProcess::LineProcess(std::string command, std::string who) : command_(std::move(command)), who_(std::move(who)) {
    int sv[2];
    RLPT_CHECK_KIND(IoError, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "{}: socketpair failed: {}",
                    who_, std::strerror(errno));
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
        ::close(sv[0]);
        ::close(sv[1]);
        RLPT_THROW(IoError, "{}: fork failed: {}", who_, std::strerror(errno));
    }
    if (pid == 0) run_guard(sv[1], parent, command_.c_str());
    ::setpgid(pid, pid);  // (also in the child: whichever runs first)
    ::close(sv[1]);
    pid_ = pid;
    fd_ = sv[0];
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
}

LineProcess::~LineProcess() { stop(); }

void LineProcess::send_line(const std::string& line, double timeout_s) {
    RLPT_CHECK_KIND(IoError, running(), "{} {}", who_, exit_description());
    const std::string data = line + "\n";
    size_t done = 0;
    const double deadline = monotonic_s() + timeout_s;
    while (done < data.size()) {
        const ssize_t n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += static_cast<size_t>(n);
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            RLPT_THROW(IoError, "{} stopped reading its input ({}) and {}", who_, std::strerror(errno),
                       exit_description());
        const double left = deadline - monotonic_s();
        RLPT_CHECK_KIND(IoError, left > 0, "{} did not read its input within {} s", who_, timeout_s);
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    }
}

bool LineProcess::pump() {
    if (fd_ < 0 || eof_) return false;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
        if (n > 0) {
            pending_.append(buf, static_cast<size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        eof_ = true;  // 0 (EOF) or a hard error
        return false;
    }
}

std::optional<std::string> LineProcess::pop_line() {
    for (;;) {
        const size_t nl = pending_.find('\n');
        if (nl == std::string::npos) return std::nullopt;
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") != std::string::npos) return line;
    }
}

std::optional<std::string> LineProcess::read_line(double timeout_s) {
    const double deadline = monotonic_s() + timeout_s;
    for (;;) {
        if (auto line = pop_line()) return line;
        if (!pump()) {
            if (auto line = pop_line()) return line;
            RLPT_THROW(IoError, "{} {}", who_, exit_description());
        }
        if (auto line = pop_line()) return line;
        const double left = deadline - monotonic_s();
        if (left <= 0) return std::nullopt;
        pollfd p{fd_, POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
    }
}

std::string LineProcess::exit_description() {
    if (!status_ && pid_ > 0) {
        int status = 0;
        for (int i = 0; i < 100; ++i) {
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                status_ = status;
                ::kill(-pid_, SIGKILL);  // anything it left in its group
                break;
            }
            ::usleep(10000);
        }
    }
    return status_ ? describe_status(*status_) : "closed its output";
}

void LineProcess::stop(double grace_s) {
    if (fd_ >= 0) {
        ::shutdown(fd_, SHUT_WR);  // EOF on its stdin: the polite request to exit
        ::close(fd_);
        fd_ = -1;
    }
    if (pid_ <= 0) return;
    if (!status_) {
        int status = 0;
        const double deadline = monotonic_s() + grace_s;
        while (monotonic_s() < deadline) {
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                status_ = status;
                break;
            }
            ::usleep(5000);
        }
    }
    ::kill(-pid_, SIGKILL);  // the guard, the command and anything they started in the group
    if (!status_) {
        int status = 0;
        while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
        }
        status_ = status;
    }
    pid_ = -1;
}

}  // namespace rlpt::agent
