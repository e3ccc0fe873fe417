#pragma once
// Logging: one line per call, every line tagged with world rank and hosted roles
// (from process_identity()), a level letter and wall-clock time:
//   [rlpt r2 actor,rollout I 12:03:04.512] step 3 done
// Info and below go to stdout, warnings and errors to stderr; each line is written
// with one write() so lines from different ranks do not interleave mid-line.
// Thread-safe. Torch-free.

#include <fmt/format.h>

#include <string>

namespace rlpt {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

// Parses "trace|debug|info|warn|error|off"; throws ConfigError on anything else.
LogLevel parse_log_level(const std::string& s);
const char* log_level_name(LogLevel level);

void set_log_level(LogLevel level);
LogLevel log_level();
bool log_enabled(LogLevel level);

// Write one already formatted line at `level`.
void log_line(LogLevel level, const std::string& msg);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
    if (!log_enabled(level)) return;
    log_line(level, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace rlpt

#define RLPT_LOG_TRACE(...) ::rlpt::log(::rlpt::LogLevel::kTrace, __VA_ARGS__)
#define RLPT_LOG_DEBUG(...) ::rlpt::log(::rlpt::LogLevel::kDebug, __VA_ARGS__)
#define RLPT_LOG_INFO(...) ::rlpt::log(::rlpt::LogLevel::kInfo, __VA_ARGS__)
#define RLPT_LOG_WARN(...) ::rlpt::log(::rlpt::LogLevel::kWarn, __VA_ARGS__)
#define RLPT_LOG_ERROR(...) ::rlpt::log(::rlpt::LogLevel::kError, __VA_ARGS__)
