#pragma once
// NCCL bootstrap interface pinning. Torch-free, NCCL-free (plain sockets and environment), so
// it is built and tested in every configuration.
//
// The failure this prevents: NCCL chooses its bootstrap/socket interface itself (never from
// MPI, MASTER_ADDR or the hostname). On hosts whose bonded or VLAN address does not route
// back to the host itself, the first NCCL collective then hangs forever without an error,
// while MPI and Gloo work. NCCL reads NCCL_SOCKET_IFNAME once, at its first call in the
// process, so apply_nccl_ifname_policy() must run before any NCCL call (the NCCL weight sync
// calls it right before ncclGetUniqueId / ncclCommInitRank).
//
// Policy:
//   - NCCL_SOCKET_IFNAME set (non-empty) by the user: honoured, nothing probed.
//   - else the addresses the hostname resolves to are probed: a TCP listener on each
//     (port 0) and a non-blocking connect to it with a short timeout. All connect: NCCL is
//     left alone.
//   - otherwise (an address does not route back, or the hostname does not resolve) and the
//     job is single-node: NCCL_SOCKET_IFNAME=lo is set, with a log line saying why.
//   - multi-node jobs never get loopback: an error is logged telling the user to set
//     NCCL_SOCKET_IFNAME to a routable interface (NCCL is left to its own choice).

#include <optional>
#include <string>

namespace rlpt::comm {

enum class SelfRoute {
    kNotProbed,    // the user pinned the interface; no probe was run
    kRoutable,     // every address of the hostname accepted a connection from this host
    kNotRoutable,  // some address did not (bind or connect failed, or timed out)
    kUnresolved,   // gethostname/getaddrinfo failed or returned no address
};
const char* self_route_name(SelfRoute r);

struct SelfRouteProbe {
    SelfRoute result = SelfRoute::kNotProbed;
    std::string detail;  // what was probed and what failed, for log lines
};

// Listens on `numeric_address` (IPv4 or IPv6 literal, port 0) and connects to it with a
// non-blocking connect bounded by `timeout_ms`. kRoutable or kNotRoutable (an address that
// is not assigned to this host fails at bind, immediately); kUnresolved for a string that
// is not an address literal. Never blocks longer than ~timeout_ms.
SelfRouteProbe probe_address_routes_to_self(const std::string& numeric_address, int timeout_ms = 300);

// gethostname -> getaddrinfo (IPv4 and IPv6, stream sockets) -> every distinct address
// through probe_address_routes_to_self. kRoutable only if all of them are.
SelfRouteProbe probe_hostname_routes_to_self(int timeout_ms = 300);

enum class NcclIfnameAction {
    kHonourUser,     // NCCL_SOCKET_IFNAME is set: leave it
    kLeaveDefault,   // host address routes back: let NCCL choose
    kPinLoopback,    // single node, not routable: set NCCL_SOCKET_IFNAME=lo
    kWarnMultiNode,  // multi-node, not routable: tell the user, change nothing
};
const char* nccl_ifname_action_name(NcclIfnameAction a);

// Pure decision. `env_value`: NCCL_SOCKET_IFNAME as found (nullopt when unset; an empty
// string counts as unset). `n_nodes` >= 1 (ValueError otherwise).
NcclIfnameAction decide_nccl_ifname(const std::optional<std::string>& env_value, SelfRoute probe, int n_nodes);

// Reads NCCL_SOCKET_IFNAME, probes only when it is unset, decides, applies (setenv) and logs
// one line. Local to this process (not collective): count nodes beforehand, e.g. with
// Communicator::split_shared. Returns the action taken.
NcclIfnameAction apply_nccl_ifname_policy(int n_nodes, int timeout_ms = 300);

}  // namespace rlpt::comm
