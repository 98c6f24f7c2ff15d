#!/usr/bin/env python3
"""Tiny quantized Llama checkpoints, written by hand: the tensor names, dtypes and shapes that GPTQ, AWQ,
bitsandbytes (nf4 4-bit, int8) and block-wise FP8 produce, with no quantization library involved.

Writes testdata/llm/quantized/<kind>/{config.json, model.safetensors, expected.json}. The packed data is
zeros (nnlint reads headers only); g_idx, quant maps and the bitsandbytes quant-state JSON are real.

    python tools/llm/make_quantized.py [--out DIR]
    python tools/llm/make_quantized.py --check-bnb   # compare the bitsandbytes layouts with the real
                                                      # library (pip install bitsandbytes; CPU is enough)
"""
from __future__ import annotations

import argparse
import json
import math
import struct
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonfmt  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "testdata" / "llm" / "quantized"

BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=1,
            eos_token_id=2)
GROUP = 32  # GPTQ / AWQ group size (real releases use 128; 32 keeps the files tiny and still > 1 group)
BNB_BLOCK = 64  # bitsandbytes 4-bit blocksize (its default)
BNB_NESTED_BLOCK = 256  # bitsandbytes double-quant blocksize
FP8_BLOCK = [128, 128]  # DeepSeek-V3 / Qwen3-FP8 weight_block_size
# NF4 code book (bitsandbytes get_4bit_type('nf4'), the QLoRA paper's table)
NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
       0.7229568362236023, 1.0]

ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int32: "I32",
            torch.int8: "I8", torch.uint8: "U8", torch.float8_e4m3fn: "F8_E4M3", torch.int64: "I64"}

KINDS = {
    "gptq": dict(
        dtype=torch.float16,
        what="GPTQ 4-bit, group_size 32, desc_act false, sym, checkpoint_format gptq (AutoGPTQ / GPTQModel "
             "QuantLinear buffers; exllama/cuda/triton kernels read the same layout)",
        quantization_config={"bits": 4, "group_size": GROUP, "damp_percent": 0.01, "desc_act": False,
                             "static_groups": False, "sym": True, "true_sequential": True,
                             "model_name_or_path": None, "model_file_base_name": "model",
                             "quant_method": "gptq", "checkpoint_format": "gptq"},
        per_linear="qweight I32 [in/8, out] (8 4-bit values per int32, packed along in); qzeros I32 "
                   "[in/group, out/8]; scales F16 [in/group, out]; g_idx I32 [in] (group of each input row); "
                   "no bias tensor (Llama has none). bytes = in*out/2 + (in/g)*(out/8)*4 + (in/g)*out*2 + in*4",
    ),
    "awq": dict(
        dtype=torch.float16,
        what="AWQ 4-bit GEMM (AutoAWQ WQLinear_GEMM), group_size 32, zero_point true",
        quantization_config={"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True,
                             "version": "gemm", "modules_to_not_convert": None},
        per_linear="qweight I32 [in, out/8] (packed along out); qzeros I32 [in/group, out/8]; scales F16 "
                   "[in/group, out]. bytes = in*out/2 + (in/g)*(out/8)*4 + (in/g)*out*2",
    ),
    "bnb_nf4": dict(
        dtype=torch.bfloat16,
        what="bitsandbytes 4-bit NF4 with double quantization (bnb_4bit_use_double_quant), compute dtype "
             "bf16, quant_storage uint8, as transformers save_pretrained writes it (Params4bit + QuantState."
             "as_dict(packed=True)); lm_head kept in bf16",
        quantization_config=None,  # filled from transformers.BitsAndBytesConfig
        per_linear="weight U8 [in*out/2, 1] (two 4-bit codes per byte); weight.absmax U8 [n_blocks] "
                   "(absmax quantized to 8 bit by the double quantization), n_blocks = ceil(in*out/64); "
                   "weight.quant_map F32 [16] (NF4 code book); weight.nested_absmax F32 "
                   "[ceil(n_blocks/256)]; weight.nested_quant_map F32 [256]; "
                   "weight.quant_state.bitsandbytes__nf4 U8 [len] (UTF-8 JSON with quant_type, blocksize, "
                   "dtype, shape [out, in], nested_blocksize, nested_dtype, nested_offset). The original "
                   "shape is only in that JSON.",
    ),
    "bnb_int8": dict(
        dtype=torch.float16,
        what="bitsandbytes LLM.int8() (Linear8bitLt, has_fp16_weights false) as transformers save_pretrained "
             "writes it; lm_head kept in fp16",
        quantization_config=None,
        per_linear="weight I8 [out, in]; SCB F32 [out] (per-row absmax scale); weight_format U8 [] (0 = row "
                   "major). bytes = in*out + out*4 + 1",
    ),
    "fp8": dict(
        dtype=torch.bfloat16,
        what="block-wise FP8 e4m3 as in the DeepSeek-V3 / Qwen3-FP8 releases (transformers finegrained_fp8); "
             "intermediate 160 so ceil(160/128) = 2 blocks are partial",
        config_override=dict(intermediate_size=160),
        quantization_config={"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                             "weight_block_size": FP8_BLOCK, "modules_to_not_convert": ["lm_head"]},
        per_linear="weight F8_E4M3 [out, in]; weight_scale_inv F32 [ceil(out/128), ceil(in/128)] (one scale "
                   "per 128x128 block, partial blocks rounded up). bytes = in*out + "
                   "ceil(out/128)*ceil(in/128)*4",
    ),
}


def linears(cfg):
    H, I = cfg.hidden_size, cfg.intermediate_size
    hd = H // cfg.num_attention_heads
    kv = cfg.num_key_value_heads * hd
    out = []
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}"
        out += [(f"{p}.self_attn.q_proj", H, H), (f"{p}.self_attn.k_proj", H, kv), (f"{p}.self_attn.v_proj", H, kv),
                (f"{p}.self_attn.o_proj", H, H), (f"{p}.mlp.gate_proj", H, I), (f"{p}.mlp.up_proj", H, I),
                (f"{p}.mlp.down_proj", I, H)]
    return out  # (name, in_features, out_features)


def plain_tensors(cfg, dtype):
    H, V = cfg.hidden_size, cfg.vocab_size
    t = {"model.embed_tokens.weight": torch.zeros(V, H, dtype=dtype),
         "lm_head.weight": torch.zeros(V, H, dtype=dtype),
         "model.norm.weight": torch.ones(H, dtype=dtype)}
    for i in range(cfg.num_hidden_layers):
        t[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(H, dtype=dtype)
        t[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.ones(H, dtype=dtype)
    return t


def bnb_quant_state_json(shape, dtype_name, nested_offset=0.0):
    d = {"quant_type": "nf4", "blocksize": BNB_BLOCK, "dtype": dtype_name, "shape": list(shape),
         "nested_blocksize": BNB_NESTED_BLOCK, "nested_dtype": "float32", "nested_offset": nested_offset}
    return json.dumps(d).encode("utf-8")


def quantized_linear(kind, name, fin, fout):
    """The tensors one quantized Linear(fin -> fout) leaves in the checkpoint."""
    t = {}
    if kind == "gptq":
        g = fin // GROUP
        t[f"{name}.qweight"] = torch.zeros(fin // 8, fout, dtype=torch.int32)
        t[f"{name}.qzeros"] = torch.zeros(g, fout // 8, dtype=torch.int32)
        t[f"{name}.scales"] = torch.zeros(g, fout, dtype=torch.float16)
        t[f"{name}.g_idx"] = (torch.arange(fin, dtype=torch.int32) // GROUP)
    elif kind == "awq":
        g = fin // GROUP
        t[f"{name}.qweight"] = torch.zeros(fin, fout // 8, dtype=torch.int32)
        t[f"{name}.qzeros"] = torch.zeros(g, fout // 8, dtype=torch.int32)
        t[f"{name}.scales"] = torch.zeros(g, fout, dtype=torch.float16)
    elif kind == "bnb_nf4":
        n = fin * fout
        blocks = math.ceil(n / BNB_BLOCK)
        t[f"{name}.weight"] = torch.zeros((n + 1) // 2, 1, dtype=torch.uint8)
        t[f"{name}.weight.absmax"] = torch.zeros(blocks, dtype=torch.uint8)
        t[f"{name}.weight.quant_map"] = torch.tensor(NF4, dtype=torch.float32)
        t[f"{name}.weight.nested_absmax"] = torch.zeros(math.ceil(blocks / BNB_NESTED_BLOCK), dtype=torch.float32)
        t[f"{name}.weight.nested_quant_map"] = torch.linspace(-1, 1, 256, dtype=torch.float32)
        # nested_offset = mean of the fp32 absmax values before the double quantization; any float
        js = bnb_quant_state_json([fout, fin], "bfloat16", nested_offset=0.0213623046875)
        t[f"{name}.weight.quant_state.bitsandbytes__nf4"] = torch.tensor(list(js), dtype=torch.uint8)
    elif kind == "bnb_int8":
        t[f"{name}.weight"] = torch.zeros(fout, fin, dtype=torch.int8)
        t[f"{name}.SCB"] = torch.ones(fout, dtype=torch.float32)
        t[f"{name}.weight_format"] = torch.tensor(0, dtype=torch.uint8)
    elif kind == "fp8":
        t[f"{name}.weight"] = torch.zeros(fout, fin, dtype=torch.float8_e4m3fn)
        t[f"{name}.weight_scale_inv"] = torch.ones(math.ceil(fout / FP8_BLOCK[0]), math.ceil(fin / FP8_BLOCK[1]),
                                                   dtype=torch.float32)
    else:
        raise ValueError(kind)
    return t


def nbytes(t):
    return t.numel() * t.element_size()


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, json.loads(f.read(n))


def make(kind, spec, out: Path):
    folder = out / kind
    folder.mkdir(parents=True, exist_ok=True)
    cfg_kw = dict(BASE, **spec.get("config_override", {}))
    cfg = AutoConfig.for_model("llama", **cfg_kw)
    cfg.dtype = spec["dtype"]
    qc = spec["quantization_config"]
    if kind == "bnb_nf4":
        qc = transformers.BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                             bnb_4bit_use_double_quant=True,
                                             bnb_4bit_compute_dtype=torch.bfloat16).to_dict()
    elif kind == "bnb_int8":
        qc = transformers.BitsAndBytesConfig(load_in_8bit=True).to_dict()
    cfg.quantization_config = qc
    cfg.save_pretrained(folder)

    tensors = plain_tensors(cfg, spec["dtype"])
    plain_names = sorted(tensors)
    lin = linears(cfg)
    per_shape = {}
    for name, fin, fout in lin:
        qt = quantized_linear(kind, name, fin, fout)
        tensors.update(qt)
        key = f"{fin}x{fout}"
        if key not in per_shape:
            per_shape[key] = {"in": fin, "out": fout, "logical_params": fin * fout, "count": 0,
                              "tensors": {k[len(name) + 1:]: [ST_DTYPE[v.dtype], list(v.shape), nbytes(v)]
                                          for k, v in qt.items()},
                              "stored_bytes": sum(nbytes(v) for v in qt.values())}
        per_shape[key]["count"] += 1
    save_file(dict(sorted(tensors.items())), str(folder / "model.safetensors"), metadata={"format": "pt"})

    H, V, L = cfg.hidden_size, cfg.vocab_size, cfg.num_hidden_layers
    KV = cfg.num_key_value_heads * (H // cfg.num_attention_heads)
    plain_params = sum(tensors[n].numel() for n in plain_names)
    linear_params = sum(fin * fout for _, fin, fout in lin)
    hlen, header = read_header(folder / "model.safetensors")
    data = sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
    by_dtype = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        d = by_dtype.setdefault(v["dtype"], {"tensors": 0, "bytes": 0})
        d["tensors"] += 1
        d["bytes"] += v["data_offsets"][1] - v["data_offsets"][0]
    esz = torch.empty(0, dtype=spec["dtype"]).element_size()
    exp = {
        "kind": kind,
        "generated_by": "tools/llm/make_quantized.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "what": spec["what"],
        "architecture": "LlamaForCausalLM",
        "dims": {"vocab": V, "hidden": H, "intermediate": cfg.intermediate_size, "layers": L,
                 "heads": cfg.num_attention_heads, "kv_heads": cfg.num_key_value_heads,
                 "head_dim": H // cfg.num_attention_heads, "tie_word_embeddings": False},
        "unquantized_dtype": str(spec["dtype"]).replace("torch.", ""),
        "quantization_config": qc,
        "logical_params": {
            "count": plain_params + linear_params,
            "not_quantized": plain_params,
            "quantized_linears": linear_params,
            "arithmetic": (f"embed {V}*{H} + lm_head {V}*{H} + norms ({2 * L}+1)*{H} = {plain_params}; linears per "
                           f"layer q {H}*{H} + k {H}*{KV} + v {H}*{KV} + o {H}*{H} + gate/up/down "
                           f"3*{H}*{cfg.intermediate_size} = {linear_params // L}, x{L} layers = {linear_params}"),
            "method": "what the unquantized model would have: sum of in*out of every quantized Linear plus the "
                      "elements of the tensors stored unquantized. Packing tensors (qzeros, scales, g_idx, "
                      "absmax, quant maps, quant state, SCB, weight_format, weight_scale_inv) are not parameters.",
        },
        "stored": {
            "tensors": len(tensors),
            "data_bytes": data,
            "header_bytes": hlen,
            "file_bytes": (folder / "model.safetensors").stat().st_size,
            "by_dtype": by_dtype,
            "not_quantized_bytes": plain_params * esz,
            "quantized_linear_bytes": data - plain_params * esz,
            "method": "sum of the data_offsets spans in the safetensors header; file_bytes = 8 + header_bytes + "
                      "data_bytes",
        },
        "unquantized_bytes_in_that_dtype": (plain_params + linear_params) * esz,
        "per_linear": {"layout": spec["per_linear"], "shapes": per_shape},
        "plain_tensors": plain_names,
    }
    if kind == "bnb_nf4":
        exp["logical_params"]["after_loading"] = {
            "sum_numel_model_parameters": plain_params + linear_params // 2,
            "transformers_num_parameters": plain_params + linear_params,
            "note": "loaded with transformers + bitsandbytes, each Params4bit is the packed uint8 tensor, so "
                    "sum(p.numel() for p in model.parameters()) counts in*out/2 per quantized Linear; "
                    "model.num_parameters() multiplies 4-bit parameters by 2 and gives the logical count "
                    "(checked with bitsandbytes 0.50.2 on CPU)",
        }
    (folder / "expected.json").write_text(jsonfmt.dumps(exp))
    return exp


def check_bnb():
    """Compare the hand-written bitsandbytes layouts with what the real library serializes (CPU)."""
    import bitsandbytes as bnb

    ok = True
    torch.manual_seed(0)
    for fin, fout in [(64, 32), (128, 64)]:
        lin = bnb.nn.Linear4bit(fin, fout, bias=False, compute_dtype=torch.bfloat16, compress_statistics=True,
                                quant_type="nf4", quant_storage=torch.uint8)
        lin.weight = bnb.nn.Params4bit(torch.randn(fout, fin, dtype=torch.bfloat16), requires_grad=False,
                                       quant_type="nf4", compress_statistics=True, quant_storage=torch.uint8)
        lin = lin.to("cpu")
        real = {("x." + k): v for k, v in lin.state_dict().items()}
        mine = quantized_linear("bnb_nf4", "x", fin, fout)
        ok &= compare("nf4", fin, fout, real, mine)
        rj = json.loads(bytes(real["x.weight.quant_state.bitsandbytes__nf4"].tolist()))
        mj = json.loads(bytes(mine["x.weight.quant_state.bitsandbytes__nf4"].tolist()))
        if set(rj) != set(mj) or any(rj[k] != mj[k] for k in rj if k != "nested_offset"):
            print("  quant_state JSON differs:", rj, mj)
            ok = False
        if not torch.allclose(real["x.weight.quant_map"], mine["x.weight.quant_map"]):
            print("  quant_map differs")
            ok = False
        l8 = bnb.nn.Linear8bitLt(fin, fout, bias=False, has_fp16_weights=False)
        l8.weight = bnb.nn.Int8Params(torch.randn(fout, fin, dtype=torch.float16), requires_grad=False,
                                      has_fp16_weights=False)
        l8 = l8.to("cpu")
        real = {("x." + k): v for k, v in l8.state_dict().items()}
        ok &= compare("int8", fin, fout, real, quantized_linear("bnb_int8", "x", fin, fout))
    print("bitsandbytes", bnb.__version__, "layouts match" if ok else "MISMATCH")
    return ok


def compare(label, fin, fout, real, mine):
    # the quant-state JSON's length depends on the printed nested_offset float: compare dtype and rank only
    def sig(k, v):
        return (v.dtype, v.dim()) if k.endswith("bitsandbytes__nf4") else (v.dtype, tuple(v.shape))
    r = {k: sig(k, v) for k, v in real.items()}
    m = {k: sig(k, v) for k, v in mine.items()}
    print(f"{label} {fin}->{fout}: {'same' if r == m else 'DIFFERENT'}")
    if r != m:
        print("  real:", r)
        print("  mine:", m)
    return r == m


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check-bnb", action="store_true")
    args = ap.parse_args()
    if args.check_bnb:
        sys.exit(0 if check_bnb() else 1)
    for kind, spec in KINDS.items():
        e = make(kind, spec, args.out)
        print(f"{kind:9s} logical params {e['logical_params']['count']:7d}  stored {e['stored']['data_bytes']:7d} B "
              f"(file {e['stored']['file_bytes']} B)")


if __name__ == "__main__":
    main()
