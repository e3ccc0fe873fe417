#!/usr/bin/env bash
# cluster_fixture.sh start|stop MARKER: the ctest fixture around the Slurm tests.
#   start  when the local Slurm (scripts/slurm/local_cluster.sh) does not run yet, starts it
#          and writes MARKER; when it already runs (someone else's), leaves it alone. Exit 77
#          (skip) when it cannot run here: not root, or the packages cannot be installed.
#   stop   stops the daemons only when MARKER says this fixture started them.
set -u
mode="$1"; marker="$2"
cluster="$(cd "$(dirname "$0")/../.." && pwd)/scripts/slurm/local_cluster.sh"
case "$mode" in
  start)
    if [ "$(id -u)" -ne 0 ]; then echo "SKIP: the local Slurm cluster needs root"; exit 77; fi
    if "$cluster" status >/dev/null 2>&1; then echo "cluster_fixture: Slurm already runs; not ours to stop"; exit 0; fi
    t0=$(date +%s.%N)
    if ! "$cluster" start; then
      if ! command -v slurmctld >/dev/null || ! command -v srun >/dev/null; then
        echo "SKIP: Slurm is not installed and could not be installed"; exit 77
      fi
      echo "FAIL: the local Slurm cluster did not start"; exit 1
    fi
    touch "$marker"
    echo "cluster_fixture: started in $(echo "$(date +%s.%N) - $t0" | bc) s"
    ;;
  stop)
    if [ -f "$marker" ]; then "$cluster" stop && rm -f "$marker"; else echo "cluster_fixture: nothing of ours to stop"; fi
    ;;
  *) echo "usage: $0 start|stop MARKER" >&2; exit 2;;
esac
