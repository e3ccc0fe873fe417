#!/usr/bin/env bash
# expect_failure.sh --regex RE [--max-seconds S] [--forbid RE] [--once] -- command...
# Runs a command that must FAIL: non-zero exit, output matching RE (and not --forbid),
# within S seconds, leaving no process of the command's executable behind.
set -u
regex=""; max=120; forbid=""; once=0
while [ $# -gt 0 ]; do
  case "$1" in
    --regex) regex="$2"; shift 2;;
    --max-seconds) max="$2"; shift 2;;
    --forbid) forbid="$2"; shift 2;;
    --once) once=1; shift;;
    --) shift; break;;
    *) echo "expect_failure.sh: unknown option $1" >&2; exit 2;;
  esac
done
out=$(mktemp)
start=$(date +%s.%N)
# In its own session, so whatever it leaves running can be found (and only that).
setsid timeout -k 5 $((max + 30)) "$@" >"$out" 2>&1 &
pid=$!
wait $pid
rc=$?
end=$(date +%s.%N)
elapsed=$(echo "$end - $start" | bc)
cat "$out"
status=0
if [ "$rc" -eq 0 ]; then echo "FAIL: the command succeeded but was expected to fail"; status=1; fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "FAIL: the command hung (killed by timeout)"; status=1; fi
if ! grep -Eq -- "$regex" "$out"; then echo "FAIL: output does not match /$regex/"; status=1; fi
if [ "$once" -eq 1 ] && [ "$(grep -Ec -- "$regex" "$out")" -ne 1 ]; then
  echo "FAIL: /$regex/ matched $(grep -Ec -- "$regex" "$out") lines, expected exactly one (one message from one rank)"; status=1
fi
if [ -n "$forbid" ] && grep -Eq -- "$forbid" "$out"; then echo "FAIL: output matches forbidden /$forbid/"; status=1; fi
if [ "$(echo "$elapsed > $max" | bc)" -eq 1 ]; then echo "FAIL: took ${elapsed}s, limit ${max}s"; status=1; fi
for _ in 1 2 3 4 5 6 7 8 9 10; do pgrep -s "$pid" >/dev/null || break; sleep 0.5; done
if pgrep -s "$pid" >/dev/null; then
  echo "FAIL: processes left behind:"; ps -o pid,args -s "$pid"; pkill -9 -s "$pid"; status=1
fi
echo "expect_failure: exit code $rc after ${elapsed}s (limit ${max}s)"
rm -f "$out"
exit $status
