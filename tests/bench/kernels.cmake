# Kernel benchmarks (label bench; never part of the unit/mpi runs).
add_executable(rlpt_bench_logprob ${CMAKE_CURRENT_LIST_DIR}/bench_logprob.cpp)
target_link_libraries(rlpt_bench_logprob PRIVATE rlpt_kernels)
rlpt_torch_target(rlpt_bench_logprob)
rlpt_warnings(rlpt_bench_logprob)
add_test(NAME bench_logprob COMMAND rlpt_bench_logprob)
set_tests_properties(bench_logprob PROPERTIES LABELS bench TIMEOUT 1200 RUN_SERIAL TRUE)
