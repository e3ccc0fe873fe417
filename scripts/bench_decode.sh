#!/usr/bin/env bash
# Rollout decode benchmark table: tokens/s at batch 1/16/64 with 1 and 2 threads for the tiny
# demo model and the ~125M Llama of issue #12 (fp32 and bf16), with rlpt's decode kernels and
# with the plain BLAS path (kernels off), against its peers on the same Hugging Face checkpoint
# (written once to a temporary directory): plain PyTorch eager (scripts/bench_decode_torch.py,
# python3-torch, same threads) and llama.cpp (llama-batched-bench on that checkpoint converted to
# GGUF f32 and f16 by scripts/hf_to_gguf.py; llama.cpp fetched and built once into a cache by
# scripts/fetch_llama_cpp.sh), and against this machine's memory-bandwidth and matmul ceilings.
# Everything is measured in the same run: each round runs, per thread count, rlpt, PyTorch eager
# and llama.cpp one after the other, so load hits all alike; the table takes each engine's best
# round and also shows the range of the per-round rlpt / llama.cpp ratios.
# A peer that cannot run (llama.cpp not buildable here, numpy missing, ...) shows as
# "not available (reason)" instead of failing the benchmark.
# Usage: scripts/bench_decode.sh [path/to/rlpt_bench_decode] [--threads "1 2"] [--quick] [--batches 1,16,64]
#        [--rounds 2] [--no-torch] [--no-llama-cpp] [--no-blas] [--models tiny,fp32,bf16] [--before BIN]
#   --before BIN: another build's rlpt_bench_decode (e.g. main's) run in each round right after this
#   one with the same arguments and --no-blas; the first table gets its tok/s and rlpt / before
#   --no-blas, --models, --baseline: passed to rlpt_bench_decode (skip the BLAS-path rows / pick the
#   models / compare against the per-layer path without the fused decode step instead of BLAS) to
#   shorten a run on a loaded machine
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
bin="$here/build/tests/bench/rlpt_bench_decode"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then bin="$1"; shift; fi
[ -x "$bin" ] || { echo "bench_decode.sh: $bin not built (cmake --build build --target rlpt_bench_decode)" >&2; exit 2; }
thread_list="1 2"
batches="1,16,64"
new_tokens=32
rounds=2
torch_rows=1
llama_rows=1
before_bin=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) thread_list="$2"; shift 2 ;;
    --batches) batches="$2"; args+=("$1" "$2"); shift 2 ;;
    --quick) new_tokens=16; args+=("$1"); shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --no-torch) torch_rows=0; shift ;;
    --no-llama-cpp) llama_rows=0; shift ;;
    --before) before_bin="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
out=$(mktemp)
hf=$(mktemp -d)
trap 'rm -rf "$out" "$hf"' EXIT
"$bin" --hf-dir "$hf/llama125m" --write-hf-only

# llama.cpp: build (cached, idempotent) and convert the checkpoint; any failure is a reason, not an exit.
llama_reason=""
llama_bin=""
if [ "$llama_rows" = 0 ]; then
  llama_reason="--no-llama-cpp"
elif ! /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  llama_reason="numpy missing for the GGUF conversion (apt-get install python3-numpy)"
elif ! fetch_log=$("$here/scripts/fetch_llama_cpp.sh" 2>&1); then
  llama_reason="scripts/fetch_llama_cpp.sh failed: $(echo "$fetch_log" | tail -1)"
else
  llama_dir=$(echo "$fetch_log" | sed -n 's/^LLAMA_CPP_DIR=//p' | tail -1)
  llama_bin="$llama_dir/build/bin/llama-batched-bench"
  for dt in f32 f16; do
    if ! conv_log=$(/usr/bin/python3 "$here/scripts/hf_to_gguf.py" "$hf/llama125m" "$hf/llama125m-$dt.gguf" \
                      --gguf-py "$llama_dir/src/gguf-py" --dtype "$dt" 2>&1); then
      llama_reason="GGUF conversion failed: $(echo "$conv_log" | tail -1)"; llama_bin=""; break
    fi
  done
  # The GGUF must compute the checkpoint's function (Q/K rotary layout included): llama.cpp's
  # logits, token by token through its KV cache, against scripts/reference_forward.py's.
  if [ -n "$llama_bin" ]; then
    chk="$llama_dir/build/rlpt_gguf_logits"
    if [ ! -x "$chk" ] || [ "$here/scripts/gguf_logits.cpp" -nt "$chk" ]; then
      g++ -O2 -std=c++17 -I "$llama_dir/src/include" -I "$llama_dir/src/ggml/include" "$here/scripts/gguf_logits.cpp" \
        -o "$chk" "$llama_dir/build/src/libllama.a" "$llama_dir/build/ggml/src/libggml.a" \
        "$llama_dir/build/ggml/src/libggml-cpu.a" "$llama_dir/build/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm \
        || { llama_reason="cannot compile scripts/gguf_logits.cpp against llama.cpp"; llama_bin=""; }
    fi
  fi
  if [ -n "$llama_bin" ]; then
    ids="5 100 2000 31999 7 42"
    echo "{\"input_ids\": [[${ids// /,}]], \"attention_mask\": [[1,1,1,1,1,1]], \"position_ids\": [[0,1,2,3,4,5]]}" >"$hf/ids.json"
    "$chk" "$hf/llama125m-f32.gguf" "$hf/llama.bin" $ids &&
      /usr/bin/python3 "$here/scripts/reference_forward.py" "$hf/llama125m" "$hf/ids.json" "$hf/ref.bin" &&
      gguf_check=$(/usr/bin/python3 -c '
import sys, numpy as np
a, b = (np.fromfile(f, dtype=np.float32).reshape(6, -1) for f in sys.argv[1:3])
d = float(np.abs(a - b).max())
print(f"max |logit diff| {d:.2e} (max |logit| {float(np.abs(b).max()):.2f}), argmax agrees at "
      f"{int((a.argmax(1) == b.argmax(1)).sum())}/6 positions")
sys.exit(0 if d < 1e-2 else 1)' "$hf/llama.bin" "$hf/ref.bin") || {
        llama_reason="the GGUF's logits differ from reference_forward.py's: ${gguf_check:-check did not run}"; llama_bin=""; }
    echo "GGUF f32 under llama.cpp vs scripts/reference_forward.py (float64) on the HF checkpoint: ${gguf_check:-failed}" >&2
  fi
  llama_info="$(cat "$llama_dir/llama.cpp.info.json" 2>/dev/null | tr -d ' \n') $(git -C "$llama_dir/src" rev-parse --short HEAD 2>/dev/null)"
fi

# llama.cpp decode: llama-batched-bench, prompt 16 tokens per sequence (not shared), then N new
# tokens for every sequence in one batch per step (S_TG = B * N / t); batches listed twice, best kept.
run_llama() {  # threads round
  local t=$1 r=$2 dt npl="" b
  for b in ${batches//,/ }; do npl="$npl$b,$b,"; done
  local maxb; maxb=$(echo "${batches//,/ }" | tr ' ' '\n' | sort -n | tail -1)
  for dt in f32 f16; do
    local log
    if ! log=$("$llama_bin" -m "$hf/llama125m-$dt.gguf" -t "$t" -tb "$t" -c $((maxb * (16 + new_tokens) + 64)) \
                 -b 2048 -ub 512 -npp 16 -ntg "$new_tokens" -npl "${npl%,}" --output-format jsonl 2>&1); then
      echo "$log" | tail -5 >&2
      echo "{\"kind\":\"llama_cpp_error\",\"dtype\":\"$dt\",\"threads\":$t,\"reason\":\"llama-batched-bench exited non-zero\"}" >>"$out"
      continue
    fi
    echo "$log" | grep '^{"n_kv_max"' | /usr/bin/python3 -c '
import json, sys
dt, t, r = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for line in sys.stdin:
    j = json.loads(line)
    print(json.dumps({"kind": "llama_cpp", "dtype": dt, "threads": t, "round": r, "batch": j["pl"],
                      "tokens_per_s": round(j["speed_tg"], 2), "flash_attn": j["flash_attn"]}))' "$dt" "$t" "$r" | tee -a /dev/stderr >>"$out"
  done
}

load() { echo "{\"kind\":\"load\",\"round\":$1,\"when\":\"$2\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}" >>"$out"; }
for r in $(seq 1 "$rounds"); do
  load "$r" start
  for t in $thread_list; do
    OMP_NUM_THREADS="$t" "$bin" --threads "$t" --hf-dir "$hf/llama125m" "${args[@]}" | tee -a /dev/stderr | grep '^{' \
      | sed "s/^{/{\"round\":$r,/" >>"$out"
    if [ -n "$before_bin" ]; then
      OMP_NUM_THREADS="$t" "$before_bin" --threads "$t" --hf-dir "$hf/llama125m" "${args[@]}" --no-blas | grep '^{"kind":"decode"' \
        | sed "s/^{\"kind\":\"decode\"/{\"round\":$r,\"kind\":\"decode_before\"/" | tee -a /dev/stderr >>"$out"
    fi
    if [ "$torch_rows" = 1 ]; then
      OMP_NUM_THREADS="$t" /usr/bin/python3 "$here/scripts/bench_decode_torch.py" "$hf/llama125m" --threads "$t" \
        --batches "$batches" --new-tokens "$new_tokens" | tee -a /dev/stderr | grep '^{' | sed "s/^{/{\"round\":$r,/" >>"$out"
    fi
    if [ -n "$llama_bin" ]; then OMP_NUM_THREADS="$t" run_llama "$t" "$r"; fi
  done
  load "$r" end
done
uptime | sed 's/^/load (after the run): /'
LLAMA_REASON="$llama_reason" LLAMA_INFO="${llama_info:-}" GGUF_CHECK="${gguf_check:-}" python3 - "$out" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for c in (r for r in rows if r["kind"] == "ceiling"):
    print(f"Round {c.get('round', 1)}, threads {c['threads']}: tensor copy {c['copy_GBps']:.1f} GB/s (read+write bytes), "
          f"torch::mm {c['mm_GFLOPs']:.1f} GFLOP/s (fp32); kernels {c['kernel_isa']} on {c.get('kernel_threads', '?')} "
          f"thread(s); {c['blas']}; git {c['git_sha']}")
print("Load average (1/5/15 min) per round: " + "; ".join(
    f"round {r['round']} {r['when']} {r['loadavg']}" for r in rows if r["kind"] == "load") + " (2 cores)")
reason = os.environ.get("LLAMA_REASON", "")
errors = [r for r in rows if r["kind"] == "llama_cpp_error"]
if errors and not reason:
    reason = "; ".join(f"{e['dtype']} t{e['threads']}: {e['reason']}" for e in errors)
if not reason:
    print(f"llama.cpp: {os.environ.get('LLAMA_INFO', '')} llama-batched-bench (npp 16, best of 2 per round), "
          f"flash_attn={sorted({r['flash_attn'] for r in rows if r['kind'] == 'llama_cpp'})}, KV cache f16 (its default)")
    print(f"GGUF f32 under llama.cpp vs scripts/reference_forward.py on the HF checkpoint: {os.environ.get('GGUF_CHECK')}")
print()


def best(kind, key, dtype=None):
    """Best tok/s over rounds of one engine at key = (threads, batch) (+ its per-round figures)."""
    sel = [r for r in rows if r["kind"] == kind and (r["threads"], r["batch"]) == key and
           (dtype is None or r.get("dtype") == dtype or r.get("model", "").endswith(dtype))]
    by_round = {}
    for r in sel:
        by_round[r.get("round", 1)] = max(by_round.get(r.get("round", 1), 0), r["tokens_per_s"])
    return (max(by_round.values()) if by_round else None), by_round


fmt = lambda v, f: f.format(v) if v else "–"
na = f"not available ({reason})" if reason else "–"
rounds = sorted({r.get("round", 1) for r in rows})
print(f"125M Llama against its peers on the same checkpoint, {len(rounds)} round(s), best round of each engine; "
      "llama.cpp S_TG of llama-batched-bench; per-round ratios from the same round's runs")
print()
has_before = any(r["kind"] == "decode_before" for r in rows)
print("| threads | batch | rlpt fp32 tok/s | " + ("rlpt before (--before) tok/s | rlpt / before | " if has_before else "") +
      "PyTorch eager tok/s | rlpt / eager | llama.cpp f32 tok/s | rlpt / llama.cpp "
      "| rlpt / llama.cpp per round | rlpt / best fp32 peer | rlpt / bandwidth-or-matmul ceiling | llama.cpp / same ceiling |")
print("|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if has_before else ""))
keys = sorted({(r["threads"], r["batch"]) for r in rows if r["kind"] == "decode" and r["model"].startswith("125M")})
ceil = {}
for r in rows:
    if r["kind"] == "decode" and r["model"] == "125M Llama fp32":
        k = (r["threads"], r["batch"])
        if r["tokens_per_s"] >= ceil.get(k, (0, 0))[0]:
            ceil[k] = (r["tokens_per_s"], r["achieved"], r["binding"], r["ceiling_tokens_per_s"])
for key in keys:
    rl, rl_r = best("decode", key, "fp32")
    if rl is None:
        continue
    e, _ = best("torch_eager", key)
    ll, ll_r = best("llama_cpp", key, "f32")
    per_round = [rl_r[k] / ll_r[k] for k in sorted(rl_r) if k in ll_r]
    pr = f"{min(per_round):.2f}-{max(per_round):.2f}" if per_round else "–"
    peer = max(v for v in (e, ll, 1e-30) if v)
    bf, _ = best("decode_before", key, "fp32")
    before_cols = f"{fmt(bf, '{:.1f}')} | {fmt(bf and rl / bf, '{:.2f}')} | " if has_before else ""
    print(f"| {key[0]} | {key[1]} | {rl:.1f} | {before_cols}{fmt(e, '{:.1f}')} | {fmt(e and rl / e, '{:.2f}')} | "
          f"{fmt(ll, '{:.1f}') if ll or not reason else na} | {fmt(ll and rl / ll, '{:.2f}')} | {pr} | "
          f"{fmt(peer > 1e-29 and rl / peer, '{:.2f}')} | {100 * ceil[key][1]:.0f}% ({ceil[key][2]}) | "
          f"{fmt(ll and 100 * ll / ceil[key][3], '{:.0f}%')} |")
bf16_keys = [k for k in keys if best("decode", k, "bf16")[0] is not None]
print()
if bf16_keys:
    print("| threads | batch | rlpt bf16 tok/s | llama.cpp f16 tok/s | rlpt bf16 / llama.cpp f16 | rlpt / llama.cpp per round |")
    print("|---|---|---|---|---|---|")
for key in bf16_keys:
    rl, rl_r = best("decode", key, "bf16")
    ll, ll_r = best("llama_cpp", key, "f16")
    per_round = [rl_r[k] / ll_r[k] for k in sorted(rl_r) if k in ll_r]
    pr = f"{min(per_round):.2f}-{max(per_round):.2f}" if per_round else "–"
    print(f"| {key[0]} | {key[1]} | {rl:.1f} | {fmt(ll, '{:.1f}') if ll or not reason else na} | "
          f"{fmt(ll and rl / ll, '{:.2f}')} | {pr} |")
print()
base = {r.get("baseline", "blas") for r in rows if r["kind"] == "decode"}
base = "unfused path (per-layer forward)" if base == {"unfused"} else "BLAS path"
print(f"| model | threads | batch | rlpt tok/s | {base} tok/s | rlpt / that | ceiling tok/s | rlpt / ceiling "
      "| binding | head ms | sample ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
last = {}
for r in rows:  # the best round of each (model, threads, batch)
    if r["kind"] == "decode":
        k = (r["model"], r["batch"], r["threads"])
        if k not in last or r["tokens_per_s"] > last[k]["tokens_per_s"]:
            last[k] = r
for k in sorted(last):
    r = last[k]
    print(f"| {r['model']} | {r['threads']} | {r['batch']} | {r['tokens_per_s']:.1f} | {fmt(r['blas_tokens_per_s'], '{:.1f}')} | "
          f"{fmt(r['vs_blas'], '{:.2f}')} | {r['ceiling_tokens_per_s']:.0f} | {100 * r['achieved']:.0f}% | {r['binding']} | "
          f"{r['head_ms']:.2f} | {r['sample_ms']:.2f} |")
print("\n| model | round | threads | sampler ms/step at batch 64: greedy | plain | top-p 0.9 | top-p 0.9 + top-k 50 |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if r["kind"] == "sampler":
        print(f"| {r['model']} | {r.get('round', 1)} | {r.get('threads', '')} | {r['greedy_ms']:.3f} | {r['plain_ms']:.3f} | "
              f"{r['top_p_ms']:.3f} | {r['top_p_top_k_ms']:.3f} |")
PY
