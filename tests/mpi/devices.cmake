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

# A one-GPU node, faked (RLPT_FAKE_GPUS: every rank sees the same GPU; the run stays on the CPU):
# configs/tiny.yaml at 3 ranks runs by its defaults, its ranks sharing the GPU with their device
# collectives over MPI (trainer.device_collectives=auto), said once in the log.
set(_dev_one_gpu RLPT_FAKE_GPUS=GPU-0a1b2c3d-0000-1111-2222-333344445555)
add_test(NAME device_one_gpu_defaults_np3 COMMAND ${PROJECT_SOURCE_DIR}/tests/slurm/expect_output.sh --rc 0
  --max-seconds 150
  --regex "RLPT_FAKE_GPUS: planned as on GPUs: rank 0 -> cuda:0 \\(GPU-0a1b2c3d\\), rank 1 -> cuda:0 \\(GPU-0a1b2c3d\\), rank 2 -> cuda:0 \\(GPU-0a1b2c3d\\); device collectives over mpi \\(auto: ranks 0,1,2 share a GPU"
  --regex "done: 2 steps"
  -- ${_dev_mpirun} 3 ${RLPT_MPIEXEC_FLAGS} $<TARGET_FILE:rlpt> ${_dev_tiny} ${_dev_out}/one_gpu
     trainer.experiment_name=one_gpu trainer.export_hf=false)
set_tests_properties(device_one_gpu_defaults_np3 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 180
  ENVIRONMENT "${RLPT_TEST_ENV};${_dev_one_gpu}")
# Per-task binding, faked: each rank sees only its own GPU (a UUID per rank), as its cuda:0.
# Counted by UUID these are three GPUs, none shared (counting devices would say one).
add_test(NAME device_per_task_binding_np3 COMMAND ${PROJECT_SOURCE_DIR}/tests/slurm/expect_output.sh --rc 0
  --max-seconds 150
  --regex "RLPT_FAKE_GPUS: planned as on GPUs: rank 0 -> cuda:0 \\(GPU-0000000-\\), rank 1 -> cuda:0 \\(GPU-1111111-\\), rank 2 -> cuda:0 \\(GPU-2222222-\\); device collectives over (nccl|mpi) \\(auto: (a GPU per rank|this rlpt was built without NCCL)\\)"
  --absent "share a GPU"
  -- ${_dev_mpirun} 3 ${RLPT_MPIEXEC_FLAGS} ${CMAKE_CURRENT_SOURCE_DIR}/fake_gpu_per_rank.sh
     $<TARGET_FILE:rlpt> ${_dev_tiny} ${_dev_out}/per_task trainer.experiment_name=per_task trainer.export_hf=false
     trainer.total_training_steps=1)
set_tests_properties(device_per_task_binding_np3 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 180
  ENVIRONMENT "${RLPT_TEST_ENV}")
# The demo (scripts/demo.sh: SFT then GRPO, 4 ranks) on the same faked one-GPU node, shortened:
# both stages (every rank hosts roles in both) plan the shared GPU, and the demo completes with its
# accuracy line.
add_test(NAME demo_one_gpu_defaults_np4 COMMAND ${PROJECT_SOURCE_DIR}/tests/slurm/expect_output.sh --rc 0
  --max-seconds 400
  --regex "RLPT_FAKE_GPUS: planned as on GPUs: rank 0 -> cuda:0 \\(GPU-0a1b2c3d\\), rank 1 -> cuda:0 \\(GPU-0a1b2c3d\\), rank 2 -> cuda:0 \\(GPU-0a1b2c3d\\), rank 3 -> cuda:0 \\(GPU-0a1b2c3d\\); device collectives over mpi \\(auto: ranks 0,1,2,3 share a GPU"
  --regex "sft step 20/20 "
  --regex "done: 2 steps"
  --regex "held-out greedy accuracy: "
  -- ${PROJECT_SOURCE_DIR}/scripts/demo.sh --no-setup --name ctest-one-gpu sft.total_steps=20
     trainer.total_training_steps=2 trainer.test_freq=2 trainer.export_hf=false)
set_tests_properties(demo_one_gpu_defaults_np4 PROPERTIES LABELS mpi PROCESSORS 2 TIMEOUT 420
  ENVIRONMENT "${RLPT_TEST_ENV};${_dev_one_gpu};RLPT_BIN=$<TARGET_FILE:rlpt>")
