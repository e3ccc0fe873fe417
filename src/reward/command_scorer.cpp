#include "rlpt/reward/command_scorer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "rlpt/core/error.h"

namespace rlpt::reward {

namespace {

std::string describe_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return fmt::format("was killed by signal {}", WTERMSIG(status));
    return "stopped";
}

ScoreResult parse_reply(const std::string& line, const std::string& who, int64_t index) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
        RLPT_THROW(ValueError, "{}: sample {}: the reply is not JSON: {}", who, index, line.substr(0, 200));
    }
    ScoreResult r;
    if (j.is_number()) {
        r.score = j.get<double>();
    } else if (j.is_boolean()) {
        r.score = j.get<bool>() ? 1.0 : 0.0;
    } else if (j.is_object()) {
        if (auto e = j.find("error"); e != j.end()) {
            RLPT_THROW(ValueError, "{}: sample {}: the reward function failed: {}", who, index,
                       e->is_string() ? e->get<std::string>() : e->dump());
        }
        auto s = j.find("score");
        RLPT_CHECK_KIND(ValueError, s != j.end() && (s->is_number() || s->is_boolean()),
                        "{}: sample {}: the reply has no numeric \"score\": {}", who, index, line.substr(0, 200));
        r.score = s->is_boolean() ? (s->get<bool>() ? 1.0 : 0.0) : s->get<double>();
        for (auto it = j.begin(); it != j.end(); ++it) {
            if (it.key() == "score") continue;
            if (it.key() == "pred" && it->is_string()) r.pred = it->get<std::string>();
            if (!it->is_number() && !it->is_boolean()) continue;
            const double v = it->is_boolean() ? (it->get<bool>() ? 1.0 : 0.0) : it->get<double>();
            if (it.key() == "acc") r.acc = v;
            else r.extra[it.key()] = v;
        }
    } else {
        RLPT_THROW(ValueError, "{}: sample {}: expected a number or an object with \"score\", got {}", who, index,
                   line.substr(0, 200));
    }
    RLPT_CHECK_KIND(ValueError, std::isfinite(r.score) && (!r.acc || std::isfinite(*r.acc)),
                    "{}: sample {}: the score is not finite: {}", who, index, line.substr(0, 200));
    return r;
}

}  // namespace

// The running program: its pid (also its process group) and our end of the socket.
struct CommandScorer::Process {
    pid_t pid = -1;
    int fd = -1;
    std::string pending;  // bytes read past the last complete line

    ~Process() { stop(); }

    // Closes its stdin, gives it 2 s to exit, then kills its process group.
    void stop() {
        if (fd >= 0) ::close(fd);
        fd = -1;
        if (pid <= 0) return;
        int status = 0;
        for (int i = 0; i < 200; ++i) {
            if (::waitpid(pid, &status, WNOHANG) == pid) {
                ::kill(-pid, SIGKILL);  // anything it left in its group
                pid = -1;
                return;
            }
            ::usleep(10000);
        }
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        pid = -1;
    }

    // "exited with status 1" once it has ended (waits up to 1 s), else "is still running".
    std::string status_text() {
        int status = 0;
        for (int i = 0; i < 100 && pid > 0; ++i) {
            if (::waitpid(pid, &status, WNOHANG) == pid) {
                pid = -1;
                return describe_status(status);
            }
            ::usleep(10000);
        }
        return "closed its output";
    }
};

CommandScorer::CommandScorer(std::string command, double timeout_s)
    : command_(std::move(command)), timeout_s_(timeout_s) {
    RLPT_CHECK_KIND(ConfigError, !command_.empty(), "command scorer: the command is empty (set reward.command)");
    RLPT_CHECK_KIND(ConfigError, timeout_s_ > 0, "command scorer: timeout_s must be > 0 (got {})", timeout_s_);
}

CommandScorer::~CommandScorer() = default;

std::string CommandScorer::name() const { return "command(" + command_ + ")"; }

ScoreResult CommandScorer::score(const ScoreRequest& request) const { return score_many({request}).at(0); }

std::vector<ScoreResult> CommandScorer::score_many(const std::vector<ScoreRequest>& requests) const {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string who = fmt::format("reward command '{}'", command_);
    if (requests.empty()) return {};
    if (!proc_) {
        int sv[2];
        RLPT_CHECK_KIND(IoError, ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0,
                        "{}: socketpair failed: {}", who, std::strerror(errno));
        const pid_t pid = ::fork();
        if (pid < 0) {
            ::close(sv[0]);
            ::close(sv[1]);
            RLPT_THROW(IoError, "{}: fork failed: {}", who, std::strerror(errno));
        }
        if (pid == 0) {  // child: only async-signal-safe calls until exec
            ::setpgid(0, 0);
            ::dup2(sv[1], 0);
            ::dup2(sv[1], 1);
            ::execl("/bin/sh", "sh", "-c", command_.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
        ::setpgid(pid, pid);  // (also in the child: whichever runs first)
        ::close(sv[1]);
        proc_ = std::make_unique<Process>();
        proc_->pid = pid;
        proc_->fd = sv[0];
        ::fcntl(proc_->fd, F_SETFL, ::fcntl(proc_->fd, F_GETFL) | O_NONBLOCK);
    }
    std::string out;
    for (const auto& r : requests) {
        nlohmann::json j;
        j["data_source"] = std::string(r.data_source);
        j["solution_str"] = std::string(r.solution);
        j["ground_truth"] = std::string(r.ground_truth);
        j["extra_info"] = r.extra_info ? *r.extra_info : nlohmann::json::object();
        j["index"] = r.index;
        out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    }
    std::vector<std::string> lines;
    auto fail = [&](const std::string& why) {
        std::string msg = fmt::format("{} {} after {} of {} replies", who, why, lines.size(), requests.size());
        proc_.reset();  // kills it; the next batch starts a fresh process
        throw ValueError(msg);
    };
    size_t written = 0;
    using Clock = std::chrono::steady_clock;
    const auto deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    char buf[65536];
    while (lines.size() < requests.size()) {
        const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
        if (left <= 0)
            fail(fmt::format("did not answer within {} s (reward.command_timeout_s); killed it", timeout_s_));
        pollfd p{proc_->fd, static_cast<short>(POLLIN | (written < out.size() ? POLLOUT : 0)), 0};
        const int rc = ::poll(&p, 1, static_cast<int>(std::min(left, 1.0) * 1000) + 1);
        if (rc < 0 && errno != EINTR) fail(fmt::format("poll failed: {}", std::strerror(errno)));
        if (rc <= 0) continue;
        if ((p.revents & POLLOUT) && written < out.size()) {
            const ssize_t n = ::send(proc_->fd, out.data() + written, out.size() - written, MSG_NOSIGNAL);
            if (n > 0) written += static_cast<size_t>(n);
            else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                fail(fmt::format("stopped reading its input ({}) and {}", std::strerror(errno), proc_->status_text()));
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            const ssize_t n = ::recv(proc_->fd, buf, sizeof(buf), 0);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                fail(proc_->status_text());
            }
            if (n > 0) {
                proc_->pending.append(buf, static_cast<size_t>(n));
                size_t start = 0;
                for (size_t nl; (nl = proc_->pending.find('\n', start)) != std::string::npos; start = nl + 1) {
                    std::string line = proc_->pending.substr(start, nl - start);
                    if (!line.empty() && line.back() == '\r') line.pop_back();
                    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(std::move(line));
                }
                proc_->pending.erase(0, start);
            }
        }
    }
    if (lines.size() > requests.size()) fail("sent more replies than requests");
    std::vector<ScoreResult> results;
    results.reserve(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) results.push_back(parse_reply(lines[i], who, requests[i].index));
    return results;
}

}  // namespace rlpt::reward
