#include "rlpt/core/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>

#include "rlpt/core/error.h"

namespace rlpt {
namespace {

std::atomic<int>& level_storage() {
    static std::atomic<int> level{static_cast<int>(LogLevel::kInfo)};
    return level;
}

std::mutex& write_mutex() {
    static std::mutex m;
    return m;
}

void write_all(int fd, const std::string& s) {
    const char* p = s.data();
    size_t left = s.size();
    while (left > 0) {
        ssize_t n = ::write(fd, p, left);
        if (n <= 0) return;  // nowhere to report a failing log write
        p += n;
        left -= static_cast<size_t>(n);
    }
}

}  // namespace

LogLevel parse_log_level(const std::string& s) {
    if (s == "trace") return LogLevel::kTrace;
    if (s == "debug") return LogLevel::kDebug;
    if (s == "info") return LogLevel::kInfo;
    if (s == "warn" || s == "warning") return LogLevel::kWarn;
    if (s == "error") return LogLevel::kError;
    if (s == "off") return LogLevel::kOff;
    throw ConfigError(fmt::format("unknown log level '{}' (expected trace|debug|info|warn|error|off)", s));
}

const char* log_level_name(LogLevel level) {
    switch (level) {
        case LogLevel::kTrace: return "trace";
        case LogLevel::kDebug: return "debug";
        case LogLevel::kInfo: return "info";
        case LogLevel::kWarn: return "warn";
        case LogLevel::kError: return "error";
        case LogLevel::kOff: return "off";
    }
    return "info";
}

void set_log_level(LogLevel level) { level_storage() = static_cast<int>(level); }
LogLevel log_level() { return static_cast<LogLevel>(level_storage().load()); }
bool log_enabled(LogLevel level) {
    return level != LogLevel::kOff && static_cast<int>(level) >= level_storage().load();
}

void log_line(LogLevel level, const std::string& msg) {
    static const char kLetters[] = {'T', 'D', 'I', 'W', 'E', '?'};
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
    std::tm tm{};
    localtime_r(&t, &tm);
    const auto& id = process_identity();
    std::string who = id.world_rank >= 0 ? fmt::format("r{}", id.world_rank) : std::string("-");
    if (!id.roles.empty()) who += " " + id.roles;
    std::string line = fmt::format("[rlpt {} {} {:02d}:{:02d}:{:02d}.{:03d}] {}\n", who,
                                   kLetters[static_cast<int>(level)], tm.tm_hour, tm.tm_min, tm.tm_sec, ms, msg);
    std::lock_guard<std::mutex> lock(write_mutex());
    write_all(level >= LogLevel::kWarn ? STDERR_FILENO : STDOUT_FILENO, line);
}

}  // namespace rlpt
