# Every handler of every role's table on a small batch through the real protocol
# (tests/mpi/test_role_handlers.cpp): colocated on 1 rank, the rollout on its own rank on 2.
rlpt_add_mpi_test(role_handlers_np1 NP 1 TARGET rlpt_mpi_tests FILTER "RoleHandlers.*" TIMEOUT 180)
rlpt_add_mpi_test(role_handlers_np2 NP 2 TARGET rlpt_mpi_tests FILTER "RoleHandlers.*" TIMEOUT 180)
