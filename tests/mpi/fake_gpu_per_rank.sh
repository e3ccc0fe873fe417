#!/bin/sh
# fake_gpu_per_rank.sh COMMAND [ARG...]: per-task GPU binding, faked for tests. This rank sees one
# GPU of its own, RLPT_FAKE_GPUS=GPU-<rank repeated 7 times>-per-task (as its cuda:0), then runs
# COMMAND (rlpt/comm/device.h: RLPT_FAKE_GPUS).
r=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:?fake_gpu_per_rank.sh: no MPI rank in the environment}}
RLPT_FAKE_GPUS="GPU-$r$r$r$r$r$r$r-per-task"
export RLPT_FAKE_GPUS
exec "$@"
