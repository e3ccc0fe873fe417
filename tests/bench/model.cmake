# Transformer forward/decode/train-step benchmark (label bench). Registered under the "bench"
# ctest configuration so a plain `ctest` never runs it: `ctest -C bench -L bench -R model -V`.
add_executable(rlpt_bench_model_forward ${CMAKE_CURRENT_LIST_DIR}/bench_model_forward.cpp)
target_link_libraries(rlpt_bench_model_forward PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_model_forward)
rlpt_warnings(rlpt_bench_model_forward)
add_test(NAME bench_model_forward COMMAND rlpt_bench_model_forward CONFIGURATIONS bench)
set_tests_properties(bench_model_forward PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE)
