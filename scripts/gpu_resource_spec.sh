#!/usr/bin/env bash
# gpu_resource_spec.sh OUT.json: writes a ctest resource spec (ctest --resource-spec-file) with
# one "gpus" entry per card nvidia-smi lists, and exits 0; exits 1 (writing nothing) when there
# is no nvidia-smi or no GPU. Multi-rank tests ask for one GPU slot per rank (RESOURCE_GROUPS
# "N,gpus:1", tests/CMakeLists.txt), so ctest packs concurrent tests onto free cards. Each card
# gets ceil(RLPT_TEST_MAX_RANKS / cards) slots (default 8 ranks, the largest test), so every test
# can run: with at least that many cards each rank has its own, with fewer, ranks share cards.
set -euo pipefail
out=$1
command -v nvidia-smi >/dev/null 2>&1 || exit 1
mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr -d ' ' | grep -E '^[0-9]+$' || true)
[ "${#gpus[@]}" -gt 0 ] || exit 1
max_ranks=${RLPT_TEST_MAX_RANKS:-8}
slots=$(( (max_ranks + ${#gpus[@]} - 1) / ${#gpus[@]} ))
{
  echo '{"version": {"major": 1, "minor": 0}, "local": [{"gpus": ['
  sep=""
  for g in "${gpus[@]}"; do printf '%s{"id": "%s", "slots": %d}' "$sep" "$g" "$slots"; sep=", "; done
  echo ']}]}'
} > "$out"
