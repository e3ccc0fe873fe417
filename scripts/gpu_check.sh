#!/usr/bin/env bash
# Can this build of rlpt train on this node's GPUs? Run it on a GPU node after building:
#   scripts/gpu_check.sh [--build DIR] [--demo] [--only REGEX] [--cpu [--fake-gpus N]]
# Prints one line per check, "PASS|FAIL|SKIP  <check>  <seconds>  <detail>", then a summary, and
# exits 1 when any check failed (0 otherwise). Each check's full output goes to
# <build>/gpu_check/<check>.log. Checks, in order:
#   build          rlpt --version: CUDA kernels built, LibTorch with CUDA (NCCL reported)
#   gpus           nvidia-smi sees at least one GPU
#   kernels        the GPU kernel tests (tests/kernels: fused log-prob vs the CPU reference;
#                  CPU vs GPU log-probs of one fp32 batch within 1e-4, greedy tokens identical,
#                  sampled output independent of the slot) — a skipped test is a failure here,
#                  except one that needs more GPUs than the node has
#   handlers-np1   every handler of every role's table on the GPU, through the real protocol
#                  (tests/mpi RoleHandlers, all roles colocated on one rank)
#   handlers-np2   the same with the rollout on a rank of its own (weights synced actor -> rollout)
#   grpo-fp32      configs/tiny.yaml, 3 GRPO steps on the GPU in fp32: every metric finite and the
#                  on-policy actor/ppo_kl ~ 0 (|x| < 1e-4)
#   grpo-bf16      the same in bfloat16 (|ppo_kl| < 1e-2)
#   sft            SFT as tests/mpi/trainer_runs.sh runs it
#   ppo            3 PPO steps with a critic (GAE, KL in the reward), metrics finite
#   layout-*       multi-rank layouts on the GPUs (tests/mpi/trainer_runs.sh): DP 2
#                  (dp-invariance), tensor parallel 2 (tp-invariance), ZeRO-3 with an HF export
#                  (zero3), the rollout on ranks of its own with another tp (reshard), with their
#                  collectives over MPI (RLPT_DEVICE_COLLECTIVES=mpi) however many GPUs there are.
#                  With fewer GPUs than ranks the ranks share cards (NCCL cannot connect two
#                  ranks on one card; every check but nccl-* lets device_collectives=auto choose).
#   nccl-*         the same layouts over NCCL, when the node has a GPU per rank (else SKIP)
#   demo           (--demo) scripts/demo.sh on the GPU: SFT then GRPO; passes when GRPO raises the
#                  held-out accuracy by at least 20 points (the CPU demo: +33 to +52)
# --cpu rehearses the same checks on the CPU, planned as on a node with N GPUs (--fake-gpus, default
# 1; RLPT_FAKE_GPUS, rlpt/comm/device.h: every rank's GPU map and device collectives are decided
# and logged as on such a node, then the run stays on the CPU). build and gpus are skipped,
# skipped GPU tests accepted, the NCCL layouts skipped: for working on this script, and on the
# one-GPU defaults, on a machine without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
src=$PWD build=build demo=0 only="" device=cuda fake_gpus=1
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2;;
    --demo) demo=1; shift;;
    --only) only="$2"; shift 2;;
    --cpu) device=auto; shift;;
    --fake-gpus) fake_gpus="$2"; shift 2;;
    -h|--help) sed -n '2,34p' "$0"; exit 0;;
    *) echo "gpu_check.sh: unknown argument $1" >&2; exit 2;;
  esac
done
build=$(cd "$build" 2>/dev/null && pwd) || { echo "gpu_check.sh: no build directory (build rlpt first)" >&2; exit 2; }
rlpt=$build/src/rlpt
logs=$build/gpu_check; mkdir -p "$logs"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export RLPT_SOURCE_DIR=$src RLPT_BINARY_DIR=$build
mpi_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
py=python3; [ -x /usr/bin/python3 ] && py=/usr/bin/python3

passed=0 failed=0 skipped=0 failures=()
report() {  # report <PASS|FAIL|SKIP> <name> <seconds> <detail>
  printf '%-4s  %-22s %5ss  %s\n' "$1" "$2" "$3" "$4"
  case "$1" in PASS) passed=$((passed + 1));; FAIL) failed=$((failed + 1)); failures+=("$2");; *) skipped=$((skipped + 1));; esac
}
# check <name> <command...>: runs the command with its output in the log; PASS when it exits 0.
# The command may print "DETAIL: text" to fill the detail column.
check() {
  local name=$1; shift
  if [ -n "$only" ] && ! [[ $name =~ $only ]]; then return; fi
  local log=$logs/$name.log t0=$SECONDS rc
  "$@" >"$log" 2>&1; rc=$?
  local detail; detail=$(grep -a '^DETAIL: ' "$log" | tail -1 | cut -c9-)
  if [ $rc -eq 0 ]; then
    report PASS "$name" $((SECONDS - t0)) "${detail:-ok}"
  else
    [ -z "$detail" ] && detail="exit $rc: $(grep -av '^DETAIL: ' "$log" | grep -aiE 'error|fail|fatal' | head -1 | cut -c1-110)"
    report FAIL "$name" $((SECONDS - t0)) "$detail (log: $log)"
  fi
}
skip() { if [ -z "$only" ] || [[ $1 =~ $only ]]; then report SKIP "$1" 0 "$2"; fi; }

# ---- checks ------------------------------------------------------------------------------
build_flags() {
  local v; v=$("$rlpt" --version) || return 1
  echo "$v"
  local line; line=$(echo "$v" | grep '^LibTorch:')
  echo "DETAIL: $(echo "$v" | head -1 | sed 's/^rlpt [^ ]* //'); $line"
  echo "$v" | grep -q 'CUDA kernels built' && echo "$line" | grep -q '(CUDA'
}

gpu_count() { nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true; }
gpus() {
  command -v nvidia-smi >/dev/null || { echo "DETAIL: nvidia-smi not found (no NVIDIA driver on this node?)"; return 1; }
  nvidia-smi -L || return 1
  local n; n=$(gpu_count)
  echo "DETAIL: $n GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | paste -sd';')"
  [ "$n" -ge 1 ]
}

kernels() {
  local out; out=$("$build/tests/rlpt_kernel_tests" 2>&1); local rc=$?
  echo "$out"
  local n; n=$(echo "$out" | grep -c '^\[       OK \]')
  # On a GPU node a skipped GPU test is a failure, except one that needs more GPUs than the node
  # has ("N CUDA device(s) visible to LibTorch, the test needs M", tests/kernels/gpu_test_util.h).
  local skipped more=0 need bad
  skipped=$(echo "$out" | grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$')
  for need in $(echo "$out" | sed -n 's/.*visible to LibTorch, the test needs \([0-9]*\).*/\1/p'); do
    [ "$need" -gt "$n_gpus" ] && more=$((more + 1))
  done
  bad=$((skipped - more))
  if [ "$device" != auto ] && [ "$bad" -gt 0 ]; then
    echo "DETAIL: $bad test(s) skipped (no usable GPU?)"; return 1
  fi
  local extra=""; [ "$more" -gt 0 ] && extra=", $more skipped: they need more GPUs than the node's $n_gpus"
  echo "DETAIL: $n GPU kernel/parity tests passed$extra"
  return $rc
}

handlers() {  # handlers <np>
  RLPT_TEST_OVERRIDES="model.device=$device $EXTRA" mpirun -np "$1" "${mpi_flags[@]}" "$build/tests/mpi/rlpt_mpi_tests" \
    --gtest_filter='RoleHandlers.*'
}

# finite_metrics <metrics.jsonl> <max |ppo_kl|>
finite_metrics() {
  "$py" - "$@" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
bound = float(sys.argv[2])
bad = [(r["step"], k, v) for r in rows for k, v in r.items() if isinstance(v, float) and not math.isfinite(v)]
kl = [abs(r["actor/ppo_kl"]) for r in rows if "actor/ppo_kl" in r]
print(f"DETAIL: {len(rows)} steps, {sum(len(r) for r in rows)} values, max |actor/ppo_kl| {max(kl) if kl else 'n/a'}")
if bad: print("non-finite:", bad[:10])
sys.exit(1 if bad or not kl or max(kl) >= bound else 0)
PY
}

grpo() {  # grpo <dtype> <kl bound> [overrides...]: 3 steps of configs/tiny.yaml on one rank
  local dtype=$1 bound=$2 out=$logs/run-grpo-$1; shift 2
  [ $# -gt 0 ] && out=$logs/run-ppo-$dtype
  rm -rf "$out"
  mpirun -np 1 "${mpi_flags[@]}" "$rlpt" "$src/configs/tiny.yaml" model.device="$device" model.dtype="$dtype" \
    trainer.total_training_steps=3 trainer.output_dir="$out" trainer.experiment_name=run "$@" $EXTRA || return 1
  finite_metrics "$out/run/metrics.jsonl" "$bound"
}

trainer_run() {  # trainer_run <trainer_runs.sh check>
  RLPT_TEST_OVERRIDES="model.device=$device $EXTRA" bash "$src/tests/mpi/trainer_runs.sh" "$rlpt" "$src" "$1"
}

demo_run() {
  # all.KEY=VALUE: demo.sh gives it to both stages (SFT and GRPO).
  local out; out=$(scripts/demo.sh --no-setup --name gpu-demo all.model.device="$device" 2>&1)
  local rc=$?
  echo "$out"
  local line; line=$(echo "$out" | grep -E 'after SFT .* after GRPO' | tail -1)
  echo "DETAIL: ${line:-no accuracy line}"
  # Learns as on the CPU: the CPU demo gains +33 to +52 points (docs/benchmarks/demo.md).
  local gain; gain=$(echo "$line" | sed -n 's/.*, \([-+][0-9.]*\) points.*/\1/p')
  [ $rc -eq 0 ] && [ -n "$gain" ] && awk -v g="$gain" 'BEGIN { exit !(g >= 20) }'
}

# ---- run ---------------------------------------------------------------------------------
EXTRA=""
if [ "$device" = cuda ]; then
  check build build_flags
  check gpus gpus
  n_gpus=$(gpu_count)
else
  skip build "--cpu"; skip gpus "--cpu"
  n_gpus=$fake_gpus  # rehearse the plan of a node with that many GPUs, on the CPU
  RLPT_FAKE_GPUS=$(seq -f "GPU-fake-%g" 0 $((n_gpus - 1)) | paste -sd,)
  export RLPT_FAKE_GPUS
fi
if [ "$n_gpus" -lt 1 ]; then
  echo "no GPU: the remaining checks need one"
else
  check kernels kernels
  check handlers-np1 handlers 1
  # Layouts with more ranks than GPUs share cards: device_collectives=auto then uses MPI.
  check handlers-np2 handlers 2
  check grpo-fp32 grpo float32 1e-4
  check grpo-bf16 grpo bfloat16 1e-2
  check sft trainer_run sft
  check ppo grpo float32 1e-4 algorithm.adv_estimator=gae algorithm.use_kl_in_reward=true \
    'placement.groups=[{roles: [actor, rollout, reference, critic], ranks: auto}]' 
  # check name -> trainer_runs.sh check, and the most GPU ranks one of its jobs uses.
  layouts=("dp-invariance 2" "tp-invariance 2" "zero3 3" "reshard 4")
  for l in "${layouts[@]}"; do
    set -- $l
    RLPT_DEVICE_COLLECTIVES=mpi check "layout-$1" trainer_run "$1"
  done
  for l in "${layouts[@]}"; do
    set -- $l
    if [ "$device" = cuda ] && [ "$n_gpus" -ge "$2" ]; then
      RLPT_DEVICE_COLLECTIVES=nccl check "nccl-$1" trainer_run "$1"
    else
      skip "nccl-$1" "needs $2 GPUs (this node has $n_gpus)"
    fi
  done
  # The demo's ranks share the node's GPUs when there are fewer GPUs than ranks: its default
  # trainer.device_collectives=auto then uses MPI, as a user's run would.
  if [ "$demo" -eq 1 ]; then check demo demo_run; fi
fi
echo "gpu_check: $passed passed, $failed failed, $skipped skipped${failures:+ (failed: ${failures[*]})}"
[ "$failed" -eq 0 ]
