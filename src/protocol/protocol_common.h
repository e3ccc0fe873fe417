#pragma once
// Private helpers shared by the controller and the worker loop.
#include <time.h>

#include <cstring>
#include <string>

#include "rlpt/core/error.h"
#include "rlpt/wire.h"

namespace rlpt::protocol::detail {

inline double cpu_seconds() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double wall_seconds() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <typename Header>
std::string header_bytes(const Header& h) {
    return std::string(reinterpret_cast<const char*>(&h), sizeof(Header));
}

// Parses a header at the front of a message; CommError when too short or wrong magic/version.
template <typename Header>
Header parse_header(const std::string& msg, const char* what) {
    if (msg.size() < sizeof(Header)) {
        throw CommError(fmt::format("malformed {}: {} bytes, need at least {}", what, msg.size(), sizeof(Header)));
    }
    Header h;
    std::memcpy(&h, msg.data(), sizeof(Header));
    if (h.magic != wire::kMagic) throw CommError(fmt::format("malformed {}: bad magic", what));
    if (h.version != wire::kVersion) {
        throw CommError(fmt::format("{} has wire version {} but this binary speaks {} (mixed rlpt binaries?)", what,
                                    h.version, wire::kVersion));
    }
    return h;
}

}  // namespace rlpt::protocol::detail
