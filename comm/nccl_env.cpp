// NCCL bootstrap interface pinning (rlpt/comm/nccl_env.h): sockets and environment only.
#include "rlpt/comm/nccl_env.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "rlpt/core/error.h"
#include "rlpt/core/log.h"

namespace rlpt::comm {
namespace {

// Closes a file descriptor on scope exit.
class Fd {
  public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0) ::close(fd_);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

std::string errno_text(const char* call, int err) { return fmt::format("{}: {}", call, std::strerror(err)); }

// Listener on `addr` (port 0), then a connect bounded by timeout_ms. Empty string on
// success, else the reason.
std::string try_self_connect(const sockaddr* addr, socklen_t len, int timeout_ms) {
    Fd listener(::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (listener.get() < 0) return errno_text("socket", errno);
    if (::bind(listener.get(), addr, len) != 0) return errno_text("bind", errno);
    if (::listen(listener.get(), 1) != 0) return errno_text("listen", errno);
    sockaddr_storage bound{};
    socklen_t bound_len = sizeof(bound);
    if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &bound_len) != 0) {
        return errno_text("getsockname", errno);
    }
    Fd client(::socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (client.get() < 0) return errno_text("socket", errno);
    if (::connect(client.get(), reinterpret_cast<sockaddr*>(&bound), bound_len) == 0) return {};
    if (errno != EINPROGRESS) return errno_text("connect", errno);
    pollfd p{client.get(), POLLOUT, 0};
    int rc;
    do {
        rc = ::poll(&p, 1, timeout_ms);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) return errno_text("poll", errno);
    if (rc == 0) return fmt::format("connect: no answer within {} ms", timeout_ms);
    int err = 0;
    socklen_t err_len = sizeof(err);
    if (::getsockopt(client.get(), SOL_SOCKET, SO_ERROR, &err, &err_len) != 0) {
        return errno_text("getsockopt", errno);
    }
    return err == 0 ? std::string() : errno_text("connect", err);
}

std::string numeric_host(const sockaddr* addr, socklen_t len) {
    char host[NI_MAXHOST] = {0};
    if (::getnameinfo(addr, len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST) != 0) {
        return "?";
    }
    return host;
}

}  // namespace

const char* self_route_name(SelfRoute r) {
    switch (r) {
        case SelfRoute::kNotProbed: return "not probed";
        case SelfRoute::kRoutable: return "routable";
        case SelfRoute::kNotRoutable: return "not routable";
        case SelfRoute::kUnresolved: return "unresolved";
    }
    return "?";
}

const char* nccl_ifname_action_name(NcclIfnameAction a) {
    switch (a) {
        case NcclIfnameAction::kHonourUser: return "honour user setting";
        case NcclIfnameAction::kLeaveDefault: return "leave NCCL's default";
        case NcclIfnameAction::kPinLoopback: return "pin loopback";
        case NcclIfnameAction::kWarnMultiNode: return "warn (multi-node)";
    }
    return "?";
}

SelfRouteProbe probe_address_routes_to_self(const std::string& numeric_address, int timeout_ms) {
    SelfRouteProbe out;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(numeric_address.c_str(), "0", &hints, &res);
    if (rc != 0 || res == nullptr) {
        out.result = SelfRoute::kUnresolved;
        out.detail = fmt::format("'{}' is not an IP address literal ({})", numeric_address,
                                 rc != 0 ? ::gai_strerror(rc) : "no result");
        return out;
    }
    const std::string why = try_self_connect(res->ai_addr, res->ai_addrlen, timeout_ms);
    ::freeaddrinfo(res);
    out.result = why.empty() ? SelfRoute::kRoutable : SelfRoute::kNotRoutable;
    out.detail = why.empty() ? fmt::format("{} accepts connections from this host", numeric_address)
                             : fmt::format("{} does not route back to this host ({})", numeric_address, why);
    return out;
}

SelfRouteProbe probe_hostname_routes_to_self(int timeout_ms) {
    SelfRouteProbe out;
    char host[256] = {0};
    if (::gethostname(host, sizeof(host) - 1) != 0) {
        out.result = SelfRoute::kUnresolved;
        out.detail = errno_text("gethostname", errno);
        return out;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = ::getaddrinfo(host, nullptr, &hints, &res);
    if (rc != 0 || res == nullptr) {
        out.result = SelfRoute::kUnresolved;
        out.detail =
            fmt::format("hostname '{}' does not resolve ({})", host, rc != 0 ? ::gai_strerror(rc) : "no address");
        return out;
    }
    std::vector<std::string> seen;
    out.result = SelfRoute::kRoutable;
    for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6) continue;
        const std::string numeric = numeric_host(a->ai_addr, a->ai_addrlen);
        bool dup = false;
        for (const auto& s : seen) dup = dup || s == numeric;
        if (dup) continue;
        seen.push_back(numeric);
        const std::string why = try_self_connect(a->ai_addr, a->ai_addrlen, timeout_ms);
        if (!why.empty()) {
            out.result = SelfRoute::kNotRoutable;
            out.detail += fmt::format("{}{} ({}) does not route back to this host: {}", out.detail.empty() ? "" : "; ",
                                      host, numeric, why);
        }
    }
    ::freeaddrinfo(res);
    if (seen.empty()) {
        out.result = SelfRoute::kUnresolved;
        out.detail = fmt::format("hostname '{}' has no IPv4/IPv6 address", host);
    } else if (out.result == SelfRoute::kRoutable) {
        std::string list;
        for (const auto& s : seen) list += (list.empty() ? "" : ", ") + s;
        out.detail = fmt::format("{} ({}) routes back to this host", host, list);
    }
    return out;
}

NcclIfnameAction decide_nccl_ifname(const std::optional<std::string>& env_value, SelfRoute probe, int n_nodes) {
    RLPT_CHECK(n_nodes >= 1, "decide_nccl_ifname: n_nodes must be >= 1, got {}", n_nodes);
    if (env_value && !env_value->empty()) return NcclIfnameAction::kHonourUser;
    RLPT_CHECK(probe != SelfRoute::kNotProbed,
               "decide_nccl_ifname: NCCL_SOCKET_IFNAME is unset, so a probe result is needed");
    if (probe == SelfRoute::kRoutable) return NcclIfnameAction::kLeaveDefault;
    return n_nodes == 1 ? NcclIfnameAction::kPinLoopback : NcclIfnameAction::kWarnMultiNode;
}

NcclIfnameAction apply_nccl_ifname_policy(int n_nodes, int timeout_ms) {
    std::optional<std::string> env;
    if (const char* v = std::getenv("NCCL_SOCKET_IFNAME")) env = std::string(v);
    SelfRouteProbe probe;
    if (!env || env->empty()) probe = probe_hostname_routes_to_self(timeout_ms);
    const NcclIfnameAction action = decide_nccl_ifname(env, probe.result, n_nodes);
    switch (action) {
        case NcclIfnameAction::kHonourUser:
            RLPT_LOG_INFO("NCCL bootstrap: honouring NCCL_SOCKET_IFNAME={} set by the user", *env);
            break;
        case NcclIfnameAction::kLeaveDefault:
            RLPT_LOG_DEBUG("NCCL bootstrap: {}; NCCL picks its interface", probe.detail);
            break;
        case NcclIfnameAction::kPinLoopback:
            if (::setenv("NCCL_SOCKET_IFNAME", "lo", 1) != 0) {
                RLPT_THROW(InternalError, "setenv(NCCL_SOCKET_IFNAME=lo) failed: {}", std::strerror(errno));
            }
            RLPT_LOG_WARN("NCCL bootstrap: set NCCL_SOCKET_IFNAME=lo because the host's own address is {} "
                          "({}) and the job runs on one node; NCCL would otherwise hang in its first "
                          "collective. Set NCCL_SOCKET_IFNAME yourself to override.",
                          self_route_name(probe.result), probe.detail);
            break;
        case NcclIfnameAction::kWarnMultiNode:
            RLPT_LOG_ERROR("NCCL bootstrap: the host's own address is {} ({}) and the job spans {} nodes, "
                           "so loopback cannot be used: NCCL may hang in its first collective. Set "
                           "NCCL_SOCKET_IFNAME to an interface the nodes reach each other on (e.g. "
                           "NCCL_SOCKET_IFNAME=eth0, or =^docker,lo to exclude).",
                           self_route_name(probe.result), probe.detail, n_nodes);
            break;
    }
    return action;
}

}  // namespace rlpt::comm
