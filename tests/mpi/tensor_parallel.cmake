# Tensor parallelism (src/model/tensor_parallel.cpp): tp = 2 and 4 against tp = 1, at 2 and 4 ranks.
foreach(np 2 4)
  rlpt_add_mpi_test(mpi_tensor_parallel_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "Tp/TensorParallelTest.*:TensorParallelEngine.*"
                    TIMEOUT 600)
endforeach()
