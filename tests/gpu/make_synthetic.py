#!/usr/bin/env python3
"""Writes a Whisper model with random weights and a real model's shapes, in
Hugging Face form (config.json, model.safetensors in float16, the tokenizer
copied from a real model), for timing: speed does not depend on the weight
values, and no hub can be reached from the GPU machine. Its transcripts are
meaningless; benchmarks that use it say "synthetic".

usage: make_synthetic.py OUT_DIR --tokenizer-from models/tiny.en [--shape large-v3-turbo]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ref"))
from refmodels import write_safetensors  # noqa: E402

SHAPES = {  # d_model, enc layers, enc heads, dec layers, dec heads, ffn, mels, vocab
    "tiny": (384, 4, 6, 4, 6, 1536, 80, 51865),
    "base": (512, 6, 8, 6, 8, 2048, 80, 51865),
    "large-v3": (1280, 32, 20, 32, 20, 5120, 128, 51866),
    "large-v3-turbo": (1280, 32, 20, 4, 20, 5120, 128, 51866),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokenizer-from", required=True, help="a model directory with tokenizer.json")
    ap.add_argument("--shape", default="large-v3-turbo", choices=sorted(SHAPES))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    d, n_enc, h_enc, n_dec, h_dec, ff, mels, vocab = SHAPES[a.shape]
    rng = np.random.default_rng(a.seed)

    def mat(rows, cols, std=0.02):
        return (rng.standard_normal((rows, cols), dtype=np.float32) * std).astype(np.float16)

    def vec(n, value=None):
        if value is not None:
            return np.full(n, value, dtype=np.float16)
        return (rng.standard_normal(n, dtype=np.float32) * 0.01).astype(np.float16)

    t = {}
    t["model.encoder.conv1.weight"] = (rng.standard_normal((d, mels, 3), dtype=np.float32) * 0.05).astype(np.float16)
    t["model.encoder.conv1.bias"] = vec(d)
    t["model.encoder.conv2.weight"] = (rng.standard_normal((d, d, 3), dtype=np.float32) * 0.02).astype(np.float16)
    t["model.encoder.conv2.bias"] = vec(d)
    t["model.encoder.embed_positions.weight"] = mat(1500, d, 0.1)

    def ln(name):
        t[name + ".weight"], t[name + ".bias"] = vec(d, 1.0), vec(d, 0.0)

    def lin(name, rows, cols, bias=True):
        t[name + ".weight"] = mat(rows, cols)
        if bias:
            t[name + ".bias"] = vec(rows)

    def attn(p):
        lin(p + ".q_proj", d, d)
        lin(p + ".k_proj", d, d, bias=False)
        lin(p + ".v_proj", d, d)
        lin(p + ".out_proj", d, d)

    for i in range(n_enc):
        p = f"model.encoder.layers.{i}"
        attn(p + ".self_attn")
        ln(p + ".self_attn_layer_norm")
        lin(p + ".fc1", ff, d)
        lin(p + ".fc2", d, ff)
        ln(p + ".final_layer_norm")
    ln("model.encoder.layer_norm")
    t["model.decoder.embed_tokens.weight"] = mat(vocab, d)
    t["model.decoder.embed_positions.weight"] = mat(448, d, 0.1)
    for i in range(n_dec):
        p = f"model.decoder.layers.{i}"
        attn(p + ".self_attn")
        ln(p + ".self_attn_layer_norm")
        attn(p + ".encoder_attn")
        ln(p + ".encoder_attn_layer_norm")
        lin(p + ".fc1", ff, d)
        lin(p + ".fc2", d, ff)
        ln(p + ".final_layer_norm")
    ln("model.decoder.layer_norm")

    os.makedirs(a.out, exist_ok=True)
    write_safetensors(os.path.join(a.out, "model.safetensors"), t, metadata={"format": "pt"})
    cfg = {
        "_name_or_path": f"synthetic {a.shape} (random weights) by sotto's make_synthetic.py",
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
        "d_model": d, "encoder_layers": n_enc, "encoder_attention_heads": h_enc, "encoder_ffn_dim": ff,
        "decoder_layers": n_dec, "decoder_attention_heads": h_dec, "decoder_ffn_dim": ff,
        "num_mel_bins": mels, "vocab_size": vocab, "max_source_positions": 1500,
        "max_target_positions": 448, "activation_function": "gelu", "scale_embedding": False,
        "tie_word_embeddings": True, "torch_dtype": "float16",
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    shutil.copyfile(os.path.join(a.tokenizer_from, "tokenizer.json"), os.path.join(a.out, "tokenizer.json"))
    n = sum(x.size for x in t.values())
    print(f"{a.out}: synthetic {a.shape}, {n / 1e6:.0f}M parameters (float16)")


if __name__ == "__main__":
    main()
