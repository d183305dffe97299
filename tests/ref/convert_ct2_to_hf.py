"""Converts a CTranslate2 Whisper model directory (model.bin + config.json +
tokenizer.json) to a Hugging Face one: config.json, model.safetensors (written
by hand with numpy + json: no safetensors/torch dependency) and the
tokenizer, either tokenizer.json (copied) or vocab.json + merges.txt +
added_tokens.json (--tokenizer vocab).

Tensor names follow transformers' WhisperForConditionalGeneration
("model.encoder.layers.0.self_attn.q_proj.weight", ...). CTranslate2 fuses
self-attention Q/K/V and cross-attention K/V; they are split here, and the
K biases, which HF's Whisper does not have (CTranslate2 stores zeros), are
dropped after checking that they are zero. The output projection is tied to
the token embedding and not written (as in the hub checkpoints).

usage: convert_ct2_to_hf.py SRC_CT2_DIR DST_DIR [--dtype float32|float16]
       [--tokenizer json|vocab]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from refmodels import read_ct2, write_safetensors  # noqa: E402


def _count_layers(v, side):
    n = 0
    while f"{side}/layer_{n}/ffn/linear_0/weight" in v:
        n += 1
    return n


def _heads(v, side, width):
    a = v.get(f"{side}/num_heads")
    return int(a) if a is not None else width // 64


def convert_tensors(ct2):
    """CT2 variables -> {HF name: float32 array} in HF's usual order."""
    v = ct2.variables
    f = lambda name: np.asarray(v[name], dtype=np.float32)  # noqa: E731
    out = {}
    if "decoder/projection/weight" in v and "decoder/projection/weight" not in ct2.aliases:
        emb, proj = f("decoder/embeddings/weight"), f("decoder/projection/weight")
        if not np.array_equal(emb, proj):
            raise ValueError("the output projection is not tied to the embedding")

    out["model.encoder.conv1.weight"] = f("encoder/conv1/weight")
    out["model.encoder.conv1.bias"] = f("encoder/conv1/bias")
    out["model.encoder.conv2.weight"] = f("encoder/conv2/weight")
    out["model.encoder.conv2.bias"] = f("encoder/conv2/bias")
    out["model.encoder.embed_positions.weight"] = f("encoder/position_encodings/encodings")

    def ln(hf, ct):
        out[hf + ".weight"] = f(ct + "/gamma")
        out[hf + ".bias"] = f(ct + "/beta")

    def lin(hf, ct_w, ct_b, rows=None, bias=True):
        w, b = f(ct_w), f(ct_b)
        if rows is not None:
            w, b = w[rows], b[rows]
        out[hf + ".weight"] = np.ascontiguousarray(w)
        if bias:
            out[hf + ".bias"] = np.ascontiguousarray(b)
        elif np.any(b != 0):
            raise ValueError(f"{ct_b}: the K bias block is not zero (HF Whisper has none)")

    def attn_self(hf, ct, d):
        w, b = ct + "/linear_0/weight", ct + "/linear_0/bias"
        lin(hf + ".q_proj", w, b, slice(0, d))
        lin(hf + ".k_proj", w, b, slice(d, 2 * d), bias=False)
        lin(hf + ".v_proj", w, b, slice(2 * d, 3 * d))
        lin(hf + ".out_proj", ct + "/linear_1/weight", ct + "/linear_1/bias")

    d = v["encoder/conv1/weight"].shape[0]
    for i in range(_count_layers(v, "encoder")):
        p, c = f"model.encoder.layers.{i}", f"encoder/layer_{i}"
        attn_self(p + ".self_attn", c + "/self_attention", d)
        ln(p + ".self_attn_layer_norm", c + "/self_attention/layer_norm")
        lin(p + ".fc1", c + "/ffn/linear_0/weight", c + "/ffn/linear_0/bias")
        lin(p + ".fc2", c + "/ffn/linear_1/weight", c + "/ffn/linear_1/bias")
        ln(p + ".final_layer_norm", c + "/ffn/layer_norm")
    ln("model.encoder.layer_norm", "encoder/layer_norm")

    out["model.decoder.embed_tokens.weight"] = f("decoder/embeddings/weight")
    out["model.decoder.embed_positions.weight"] = f("decoder/position_encodings/encodings")
    dt = v["decoder/embeddings/weight"].shape[1]
    for i in range(_count_layers(v, "decoder")):
        p, c = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        attn_self(p + ".self_attn", c + "/self_attention", dt)
        ln(p + ".self_attn_layer_norm", c + "/self_attention/layer_norm")
        a = c + "/attention"
        lin(p + ".encoder_attn.q_proj", a + "/linear_0/weight", a + "/linear_0/bias")
        lin(p + ".encoder_attn.k_proj", a + "/linear_1/weight", a + "/linear_1/bias", slice(0, dt), bias=False)
        lin(p + ".encoder_attn.v_proj", a + "/linear_1/weight", a + "/linear_1/bias", slice(dt, 2 * dt))
        lin(p + ".encoder_attn.out_proj", a + "/linear_2/weight", a + "/linear_2/bias")
        ln(p + ".encoder_attn_layer_norm", a + "/layer_norm")
        lin(p + ".fc1", c + "/ffn/linear_0/weight", c + "/ffn/linear_0/bias")
        lin(p + ".fc2", c + "/ffn/linear_1/weight", c + "/ffn/linear_1/bias")
        ln(p + ".final_layer_norm", c + "/ffn/layer_norm")
    ln("model.decoder.layer_norm", "decoder/layer_norm")
    return out


def make_config(ct2, ct2_config):
    """A transformers WhisperConfig-style config.json for the CT2 model."""
    v = ct2.variables
    d = int(v["encoder/conv1/weight"].shape[0])
    n_vocab = int(v["decoder/embeddings/weight"].shape[0])
    n_enc, n_dec = _count_layers(v, "encoder"), _count_layers(v, "decoder")
    multilingual = n_vocab >= 51865
    cfg = {
        "_name_or_path": "converted from CTranslate2 by sotto's convert_ct2_to_hf.py",
        "activation_dropout": 0.0,
        "activation_function": "gelu",
        "architectures": ["WhisperForConditionalGeneration"],
        "attention_dropout": 0.0,
        "begin_suppress_tokens": ct2_config.get("suppress_ids_begin", [220, 50256 if not multilingual else 50257]),
        "bos_token_id": 50257,
        "d_model": d,
        "decoder_attention_heads": _heads(v, "decoder", d),
        "decoder_ffn_dim": int(v["decoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "decoder_layerdrop": 0.0,
        "decoder_layers": n_dec,
        "decoder_start_token_id": 50257 if not multilingual else 50258,
        "dropout": 0.0,
        "encoder_attention_heads": _heads(v, "encoder", d),
        "encoder_ffn_dim": int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "encoder_layerdrop": 0.0,
        "encoder_layers": n_enc,
        "eos_token_id": 50256 if not multilingual else 50257,
        "init_std": 0.02,
        "is_encoder_decoder": True,
        "max_length": int(v["decoder/position_encodings/encodings"].shape[0]),
        "max_source_positions": int(v["encoder/position_encodings/encodings"].shape[0]),
        "max_target_positions": int(v["decoder/position_encodings/encodings"].shape[0]),
        "model_type": "whisper",
        "num_hidden_layers": n_enc,
        "num_mel_bins": int(v["encoder/conv1/weight"].shape[1]),
        "pad_token_id": 50256 if not multilingual else 50257,
        "scale_embedding": False,
        "suppress_tokens": ct2_config.get("suppress_ids", []),
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": n_vocab,
    }
    if "alignment_heads" in ct2_config:
        cfg["alignment_heads"] = ct2_config["alignment_heads"]
    return cfg


def write_vocab_tokenizer(tok_json_path, dst):
    """tokenizer.json -> vocab.json + merges.txt + added_tokens.json."""
    with open(tok_json_path, encoding="utf-8") as f:
        t = json.load(f)
    model = t["model"]
    vocab = model["vocab"]
    with open(os.path.join(dst, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(dst, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for m in model["merges"]:
            f.write((m if isinstance(m, str) else " ".join(m)) + "\n")
    added = {a["content"]: a["id"] for a in t.get("added_tokens", []) if a["content"] not in vocab}
    with open(os.path.join(dst, "added_tokens.json"), "w", encoding="utf-8") as f:
        json.dump(added, f, ensure_ascii=False, indent=1)


def convert(src, dst, dtype="float32", tokenizer="json"):
    ct2 = read_ct2(os.path.join(src, "model.bin"))
    if ct2.spec != "WhisperSpec":
        raise ValueError(f"{src}: a {ct2.spec} model, not Whisper")
    cfg_path = os.path.join(src, "config.json")
    ct2_config = {}
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            ct2_config = json.load(f)
    tensors = convert_tensors(ct2)
    if dtype == "float16":
        tensors = {k: a.astype(np.float16) for k, a in tensors.items()}
    elif dtype != "float32":
        raise ValueError(f"dtype {dtype}: float32 or float16")
    os.makedirs(dst, exist_ok=True)
    cfg = make_config(ct2, ct2_config)
    cfg["torch_dtype"] = dtype
    with open(os.path.join(dst, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2)
    write_safetensors(os.path.join(dst, "model.safetensors"), tensors, metadata={"format": "pt"})
    tok = os.path.join(src, "tokenizer.json")
    if tokenizer == "json":
        shutil.copyfile(tok, os.path.join(dst, "tokenizer.json"))
    elif tokenizer == "vocab":
        write_vocab_tokenizer(tok, dst)
    else:
        raise ValueError(f"tokenizer {tokenizer}: json or vocab")
    return cfg, len(tensors)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="CTranslate2 model directory")
    ap.add_argument("dst", help="output directory (created)")
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--tokenizer", choices=["json", "vocab"], default="json",
                    help="json: copy tokenizer.json; vocab: write vocab.json + merges.txt + added_tokens.json")
    args = ap.parse_args()
    cfg, n = convert(args.src, args.dst, args.dtype, args.tokenizer)
    print(f"{args.dst}: {n} tensors ({args.dtype}), d_model {cfg['d_model']}, "
          f"{cfg['encoder_layers']}+{cfg['decoder_layers']} layers, vocab {cfg['vocab_size']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
