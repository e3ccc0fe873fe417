# Rollout decode throughput vs the machine's bandwidth / matmul ceilings (label bench). Never
# run by a plain `ctest`: `ctest -C bench -L bench -R decode -V`, or scripts/bench_decode.sh for a table.
add_executable(rlpt_bench_decode ${CMAKE_CURRENT_LIST_DIR}/bench_decode.cpp)
target_link_libraries(rlpt_bench_decode PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_decode)
rlpt_warnings(rlpt_bench_decode)
add_test(NAME bench_decode COMMAND rlpt_bench_decode CONFIGURATIONS bench)
set_tests_properties(bench_decode PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE ENVIRONMENT OMP_NUM_THREADS=1)

# RL rollout workload (64 prompts x 8 samples, spread response lengths): continuous batching with
# shared prompts vs static batching in one run. `ctest -C bench -L bench -R bench_rollout -V`, or
# scripts/bench_rollout.sh for the table.
add_executable(rlpt_bench_rollout ${CMAKE_CURRENT_LIST_DIR}/bench_rollout.cpp)
target_link_libraries(rlpt_bench_rollout PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_rollout)
rlpt_warnings(rlpt_bench_rollout)
add_test(NAME bench_rollout COMMAND rlpt_bench_rollout CONFIGURATIONS bench)
set_tests_properties(bench_rollout PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE ENVIRONMENT OMP_NUM_THREADS=1)
