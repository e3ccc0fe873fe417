# Faults and stop signals through the real binary under mpirun (RLPT_FAULT, see
# include/rlpt/core/debug_env.h). Every failure must end the whole job within a bound, name
# rank, role, method and step where rlpt can know them, and leave no process behind.
set(_tiny ${PROJECT_SOURCE_DIR}/configs/tiny.yaml)
set(_ops ${PROJECT_SOURCE_DIR}/tests/slurm)
set(_mpirun ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})

# rlpt_add_fault_test(<name> NP n FAULT spec MAX_SECONDS s REGEX re [ARGS ...])
function(rlpt_add_fault_test name)
  cmake_parse_arguments(T "" "NP;FAULT;MAX_SECONDS;REGEX" "ARGS" ${ARGN})
  rlpt_add_failure_test(${name} NP ${T_NP} TARGET rlpt MAX_SECONDS ${T_MAX_SECONDS} REGEX "${T_REGEX}"
                        ARGS ${_tiny} ${T_ARGS})
  set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT RLPT_FAULT=${T_FAULT})
endfunction()

# A worker that throws: the controller names rank, role, method, step and the worker's message,
# exits 3 through MPI_Abort.
rlpt_add_fault_test(fault_throw_np3 NP 3 FAULT throw:2:ping MAX_SECONDS 30
  REGEX "actor\\.ping failed on rank 2 \\(role actor, step -1\\): rank 2 \\[actor,rollout,reference\\]: ValueError: injected fault in ping")
rlpt_add_fault_test(fault_throw_np5 NP 5 FAULT throw:4:ping MAX_SECONDS 30
  REGEX "[a-z_]+\\.ping failed on rank 4 \\(role [a-z_]+, step -1\\): .*injected fault in ping")
# A worker killed by SIGKILL (OOM killer, node failure) cannot say anything. Open MPI ends the
# job (mpirun exits 137) and names the rank; before it kills the controller it sends SIGTERM,
# on which the controller logs the call in flight: method, step and the silent rank.
add_test(NAME fault_kill_np3 COMMAND ${_ops}/expect_output.sh --rc 137 --max-seconds 30
  --regex "(mpirun|mpiexec) noticed that process rank 2 with PID [0-9]+ on node [^ ]+ exited on signal 9 \\(Killed\\)"
  --regex "SIGTERM received while actor\\.ping \\(step -1\\) waits for rank\\(s\\) 2"
  -- ${_mpirun} 3 ${RLPT_MPIEXEC_FLAGS} $<TARGET_FILE:rlpt> ${_tiny})
set_tests_properties(fault_kill_np3 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 120
  ENVIRONMENT "${RLPT_TEST_ENV};RLPT_FAULT=kill:2:ping")
# A worker that hangs: the controller's watchdog (trainer.call_timeout_s) names the silent
# rank, the method and the step, and aborts the job (exit 4).
rlpt_add_fault_test(fault_hang_np3 NP 3 FAULT hang:2:ping MAX_SECONDS 30
  REGEX "actor\\.ping \\(step -1\\): rank\\(s\\) 2 did not answer within 5 s \\(trainer\\.call_timeout_s\\)"
  ARGS trainer.call_timeout_s=5 trainer.stall_warn_s=2)

# Stop signals under mpirun (rlpt_signal_probe stops like the trainer: 75 at a step boundary).
set(_probe $<TARGET_FILE:rlpt_signal_probe>)
set(_flags ${RLPT_MPIEXEC_FLAGS})
# kill -USR1 <mpirun>: forwarded to every rank.
add_test(NAME signal_mpirun_usr1_np3 COMMAND ${_ops}/expect_output.sh --rc 75 --max-seconds 60
  --regex "stop at step [0-9]+ by SIGUSR1; signals seen per rank: 0=SIGUSR1 1=SIGUSR1 2=SIGUSR1$"
  -- ${_ops}/signal_case.sh --send launcher:USR1 -- ${_mpirun} 3 ${_flags} ${_probe})
# SIGTERM straight to every rank (as Slurm delivers it): not fatal, every rank stops with 75.
add_test(NAME signal_ranks_term_np3 COMMAND ${_ops}/expect_output.sh --rc 75 --max-seconds 60
  --regex "stop at step [0-9]+ by SIGTERM; signals seen per rank: 0=SIGTERM 1=SIGTERM 2=SIGTERM$"
  -- ${_ops}/signal_case.sh --send ranks:TERM -- ${_mpirun} 3 ${_flags} ${_probe})
# kill -TERM <mpirun>: not forwarded; mpirun ends the job itself (SIGCONT, then SIGTERM to the
# ranks 1 s later, SIGKILL 1 s after that). The ranks see the SIGTERM and stop in time.
add_test(NAME signal_mpirun_term_np3 COMMAND ${_ops}/expect_output.sh --rc nonzero --max-seconds 60
  --regex "stop at step [0-9]+ by SIGTERM"
  -- ${_ops}/signal_case.sh --send launcher:TERM -- ${_mpirun} 3 ${_flags} ${_probe})
set_tests_properties(signal_mpirun_usr1_np3 signal_ranks_term_np3 signal_mpirun_term_np3 PROPERTIES
  LABELS mpi PROCESSORS 2 TIMEOUT 120 ENVIRONMENT "${RLPT_TEST_ENV}")

# Simulated multi-node placement with the real binary: RLPT_SIMULATE_NODES=2 at 4 ranks gives
# 2 nodes of 2 ranks; the ping table shows each worker's node and local rank.
add_test(NAME placement_simulated_2nodes_np4 COMMAND ${_ops}/expect_output.sh --rc 0 --max-seconds 90
  --regex "2 nodes"
  --regex "rank +1 +host [^ ]+ +node 0 +local rank 1 "
  --regex "rank +2 +host [^ ]+ +node 1 +local rank 0 "
  --regex "rank +3 +host [^ ]+ +node 1 +local rank 1 "
  --regex "all 3 worker rank\\(s\\) answered"
  -- ${_mpirun} 4 ${_flags} $<TARGET_FILE:rlpt> ${_tiny})
set_tests_properties(placement_simulated_2nodes_np4 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 120
  ENVIRONMENT "${RLPT_TEST_ENV};RLPT_SIMULATE_NODES=2")
