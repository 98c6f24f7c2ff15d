#!/usr/bin/env python3
"""Tiny GGUF files written with llama.cpp's `gguf` package, data all zeros (nnlint reads headers only).

testdata/llm/gguf/
  tiny-llama-q4_k_m.gguf  a complete 1-block llama (hidden 256, 4 heads, 2 KV heads, ffn 256, vocab 64)
                          with the type mix of llama.cpp's Q4_K_M: F32 norms, Q4_K most matrices, Q6_K for
                          attn_v, ffn_down and output
  all-types.gguf          the same llama metadata plus one [2, 256] tensor (ne0 = 256, ne1 = 2) of every
                          type in gguf.GGML_QUANT_SIZES
  expected.json           per type: block size, bytes per block; per tensor: type, ne, elements, stored bytes,
                          data offset; totals; the metadata written
  twins/unknown-arch.gguf mistral's twin under the architecture name 'zorro' (its sliding window, no vocab_size)
  twins/FAMILY.gguf       the GGUF twin of testdata/llm/FAMILY: the metadata llama.cpp's convert_hf_to_gguf.py
                          writes for that config (its set_gguf_parameters, per architecture), the same tensors
                          under llama.cpp's names (gguf.TensorNameMap; experts stacked into 3-D `_exps`
                          tensors, as convert does), F16 zeros
  twins/FAMILY.gguf       (newer_twins: deepseek_v3 ... mistral3) the same for the newer families, mirroring
                          llama.cpp 0c1e57098's converter classes (conversion/*.py): MLA's attn_k_b /
                          attn_v_b, DeltaNet and Mamba ssm_* tensors, per-layer head_count_kv / ffn arrays,
                          sinks; each record says which class, what differs from the checkpoint's parameter
                          count and what llama.cpp caches per layer (llama_cpp_cache)
  twins/mmproj-mistral3.gguf  the projector file `convert_hf_to_gguf.py --mmproj` writes for mistral3 (clip
                          arch, general.type mmproj, clip.vision.* keys, v.* / mm.* tensors)

    python tools/llm/make_gguf.py [--out DIR]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonfmt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "testdata" / "llm" / "gguf"

DIMS = dict(block_count=1, embedding_length=256, feed_forward_length=256, head_count=4, head_count_kv=2,
            context_length=128, vocab_size=64, rope_freq_base=10000.0, rms_eps=1e-5)
HEAD_DIM = DIMS["embedding_length"] // DIMS["head_count"]
# the tensors of llama.cpp's llama architecture, numpy order (ne1, ne0): ne0 is the input width
Q4_K_M = {
    "token_embd.weight": ((DIMS["vocab_size"], DIMS["embedding_length"]), T.Q4_K),
    "blk.0.attn_norm.weight": ((DIMS["embedding_length"],), T.F32),
    "blk.0.attn_q.weight": ((DIMS["head_count"] * HEAD_DIM, DIMS["embedding_length"]), T.Q4_K),
    "blk.0.attn_k.weight": ((DIMS["head_count_kv"] * HEAD_DIM, DIMS["embedding_length"]), T.Q4_K),
    "blk.0.attn_v.weight": ((DIMS["head_count_kv"] * HEAD_DIM, DIMS["embedding_length"]), T.Q6_K),
    "blk.0.attn_output.weight": ((DIMS["embedding_length"], DIMS["head_count"] * HEAD_DIM), T.Q4_K),
    "blk.0.ffn_norm.weight": ((DIMS["embedding_length"],), T.F32),
    "blk.0.ffn_gate.weight": ((DIMS["feed_forward_length"], DIMS["embedding_length"]), T.Q4_K),
    "blk.0.ffn_up.weight": ((DIMS["feed_forward_length"], DIMS["embedding_length"]), T.Q4_K),
    "blk.0.ffn_down.weight": ((DIMS["embedding_length"], DIMS["feed_forward_length"]), T.Q6_K),
    "output_norm.weight": ((DIMS["embedding_length"],), T.F32),
    "output.weight": ((DIMS["vocab_size"], DIMS["embedding_length"]), T.Q6_K),
}
NUMPY_TYPES = {T.F32: np.float32, T.F16: np.float16, T.F64: np.float64, T.I8: np.int8, T.I16: np.int16,
               T.I32: np.int32, T.I64: np.int64}
# types llama.cpp keeps only in memory (activations / dot products), never as a model file's weights
INTERNAL = {T.Q8_1, T.Q8_K}


def add_metadata(w: gguf.GGUFWriter, name: str, file_type: int):
    d = DIMS
    w.add_name(name)
    w.add_block_count(d["block_count"])
    w.add_context_length(d["context_length"])
    w.add_embedding_length(d["embedding_length"])
    w.add_feed_forward_length(d["feed_forward_length"])
    w.add_head_count(d["head_count"])
    w.add_head_count_kv(d["head_count_kv"])
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(d["rope_freq_base"])
    w.add_layer_norm_rms_eps(d["rms_eps"])
    w.add_vocab_size(d["vocab_size"])
    w.add_file_type(file_type)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(d["vocab_size"] - 3)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * (len(tokens) - 3))  # unknown, control, control, byte
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def zeros(shape, qtype):
    block, tsize = GGML_QUANT_SIZES[qtype]
    if qtype in NUMPY_TYPES:
        return np.zeros(shape, dtype=NUMPY_TYPES[qtype]), None
    assert shape[-1] % block == 0, (shape, qtype)
    return np.zeros((*shape[:-1], shape[-1] // block * tsize), dtype=np.uint8), qtype


def write(path: Path, tensors: dict, name: str, file_type: int):
    w = gguf.GGUFWriter(str(path), arch="llama")
    add_metadata(w, name, file_type)
    for tname, (shape, qtype) in tensors.items():
        data, raw = zeros(shape, qtype)
        w.add_tensor(tname, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def describe(path: Path, tensors: dict):
    r = gguf.GGUFReader(str(path))
    out = []
    for t in r.tensors:
        shape, qtype = tensors[t.name]
        block, tsize = GGML_QUANT_SIZES[qtype]
        n = int(np.prod(shape))
        stored = n // block * tsize
        assert t.tensor_type == qtype and int(t.n_elements) == n and int(t.n_bytes) == stored, t.name
        out.append({"name": t.name, "type": qtype.name, "type_id": int(qtype),
                    "ne": [int(x) for x in t.shape], "numpy_shape": list(shape), "elements": n,
                    "bytes": stored, "bytes_arithmetic": f"{n} / {block} * {tsize}",
                    "offset": int(t.data_offset) - int(r.data_offset), "file_offset": int(t.data_offset)})
    kv = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        if f.name == "tokenizer.ggml.tokens":
            kv[f.name] = f"[{len(f.data)} strings]"
        elif f.name in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            kv[f.name] = f"[{len(f.data)} values]"
        else:
            v = f.contents()
            kv[f.name] = v
    info = {
        "file": path.name,
        "file_bytes": path.stat().st_size,
        "gguf_version": int(r.fields["GGUF.version"].contents()),
        "alignment": int(r.alignment),
        "tensor_data_start": int(r.data_offset),
        "tensor_count": len(out),
        "kv_count": int(r.fields["GGUF.kv_count"].contents()),
        "elements": sum(t["elements"] for t in out),
        "tensor_bytes": sum(t["bytes"] for t in out),
        "metadata": kv,
        "tensors": out,
    }
    return info


# HF model_type -> llama.cpp architecture, for the twins
TWIN_ARCH = {"llama": "llama", "mistral": "llama", "mixtral": "llama", "qwen2": "qwen2", "qwen3": "qwen3",
             "qwen2_moe": "qwen2moe", "gemma": "gemma", "gemma2": "gemma2", "gemma3": "gemma3", "phi3": "phi3"}
EXPERT_PARTS = {"w1": "ffn_gate_exps", "w2": "ffn_down_exps", "w3": "ffn_up_exps",
                "gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps", "down_proj": "ffn_down_exps"}


def safetensors_shapes(path: Path) -> dict:
    import json
    import struct
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    header = json.loads(b[8:8 + n])
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def twin_metadata(w: gguf.GGUFWriter, arch: str, c: dict):
    """What convert_hf_to_gguf.py's set_gguf_parameters writes for these architectures (llama.cpp at
    0024aa74): the base TextModel keys, and each subclass's own."""
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim")
    w.add_block_count(c["num_hidden_layers"])
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(c.get("num_key_value_heads", heads))
    w.add_layer_norm_rms_eps(c.get("rms_norm_eps", 1e-6))
    if head_dim is not None:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    if (e := c.get("num_local_experts") or c.get("num_experts")) is not None:
        w.add_expert_count(e)
        w.add_expert_used_count(c["num_experts_per_tok"])
    if arch == "llama":
        w.add_vocab_size(c["vocab_size"])
        w.add_rope_dimension_count(head_dim or c["hidden_size"] // heads)
    if arch == "qwen2moe":
        w.add_expert_feed_forward_length(c["moe_intermediate_size"])
        w.add_expert_shared_feed_forward_length(c["shared_expert_intermediate_size"])
    if arch == "gemma2":
        w.add_float32(f"{arch}.attn_logit_softcapping", c["attn_logit_softcapping"])
        w.add_float32(f"{arch}.final_logit_softcapping", c["final_logit_softcapping"])
        w.add_sliding_window(c["sliding_window"])
    if arch == "gemma3":
        w.add_sliding_window(c["sliding_window"])
        # newer converters: which layers slide, as a bool per layer (true: sliding)
        if "layer_types" in c:
            w.add_sliding_window_pattern([t == "sliding_attention" for t in c["layer_types"]])
    if arch == "phi3":
        w.add_rope_dimension_count(int(c.get("partial_rotary_factor", 1.0) * c["hidden_size"]) // heads)
        w.add_sliding_window(c.get("sliding_window") or 0)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))


def twin(family: str, out: Path, arch: str | None = None, file: str | None = None) -> dict:
    import json
    import re
    src = ROOT / "testdata" / "llm" / family
    c = json.loads((src / "config.json").read_text())
    name_arch = TWIN_ARCH[family]
    arch = arch or name_arch
    model_arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == name_arch)
    names = gguf.get_tensor_name_map(model_arch, c["num_hidden_layers"])
    tensors, experts = {}, {}
    for name, shape in safetensors_shapes(src / "model.safetensors").items():
        m = re.match(r".*layers\.(\d+)\..*experts\.(\d+)\.(\w+)\.weight$", name)
        if m:
            experts.setdefault((int(m[1]), EXPERT_PARTS[m[3]]), []).append(tuple(shape))
            continue
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new is not None, f"{family}: no llama.cpp name for {name}"
        tensors[new] = tuple(shape)
    for (block, part), shapes in sorted(experts.items()):
        tensors[f"blk.{block}.{part}.weight"] = (len(shapes), *shapes[0])
    file = file or f"twins/{family}.gguf"
    path = out / file
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_name(f"{family}-twin")
    if arch in TWIN_ARCH.values():
        twin_metadata(w, arch, c)
    else:
        # an architecture nnlint does not know: the base keys, a sliding window, no vocab_size
        twin_metadata(w, "base", c)
        w.add_sliding_window(c["sliding_window"])
    for tname, shape in tensors.items():
        w.add_tensor(tname, np.zeros(shape, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"family": family, "arch": arch, "file": file,
            "elements": int(sum(np.prod(s) for s in tensors.values())), "tensors": len(tensors)}


# -------------------------------------------------------------------------------------------------
# Twins of the newer families. What llama.cpp's converter writes for each checkpoint, read from
# llama.cpp 0c1e57098 (the copy vendored in the llama-cpp-python 0.3.36 sdist), where
# convert_hf_to_gguf.py is split into conversion/*.py: the base keys of TextModel.set_gguf_parameters
# (conversion/base.py:1434) and each model class's own, and each class's tensor rewrites
# (modify_tensors). Names are mapped with the installed gguf package's TensorNameMap, as convert does;
# where gguf 0.19.0 lacks a helper the key is written by hand (said where). Checked against the real
# converter run on these checkpoints (see newer_twin's docstring).

LLAMA_CPP = "0c1e57098"
# family -> (llama.cpp architecture, the converter class that handles its config's architectures[0])
NEWER_ARCH = {
    "deepseek_v3": ("deepseek2", "conversion/deepseek.py DeepseekV2Model"),
    "deepseek_v3_noqlora": ("deepseek2", "conversion/deepseek.py DeepseekV2Model"),
    "glm4_moe": ("glm4moe", "conversion/glm.py Glm4MoeModel (--no-mtp)"),
    "gpt_oss": ("gpt-oss", "conversion/gpt_oss.py GptOssModel"),
    "llama4_text": ("llama4", "conversion/llama.py Llama4Model"),
    "qwen3_next": ("qwen3next", "conversion/qwen.py Qwen3NextModel (--no-mtp)"),
    "granitemoehybrid": ("granitehybrid", "conversion/granite.py GraniteHybridModel"),
    "mamba2": ("mamba2", "conversion/mamba.py Mamba2Model"),
    "lfm2": ("lfm2", "conversion/lfm2.py LFM2Model"),
    "smollm3": ("smollm3", "conversion/llama.py SmolLM3Model"),
    "nemotron_h": ("nemotron_h_moe", "conversion/nemotron.py NemotronHModel"),
    "falcon_h1": ("falcon-h1", "conversion/falcon_h1.py FalconH1Model"),
    "olmo2": ("olmo2", "conversion/olmo.py Olmo2Model"),
    "olmo3": ("olmo2", "conversion/olmo.py Olmo2Model"),
    "cohere2": ("cohere2", "conversion/command_r.py Cohere2Model"),
    "exaone4": ("exaone4", "conversion/exaone.py Exaone4Model"),
    "ernie4_5_moe": ("ernie4_5-moe", "conversion/ernie.py Ernie4_5MoeModel"),
    "qwen3_vl": ("qwen3vl", "conversion/qwen3vl.py Qwen3VLTextModel"),
    "qwen2_5_vl": ("qwen2vl", "conversion/qwenvl.py Qwen2VLModel"),
    "mistral3": ("mistral3", "conversion/mistral3.py Mistral3Model.Ministral3Model"),
}
# where the converter cannot take the transformers-5 config as saved, what the twin assumes instead
# (the value a hub config carries)
CONFIG_FIXES = {
    # FalconH1Model.set_gguf_parameters reads hparams["head_dim"] (KeyError without it)
    "falcon_h1": {"head_dim": 8},
    # Cohere2Model.set_gguf_parameters reads hparams["rotary_pct"] (KeyError without it)
    "cohere2": {"rotary_pct": 1.0},
}
NOTES = {
    "granitemoehybrid": "GraniteHybridModel.get_attn_layers counts layer_types entries equal to 'attention' (the hub "
                        "configs' 'mamba'/'attention'); this transformers-5 config says 'linear_attention'/'full_attention', "
                        "on which the converter at 0c1e57098 writes head_count_kv [0, 0] (every layer recurrent, a file "
                        "llama.cpp cannot load). The twin reads 'full_attention' as 'attention': head_count_kv [0, 2].",
    "nemotron_h": "the config's experts make it nemotron_h_moe; feed_forward_length per layer is moe_intermediate_size on "
                  "'moe' layers and 0 elsewhere, so the dense 'mlp' layer 3 gets 0 (llama.cpp would take it for a Mamba "
                  "layer: is_recr = head_count_kv 0 and n_ff 0). Layer kinds are safer read off the tensors.",
    "glm4_moe": "converted as with --no-mtp: the checkpoint has no MTP layer (transformers drops layer "
                "num_hidden_layers); a hub GLM-4.5 GGUF has block_count = num_hidden_layers + 1 and nextn_predict_layers 1",
    "qwen3_next": "converted as with --no-mtp (the default needs mtp.* tensors, which this checkpoint lacks)",
    "falcon_h1": "the config lacks head_dim, which the converter requires: head_dim = hidden_size / num_attention_heads; "
                 "the converter names the pre-FFN norm blk.N.ffn_norm (no .weight), as llama.cpp loads it",
    "cohere2": "the config lacks rotary_pct, which the converter requires: 1.0",
    "deepseek_v3": "kv_b_proj is split into attn_k_b [H, kv_lora_rank, qk_nope] (transposed) and attn_v_b "
                   "[H, v_head_dim, kv_lora_rank]; head_count_kv is written as 1 (MLA as MQA)",
    "deepseek_v3_noqlora": "q_lora_rank null: attn_q instead of attn_q_a/attn_q_a_norm/attn_q_b, no q_lora_rank key",
}

# TextModel.filter_tensors (conversion/base.py:1387): multimodal tensors are skipped
_TEXT_SKIP_PREFIX = ("mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.", "sound_encoder.",
                     "sound_projection.", "speech_embeddings.")
_TEXT_SKIP_IN = ("visual.", "vision.", "audio.", "talker.", "vision_", "audio_", "token2wav.", "code2wav.",
                 "projector.", "pre_mm_projector_norm", "image_newline", "view_seperator", "patch_embed",
                 "patch_embedding", "patch_merger.", "patch_merge_mlp.", "model.connector.")


def _text_filter(name: str) -> str | None:
    if name.startswith(_TEXT_SKIP_PREFIX) or any(s in name for s in _TEXT_SKIP_IN):
        return None
    return _base_filter(name)


def _base_filter(name: str) -> str:
    """ModelBase.filter_tensors (conversion/base.py:590)."""
    if name.endswith("e_score_correction_bias"):
        name = name.replace("e_score_correction_bias", "e_score_correction.bias")
    return name.replace("language_model.", "")


def _finder(h: dict, prefixes=()):
    """ModelBase.find_hparam, with GraniteHybridModel's / FalconH1Model's prefixed keys after the plain ones."""
    def find(keys, optional=True):
        keys = list(keys) + [f"{p}_{k}" for p in prefixes for k in keys]
        k = next((k for k in keys if k in h), None)
        if k is None and not optional:
            raise KeyError(keys)
        return None if k is None else h[k]
    return find


def _rope_parameters(h: dict, find) -> dict:
    """TextModel.__init__ (conversion/base.py:1359-1377): the rope parameters, globals mirrored in."""
    rope = h.get("rope_parameters", h.get("rope_scaling")) or {}
    theta = find(["global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"])
    local = find(["local_rope_theta", "rope_local_theta", "rope_theta_local", "swa_rope_theta", "rope_local_base_freq"])
    prf = find(["partial_rotary_factor", "rope_pct", "rope_percent"])
    orig = find(["original_max_position_embeddings"])
    if "full_attention" not in rope and "sliding_attention" not in rope:
        if local is not None:
            rope["sliding_attention"] = {"rope_theta": local}
        if "rope_theta" not in rope and theta is not None:
            rope["rope_theta"] = theta
        if "rope_type" not in rope and (t := rope.get("type")) is not None:
            rope["rope_type"] = t
        if "partial_rotary_factor" not in rope and prf is not None:
            rope["partial_rotary_factor"] = prf
        if "original_max_position_embeddings" not in rope and orig is not None:
            rope["original_max_position_embeddings"] = orig
    return rope


def _text_base(w: gguf.GGUFWriter, h: dict, rope: dict, find, block_count: int):
    """TextModel.set_gguf_parameters (conversion/base.py:1434-1540)."""
    w.add_block_count(block_count)
    if (v := find(["max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length",
                   "model_max_length"])) is not None:
        w.add_context_length(v)
    if (v := find(["hidden_size", "n_embd", "dim"])) is not None:
        w.add_embedding_length(v)
    if (v := find(["prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner",
                   "hidden_dim"])) is not None:
        w.add_feed_forward_length(v)
    if (v := find(["num_attention_heads", "n_head", "n_heads"])) is not None:
        w.add_head_count(v)
    if (v := find(["num_key_value_heads", "n_kv_heads"])) is not None:
        w.add_head_count_kv(v)
    if h.get("is_causal") is False:
        w.add_causal_attention(False)
    rp = rope.get("full_attention", rope)
    if (rt := rp.get("rope_type")) is not None:
        factor = rp.get("factor")
        if rt == "linear" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(factor)
        elif rt == "yarn" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(factor)
            w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
            if (v := rp.get("extrapolation_factor")) is not None:
                w.add_rope_scaling_yarn_ext_factor(v)
            if (v := rp.get("attention_factor", rp.get("attn_factor"))) is not None:
                w.add_rope_scaling_yarn_attn_factor(v)
            if (v := rp.get("beta_fast")) is not None:
                w.add_rope_scaling_yarn_beta_fast(v)
            if (v := rp.get("beta_slow")) is not None:
                w.add_rope_scaling_yarn_beta_slow(v)
        elif rt in ("su", "longrope"):
            w.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
    if "mrope_section" in rope:
        sections = list(rope["mrope_section"]) + [0] * 4
        w.add_rope_dimension_sections(sections[:4])
    if (v := rp.get("rope_theta")) is not None:
        w.add_rope_freq_base(v)
    if (v := rope.get("sliding_attention", {}).get("rope_theta")) is not None:
        w.add_rope_freq_base_swa(v)
    if (v := find(["rms_norm_eps", "norm_eps"])) is not None:
        w.add_layer_norm_rms_eps(v)
    if (v := find(["layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"])) is not None:
        w.add_layer_norm_eps(v)
    if (v := find(["num_local_experts", "num_experts", "n_routed_experts"])) is not None:
        w.add_expert_count(v)
    if (v := find(["num_experts_per_tok", "num_experts_per_token", "top_k_experts"])) is not None:
        w.add_expert_used_count(v)
    if (v := h.get("n_group")) is not None:
        w.add_expert_group_count(v)
    if (v := h.get("topk_group")) is not None:
        w.add_expert_group_used_count(v)
    if (v := find(["score_function", "scoring_func", "score_func", "moe_router_activation",
                   "moe_router_activation_func", "expert_selection_fn"])) is not None:
        w.add_expert_gating_func({"sigmoid": gguf.ExpertGatingFuncType.SIGMOID,
                                  "softmax": gguf.ExpertGatingFuncType.SOFTMAX}[v])
    if (v := h.get("head_dim")) is not None:
        w.add_key_length(v)
        w.add_value_length(v)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))


def _mamba2_layers(fam: str, h: dict) -> tuple[list[int], list[int]]:
    """(attention layers, Mamba layers) as the hybrid converters read them."""
    n = h["num_hidden_layers"]
    if fam == "granitemoehybrid":
        # GraniteHybridModel.get_attn_layers (conversion/granite.py) takes layer_types == "attention"; the
        # transformers-5 spelling "full_attention" is read the same (NOTES)
        attn = [i for i, t in enumerate(h["layer_types"]) if t in ("attention", "full_attention")]
        return attn, [i for i in range(n) if i not in attn]
    if fam == "nemotron_h":
        pattern = h.get("hybrid_override_pattern") or h["layers_block_type"]
        if isinstance(pattern, str):
            return [i for i, v in enumerate(pattern) if v == "*"], [i for i, v in enumerate(pattern) if v == "M"]
        return ([i for i, v in enumerate(pattern) if v in ("attention", "full_attention")],
                [i for i, v in enumerate(pattern) if v in ("mamba", "linear_attention")])
    return [], list(range(n))


def _newer_params(fam: str, arch: str, w: gguf.GGUFWriter, h: dict):
    """Each converter class's set_gguf_parameters, in its call order (overwritten keys keep their first place,
    as GGUFWriter.add_key_value does)."""
    n = h["num_hidden_layers"]
    if fam in ("granitemoehybrid", "falcon_h1", "nemotron_h"):
        find = _finder(h, ("mamba",))
    else:
        find = _finder(h)
    rope = _rope_parameters(h, find)
    if fam.startswith("deepseek_v3"):  # conversion/deepseek.py DeepseekV2Model.set_gguf_parameters
        h["num_key_value_heads"] = 1  # MLA written as MQA
        h["rms_norm_eps"] = h.get("rms_norm_eps", 1e-6)
        _text_base(w, h, rope, find, n)
        has_moe = h.get("n_routed_experts") is not None
        dense = h.get("first_k_dense_replace")
        w.add_leading_dense_block_count(dense if dense is not None else (0 if has_moe else n))
        kv_lora = h.get("kv_lora_rank", 512)
        w.add_vocab_size(h["vocab_size"])
        if h.get("q_lora_rank") is not None:
            w.add_q_lora_rank(h["q_lora_rank"])
        w.add_kv_lora_rank(kv_lora)
        w.add_key_length(kv_lora + h["qk_rope_head_dim"])
        w.add_value_length(kv_lora)
        w.add_key_length_mla(h["qk_nope_head_dim"] + h["qk_rope_head_dim"])
        w.add_value_length_mla(h["v_head_dim"])
        w.add_expert_feed_forward_length(find(["moe_intermediate_size", "intermediate_size"]))
        if (v := h.get("n_routed_experts")) is not None:
            w.add_expert_count(v)
        w.add_expert_shared_count(h.get("n_shared_experts", 0))
        if (v := h.get("routed_scaling_factor")) is not None:
            w.add_expert_weights_scale(v)
        if h.get("norm_topk_prob"):
            w.add_expert_weights_norm(True)
        w.add_rope_dimension_count(h["qk_rope_head_dim"])
        if (v := rope.get("mscale_all_dim")) is not None:
            w.add_rope_scaling_yarn_log_mul(0.1 * v)
    elif fam == "glm4_moe":  # conversion/glm.py Glm4MoeModel.set_gguf_parameters, --no-mtp
        _text_base(w, h, rope, find, n)
        rope_dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
        w.add_rope_dimension_count(int(rope_dim * rope.get("partial_rotary_factor", 0.5)))
        if (v := h.get("n_routed_experts")) is not None:
            w.add_expert_count(v)
        if (v := h.get("moe_intermediate_size")) is not None:
            w.add_expert_feed_forward_length(v)
        if (v := h.get("n_shared_experts")) is not None:
            w.add_expert_shared_count(v)
        if (v := h.get("first_k_dense_replace")) is not None:
            w.add_leading_dense_block_count(v)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        if (v := h.get("routed_scaling_factor")) is not None:
            w.add_expert_weights_scale(v)
        if (v := h.get("norm_topk_prob")) is not None:
            w.add_expert_weights_norm(v)
    elif fam == "gpt_oss":  # conversion/gpt_oss.py GptOssModel.set_gguf_parameters
        _text_base(w, h, rope, find, n)
        w.add_sliding_window(h["sliding_window"])
        w.add_expert_feed_forward_length(h["intermediate_size"])
    elif fam == "llama4_text":  # conversion/llama.py Llama4Model (intermediate sizes swapped in __init__)
        h["intermediate_size_moe"] = h["intermediate_size"]
        h["intermediate_size"] = h["intermediate_size_mlp"]
        _text_base(w, h, rope, find, n)
        w.add_vocab_size(h["vocab_size"])
        w.add_rope_dimension_count(h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"])
        w.add_interleave_moe_layer_step(h["interleave_moe_layer_step"])
        w.add_expert_feed_forward_length(h["intermediate_size_moe"])
        if "layer_types" in h and all(t == "full_attention" for t in h["layer_types"]):
            w.add_sliding_window(0)
    elif fam == "qwen3_next":  # conversion/qwen.py Qwen3NextModel <- _QwenMtpMixin (--no-mtp) <- Qwen2MoeModel
        _text_base(w, h, rope, find, n)
        if (v := h.get("moe_intermediate_size")) is not None:
            w.add_expert_feed_forward_length(v)
        if (v := h.get("shared_expert_intermediate_size")) is not None:
            w.add_expert_shared_feed_forward_length(v)
        w.add_ssm_conv_kernel(h["linear_conv_kernel_dim"])
        w.add_ssm_state_size(h["linear_key_head_dim"])
        w.add_ssm_group_count(h["linear_num_key_heads"])
        w.add_ssm_time_step_rank(h["linear_num_value_heads"])
        w.add_ssm_inner_size(h["linear_value_head_dim"] * h["linear_num_value_heads"])
        if (lt := h.get("layer_types")) is not None:
            # GGUFWriter.add_recurrent_layers, which gguf 0.19.0 lacks (key Keys.Attention.RECURRENT_LAYERS)
            w.add_array(f"{arch}.attention.recurrent_layers", [t == "linear_attention" for t in lt])
        w.add_full_attention_interval(h.get("full_attention_interval", 4))
        rope_dim = h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"]
        w.add_rope_dimension_count(int(rope_dim * rope.get("partial_rotary_factor", 0.25)))
    elif fam in ("granitemoehybrid", "nemotron_h"):
        # conversion/granite.py GraniteHybridModel.set_gguf_parameters <- GraniteMoeModel <- GraniteModel <- LlamaModel
        attn, _ = _mamba2_layers(fam, h)
        head_dim = h.pop("head_dim", None)  # GraniteModel drops head_dim (NemotronHModel kept it in __init__)
        _text_base(w, h, rope, find, n)
        w.add_vocab_size(h["vocab_size"])
        w.add_rope_dimension_count(h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"])
        for key, add in (("attention_multiplier", w.add_attention_scale), ("embedding_multiplier", w.add_embedding_scale),
                         ("residual_multiplier", w.add_residual_scale), ("logits_scaling", w.add_logit_scale)):
            if v := h.get(key):
                add(v)
        if v := h.get("shared_intermediate_size"):
            w.add_expert_shared_feed_forward_length(v)
        w.add_ssm_conv_kernel(find(["conv_kernel", "d_conv"]))
        w.add_ssm_state_size(find(["state_size", "d_state", "state_dim", "ssm_state_size"]))
        w.add_ssm_group_count(find(["n_groups", "num_groups"]))
        if fam == "nemotron_h":  # NemotronHModel.__init__: d_inner = num_heads * mamba_head_dim
            d_inner = find(["num_heads"]) * find(["mamba_head_dim", "hidden_size", "d_model"])
        else:
            d_inner = find(["expand", "num_heads"]) * find(["mamba_head_dim", "hidden_size", "d_model"])
        w.add_ssm_inner_size(d_inner)
        w.add_ssm_time_step_rank(find(["n_heads", "num_heads"]))
        if v := h.get("attn_rotary_emb"):
            w.add_rope_dimension_count(v)
        w.add_head_count_kv([h["num_key_value_heads"] if i in attn else 0 for i in range(n)])
        use_rope = "BambaForCausalLM" in h["architectures"] or len(attn) == n
        w.add_rope_scaling_finetuned(use_rope)
        if not use_rope:
            w.add_context_length(2**20)
        if fam == "nemotron_h":  # conversion/nemotron.py NemotronHModel.set_gguf_parameters
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
            pattern = h.get("hybrid_override_pattern") or h["layers_block_type"]
            moe = "num_experts_per_tok" in h
            mlp = [i for i, v in enumerate(pattern) if v in (("E", "moe") if moe else ("-", "mlp"))]
            if not moe:
                ff = find(["intermediate_size", "n_inner", "hidden_dim"])
                w.add_feed_forward_length([ff if i in mlp else 0 for i in range(n)])
            else:
                w.add_feed_forward_length([h["moe_intermediate_size"] if i in mlp else 0 for i in range(n)])
                w.add_expert_used_count(h["num_experts_per_tok"])
                w.add_expert_feed_forward_length(h["moe_intermediate_size"])
                w.add_expert_shared_feed_forward_length(h["moe_shared_expert_intermediate_size"])
                w.add_expert_count(h["n_routed_experts"])
                w.add_expert_shared_count(h["n_shared_experts"])
                w.add_expert_weights_norm(h["norm_topk_prob"])
                w.add_expert_weights_scale(h["routed_scaling_factor"])
                w.add_expert_group_count(h["n_group"])
                w.add_expert_used_count(h["num_experts_per_tok"])
                if (v := h.get("moe_latent_size")) is not None:
                    w.add_moe_latent_size(v)
    elif fam in ("mamba2", "falcon_h1"):  # conversion/mamba.py Mamba2Model.set_gguf_parameters
        d_model = find(["hidden_size", "d_model", "dim"])
        expand = find(["mamba_expand", "expand"]) or 2
        d_inner = find(["mamba_d_ssm", "intermediate_size", "d_inner"]) or expand * d_model
        head_dim = find(["mamba_d_head", "head_dim"]) or 64
        w.add_context_length(2**20)
        w.add_embedding_length(d_model)
        w.add_feed_forward_length(0)
        w.add_head_count(0)
        w.add_block_count(n)
        w.add_ssm_conv_kernel(find(["conv_kernel", "d_conv"]) or 4)
        w.add_ssm_inner_size(d_inner)
        w.add_ssm_state_size(find(["state_size", "d_state"]) or 128)
        w.add_ssm_time_step_rank(d_inner // head_dim)
        w.add_ssm_group_count(find(["n_groups"]) or 1)
        w.add_layer_norm_rms_eps(find(["layer_norm_epsilon", "rms_norm_eps"]) or 1e-5)
        w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
        if fam == "falcon_h1":  # conversion/falcon_h1.py FalconH1Model.set_gguf_parameters
            w.add_vocab_size(h["vocab_size"])
            w.add_block_count(n)
            w.add_context_length(h.get("max_position_embeddings", 0))
            w.add_feed_forward_length(h["intermediate_size"])
            w.add_head_count(h["num_attention_heads"])
            w.add_head_count_kv(h["num_key_value_heads"])
            w.add_key_length(h["head_dim"])
            w.add_value_length(h["head_dim"])
            w.add_rope_freq_base(rope["rope_theta"])
    elif fam == "lfm2":  # conversion/lfm2.py LFM2Model.set_gguf_parameters
        h["num_key_value_heads"] = [h["num_key_value_heads"] if t != "conv" else 0 for t in h["layer_types"]]
        _text_base(w, h, rope, find, n)
        w.add_vocab_size(h["vocab_size"])
        w.add_shortconv_l_cache(h["conv_L_cache"])
        w.add_layer_norm_rms_eps(h["norm_eps"])
        ff = find(["block_ff_dim", "intermediate_size"])
        if h["block_auto_adjust_ff_dim"]:
            ff = int(2 * ff / 3)
            if (m := h["block_ffn_dim_multiplier"]) is not None:
                ff = int(m * ff)
            of = h["block_multiple_of"]
            ff = of * ((ff + of - 1) // of)
        w.add_feed_forward_length(ff)
    elif fam in ("smollm3", "mistral3"):  # conversion/llama.py LlamaModel.set_gguf_parameters
        _text_base(w, h, rope, find, n)
        w.add_vocab_size(h["vocab_size"])
        w.add_rope_dimension_count(h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"])
    elif fam in ("olmo2", "olmo3"):  # conversion/olmo.py Olmo2Model.set_gguf_parameters
        _text_base(w, h, rope, find, n)
        if "sliding_window" in h:
            w.add_sliding_window(h["sliding_window"])
            if "layer_types" in h:
                pattern = [t == "sliding_attention" for t in h["layer_types"]]
            else:
                pattern = [(i + 1) % 4 != 0 for i in range(n)]
            w.add_sliding_window_pattern(pattern)
    elif fam == "cohere2":  # conversion/command_r.py Cohere2Model.set_gguf_parameters
        _text_base(w, h, rope, find, n)
        w.add_logit_scale(h["logit_scale"])
        w.add_sliding_window(h["sliding_window"])
        w.add_vocab_size(h["vocab_size"])
        w.add_rope_dimension_count(int(h["rotary_pct"] * (h["hidden_size"] // h["num_attention_heads"])))
        w.add_rope_scaling_type(gguf.RopeScalingType.NONE)
    elif fam == "exaone4":  # conversion/exaone.py Exaone4Model.set_gguf_parameters
        _text_base(w, h, rope, find, n)
        w.add_vocab_size(h["vocab_size"])
        if h.get("sliding_window") is not None:
            w.add_sliding_window(h["sliding_window"])
            if "layer_types" in h:
                w.add_sliding_window_pattern([t == "sliding_attention" for t in h["layer_types"]])
            elif isinstance(p := h.get("sliding_window_pattern"), (int, str)):
                if isinstance(p, str):
                    pattern = [p[i % len(p)] == "L" for i in range(n)]
                else:
                    pattern = [(i + 1) % p != 0 for i in range(n)]
                w.add_sliding_window_pattern(pattern)
    elif fam == "ernie4_5_moe":  # conversion/ernie.py Ernie4_5MoeModel.set_gguf_parameters
        _text_base(w, h, rope, find, n)
        w.add_expert_count(h["moe_num_experts"])
        w.add_expert_used_count(h["moe_k"])
        w.add_interleave_moe_layer_step(h["moe_layer_interval"])
        w.add_leading_dense_block_count(h["moe_layer_start_index"])
        if (v := h.get("moe_intermediate_size")) is not None:
            w.add_expert_feed_forward_length(v)
        if (s := h.get("moe_num_shared_experts")) is not None:
            w.add_expert_shared_count(s)
            if s > 0 and h.get("intermediate_size") is not None and h.get("num_key_value_heads") is not None:
                # sic: the converter's shared-expert width
                w.add_expert_shared_feed_forward_length(h["intermediate_size"] // h["num_key_value_heads"])
    elif fam == "qwen3_vl":  # conversion/qwen3vl.py Qwen3VLTextModel.set_gguf_parameters <- Qwen3Model
        _text_base(w, h, rope, find, n)
        vision = h.get("vision_config", {})
        w.add_num_deepstack_layers(len(vision.get("deepstack_visual_indexes", [])))
    elif fam == "qwen2_5_vl":  # conversion/qwenvl.py Qwen2VLModel: the base keys only
        _text_base(w, h, rope, find, n)
    else:
        raise KeyError(fam)


def _stack_experts(items: list, merged) -> list:
    """Per-expert matrices `....experts.E.W.weight` stacked into one [E, out, in] tensor per layer and W
    (torch.stack(dim=0), as every converter's modify_tensors does), in the first expert's place;
    `merged(prefix, bid, W)` is the name the converter gives the stack before mapping."""
    groups, out = {}, []
    for name, shape in items:
        m = re.match(r"(.*layers\.(\d+)\..*experts)\.(\d+)\.(\w+)\.weight$", name)
        if not m:
            out.append((name, shape))
            continue
        key = (m[1], int(m[2]), m[4])
        if key not in groups:
            groups[key] = []
            out.append((key, None))
        groups[key].append(shape)
    return [(merged(k[0], k[1], k[2]), (len(groups[k]), *groups[k][0])) if s is None else (k, s) for k, s in out]


def _newer_tensors(fam: str, h: dict, shapes: dict, model_arch) -> dict:
    """The converter's tensors: filter_tensors, then modify_tensors' splits / stacks / reshapes, then the
    TensorNameMap. Shapes in numpy (PyTorch) order, outermost first."""
    n = h["num_hidden_layers"]
    names = gguf.get_tensor_name_map(model_arch, n)
    items = []
    for name, shape in shapes.items():
        name = _text_filter(name)
        if name is None:
            continue
        if fam.startswith("deepseek_v3") and (m := re.match(r"model\.layers\.(\d+)", name)) and int(m[1]) >= n:
            continue  # MTP layers (DeepseekV2Model.skip_mtp)
        items.append((name, tuple(shape)))
    merged = (lambda p, b, w: f"model.layers.{b}.mlp.experts.{w}.weight") if fam == "nemotron_h" else \
        (lambda p, b, w: f"{p}.{w}.weight")
    items = _stack_experts(items, merged)
    # the Mamba layers, whose A / D / conv1d / norm / dt_bias the Mamba2 converters reshape or rename
    ssm = _mamba2_layers(fam, h)[1] if fam in ("granitemoehybrid", "nemotron_h", "mamba2", "falcon_h1") else []
    out = {}

    def put(name, shape, mapped=False):
        new = name if mapped else names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new is not None, f"{fam}: no llama.cpp name for {name}"
        assert new not in out, f"{fam}: {new} twice"
        out[new] = tuple(int(x) for x in shape)

    def blk(b, t, suffix=".weight"):
        return f"blk.{b}.{t}{suffix}"

    for name, shape in items:
        m = re.search(r"layers\.(\d+)\.", name)
        bid = int(m[1]) if m else None
        if fam.startswith("deepseek_v3") and name.endswith("kv_b_proj.weight"):
            # DeepseekV2Model.modify_tensors: kv_b [H*(nope+v), r] -> k_b [H, r, nope] (transposed), v_b [H, v, r]
            heads, nope, v = h["num_key_value_heads"], h["qk_nope_head_dim"], h["v_head_dim"]
            assert shape[0] == heads * (nope + v)
            put(name.replace("kv_b_proj", "k_b_proj"), (heads, shape[1], nope))
            put(name.replace("kv_b_proj", "v_b_proj"), (heads, v, shape[1]))
        elif fam == "gpt_oss" and "mlp.experts." in name:
            # GptOssModel.modify_tensors: bf16 experts [E, in, out] transposed; gate_up interleaved (::2 / 1::2)
            e = shape[0]
            if name.endswith("gate_up_proj"):
                put(name.replace("gate_up_proj", "gate_proj.weight"), (e, shape[2] // 2, shape[1]))
                put(name.replace("gate_up_proj", "up_proj.weight"), (e, shape[2] // 2, shape[1]))
            elif name.endswith("gate_up_proj_bias"):
                put(name.replace("gate_up_proj_bias", "gate_proj.bias"), (e, shape[1] // 2))
                put(name.replace("gate_up_proj_bias", "up_proj.bias"), (e, shape[1] // 2))
            elif name.endswith("down_proj"):
                put(name + ".weight", (e, shape[2], shape[1]))
            elif name.endswith("down_proj_bias"):
                put(name.replace("down_proj_bias", "down_proj.bias"), shape)
            else:
                raise ValueError(name)
        elif fam == "gpt_oss" and name.endswith("sinks"):
            put(name + ".weight", shape)  # GptOssModel.filter_tensors
        elif fam == "llama4_text" and name.endswith("experts.gate_up_proj"):
            # Llama4Model.modify_tensors: [E, in, 2F] transposed, split in halves
            e, i, f2 = shape
            put(name.replace("gate_up_proj", "gate_proj.weight"), (e, f2 // 2, i))
            put(name.replace("gate_up_proj", "up_proj.weight"), (e, f2 // 2, i))
        elif fam == "llama4_text" and name.endswith("experts.down_proj"):
            put(name + ".weight", (shape[0], shape[2], shape[1]))
        elif fam == "qwen3_next" and "in_proj_qkvz" in name:
            # Qwen3NextModel.modify_tensors: [q k v z] per key head regrouped into attn_qkv [q k v] and attn_gate [z]
            kd, vd = h["linear_key_head_dim"], h["linear_value_head_dim"]
            nk, nv = h["linear_num_key_heads"], h["linear_num_value_heads"]
            put(blk(bid, "attn_qkv"), (nk * 2 * kd + nv * vd, shape[1]), mapped=True)
            put(blk(bid, "attn_gate"), (nv * vd, shape[1]), mapped=True)
        elif fam == "qwen3_next" and name.endswith(".dt_bias"):
            put(name.rpartition(".dt_bias")[0] + ".dt_proj.bias", shape)
        elif fam == "qwen3_next" and "conv1d" in name:
            put(name, tuple(s for s in shape if s != 1))  # squeeze
        elif fam == "granitemoehybrid" and name.endswith("block_sparse_moe.input_linear.weight"):
            # GraniteMoeModel.modify_tensors: [E, 2F, in] split into gate / up
            e, f2, i = shape
            put(blk(bid, "ffn_gate_exps"), (e, f2 // 2, i), mapped=True)
            put(blk(bid, "ffn_up_exps"), (e, f2 // 2, i), mapped=True)
        elif fam == "granitemoehybrid" and name.endswith("shared_mlp.input_linear.weight"):
            f2, i = shape
            put(blk(bid, "ffn_gate_shexp"), (f2 // 2, i), mapped=True)
            put(blk(bid, "ffn_up_shexp"), (f2 // 2, i), mapped=True)
        elif fam in ("granitemoehybrid", "nemotron_h", "mamba2", "falcon_h1") and bid in ssm and \
                re.search(r"\.(A_log|D|dt_bias|conv1d\.weight|norm\.weight)$", name) and \
                (".mamba." in name or ".mixer." in name):
            # Mamba2Model.filter_tensors / modify_tensors (NemotronHModel's MoE branch alike): dt_bias ->
            # dt_proj.bias, conv1d squeezed, A and D as [n, 1], the gated norm as [n_group, d_inner / n_group]
            if name.endswith(".dt_bias"):
                put(name.rpartition(".dt_bias")[0] + (".dt.bias" if fam == "nemotron_h" else ".dt_proj.bias"), shape)
            elif name.endswith("conv1d.weight"):
                put(name, tuple(s for s in shape if s != 1))
            elif name.endswith((".A_log", ".D")):
                put(name, (*shape, 1))
            else:
                g = h.get("mamba_n_groups") or h.get("n_groups") or 1
                put(name, (g, shape[0] // g))
        elif fam == "lfm2" and "conv.conv" in name:
            put(name, (shape[0], shape[2]))  # LFM2Model.modify_tensors: squeeze(1)
        elif fam == "cohere2" and name.endswith(".bias"):
            continue  # Cohere2Model.modify_tensors: zero biases dropped
        else:
            put(name, shape)
    return out


def newer_twin(family: str, out: Path) -> dict:
    """The GGUF twin of testdata/llm/FAMILY for the newer families: NEWER_ARCH's converter class mirrored.
    Checked by running that llama.cpp checkout's own converter on each checkpoint (set_vocab stubbed: the
    checkpoints have no tokenizer; the tensor name map widened past 2 blocks for the projector's mm.2) and
    comparing every key but general.name / size_label and every tensor's name and shape."""
    import json
    src = ROOT / "testdata" / "llm" / family
    c = json.loads((src / "config.json").read_text())
    h = {**c, **c["text_config"]} if "text_config" in c else dict(c)  # TextModel.__init__
    if family == "nemotron_h" and h.get("layers_block_type") is not None:
        h["num_hidden_layers"] = len(h["layers_block_type"])  # NemotronHModel.__init__
    h.update(CONFIG_FIXES.get(family, {}))
    arch, _ = NEWER_ARCH[family]
    model_arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    tensors = _newer_tensors(family, json.loads(json.dumps(h)), safetensors_shapes(src / "model.safetensors"),
                             model_arch)
    file = f"twins/{family}.gguf"
    path = out / file
    w = gguf.GGUFWriter(str(path), arch=arch)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(f"{family}-twin")
    _newer_params(family, arch, w, h)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for tname, shape in tensors.items():
        w.add_tensor(tname, np.zeros(shape, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    elements = int(sum(np.prod(s) for s in tensors.values()))
    return {"family": family, "arch": arch, "file": file, "converter": NEWER_ARCH[family][1],
            "elements": elements, "tensors": len(tensors), **_against_checkpoint(family, elements),
            **({"note": NOTES[family]} if family in NOTES else {}),
            "llama_cpp_cache": llama_cpp_cache(path)}


def _against_checkpoint(family: str, elements: int) -> dict:
    """The checkpoint's parameter count (testdata/llm/FAMILY/expected.json) set against the file's
    elements: the converter also writes the router-bias buffers (e_score_correction_bias, a buffer in
    transformers, exp_probs_b.bias here); a wrapper's vision tower and projector go to the mmproj file."""
    import json
    p = json.loads((ROOT / "testdata" / "llm" / family / "expected.json").read_text())["params"]
    buffers = sum(int(np.prod(b["shape"])) for b in p.get("buffers", [])
                  if b.get("persistent") and b["name"].endswith("e_score_correction_bias"))
    out = {"hf_params": p["count"], "hf_buffers_in_file": buffers}
    if (rest := p["count"] - (elements - buffers)) != 0:
        out["hf_params_not_in_file"] = rest
    return out


# the image normalisation of the Pixtral processor (preprocessor_config.json, which the test checkpoint
# does not carry; MmprojModel.set_gguf_parameters reads image_mean / image_std from it)
PIXTRAL_MEAN = [0.48145466, 0.4578275, 0.40821073]
PIXTRAL_STD = [0.26862954, 0.26130258, 0.27577711]


def mmproj_twin(family: str, out: Path) -> dict:
    """The projector file `convert_hf_to_gguf.py --mmproj` writes for testdata/llm/FAMILY (mistral3:
    conversion/llava.py LlavaVisionModel, a Pixtral tower): general.architecture 'clip', general.type
    'mmproj', clip.vision.* keys, the vision tower as v.*, the projector as mm.*; the language model's
    tensors are left out (MmprojModel.filter_tensors)."""
    import json
    src = ROOT / "testdata" / "llm" / family
    c = json.loads((src / "config.json").read_text())
    v = c["vision_config"]
    assert v["model_type"] == "pixtral", "only the Pixtral tower (mistral3) is mirrored"
    depth = v["num_hidden_layers"]
    # the converter maps with a name map of `depth` blocks, in which multi_modal_projector.linear_2 (mm.2) is
    # block 2: a 2-block tower cannot be converted as is; the names a wider map gives are the same
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, max(depth, 3))
    tensors = {}
    for name, shape in safetensors_shapes(src / "model.safetensors").items():
        if "language_model." in name:
            continue
        if not name.startswith(("multi_modal_projector.", "vision_tower.", "vision_encoder.",
                                "vision_language_adapter.", "patch_merger.", "pre_mm_projector_norm")):
            continue  # LlavaVisionModel.modify_tensors keeps only these (and [IMG_BREAK]'s embedding row,
            #           which the filter above already dropped with the language model)
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        assert new is not None, f"{family}: no mmproj name for {name}"
        tensors[new] = tuple(shape)
    file = f"twins/mmproj-{family}.gguf"
    path = out / file
    w = gguf.GGUFWriter(str(path), arch="clip")
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_name(f"mmproj-{family}-twin")
    # MmprojModel.set_gguf_parameters (conversion/base.py:2688)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    w.add_clip_has_vision_encoder(True)
    w.add_vision_projection_dim(c["text_config"]["hidden_size"])
    w.add_vision_image_size(v["image_size"])
    w.add_vision_patch_size(v["patch_size"])
    w.add_vision_embedding_length(v["hidden_size"])
    w.add_vision_feed_forward_length(v["intermediate_size"])
    w.add_vision_block_count(depth)
    w.add_vision_head_count(v["num_attention_heads"])
    w.add_vision_image_mean(PIXTRAL_MEAN)
    w.add_vision_image_std(PIXTRAL_STD)
    # LlavaVisionModel.set_gguf_parameters (conversion/llava.py), pixtral
    w.add_clip_projector_type(gguf.VisionProjectorType.PIXTRAL)
    w.add_vision_attention_layernorm_eps(v.get("layer_norm_eps", 1e-5))
    if v["hidden_act"] == "silu":
        w.add_vision_use_silu(True)
    else:
        assert v["hidden_act"] == "gelu"
        w.add_vision_use_gelu(True)
    if "spatial_merge_size" in c:
        w.add_vision_spatial_merge_size(c["spatial_merge_size"])
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for tname, shape in tensors.items():
        w.add_tensor(tname, np.zeros(shape, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    elements = int(sum(np.prod(s) for s in tensors.values()))
    return {"family": family, "arch": "clip", "type": "mmproj", "file": file,
            "model_file": f"twins/{family}.gguf", "projector_type": "pixtral",
            "elements": elements, "tensors": len(tensors), **_against_checkpoint(family, elements),
            "note": "model_file + this file hold every parameter of the checkpoint; image_mean / image_std are "
                    "Pixtral's (the checkpoint has no preprocessor_config.json, which the converter reads)"}


def llama_cpp_cache(path: Path) -> dict:
    """What llama.cpp 0c1e57098 keeps per layer for this file, read back from its metadata the way
    load_hparams / create_memory do (src/llama-model.cpp, src/models/ARCH.cpp, src/llama-kv-cache*.cpp):
    attention layers cache k_per_token + v_per_token values per cell (MLA: the latent only, no V); sliding
    layers hold min(n_ctx, n_swa * n_seq + n_ubatch) cells padded to 256 (not the window); recurrent layers
    keep conv_state = (d_conv - 1) * conv_channels and ssm_state values per sequence, in F32 whatever the
    KV type."""
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()

    def get(k, default=None):
        f = r.fields.get(f"{arch}.{k}")
        return default if f is None else f.contents()

    n = get("block_count")
    heads = get("attention.head_count", 0)
    kv = get("attention.head_count_kv", heads)
    kv = kv if isinstance(kv, list) else [kv] * n
    ff = get("feed_forward_length", 0)
    ff = ff if isinstance(ff, list) else [ff] * n
    emb = get("embedding_length")
    kl = get("attention.key_length", emb // heads if heads else 0)
    vl = get("attention.value_length", emb // heads if heads else 0)
    mla = get("attention.key_length_mla") is not None
    d_conv, d_inner, d_state, groups = (get("ssm.conv_kernel", 0), get("ssm.inner_size", 0),
                                       get("ssm.state_size", 0), get("ssm.group_count", 0))
    window = get("attention.sliding_window", 0)
    pattern = get("attention.sliding_window_pattern")
    recurrent = [False] * n
    swa = [False] * n
    if arch == "mamba2":
        recurrent = [True] * n
    elif arch in ("granitehybrid", "lfm2"):
        recurrent = [k == 0 for k in kv]
    elif arch in ("nemotron_h", "nemotron_h_moe"):
        recurrent = [k == 0 and f == 0 for k, f in zip(kv, ff)]
    elif arch == "qwen3next":
        recurrent = get("attention.recurrent_layers") or [(i + 1) % get("full_attention_interval", 4) != 0
                                                           for i in range(n)]
    elif arch == "falcon-h1":
        recurrent = [True] * n
    if arch == "gpt-oss":
        swa = pattern if isinstance(pattern, list) else [i % (pattern or 2) < (pattern or 2) - 1 for i in range(n)]
    elif arch in ("cohere2",) or (arch == "olmo2" and window):
        p = pattern if pattern is not None else 4
        swa = p if isinstance(p, list) else [i % p < p - 1 for i in range(n)]
    elif arch == "exaone4" and n == 64:  # llama.cpp slides only the 64-layer EXAONE 4.0 (32B)
        p = pattern if pattern is not None else 4
        swa = p if isinstance(p, list) else [i % p < p - 1 for i in range(n)]
    elif arch == "llama4" and not (f"{arch}.attention.sliding_window" in r.fields and window == 0):
        window = 8192  # chunked attention, the chunk hard-coded whatever attention_chunk_size said
        swa = [i % 4 < 3 for i in range(n)]
    layers = []
    for i in range(n):
        if arch in ("nemotron_h", "nemotron_h_moe") and not recurrent[i] and ff[i] != 0:
            layers.append({"layer": i, "kind": "none"})
            continue
        e = {"layer": i}
        if recurrent[i]:
            if not any(t.name.startswith(f"blk.{i}.{p}") for t in r.tensors for p in ("ssm_", "shortconv")):
                e["mismatch"] = "llama.cpp's rule makes this layer recurrent, but the file has no SSM tensors for it"
            if arch == "lfm2":
                e.update(kind="shortconv", conv_state=emb * (get("shortconv.l_cache") - 1), ssm_state=0)
            else:
                e.update(kind="recurrent", conv_state=(d_conv - 1) * (d_inner + 2 * groups * d_state),
                         ssm_state=d_state * d_inner)
        if not recurrent[i] or arch == "falcon-h1":
            e.update(kind="attention+recurrent" if recurrent[i] else "attention",
                     k_per_token=kv[i] * kl, v_per_token=0 if mla else kv[i] * vl)
            if swa[i]:
                e.update(sliding="chunked" if arch == "llama4" else True, n_swa=window)
        layers.append(e)
    return {"layers": layers, **({"mla": "K cache only: kv_lora_rank + qk_rope_head_dim per token, V is a view "
                                        "of it (llama-kv-cache.cpp has_v = !is_mla)"} if mla else {})}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    f1 = args.out / "tiny-llama-q4_k_m.gguf"
    write(f1, Q4_K_M, "tiny-llama-q4_k_m", int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    all_types = {f"types.{q.name}.weight": ((2, 256), q) for q in GGML_QUANT_SIZES}
    f2 = args.out / "all-types.gguf"
    write(f2, all_types, "all-types", int(gguf.LlamaFileType.GUESSED))

    types = {q.name: {"id": int(q), "block_size": b, "bytes_per_block": s, "bits_per_weight": s * 8 / b,
                      **({"note": "llama.cpp runtime type (activations), not written by quantize"}
                         if q in INTERNAL else {})}
             for q, (b, s) in GGML_QUANT_SIZES.items()}
    exp = {
        "generated_by": "tools/llm/make_gguf.py",
        "versions": {"gguf": getattr(gguf, "__version__", None) or _gguf_version(), "numpy": np.__version__},
        "method": "types from gguf.GGML_QUANT_SIZES (block_size elements are stored in bytes_per_block bytes); "
                  "a tensor of n elements stores n / block_size * bytes_per_block bytes; ne lists dimensions "
                  "innermost first (ggml order), numpy_shape outermost first; offset is the tensor-info offset, "
                  "relative to tensor_data_start (aligned to `alignment`), file_offset = tensor_data_start + offset. Checked by reading the files back with "
                  "gguf.GGUFReader.",
        "logical_params_note": "every tensor of the llama file is a parameter: tiny-llama's logical parameter "
                               "count is its elements total",
        "types": types,
        "files": [describe(f1, Q4_K_M), describe(f2, all_types)],
        "twins": [twin(f, args.out) for f in TWIN_ARCH],
        # mistral's tensors and config under an architecture name llama.cpp does not have
        "unknown_arch": twin("mistral", args.out, arch="zorro", file="twins/unknown-arch.gguf"),
        "newer_twins_method": f"llama.cpp {LLAMA_CPP}: the converter class of each family (converter) mirrored, "
                              "the files F16 zeros; elements is the GGUF total, which counts the HF buffers the "
                              "converter writes as tensors (e_score_correction_bias -> exp_probs_b.bias); "
                              "llama_cpp_cache: per layer what llama.cpp keeps (values per token per attention layer, "
                              "per sequence per recurrent layer), read back from the file's metadata",
        "newer_twins": [newer_twin(f, args.out) for f in NEWER_ARCH],
        "mmproj": [mmproj_twin("mistral3", args.out)],
    }
    (args.out / "expected.json").write_text(jsonfmt.dumps(exp, width=230))
    for t in exp["twins"] + exp["newer_twins"] + exp["mmproj"]:
        print(f"{t['file']}: {t['arch']}, {t['tensors']} tensors, {t['elements']} elements")
    for f in exp["files"]:
        print(f"{f['file']}: {f['tensor_count']} tensors, {f['elements']} elements, {f['tensor_bytes']} tensor bytes, "
              f"file {f['file_bytes']} B")


def _gguf_version():
    from importlib.metadata import version
    return version("gguf")


if __name__ == "__main__":
    main()
