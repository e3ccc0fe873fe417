#include "rlpt/core/error.h"

#include <cerrno>

#include <cstring>

namespace rlpt {
namespace {

ProcessIdentity& identity_storage() {
    static ProcessIdentity id;
    return id;
}

std::string short_path(const char* file) {
    if (file == nullptr) return {};
    // Keep the path relative to the source tree: drop everything up to the last
    // top-level folder name we know.
    std::string f(file);
    for (const char* top : {"/src/", "/comm/", "/roles/", "/kernels/", "/include/", "/tests/"}) {
        auto pos = f.rfind(top);
        if (pos != std::string::npos) return f.substr(pos + 1);
    }
    return f;
}

std::string compose(ErrorKind kind, const std::string& message, const std::string& where, const std::string& call) {
    const auto& id = process_identity();
    std::string out;
    if (id.world_rank >= 0) {
        out += fmt::format("rank {}", id.world_rank);
        if (!id.roles.empty()) out += fmt::format(" [{}]", id.roles);
        out += ": ";
    }
    out += error_kind_name(kind);
    out += ": ";
    out += message;
    if (!call.empty()) out += fmt::format(" (in {})", call);
    if (!where.empty()) out += fmt::format(" (at {})", where);
    return out;
}

}  // namespace

const char* error_kind_name(ErrorKind kind) {
    switch (kind) {
        case ErrorKind::kGeneric: return "Error";
        case ErrorKind::kConfig: return "ConfigError";
        case ErrorKind::kComm: return "CommError";
        case ErrorKind::kCuda: return "CudaError";
        case ErrorKind::kIo: return "IoError";
        case ErrorKind::kValue: return "ValueError";
        case ErrorKind::kInternal: return "InternalError";
        case ErrorKind::kTimeout: return "TimeoutError";
    }
    return "Error";
}

Error::Error(ErrorKind kind, std::string message, const char* file, int line, std::string call)
    : std::runtime_error(compose(kind, message, file ? fmt::format("{}:{}", short_path(file), line) : "", call)),
      kind_(kind),
      message_(std::move(message)),
      where_(file ? fmt::format("{}:{}", short_path(file), line) : ""),
      call_(std::move(call)) {}

void set_process_identity(ProcessIdentity id) { identity_storage() = std::move(id); }
const ProcessIdentity& process_identity() { return identity_storage(); }

void rethrow_with_context(const std::string& context, const Error& e) {
    std::string msg = context + ": " + e.message();
    switch (e.kind()) {
        case ErrorKind::kConfig: throw ConfigError(std::move(msg));
        case ErrorKind::kComm: throw CommError(std::move(msg), nullptr, 0, e.call());
        case ErrorKind::kCuda: throw CudaError(std::move(msg), nullptr, 0, e.call());
        case ErrorKind::kIo: throw IoError(std::move(msg), nullptr, 0, e.call());
        case ErrorKind::kValue: throw ValueError(std::move(msg));
        case ErrorKind::kInternal: throw InternalError(std::move(msg));
        case ErrorKind::kTimeout: throw TimeoutError(std::move(msg));
        case ErrorKind::kGeneric: break;
    }
    throw Error(e.kind(), std::move(msg), nullptr, 0, e.call());
}

}  // namespace rlpt

namespace rlpt {

std::string io_error_cause(int err) {
    switch (err) {
        case ENOSPC: return "disk full";
        case EDQUOT: return "disk quota exceeded";
        case EROFS: return "read-only file system";
        case EACCES:
        case EPERM: return "permission denied";
        case EISDIR: return "a directory in the way";
        case ENOENT:
        case ENOTDIR: return "missing directory";
        case EIO: return "I/O error";
        default: return "file-system error";
    }
}

int errno_in_text(const std::string& text) {
    const std::string key = "errno = ";
    const size_t at = text.find(key);
    if (at == std::string::npos) return 0;
    int err = 0;
    for (size_t i = at + key.size(); i < text.size() && text[i] >= '0' && text[i] <= '9' && err < 100000; ++i)
        err = err * 10 + (text[i] - '0');
    return err;
}

}  // namespace rlpt
