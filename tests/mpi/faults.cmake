# Faults and stop signals through the real binary under mpirun (RLPT_FAULT, see
# include/rlpt/core/debug_env.h). Every failure must end the whole job within a bound, name
# rank, role, method and step where rlpt can know them, and leave no process behind.
# configs/tiny.yaml at 3 ranks: rank 0 controller + actor/rollout/reference, ranks 1-2 the same
# roles; the faults hit world rank 2 in compute_log_prob of training step 2.
set(_tiny ${PROJECT_SOURCE_DIR}/configs/tiny.yaml)
set(_ops ${PROJECT_SOURCE_DIR}/tests/slurm)
set(_mpirun ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})
# Each run writes under the test's working directory, never into the source tree.
set(_out trainer.output_dir=${CMAKE_CURRENT_BINARY_DIR}/fault_runs)

# rlpt_add_fault_test(<name> NP n FAULT spec MAX_SECONDS s REGEX re [ARGS ...])
function(rlpt_add_fault_test name)
  cmake_parse_arguments(T "" "NP;FAULT;MAX_SECONDS;REGEX" "ARGS" ${ARGN})
  rlpt_add_failure_test(${name} NP ${T_NP} TARGET rlpt MAX_SECONDS ${T_MAX_SECONDS} REGEX "${T_REGEX}"
                        ARGS ${_tiny} ${_out}/${name} ${T_ARGS})
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT RLPT_FAULT=${T_FAULT})
endfunction()

# A worker that throws: the controller names rank, role, method, step and the worker's message
# and aborts the job (exit 3).
rlpt_add_fault_test(fault_throw_np3 NP 3 FAULT throw:2:compute_log_prob:2 MAX_SECONDS 45
  REGEX "actor\\.compute_log_prob failed on rank 2 \\(role actor, step 2\\): rank 2 \\[actor,rollout,reference\\]: ValueError: injected fault in compute_log_prob")
# A worker killed by SIGKILL (OOM killer, node failure) cannot say anything. Open MPI ends the
# job (mpirun exits 137) naming the rank; before it kills the controller it sends SIGTERM, on
# which the controller logs the call in flight: method, step and the silent rank.
# odls_base_sigkill_timeout=5 gives the controller 5 s (default 1 s) between the two, so the
# line appears even on a loaded machine.
add_test(NAME fault_kill_np3 COMMAND ${_ops}/expect_output.sh --rc 137 --max-seconds 45
  --regex "(mpirun|mpiexec) noticed that process rank 2 with PID [0-9]+ on node [^ ]+ exited on signal 9 \\(Killed\\)"
  --regex "SIGTERM received while actor\\.compute_log_prob \\(step 2\\) waits for rank\\(s\\) 2"
  -- ${_mpirun} 3 ${RLPT_MPIEXEC_FLAGS} --mca odls_base_sigkill_timeout 5 $<TARGET_FILE:rlpt> ${_tiny}
     ${_out}/fault_kill_np3)
set_tests_properties(fault_kill_np3 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 120
  ENVIRONMENT "${RLPT_TEST_ENV};RLPT_FAULT=kill:2:compute_log_prob:2")
# A worker that hangs: the controller's watchdog (trainer.call_timeout_s) names the silent
# rank, the method and the step, and aborts the job (exit 4).
rlpt_add_fault_test(fault_hang_np3 NP 3 FAULT hang:2:compute_log_prob:2 MAX_SECONDS 60
  REGEX "actor\\.compute_log_prob \\(step 2\\): rank\\(s\\) 2 did not answer within 10 s \\(trainer\\.call_timeout_s\\)"
  ARGS trainer.call_timeout_s=10 trainer.stall_warn_s=3)

# Preemption of a real run (tests/mpi/preempt_resume.sh): the signal arrives after the first
# training step; the job finishes its step, checkpoints every role and exits 75; with --resume
# a second run (trainer.resume=auto) continues from that checkpoint.
set(_long trainer.save_freq=-1 trainer.test_freq=-1 trainer.export_hf=false)
# kill -USR1 <mpirun>: mpirun forwards it to every rank.
add_test(NAME preempt_mpirun_usr1_resume_np3 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/preempt_resume.sh --resume
  launcher:USR1 3 $<TARGET_FILE:rlpt> ${_tiny} ${_long})
# SIGTERM to every rank (what scancel and the Slurm time limit deliver): not fatal.
add_test(NAME preempt_ranks_term_np3 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/preempt_resume.sh
  ranks:TERM 3 $<TARGET_FILE:rlpt> ${_tiny} ${_long})
# SIGTERM to one worker only: its next reply tells the controller, which stops the job.
add_test(NAME preempt_worker_only_term_np3 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/preempt_resume.sh
  rank2:TERM 3 $<TARGET_FILE:rlpt> ${_tiny} ${_long})
# The SFT trainer stops and resumes the same way.
add_test(NAME preempt_sft_usr1_resume_np2 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/preempt_resume.sh --resume
  launcher:USR1 2 $<TARGET_FILE:rlpt> ${_tiny} trainer.mode=sft sft.batch_size=12 sft.micro_batch_size_per_rank=6
  sft.eval_every=0 trainer.export_hf=false)
set_tests_properties(preempt_mpirun_usr1_resume_np3 preempt_ranks_term_np3 preempt_worker_only_term_np3
  preempt_sft_usr1_resume_np2 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 180 ENVIRONMENT "${RLPT_TEST_ENV}")

# SIGKILL of the whole job where PID 1 never reaps (a container without an init): the dead ranks
# stay zombies, and the restart must still take the run lock and resume from the newest
# checkpoint (tests/mpi/zombie_restart.sh; skipped where no PID namespace can be made).
add_test(NAME zombie_kill9_restart_np3 COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/zombie_restart.sh 3 $<TARGET_FILE:rlpt>
  ${_tiny})
set_tests_properties(zombie_kill9_restart_np3 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 320 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RLPT_TEST_ENV}")

# Simulated multi-node placement with the real binary: RLPT_SIMULATE_NODES=2 at 4 ranks gives
# 2 nodes of 2 ranks; the ping table shows each rank's node and local rank (rank 0 hosts roles).
add_test(NAME placement_simulated_2nodes_np4 COMMAND ${_ops}/expect_output.sh --rc 0 --max-seconds 90
  --regex "2 nodes"
  --regex "rank +0 +host [^ ]+ +node 0 +local rank 0 "
  --regex "rank +1 +host [^ ]+ +node 0 +local rank 1 "
  --regex "rank +2 +host [^ ]+ +node 1 +local rank 0 "
  --regex "rank +3 +host [^ ]+ +node 1 +local rank 1 "
  --regex "all 4 worker rank\\(s\\) answered"
  -- ${_mpirun} 4 ${RLPT_MPIEXEC_FLAGS} $<TARGET_FILE:rlpt> ${_tiny} ${_out}/placement_simulated_2nodes_np4
     trainer.total_training_steps=1 trainer.export_hf=false)
set_tests_properties(placement_simulated_2nodes_np4 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 120
  ENVIRONMENT "${RLPT_TEST_ENV};RLPT_SIMULATE_NODES=2")

# Resuming an SFT run from an RL checkpoint is refused with one clear message (exit 2): the
# setup writes an RL checkpoint (step 1) into a run directory, the SFT run then finds it.
set(_mixed ${CMAKE_CURRENT_BINARY_DIR}/fault_runs/resume_mixed_modes)
add_test(NAME resume_mixed_modes_setup COMMAND sh -c "rm -rf '${_mixed}' && exec \"$0\" \"$@\""
  ${_mpirun} 2 ${RLPT_MPIEXEC_FLAGS} $<TARGET_FILE:rlpt> ${_tiny} trainer.output_dir=${_mixed}
  trainer.total_training_steps=1 trainer.save_freq=1 trainer.export_hf=false)
set_tests_properties(resume_mixed_modes_setup PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 120
  FIXTURES_SETUP rl_checkpoint_for_sft ENVIRONMENT "${RLPT_TEST_ENV}")
rlpt_add_failure_test(resume_sft_from_rl_checkpoint_refused_np2 NP 2 TARGET rlpt ONCE MAX_SECONDS 60
  REGEX "cannot resume an sft run from .*step_0*1: it is a checkpoint of a trainer\\.mode=rl run"
  ARGS ${_tiny} trainer.output_dir=${_mixed} trainer.mode=sft)
set_tests_properties(resume_sft_from_rl_checkpoint_refused_np2 PROPERTIES FIXTURES_REQUIRED rl_checkpoint_for_sft)

# Bounded failure on every path (tests/mpi/fault_cases.sh): SIGSTOP of a worker in each phase,
# in the shipped layout (rank 0 hosts roles) and with the controller alone; a rank that cannot
# write its checkpoint; a full disk; damaged checkpoints; two jobs on one run directory. Each
# case checks exit code, message, time bound, leftovers and that no complete checkpoint is lost.
set(_fault_cases sigstop-external unwritable-hosted unwritable-alone disk-full damaged-setup damaged-truncated
  damaged-complete damaged-missing damaged-flipped all-damaged two-jobs)
foreach(phase gen logprob update save)
  list(APPEND _fault_cases stop-${phase}-hosted stop-${phase}-alone)
endforeach()
foreach(c ${_fault_cases})
  string(REPLACE "-" "_" _name "fault_${c}_np3")
  add_test(NAME ${_name} COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/fault_cases.sh ${c} $<TARGET_FILE:rlpt>
    ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/fault_runs/${c})
  # 77: the case cannot run here (disk-full without the right to mount a tmpfs).
  set_tests_properties(${_name} PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 180 SKIP_RETURN_CODE 77
    ENVIRONMENT "${RLPT_TEST_ENV}")
endforeach()
set_tests_properties(fault_damaged_setup_np3 PROPERTIES FIXTURES_SETUP rl_run_with_3_checkpoints)
set_tests_properties(fault_damaged_truncated_np3 fault_damaged_complete_np3 fault_damaged_missing_np3
  fault_damaged_flipped_np3 fault_all_damaged_np3 PROPERTIES FIXTURES_REQUIRED rl_run_with_3_checkpoints)
