#pragma once
// Counts the MPI calls this test process makes off the MPI thread (rlpt/comm/mpi.h, "Threads").
// test_mpi_threads.cpp interposes MPI_Isend, MPI_Test and MPI_Testall through MPI's profiling
// interface (each records the calling thread and forwards to its PMPI_ twin), so every call in
// rlpt_mpi_tests is seen, whoever makes it.
#include <cstdint>

namespace rlpt::test {

// Calls of MPI_Isend / MPI_Test / MPI_Testall made so far on a thread other than the MPI thread.
int64_t mpi_calls_off_the_mpi_thread();
// MPI_Isend calls made so far on the MPI thread.
int64_t mpi_sends_on_the_mpi_thread();

}  // namespace rlpt::test
