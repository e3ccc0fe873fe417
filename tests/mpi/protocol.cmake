foreach(np 2 4 5 7)
  rlpt_add_mpi_test(mpi_protocol_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "Protocol.*")
endforeach()

# rlpt_add_failure_test(<name> NP <n> REGEX <re> MAX_SECONDS <s> TARGET <exe> [FILTER f] [ARGS ...])
# The job must fail with a matching message within the bound and leave no process behind.
function(rlpt_add_failure_test name)
  cmake_parse_arguments(T "" "NP;REGEX;MAX_SECONDS;TARGET;FILTER;FORBID" "ARGS" ${ARGN})
  set(cmd ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.sh --regex "${T_REGEX}" --max-seconds ${T_MAX_SECONDS})
  if(T_FORBID)
    list(APPEND cmd --forbid "${T_FORBID}")
  endif()
  list(APPEND cmd -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${T_NP} ${RLPT_MPIEXEC_FLAGS} $<TARGET_FILE:${T_TARGET}>)
  if(T_FILTER)
    list(APPEND cmd --gtest_filter=${T_FILTER})
  endif()
  add_test(NAME ${name} COMMAND ${cmd} ${T_ARGS})
  set_tests_properties(${name} PROPERTIES PROCESSORS 2 TIMEOUT 300 LABELS mpi ENVIRONMENT "${RLPT_TEST_ENV}")
endfunction()

rlpt_add_failure_test(mpi_protocol_worker_error_aborts_np4 NP 4 TARGET rlpt_mpi_tests
  FILTER "ProtocolAbort.WorkerErrorAbortsTheJob" MAX_SECONDS 60
  REGEX "actor\\.fail failed on rank 3 \\(role actor, step 12\\):.*deliberate failure in a test handler")
rlpt_add_failure_test(mpi_protocol_silent_worker_times_out_np3 NP 3 TARGET rlpt_mpi_tests
  FILTER "ProtocolAbort.SilentWorkerTimesOut" MAX_SECONDS 60
  REGEX "did not answer within 2 s")
