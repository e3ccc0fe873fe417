# TrainEngine data parallelism (src/engine): the same global batch at 1, 2, 3 and 4 DP ranks, ZeRO-1/2/3,
# save/load under ZeRO-1 and the mismatch twins (a clean error on every rank, not a hang).
foreach(np 1 2 3 4)
  rlpt_add_mpi_test(mpi_engine_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "EngineDp.*" TIMEOUT 600)
endforeach()
