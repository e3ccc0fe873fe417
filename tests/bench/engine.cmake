# TrainEngine throughput benchmark (label bench). Registered under the "bench" ctest
# configuration so a plain `ctest` never runs it: `ctest -C bench -L bench -R train -V`, or
# scripts/bench_train.sh for the markdown table.
add_executable(rlpt_bench_train ${CMAKE_CURRENT_LIST_DIR}/bench_train.cpp)
target_link_libraries(rlpt_bench_train PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_train)
rlpt_warnings(rlpt_bench_train)
add_test(NAME bench_train COMMAND ${PROJECT_SOURCE_DIR}/scripts/bench_train.sh $<TARGET_FILE:rlpt_bench_train>
         CONFIGURATIONS bench)
set_tests_properties(bench_train PROPERTIES LABELS bench TIMEOUT 3600 RUN_SERIAL TRUE ENVIRONMENT "${RLPT_TEST_ENV}")

# Tensor parallelism: ~100M model, tp 2 vs 2 x tp 1 on 2 ranks (scripts/bench_tp.sh prints the table).
add_executable(rlpt_bench_tp ${CMAKE_CURRENT_LIST_DIR}/bench_tp.cpp)
target_link_libraries(rlpt_bench_tp PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_tp)
rlpt_warnings(rlpt_bench_tp)
add_test(NAME bench_tp COMMAND ${PROJECT_SOURCE_DIR}/scripts/bench_tp.sh $<TARGET_FILE:rlpt_bench_tp>
         CONFIGURATIONS bench)
set_tests_properties(bench_tp PROPERTIES LABELS bench TIMEOUT 3600 RUN_SERIAL TRUE ENVIRONMENT "${RLPT_TEST_ENV}")

# Shard-to-shard weight sync between tp layouts vs raw p2p and a full broadcast (scripts/bench_reshard.sh).
add_executable(rlpt_bench_reshard ${CMAKE_CURRENT_LIST_DIR}/bench_reshard.cpp)
target_link_libraries(rlpt_bench_reshard PRIVATE rlpt_weights)
rlpt_torch_target(rlpt_bench_reshard)
rlpt_warnings(rlpt_bench_reshard)
add_test(NAME bench_reshard COMMAND ${PROJECT_SOURCE_DIR}/scripts/bench_reshard.sh $<TARGET_FILE:rlpt_bench_reshard>
         CONFIGURATIONS bench)
set_tests_properties(bench_reshard PROPERTIES LABELS bench TIMEOUT 3600 RUN_SERIAL TRUE ENVIRONMENT "${RLPT_TEST_ENV}")

# Peak memory of the HF export of a ZeRO-3 actor, gathered vs streamed (scripts/bench_export.sh).
add_executable(rlpt_bench_export ${CMAKE_CURRENT_LIST_DIR}/bench_export.cpp)
target_link_libraries(rlpt_bench_export PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_export)
rlpt_warnings(rlpt_bench_export)
add_test(NAME bench_export COMMAND ${PROJECT_SOURCE_DIR}/scripts/bench_export.sh $<TARGET_FILE:rlpt_bench_export>
         CONFIGURATIONS bench)
set_tests_properties(bench_export PROPERTIES LABELS bench TIMEOUT 3600 RUN_SERIAL TRUE ENVIRONMENT "${RLPT_TEST_ENV}")
