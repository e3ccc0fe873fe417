#!/usr/bin/python3
"""Write a Hugging Face Llama checkpoint (config.json + model.safetensors, fp32) as a GGUF file for
llama.cpp: the llama.cpp peer of scripts/bench_decode.sh runs on the very weights rlpt and PyTorch
eager load.

Uses gguf-py (the pure-Python GGUF writer shipped in llama.cpp's tree; pass its directory with
--gguf-py, scripts/fetch_llama_cpp.sh puts it at $LLAMA_CPP_DIR/src/gguf-py), numpy and
reference_forward.py's safetensors reader (python3-torch); no transformers. Written here rather
than with llama.cpp's convert_hf_to_gguf.py, which needs transformers.

What it writes:
- architecture `llama` metadata from config.json (layers, hidden, FFN, heads, KV heads, RMS eps,
  rope theta, context length);
- every tensor under llama.cpp's names (token_embd, blk.N.attn_q/k/v/output, ffn_gate/up/down,
  attn_norm/ffn_norm, output_norm, output), 2-D weights in --dtype (f32 or f16), norms in f32;
- Q and K rows permuted from Hugging Face's rotary layout (rotate-half: dims i and i + d/2 of a
  head form a pair) to llama.cpp's `llama` layout (adjacent dims 2i, 2i+1 form a pair), per head,
  so the GGUF model computes the same function as the checkpoint, not only the same shapes;
- a synthetic SentencePiece-style vocabulary of vocab_size tokens (<unk>, <s>, </s>, the 256 byte
  tokens, then placeholder pieces): enough for llama.cpp to load the model and for benchmarks
  that feed token ids; text through it is meaningless.

usage: hf_to_gguf.py MODEL_DIR OUT.gguf --gguf-py DIR [--dtype f32|f16]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_forward import read_checkpoint  # noqa: E402  (python3-torch's safetensors reader)


def rotate_half_to_interleaved(w, n_heads):
    """Rows of a [n_heads * d, in] Q/K projection: within each head, output dim j of the pair
    (j, j + d/2) moves to 2j and its partner to 2j + 1."""
    rows, cols = w.shape
    d = rows // n_heads
    return w.reshape(n_heads, 2, d // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    ap.add_argument("--dtype", default="f32", choices=["f32", "f16"])
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import gguf  # noqa: E402

    with open(os.path.join(a.model_dir, "config.json")) as f:
        cfg = json.load(f)
    arch = cfg.get("model_type", "llama")
    if arch != "llama":
        sys.exit(f"hf_to_gguf: {a.model_dir}/config.json: model_type {arch!r}; only llama is supported")
    if cfg.get("rope_scaling"):
        sys.exit(f"hf_to_gguf: {a.model_dir}/config.json: rope_scaling is not supported")
    n_layers, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    n_heads = cfg["num_attention_heads"]
    n_kv = cfg.get("num_key_value_heads", n_heads)
    head_dim = cfg.get("head_dim") or hidden // n_heads
    if head_dim * n_heads != hidden:
        sys.exit(f"hf_to_gguf: head_dim {head_dim} x {n_heads} heads != hidden {hidden}: not a plain llama layout")
    vocab = cfg["vocab_size"]
    w = {k: v.float().numpy() for k, v in read_checkpoint(a.model_dir).items()}
    if "lm_head.weight" not in w:
        w["lm_head.weight"] = w["model.embed_tokens.weight"]

    wt = np.float32 if a.dtype == "f32" else np.float16
    writer = gguf.GGUFWriter(a.out, "llama")
    writer.add_name(os.path.basename(os.path.normpath(a.model_dir)))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if a.dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    writer.add_context_length(cfg.get("max_position_embeddings", 2048))
    writer.add_embedding_length(hidden)
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    writer.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(vocab)

    # Synthetic SentencePiece vocabulary: ids are what the benchmark feeds.
    specials = [("<unk>", gguf.TokenType.UNKNOWN), ("<s>", gguf.TokenType.CONTROL), ("</s>", gguf.TokenType.CONTROL)]
    pieces = specials + [(f"<0x{b:02X}>", gguf.TokenType.BYTE) for b in range(256)]
    if vocab < len(pieces):
        sys.exit(f"hf_to_gguf: vocab_size {vocab} < {len(pieces)} (special + byte tokens)")
    pieces += [(f"\u2581t{i}", gguf.TokenType.NORMAL) for i in range(len(pieces), vocab)]
    writer.add_tokenizer_model("llama")
    writer.add_token_list([p for p, _ in pieces])
    writer.add_token_scores([0.0 if t != gguf.TokenType.NORMAL else -float(i) for i, (_, t) in enumerate(pieces)])
    writer.add_token_types([int(t) for _, t in pieces])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def put(name, arr, matrix=True):
        writer.add_tensor(name, np.ascontiguousarray(arr.astype(wt if matrix else np.float32)))

    put("token_embd.weight", w["model.embed_tokens.weight"])
    for i in range(n_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        for key in ("q_proj.bias", "k_proj.bias", "v_proj.bias", "o_proj.bias"):
            if p + "self_attn." + key in w:
                sys.exit(f"hf_to_gguf: {p}self_attn.{key}: attention biases are not supported (llama arch)")
        put(b + "attn_norm.weight", w[p + "input_layernorm.weight"], matrix=False)
        put(b + "attn_q.weight", rotate_half_to_interleaved(w[p + "self_attn.q_proj.weight"], n_heads))
        put(b + "attn_k.weight", rotate_half_to_interleaved(w[p + "self_attn.k_proj.weight"], n_kv))
        put(b + "attn_v.weight", w[p + "self_attn.v_proj.weight"])
        put(b + "attn_output.weight", w[p + "self_attn.o_proj.weight"])
        put(b + "ffn_norm.weight", w[p + "post_attention_layernorm.weight"], matrix=False)
        put(b + "ffn_gate.weight", w[p + "mlp.gate_proj.weight"])
        put(b + "ffn_up.weight", w[p + "mlp.up_proj.weight"])
        put(b + "ffn_down.weight", w[p + "mlp.down_proj.weight"])
    put("output_norm.weight", w["model.norm.weight"], matrix=False)
    put("output.weight", w["lm_head.weight"])

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
