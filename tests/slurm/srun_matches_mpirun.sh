#!/usr/bin/env bash
# srun_matches_mpirun.sh N RLPT_BINARY CONFIG [key=value...]
# `srun -n N rlpt CONFIG` must work exactly like `mpirun -np N rlpt CONFIG`: both exit 0 and
# log the same placement and the same per-rank lines (host, node, local rank, threads, roles;
# pids and cpus (srun binds ranks) differ). The srun run must also log its Slurm job. Ranks come from MPI (PMIx).
set -u
n="$1"; bin="$2"; shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi_flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 --mca btl_vader_single_copy_mechanism none)
status=0
run() {  # run NAME command...: output in $work/NAME.log, exit code checked
  local name="$1"; shift
  local t0=$(date +%s.%N)
  (cd "$work" && "$@") >"$work/$name.log" 2>&1
  local rc=$?
  echo "== $name: exit code $rc after $(echo "$(date +%s.%N) - $t0" | bc) s: $*"
  cat "$work/$name.log"
  [ "$rc" -eq 0 ] || { echo "FAIL: $name exited with $rc"; status=1; }
}
job="rlpt-srun-np$n-$$"
run mpirun mpirun -np "$n" "${mpi_flags[@]}" "$bin" "$@" trainer.output_dir="$work/mpirun-runs"
run srun srun -J "$job" -n "$n" "$bin" "$@" trainer.output_dir="$work/srun-runs"
# The placement block and the ping table (a log line and the indented lines under it), minus
# timestamps and pids.
extract() {
  awk '/^\[rlpt /{ sub(/^\[rlpt [^]]*\] /, ""); keep = ($0 ~ /^(placement:|all [0-9]+ worker rank)/);
                   if (keep) print; next }
       keep && /^  / { print }' "$1" | sed -E 's/  cpus [^ ]+//; s/  pid [0-9]+//'
}
extract "$work/mpirun.log" >"$work/mpirun.lines"
extract "$work/srun.log" >"$work/srun.lines"
# Every rank of the placement answers the ping (rank 0 too when it hosts roles).
ranks=$(grep -c "^  rank " "$work/srun.lines")
hosting=$(grep -Eo "all [0-9]+ worker rank" "$work/srun.lines" | grep -Eo "[0-9]+")
if [ "$ranks" -lt $((n - 1)) ] || [ "$ranks" != "${hosting:-x}" ]; then
  echo "FAIL: the srun run's ping table has $ranks rank lines (expected ${hosting:-?}, at least $((n - 1)))"; status=1
fi
if ! diff -u "$work/mpirun.lines" "$work/srun.lines"; then
  echo "FAIL: placement/ping lines differ between mpirun (-) and srun (+)"; status=1
else
  echo "== identical placement and ping lines:"; cat "$work/srun.lines"
fi
grep -Eq "Slurm job [0-9]+ step [0-9]+ on nodes " "$work/srun.log" ||
  { echo "FAIL: the srun run does not log its Slurm job"; status=1; }
if [ -z "${SLURM_JOB_ID:-}" ] && grep -q "Slurm job" "$work/mpirun.log"; then echo "FAIL: mpirun (outside Slurm) logs a Slurm job"; status=1; fi
exit $status
