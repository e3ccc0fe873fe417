# The collectives layer (comm/collectives.cpp, comm/bootstrap.cpp): the NCCL bootstrap's MPI
# rendezvous and the MPI-through-host-copies collectives, at 2-4 ranks; a peer or a root that never
# answers the bootstrap, at 3 ranks.
foreach(np 2 3 4)
  rlpt_add_mpi_test(mpi_collectives_np${np} NP ${np} TARGET rlpt_mpi_tests FILTER "Bootstrap.*:StagedCollectives.*"
                    TIMEOUT 120)
endforeach()
rlpt_add_mpi_test(mpi_bootstrap_timeout_np3 NP 3 TARGET rlpt_mpi_tests FILTER "BootstrapTimeout.*" TIMEOUT 60)
