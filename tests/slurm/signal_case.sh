#!/usr/bin/env bash
# signal_case.sh --send SPEC [--job NAME] [--watch FILE] [--delay S] -- command...
# Starts `command` (a launcher running rlpt_signal_probe), waits until the probe prints
# "ranks ready" (in the command's output, or in FILE, e.g. a batch job's log), waits S more
# seconds (default 0.5) and sends a stop signal as SPEC says:
#   launcher:SIG        kill -SIG <pid of command> (mpirun, srun, sbatch --wait)
#   ranks:SIG           kill -SIG every rank (pids from the ready line)
#   scancel:ARGS        scancel ARGS -n NAME (ARGS space separated, e.g. "--signal=TERM")
# Then waits for the command and exits with its exit code, after printing its output (and FILE).
set -u
send=""; job=""; watch=""; delay=0.5
while [ $# -gt 0 ]; do
  case "$1" in
    --send) send="$2"; shift 2;;
    --job) job="$2"; shift 2;;
    --watch) watch="$2"; shift 2;;
    --delay) delay="$2"; shift 2;;
    --) shift; break;;
    *) echo "signal_case.sh: unknown option $1" >&2; exit 2;;
  esac
done
out=$(mktemp)
"$@" >"$out" 2>&1 &
cmd=$!
src="${watch:-$out}"
ready=""
for _ in $(seq 1 600); do
  ready=$(grep -m1 "ranks ready" "$src" 2>/dev/null || true)
  [ -n "$ready" ] && break
  kill -0 "$cmd" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$ready" ]; then
  echo "signal_case: the probe never became ready"
  kill -KILL "$cmd" 2>/dev/null; wait "$cmd"; cat "$out"; [ -n "$watch" ] && cat "$watch"; rm -f "$out"; exit 99
fi
sleep "$delay"
kind="${send%%:*}"; arg="${send#*:}"
echo "signal_case: sending ($send) at $(date +%T.%N | cut -c1-12)"
case "$kind" in
  launcher) kill -"$arg" "$cmd";;
  ranks) for p in $(echo "$ready" | sed -E 's/.*\(pid ([0-9 ]+)\).*/\1/'); do kill -"$arg" "$p"; done;;
  scancel) # shellcheck disable=SC2086
    scancel $arg -n "$job";;
  *) echo "signal_case: bad --send '$send'"; kill -KILL "$cmd"; wait "$cmd"; rm -f "$out"; exit 2;;
esac
wait "$cmd"
rc=$?
cat "$out"
[ -n "$watch" ] && [ -f "$watch" ] && { echo "--- $watch"; cat "$watch"; }
rm -f "$out"
exit $rc
