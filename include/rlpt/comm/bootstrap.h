#pragma once
// The MPI rendezvous of an NCCL communicator's bootstrap. NCCL-free (point-to-point MPI only), so
// it is built and tested in every configuration; comm::detail::nccl_bootstrap (rlpt/comm/nccl_check.h)
// runs NCCL's own steps inside it. Every NCCL communicator of rlpt (the engine's and tensor
// parallelism's collectives, the weight sync, the weight reshard) is bootstrapped through it.
//
// Why not a broadcast of the root's id: a rank that cannot take part (cudaSetDevice failed, its
// GPU is gone) or that never arrives (hung, or busy elsewhere) then leaves the others blocked in
// ncclCommInitRank, or failing one by one with unrelated messages. Here the root learns every
// rank's state first and tells every rank the same outcome.
//
// Protocol (collective on `comm`; tags kBootstrapReportTag and kBootstrapVerdictTag on `comm`):
//   1. every rank sends the root (rank 0 of `comm`) a report: ready, or the reason it is not,
//      and its host name;
//   2. the root waits for every report until the deadline. Every rank ready: it counts the nodes
//      (distinct host names) and calls make_id(n_nodes) (the NCCL interface policy, then
//      ncclGetUniqueId). The verdict is the id and node count; or "rank r failed: <reason>" for
//      every rank that reported a failure (make_id's included); or, at the deadline, the ranks
//      that did not arrive;
//   3. the root sends the verdict to every rank that reported. Every rank that arrived returns
//      the same result or throws the same error: CommError for failures, TimeoutError for ranks
//      that did not arrive.
// A rank other than the root waits for the verdict until the deadline plus kVerdictGraceS (the
// root sends its timeout verdict at its own deadline, and ranks enter at slightly different
// times); without a verdict it throws TimeoutError saying the root did not answer.
//
// Ranks in messages are ranks of `comm`, with the world rank beside them when they differ.
// Waits report to the WaitObserver (rlpt/comm/mpi.h), so the call watchdog also applies.
// After a TimeoutError, messages of the failed bootstrap may remain on `comm` (a report the
// root never took); a failed bootstrap ends the job, and tests use a duplicated communicator.

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "rlpt/comm/mpi.h"

namespace rlpt::comm {

// Bytes of the root's opaque id (NCCL_UNIQUE_ID_BYTES; comm/nccl_check.cpp asserts it).
inline constexpr size_t kBootstrapIdBytes = 128;
using BootstrapId = std::array<char, kBootstrapIdBytes>;

inline constexpr int kBootstrapReportTag = 4250;
inline constexpr int kBootstrapVerdictTag = 4251;
inline constexpr double kVerdictGraceS = 2.0;

struct BootstrapResult {
    BootstrapId id{};     // the root's id, on every rank
    int64_t n_nodes = 1;  // distinct hosts among the ranks of `comm`
};

// Root only: called once every rank reported ready, with the node count; fills `id` and returns
// "" or returns why it could not (an exception it throws counts as that failure).
using MakeBootstrapId = std::function<std::string(int64_t n_nodes, BootstrapId& id)>;

// Collective on `comm` (see the protocol above). `name` names the communicator being built in
// every message ("NCCL bootstrap of <name> (<n> ranks): ..."). `local_error` is "" when this rank
// is ready, else why not. `make_id` is used on the root only (may be empty elsewhere). Throws
// CommError when any rank failed, TimeoutError when a rank did not arrive before `deadline`.
BootstrapResult bootstrap_rendezvous(const Communicator& comm, const std::string& name, const std::string& local_error,
                                     const MakeBootstrapId& make_id, const Deadline& deadline);

}  // namespace rlpt::comm
