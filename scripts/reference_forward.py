#!/usr/bin/python3
"""Independent reference forward pass for Llama / Qwen2 / Qwen3 (dense) checkpoints, in plain PyTorch.

Written from the published architecture (Hugging Face's eager Llama/Qwen2/Qwen3 attention; Qwen3's
per-head RMSNorm of q and k before the rotary embedding when the checkpoint has q_norm/k_norm), sharing
no code with rlpt's C++ model: its own safetensors parser, float64 arithmetic throughout,
K/V heads repeated explicitly for grouped-query attention, an additive causal+padding mask.
Used by tests/unit/test_model_reference.cpp; run it with Debian's /usr/bin/python3
(python3-torch).

usage: reference_forward.py MODEL_DIR INPUT_JSON OUTPUT_BIN
  INPUT_JSON   {"input_ids": [[...]], "attention_mask": [[...]], "position_ids": [[...]]}, all [B, T]
  OUTPUT_BIN   little-endian float32: logits [B, T, V] for *ForCausalLM,
               values [B, T] for *ForTokenClassification / *ForSequenceClassification (num_labels 1)
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=DTYPES[entry["dtype"]]) if end > begin else \
            torch.empty(0, dtype=DTYPES[entry["dtype"]])
        out[name] = t.reshape(entry["shape"])
    return out


def read_checkpoint(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors(os.path.join(model_dir, shard)))
    return tensors


def inverse_frequencies(cfg, head_dim):
    theta = cfg.get("rope_theta", 10000.0)
    inv = [1.0 / theta ** (2 * i / head_dim) for i in range(head_dim // 2)]
    rs = cfg.get("rope_scaling")
    if rs:
        kind = rs.get("rope_type", rs.get("type"))
        assert kind == "llama3", kind
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        scaled = []
        for f in inv:
            wavelen = 2 * math.pi / f
            if wavelen < old / hi:  # high frequency: unchanged
                scaled.append(f)
            elif wavelen > old / lo:  # low frequency: divided by factor
                scaled.append(f / factor)
            else:  # in between: interpolate
                smooth = (old / wavelen - lo) / (hi - lo)
                scaled.append((1 - smooth) * f / factor + smooth * f)
        inv = scaled
    return torch.tensor(inv, dtype=torch.float64)


def rms_norm(x, w, eps):
    return w * (x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps))


def linear(w, x, b=None):
    y = x @ w.t()
    return y + b if b is not None else y


def rope(x, pos, inv_freq):
    # x [B, heads, T, d]; pairs (i, i + d/2) rotate by angle pos * inv_freq[i].
    ang = pos[:, None, :, None].double() * inv_freq[None, None, None, :]
    c, s = torch.cos(ang), torch.sin(ang)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def forward(cfg, w, ids, mask, pos):
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_heads)
    hidden = cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // n_heads
    eps = cfg.get("rms_norm_eps", 1e-6)
    inv_freq = inverse_frequencies(cfg, head_dim)
    B, T = ids.shape

    # Key j is visible to query i when j <= i and j is a real token.
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    allowed = causal[None, :, :] & mask.bool()[:, None, :]
    bias = torch.full((B, 1, T, T), -1e300, dtype=torch.float64)
    bias[allowed[:, None, :, :]] = 0.0

    x = w["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        g = lambda name: w.get(p + name)
        h = rms_norm(x, g("input_layernorm.weight"), eps)
        q = linear(g("self_attn.q_proj.weight"), h, g("self_attn.q_proj.bias")).view(B, T, n_heads, head_dim).transpose(1, 2)
        k = linear(g("self_attn.k_proj.weight"), h, g("self_attn.k_proj.bias")).view(B, T, n_kv, head_dim).transpose(1, 2)
        v = linear(g("self_attn.v_proj.weight"), h, g("self_attn.v_proj.bias")).view(B, T, n_kv, head_dim).transpose(1, 2)
        if g("self_attn.q_norm.weight") is not None:  # Qwen3: over head_dim, one weight for every head
            q = rms_norm(q, g("self_attn.q_norm.weight"), eps)
            k = rms_norm(k, g("self_attn.k_norm.weight"), eps)
        q, k = rope(q, pos, inv_freq), rope(k, pos, inv_freq)
        k = k.repeat_interleave(n_heads // n_kv, dim=1)
        v = v.repeat_interleave(n_heads // n_kv, dim=1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(head_dim) + bias, dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, T, n_heads * head_dim)
        x = x + linear(g("self_attn.o_proj.weight"), o, g("self_attn.o_proj.bias"))
        h = rms_norm(x, g("post_attention_layernorm.weight"), eps)
        gate = linear(g("mlp.gate_proj.weight"), h, g("mlp.gate_proj.bias"))
        up = linear(g("mlp.up_proj.weight"), h, g("mlp.up_proj.bias"))
        x = x + linear(g("mlp.down_proj.weight"), gate * torch.sigmoid(gate) * up, g("mlp.down_proj.bias"))
    return rms_norm(x, w["model.norm.weight"], eps)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    model_dir, input_path, output_path = sys.argv[1:]
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = cfg["architectures"][0]
    if cfg.get("hidden_act", "silu") != "silu":
        sys.exit(f"unsupported hidden_act {cfg['hidden_act']}")
    weights = {k: v.double() for k, v in read_checkpoint(model_dir).items()}
    with open(input_path) as f:
        inp = json.load(f)
    ids = torch.tensor(inp["input_ids"], dtype=torch.int64)
    mask = torch.tensor(inp["attention_mask"], dtype=torch.int64)
    pos = torch.tensor(inp["position_ids"], dtype=torch.int64)
    with torch.no_grad():
        hidden = forward(cfg, weights, ids, mask, pos)
        if arch.endswith("ForCausalLM"):
            head = weights.get("lm_head.weight")
            if cfg.get("tie_word_embeddings", False) or head is None:
                head = weights["model.embed_tokens.weight"]
            out = hidden @ head.t()
        elif arch.endswith("ForTokenClassification") or arch.endswith("ForSequenceClassification"):
            out = linear(weights["score.weight"], hidden, weights.get("score.bias"))[..., 0]
        else:
            sys.exit(f"unsupported architecture {arch}")
    with open(output_path, "wb") as f:
        f.write(out.float().contiguous().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
