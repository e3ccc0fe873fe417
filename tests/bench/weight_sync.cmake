# Weight-sync benchmark (label bench). Registered under the "bench" ctest configuration so a
# plain `ctest` never runs it: `ctest -C bench -L bench -R weight_sync -V`.
add_executable(rlpt_bench_weight_sync ${CMAKE_CURRENT_LIST_DIR}/bench_weight_sync.cpp)
target_link_libraries(rlpt_bench_weight_sync PRIVATE rlpt_weights)
rlpt_torch_target(rlpt_bench_weight_sync)
rlpt_warnings(rlpt_bench_weight_sync)
foreach(np 2 3)
  add_test(NAME bench_weight_sync_np${np}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} ${RLPT_MPIEXEC_FLAGS}
                   ${MPIEXEC_PREFLAGS} $<TARGET_FILE:rlpt_bench_weight_sync> ${MPIEXEC_POSTFLAGS}
                   --json
           CONFIGURATIONS bench)
  set_tests_properties(bench_weight_sync_np${np} PROPERTIES LABELS bench TIMEOUT 1800
                       RUN_SERIAL TRUE ENVIRONMENT "${RLPT_TEST_ENV}")
endforeach()
