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

    python tools/llm/make_gguf.py [--out DIR]
"""
from __future__ import annotations

import argparse
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
    }
    (args.out / "expected.json").write_text(jsonfmt.dumps(exp, width=230))
    for t in exp["twins"]:
        print(f"{t['file']}: {t['arch']}, {t['tensors']} tensors, {t['elements']} elements")
    for f in exp["files"]:
        print(f"{f['file']}: {f['tensor_count']} tensors, {f['elements']} elements, {f['tensor_bytes']} tensor bytes, "
              f"file {f['file_bytes']} B")


def _gguf_version():
    from importlib.metadata import version
    return version("gguf")


if __name__ == "__main__":
    main()
