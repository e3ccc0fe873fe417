# Tensor parallelism (src/model/tensor_parallel.cpp): tp = 2 and 4 against tp = 1, at 2 and 4 ranks.
foreach(np 2 4)
  rlpt_add_mpi_test(mpi_tensor_parallel_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "Tp/TensorParallelTest.*:TensorParallelEngine.*"
                    TIMEOUT 600)
endforeach()
# TensorParallel::allgather / allgather_into (every dimension, uneven and strided slices) at 1-4 ranks.
foreach(np 1 2 3 4)
  rlpt_add_mpi_test(mpi_tp_allgather_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "TpAllGatherTest.*" TIMEOUT 120)
endforeach()
