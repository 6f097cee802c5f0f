"""Writes a Llama-architecture Hugging Face checkpoint (config.json + model.safetensors, bf16,
as `fathom make-model llama DIR --preset tinyllama-1.1b --dtype bf16` writes it) as a bf16 GGUF
file for llama.cpp, with llama.cpp's own gguf-py (the peer's writer, not a copy of it).

The weights are the same numbers fathom reads, so the two engines run the same model:
- q_proj / k_proj rows are permuted from Hugging Face's rotate-half RoPE layout to GGML's
  interleaved one (per head: rows [0, d/2) and [d/2, d) interleaved), as llama.cpp's own
  converter does for LlamaForCausalLM;
- the vocabulary is synthetic (the checkpoint has none: tokens <unk> <s> </s>, the 256 byte
  tokens, then filler pieces up to vocab_size); the benchmark feeds random token ids, so
  only its size matters.

usage: python3 gguf_from_hf.py HF_DIR OUT.gguf GGUF_PY_DIR
"""
import json
import os
import struct
import sys

import numpy as np


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def rope_permute(w, n_head):
    """[n_head * d, K] rotate-half rows -> interleaved rows (GGML's LLaMA RoPE)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    hf_dir, out_path, gguf_py = sys.argv[1:]
    sys.path.insert(0, gguf_py)
    import gguf  # llama.cpp's writer, from the peer's source tree

    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    if cfg.get("model_type") != "llama":
        sys.exit(f"{hf_dir}/config.json: model_type {cfg.get('model_type')!r}, expected 'llama'")
    st_path = os.path.join(hf_dir, "model.safetensors")
    header, base = read_header(st_path)
    data = np.memmap(st_path, dtype=np.uint8, mode="r")
    n_head, n_kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hidden, n_layer, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]

    w = gguf.GGUFWriter(out_path, "llama")
    w.add_name("fathom-random-" + os.path.basename(os.path.normpath(hf_dir)))
    w.add_context_length(cfg.get("max_position_embeddings", 2048))
    w.add_embedding_length(hidden)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_rope_dimension_count(hidden // n_head)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_vocab_size(vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    while len(tokens) < vocab:
        tokens.append(f"\u2581t{len(tokens)}")
        types.append(gguf.TokenType.NORMAL)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens[:vocab])
    w.add_token_scores([-float(i) for i in range(vocab)])
    w.add_token_types(types[:vocab])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for i in range(n_layer):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    missing = [n for n in names if n not in header and n != "lm_head.weight"]
    if missing:
        sys.exit(f"{st_path}: tensors missing: {missing[:5]}")
    extra = [n for n in header if n != "__metadata__" and n not in names]
    if extra:
        sys.exit(f"{st_path}: tensors this converter does not map: {extra[:5]}")
    for hf_name, info in sorted(header.items()):
        if hf_name == "__metadata__":
            continue
        if info["dtype"] != "BF16":
            sys.exit(f"{st_path}: tensor {hf_name}: dtype {info['dtype']}, expected BF16")
        b, e = info["data_offsets"]
        t = np.asarray(data[base + b:base + e]).view(np.uint16).reshape(info["shape"])
        if hf_name.endswith("q_proj.weight"):
            t = rope_permute(t, n_head)
        elif hf_name.endswith("k_proj.weight"):
            t = rope_permute(t, n_kv)
        norm = hf_name.endswith("norm.weight")
        # GGUF stores norms as f32 (llama.cpp's converter does); matrices stay bf16 bytes.
        if norm:
            f32 = (t.astype(np.uint32) << 16).view(np.float32)
            w.add_tensor(names[hf_name], f32)
        else:
            raw = np.ascontiguousarray(t).view(np.uint8)
            # bytes [rows, 2K]: gguf-py derives the logical shape [rows, K] from the type size.
            w.add_tensor(names[hf_name], raw, raw_dtype=gguf.GGMLQuantizationType.BF16)
    if "lm_head.weight" not in header:
        sys.exit(f"{st_path}: no lm_head.weight (tied embeddings are not mapped here)")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
