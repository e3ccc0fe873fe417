#!/usr/bin/env bash
# gpu_slots.sh COMMAND...: runs COMMAND with CUDA_VISIBLE_DEVICES set to the GPUs ctest gave
# this test (RESOURCE_GROUPS "N,gpus:1", resource spec from scripts/gpu_resource_spec.sh). ctest
# sets CTEST_RESOURCE_GROUP_COUNT and CTEST_RESOURCE_GROUP_<i>_GPUS="id:<gpu>,slots:1" only when
# it runs with --resource-spec-file; otherwise (no GPUs: every CI and dev machine here) this is
# exec COMMAND, unchanged.
set -euo pipefail
if [ -n "${CTEST_RESOURCE_GROUP_COUNT:-}" ]; then
  ids=()
  for ((i = 0; i < CTEST_RESOURCE_GROUP_COUNT; ++i)); do
    var="CTEST_RESOURCE_GROUP_${i}_GPUS"
    # "id:3,slots:1" (one entry per group; several groups may name the same card when the spec
    # gives a card several slots).
    for entry in ${!var//;/ }; do
      id=${entry#id:}; id=${id%%,*}
      [[ " ${ids[*]-} " == *" $id "* ]] || ids+=("$id")
    done
  done
  CUDA_VISIBLE_DEVICES=$(IFS=,; echo "${ids[*]}")
  export CUDA_VISIBLE_DEVICES
  # Fewer cards than ranks: NCCL cannot connect two ranks on one card, so device collectives go
  # over MPI (trainer.device_collectives=auto reads this; rlpt/comm/device.h).
  if [ "${#ids[@]}" -lt "$CTEST_RESOURCE_GROUP_COUNT" ] && [ -z "${RLPT_DEVICE_COLLECTIVES:-}" ]; then
    export RLPT_DEVICE_COLLECTIVES=mpi
  fi
fi
exec "$@"
