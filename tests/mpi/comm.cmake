foreach(np 2 4 5 7)
  rlpt_add_mpi_test(mpi_comm_basics_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "CommBasics.*")
endforeach()
