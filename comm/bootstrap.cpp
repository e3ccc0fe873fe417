// The MPI rendezvous of an NCCL bootstrap (rlpt/comm/bootstrap.h). NCCL-free.
#include "rlpt/comm/bootstrap.h"

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <set>
#include <vector>

#include "rlpt/core/error.h"

namespace rlpt::comm {
namespace {

enum Status : int32_t { kOk = 0, kFailed = 1, kTimedOut = 2 };

struct Report {
    int32_t ready = 0;
    char host[MPI_MAX_PROCESSOR_NAME + 1] = {0};
    char error[512] = {0};
};

struct Verdict {
    int32_t status = kOk;
    int32_t unused = 0;
    int64_t n_nodes = 1;
    BootstrapId id{};
    char text[2048] = {0};
};

// The buffers of one rendezvous. Heap-allocated: when a wait ends at the deadline with a send or
// a receive still pending, they are leaked rather than freed under MPI's feet.
struct Exchange {
    Report mine;
    std::vector<Report> reports;  // root: one per rank of the communicator
    Verdict verdict;
    std::vector<MPI_Request> reqs;
};

void copy_text(char* dst, size_t cap, const std::string& s) { std::snprintf(dst, cap, "%s", s.c_str()); }

std::string rank_label(const Communicator& comm, int rank) {
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    int world_rank = MPI_UNDEFINED;
    if (MPI_Comm_group(comm.get(), &group) == MPI_SUCCESS && MPI_Comm_group(MPI_COMM_WORLD, &world) == MPI_SUCCESS)
        MPI_Group_translate_ranks(group, 1, &rank, world, &world_rank);
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
    if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
    if (world_rank == MPI_UNDEFINED || world_rank == rank) return fmt::format("rank {}", rank);
    return fmt::format("rank {} (world rank {})", rank, world_rank);
}

// Polls `reqs` until all complete (true) or the deadline passes (false), reporting the wait to
// the WaitObserver. Completed requests become MPI_REQUEST_NULL one by one (not MPI_Testall, which
// leaves them all in place until every one is done).
bool wait_until(std::vector<MPI_Request>& reqs, const Deadline& deadline, const std::string& what) {
    detail::Backoff backoff(&what);
    for (;;) {
        bool all = true;
        for (MPI_Request& r : reqs) {
            if (r == MPI_REQUEST_NULL) continue;
            int done = 0;
            RLPT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
            all = all && done;
        }
        if (all) return true;
        if (deadline.expired()) return false;
        backoff.pause();
    }
}

// Cancels the pending receive `req` and waits (briefly) for the cancellation. True when the
// message arrived after all (the cancellation came too late); `leak` is set when the request did
// not complete, so its buffer must outlive this rendezvous.
bool cancel_receive(MPI_Request& req, bool& leak) {
    if (req == MPI_REQUEST_NULL) return true;
    MPI_Cancel(&req);
    const Deadline d = Deadline::after_seconds(kVerdictGraceS);
    detail::Backoff backoff;
    MPI_Status status;
    for (;;) {
        int done = 0;
        RLPT_MPI_CHECK(MPI_Test(&req, &done, &status));
        if (done) break;
        if (d.expired()) {
            leak = true;
            return false;
        }
        backoff.pause();
    }
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    return cancelled == 0;
}

[[noreturn]] void throw_verdict(const Verdict& v) {
    if (v.status == kTimedOut) throw TimeoutError(v.text, __FILE__, __LINE__);
    throw CommError(v.text, __FILE__, __LINE__);
}

// The root's side: collect the reports, decide, tell every rank that arrived.
void decide(const Communicator& comm, Exchange& ex, const std::string& prefix, double budget_s,
            const MakeBootstrapId& make_id, const Deadline& deadline, bool& leak) {
    const int n = comm.size();
    ex.reports.assign(static_cast<size_t>(n), Report());
    ex.reports[0] = ex.mine;
    ex.reqs.assign(static_cast<size_t>(n), MPI_REQUEST_NULL);
    for (int r = 1; r < n; ++r) {
        RLPT_MPI_CHECK(MPI_Irecv(&ex.reports[static_cast<size_t>(r)], sizeof(Report), MPI_BYTE, r, kBootstrapReportTag,
                                 comm.get(), &ex.reqs[static_cast<size_t>(r)]));
    }
    std::vector<bool> came(static_cast<size_t>(n), true);
    if (!wait_until(ex.reqs, deadline, prefix + ": the reports of every rank")) {
        for (size_t i = 1; i < came.size(); ++i) came[i] = cancel_receive(ex.reqs[i], leak);
    }

    Verdict& v = ex.verdict;
    std::string failed, missing;
    std::vector<int> arrived;
    std::set<std::string> hosts;
    for (int r = 0; r < n; ++r) {
        const auto i = static_cast<size_t>(r);
        if (!came[i]) {
            missing += (missing.empty() ? "" : ", ") + rank_label(comm, r);
            continue;
        }
        arrived.push_back(r);
        Report& rep = ex.reports[i];
        rep.host[sizeof(rep.host) - 1] = rep.error[sizeof(rep.error) - 1] = '\0';
        hosts.insert(rep.host);
        if (!rep.ready)
            failed += fmt::format("{}{} failed: {}", failed.empty() ? "" : "; ", rank_label(comm, r), rep.error);
    }
    if (failed.empty() && missing.empty()) {
        v.n_nodes = static_cast<int64_t>(hosts.size());
        std::string why;
        try {
            why = make_id ? make_id(v.n_nodes, v.id) : "no id maker on the root";
        } catch (const Error& e) {
            why = e.message();
        } catch (const std::exception& e) {
            why = e.what();
        }
        if (!why.empty()) failed = fmt::format("{} failed: {}", rank_label(comm, 0), why);
    }
    if (!failed.empty()) {
        v.status = kFailed;
        copy_text(v.text, sizeof(v.text),
                  fmt::format("{}: {}{}", prefix, failed,
                              missing.empty() ? "" : fmt::format("; {} did not enter it", missing)));
    } else if (!missing.empty()) {
        v.status = kTimedOut;
        copy_text(v.text, sizeof(v.text),
                  fmt::format("{}: {} did not enter it within {:.1f} s of the root ({}); the communicator cannot "
                              "be built",
                              prefix, missing, budget_s, rank_label(comm, 0)));
    }

    std::vector<MPI_Request> sends;
    for (int r : arrived) {
        if (r == 0) continue;
        sends.push_back(MPI_REQUEST_NULL);
        RLPT_MPI_CHECK(MPI_Isend(&v, sizeof(Verdict), MPI_BYTE, r, kBootstrapVerdictTag, comm.get(), &sends.back()));
    }
    if (!wait_until(sends, Deadline::after_seconds(kVerdictGraceS), prefix + ": handing out the verdict")) {
        leak = true;
        if (v.status == kOk) {
            v.status = kTimedOut;
            copy_text(v.text, sizeof(v.text),
                      fmt::format("{}: the ranks that reported did not take the root's answer within {:.1f} s", prefix,
                                  kVerdictGraceS));
        }
    }
}

}  // namespace

BootstrapResult bootstrap_rendezvous(const Communicator& comm, const std::string& name, const std::string& local_error,
                                     const MakeBootstrapId& make_id, const Deadline& deadline) {
    RLPT_CHECK(comm.valid(), "NCCL bootstrap of {}: the communicator is null (is this rank a member?)", name);
    const std::string prefix = fmt::format("NCCL bootstrap of {} ({} ranks)", name, comm.size());
    const double budget_s = deadline.seconds_left();
    auto ex = std::make_unique<Exchange>();
    ex->mine.ready = local_error.empty() ? 1 : 0;
    copy_text(ex->mine.error, sizeof(ex->mine.error), local_error);
    int len = 0;
    RLPT_MPI_CHECK(MPI_Get_processor_name(ex->mine.host, &len));

    bool leak = false;
    if (comm.rank() == 0) {
        decide(comm, *ex, prefix, budget_s, make_id, deadline, leak);
    } else {
        ex->reqs.assign(2, MPI_REQUEST_NULL);
        RLPT_MPI_CHECK(
            MPI_Isend(&ex->mine, sizeof(Report), MPI_BYTE, 0, kBootstrapReportTag, comm.get(), &ex->reqs[0]));
        RLPT_MPI_CHECK(
            MPI_Irecv(&ex->verdict, sizeof(Verdict), MPI_BYTE, 0, kBootstrapVerdictTag, comm.get(), &ex->reqs[1]));
        const Deadline with_grace =
            deadline.infinite() ? deadline : Deadline::after_seconds(deadline.seconds_left() + kVerdictGraceS);
        const std::string what = prefix + ": the root's answer";
        if (!wait_until(ex->reqs, with_grace, what) && !cancel_receive(ex->reqs[1], leak)) {
            ex->verdict = Verdict();
            ex->verdict.status = kTimedOut;
            copy_text(ex->verdict.text, sizeof(ex->verdict.text),
                      fmt::format("{}: the root ({}) did not answer within {:.1f} s: it, or a rank it waits for, did "
                                  "not enter the bootstrap",
                                  prefix, rank_label(comm, 0), budget_s + kVerdictGraceS));
        }
        leak = leak || ex->reqs[0] != MPI_REQUEST_NULL;  // the report, never taken
    }
    const Verdict v = ex->verdict;
    if (leak) static_cast<void>(ex.release());  // a send or receive may still use these buffers
    if (v.status != kOk) throw_verdict(v);
    return BootstrapResult{v.id, v.n_nodes};
}

}  // namespace rlpt::comm
