#!/usr/bin/env python3
"""The peers of scripts/bench_gpu.sh: Hugging Face transformers and PyTorch eager on a random-weight
Qwen2.5-shaped model, with the shapes rlpt is measured on (tests/bench/bench_gpu.cpp). Prints one JSON
line per measurement on stdout, progress on stderr.

  generate  Qwen2ForCausalLM (sdpa attention) in bf16, model.generate on B random prompts of --prompt
            tokens, sampling at temperature 1 with top-k/top-p off, min_new_tokens = max_new_tokens =
            --new with eos_token_id None (EOS ignored). tokens/s = B * new / wall of the call;
            ms per decode step = (t(new tokens) - t(1 token)) / (new - 1). One warm-up call (4 tokens)
            first, then the best of --rollout-reps repetitions of each.
  train     fp32 weights, bf16 autocast, fused AdamW (lr 1e-6), loss = mean token
            log-prob of the batch from log_softmax of the fp32-cast logits, B x T random tokens;
            one warm-up step, then the median of --train-steps steps. TFLOP/s = 6 * N * tokens/s.
  logprob   the bf16 model's no_grad forward, then log_softmax of the fp32-cast logits gathered at the
            T - 1 next tokens (what an eager old-log-prob pass computes); median of --logprob-iters
            after a warm-up. TFLOP/s = 2 * N * tokens/s.
Peak memory: torch.cuda.max_memory_allocated since a reset right before the measurement (after the
model is built); on the CPU the process's peak RSS (ru_maxrss, never reset).

When torch or transformers cannot be imported it prints {"kind": "peer_unavailable", "reason": ...}
and exits 3; nothing is measured then.
"""
import argparse
import json
import resource
import sys
import time


def emit(**kw):
    print(json.dumps(kw), flush=True)


def shape(name):
    """The Qwen2.5 shapes of tests/bench/bench_gpu.cpp (qwen_shape)."""
    common = dict(vocab_size=151936, tie_word_embeddings=True, rope_theta=1e6, rms_norm_eps=1e-6,
                  max_position_embeddings=4096)
    if name == "0.5b":
        return dict(common, hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                    intermediate_size=4864)
    if name == "1.5b":
        return dict(common, hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                    intermediate_size=8960)
    if name == "tiny":
        return dict(common, vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, intermediate_size=128)
    raise SystemExit(f"bench_gpu_peers.py: unknown --model {name} (0.5b, 1.5b, tiny)")


class Peers:
    """The three measurements on one device; each emits one JSON line per figure."""

    def __init__(self, a, torch, Qwen2Config, Qwen2ForCausalLM):
        self.a, self.torch, self.cls = a, torch, Qwen2ForCausalLM
        self.dev = torch.device(a.device)
        self.cuda = self.dev.type == "cuda"
        self.cfg = Qwen2Config(**shape(a.model), attn_implementation="sdpa")
        self.peak_kind = "cuda_max_allocated" if self.cuda else "peak_rss_process"
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(3, self.cfg.vocab_size, (a.train_batch, a.train_seq), generator=g).to(self.dev)

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def timed(self, f):
        self.sync()
        t = time.perf_counter()
        out = f()
        self.sync()
        return time.perf_counter() - t, out

    def reset_peak(self):
        if self.cuda:
            self.torch.cuda.reset_peak_memory_stats()

    def peak_gib(self):
        if self.cuda:
            return round(self.torch.cuda.max_memory_allocated() / 2**30, 3)
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)  # kB on Linux

    def build(self, dtype):
        self.torch.manual_seed(0)
        return self.cls(self.cfg).to(self.dev, dtype)

    def free(self):
        if self.cuda:
            self.torch.cuda.empty_cache()

    def generate(self):
        torch, a = self.torch, self.a
        m = self.build(torch.bfloat16).eval()
        n = sum(p.numel() for p in m.parameters())
        for b in (int(x) for x in a.batches.split(",")):
            g = torch.Generator().manual_seed(100 + b)
            ids = torch.randint(3, self.cfg.vocab_size, (b, a.prompt), generator=g).to(self.dev)
            mask = torch.ones_like(ids)

            def gen(new, prompt=a.prompt):
                return m.generate(input_ids=ids[:, :prompt], attention_mask=mask[:, :prompt], max_new_tokens=new,
                                  min_new_tokens=new, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                  pad_token_id=0, eos_token_id=None)

            print(f"bench_gpu_peers.py: HF generate batch {b}", file=sys.stderr, flush=True)
            gen(4)  # warm-up
            self.reset_peak()
            t_one = t_full = float("inf")
            for _ in range(a.rollout_reps):  # best of the repetitions, as rlpt's side
                t_one = min(t_one, self.timed(lambda: gen(1))[0])
                t, out = self.timed(lambda: gen(a.new))
                t_full = min(t_full, t)
                assert out.shape == (b, a.prompt + a.new), out.shape
            emit(kind="peer_generate", batch=b, prompt=a.prompt, new=a.new, params=n, wall_s=round(t_full, 4),
                 prefill_s=round(t_one, 4), tokens_per_s=round(b * a.new / t_full, 1),
                 step_ms=round(1e3 * (t_full - t_one) / (a.new - 1), 4), peak_gib=self.peak_gib(),
                 peak_kind=self.peak_kind)

    def logprob(self):
        torch, a, ids = self.torch, self.a, self.ids
        m = self.build(torch.bfloat16).eval()
        n = sum(p.numel() for p in m.parameters())

        def logprob():
            with torch.no_grad():
                logits = m(input_ids=ids).logits
                return torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)

        print("bench_gpu_peers.py: eager no_grad forward", file=sys.stderr, flush=True)
        logprob()
        self.reset_peak()
        times = [self.timed(logprob) for _ in range(a.logprob_iters)]
        assert all(bool(torch.isfinite(lp).all()) for _, lp in times)
        s = sorted(t for t, _ in times)[len(times) // 2]
        b, T = ids.shape
        emit(kind="peer_logprob", batch=b, seq=T, iters=a.logprob_iters, params=n, pass_s=round(s, 4),
             tokens_per_s=round(b * T / s, 1), tflops=round(2 * n * b * T / s / 1e12, 3), peak_gib=self.peak_gib(),
             peak_kind=self.peak_kind)

    def train(self):
        torch, a, ids = self.torch, self.a, self.ids
        m = self.build(torch.float32).train()
        n = sum(p.numel() for p in m.parameters())
        self.reset_peak()
        opt = torch.optim.AdamW(m.parameters(), lr=1e-6, fused=True)

        def step():
            with torch.autocast(self.dev.type, dtype=torch.bfloat16):
                logits = m(input_ids=ids).logits
            lp = torch.log_softmax(logits.float(), -1).gather(-1, ids.unsqueeze(-1)).mean()
            (-lp).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return lp

        print("bench_gpu_peers.py: eager training steps", file=sys.stderr, flush=True)
        times = [self.timed(step) for _ in range(a.train_steps + 1)][1:]  # step 0 warms up
        assert all(bool(torch.isfinite(lp)) for _, lp in times)
        s = sorted(t for t, _ in times)[len(times) // 2]
        b, T = ids.shape
        emit(kind="peer_train", batch=b, seq=T, steps=a.train_steps, params=n, step_s=round(s, 4),
             tokens_per_s=round(b * T / s, 1), tflops=round(6 * n * b * T / s / 1e12, 3), peak_gib=self.peak_gib(),
             peak_kind=self.peak_kind, fused_adamw=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--model", default="0.5b")
    ap.add_argument("--what", default="generate,logprob,train")
    ap.add_argument("--batches", default="64,256")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--train-seq", type=int, default=1024)
    ap.add_argument("--train-steps", type=int, default=3)
    ap.add_argument("--logprob-iters", type=int, default=3)
    ap.add_argument("--rollout-reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    a = ap.parse_args()
    try:
        import torch
        import transformers
        from transformers import Qwen2Config, Qwen2ForCausalLM
    except Exception as e:  # ImportError, or a broken install
        emit(kind="peer_unavailable", reason=f"{type(e).__name__}: {e}", python=sys.executable)
        sys.exit(3)
    if a.device == "cuda" and not torch.cuda.is_available():
        emit(kind="peer_unavailable", reason="torch sees no CUDA device", python=sys.executable)
        sys.exit(3)
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    peers = Peers(a, torch, Qwen2Config, Qwen2ForCausalLM)
    emit(kind="peer_setup", torch=torch.__version__, transformers=transformers.__version__, python=sys.executable,
         device=torch.cuda.get_device_name(0) if peers.cuda else "cpu", threads=torch.get_num_threads())
    failed = False
    for what in a.what.split(","):
        try:  # a failure (out of memory) is a line of its own; the next measurement still runs
            getattr(peers, what)()
        except Exception as e:
            emit(kind="peer_error", what=what, reason=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            failed = True
        peers.free()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
