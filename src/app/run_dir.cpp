#include "run_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::app {
namespace {
namespace fs = std::filesystem;

constexpr const char* kLockFile = "rlpt.lock";

std::string env_or(const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : fallback;
}

std::string host_name() {
    char buf[256] = {0};
    if (gethostname(buf, sizeof buf - 1) != 0) return "?";
    return buf;
}

std::map<std::string, std::string> parse_lock(const std::string& text) {
    std::map<std::string, std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string value = line.substr(colon + 1);
        if (!value.empty() && value[0] == ' ') value.erase(0, 1);
        out[line.substr(0, colon)] = value;
    }
    return out;
}

std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The state letter of /proc/<pid>/stat (R, S, D, Z, X, ...), or 0 when it cannot be read.
char process_state(long pid) {
    const std::string stat = read_text(fmt::format("/proc/{}/stat", pid));
    // "pid (comm) S ...": comm may hold spaces and parentheses, so the state follows the last ')'.
    const size_t close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) return 0;
    return stat[close + 2];
}

// Why the holder of lock `held` is known to be gone, or "" when it may still run.
std::string stale_reason(const std::map<std::string, std::string>& held) {
    auto get = [&](const char* k) {
        auto it = held.find(k);
        return it == held.end() ? std::string() : it->second;
    };
    const std::string job = env_or("SLURM_JOB_ID", "");
    if (!job.empty() && get("slurm_job") == job) {
        const long mine = std::atol(env_or("SLURM_RESTART_COUNT", "0").c_str());
        if (std::atol(get("slurm_restart").c_str()) < mine) return "an earlier start of this Slurm job";
    }
    if (get("host") != host_name()) return "";
    const long pid = std::atol(get("pid").c_str());
    if (pid <= 0) return "no process id in it";
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return "its process is gone";
    // A killed process whose parent has not reaped it yet still answers kill(pid, 0). Where PID 1
    // reaps late or never (containers without an init, some Slurm container plugins), every rank
    // of a job killed with SIGKILL stays a zombie: it is dead, and its lock is stale.
    if (const char state = process_state(pid); state == 'Z' || state == 'X') {
        return "its process is gone (a zombie: it died and has not been reaped)";
    }
    std::string comm = read_text(fmt::format("/proc/{}/comm", pid));
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    if (!comm.empty() && comm.rfind("rlpt", 0) != 0) return "its process id now belongs to '" + comm + "'";
    return "";
}

}  // namespace

std::string checkpoint_root(const std::string& run_dir) { return (fs::path(run_dir) / "checkpoints").string(); }

RunLock RunLock::acquire(const std::string& run_dir) {
    const std::string path = (fs::path(run_dir) / kLockFile).string();
    char when[32];
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    const std::string contents =
        fmt::format("host: {}\npid: {}\nstarted: {}\nslurm_job: {}\nslurm_restart: {}\n", host_name(), ::getpid(), when,
                    env_or("SLURM_JOB_ID", ""), env_or("SLURM_RESTART_COUNT", "0"));
    for (int attempt = 0; attempt < 2; ++attempt) {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd >= 0) {
            const bool ok = ::write(fd, contents.data(), contents.size()) == static_cast<ssize_t>(contents.size());
            ::close(fd);
            if (!ok) {
                const int err = errno;
                ::unlink(path.c_str());
                RLPT_THROW(IoError, "{} while writing the run lock {} ({})", io_error_cause(err), path,
                           std::strerror(err));
            }
            return RunLock(path, contents);
        }
        if (errno != EEXIST) {
            const int err = errno;
            RLPT_THROW(IoError, "{} while creating the run lock {} ({})", io_error_cause(err), path,
                       std::strerror(err));
        }
        const std::string text = read_text(path);
        const auto held = parse_lock(text);
        const std::string why = attempt == 0 ? stale_reason(held) : "";
        if (why.empty()) {
            auto get = [&](const char* k) {
                auto it = held.find(k);
                return it == held.end() ? std::string("?") : it->second;
            };
            throw ConfigError(fmt::format(
                "run directory {} is in use by another rlpt job (host {}, pid {}, started {}{}; lock file {}). Two "
                "jobs on one run directory would overwrite each other's checkpoints and metrics: give this one another "
                "trainer.experiment_name or trainer.output_dir, or, if that job is gone (it ran on a node that "
                "failed), remove the lock file",
                run_dir, get("host"), get("pid"), get("started"),
                get("slurm_job").empty() || get("slurm_job") == "?" ? "" : ", Slurm job " + get("slurm_job"), path));
        }
        RLPT_LOG_WARN("replacing the stale run lock {} ({}): {}", path, why, [&] {
            std::string one = text;
            for (char& ch : one)
                if (ch == '\n') ch = ' ';
            return one;
        }());
        ::unlink(path.c_str());
    }
    throw ConfigError(
        fmt::format("run directory {}: another job took the run lock {} at the same time", run_dir, path));
}

RunLock::~RunLock() {
    if (path_.empty()) return;
    // Only our own lock: a job that found it stale may have replaced it meanwhile.
    if (read_text(path_) == contents_) ::unlink(path_.c_str());
}

std::optional<ckpt::CheckpointInfo> checkpoint_to_resume(const Config& c, const std::string& run_dir) {
    const std::string& mode = c.trainer.resume;
    if (mode == "disable") return std::nullopt;
    if (mode == "auto") {
        const std::string root = checkpoint_root(run_dir);
        auto info = ckpt::newest_valid_checkpoint(root);
        if (info) return info;
        const auto damaged = ckpt::list_damaged_checkpoints(root);
        if (damaged.empty()) return std::nullopt;  // a new run
        std::string names;
        for (const auto& d : damaged) names += (names.empty() ? "" : ", ") + d;
        throw ConfigError(fmt::format(
            "trainer.resume=auto: no valid checkpoint is left in {} (damaged, moved aside: {}); refusing to train from "
            "scratch over this run's history. To start this run over anyway, pass trainer.resume=disable (the old "
            "metrics.jsonl is kept as metrics.jsonl.<time>.old), or use another trainer.experiment_name",
            root, names));
    }
    RLPT_CHECK_KIND(ConfigError, ckpt::is_complete(mode),
                    "trainer.resume={}: not a complete checkpoint directory (no valid COMPLETE manifest)", mode);
    ckpt::verify_checkpoint(mode);
    ckpt::Manifest m = ckpt::read_manifest(mode);
    return ckpt::CheckpointInfo{m.step, mode, std::move(m)};
}

}  // namespace rlpt::app
