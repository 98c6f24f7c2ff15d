#!/usr/bin/env python3
"""Write a Llama-2-70B-shaped Hugging Face checkpoint whose safetensors files have real headers and no data.

The folder gets Llama-2-70b-hf's config.json and generation_config.json, SHARDS safetensors shards
(model-000NN-of-000SS.safetensors) and model.safetensors.index.json. Each shard is a valid safetensors file:
8-byte header length, JSON header with every tensor's dtype, shape and data_offsets, then the data region,
which is only seek-extended (a sparse hole), so 138 GB of apparent size take a few hundred KB of disk.
Standard library only; runs in well under a second.

    python tools/llm/make_sparse_checkpoint.py [DIR] [--shards 30] [--dtype F16]
    (default DIR: target/llama-70b-sparse)
    python tools/llm/make_sparse_checkpoint.py DIR --shape deepseek-v3      # 163 shards, BF16
    python tools/llm/make_sparse_checkpoint.py DIR --shape qwen3-next-80b   # 41 shards, BF16
    python tools/llm/make_sparse_checkpoint.py DIR --shape gpt-oss-120b     # 15 shards, MXFP4 experts

Numbers (fp16): 68,976,648,192 parameters, total_size 137,953,296,384 bytes.
The newer shapes take their config.json from the released models (DeepSeek-V3 without its
multi-token-prediction layer 61, which transformers does not load; Qwen3-Next-80B-A3B-Instruct;
gpt-oss-120b with its MXFP4 expert blocks and scales) and their tensor names from the checkpoints
transformers 5.24 writes (testdata/llm/{deepseek_v3,qwen3_next,gpt_oss}).
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
DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1}

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 0, "eos_token_id": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
    "hidden_size": 7168, "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
    "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
    "norm_topk_prob": True, "num_attention_heads": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
    "tie_word_embeddings": False, "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16",
    "use_cache": True, "v_head_dim": 128, "vocab_size": 129280,
}

QWEN3_NEXT_80B = {
    "architectures": ["Qwen3NextForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
    "full_attention_interval": 4, "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5120, "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
    "linear_value_head_dim": 128, "max_position_embeddings": 262144, "mlp_only_layers": [],
    "model_type": "qwen3_next", "moe_intermediate_size": 512, "norm_topk_prob": True,
    "num_attention_heads": 16, "num_experts": 512, "num_experts_per_tok": 10,
    "num_hidden_layers": 48, "num_key_value_heads": 2, "output_router_logits": False,
    "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06, "rope_scaling": None,
    "rope_theta": 10000000, "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 512,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}

GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
    "num_local_experts": 128, "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                     "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 201088,
}


def deepseek_tensors(cfg, dt):
    H, V = cfg["hidden_size"], cfg["vocab_size"]
    h, nope, rope, v = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                        cfg["v_head_dim"])
    ql, kvl, I, MI = cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["intermediate_size"], cfg["moe_intermediate_size"]
    E = cfg["n_routed_experts"]
    out = [("model.embed_tokens.weight", [V, H], dt)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", [H], dt), (f"{p}.post_attention_layernorm.weight", [H], dt),
                (f"{p}.self_attn.q_a_proj.weight", [ql, H], dt), (f"{p}.self_attn.q_a_layernorm.weight", [ql], dt),
                (f"{p}.self_attn.q_b_proj.weight", [h * (nope + rope), ql], dt),
                (f"{p}.self_attn.kv_a_proj_with_mqa.weight", [kvl + rope, H], dt),
                (f"{p}.self_attn.kv_a_layernorm.weight", [kvl], dt),
                (f"{p}.self_attn.kv_b_proj.weight", [h * (nope + v), kvl], dt),
                (f"{p}.self_attn.o_proj.weight", [H, h * v], dt)]
        if i < cfg["first_k_dense_replace"]:
            out += [(f"{p}.mlp.gate_proj.weight", [I, H], dt), (f"{p}.mlp.up_proj.weight", [I, H], dt),
                    (f"{p}.mlp.down_proj.weight", [H, I], dt)]
            continue
        out += [(f"{p}.mlp.gate.weight", [E, H], dt), (f"{p}.mlp.gate.e_score_correction_bias", [E], "F32")]
        for e in range(E):
            q = f"{p}.mlp.experts.{e}"
            out += [(f"{q}.gate_proj.weight", [MI, H], dt), (f"{q}.up_proj.weight", [MI, H], dt),
                    (f"{q}.down_proj.weight", [H, MI], dt)]
        S = MI * cfg["n_shared_experts"]
        out += [(f"{p}.mlp.shared_experts.gate_proj.weight", [S, H], dt),
                (f"{p}.mlp.shared_experts.up_proj.weight", [S, H], dt),
                (f"{p}.mlp.shared_experts.down_proj.weight", [H, S], dt)]
    return out + [("model.norm.weight", [H], dt), ("lm_head.weight", [V, H], dt)]


def qwen3_next_tensors(cfg, dt):
    H, V, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    nh, kvh = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    kd = cfg["linear_num_key_heads"] * cfg["linear_key_head_dim"]
    vd = cfg["linear_num_value_heads"] * cfg["linear_value_head_dim"]
    vh, k = cfg["linear_num_value_heads"], cfg["linear_conv_kernel_dim"]
    E, MI, SI = cfg["num_experts"], cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
    out = [("model.embed_tokens.weight", [V, H], dt)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        out += [(f"{p}.input_layernorm.weight", [H], dt), (f"{p}.post_attention_layernorm.weight", [H], dt)]
        if (i + 1) % cfg["full_attention_interval"] == 0:
            a = f"{p}.self_attn"
            out += [(f"{a}.q_proj.weight", [2 * nh * hd, H], dt), (f"{a}.k_proj.weight", [kvh * hd, H], dt),
                    (f"{a}.v_proj.weight", [kvh * hd, H], dt), (f"{a}.o_proj.weight", [H, nh * hd], dt),
                    (f"{a}.q_norm.weight", [hd], dt), (f"{a}.k_norm.weight", [hd], dt)]
        else:
            a = f"{p}.linear_attn"
            out += [(f"{a}.in_proj_qkvz.weight", [2 * kd + 2 * vd, H], dt),
                    (f"{a}.in_proj_ba.weight", [2 * vh, H], dt),
                    (f"{a}.conv1d.weight", [2 * kd + vd, 1, k], dt), (f"{a}.dt_bias", [vh], dt),
                    (f"{a}.A_log", [vh], dt), (f"{a}.norm.weight", [cfg["linear_value_head_dim"]], dt),
                    (f"{a}.out_proj.weight", [H, vd], dt)]
        out += [(f"{p}.mlp.gate.weight", [E, H], dt)]
        for e in range(E):
            q = f"{p}.mlp.experts.{e}"
            out += [(f"{q}.gate_proj.weight", [MI, H], dt), (f"{q}.up_proj.weight", [MI, H], dt),
                    (f"{q}.down_proj.weight", [H, MI], dt)]
        out += [(f"{p}.mlp.shared_expert.gate_proj.weight", [SI, H], dt),
                (f"{p}.mlp.shared_expert.up_proj.weight", [SI, H], dt),
                (f"{p}.mlp.shared_expert.down_proj.weight", [H, SI], dt),
                (f"{p}.mlp.shared_expert_gate.weight", [1, H], dt)]
    return out + [("model.norm.weight", [H], dt), ("lm_head.weight", [V, H], dt)]


def gpt_oss_tensors(cfg, dt):
    """Experts in MXFP4 as released: 32 4-bit values in 16 U8 bytes per block, a U8 scale per block."""
    H, V, hd = cfg["hidden_size"], cfg["vocab_size"], cfg["head_dim"]
    nh, kvh, E, I = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["num_local_experts"], cfg["intermediate_size"]
    out = [("model.embed_tokens.weight", [V, H], dt)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        out += [(f"{p}.input_layernorm.weight", [H], dt), (f"{p}.post_attention_layernorm.weight", [H], dt),
                (f"{a}.q_proj.weight", [nh * hd, H], dt), (f"{a}.q_proj.bias", [nh * hd], dt),
                (f"{a}.k_proj.weight", [kvh * hd, H], dt), (f"{a}.k_proj.bias", [kvh * hd], dt),
                (f"{a}.v_proj.weight", [kvh * hd, H], dt), (f"{a}.v_proj.bias", [kvh * hd], dt),
                (f"{a}.o_proj.weight", [H, nh * hd], dt), (f"{a}.o_proj.bias", [H], dt),
                (f"{a}.sinks", [nh], dt),
                (f"{p}.mlp.router.weight", [E, H], dt), (f"{p}.mlp.router.bias", [E], dt),
                (f"{p}.mlp.experts.gate_up_proj_blocks", [E, 2 * I, H // 32, 16], "U8"),
                (f"{p}.mlp.experts.gate_up_proj_scales", [E, 2 * I, H // 32], "U8"),
                (f"{p}.mlp.experts.gate_up_proj_bias", [E, 2 * I], dt),
                (f"{p}.mlp.experts.down_proj_blocks", [E, H, I // 32, 16], "U8"),
                (f"{p}.mlp.experts.down_proj_scales", [E, H, I // 32], "U8"),
                (f"{p}.mlp.experts.down_proj_bias", [E, H], dt)]
    return out + [("model.norm.weight", [H], dt), ("lm_head.weight", [V, H], dt)]


SHAPES = {
    "deepseek-v3": (DEEPSEEK_V3, deepseek_tensors, 163),
    "qwen3-next-80b": (QWEN3_NEXT_80B, qwen3_next_tensors, 41),
    "gpt-oss-120b": (GPT_OSS_120B, gpt_oss_tensors, 15),
}


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


def split(items, shards):
    """Contiguous split into `shards` groups: a tensor goes to the shard its midpoint falls in, when the
    bytes are cut into `shards` equal ranges. Items are (name, shape, dtype)."""
    total = sum(numel(s) * DTYPE_SIZE[d] for _, s, d in items)
    groups = [[] for _ in range(shards)]
    acc = 0
    for name, shape, dtype in items:
        nb = numel(shape) * DTYPE_SIZE[dtype]
        k = min(int((acc + nb / 2) * shards // total), shards - 1)
        groups[k].append((name, shape, dtype))
        acc += nb
    return [g for g in groups if g]


def write_shard(path: Path, items):
    header, off = {}, 0
    for name, shape, dtype in items:
        nb = numel(shape) * DTYPE_SIZE[dtype]
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
    ap.add_argument("--shards", type=int, default=None, help="default: 30, or the released model's count")
    ap.add_argument("--dtype", default=None, choices=["F32", "F16", "BF16"], help="default: F16 (BF16 for the newer shapes)")
    ap.add_argument("--shape", default="70b", choices=["70b", "8b", *SHAPES],
                    help="70b: Llama-2-70b-hf (default); 8b: Llama-3-8B (32 layers, 4096 hidden, 8 KV heads, vocab 128256); "
                         "deepseek-v3, qwen3-next-80b, gpt-oss-120b: those released models")
    args = ap.parse_args()
    out: Path = args.dir
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("model-*.safetensors"):
        old.unlink()
    if args.shape in SHAPES:
        base, make, shards = SHAPES[args.shape]
        dtype = args.dtype or "BF16"
    else:
        base = CONFIG if args.shape == "70b" else dict(
            CONFIG, hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_hidden_layers=32,
            num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0)
        dtype = args.dtype or "F16"
        shards = 30

        def make(cfg, dt):
            return [(n, s, dt) for n, s in tensors(cfg)]
    cfg = dict(base, torch_dtype={"F16": "float16", "BF16": "bfloat16", "F32": "float32"}[dtype])
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    items = make(cfg, dtype)
    groups = split(items, args.shards or shards)
    n = len(groups)
    weight_map, total = {}, 0
    for k, group in enumerate(groups, 1):
        fname = f"model-{k:05d}-of-{n:05d}.safetensors"
        total += write_shard(out / fname, group)
        for name, _, _ in group:
            weight_map[name] = fname
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    params = sum(numel(s) for _, s, _ in items)
    apparent = sum(p.stat().st_size for p in out.iterdir())
    disk = sum(p.stat().st_blocks * 512 for p in out.iterdir())
    print(f"{out}: {n} shards, {len(items)} tensors, {params:,} parameters, total_size {total:,} B; "
          f"apparent {apparent / 1e9:.1f} GB, on disk {disk / 1e3:.0f} KB")
    if disk > 64 << 20:
        print("warning: this filesystem does not keep the files sparse", file=sys.stderr)


if __name__ == "__main__":
    main()
