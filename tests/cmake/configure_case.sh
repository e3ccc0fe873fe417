# Sourced by the configure-only tests in this folder (torch_detection_test.sh,
# cuda_toolkit_traps_test.sh). Needs $src (rlpt's source dir) and $tmp (a scratch dir).
#
# configure <name> <expect ok|fail> <regex> <cmake args...>: configures rlpt into $tmp/b-<name>
# without tests or benchmarks, and exits 1 (printing the log's tail) unless configuring succeeded
# or failed as expected and its output (newlines folded) matches <regex>. Environment variables
# for the run go in the array CONFIGURE_ENV (e.g. CONFIGURE_ENV=(PATH=/x:$PATH)). With
# CONFIGURE_KEEP_GOING=1 a failed case is counted in configure_failures instead, and configure_ok
# says whether the last case passed (for checks that follow it).
CONFIGURE_ENV=()
CONFIGURE_KEEP_GOING=0
configure_failures=0
configure_ok=0
configure_failed() {
  echo "FAIL $1" >&2
  [ "$CONFIGURE_KEEP_GOING" = 1 ] || exit 1
  configure_failures=$((configure_failures + 1))
  configure_ok=0
}
configure() {
  local name=$1 expect=$2 re=$3; shift 3
  local out rc=0
  configure_ok=0
  out=$(env "${CONFIGURE_ENV[@]}" cmake -S "$src" -B "$tmp/b-$name" -DRLPT_BUILD_TESTS=OFF \
        -DRLPT_BUILD_BENCHMARKS=OFF "$@" 2>&1) || rc=$?
  if { [ "$expect" = ok ] && [ $rc -ne 0 ]; } || { [ "$expect" = fail ] && [ $rc -eq 0 ]; }; then
    echo "$out" | tail -30; configure_failed "$name: expected configure to $expect (rc $rc)"; return
  fi
  if ! echo "$out" | tr '\n' ' ' | tr -s ' ' | grep -qE "$re"; then
    echo "$out" | tail -30; configure_failed "$name: output does not match /$re/"; return
  fi
  configure_ok=1
  echo "ok   $name"
}
