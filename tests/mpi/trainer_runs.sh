#!/usr/bin/env bash
# End-to-end checks of the trainer through the real binary (each a ctest entry, label mpi).
#   trainer_runs.sh <rlpt binary> <source dir> <check>
# checks:
#   smoke-N            configs/tiny.yaml on N ranks finishes, logs metrics, exports a model
#   dp-invariance      tiny on 1 vs 2 ranks (1 vs 2 actor DP ranks): same metrics, first steps
#   resume             4 steps straight == 2 steps + resume + 2 steps (metrics and weights
#                      bit-identical), with the checkpoint at an epoch boundary
#   sft                configs/sft.yaml shortened: trains and writes a HF model folder
#   tp-invariance      tiny with actor/rollout/reference split over tp = 2 vs tp = 1: same metrics,
#                      first steps; the exported (gathered) model generates; resuming the tp = 2
#                      checkpoint at tp = 1 is refused, at tp = 2 bit-identical; SFT at tp 2
#                      follows tp 1
#   tp-layouts         uneven layouts: actor tp 2 x dp 2 with a tp 1 critic (GAE); every role with
#                      the critic at tp 2; rollout on its own tp 2 ranks (weight sync slice by
#                      slice) vs a colocated tp = 1 run
#   ppo                configs/ppo.yaml shortened (critic + GAE) on top of the sft model
set -euo pipefail
bin="$1"; src="$2"; check="$3"
work=$(mktemp -d /tmp/rlpt-trainer-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
[ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
run() { local np="$1"; shift; mpirun -np "$np" "${flags[@]}" "$bin" "$@"; }
py=/usr/bin/python3; [ -x "$py" ] || py=python3

compare() {  # compare <a.jsonl> <b.jsonl> <steps> <rtol> <keys...>
  "$py" - "$@" <<'PY'
import json, math, sys
a, b, steps, rtol = sys.argv[1], sys.argv[2], [int(s) for s in sys.argv[3].split(",")], float(sys.argv[4])
keys = sys.argv[5:]
load = lambda p: {r["step"]: r for r in map(json.loads, open(p))}
A, B = load(a), load(b)
bad = 0
for s in steps:
    for k in keys:
        x, y = A[s].get(k), B[s].get(k)
        if x is None or y is None:
            print(f"step {s} {k}: missing ({x}, {y})"); bad += 1; continue
        ok = (x == y) if rtol == 0 else math.isclose(x, y, rel_tol=rtol, abs_tol=rtol)
        print(f"step {s} {k}: {x!r} vs {y!r} {'ok' if ok else 'DIFFERENT'}")
        bad += not ok
sys.exit(1 if bad else 0)
PY
}

case "$check" in
  smoke-*)
    np="${check#smoke-}"
    run "$np" "$src/configs/tiny.yaml" trainer.output_dir=runs trainer.save_freq=2 trainer.test_freq=1 \
      trainer.export_hf_freq=1
    test -f runs/tiny/hf_models/step_1/model.safetensors && test -f runs/tiny/hf_models/step_2/config.json
    test -s runs/tiny/metrics.jsonl
    grep -q '"actor/pg_loss"' runs/tiny/metrics.jsonl
    grep -q '"val-core/rlpt/arithmetic/acc/mean@1"' runs/tiny/metrics.jsonl
    test -f runs/tiny/hf_model/config.json && test -f runs/tiny/hf_model/model.safetensors
    test -f runs/tiny/checkpoints/step_2/COMPLETE
    if [ "$np" = 1 ]; then  # rlpt generate on the exported folder: json ids + log-probs, deterministic greedy
      "$bin" generate --model runs/tiny/hf_model --prompt-ids 1,4,5,13 --greedy --max-new-tokens 4 --output json > g1.json
      "$bin" generate --model runs/tiny/hf_model --prompt-ids 1,4,5,13 --greedy --max-new-tokens 4 --output json > g2.json
      cmp g1.json g2.json
      "$py" -c 'import json,sys; d=json.load(open("g1.json")); s=d["samples"][0]; assert 1 <= len(s["token_ids"]) <= 4 and len(s["log_probs"]) == len(s["token_ids"]) and all(p <= 0 for p in s["log_probs"]), d'
      "$bin" generate --model runs/tiny/hf_model --prompt "12+3=" --n 2 --temperature 0.7 --max-new-tokens 4 | tee g.txt
      grep -q "finish" g.txt
      if "$bin" generate --model runs/tiny/hf_model --prompt-ids 1,99999 2> gerr.txt; then exit 1; fi
      grep -q "rlpt generate: " gerr.txt
    fi
    ;;
  split)
    # Actor+reference and rollout on different ranks: weights travel by the bucketed MPI broadcast
    # after every update (an entropy bonus makes every update change them), and the trainer
    # refuses stale weight versions. Per-row seeds make the samples depend only on the weights,
    # so 2 and 1 separate rollout ranks must match a colocated run (shared tensors) step by step.
    common=(trainer.output_dir=runs trainer.total_training_steps=4 trainer.val_before_train=false
            actor.entropy_coeff=0.05 actor.optim.lr=0.01)
    run 3 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=split2 \
      'placement.groups=[{roles: [actor, reference], ranks: 1}, {roles: [rollout], ranks: 2}]' | tee split.log
    grep -q "rollout .*ranks \[1,2\]" split.log
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=split1 \
      'placement.groups=[{roles: [actor, reference], ranks: 1}, {roles: [rollout], ranks: 1}]'
    run 1 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=colocated
    for r in split1 split2; do
      compare runs/colocated/metrics.jsonl runs/$r/metrics.jsonl 1,2,3,4 2e-3 \
        response_length/mean actor/entropy actor/grad_norm
    done
    "$py" - runs/colocated/metrics.jsonl <<'PY'
import json, sys
e = [json.loads(l)["actor/entropy"] for l in open(sys.argv[1])]
assert abs(e[-1] - e[0]) > 1e-3, f"the updates did not change the policy: entropy {e}"
PY
    ;;
  dp-invariance)
    common=(trainer.output_dir=runs trainer.total_training_steps=3 trainer.val_before_train=false)
    run 1 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=one
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=two
    compare runs/one/metrics.jsonl runs/two/metrics.jsonl 1,2,3 2e-3 \
      critic/score/mean response_length/mean actor/pg_loss actor/entropy actor/grad_norm actor/ppo_kl
    ;;
  resume)
    # 24 prompts, 12 per step: an epoch is 2 steps, so the checkpoint at step 2 sits exactly on
    # an epoch boundary (verl once resumed such a checkpoint into zero training steps).
    common=(trainer.output_dir=runs data.builtin.num_train=24 trainer.save_freq=2 trainer.val_before_train=false)
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=straight trainer.total_training_steps=4
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=resumed trainer.total_training_steps=2
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=resumed trainer.total_training_steps=4 \
      | tee resume.log
    grep -q "resumed from .*step_2 (step 2, epoch 0, 24 of 24" resume.log
    compare runs/straight/metrics.jsonl runs/resumed/metrics.jsonl 3,4 0 \
      critic/score/mean actor/pg_loss actor/grad_norm training/epoch
    cmp runs/straight/hf_model/model.safetensors runs/resumed/hf_model/model.safetensors
    echo "resumed run: steps 3-4 and final weights identical to the straight run"
    ;;
  sft)
    run 2 "$src/configs/sft.yaml" trainer.output_dir=runs sft.total_steps=30 sft.eval_every=15 \
      sft.output_model_dir=runs/sft/model
    test -f runs/sft/model/config.json && test -f runs/sft/model/tokenizer.json
    grep -q '"sft/loss"' runs/sft/metrics.jsonl
    ;;
  tp-invariance)
    # The untrained tiny model scores 0 everywhere: the entropy bonus and a KL loss to the
    # reference make every update (and the reference's log-probs) show in the metrics.
    common=(trainer.output_dir=runs trainer.total_training_steps=3 trainer.val_before_train=false
            actor.entropy_coeff=0.05 actor.optim.lr=0.01 actor.use_kl_loss=true trainer.save_freq=3)
    run 1 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=tp1
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=tp2 \
      'placement.groups=[{roles: [actor, rollout, reference], ranks: 2, model_parallel_size: 2}]' | tee tp2.log
    grep -q "tp=2" tp2.log
    compare runs/tp1/metrics.jsonl runs/tp2/metrics.jsonl 1,2,3 2e-3 \
      critic/score/mean response_length/mean actor/pg_loss actor/entropy actor/grad_norm actor/ppo_kl
    compare runs/tp1/metrics.jsonl runs/tp2/metrics.jsonl 2,3 2e-3 actor/kl_loss
    "$py" -c 'import json,sys; k=[json.loads(l)["actor/kl_loss"] for l in open("runs/tp2/metrics.jsonl")]; assert k[-1] > 1e-6, k'
    "$py" - runs/tp1/hf_model/model.safetensors runs/tp2/hf_model/model.safetensors <<'PY'
import json, struct, sys
def header(p):
    with open(p, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return {k: v["shape"] for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}
a, b = header(sys.argv[1]), header(sys.argv[2])
assert a == b, f"tp=2 export differs in names/shapes: {a} vs {b}"
print(f"tp=2 export: {len(b)} full tensors, same names and shapes as tp=1")
PY
    "$bin" generate --model runs/tp2/hf_model --prompt-ids 1,4,5,13 --greedy --max-new-tokens 4 --output json > g2.json
    "$bin" generate --model runs/tp1/hf_model --prompt-ids 1,4,5,13 --greedy --max-new-tokens 4 --output json > g1.json
    "$py" -c 'import json,sys; a,b=[json.load(open(f))["samples"][0]["token_ids"] for f in ("g1.json","g2.json")]; assert a==b,(a,b)'
    if run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=tp2 trainer.resume=auto \
         trainer.total_training_steps=4 > resume.log 2>&1; then cat resume.log; exit 1; fi
    grep -q "written with tensor parallelism 2 rank . and this engine runs 1 (none)" resume.log || { cat resume.log; exit 1; }
    # ... and resuming it at tp 2 continues: step 4 of the resumed run equals a straight 4-step run.
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=tp2 trainer.resume=auto \
      trainer.total_training_steps=4 'placement.groups=[{roles: [actor, rollout, reference], ranks: 2, model_parallel_size: 2}]' \
      | tee resume2.log
    grep -q "resumed from .*step_3" resume2.log
    run 2 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=tp2straight trainer.total_training_steps=4 \
      'placement.groups=[{roles: [actor, rollout, reference], ranks: 2, model_parallel_size: 2}]'
    compare runs/tp2straight/metrics.jsonl runs/tp2/metrics.jsonl 4 0 actor/entropy actor/grad_norm actor/kl_loss
    # SFT at tp 2 (actor + rollout for the greedy evaluation) follows the tp 1 run.
    sft=(trainer.output_dir=runs sft.total_steps=6 sft.eval_every=3)
    run 2 "$src/configs/sft.yaml" "${sft[@]}" trainer.experiment_name=sft1 sft.output_model_dir=runs/sft1/model
    run 2 "$src/configs/sft.yaml" "${sft[@]}" trainer.experiment_name=sft2 sft.output_model_dir=runs/sft2/model \
      'placement.groups=[{roles: [actor, rollout], ranks: 2, model_parallel_size: 2}]'
    compare runs/sft1/metrics.jsonl runs/sft2/metrics.jsonl 1,3,6 2e-3 sft/loss sft/grad_norm
    ;;
  tp-layouts)
    common=(trainer.output_dir=runs trainer.total_training_steps=2 trainer.val_before_train=false
            actor.entropy_coeff=0.05 actor.optim.lr=0.01 actor.use_kl_loss=true)
    # GAE: actor/rollout/reference tp 2 x dp 2 on 4 ranks, critic tp 1 on 2 more.
    run 1 "$src/configs/tiny.yaml" "${common[@]}" algorithm.adv_estimator=gae algorithm.use_kl_in_reward=true trainer.experiment_name=gae1 \
      'placement.groups=[{roles: [actor, rollout, reference, critic], ranks: 1}]'
    run 6 "$src/configs/tiny.yaml" "${common[@]}" algorithm.adv_estimator=gae algorithm.use_kl_in_reward=true trainer.experiment_name=gae6 \
      'placement.groups=[{roles: [actor, rollout, reference], ranks: 4, model_parallel_size: 2}, {roles: [critic], ranks: 2}]'
    compare runs/gae1/metrics.jsonl runs/gae6/metrics.jsonl 1,2 2e-3 \
      response_length/mean actor/pg_loss actor/entropy actor/grad_norm actor/kl_loss critic/vf_loss critic/grad_norm
    # Every role of the group split over tp 2, the critic included.
    run 2 "$src/configs/tiny.yaml" "${common[@]}" algorithm.adv_estimator=gae algorithm.use_kl_in_reward=true trainer.experiment_name=gae2 \
      'placement.groups=[{roles: [actor, rollout, reference, critic], ranks: 2, model_parallel_size: 2}]'
    compare runs/gae1/metrics.jsonl runs/gae2/metrics.jsonl 1,2 2e-3 \
      response_length/mean actor/pg_loss actor/entropy actor/grad_norm actor/kl_loss critic/vf_loss critic/grad_norm
    # Rollout on its own tp 2 ranks: each receives exactly its slices from the actor.
    run 1 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=colocated
    run 4 "$src/configs/tiny.yaml" "${common[@]}" trainer.experiment_name=split \
      'placement.groups=[{roles: [actor, reference], ranks: 2, model_parallel_size: 2}, {roles: [rollout], ranks: 2, model_parallel_size: 2}]'
    compare runs/colocated/metrics.jsonl runs/split/metrics.jsonl 1,2 2e-3 \
      response_length/mean actor/entropy actor/grad_norm actor/kl_loss
    ;;
  *) echo "unknown check $check" >&2; exit 2;;
esac
echo "trainer check $check passed"
