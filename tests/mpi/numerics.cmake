# The multi-rank numerics tests on another rounding family (RLPT_OTHER_KERNELS_ENV, tests/CMakeLists.txt):
# data-parallel bf16 and fp32 updates against the single-process reference and across ZeRO stages
# at 3 DP ranks (a DP size that is not a power of two: the loss scale rounds), tensor parallelism
# at 2 ranks.
rlpt_add_mpi_test(numerics_other_kernels_dp_np3 NP 3 TARGET rlpt_mpi_tests TIMEOUT 300
                  FILTER "EngineDp.SameGlobalBatch*:EngineDp.Zero2AndZero3*:EngineDp.Zero3Bf16*:EngineDp.HybridShardSameUpdate*")
rlpt_add_mpi_test(numerics_other_kernels_tp_np2 NP 2 TARGET rlpt_mpi_tests TIMEOUT 300
                  FILTER "Tp/TensorParallelTest.*:TensorParallelEngine.*")
foreach(t numerics_other_kernels_dp_np3 numerics_other_kernels_tp_np2)
  set_tests_properties(${t} PROPERTIES ENVIRONMENT "${RLPT_TEST_ENV};${RLPT_OTHER_KERNELS_ENV}")
endforeach()
