# Agent rollout workload (multi-turn tool calls through a real MCP server with a configurable
# latency): the continuous agent loop vs the turn-by-turn one in one run.
# `ctest -C bench -L bench -R bench_agent -V`, or scripts/bench_agent.sh for the table.
add_executable(rlpt_bench_agent ${CMAKE_CURRENT_LIST_DIR}/bench_agent.cpp)
target_link_libraries(rlpt_bench_agent PRIVATE rlpt_core)
target_include_directories(rlpt_bench_agent PRIVATE ${PROJECT_SOURCE_DIR}/tests)
rlpt_torch_target(rlpt_bench_agent)
rlpt_warnings(rlpt_bench_agent)
add_test(NAME bench_agent COMMAND rlpt_bench_agent CONFIGURATIONS bench)
set_tests_properties(bench_agent PROPERTIES LABELS bench TIMEOUT 1800 RUN_SERIAL TRUE ENVIRONMENT OMP_NUM_THREADS=1)
