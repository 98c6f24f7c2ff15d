#!/usr/bin/env python3
"""Write a Llama-2-70B-shaped Hugging Face checkpoint whose safetensors files have real headers and no data.

The folder gets Llama-2-70b-hf's config.json and generation_config.json, SHARDS safetensors shards
(model-000NN-of-000SS.safetensors) and model.safetensors.index.json. Each shard is a valid safetensors file:
8-byte header length, JSON header with every tensor's dtype, shape and data_offsets, then the data region,
which is only seek-extended (a sparse hole), so 138 GB of apparent size take a few hundred KB of disk.
Standard library only; runs in well under a second.

    python tools/llm/make_sparse_checkpoint.py [DIR] [--shards 30] [--dtype F16]
    (default DIR: target/llama-70b-sparse)

Numbers (fp16): 68,976,648,192 parameters, total_size 137,953,296,384 bytes.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / "target" / "llama-70b-sparse"

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "bos_token_id": 1,
    "eos_token_id": 2,
    "hidden_act": "silu",
    "hidden_size": 8192,
    "initializer_range": 0.02,
    "intermediate_size": 28672,
    "max_position_embeddings": 4096,
    "model_type": "llama",
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
    "pad_token_id": 0,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "tie_word_embeddings": False,
    "torch_dtype": "float16",
    "transformers_version": "4.32.0.dev0",
    "use_cache": True,
    "vocab_size": 32000,
}
GENERATION_CONFIG = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "temperature": 0.6,
                     "top_p": 0.9, "transformers_version": "4.32.0.dev0"}
DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2}


def tensors(cfg):
    """(name, shape) in the order Hugging Face's index lists them (layers in numeric order)."""
    H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = H // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", [V, H])]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [
            (f"{p}.input_layernorm.weight", [H]),
            (f"{p}.mlp.down_proj.weight", [H, I]),
            (f"{p}.mlp.gate_proj.weight", [I, H]),
            (f"{p}.mlp.up_proj.weight", [I, H]),
            (f"{p}.post_attention_layernorm.weight", [H]),
            (f"{p}.self_attn.k_proj.weight", [kv, H]),
            (f"{p}.self_attn.o_proj.weight", [H, H]),
            (f"{p}.self_attn.q_proj.weight", [H, H]),
            (f"{p}.self_attn.v_proj.weight", [kv, H]),
        ]
    out += [("model.norm.weight", [H]), ("lm_head.weight", [V, H])]
    return out


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def split(items, dsize, shards):
    """Contiguous split into `shards` groups: a tensor goes to the shard its midpoint falls in, when the
    bytes are cut into `shards` equal ranges."""
    total = sum(numel(s) * dsize for _, s in items)
    groups = [[] for _ in range(shards)]
    acc = 0
    for name, shape in items:
        nb = numel(shape) * dsize
        k = min(int((acc + nb / 2) * shards // total), shards - 1)
        groups[k].append((name, shape))
        acc += nb
    return [g for g in groups if g]


def write_shard(path: Path, items, dtype, dsize):
    header, off = {}, 0
    for name, shape in items:
        nb = numel(shape) * dsize
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # safetensors pads the header to a multiple of 8 with spaces
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.truncate(8 + len(raw) + off)  # extends the file with a hole: nothing is written
    return off


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--shards", type=int, default=30)
    ap.add_argument("--dtype", default="F16", choices=sorted(DTYPE_SIZE))
    ap.add_argument("--shape", default="70b", choices=["70b", "8b"],
                    help="70b: Llama-2-70b-hf (default); 8b: Llama-3-8B (32 layers, 4096 hidden, 8 KV heads, vocab 128256)")
    args = ap.parse_args()
    out: Path = args.dir
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("model-*.safetensors"):
        old.unlink()
    base = CONFIG if args.shape == "70b" else dict(
        CONFIG, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_hidden_layers=32,
        num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0)
    cfg = dict(base, torch_dtype={"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[args.dtype])
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    dsize = DTYPE_SIZE[args.dtype]
    items = tensors(cfg)
    groups = split(items, dsize, args.shards)
    n = len(groups)
    weight_map, total = {}, 0
    for k, group in enumerate(groups, 1):
        fname = f"model-{k:05d}-of-{n:05d}.safetensors"
        total += write_shard(out / fname, group, args.dtype, dsize)
        for name, _ in group:
            weight_map[name] = fname
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    params = sum(numel(s) for _, s in items)
    apparent = sum(p.stat().st_size for p in out.iterdir())
    disk = sum(p.stat().st_blocks * 512 for p in out.iterdir())
    print(f"{out}: {n} shards, {len(items)} tensors, {params:,} parameters, total_size {total:,} B; "
          f"apparent {apparent / 1e9:.1f} GB, on disk {disk / 1e3:.0f} KB")
    if disk > 64 << 20:
        print("warning: this filesystem does not keep the files sparse", file=sys.stderr)


if __name__ == "__main__":
    main()
