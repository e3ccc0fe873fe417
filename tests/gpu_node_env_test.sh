#!/usr/bin/env bash
# scripts/gpu_node/env.sh, the offline GPU node's set-up, against fake Debian packages: after it,
# `mpirun` and `mpicxx` on PATH are the unpacked Open MPI's (Debian ships them as *.openmpi plus
# alternatives links that `dpkg -x` does not create), even when the node has another mpirun
# earlier on PATH; sourcing it twice changes nothing.
#   gpu_node_env_test.sh <source dir> <python with torch>
set -euo pipefail
src=$1 py=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# A fake openmpi-bin and libopenmpi-dev: scripts that say whose they are.
for pkg in openmpi-bin:mpirun libopenmpi-dev:mpicxx; do
  name=${pkg%%:*} prog=${pkg#*:}
  mkdir -p "$tmp/pkg-$name/DEBIAN" "$tmp/pkg-$name/usr/bin"
  printf 'Package: %s\nVersion: 1\nArchitecture: all\nMaintainer: t <t@t>\nDescription: fake\n' "$name" \
    >"$tmp/pkg-$name/DEBIAN/control"
  printf '#!/bin/sh\necho "unpacked %s.openmpi"\n' "$prog" >"$tmp/pkg-$name/usr/bin/$prog.openmpi"
  chmod +x "$tmp/pkg-$name/usr/bin/$prog.openmpi"
  mkdir -p "$tmp/debs" && dpkg-deb -b -Zgzip "$tmp/pkg-$name" "$tmp/debs/$name.deb" >/dev/null
done
# The node's own, other MPI, first on PATH.
mkdir -p "$tmp/node/bin"
printf '#!/bin/sh\necho "the node mpirun"\n' >"$tmp/node/bin/mpirun"; chmod +x "$tmp/node/bin/mpirun"
check() {
  out=$(PATH="$tmp/node/bin:$PATH" DEBS="$tmp/debs" RLPT_DEPS="$tmp/deps" RLPT_TORCH_PYTHON="$py" bash -c \
    "source '$src/scripts/gpu_node/env.sh'; command -v mpirun; mpirun; mpicxx" 2>&1) || true
  echo "$out"
  echo "$out" | grep -qx "$tmp/deps/usr/bin/mpirun" || { echo "FAIL: mpirun on PATH is not the unpacked one"; exit 1; }
  echo "$out" | grep -qx "unpacked mpirun.openmpi" || { echo "FAIL: mpirun did not run the unpacked Open MPI"; exit 1; }
  echo "$out" | grep -qx "unpacked mpicxx.openmpi" || { echo "FAIL: mpicxx did not run the unpacked Open MPI"; exit 1; }
  if echo "$out" | grep -q warning; then echo "FAIL: unexpected warning"; exit 1; fi
}
check
check  # again: idempotent
echo "gpu_node env OK"
