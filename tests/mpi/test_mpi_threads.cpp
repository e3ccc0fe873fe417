// MPI and threads (rlpt/comm/mpi.h, "Threads"): the runtime's thread level and MPI thread, and a
// probe of the MPI calls made off the MPI thread (used by ProtocolThreads in test_protocol.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "mpi_thread_probe.h"
#include "rlpt/comm/mpi.h"

namespace {
std::atomic<int64_t> g_off_thread_calls{0};
std::atomic<int64_t> g_sends_on_thread{0};

void count_call(bool send) {
    if (!rlpt::comm::on_mpi_thread()) {
        g_off_thread_calls.fetch_add(1);
    } else if (send) {
        g_sends_on_thread.fetch_add(1);
    }
}
}  // namespace

// MPI's profiling interface: these definitions take the place of the library's MPI_ symbols for
// the whole test program; the library's PMPI_ ones do the work.
extern "C" {
int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* req) {
    count_call(true);
    return PMPI_Isend(buf, count, type, dest, tag, comm, req);
}
int MPI_Test(MPI_Request* req, int* flag, MPI_Status* status) {
    count_call(false);
    return PMPI_Test(req, flag, status);
}
int MPI_Testall(int n, MPI_Request reqs[], int* flag, MPI_Status statuses[]) {
    count_call(false);
    return PMPI_Testall(n, reqs, flag, statuses);
}
}

namespace rlpt::test {
int64_t mpi_calls_off_the_mpi_thread() { return g_off_thread_calls.load(); }
int64_t mpi_sends_on_the_mpi_thread() { return g_sends_on_thread.load(); }
}  // namespace rlpt::test

TEST(MpiThreads, TheRuntimeIsSerializedAndKnowsItsThread) {
    int provided = -1;
    ASSERT_EQ(MPI_Query_thread(&provided), MPI_SUCCESS);
    EXPECT_GE(provided, MPI_THREAD_SERIALIZED);
    EXPECT_EQ(rlpt::comm::MpiRuntime::thread_level(), provided);
    EXPECT_TRUE(rlpt::comm::on_mpi_thread());
    bool on_other = true;
    std::thread([&] { on_other = rlpt::comm::on_mpi_thread(); }).join();
    EXPECT_FALSE(on_other);
}

TEST(MpiThreads, TheProbeSeesCallsOffTheMpiThread) {
    const int64_t before = rlpt::test::mpi_calls_off_the_mpi_thread();
    std::thread([] {
        MPI_Request req = MPI_REQUEST_NULL;
        int flag = 0;
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);  // a null request: legal, completes at once
    }).join();
    EXPECT_EQ(rlpt::test::mpi_calls_off_the_mpi_thread(), before + 1);
}
