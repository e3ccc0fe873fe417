# The real trainer built in-process (tests/mpi/test_trainer_matrix.cpp): every advantage
# estimator x the losses vanilla/dro/clip_cov/gspo for one step of configs/tiny.yaml, ReMax's
# greedy baseline, the lr schedule unit, clip_cov draws across a resume.
rlpt_add_mpi_test(trainer_matrix_np1 NP 1 TARGET rlpt_mpi_tests FILTER "TrainerMatrix.*" TIMEOUT 300)
# The same on 2 ranks: every role DP-split over both (the critic too), rank 0 also the controller.
rlpt_add_mpi_test(trainer_matrix_np2 NP 2 TARGET rlpt_mpi_tests FILTER "TrainerMatrix.*" TIMEOUT 300)
