#!/usr/bin/env bash
# Asynchronous RL (trainer.max_staleness) and off-policy correction (algorithm.rollout_correction)
# through the real trainer. Each check is a ctest entry (label mpi), registered in async.cmake.
#   async_runs.sh <rlpt binary> <source dir> <check>
# checks:
#   correction   synchronous, colocated: rollout_corr/* metrics logged by default; token IS +
#                token_k1 rejection, sequence IcePop and bypass mode train; rollout_is_weights reach
#                the loss (same run with an IS cap below every weight changes pg_loss); bad keys
#                are refused naming the key
#   staleness    rollout on its own rank: max_staleness 0 is the synchronous loop bit for bit
#                (every metric but timings, and the exported weights, equal a run without the key);
#                max_staleness 1: step 1 (on-policy) equals the synchronous step 1 bit for bit,
#                later steps train on batches exactly one update old (staleness 1, rollout_corr/kl
#                != 0), with token IS applied; max_staleness 2 syncs less often and never exceeds 2;
#                with dynamic sampling (the next batch submitted after the scoring) batches stay
#                <= 1 stale; a colocated layout is refused
#   resume       max_staleness 1: 4 steps straight == 2 steps + resume + 2 steps (every metric but
#                timings, and the final weights, bit-identical), the prefetched batch restored from
#                the checkpoint; resuming it with max_staleness 0 is refused
set -euo pipefail
bin="$1"; src="$2"; check="$3"
source "$(dirname "$0")/run_common.sh"
split='placement.groups=[{roles: [actor, reference], ranks: 1}, {roles: [rollout], ranks: 1}]'

# same_metrics <a.jsonl> <b.jsonl> <steps|all> [ignored keys...]: every metric but timings
# (timing_s/, perf/, timing_per_token_ms/) and the ignored ones equal bit for bit at those steps.
same_metrics() {
  "$py" - "$@" <<'PY'
import json, sys
a, b, steps, ignored = sys.argv[1], sys.argv[2], sys.argv[3], set(sys.argv[4:])
load = lambda p: {r["step"]: r for r in map(json.loads, open(p))}
A, B = load(a), load(b)
wanted = sorted(A) if steps == "all" else [int(s) for s in steps.split(",")]
assert sorted(A) == sorted(B) or steps != "all", (sorted(A), sorted(B))
timing = ("timing_s/", "perf/", "timing_per_token_ms/")
bad = 0
for s in wanted:
    keys = {k for k in set(A[s]) | set(B[s]) if not k.startswith(timing) and k not in ignored}
    for k in sorted(keys):
        if A[s].get(k) != B[s].get(k):
            print(f"step {s} {k}: {A[s].get(k)!r} vs {B[s].get(k)!r} DIFFERENT"); bad += 1
    print(f"step {s}: {len(keys)} metrics compared")
sys.exit(1 if bad else 0)
PY
}
# metric <file.jsonl> <step> <key>
metric() { "$py" -c 'import json,sys; print({r["step"]: r for r in map(json.loads, open(sys.argv[1]))}[int(sys.argv[2])].get(sys.argv[3]))' "$@"; }
# refused <regex> <np> <args...>: the run fails and prints the regex
refused() {
  local re="$1"; shift
  if run "$@" > refused.log 2>&1; then cat refused.log; echo "accepted: $*"; exit 1; fi
  grep -q -- "$re" refused.log || { cat refused.log; echo "no '$re' in the error"; exit 1; }
}

common=(trainer.output_dir=runs trainer.total_training_steps=4 trainer.val_before_train=false
        actor.entropy_coeff=0.05 actor.optim.lr=0.01)

case "$check" in
  correction)
    run 1 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=plain
    grep -q '"rollout_corr/kl"' runs/plain/metrics.jsonl && grep -q '"rollout_corr/training_ppl"' runs/plain/metrics.jsonl
    ! grep -q '"rollout_corr/rollout_is_mean"' runs/plain/metrics.jsonl
    rc=algorithm.rollout_correction
    # The untrained model never answers right: reward a digit pair so the advantages are not all 0.
    digits='reward.scorers={rlpt/arithmetic: {type: format, pattern: "[0-9][0-9]"}}'
    run 1 "$src/configs/tiny.yaml" "${common[@]}" "$digits" trainer.experiment_name=tis $rc.rollout_is=token \
      $rc.rollout_rs=token_k1 $rc.rollout_rs_threshold=2
    grep -q '"rollout_corr/rollout_is_eff_sample_size"' runs/tis/metrics.jsonl
    grep -q '"rollout_corr/rollout_rs_token_k1_masked_fraction"' runs/tis/metrics.jsonl
    # Same weights on both sides (colocated): the ratios are ~1, so a cap of 0.5 halves every
    # weight and with it the policy loss.
    run 1 "$src/configs/tiny.yaml" "${common[@]}" "$digits" trainer.experiment_name=half $rc.rollout_is=token \
      $rc.rollout_is_threshold=0.5
    "$py" - runs/tis/metrics.jsonl runs/half/metrics.jsonl <<'PY'
import json, math, sys
t, h = [{r["step"]: r for r in map(json.loads, open(p))} for p in sys.argv[1:]]
for s in (1, 2):
    assert abs(t[s]["rollout_corr/rollout_is_mean"] - 1) < 1e-3, t[s]["rollout_corr/rollout_is_mean"]
    assert abs(h[s]["rollout_corr/rollout_is_mean"] - 0.5) < 1e-6, h[s]["rollout_corr/rollout_is_mean"]
# step 1: same data and weights, so pg_loss halves (up to float rounding)
assert abs(t[1]["actor/pg_loss"]) > 1e-6, t[1]["actor/pg_loss"]
assert math.isclose(h[1]["actor/pg_loss"], 0.5 * t[1]["actor/pg_loss"], rel_tol=1e-3, abs_tol=1e-7), (h[1]["actor/pg_loss"], t[1]["actor/pg_loss"])
print("IS weights reach the loss:", t[1]["actor/pg_loss"], h[1]["actor/pg_loss"])
PY
    run 1 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=icepop $rc.rollout_is=sequence \
      $rc.rollout_is_threshold=0.5_5 $rc.rollout_is_batch_normalize=true
    grep -q '"rollout_corr/rollout_is_oob_ratio"' runs/icepop/metrics.jsonl
    grep -q '"rollout_corr/rollout_is_batch_norm_factor"' runs/icepop/metrics.jsonl
    run 1 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=bypass $rc.bypass_mode=true
    grep -q '"actor/pg_loss"' runs/bypass/metrics.jsonl
    ! grep -q '"rollout_corr/kl"' runs/bypass/metrics.jsonl
    refused "algorithm.rollout_correction.rollout_is_threshold: lower bound 3 is above" 1 "$src/configs/tiny.yaml" \
      $rc.rollout_is=token $rc.rollout_is_threshold=3_2
    refused "algorithm.rollout_correction.rollout_rs: unknown option 'token_k9'" 1 "$src/configs/tiny.yaml" \
      $rc.rollout_rs=token_k9 $rc.rollout_rs_threshold=2
    refused "algorithm.rollout_correction.rollout_is: 'tokens' is not one of" 1 "$src/configs/tiny.yaml" $rc.rollout_is=tokens
    refused "algorithm.rollout_correction.loss_type: 'reinforce' is not supported" 1 "$src/configs/tiny.yaml" \
      $rc.bypass_mode=true $rc.loss_type=reinforce
    refused "needs the rollout's log-probs, but rollout.calculate_log_probs is false" 1 "$src/configs/tiny.yaml" \
      $rc.rollout_is=token rollout.calculate_log_probs=false
    ;;
  staleness)
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "$split" trainer.experiment_name=sync trainer.save_freq=4
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "$split" trainer.experiment_name=k0 trainer.save_freq=4 \
      trainer.max_staleness=0
    same_metrics runs/sync/metrics.jsonl runs/k0/metrics.jsonl all
    cmp runs/sync/hf_model/model.safetensors runs/k0/hf_model/model.safetensors
    for f in runs/sync/checkpoints/step_4/*.h5; do
      "$py" - "$f" "runs/k0/checkpoints/step_4/$(basename "$f")" <<'PY'
import sys
a, b = (open(p, "rb").read() for p in sys.argv[1:])
assert len(a) == len(b), (len(a), len(b))
PY
    done
    "$bin" check "$src/configs/tiny.yaml" "$split" trainer.max_staleness=0 -n 2 > /dev/null
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "$split" trainer.experiment_name=k1 trainer.max_staleness=1 \
      algorithm.rollout_correction.rollout_is=token | tee k1.log
    "$py" - runs/sync/metrics.jsonl runs/k1/metrics.jsonl <<'PY'
import json, sys
S, K = [{r["step"]: r for r in map(json.loads, open(p))} for p in sys.argv[1:]]
# Step 1 is on-policy: the same prompts, samples and scores as the synchronous run.
for k in ("critic/score/mean", "response_length/mean", "actor/entropy", "rollout_corr/kl"):
    assert S[1][k] == K[1][k], (k, S[1][k], K[1][k])
assert K[1]["async/staleness"] == 0
for s in (2, 3, 4):
    assert K[s]["async/staleness"] == 1, (s, K[s]["async/staleness"])
    assert K[s]["async/batch_policy_version"] == s - 2, (s, K[s]["async/batch_policy_version"])
    # Generated one update ago: the rollout's log-probs differ from the actor's.
    assert abs(K[s]["rollout_corr/kl"]) > 1e-4, (s, K[s]["rollout_corr/kl"])
    assert abs(K[s]["rollout_corr/rollout_is_mean"] - 1) > 1e-5
    assert abs(S[s]["rollout_corr/kl"]) < 1e-4, (s, S[s]["rollout_corr/kl"])
    assert S[s]["async/staleness"] == 0
assert [K[s]["async/weight_syncs"] for s in sorted(K)] == [0, 1, 1, 1], [K[s]["async/weight_syncs"] for s in K]
for s in K:
    assert 0 <= K[s]["perf/rollout_idle_ratio"] <= 1 and 0 <= K[s]["perf/actor_idle_ratio"] <= 1
print("max_staleness 1: step 1 on-policy, steps 2-4 one update stale, corrected")
PY
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "$split" trainer.experiment_name=k2 trainer.max_staleness=2 \
      trainer.total_training_steps=6
    "$py" - runs/k2/metrics.jsonl <<'PY'
import json, sys
K = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
st = [K[s]["async/staleness"] for s in sorted(K)]
assert max(st) == 2 and min(st) == 0, st
assert [K[s]["async/weight_syncs"] for s in sorted(K)] == [0, 0, 1, 0, 1, 0], [K[s]["async/weight_syncs"] for s in K]
print("max_staleness 2: staleness", st)
PY
    # Dynamic sampling: its extra generation rounds need the rollout, so the next batch is
    # submitted after the scoring (the other runs submit it before); batches stay <= 1 stale.
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "$split" trainer.experiment_name=k1dapo trainer.max_staleness=1 \
      trainer.total_training_steps=3 algorithm.filter_groups.enable=true algorithm.filter_groups.metric=score \
      algorithm.filter_groups.max_num_gen_batches=20 \
      'reward.scorers={rlpt/arithmetic: {type: format, pattern: "[0-9][0-9]"}}'
    "$py" - runs/k1dapo/metrics.jsonl <<'PY'
import json, sys
K = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
assert sorted(K) == [1, 2, 3], sorted(K)
assert [K[s]["async/staleness"] for s in sorted(K)] == [0, 1, 1], [K[s]["async/staleness"] for s in K]
assert all(K[s]["train/num_gen_batches"] >= 1 for s in K)
print("max_staleness 1 with dynamic sampling: rounds", [K[s]["train/num_gen_batches"] for s in sorted(K)])
PY
    refused "trainer.max_staleness: 1 (asynchronous RL) needs the rollout on ranks of its own" 2 \
      "$src/configs/tiny.yaml" trainer.max_staleness=1
    refused "trainer.max_staleness: must be >= 0" 1 "$src/configs/tiny.yaml" trainer.max_staleness=-1
    ;;
  resume)
    k1=("$split" trainer.max_staleness=1 algorithm.rollout_correction.rollout_is=token trainer.save_freq=2
        trainer.test_freq=3)
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "${k1[@]}" trainer.experiment_name=straight
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "${k1[@]}" trainer.experiment_name=resumed trainer.total_training_steps=2
    cp -r runs/resumed runs/refuse
    run 2 "$src/configs/tiny.yaml" "${common[@]}" "${k1[@]}" trainer.experiment_name=resumed | tee resume.log
    grep -q "resumed from .*step_2 (step 2" resume.log
    # The 2-step run validated its last step (test_freq), which synced the weights before the
    # checkpoint did: the same weights, one sync counted earlier.
    same_metrics runs/straight/metrics.jsonl runs/resumed/metrics.jsonl 3,4 async/weight_syncs
    test "$(metric runs/resumed/metrics.jsonl 3 async/staleness)" = "1.0"
    cmp runs/straight/hf_model/model.safetensors runs/resumed/hf_model/model.safetensors
    refused "resume it with trainer.max_staleness >= 1 (now 0)" 2 "$src/configs/tiny.yaml" "${common[@]}" "$split" \
      trainer.experiment_name=refuse
    echo "resumed async run: steps 3-4 and final weights identical to the straight run"
    ;;
  *) echo "unknown check $check" >&2; exit 2;;
esac
echo "async check $check passed"
