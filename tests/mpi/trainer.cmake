# End-to-end trainer runs through the real binary (tests/mpi/trainer_runs.sh).
foreach(check smoke-1 smoke-3 split rollout-bf16 head-precision dp-invariance continuous resume sft qwen3 own-task agent agent-demo tp-invariance tp-layouts zero3 zero3-sync zero-hybrid ref-sharded reshard hybrid elastic elastic-grow shard-damage stop-strings beam-search two-stage moe)
  add_test(NAME trainer_${check} COMMAND ${RLPT_GPU_SLOTS} ${CMAKE_CURRENT_SOURCE_DIR}/trainer_runs.sh $<TARGET_FILE:rlpt> ${PROJECT_SOURCE_DIR} ${check})
  set_tests_properties(trainer_${check} PROPERTIES PROCESSORS 2 TIMEOUT 600 LABELS mpi ENVIRONMENT "${RLPT_TEST_ENV}"
                       RESOURCE_GROUPS "6,gpus:1")  # up to 6 ranks (tp-layouts)
endforeach()

# The runs a refactor must not change (the demo, tiny at 1-4 ranks, async, PPO, the agent demo)
# give the metrics kept in tests/golden/metrics/ byte for byte (scripts/same_metrics.sh; a skip
# on a machine other than the one that recorded them, where bits may differ).
add_test(NAME same_metrics_golden COMMAND ${PROJECT_SOURCE_DIR}/scripts/same_metrics.sh check)
set_tests_properties(same_metrics_golden PROPERTIES PROCESSORS 2 TIMEOUT 900 LABELS mpi SKIP_RETURN_CODE 77
                     ENVIRONMENT "${RLPT_TEST_ENV};RLPT_BIN=$<TARGET_FILE:rlpt>" RESOURCE_GROUPS "4,gpus:1")
