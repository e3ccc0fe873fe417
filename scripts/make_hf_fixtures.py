#!/usr/bin/env python3
"""Makes the tiny Hugging Face checkpoints rlpt's parity tests read, with transformers itself.

Each fixture is a folder under tests/fixtures/hf/: config.json + model.safetensors (float32), as
`save_pretrained` writes them, and reference.json: transformers' float64 forward of a fixed
prompt (its logits) and transformers' greedy decode of 32 tokens from that prompt in float64,
with each chosen token's log-probability; and grads.safetensors + grads.json: transformers'
float64 autograd of one training loss, the mean next-token cross-entropy of the prompt followed by
its greedy tokens, w.r.t. every parameter (HF names, float64; a tied LM head's gradient is in
model.embed_tokens.weight), and the loss itself. Deterministic (fixed seeds); rerun to regenerate.

usage: .venv/bin/python scripts/make_hf_fixtures.py [OUT_DIR]   (default tests/fixtures/hf)
needs: pip install transformers safetensors (into the .venv whose torch rlpt builds against)
"""
import json
import os
import sys

import safetensors.torch
import torch
import transformers

PROMPT = [3, 17, 42, 5, 99, 64, 8, 120, 33, 71, 2, 90]
NEW_TOKENS = 32


def qwen3_config():
    # head_dim 32 != hidden 64 / 4 heads; GQA 4:2; tied embeddings (the small Qwen3 sizes).
    return transformers.Qwen3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, max_position_embeddings=256, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)


def qwen3_moe_config():
    # 8 experts, top 2 renormalised (Qwen3-30B-A3B's norm_topk_prob), layer 1 dense (mlp_only_layers),
    # head_dim 32 != hidden 64 / 4 heads, GQA 4:2, tied embeddings.
    return transformers.Qwen3MoeConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1], max_position_embeddings=256,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, attention_bias=False,
        use_sliding_window=False, router_aux_loss_coef=0.001, bos_token_id=None, eos_token_id=None,
        pad_token_id=None)


def router_margin(model, ids):
    """The smallest gap between the k-th and (k+1)-th router probability over every routed row: a
    fixture whose routes float32 could flip (a gap near rounding) is refused."""
    gaps = []
    k = model.config.num_experts_per_tok

    def hook(_module, _inputs, output):
        probs = torch.softmax(output[0].double(), -1)
        top = torch.topk(probs, k + 1, -1).values
        gaps.append((top[:, k - 1] - top[:, k]).min().item())

    handles = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.gate")]
    with torch.no_grad():
        model(input_ids=ids)
    for h in handles:
        h.remove()
    return min(gaps)


def routes(model, ids):
    """Each MoE layer's chosen experts per position of `ids` (transformers' top-k, float64)."""
    chosen = []

    def hook(_module, _inputs, output):
        chosen.append(output[2].tolist())

    handles = [m.register_forward_hook(hook) for n, m in model.named_modules() if n.endswith("mlp.gate")]
    with torch.no_grad():
        model(input_ids=ids)
    for h in handles:
        h.remove()
    return chosen


def randomise(model, seed):
    """Weights large enough that every part shows in the logits: norms around 1, not exactly 1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=g, dtype=torch.float64) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.2)


def make(name, config, seed, out_root):
    out = os.path.join(out_root, name)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.config._attn_implementation = "eager"
    randomise(model, seed)
    model.save_pretrained(out, safe_serialization=True)
    # The reference: the saved float32 weights, computed in float64.
    # Eager attention and experts (a loop over experts, like the paper): the grouped-GEMM kernels
    # have no float64.
    extra = {"experts_implementation": "eager"} if getattr(config, "num_experts", 0) else {}
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64,
                                                            attn_implementation="eager", **extra)
    ref.eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = ref(input_ids=ids).logits[0]
        gen = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                           do_sample=False, output_scores=True, return_dict_in_generate=True, eos_token_id=None,
                           pad_token_id=0, min_new_tokens=NEW_TOKENS)
    tokens = gen.sequences[0, len(PROMPT):].tolist()
    logprobs = [torch.log_softmax(s[0].double(), -1)[t].item() for s, t in zip(gen.scores, tokens)]
    record = {"transformers": transformers.__version__, "torch": torch.__version__, "prompt": PROMPT,
              "logits": logits.tolist(), "greedy_tokens": tokens, "greedy_logprobs": logprobs}
    if getattr(config, "num_experts", 0):
        full = gen.sequences[:, :-1]  # every position whose next token was scored
        margin = router_margin(ref, full)
        if margin < 1e-3:
            raise SystemExit(f"{name}: router margin {margin:.2e} is too small for float32 parity; change the seed")
        record["router_margin"] = margin
        # Each MoE layer's experts for prompt + greedy tokens, and the load-balancing loss of the prompt.
        record["routes"] = routes(ref, full)
        with torch.no_grad():
            record["aux_loss"] = ref(input_ids=ids, output_router_logits=True).aux_loss.item()
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(record, f)
        f.write("\n")
    print(f"{out}: {len(tokens)} greedy tokens {tokens}")
    save_grads(out, PROMPT + tokens, extra)


def per_expert(grads):
    """transformers 5 keeps a layer's experts as fused 3-D parameters (mlp.experts.gate_up_proj
    [E, 2I, H], gate rows first; mlp.experts.down_proj [E, H, I]); checkpoints, and rlpt, name them
    per expert (mlp.experts.{e}.{gate,up,down}_proj.weight)."""
    out = {}
    for name, g in grads.items():
        if name.endswith("mlp.experts.gate_up_proj"):
            prefix, inter = name[:-len("gate_up_proj")], g.shape[1] // 2
            for e in range(g.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = g[e, :inter].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = g[e, inter:].contiguous()
        elif name.endswith("mlp.experts.down_proj"):
            for e in range(g.shape[0]):
                out[f"{name[:-len('down_proj')]}{e}.down_proj.weight"] = g[e].contiguous()
        else:
            out[name] = g
    return out


def save_grads(out, sequence, extra):
    """One training step's gradients in float64: loss = mean over positions t of
    -log softmax(logits[t])[sequence[t + 1]] (every token after the first is a target)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager",
                                                              **extra)
    model.train()  # no dropout in Qwen3; train() as a trainer would
    ids = torch.tensor([sequence])
    logits = model(input_ids=ids).logits[0]
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
    loss.backward()
    grads = per_expert({name: p.grad.detach().contiguous() for name, p in model.named_parameters()})
    safetensors.torch.save_file(grads, os.path.join(out, "grads.safetensors"))
    with open(os.path.join(out, "grads.json"), "w") as f:
        json.dump({"sequence": sequence, "loss": loss.item(), "parameters": sorted(grads)}, f)
        f.write("\n")
    print(f"{out}: loss {loss.item():.6f}, gradients of {len(grads)} parameters")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                                "hf")
    make("qwen3_tiny", qwen3_config(), 34, root)
    make("qwen3_moe_tiny", qwen3_moe_config(), 35, root)


if __name__ == "__main__":
    main()
