#pragma once
// One exception hierarchy for rlpt (STYLE §3). Torch-free, MPI-free.
//
// Every Error carries the process identity (world rank and hosted roles, as set by
// set_process_identity), the source location that raised it and, for checks on a
// library call, the call's text. what() is a single human-readable line:
//   "rank 3 [actor]: ConfigError: <message> (at src/config/config.cpp:120)"
// message() is the bare message, for code that adds its own context.

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace rlpt {

enum class ErrorKind { kGeneric, kConfig, kComm, kCuda, kIo, kValue, kInternal, kTimeout };

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
  public:
    Error(ErrorKind kind, std::string message, const char* file = nullptr, int line = 0, std::string call = {});

    ErrorKind kind() const { return kind_; }
    const std::string& message() const { return message_; }
    const std::string& where() const { return where_; }  // "file:line" or empty
    const std::string& call() const { return call_; }    // failing call text or empty

  private:
    ErrorKind kind_;
    std::string message_;
    std::string where_;
    std::string call_;
};

// User-facing errors: a broken config file, a bad override, an impossible placement.
struct ConfigError : Error {
    explicit ConfigError(std::string m, const char* f = nullptr, int l = 0)
        : Error(ErrorKind::kConfig, std::move(m), f, l) {}
};
// MPI / NCCL failures, protocol violations, peers that disagree.
struct CommError : Error {
    explicit CommError(std::string m, const char* f = nullptr, int l = 0, std::string call = {})
        : Error(ErrorKind::kComm, std::move(m), f, l, std::move(call)) {}
};
struct CudaError : Error {
    explicit CudaError(std::string m, const char* f = nullptr, int l = 0, std::string call = {})
        : Error(ErrorKind::kCuda, std::move(m), f, l, std::move(call)) {}
};
// Files: missing, unreadable, malformed (safetensors, tokenizer.json, JSONL, HDF5).
struct IoError : Error {
    explicit IoError(std::string m, const char* f = nullptr, int l = 0, std::string call = {})
        : Error(ErrorKind::kIo, std::move(m), f, l, std::move(call)) {}
};
// Bad values at run time that are the caller's fault: wrong tensor shapes, bad arguments.
struct ValueError : Error {
    explicit ValueError(std::string m, const char* f = nullptr, int l = 0)
        : Error(ErrorKind::kValue, std::move(m), f, l) {}
};
// A broken invariant inside rlpt: a bug, never the user's fault.
struct InternalError : Error {
    explicit InternalError(std::string m, const char* f = nullptr, int l = 0)
        : Error(ErrorKind::kInternal, std::move(m), f, l) {}
};
// A wait that passed its deadline (watchdog).
struct TimeoutError : Error {
    explicit TimeoutError(std::string m, const char* f = nullptr, int l = 0)
        : Error(ErrorKind::kTimeout, std::move(m), f, l) {}
};

// Identity stamped on errors and log lines. Set once in main() after MPI is up
// (and again once roles are known); read-only afterwards.
struct ProcessIdentity {
    int world_rank = -1;  // -1: before MPI / single process tools
    std::string roles;    // "controller", "actor,rollout", ...
};
void set_process_identity(ProcessIdentity id);
const ProcessIdentity& process_identity();

// What an errno from a file operation means for the user, said first in file-system errors:
// "disk full" (ENOSPC), "disk quota exceeded", "read-only file system", "permission denied",
// "a directory in the way" (EISDIR), "missing directory", "I/O error" (EIO); otherwise
// "file-system error". Use as "<cause> while writing <path> (<strerror>)".
std::string io_error_cause(int err);
// The first "errno = N" in a library's error text (HDF5 prints it so), or 0.
int errno_in_text(const std::string& text);

// Wrap an error with context, keeping its kind: rethrow_with_context("loading critic", e)
// gives "loading critic: <original message>".
[[noreturn]] void rethrow_with_context(const std::string& context, const Error& e);

}  // namespace rlpt

// RLPT_CHECK(cond, "fmt {}", args...)  -> ValueError when cond is false.
// RLPT_CHECK_KIND(Kind, cond, ...)     -> the given Error subclass.
// RLPT_ASSERT(cond)                    -> InternalError (never compiled out, unlike assert()).
// RLPT_THROW(Kind, "fmt", args...)     -> throw unconditionally.
// The message is only formatted on failure.
#define RLPT_THROW(Kind, ...) throw ::rlpt::Kind(::fmt::format(__VA_ARGS__), __FILE__, __LINE__)

#define RLPT_CHECK_KIND(Kind, cond, ...)   \
    do {                                   \
        if (!(cond)) {                     \
            RLPT_THROW(Kind, __VA_ARGS__); \
        }                                  \
    } while (0)

#define RLPT_CHECK(cond, ...) RLPT_CHECK_KIND(ValueError, cond, __VA_ARGS__)

#define RLPT_ASSERT(cond)                                                                \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            throw ::rlpt::InternalError("assertion failed: " #cond, __FILE__, __LINE__); \
        }                                                                                \
    } while (0)
