# Asynchronous RL and off-policy correction through the real binary (tests/mpi/async_runs.sh).
foreach(check correction staleness resume)
  add_test(NAME async_${check} COMMAND ${RLPT_GPU_SLOTS} ${CMAKE_CURRENT_SOURCE_DIR}/async_runs.sh $<TARGET_FILE:rlpt> ${PROJECT_SOURCE_DIR} ${check})
  set_tests_properties(async_${check} PROPERTIES PROCESSORS 2 TIMEOUT 600 LABELS mpi ENVIRONMENT "${RLPT_TEST_ENV}"
                       RESOURCE_GROUPS "2,gpus:1")
endforeach()
# Preemption of an asynchronous run (SIGUSR1 to mpirun after the first step, while the rollout
# rank generates the next batch): the job collects that generation into its checkpoint, exits 75,
# and a resumed run continues from it (tests/mpi/preempt_resume.sh).
add_test(NAME async_preempt_usr1_resume_np2 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/preempt_resume.sh --resume
  launcher:USR1 2 $<TARGET_FILE:rlpt> ${PROJECT_SOURCE_DIR}/configs/tiny.yaml trainer.save_freq=-1 trainer.test_freq=-1
  trainer.export_hf=false trainer.max_staleness=1
  "placement.groups=[{roles: [actor, reference], ranks: 1}, {roles: [rollout], ranks: 1}]")
set_tests_properties(async_preempt_usr1_resume_np2 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 180
                     ENVIRONMENT "${RLPT_TEST_ENV}")
