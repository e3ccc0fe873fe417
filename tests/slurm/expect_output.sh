#!/usr/bin/env bash
# expect_output.sh [--rc N|nonzero] [--regex RE]... [--absent RE]... [--max-seconds S]
#                  [--min-seconds S] [--slurm-job NAME] -- command...
# Runs a command in its own session and checks: its exit code (default 0), that every --regex
# matches some line of its output and no --absent does, that it ended within S seconds
# (default 120) and, for --min-seconds, not before; and that it left no process behind in its
# session. With --slurm-job NAME also that Slurm has no job of that name left after it.
# Prints the output, then "expect_output: exit code X after Y s (limit S s)".
set -u
rc_want=0; max=120; min=0; job=""
regexes=(); absents=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rc) rc_want="$2"; shift 2;;
    --regex) regexes+=("$2"); shift 2;;
    --absent) absents+=("$2"); shift 2;;
    --max-seconds) max="$2"; shift 2;;
    --min-seconds) min="$2"; shift 2;;
    --slurm-job) job="$2"; shift 2;;
    --) shift; break;;
    *) echo "expect_output.sh: unknown option $1" >&2; exit 2;;
  esac
done
[ $# -gt 0 ] || { echo "expect_output.sh: no command" >&2; exit 2; }
out=$(mktemp)
start=$(date +%s.%N)
setsid timeout -k 5 $((max + 30)) "$@" >"$out" 2>&1 &
pid=$!
wait $pid
rc=$?
elapsed=$(echo "$(date +%s.%N) - $start" | bc)
cat "$out"
status=0
if [ "$rc_want" = nonzero ]; then
  [ "$rc" -ne 0 ] || { echo "FAIL: exit code 0, expected a failure"; status=1; }
elif [ "$rc" -ne "$rc_want" ]; then
  echo "FAIL: exit code $rc, expected $rc_want"; status=1
fi
# timeout(1) exits 124, or 137 when it had to SIGKILL; a launcher whose rank died of SIGKILL
# also exits 137 (128 + 9), so only count 137 as a hang when the time ran out.
if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$(echo "$elapsed >= $max + 30" | bc)" -eq 1 ]; }; then
  echo "FAIL: the command hung (killed by timeout)"; status=1
fi
for re in ${regexes[@]+"${regexes[@]}"}; do
  grep -Eq -- "$re" "$out" || { echo "FAIL: no output line matches /$re/"; status=1; }
done
for re in ${absents[@]+"${absents[@]}"}; do
  if grep -Eq -- "$re" "$out"; then echo "FAIL: output matches forbidden /$re/:"; grep -E -- "$re" "$out" | head -3; status=1; fi
done
if [ "$(echo "$elapsed > $max" | bc)" -eq 1 ]; then echo "FAIL: took ${elapsed}s, limit ${max}s"; status=1; fi
if [ "$(echo "$elapsed < $min" | bc)" -eq 1 ]; then echo "FAIL: took ${elapsed}s, expected at least ${min}s"; status=1; fi
for _ in $(seq 1 20); do pgrep -s "$pid" >/dev/null || break; sleep 0.5; done
if pgrep -s "$pid" >/dev/null; then
  echo "FAIL: processes left behind:"; ps -o pid,args -s "$pid"; pkill -9 -s "$pid"; status=1
fi
if [ -n "$job" ]; then
  for _ in $(seq 1 40); do [ -z "$(squeue -h -n "$job" -o %i 2>/dev/null)" ] && break; sleep 0.5; done
  if [ -n "$(squeue -h -n "$job" -o %i 2>/dev/null)" ]; then
    echo "FAIL: Slurm job '$job' is still there:"; squeue -n "$job"; scancel -n "$job"; status=1
  fi
fi
echo "expect_output: exit code $rc after ${elapsed}s (limit ${max}s)"
rm -f "$out"
exit $status
