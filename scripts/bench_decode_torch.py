#!/usr/bin/python3
"""Plain PyTorch eager decode of a Llama / Qwen2 checkpoint: the peer row of scripts/bench_decode.sh.

What Hugging Face's eager Llama does per step, without its Python framework around it: every
Linear through torch.nn.functional.linear on the checkpoint's weights, the K/V cache grown with
torch.cat, K/V heads repeated for grouped-query attention, softmax attention, the full-vocabulary
LM head and torch.multinomial sampling (temperature 1). Weights are read with
reference_forward.py's safetensors parser (no other dependency than python3-torch).

Decode rate = B * (N - 1) / (t(N new tokens) - t(1 new token)) with random prompts of 16 tokens,
the same definition as rlpt_bench_decode. Best of `--reps` each.

usage: bench_decode_torch.py MODEL_DIR --threads T --batches 1,16,64 --new-tokens N [--reps R] [--dtype float32]
prints one JSON line per batch: {"kind": "torch_eager", "threads", "batch", "tokens_per_s", ...}
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_forward import inverse_frequencies, read_checkpoint  # noqa: E402


class Model:
    def __init__(self, model_dir, dtype):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        self.w = {k: v.to(dtype).contiguous() for k, v in read_checkpoint(model_dir).items()}
        if "lm_head.weight" not in self.w:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg.get("num_key_value_heads", self.n_heads)
        self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // self.n_heads
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.layers = cfg["num_hidden_layers"]
        self.inv_freq = inverse_frequencies(cfg, self.head_dim).to(torch.float32)
        self.dtype = dtype

    def rms_norm(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    def rope(self, x, pos):  # x [B, heads, T, d], pos [B, T]
        ang = pos[:, None, :, None].float() * self.inv_freq[None, None, None, :]
        ang = torch.cat([ang, ang], dim=-1)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rot * sin

    def forward(self, ids, pos, cache):
        """ids [B, T] at positions pos [B, T]; cache: list of (k, v) per layer or None. Returns logits of the last position."""
        w, B, T = self.w, ids.shape[0], ids.shape[1]
        x = F.embedding(ids, w["model.embed_tokens.weight"])
        past = 0 if cache[0] is None else cache[0][0].shape[2]
        mask = None
        if T > 1:
            mask = torch.full((T, past + T), float("-inf"), dtype=x.dtype).triu(past + 1)
        for i in range(self.layers):
            p = f"model.layers.{i}."
            g = lambda name: w.get(p + name)  # noqa: E731
            h = self.rms_norm(x, g("input_layernorm.weight"))
            q = F.linear(h, g("self_attn.q_proj.weight"), g("self_attn.q_proj.bias"))
            k = F.linear(h, g("self_attn.k_proj.weight"), g("self_attn.k_proj.bias"))
            v = F.linear(h, g("self_attn.v_proj.weight"), g("self_attn.v_proj.bias"))
            q = self.rope(q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2), pos)
            k = self.rope(k.view(B, T, self.n_kv, self.head_dim).transpose(1, 2), pos)
            v = v.view(B, T, self.n_kv, self.head_dim).transpose(1, 2)
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], dim=2)
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            rep = self.n_heads // self.n_kv
            kr = k.repeat_interleave(rep, dim=1) if rep > 1 else k
            vr = v.repeat_interleave(rep, dim=1) if rep > 1 else v
            scores = q @ kr.transpose(-1, -2) / math.sqrt(self.head_dim)
            if mask is not None:
                scores = scores + mask
            o = (torch.softmax(scores.float(), dim=-1).to(q.dtype) @ vr).transpose(1, 2).reshape(B, T, -1)
            x = x + F.linear(o, g("self_attn.o_proj.weight"), g("self_attn.o_proj.bias"))
            h = self.rms_norm(x, g("post_attention_layernorm.weight"))
            gate = F.linear(h, g("mlp.gate_proj.weight"))
            up = F.linear(h, g("mlp.up_proj.weight"))
            x = x + F.linear(F.silu(gate) * up, g("mlp.down_proj.weight"))
        h = self.rms_norm(x[:, -1], w["model.norm.weight"])
        return F.linear(h, w["lm_head.weight"]).float()

    def generate(self, prompts, new_tokens, gen):
        B, P = prompts.shape
        cache = [None] * self.layers
        pos = torch.arange(P).expand(B, P)
        logits = self.forward(prompts, pos, cache)
        out = []
        for step in range(new_tokens):
            tok = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=gen)
            out.append(tok)
            if step + 1 == new_tokens:
                break
            logits = self.forward(tok, torch.full((B, 1), P + step, dtype=torch.int64), cache)
        return torch.cat(out, dim=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    m = Model(a.model_dir, torch.float32 if a.dtype == "float32" else torch.bfloat16)
    vocab = m.w["lm_head.weight"].shape[0]
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for b in (int(s) for s in a.batches.split(",")):
            prompts = torch.randint(0, vocab, (b, 16))
            m.generate(prompts, 2, gen)  # warm-up

            def best(n):
                t = 1e30
                for _ in range(a.reps):
                    t0 = time.perf_counter()
                    m.generate(prompts, n, gen)
                    t = min(t, time.perf_counter() - t0)
                return t

            t_full, t_one = best(a.new_tokens), best(1)
            rate = b * (a.new_tokens - 1) / (t_full - t_one)
            print(json.dumps({"kind": "torch_eager", "dtype": a.dtype, "threads": a.threads, "batch": b,
                              "new_tokens": a.new_tokens, "tokens_per_s": round(rate, 2),
                              "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
