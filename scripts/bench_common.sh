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
