# Devices through the real binary (rlpt/comm/device.h, app/job.cpp): the start-up GPU map and the
# device-collectives setting. Every refusal is a config error (exit 2) printed once, by rank 0,
# naming the rank and the reason, before any role builds a model.
set(_dev_tiny ${PROJECT_SOURCE_DIR}/configs/tiny.yaml)
set(_dev_mpirun ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG})
set(_dev_out trainer.output_dir=${CMAKE_CURRENT_BINARY_DIR}/device_runs)
if(NOT RLPT_HAVE_CUDA)
  # A build without CUDA kernels refuses model.device=cuda instead of failing later on the GPU.
  rlpt_add_failure_test(device_cuda_in_cpu_build_refused_np2 NP 2 TARGET rlpt ONCE MAX_SECONDS 60
    REGEX "rank 0: model\\.device=cuda, but this rlpt was built without CUDA kernels"
    ARGS ${_dev_tiny} ${_dev_out} model.device=cuda)
endif()
if(NOT RLPT_HAVE_NCCL)
  rlpt_add_failure_test(device_collectives_nccl_without_nccl_refused_np2 NP 2 TARGET rlpt ONCE MAX_SECONDS 60
    REGEX "trainer\\.device_collectives=nccl, but this rlpt was built without NCCL"
    ARGS ${_dev_tiny} ${_dev_out} trainer.device_collectives=nccl)
endif()
# device_collectives=mpi (the setting a one-GPU node uses for multi-rank layouts): on the CPU it
# changes nothing, and the run completes.
add_test(NAME device_collectives_mpi_np3 COMMAND ${_dev_mpirun} 3 ${RLPT_MPIEXEC_FLAGS} $<TARGET_FILE:rlpt> ${_dev_tiny}
  ${_dev_out}/mpi trainer.experiment_name=mpi trainer.device_collectives=mpi)
set_tests_properties(device_collectives_mpi_np3 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 120
  ENVIRONMENT "${RLPT_TEST_ENV}")
