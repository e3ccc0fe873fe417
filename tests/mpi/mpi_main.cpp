// Shared main for the multi-rank GoogleTest executable (STYLE §7): initialises MPI with
// MPI_ERRORS_RETURN, silences gtest's printer on ranks other than 0 (their failures are
// still reported: each failing rank prints its own failures to stderr), and all-reduces
// pass/fail so every rank exits with the same code.
#include <gtest/gtest.h>

#include <cstdio>

#include "rlpt/comm/mpi.h"
#include "rlpt/core/error.h"

namespace {
class FailurePrinter : public testing::EmptyTestEventListener {
  public:
    explicit FailurePrinter(int rank) : rank_(rank) {}
    void OnTestPartResult(const testing::TestPartResult& r) override {
        if (r.failed()) {
            std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                         r.summary());
        }
    }

  private:
    int rank_;
};
}  // namespace

int main(int argc, char** argv) {
    rlpt::comm::MpiRuntime mpi(&argc, &argv);
    testing::InitGoogleTest(&argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    rlpt::set_process_identity({rank, "test"});
    if (rank != 0) {
        auto& listeners = testing::UnitTest::GetInstance()->listeners();
        delete listeners.Release(listeners.default_result_printer());
        listeners.Append(new FailurePrinter(rank));
    }
    int local_ok = RUN_ALL_TESTS() == 0 ? 1 : 0;
    int all_ok = 0;
    MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0 && !all_ok && local_ok) std::fprintf(stderr, "a test failed on another rank\n");
    return all_ok ? 0 : 1;
}
