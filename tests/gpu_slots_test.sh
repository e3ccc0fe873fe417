#!/usr/bin/env bash
# Checks the GPU test scheduling pieces without a GPU: scripts/gpu_resource_spec.sh against a
# fake nvidia-smi, and tests/gpu_slots.sh's CUDA_VISIBLE_DEVICES from ctest's variables.
set -euo pipefail
src=$1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
printf '#!/bin/sh\nprintf "0\\n1\\n 2\\n"\n' > "$tmp/bin/nvidia-smi"; chmod +x "$tmp/bin/nvidia-smi"
PATH="$tmp/bin:$PATH" "$src/scripts/gpu_resource_spec.sh" "$tmp/spec.json"
/usr/bin/python3 - "$tmp/spec.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
gpus = spec["local"][0]["gpus"]
assert spec["version"] == {"major": 1, "minor": 0}, spec
assert [g["id"] for g in gpus] == ["0", "1", "2"], gpus
assert all(g["slots"] == 3 for g in gpus), gpus   # ceil(8 ranks / 3 cards)
PY
# No GPU: no spec, exit 1.
printf '#!/bin/sh\nexit 9\n' > "$tmp/bin/nvidia-smi"
if PATH="$tmp/bin:$PATH" "$src/scripts/gpu_resource_spec.sh" "$tmp/none.json"; then echo "spec without GPUs" >&2; exit 1; fi
test ! -e "$tmp/none.json"
# The wrapper: the cards of every group, once each, in order; nothing set without ctest's variables.
got=$(env -u CUDA_VISIBLE_DEVICES CTEST_RESOURCE_GROUP_COUNT=3 CTEST_RESOURCE_GROUP_0_GPUS=id:2,slots:1 \
      CTEST_RESOURCE_GROUP_1_GPUS=id:0,slots:1 CTEST_RESOURCE_GROUP_2_GPUS=id:2,slots:1 \
      "$src/tests/gpu_slots.sh" sh -c 'echo "$CUDA_VISIBLE_DEVICES"')
[ "$got" = "2,0" ] || { echo "CUDA_VISIBLE_DEVICES=$got, expected 2,0" >&2; exit 1; }
# Three ranks on two cards: device collectives over MPI (NCCL cannot share a card); one card each: unset.
got=$(env -u RLPT_DEVICE_COLLECTIVES CTEST_RESOURCE_GROUP_COUNT=3 CTEST_RESOURCE_GROUP_0_GPUS=id:2,slots:1 \
      CTEST_RESOURCE_GROUP_1_GPUS=id:0,slots:1 CTEST_RESOURCE_GROUP_2_GPUS=id:2,slots:1 \
      "$src/tests/gpu_slots.sh" sh -c 'echo "${RLPT_DEVICE_COLLECTIVES-unset}"')
[ "$got" = "mpi" ] || { echo "shared cards: RLPT_DEVICE_COLLECTIVES=$got, expected mpi" >&2; exit 1; }
got=$(env -u RLPT_DEVICE_COLLECTIVES CTEST_RESOURCE_GROUP_COUNT=2 CTEST_RESOURCE_GROUP_0_GPUS=id:1,slots:1 \
      CTEST_RESOURCE_GROUP_1_GPUS=id:0,slots:1 "$src/tests/gpu_slots.sh" sh -c 'echo "${RLPT_DEVICE_COLLECTIVES-unset}"')
[ "$got" = "unset" ] || { echo "own cards: RLPT_DEVICE_COLLECTIVES=$got, expected unset" >&2; exit 1; }
got=$(env -u CUDA_VISIBLE_DEVICES -u CTEST_RESOURCE_GROUP_COUNT "$src/tests/gpu_slots.sh" sh -c 'echo "${CUDA_VISIBLE_DEVICES-unset}"')
[ "$got" = "unset" ] || { echo "wrapper set CUDA_VISIBLE_DEVICES=$got without ctest resources" >&2; exit 1; }
echo "gpu scheduling pieces OK"
