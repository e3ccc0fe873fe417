# GPU speed (issue 28): rollout, training step, log-prob pass and a whole GRPO step of a random
# Qwen2.5-shaped model against HF transformers / PyTorch eager in the same run (label bench, never
# run by a plain `ctest`): scripts/bench_gpu.sh prints the table; `ctest -C bench -L bench -R
# bench_gpu -V` runs its CPU smoke form (tiny shapes).
add_executable(rlpt_bench_gpu ${CMAKE_CURRENT_LIST_DIR}/bench_gpu.cpp)
target_link_libraries(rlpt_bench_gpu PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_gpu)
rlpt_warnings(rlpt_bench_gpu)
add_test(NAME bench_gpu COMMAND ${PROJECT_SOURCE_DIR}/scripts/bench_gpu.sh --quick --device cpu
         --bin $<TARGET_FILE:rlpt_bench_gpu> --rlpt $<TARGET_FILE:rlpt> CONFIGURATIONS bench)
set_tests_properties(bench_gpu PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE ENVIRONMENT "${RLPT_TEST_ENV}")
