# Sourced by scripts/bench_*.sh. bench_binary SCRIPT TARGET [PATH]: sets `bin` to PATH when given,
# else configures build/ (or $BUILD_DIR) with RLPT_BUILD_BENCHMARKS=ON and builds only TARGET.
# Exits 2 when the result is not an executable.
bench_binary() {
  local script=$1 target=$2
  if [ $# -gt 2 ]; then
    bin="$3"
  else
    local root build
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
    build="${BUILD_DIR:-$root/build}"
    echo "$script: building $target in $build" >&2
    cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DRLPT_BUILD_BENCHMARKS=ON >/dev/null
    cmake --build "$build" -j2 --target "$target" >/dev/null
    bin="$build/tests/bench/$target"
  fi
  [ -x "$bin" ] || { echo "$script: $bin is not an executable" >&2; exit 2; }
}

# bench_json SCRIPT TARGET [PATH] [options of the binary...]: takes or builds the binary
# (bench_binary), runs it with OMP_NUM_THREADS = its --threads (default 1), progress on stderr,
# and leaves its JSON lines in the file $out (removed on exit) and the load averages before and
# after the run in $load_before and $load_after.
bench_json() {
  local script=$1 target=$2
  shift 2
  if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then bench_binary "$script" "$target" "$1"; shift
  else bench_binary "$script" "$target"; fi
  local threads=1 args=("$@") i
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do [ "${args[$i]}" = "--threads" ] && threads="${args[$((i + 1))]}"; done
  out=$(mktemp)
  trap 'rm -f "$out"' EXIT
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  OMP_NUM_THREADS="$threads" "$bin" "$@" | tee /dev/stderr | grep '^{' >"$out"
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
}
