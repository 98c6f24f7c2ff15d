"""Corpus models that are generated here rather than downloaded.

Every recipe starts from a randomly initialised model built from a config (no
hub, no pretrained weights), exports it with torch's legacy exporter (opset 17),
then runs onnxruntime's own tooling on it: the transformer optimizer (fused
com.microsoft ops), float16 conversion, dynamic / static (QDQ and QOperator)
quantization and 4-bit MatMulNBits weight-only quantization.  A few more come
from other producers: skl2onnx (ai.onnx.ml ops, Scan, ZipMap) and a
TorchScript-scripted loop (Loop).

Each recipe is a function ``build(out_path, deps)`` registered in RECIPES with
the models it depends on; fetch.py calls them in order.  Seeds are fixed, so a
rerun with the pinned requirements gives the same graphs (float bits may still
differ across CPUs for the calibrated quantizers).
"""

import os
import tempfile

import numpy as np
import onnx

RECIPES = {}


def recipe(name, text, deps=(), inputs=None):
    """Register a recipe. inputs: {name: feed spec} for the truth run (see fetch.py)."""
    def wrap(fn):
        RECIPES[name] = {"fn": fn, "text": text, "deps": list(deps), "inputs": inputs or {}}
        return fn
    return wrap


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def _torch():
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    return torch


def dedegenerate(torch, module, seed=0):
    """Perturb parameters/buffers whose elements are all equal (fresh LayerNorm/BatchNorm/bias init).

    The legacy exporter de-duplicates initializers by value and would otherwise
    replace the copies by Identity nodes, which real (trained) exports do not have.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if not t.is_floating_point() or t.numel() < 2:
                continue
            flat = t.reshape(-1)
            if bool((flat == flat[0]).all()):
                noise = torch.randn(t.shape, generator=g, dtype=t.dtype) * 0.02
                if name.endswith("running_var"):
                    t.copy_(t + noise.abs())
                else:
                    t.add_(noise)
    return module


def legacy_export(torch, module, args, path, input_names, output_names, dynamic_axes):
    import warnings
    dedegenerate(torch, module)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, dynamo=False, opset_version=17,
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, do_constant_folding=True)
    m = onnx.load(path)
    onnx.checker.check_model(m)


def _save(model, path):
    """Save with every tensor embedded (all recipe models are < 2 GiB)."""
    if isinstance(model, onnx.ModelProto):
        onnx.save_model(model, path, save_as_external_data=False)
    else:  # onnxruntime.transformers OnnxModel
        model.save_model_to_file(path, use_external_data_format=False)


class RandomReader:
    """CalibrationDataReader over a few seeded random batches."""

    def __init__(self, make_batch, n=4, seed=0):
        self.rng = np.random.default_rng(seed)
        self.batches = [make_batch(self.rng) for _ in range(n)]
        self.it = iter(self.batches)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        self.it = iter(self.batches)


def _quantize_static(src, dst, reader, fmt, per_channel=False, extra=None):
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    with tempfile.TemporaryDirectory() as tmp:
        # the quantizer writes its augmented model next to a temporary copy
        tmp_src = os.path.join(tmp, "model.onnx")
        onnx.save_model(onnx.load(src), tmp_src)
        quantize_static(tmp_src, dst, reader,
                        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        per_channel=per_channel, extra_options=extra or {})
    onnx.checker.check_model(dst)


def _quantize_dynamic(src, dst, op_types=None, extra=None):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8, op_types_to_quantize=op_types, extra_options=extra)
    onnx.checker.check_model(dst)


def _nbits(src, dst, block_size=32, op_types=None):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    q = MatMulNBitsQuantizer(onnx.load(src), bits=4, block_size=block_size, is_symmetric=True,
                             op_types_to_quantize=op_types)
    q.process()
    _save(q.model.model, dst)


def _optimize(src, dst, model_type, num_heads, hidden):
    from onnxruntime.transformers.optimizer import optimize_model
    # opt_level=0: only the python fusions, no onnxruntime graph optimisation pass
    opt = optimize_model(src, model_type=model_type, num_heads=num_heads, hidden_size=hidden, opt_level=0)
    _save(opt, dst)


def _fp16(src, dst, model_type, num_heads, hidden):
    from onnxruntime.transformers.optimizer import optimize_model
    m = optimize_model(src, model_type=model_type, num_heads=num_heads, hidden_size=hidden, opt_level=0,
                       only_onnxruntime=False)
    m.convert_float_to_float16(keep_io_types=True)
    _save(m, dst)


# --------------------------------------------------------------------------
# BERT (4 layers, hidden 256, 4 heads, vocab 30522), random init
# --------------------------------------------------------------------------

BERT = dict(vocab=30522, hidden=256, layers=4, heads=4, ffn=1024, seq=128)
BERT_INPUTS = {
    "input_ids": {"shape": [1, BERT["seq"]], "int_range": [0, BERT["vocab"]]},
    "attention_mask": {"shape": [1, BERT["seq"]], "fill": 1},
    "token_type_ids": {"shape": [1, BERT["seq"]], "int_range": [0, 2]},
}


def _bert_batch(rng):
    s = BERT["seq"]
    return {"input_ids": rng.integers(0, BERT["vocab"], (1, s)).astype(np.int64),
            "attention_mask": np.ones((1, s), np.int64),
            "token_type_ids": rng.integers(0, 2, (1, s)).astype(np.int64)}


@recipe("bert_export", "transformers BertModel(BertConfig(hidden 256, 4 layers, 4 heads, ffn 1024, vocab 30522), "
        "random init, eager attention) -> torch.onnx.export(dynamo=False, opset 17), dynamic batch/sequence",
        inputs=BERT_INPUTS)
def bert_export(out, deps):
    torch = _torch()
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=BERT["vocab"], hidden_size=BERT["hidden"], num_hidden_layers=BERT["layers"],
                     num_attention_heads=BERT["heads"], intermediate_size=BERT["ffn"],
                     max_position_embeddings=512, attn_implementation="eager")
    base = BertModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, b):
            super().__init__()
            self.b = b

        def forward(self, input_ids, attention_mask, token_type_ids):
            o = self.b(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                       return_dict=True)
            return o.last_hidden_state, o.pooler_output

    feed = _bert_batch(np.random.default_rng(0))
    args = tuple(torch.from_numpy(feed[k]) for k in ("input_ids", "attention_mask", "token_type_ids"))
    names = ["input_ids", "attention_mask", "token_type_ids"]
    legacy_export(torch, Wrap(base).eval(), args, out, names, ["last_hidden_state", "pooler_output"],
                  {k: {0: "batch", 1: "sequence"} for k in names})


@recipe("bert_opt", "onnxruntime.transformers.optimizer.optimize_model(bert_export, model_type='bert', "
        "num_heads=4, hidden_size=256, opt_level=0)", deps=["bert_export"], inputs=BERT_INPUTS)
def bert_opt(out, deps):
    _optimize(deps["bert_export"], out, "bert", BERT["heads"], BERT["hidden"])


@recipe("bert_opt_fp16", "bert_export -> optimize_model(model_type='bert') -> "
        "OnnxModel.convert_float_to_float16(keep_io_types=True)", deps=["bert_export"], inputs=BERT_INPUTS)
def bert_opt_fp16(out, deps):
    _fp16(deps["bert_export"], out, "bert", BERT["heads"], BERT["hidden"])


@recipe("bert_dynq", "onnxruntime.quantization.quantize_dynamic(bert_export, weight_type=QInt8)",
        deps=["bert_export"], inputs=BERT_INPUTS)
def bert_dynq(out, deps):
    _quantize_dynamic(deps["bert_export"], out)


@recipe("bert_opt_dynq", "onnxruntime.quantization.quantize_dynamic(bert_opt, weight_type=QInt8) "
        "(quantizes the fused Attention too)", deps=["bert_opt"], inputs=BERT_INPUTS)
def bert_opt_dynq(out, deps):
    _quantize_dynamic(deps["bert_opt"], out, extra={"DefaultTensorType": onnx.TensorProto.FLOAT})


@recipe("bert_qdq", "onnxruntime.quantization.quantize_static(bert_export, QuantFormat.QDQ, U8 activations, "
        "S8 weights, MinMax over 4 random batches)", deps=["bert_export"], inputs=BERT_INPUTS)
def bert_qdq(out, deps):
    _quantize_static(deps["bert_export"], out, RandomReader(_bert_batch), "qdq")


@recipe("bert_qop", "onnxruntime.quantization.quantize_static(bert_export, QuantFormat.QOperator, U8/S8, "
        "MinMax over 4 random batches)", deps=["bert_export"], inputs=BERT_INPUTS)
def bert_qop(out, deps):
    _quantize_static(deps["bert_export"], out, RandomReader(_bert_batch), "qop")


@recipe("bert_nbits4", "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer(bert_export, "
        "bits=4, block_size=32, is_symmetric=True)", deps=["bert_export"], inputs=BERT_INPUTS)
def bert_nbits4(out, deps):
    _nbits(deps["bert_export"], out)


# --------------------------------------------------------------------------
# GPT-2 (4 layers, n_embd 256, 4 heads, vocab 50257), random init, no KV cache
# --------------------------------------------------------------------------

GPT2 = dict(vocab=50257, hidden=256, layers=4, heads=4, seq=64)
GPT2_INPUTS = {
    "input_ids": {"shape": [1, GPT2["seq"]], "int_range": [0, GPT2["vocab"]]},
    "attention_mask": {"shape": [1, GPT2["seq"]], "fill": 1},
}


def _gpt2_batch(rng):
    s = GPT2["seq"]
    return {"input_ids": rng.integers(0, GPT2["vocab"], (1, s)).astype(np.int64),
            "attention_mask": np.ones((1, s), np.int64)}


@recipe("gpt2_export", "transformers GPT2LMHeadModel(GPT2Config(n_layer 4, n_embd 256, n_head 4, vocab 50257), "
        "random init, eager attention, use_cache=False) -> torch.onnx.export(dynamo=False, opset 17)",
        inputs=GPT2_INPUTS)
def gpt2_export(out, deps):
    torch = _torch()
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=GPT2["vocab"], n_embd=GPT2["hidden"], n_layer=GPT2["layers"], n_head=GPT2["heads"],
                     n_positions=1024, attn_implementation="eager", use_cache=False)
    base = GPT2LMHeadModel(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, b):
            super().__init__()
            self.b = b

        def forward(self, input_ids, attention_mask):
            return self.b(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                          return_dict=True).logits

    feed = _gpt2_batch(np.random.default_rng(0))
    args = tuple(torch.from_numpy(feed[k]) for k in ("input_ids", "attention_mask"))
    names = ["input_ids", "attention_mask"]
    legacy_export(torch, Wrap(base).eval(), args, out, names, ["logits"],
                  {k: {0: "batch", 1: "sequence"} for k in names})


@recipe("gpt2_opt", "optimize_model(gpt2_export, model_type='gpt2', num_heads=4, hidden_size=256, opt_level=0)",
        deps=["gpt2_export"], inputs=GPT2_INPUTS)
def gpt2_opt(out, deps):
    _optimize(deps["gpt2_export"], out, "gpt2", GPT2["heads"], GPT2["hidden"])


@recipe("gpt2_opt_fp16", "gpt2_export -> optimize_model(model_type='gpt2') -> "
        "convert_float_to_float16(keep_io_types=True)", deps=["gpt2_export"], inputs=GPT2_INPUTS)
def gpt2_opt_fp16(out, deps):
    _fp16(deps["gpt2_export"], out, "gpt2", GPT2["heads"], GPT2["hidden"])


@recipe("gpt2_dynq", "quantize_dynamic(gpt2_export, weight_type=QInt8)", deps=["gpt2_export"], inputs=GPT2_INPUTS)
def gpt2_dynq(out, deps):
    _quantize_dynamic(deps["gpt2_export"], out)


@recipe("gpt2_nbits4", "MatMulNBitsQuantizer(gpt2_opt, bits=4, block_size=32, is_symmetric=True, "
        "op_types_to_quantize=(MatMul, Gather)): MatMulNBits and GatherBlockQuantized (token embedding)",
        deps=["gpt2_opt"], inputs=GPT2_INPUTS)
def gpt2_nbits4(out, deps):
    _nbits(deps["gpt2_opt"], out, op_types=("MatMul", "Gather"))


# --------------------------------------------------------------------------
# ViT (4 layers, hidden 256, 4 heads, 224x224, patch 16, 10 labels), random init
# --------------------------------------------------------------------------

VIT = dict(hidden=256, layers=4, heads=4, ffn=1024, image=224, patch=16, labels=10)
VIT_INPUTS = {"pixel_values": {"shape": [1, 3, VIT["image"], VIT["image"]], "float_range": [-1, 1]}}


def _image_batch(rng, size=224):
    return rng.uniform(-1, 1, (1, 3, size, size)).astype(np.float32)


@recipe("vit_export", "transformers ViTForImageClassification(ViTConfig(hidden 256, 4 layers, 4 heads, ffn 1024, "
        "224x224, patch 16, 10 labels), random init, eager attention) -> torch.onnx.export(dynamo=False, opset 17)",
        inputs=VIT_INPUTS)
def vit_export(out, deps):
    torch = _torch()
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(hidden_size=VIT["hidden"], num_hidden_layers=VIT["layers"], num_attention_heads=VIT["heads"],
                    intermediate_size=VIT["ffn"], image_size=VIT["image"], patch_size=VIT["patch"],
                    num_labels=VIT["labels"], attn_implementation="eager")
    base = ViTForImageClassification(cfg).eval()

    class Wrap(torch.nn.Module):
        def __init__(self, b):
            super().__init__()
            self.b = b

        def forward(self, pixel_values):
            return self.b(pixel_values=pixel_values, return_dict=True).logits

    x = torch.from_numpy(_image_batch(np.random.default_rng(0)))
    legacy_export(torch, Wrap(base).eval(), (x,), out, ["pixel_values"], ["logits"], {"pixel_values": {0: "batch"}})


def _vit_batch(rng):
    return {"pixel_values": _image_batch(rng)}


@recipe("vit_opt", "optimize_model(vit_export, model_type='vit', num_heads=4, hidden_size=256, opt_level=0)",
        deps=["vit_export"], inputs=VIT_INPUTS)
def vit_opt(out, deps):
    _optimize(deps["vit_export"], out, "vit", VIT["heads"], VIT["hidden"])


@recipe("vit_qdq", "quantize_static(vit_export, QuantFormat.QDQ, U8/S8, per_channel=True, MinMax over 4 random images)",
        deps=["vit_export"], inputs=VIT_INPUTS)
def vit_qdq(out, deps):
    _quantize_static(deps["vit_export"], out, RandomReader(_vit_batch), "qdq", per_channel=True)


@recipe("vit_dynq", "quantize_dynamic(vit_export, weight_type=QInt8)", deps=["vit_export"], inputs=VIT_INPUTS)
def vit_dynq(out, deps):
    _quantize_dynamic(deps["vit_export"], out)


# --------------------------------------------------------------------------
# torchvision ResNet-18 (weights=None), random init
# --------------------------------------------------------------------------

RESNET_INPUTS = {"input": {"shape": [1, 3, 224, 224], "float_range": [-1, 1]}}


def _resnet_batch(rng):
    return {"input": _image_batch(rng)}


@recipe("resnet18_export", "torchvision.models.resnet18(weights=None), eval, random init -> "
        "torch.onnx.export(dynamo=False, opset 17, constant folding: BatchNorm folded into Conv), dynamic batch",
        inputs=RESNET_INPUTS)
def resnet18_export(out, deps):
    torch = _torch()
    import torchvision
    m = torchvision.models.resnet18(weights=None).eval()
    x = torch.from_numpy(_image_batch(np.random.default_rng(0)))
    legacy_export(torch, m, (x,), out, ["input"], ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


@recipe("resnet18_qdq", "quantize_static(resnet18_export, QuantFormat.QDQ, U8/S8, per_channel=True, "
        "MinMax over 4 random images)", deps=["resnet18_export"], inputs=RESNET_INPUTS)
def resnet18_qdq(out, deps):
    _quantize_static(deps["resnet18_export"], out, RandomReader(_resnet_batch), "qdq", per_channel=True)


@recipe("resnet18_qop", "quantize_static(resnet18_export, QuantFormat.QOperator, U8/S8, MinMax over 4 random "
        "images): QLinearConv, QLinearAdd, QLinearGlobalAveragePool, QGemm", deps=["resnet18_export"],
        inputs=RESNET_INPUTS)
def resnet18_qop(out, deps):
    _quantize_static(deps["resnet18_export"], out, RandomReader(_resnet_batch), "qop")


@recipe("resnet18_dynq", "quantize_dynamic(resnet18_export, weight_type=QInt8, op_types=[Conv, MatMul, Gemm]): "
        "ConvInteger + DynamicQuantizeLinear", deps=["resnet18_export"], inputs=RESNET_INPUTS)
def resnet18_dynq(out, deps):
    _quantize_dynamic(deps["resnet18_export"], out, op_types=["Conv", "MatMul", "Gemm"])


@recipe("resnet18_fp16", "onnxruntime.transformers.onnx_model.OnnxModel(resnet18_export)"
        ".convert_float_to_float16(keep_io_types=True), then OnnxModel.topological_sort()", deps=["resnet18_export"], inputs=RESNET_INPUTS)
def resnet18_fp16(out, deps):
    from onnxruntime.transformers.onnx_model import OnnxModel
    m = OnnxModel(onnx.load(deps["resnet18_export"]))
    m.convert_float_to_float16(keep_io_types=True)
    m.topological_sort()  # the input Cast it inserts lands after its consumers
    onnx.checker.check_model(m.model)
    _save(m, out)


# --------------------------------------------------------------------------
# control flow and classic ML
# --------------------------------------------------------------------------

@recipe("torchscript_loop_rnn", "torch.jit.script'ed Elman RNN cell iterated over the time axis (Python for loop "
        "over x.size(1)) -> torch.onnx.export(dynamo=False, opset 17): a Loop whose trip count is read from "
        "the input shape", inputs={"x": {"shape": [2, 12, 16], "float_range": [-1, 1]}})
def torchscript_loop_rnn(out, deps):
    torch = _torch()

    class LoopRNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ih = torch.nn.Linear(16, 32)
            self.hh = torch.nn.Linear(32, 32)
            self.head = torch.nn.Linear(32, 4)

        def forward(self, x):
            h = torch.zeros(x.size(0), 32, dtype=x.dtype)
            for t in range(x.size(1)):
                h = torch.tanh(self.ih(x[:, t]) + self.hh(h))
            return self.head(h)

    m = torch.jit.script(LoopRNN().eval())
    x = torch.randn(2, 12, 16)
    legacy_export(torch, m, (x,), out, ["x"], ["y"], {"x": {0: "batch", 1: "time"}, "y": {0: "batch"}})


def _skl_save(m, out):
    """skl2onnx orders opset_import by a set's iteration order (varies with PYTHONHASHSEED): sort it."""
    ops = sorted(((o.domain, o.version) for o in m.opset_import))
    del m.opset_import[:]
    for d, v in ops:
        m.opset_import.add(domain=d, version=v)
    onnx.checker.check_model(m)
    _save(m, out)


def _iris():
    from sklearn.datasets import load_iris
    X, y = load_iris(return_X_y=True)
    return X.astype(np.float32), y


@recipe("skl_knn_scan", "scikit-learn KNeighborsClassifier(3) fit on iris -> skl2onnx.to_onnx(target_opset 17): "
        "pairwise distances via Scan, TopK, ArrayFeatureExtractor, ZipMap",
        inputs={"X": {"shape": [5, 4], "float_range": [0, 8]}})
def skl_knn_scan(out, deps):
    from skl2onnx import to_onnx
    from sklearn.neighbors import KNeighborsClassifier
    X, y = _iris()
    m = to_onnx(KNeighborsClassifier(3).fit(X, y), X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    _skl_save(m, out)


@recipe("skl_rf_pipeline", "scikit-learn Pipeline(StandardScaler, RandomForestClassifier(10 trees, depth 4, seed 0)) "
        "fit on iris -> skl2onnx.to_onnx: Scaler, TreeEnsembleClassifier, ZipMap",
        inputs={"X": {"shape": [5, 4], "float_range": [0, 8]}})
def skl_rf_pipeline(out, deps):
    from skl2onnx import to_onnx
    from sklearn.ensemble import RandomForestClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    X, y = _iris()
    est = make_pipeline(StandardScaler(), RandomForestClassifier(10, max_depth=4, random_state=0)).fit(X, y)
    m = to_onnx(est, X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    _skl_save(m, out)
