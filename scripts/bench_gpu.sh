#!/usr/bin/env bash
# GPU speed table (issue 28): rlpt against its peers on one device, in one run, on the same random
# Qwen2.5-shaped weights' shapes (0.5B, or 1.5B with --model 1.5b), bf16:
#
#   rollout   rlpt's rollout::generate vs Hugging Face transformers `generate` (sdpa attention):
#             prompt 128 random tokens, 256 new tokens, EOS ignored, sampling at temperature 1,
#             batch 64 and 256. tokens/s = batch x 256 / wall of the whole call (prefill included);
#             ms per decode step = (t(256 new) - t(1 new)) / 255; and the fraction of the
#             memory-bandwidth bound rlpt reaches: (weights streamed per step + K/V cache read at
#             the mean length) / nominal bandwidth, over the measured step time.
#   train     one rlpt TrainEngine step (SFT token NLL forward + backward, AdamW lr 1e-6 without
#             clipping; bf16 parameters with fp32 gradients, master weights and moments) vs PyTorch
#             eager (fp32 weights, bf16 autocast, fused AdamW), 16 x 1024 random tokens; median of 3
#             timed steps after one warm-up. TFLOP/s = 6 x N x tokens/s (N = all parameters, tied
#             embeddings once).
#   logprob   rlpt's engine::compute_log_probs under NoGradGuard vs the eager bf16 model's no_grad
#             forward + log_softmax/gather of the fp32-cast logits, 16 x 1024. TFLOP/s = 2 x N x tokens/s.
#   grpo      one whole GRPO step of the real trainer (build/src/rlpt, mpirun -np 1, actor + rollout
#             + reference on one rank): 64 prompts x 8 samples, prompt 128 tokens, up to 256 new
#             tokens (random weights: EOS is about never sampled), KL loss against the reference,
#             4 PPO mini-batches; the stage breakdown from the trainer's own timing_s/* metrics
#             (metrics.jsonl), step 2 and later are the steady state (step 1 includes warm-up), with
#             each stage's TFLOP/s (gen 2·N per response token; old_log_prob, ref 2·N and update
#             6·N per token) and the device memory in use (nvidia-smi, sampled every 0.5 s; the CPU:
#             peak RSS). No peer runs this step; the table shows what the peers' rates measured
#             above would make of the stages' token counts, as an estimate only.
# The peers run from scripts/bench_gpu_peers.py with $PYTHON (default .venv/bin/python; on a GPU
# node e.g. PYTHON=/opt/torch/.venv/bin/python3); when it lacks torch or transformers the peer
# columns say "n/a (reason)" and the rlpt figures still print. MFU is against the nominal bf16
# matmul peak (--peak-tflops; H100/H200: 790 TFLOP/s, the figure issue 28 quotes for the H200)
# and the bound against the nominal bandwidth (--mem-bw-gbs; H100 3350, H200 4800 GB/s); on any
# other device (the CPU) against the copy bandwidth and matmul rate measured at the start of the run.
# Goals (issue 28): rollout >= 10x HF generate at batch 256 (>= 35k tok/s for 0.5B on an H200);
# training >= 1.0x eager tokens/s; log-prob pass >= 1.0x eager forward; the GRPO step's breakdown.
# For reference only (the table's peer column is measured in the same run): issue 28's peers on one
# H200 (PyTorch 2.11, transformers 5.17) gave HF generate 759 / 3,577 tok/s at batch 64 / 256 and
# eager training 79,975 tok/s, 237 TFLOP/s, peak 63 GiB (0.5B).
#
# Usage: scripts/bench_gpu.sh [--model 0.5b|1.5b] [--device cuda|cpu] [--quick] [--no-peers]
#          [--no-grpo] [--grpo-steps N] [--grpo-timeout S] [--mem-bw-gbs X] [--peak-tflops Y]
#          [--bin path/to/rlpt_bench_gpu] [--rlpt path/to/rlpt]
#   --quick: tiny shapes and few tokens (a CPU smoke run of the whole pipeline: --quick --device cpu).
#   Builds nothing: expects build/ (or $BUILD_DIR) to hold tests/bench/rlpt_bench_gpu and src/rlpt
#   (cmake --build build --target rlpt_bench_gpu rlpt). Writes table.md and the raw JSON lines to
#   $OUT or build/bench_gpu/. Sized for about 6 minutes for 0.5B on an H100/H200 (an estimate:
#   rlpt's rollout speed decides most of it); the trainer run is cut at --grpo-timeout seconds
#   (default 180), keeping the steps it logged.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD_DIR:-$here/build}"
bin="$build/tests/bench/rlpt_bench_gpu"
rlpt="$build/src/rlpt"
python="${PYTHON:-$here/.venv/bin/python}"
out_dir="${OUT:-$build/bench_gpu}"
model=0.5b device=cuda quick=0 peers=1 grpo=1 grpo_steps=2 grpo_timeout=180 bw="" peak=""
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-peers) peers=0; shift ;;
    --no-grpo) grpo=0; shift ;;
    --grpo-steps) grpo_steps="$2"; shift 2 ;;
    --grpo-timeout) grpo_timeout="$2"; shift 2 ;;
    --mem-bw-gbs) bw="$2"; shift 2 ;;
    --peak-tflops) peak="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --rlpt) rlpt="$2"; shift 2 ;;
    -h|--help) sed -n '2,47p' "$0"; exit 0 ;;
    *) echo "bench_gpu.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
case "$model" in 0.5b|1.5b) ;; *) echo "bench_gpu.sh: --model 0.5b or 1.5b" >&2; exit 2 ;; esac
case "$device" in cuda|cpu) ;; *) echo "bench_gpu.sh: --device cuda or cpu" >&2; exit 2 ;; esac
[ -x "$bin" ] || { echo "bench_gpu.sh: $bin not built (cmake --build build --target rlpt_bench_gpu)" >&2; exit 2; }

# Shapes: the issue's, or tiny ones for --quick.
if [ "$quick" = 1 ]; then
  model=tiny batches=4,8 prompt=16 new=16 tb=2 ts=64 train_steps=2 lp_iters=2 reps=2
  g_prompts=8 g_n=4 g_mini=4 g_micro=8 g_lp_micro=16
else
  batches=64,256 prompt=128 new=256 tb=16 ts=1024 train_steps=3 lp_iters=3 reps=1
  g_prompts=64 g_n=8 g_mini=16 g_micro=32 g_lp_micro=32
fi
threads=()
[ "$device" = cpu ] && threads=(--threads "$(nproc)")

gpu_name="cpu"
if [ "$device" = cuda ]; then
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1 || true)
  gpu_name=${gpu_name:-"unknown GPU (nvidia-smi failed)"}
  case "$gpu_name" in
    *H200*) bw=${bw:-4800} peak=${peak:-790} ;;
    *H100*) bw=${bw:-3350} peak=${peak:-790} ;;
  esac
fi

mkdir -p "$out_dir"
work=$(mktemp -d)
mon_pid=""
cleanup() {
  if [ -n "$mon_pid" ]; then kill "$mon_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
t_start=$SECONDS

# ---- rlpt: rollout, log-prob pass, training step ----------------------------------------------
echo "bench_gpu.sh: rlpt ($bin) on $device, $model" >&2
: >"$out_dir/rlpt.jsonl"
set +e  # a failed measurement is an {"kind": "error"} line; the others still make the table
"$bin" --device "$device" --model "$model" --batches "$batches" --prompt "$prompt" --new "$new" \
  --train-batch "$tb" --train-seq "$ts" --train-steps "$train_steps" --logprob-iters "$lp_iters" \
  --rollout-reps "$reps" "${threads[@]}" | tee /dev/stderr | grep '^{' >"$out_dir/rlpt.jsonl"
rc=${PIPESTATUS[0]}
set -e
if ! grep -q '"kind":"setup"' "$out_dir/rlpt.jsonl"; then
  echo "bench_gpu.sh: $bin failed before measuring (exit $rc)" >&2; exit 1
fi

# ---- peers: HF generate, eager training step, eager no_grad forward ------------------------------
: >"$out_dir/peers.jsonl"
peer_reason=""
if [ "$peers" = 0 ]; then
  peer_reason="--no-peers"
elif [ ! -x "$python" ] && ! command -v "$python" >/dev/null; then
  peer_reason="no Python at $python (set PYTHON=...)"
else
  echo "bench_gpu.sh: peers ($python scripts/bench_gpu_peers.py)" >&2
  set +e
  "$python" "$here/scripts/bench_gpu_peers.py" --device "$device" --model "$model" --batches "$batches" \
    --prompt "$prompt" --new "$new" --train-batch "$tb" --train-seq "$ts" --train-steps "$train_steps" \
    --logprob-iters "$lp_iters" --rollout-reps "$reps" "${threads[@]}" | tee /dev/stderr | grep '^{' >"$out_dir/peers.jsonl"
  rc=${PIPESTATUS[0]}
  set -e
  if [ "$rc" = 3 ]; then
    peer_reason=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["reason"])' "$out_dir/peers.jsonl")
  elif [ "$rc" != 0 ]; then
    peer_reason="scripts/bench_gpu_peers.py exited $rc (its output above)"
  fi
fi

# ---- one whole GRPO step of the trainer ---------------------------------------------------------
grpo_reason="" grpo_mem=""
: >"$out_dir/grpo_metrics.jsonl"
if [ "$grpo" = 0 ]; then
  grpo_reason="--no-grpo"
elif [ ! -x "$rlpt" ]; then
  grpo_reason="$rlpt not built (cmake --build build --target rlpt)"
else
  "$bin" --write-grpo "$work/grpo" --model "$model" --prompts "$g_prompts" --prompt "$prompt" --new "$new" >&2
  cat >"$out_dir/grpo.yaml" <<EOF
# scripts/bench_gpu.sh: one GRPO step, $g_prompts prompts x $g_n samples, prompt $prompt, $new new tokens
trainer: {experiment_name: bench_gpu, total_training_steps: $grpo_steps, val_before_train: false, test_freq: -1,
          save_freq: -1, export_hf: false, resume: disable, logger: [console, jsonl], output_dir: $work/runs}
placement:
  controller_hosts_roles: true
  groups: [{roles: [actor, rollout, reference], ranks: auto}]
model: {path: $work/grpo/model, dtype: bfloat16, device: $device}
data: {train_files: $work/grpo/train.jsonl, train_batch_size: $g_prompts, max_prompt_length: $prompt,
       max_response_length: $new}
actor:
  optim: {lr: 0.000001}
  ppo_mini_batch_size: $g_mini
  ppo_micro_batch_size_per_rank: $g_micro
  log_prob_micro_batch_size_per_rank: $g_lp_micro
  use_kl_loss: true
  kl_loss_coef: 0.001
ref: {log_prob_micro_batch_size_per_rank: $g_lp_micro}
rollout: {n: $g_n, temperature: 1.0, max_num_seqs: $((g_prompts * g_n))}
reward: {scorer: exact}
algorithm: {adv_estimator: grpo}
EOF
  flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1)
  [ "$(id -u)" -eq 0 ] && flags+=(--allow-run-as-root)
  if [ "$device" = cuda ]; then
    (while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null; sleep 0.5; done) \
      >"$work/gpu_mem.txt" &
    mon_pid=$!
  fi
  echo "bench_gpu.sh: GRPO ($rlpt, $grpo_steps steps, timeout ${grpo_timeout}s)" >&2
  set +e
  timer=()  # GNU time: the peak RSS of mpirun's waited-for children (the rank)
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -f '%M' -o "$work/rss_kb.txt")
  "${timer[@]}" timeout -k 60 "$grpo_timeout" mpirun -np 1 "${flags[@]}" "$rlpt" "$out_dir/grpo.yaml" \
    >"$out_dir/grpo.log" 2>&1
  rc=$?
  set -e
  if [ -n "$mon_pid" ]; then kill "$mon_pid" 2>/dev/null || true; wait "$mon_pid" 2>/dev/null || true; mon_pid=""; fi
  tail -5 "$out_dir/grpo.log" >&2
  metrics="$work/runs/bench_gpu/metrics.jsonl"
  [ -f "$metrics" ] && grep '"timing_s/step"' "$metrics" >"$out_dir/grpo_metrics.jsonl" || true
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    grpo_reason="the trainer ran past --grpo-timeout ${grpo_timeout}s (exit $rc); steps logged before are shown"
  elif [ "$rc" != 0 ]; then
    grpo_reason="the trainer exited $rc (see $out_dir/grpo.log)"
  fi
  if [ "$device" = cuda ]; then
    grpo_mem=$(sort -n "$work/gpu_mem.txt" 2>/dev/null | tail -1)
    grpo_mem=${grpo_mem:+$grpo_mem MiB device memory in use at most (nvidia-smi)}
  else
    grpo_mem=$(tail -1 "$work/rss_kb.txt" 2>/dev/null)
    grpo_mem=${grpo_mem:+$((grpo_mem / 1024)) MiB peak RSS}
  fi
fi
elapsed=$((SECONDS - t_start))

# ---- the table ---------------------------------------------------------------------------------
GPU_NAME="$gpu_name" BW="$bw" PEAK="$peak" PEER_REASON="$peer_reason" GRPO_REASON="$grpo_reason" \
GRPO_MEM="$grpo_mem" ELAPSED="$elapsed" QUICK="$quick" G_SHAPE="$g_prompts x $g_n, prompt $prompt, $new new" G_SAMPLES=$((g_prompts * g_n)) \
python3 - "$out_dir" <<'PY' | tee "$out_dir/table.md"
import json, os, sys
d = sys.argv[1]
load = lambda f: [json.loads(l) for l in open(os.path.join(d, f)) if l.startswith("{")]
rl, peers, grpo = load("rlpt.jsonl"), load("peers.jsonl"), load("grpo_metrics.jsonl")
env = os.environ
setup = next(r for r in rl if r["kind"] == "setup")
pset = next((r for r in peers if r["kind"] == "peer_setup"), None)
bw = float(env["BW"]) if env["BW"] else setup["copy_GBps"]
peak = float(env["PEAK"]) if env["PEAK"] else setup["mm_TFLOPs"]
src = "nominal" if env["BW"] else "measured in this run"
reason = env["PEER_REASON"]
na = f"n/a ({reason})" if reason else "n/a"
N = setup["params"]
print(f"## rlpt vs peers: Qwen2.5-{setup['model']}-shaped random weights ({N / 1e6:.1f}M parameters), "
      f"{setup['dtype']}, {env['GPU_NAME']}" + (" (--quick: tiny shapes, a smoke run, not a measurement)" if env["QUICK"] == "1" else ""))
print()
print(f"- rlpt git {setup['git_sha']}, LibTorch {setup['torch']}; peers: " +
      (f"PyTorch {pset['torch']}, transformers {pset['transformers']} ({pset['python']}, device {pset['device']})" if pset else na))
print(f"- device ceilings measured in this run: copy {setup['copy_GBps']:.0f} GB/s (read + write), "
      f"{setup['dtype']} matmul {setup['mm_TFLOPs']:.1f} TFLOP/s (torch::mm {setup['mm_n']}^3); MFU uses {peak:g} TFLOP/s and "
      f"the bandwidth bound {bw:g} GB/s ({src}); whole run {env['ELAPSED']} s")
print()


def f(v, fmt="{:,.0f}"):
    return fmt.format(v) if v is not None else "–"


def peer(kind, **match):
    return next((r for r in peers if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())), None)


rows = []  # (what, rlpt row, peer row, flops per token, goal ratio, goal text)
for r in (r for r in rl if r["kind"] == "rollout"):
    goal = (10.0, "≥ 10x" + (" (≥ 35k tok/s on an H200)" if setup["model"] == "0.5b" else "")) if r["batch"] == max(
        x["batch"] for x in rl if x["kind"] == "rollout") else (None, "")
    rows.append((f"rollout b {r['batch']} (prompt {r['prompt']} + {r['new']} new)", r,
                 peer("peer_generate", batch=r["batch"]), None, *goal))
for kind, pk, label in (("train", "peer_train", "training step"), ("logprob", "peer_logprob", "log-prob pass")):
    for r in (r for r in rl if r["kind"] == kind):
        rows.append((f"{label} {r['batch']} x {r['seq']}", r, peer(pk), 6 if kind == "train" else 2, 1.0, "≥ 1.0x"))

print("| measurement | rlpt tok/s | peer tok/s | rlpt / peer | goal | met | rlpt ms/decode step | peer ms/decode step "
      "| rlpt MFU | peer MFU | rlpt peak GiB | peer peak GiB |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for what, r, p, k, goal, goal_text in rows:
    if k is None:  # rollout: MFU from the FLOPs of a decode step (none when noise beat t(new) - t(1))
        step_mfu = lambda ms: ms > 0 and r["flops_per_step"] / (ms / 1e3) / (peak * 1e12) or None
        mfu, pmfu = step_mfu(r["step_ms"]), p and step_mfu(p["step_ms"])
    else:
        mfu = k * N * r["tokens_per_s"] / (peak * 1e12)
        pmfu = p and k * p["params"] * p["tokens_per_s"] / (peak * 1e12)
    ratio = p and r["tokens_per_s"] / p["tokens_per_s"]
    met = "" if goal is None or not p or env["QUICK"] == "1" else ("yes" if ratio >= goal else "no")
    print(f"| {what} | {r['tokens_per_s']:,.0f} | {f(p and p['tokens_per_s']) if p else na} | "
          f"{f(ratio, '{:.2f}x')} | {goal_text or '–'} | {met or '–'} | {f(r.get('step_ms'), '{:.2f}')} | "
          f"{f(p and p.get('step_ms'), '{:.2f}')} | {f(mfu and 100 * mfu, '{:.1f}%')} | {f(pmfu and 100 * pmfu, '{:.1f}%')} | "
          f"{r['peak_gib']:.2f} | {f(p and p['peak_gib'], '{:.2f}')} |")
for side, errs in (("rlpt", [r for r in rl if r["kind"] == "error"]), ("peer", [r for r in peers if r["kind"] == "peer_error"])):
    for e in errs:
        print(f"\n**{side} {e['what']} failed**: {e['reason']}")
peak_kind = {r["peak_kind"] for r in rl if "peak_kind" in r}
print(f"\nPeak memory: {', '.join(sorted(peak_kind))} (cuda_max_allocated = torch.cuda.max_memory_allocated; "
      "peak_rss = process VmHWM since the measurement began; the peer's CPU figure is the whole process's).")

print("\n| rlpt rollout | step ms | bandwidth bound ms | fraction of the bandwidth bound | matmul bound ms | prefill s |")
print("|---|---|---|---|---|---|")
for r in (r for r in rl if r["kind"] == "rollout"):
    b_ms = r["bytes_per_step"] / (bw * 1e9) * 1e3
    f_ms = r["flops_per_step"] / (peak * 1e12) * 1e3
    frac = f"{100 * b_ms / r['step_ms']:.1f}%" if r["step_ms"] > 0 else "– (t(new) − t(1) ≤ 0: timing noise)"
    print(f"| batch {r['batch']} | {r['step_ms']:.2f} | {b_ms:.3f} ({r['bytes_per_step'] / 1e9:.2f} GB/step) | "
          f"{frac} | {f_ms:.3f} | {r['prefill_s']:.3f} |")

print(f"\n### One GRPO step of the trainer ({env['G_SHAPE']}), stage breakdown")
if env["GRPO_REASON"]:
    print(f"\n{env['GRPO_REASON']}")
if grpo:
    stages = ["gen", "reward", "old_log_prob", "ref", "adv", "update", "update_weights"]
    pt = peer("peer_train")
    pl = peer("peer_logprob")
    pg = max((p for p in peers if p["kind"] == "peer_generate"), key=lambda p: p["batch"], default=None)
    print("\n| step | stage | seconds | share | tokens | TFLOP/s | MFU | at the peer's rate (estimate) s |")
    print("|---|---|---|---|---|---|---|---|")
    for m in grpo:
        total = m["timing_s/step"]
        tokens = m.get("perf/total_num_tokens", 0)  # prompt + response tokens of the batch
        n_resp = m.get("response_length/mean", 0) * int(env["G_SAMPLES"])
        for s in stages:
            t = m.get(f"timing_s/{s}")
            if t is None:
                continue
            tok, k, prate = {"gen": (n_resp, 2, pg), "old_log_prob": (tokens, 2, pl), "ref": (tokens, 2, pl),
                             "update": (tokens, 6, pt)}.get(s, (None, None, None))
            tf = tok and t > 0 and k * N * tok / t / 1e12
            est = prate and tok / prate["tokens_per_s"]
            print(f"| {m['step']} | {s} | {t:.2f} | {100 * t / total:.0f}% | {f(tok)} | {f(tf, '{:.1f}')} | "
                  f"{f(tf and 100 * tf / peak, '{:.1f}%')} | {f(est, '{:.2f}')} |")
        print(f"| {m['step']} | **step** | **{total:.2f}** | 100% | {f(tokens)} | | | |")
    last = grpo[-1]
    print(f"\nMean response length {last.get('response_length/mean', float('nan')):.1f} tokens, mean prompt length "
          f"{last.get('prompt_length/mean', float('nan')):.1f}; trainer throughput {last.get('perf/throughput', 0):,.0f} "
          f"tok/s (prompt + response tokens / step time); {env['GRPO_MEM'] or 'memory not sampled'}. "
          "Step 1 includes warm-up (allocations, kernel selection). The estimate column divides the stage's "
          "tokens by the peer's rate from the rows above (generate: its largest batch; different shapes), "
          "it is not a measured peer.")
PY
echo "bench_gpu.sh: wrote $out_dir/table.md, rlpt.jsonl, peers.jsonl, grpo_metrics.jsonl" >&2
