#!/usr/bin/env python3
"""The peer of rlpt_bench_moe's block case: transformers' Qwen3MoeSparseMoeBlock in PyTorch eager
(experts_implementation "eager": a loop over the experts that got tokens), float32, forward +
backward of sum(output * fixed random) over [tokens, hidden] rows, median of --iters after a warm-up.
Prints one line and one JSON line, the shape of rlpt_bench_moe's.

usage: .venv/bin/python scripts/bench_moe_torch.py [--tokens 2048] [--hidden 512] [--experts 8]
       [--top-k 2] [--moe-inter 384] [--iters 5] [--threads N]
needs: transformers (pip) in the python that runs it
"""
import argparse
import json
import statistics
import time

import torch
import transformers
from transformers.models.qwen3_moe import modeling_qwen3_moe


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=2048)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--moe-inter", type=int, default=384)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(hidden_size=a.hidden, moe_intermediate_size=a.moe_inter,
                                      num_experts=a.experts, num_experts_per_tok=a.top_k, norm_topk_prob=True)
    cfg._experts_implementation = "eager"
    block = modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(cfg).float()
    with torch.no_grad():
        for prm in block.parameters():
            prm.normal_(0.0, 0.02)
    x = torch.randn(1, a.tokens, a.hidden, requires_grad=True)
    probe = torch.randn(1, a.tokens, a.hidden)

    def step():
        block.zero_grad(set_to_none=True)
        x.grad = None
        (block(x) * probe).sum().backward()

    step()
    times = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1000.0)
    ms = statistics.median(times)
    print(f"transformers moe block fwd+bwd tokens {a.tokens} hidden {a.hidden} experts {a.experts} "
          f"top-{a.top_k} moe_inter {a.moe_inter}: {ms:.1f} ms")
    print(json.dumps({"bench": "moe", "case": "block_fwd_bwd", "engine": "transformers_eager",
                      "transformers": transformers.__version__, "torch": torch.__version__, "tokens": a.tokens,
                      "hidden": a.hidden, "experts": a.experts, "top_k": a.top_k, "moe_inter": a.moe_inter,
                      "ms": round(ms, 3), "threads": a.threads}))


if __name__ == "__main__":
    main()
