# Asynchronous RL and off-policy correction through the real binary (tests/mpi/async_runs.sh).
foreach(check correction staleness resume)
  add_test(NAME async_${check} COMMAND ${RLPT_GPU_SLOTS} ${CMAKE_CURRENT_SOURCE_DIR}/async_runs.sh $<TARGET_FILE:rlpt> ${PROJECT_SOURCE_DIR} ${check})
  set_tests_properties(async_${check} PROPERTIES PROCESSORS 2 TIMEOUT 600 LABELS mpi ENVIRONMENT "${RLPT_TEST_ENV}"
                       RESOURCE_GROUPS "2,gpus:1")
endforeach()
