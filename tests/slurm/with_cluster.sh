#!/usr/bin/env bash
# with_cluster.sh command...: makes sure the local single-node Slurm runs
# (scripts/slurm/local_cluster.sh start), exports SLURM_CONF and runs the command.
# Exit 77 (ctest SKIP_RETURN_CODE) when Slurm cannot be had here: not root, or the packages
# cannot be installed. A cluster that is installed but does not start is a failure.
set -u
src="$(cd "$(dirname "$0")/../.." && pwd)"
cluster="$src/scripts/slurm/local_cluster.sh"
if [ "$(id -u)" -ne 0 ]; then echo "SKIP: the local Slurm cluster needs root"; exit 77; fi
if ! "$cluster" start; then
  if ! command -v slurmctld >/dev/null || ! command -v srun >/dev/null; then
    echo "SKIP: Slurm is not installed and could not be installed"; exit 77
  fi
  echo "FAIL: the local Slurm cluster did not start"; exit 1
fi
eval "$("$cluster" env)"
exec "$@"
