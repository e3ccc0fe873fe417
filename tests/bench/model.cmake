# Transformer forward/decode/train-step benchmark (label bench). Registered under the "bench"
# ctest configuration so a plain `ctest` never runs it: `ctest -C bench -L bench -R model -V`.
add_executable(rlpt_bench_model_forward ${CMAKE_CURRENT_LIST_DIR}/bench_model_forward.cpp)
target_link_libraries(rlpt_bench_model_forward PRIVATE rlpt_core)
rlpt_torch_target(rlpt_bench_model_forward)
rlpt_warnings(rlpt_bench_model_forward)
add_test(NAME bench_model_forward COMMAND rlpt_bench_model_forward CONFIGURATIONS bench)
set_tests_properties(bench_model_forward PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE)

# Mixture-of-experts block and decode (scripts/bench_moe.sh runs it beside transformers' block).
# src/: the sparse block is benchmarked through its private header (model/layers.h).
add_executable(rlpt_bench_moe ${CMAKE_CURRENT_LIST_DIR}/bench_moe.cpp)
target_link_libraries(rlpt_bench_moe PRIVATE rlpt_core)
target_include_directories(rlpt_bench_moe PRIVATE ${PROJECT_SOURCE_DIR}/src)
rlpt_torch_target(rlpt_bench_moe)
rlpt_warnings(rlpt_bench_moe)
add_test(NAME bench_moe COMMAND rlpt_bench_moe --iters 1 --tokens 256 --decode-steps 4 CONFIGURATIONS bench)
set_tests_properties(bench_moe PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE)
