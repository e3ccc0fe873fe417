foreach(np 2 4 5 7)
  rlpt_add_mpi_test(mpi_protocol_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "Protocol.*")
endforeach()


rlpt_add_failure_test(mpi_protocol_worker_error_aborts_np4 NP 4 TARGET rlpt_mpi_tests
  FILTER "ProtocolAbort.WorkerErrorAbortsTheJob" MAX_SECONDS 60
  REGEX "actor\\.fail failed on rank 3 \\(role actor, step 12\\):.*deliberate failure in a test handler")
rlpt_add_failure_test(mpi_protocol_silent_worker_times_out_np3 NP 3 TARGET rlpt_mpi_tests
  FILTER "ProtocolAbort.SilentWorkerTimesOut" MAX_SECONDS 60
  REGEX "did not answer within 2 s")
# Heartbeats never leave a worker from a thread other than the MPI thread (rlpt/comm/mpi.h, "Threads").
rlpt_add_mpi_test(mpi_protocol_threads_np3 NP 3 TARGET rlpt_mpi_tests FILTER "ProtocolThreads.*:MpiThreads.*" TIMEOUT 120)
