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
    ref = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64,
                                                            attn_implementation="eager")
    ref.eval()
    ids = torch.tensor([PROMPT])
    with torch.no_grad():
        logits = ref(input_ids=ids).logits[0]
        gen = ref.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                           do_sample=False, output_scores=True, return_dict_in_generate=True, eos_token_id=None,
                           pad_token_id=0, min_new_tokens=NEW_TOKENS)
    tokens = gen.sequences[0, len(PROMPT):].tolist()
    logprobs = [torch.log_softmax(s[0].double(), -1)[t].item() for s, t in zip(gen.scores, tokens)]
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__, "prompt": PROMPT,
                   "logits": logits.tolist(), "greedy_tokens": tokens, "greedy_logprobs": logprobs}, f)
        f.write("\n")
    print(f"{out}: {len(tokens)} greedy tokens {tokens}")
    save_grads(out, PROMPT + tokens)


def save_grads(out, sequence):
    """One training step's gradients in float64: loss = mean over positions t of
    -log softmax(logits[t])[sequence[t + 1]] (every token after the first is a target)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64, attn_implementation="eager")
    model.train()  # no dropout in Qwen3; train() as a trainer would
    ids = torch.tensor([sequence])
    logits = model(input_ids=ids).logits[0]
    loss = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
    loss.backward()
    grads = {name: p.grad.detach().contiguous() for name, p in model.named_parameters()}
    safetensors.torch.save_file(grads, os.path.join(out, "grads.safetensors"))
    with open(os.path.join(out, "grads.json"), "w") as f:
        json.dump({"sequence": sequence, "loss": loss.item(), "parameters": sorted(grads)}, f)
        f.write("\n")
    print(f"{out}: loss {loss.item():.6f}, gradients of {len(grads)} parameters")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                                "hf")
    make("qwen3_tiny", qwen3_config(), 34, root)


if __name__ == "__main__":
    main()
