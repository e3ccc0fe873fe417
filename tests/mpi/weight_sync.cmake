# Weight sync (src/weights/sync_skeleton.cpp, src/weights/mpi_weight_sync.cpp): 1, 2 and 3 receivers.
foreach(np 2 3 4)
  rlpt_add_mpi_test(mpi_weight_sync_np${np} NP ${np} TARGET rlpt_mpi_tests
                    FILTER "WeightSync*" TIMEOUT 300)
endforeach()
