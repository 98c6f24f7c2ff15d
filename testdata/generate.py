#!/usr/bin/env python3
"""Fixture generator for nnlint's tests.  Run via `bash testdata/generate.sh`.

Everything written here is deterministic (fixed seeds) and the script is
idempotent: running it again rewrites the same files.  Ground truth is taken
from onnxruntime / onnx / PyTorch only -- never from nnlint itself.

Fixtures (paths relative to testdata/):

models/ops/*.onnx
    The "op zoo": tiny one- or few-node models built with onnx.helper (opset 17
    unless the case needs another; the case name says so when it does).  Every
    supported op appears with a variety of attributes, plus "shapesub_*" models
    in which a shape is computed at run time (Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape and friends), so shape inference has to propagate
    values.  Cases named ms_* use onnxruntime's com.microsoft contrib ops
    (opset 1 of that domain imported).  Weights are small random tensors stored as raw_data.  Graph inputs
    use the symbolic first dim "N" (and "seq" in a few cases); graph outputs
    carry only an element type (no shape) and there is NO value_info for
    intermediates, so nnlint has to infer every shape itself.

models/conv3x3_64_128.onnx
    One Conv 3x3, 64->128, bias, pads 1, input [N,64,56,56].  Hand-checkable:
    64*128*9 + 128 = 73,856 parameters.

models/torch/*.onnx  (needs torch; skipped with a message when missing)
    minicnn.onnx            small custom CNN (MiniCNN below), embedded weights;
                            the README demo model.
    resnet18.onnx, mobilenet_v2.onnx, vgg16.onnx, efficientnet_b0.onnx,
    vit_b_16.onnx           torchvision models (weights=None, seeded init),
                            all initializers stored externally in
                            <name>.onnx.data, which is DELETED after the
                            checks: only the graph is committed.  Tests must
                            recreate a (sparse, zero-filled) data file of the
                            length recorded in expected/*.json.
    tiny_transformer.onnx   nn.Embedding(1000,64) + 2-layer
                            nn.TransformerEncoder (d_model 64, 4 heads, ff 128,
                            batch_first), int64 ids [batch, seq], both dims
                            dynamic, embedded weights (legacy exporter).
    tiny_transformer_dynamo.onnx  the same module exported with dynamo=True.
    Legacy exports use dynamo=False, training=PRESERVE,
    do_constant_folding=False, opset 17, dynamic batch dim "batch".

    Note on initialisation: freshly initialised modules contain many tensors
    whose elements are all equal (BatchNorm/LayerNorm weight=1, bias=0,
    running_mean=0, running_var=1, zero Linear biases).  In eval mode the
    legacy exporter de-duplicates initializers *by value*, which would merge
    those tensors into one and make the ONNX parameter count differ from
    PyTorch's.  To mimic trained weights, every float parameter/buffer whose
    elements are all equal is replaced by seeded random values (running_var
    kept positive), and any tensor equal to an earlier one (nn.TransformerEncoder
    deep-copies its layer) gets seeded noise added, before export.

    tiny_transformer.onnx quirk: the legacy exporter of torch 2.15 bakes the
    traced sequence length into nn.MultiheadAttention's Reshape shapes, so the
    model is traced at seq 7 (the ground-truth seq) and only runs at seq 7
    although its input says [batch, seq]; see "notes" in its expected file.

rules/<rule-name>/fire*.onnx, pass*.onnx, nnlint.toml
    Lint-rule fixtures (gen_rules; `generate.py --rules-only` writes only
    these): fire*.onnx must produce a finding of the rule, pass*.onnx must
    not; nnlint.toml lowers a rule's thresholds where a small fixture needs
    it.  Named nodes, seeded random non-zero weights, symbolic batch "N".
    Checked against hand-computed values in tests/lint_rules.rs.

models/rewrite/  (gen_rewrite; `generate.py --rewrite-only` writes only these)
    Models for `nnlint rewrite` and tests/interop, built with onnx.helper + numpy (no torch),
    He-normal seeded weights, opset 17, input "input" [batch,3,16,16], output "logits" [batch,10],
    torch-style names (node /features/features.0/Conv, weight features.0.weight), a doc_string,
    producer "nnlint-testdata", metadata_props and value_info for two intermediates (so a rewrite
    can be checked to keep them).
    vgg_like.onnx           3x3 convs 3->16, 16->32 (+MaxPool), 32->32 (+MaxPool), Flatten ->
                            Gemm 512->64 -> Gemm 64->10.
    resnet_like.onnx        stem conv+BN, a basic block 16->16, a stride-2 block 16->32 with a 1x1
                            conv+BN shortcut, GlobalAveragePool -> Gemm 32->10; random BN statistics.
    resnet_like_ext.onnx    the same model, tensors of 1 KiB and more in resnet_like_ext.onnx.data
                            (committed).
    nnlint.toml             lowers heavy-standard-conv min-macs and oversized-linear min-params so
                            NL101/NL102/NL103 fire on these models at batch 1.

expected/<model path relative to models/, '/' -> '__'>.json
    Ground truth per model, e.g. expected/ops__conv_asym_pads.json,
    expected/torch__resnet18.json, expected/conv3x3_64_128.json:
    {
      "model": "models/ops/conv_asym_pads.onnx",
      "batch": 2,
      "dims": {"N": 2},                 # value used for every dim_param of the inputs
      "source": "onnxruntime 1.32.0",   # who measured "values"
      "values": {"<name>": {"shape": [2, 8, 15, 17], "dtype": "float32"}, ...},
      "skipped_values": {"<name>": "<why>"},       # only when non-empty
      "onnx_shape_inference": {"<name>": [null, 8, 15, 17] | null, ...},
      "initializers": {"count": 2, "elements": 224, "bytes": 896},
      "torch": {"params": ..., "buffers": ..., "param_tensors": ...},   # torch exports only
      "external_data": {"file": "resnet18.onnx.data", "length": ...}    # deleted data files only
    }
    "values" holds every graph input and every node output, measured by
    running the model in onnxruntime (all node outputs added as graph
    outputs, graph optimisations disabled) on random inputs with batch 2 and
    seq 7.  When onnxruntime cannot run a model at all, onnx.reference is used
    instead and "source" says so.  "onnx_shape_inference" is what
    onnx.shape_inference.infer_shapes(model, data_prop=True) says for the same
    names (null = unknown, symbolic dims as strings); informational only.
    "initializers" is counted from the ONNX file with the onnx package.
    "torch": params = sum(p.numel() for p in model.parameters()), buffers =
    total elements of buffers named running_mean/running_var, param_tensors =
    number of parameters.

ort/<same key as expected/>.json  (gen_ort_values; `generate.py --ort-values-only` writes only
these, from the models already on disk, importing no torch)
    onnxruntime's VALUES of the inputs and of every node output, for models/ops/*.onnx,
    models/conv3x3_64_128.onnx and models/rewrite/*.onnx, so a test can run nnlint's checker
    (src/verify) on the same inputs and compare op by op:
    {
      "model": "models/ops/conv_basic.onnx",
      "source": "onnxruntime 1.32.0",
      "dims": {"N": 2},
      "inputs":  [{"name": "X", "dtype": "float32", "shape": [2, 3, 16, 16], "values": [...]}],
      "outputs": [{"name": "Y", "dtype": "float32", "shape": [2, 8, 16, 16], "values": [...]}],
      "skipped": [{"name": ..., "dtype": ..., "shape": [...], "reason": "...", "kind": "input"|"output"}]
    }
    inputs: graph inputs that are not initializers, the same seeded feeds as expected/ (make_feeds,
    same seed and integer bounds).  outputs: every node output of the main graph in graph order,
    from a copy with all of them as graph outputs, optimisations disabled, one thread.  values:
    flat, row-major; floats as the float64 equal to the value (Python repr, round-trips exactly;
    float16/float32 -> float64 is exact), NaN/inf as "nan"/"inf"/"-inf"; bool as 0/1.  A tensor of
    more than ORT_MAX_ELEMENTS (65,536) elements is listed in "skipped" instead; a model gets no file
    when its external data is missing, onnxruntime cannot run it or the file would exceed
    ORT_MAX_FILE_BYTES (300,000 bytes); the reason is printed.  Stale files are removed.
"""
import copy
import hashlib
import json
import os
import shutil
import sys
import traceback

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "models")
EXPECTED = os.path.join(HERE, "expected")
BATCH = 2
SEQ = 7
DIM_VALUES = {"N": BATCH, "batch": BATCH, "seq": SEQ}
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min

F = TensorProto.FLOAT
I64 = TensorProto.INT64
BOOL = TensorProto.BOOL

NOTES = []  # things that failed or were skipped; printed at the end


def note(msg):
    print("NOTE:", msg)
    NOTES.append(msg)


# --------------------------------------------------------------------------
# op zoo helpers
# --------------------------------------------------------------------------

class Case:
    def __init__(self, name, nodes, inputs, outputs, inits=None, opset=17,
                 feed_high=None):
        self.name = name
        self.nodes = nodes
        self.inputs = inputs        # [(name, elem_type, shape)]
        self.outputs = outputs      # [name | (name, elem_type)]
        self.inits = inits or {}    # name -> np.ndarray
        self.opset = opset
        self.feed_high = feed_high or {}  # int input name -> exclusive upper bound


def W(rng, *shape):
    """Small random float32 weight."""
    return (rng.standard_normal(shape) * 0.1).astype(np.float32)


def i64(*v):
    return np.array(v, dtype=np.int64)


def f32(*v):
    return np.array(v, dtype=np.float32)


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def build_case(c):
    inputs = [helper.make_tensor_value_info(n, t, s) for n, t, s in c.inputs]
    outputs = []
    for o in c.outputs:
        n, t = (o, F) if isinstance(o, str) else o
        outputs.append(helper.make_tensor_value_info(n, t, None))
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in c.inits.items()]
    graph = helper.make_graph(c.nodes, c.name, inputs, outputs, inits)
    ir = (8 if c.opset <= 18 else 9 if c.opset <= 20 else 10 if c.opset <= 22
          else helper.find_min_ir_version_for([helper.make_opsetid("", c.opset)]))
    opsets = [helper.make_opsetid("", c.opset)]
    if any(n.domain == "com.microsoft" for n in c.nodes):
        opsets.append(helper.make_opsetid("com.microsoft", 1))
    m = helper.make_model(graph, opset_imports=opsets,
                          producer_name="nnlint-testdata", ir_version=ir)
    return m


def zoo_cases():
    rng = np.random.default_rng(1234)
    C = []
    X4 = [("X", F, ["N", 3, 16, 16])]

    # ---------------- Conv ----------------
    C.append(Case("conv_basic", [node("Conv", ["X", "W", "B"], ["Y"], pads=[1, 1, 1, 1])],
                  X4, ["Y"], {"W": W(rng, 8, 3, 3, 3), "B": W(rng, 8)}))
    C.append(Case("conv_strides", [node("Conv", ["X", "W", "B"], ["Y"], strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[3, 3])],
                  X4, ["Y"], {"W": W(rng, 8, 3, 3, 3), "B": W(rng, 8)}))
    C.append(Case("conv_dilations", [node("Conv", ["X", "W"], ["Y"], dilations=[2, 2])],
                  X4, ["Y"], {"W": W(rng, 4, 3, 3, 3)}))
    C.append(Case("conv_asym_pads", [node("Conv", ["X", "W", "B"], ["Y"], pads=[0, 1, 1, 2])],
                  X4, ["Y"], {"W": W(rng, 8, 3, 3, 3), "B": W(rng, 8)}))
    C.append(Case("conv_strides_dilations_pads", [node("Conv", ["X", "W"], ["Y"], strides=[2, 1], dilations=[1, 2], pads=[1, 2, 0, 2], kernel_shape=[3, 3])],
                  X4, ["Y"], {"W": W(rng, 6, 3, 3, 3)}))
    X15 = [("X", F, ["N", 3, 15, 16])]
    for ap in ["SAME_UPPER", "SAME_LOWER"]:
        C.append(Case("conv_auto_pad_" + ap.lower(), [node("Conv", ["X", "W", "B"], ["Y"], auto_pad=ap, strides=[2, 2])],
                      X15, ["Y"], {"W": W(rng, 5, 3, 4, 4), "B": W(rng, 5)}))
    C.append(Case("conv_auto_pad_same_upper_stride1", [node("Conv", ["X", "W"], ["Y"], auto_pad="SAME_UPPER")],
                  X15, ["Y"], {"W": W(rng, 5, 3, 4, 2)}))
    C.append(Case("conv_auto_pad_valid", [node("Conv", ["X", "W"], ["Y"], auto_pad="VALID", strides=[2, 2])],
                  X15, ["Y"], {"W": W(rng, 5, 3, 3, 3)}))
    C.append(Case("conv_group2", [node("Conv", ["X", "W", "B"], ["Y"], group=2, pads=[1, 1, 1, 1])],
                  [("X", F, ["N", 4, 8, 8])], ["Y"], {"W": W(rng, 6, 2, 3, 3), "B": W(rng, 6)}))
    C.append(Case("conv_depthwise", [node("Conv", ["X", "W", "B"], ["Y"], group=8, pads=[1, 1, 1, 1], strides=[2, 2])],
                  [("X", F, ["N", 8, 16, 16])], ["Y"], {"W": W(rng, 8, 1, 3, 3), "B": W(rng, 8)}))
    C.append(Case("conv_depthwise_multiplier2", [node("Conv", ["X", "W"], ["Y"], group=8, pads=[2, 2, 2, 2])],
                  [("X", F, ["N", 8, 16, 16])], ["Y"], {"W": W(rng, 16, 1, 5, 5)}))
    C.append(Case("conv_1x1_no_bias", [node("Conv", ["X", "W"], ["Y"])],
                  X4, ["Y"], {"W": W(rng, 16, 3, 1, 1)}))
    C.append(Case("conv1d", [node("Conv", ["X", "W", "B"], ["Y"], strides=[2], pads=[2, 1], dilations=[1])],
                  [("X", F, ["N", 4, 32])], ["Y"], {"W": W(rng, 8, 4, 5), "B": W(rng, 8)}))
    C.append(Case("conv3d", [node("Conv", ["X", "W", "B"], ["Y"], strides=[1, 2, 2], pads=[1, 1, 1, 1, 1, 1])],
                  [("X", F, ["N", 2, 8, 8, 8])], ["Y"], {"W": W(rng, 4, 2, 3, 3, 3), "B": W(rng, 4)}))

    # ---------------- ConvTranspose ----------------
    XT = [("X", F, ["N", 4, 8, 8])]
    C.append(Case("convtranspose_basic", [node("ConvTranspose", ["X", "W", "B"], ["Y"])],
                  XT, ["Y"], {"W": W(rng, 4, 6, 3, 3), "B": W(rng, 6)}))
    C.append(Case("convtranspose_strides_output_padding", [node("ConvTranspose", ["X", "W", "B"], ["Y"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])],
                  XT, ["Y"], {"W": W(rng, 4, 6, 3, 3), "B": W(rng, 6)}))
    C.append(Case("convtranspose_asym_pads", [node("ConvTranspose", ["X", "W"], ["Y"], strides=[2, 2], pads=[0, 1, 1, 0])],
                  XT, ["Y"], {"W": W(rng, 4, 6, 4, 4)}))
    C.append(Case("convtranspose_group2", [node("ConvTranspose", ["X", "W", "B"], ["Y"], group=2, strides=[2, 2])],
                  XT, ["Y"], {"W": W(rng, 4, 3, 3, 3), "B": W(rng, 6)}))
    C.append(Case("convtranspose_dilations", [node("ConvTranspose", ["X", "W"], ["Y"], dilations=[2, 2])],
                  XT, ["Y"], {"W": W(rng, 4, 2, 3, 3)}))
    C.append(Case("convtranspose_output_shape", [node("ConvTranspose", ["X", "W"], ["Y"], strides=[2, 2], output_shape=[16, 16])],
                  XT, ["Y"], {"W": W(rng, 4, 6, 3, 3)}))
    C.append(Case("convtranspose_auto_pad_same_upper", [node("ConvTranspose", ["X", "W"], ["Y"], strides=[2, 2], auto_pad="SAME_UPPER")],
                  XT, ["Y"], {"W": W(rng, 4, 6, 3, 3)}))
    C.append(Case("convtranspose1d", [node("ConvTranspose", ["X", "W", "B"], ["Y"], strides=[3], pads=[1, 0], output_padding=[2])],
                  [("X", F, ["N", 4, 10])], ["Y"], {"W": W(rng, 4, 5, 4), "B": W(rng, 5)}))

    # ---------------- Gemm ----------------
    C.append(Case("gemm_transB_bias", [node("Gemm", ["A", "B", "C"], ["Y"], transB=1)],
                  [("A", F, ["N", 32])], ["Y"], {"B": W(rng, 16, 32), "C": W(rng, 16)}))
    C.append(Case("gemm_no_c", [node("Gemm", ["A", "B"], ["Y"], alpha=0.5)],
                  [("A", F, ["N", 32])], ["Y"], {"B": W(rng, 32, 16)}))
    C.append(Case("gemm_transA_transB_c_column", [node("Gemm", ["A", "B", "C"], ["Y"], transA=1, transB=1, beta=2.0)],
                  [("A", F, [32, 5])], ["Y"], {"B": W(rng, 16, 32), "C": W(rng, 5, 1)}))
    C.append(Case("gemm_c_scalar", [node("Gemm", ["A", "B", "C"], ["Y"])],
                  [("A", F, ["N", 32])], ["Y"], {"B": W(rng, 32, 16), "C": W(rng, 1)}))
    C.append(Case("gemm_c_row_2d", [node("Gemm", ["A", "B", "C"], ["Y"], transB=1)],
                  [("A", F, ["N", 32])], ["Y"], {"B": W(rng, 16, 32), "C": W(rng, 1, 16)}))

    # ---------------- MatMul ----------------
    C.append(Case("matmul_2d", [node("MatMul", ["A", "B"], ["Y"])],
                  [("A", F, ["N", 32])], ["Y"], {"B": W(rng, 32, 16)}))
    C.append(Case("matmul_3d_2d", [node("MatMul", ["A", "B"], ["Y"])],
                  [("A", F, ["N", 5, 32])], ["Y"], {"B": W(rng, 32, 16)}))
    C.append(Case("matmul_3d_3d_broadcast", [node("MatMul", ["A", "B"], ["Y"])],
                  [("A", F, ["N", 5, 32])], ["Y"], {"B": W(rng, 1, 32, 8)}))
    C.append(Case("matmul_4d_broadcast", [node("MatMul", ["A", "B"], ["Y"])],
                  [("A", F, ["N", 1, 5, 32])], ["Y"], {"B": W(rng, 3, 32, 7)}))
    C.append(Case("matmul_4d_two_inputs", [node("MatMul", ["A", "B"], ["Y"])],
                  [("A", F, ["N", 4, 8, 16]), ("B", F, ["N", 4, 16, 8])], ["Y"]))
    C.append(Case("matmul_1d_rhs", [node("MatMul", ["A", "B"], ["Y"])],
                  [("A", F, ["N", 4, 32])], ["Y"], {"B": W(rng, 32)}))
    C.append(Case("matmul_1d_lhs", [node("MatMul", ["A", "B"], ["Y"])],
                  [("B", F, ["N", 32, 8])], ["Y"], {"A": W(rng, 32)}))

    # ---------------- normalisation ----------------
    XB = [("X", F, ["N", 8, 4, 4])]
    bn = lambda: {"scale": W(rng, 8) + 1, "B": W(rng, 8), "mean": W(rng, 8),
                  "var": np.abs(W(rng, 8)) + 0.5}
    C.append(Case("batchnorm_inference_opset15", [node("BatchNormalization", ["X", "scale", "B", "mean", "var"], ["Y"], epsilon=1e-5, training_mode=0)],
                  XB, ["Y"], bn(), opset=15))
    C.append(Case("batchnorm_training_opset15", [node("BatchNormalization", ["X", "scale", "B", "mean", "var"], ["Y", "running_mean", "running_var"], training_mode=1, momentum=0.9)],
                  XB, ["Y", "running_mean", "running_var"], bn(), opset=15))
    C.append(Case("batchnorm_opset9", [node("BatchNormalization", ["X", "scale", "B", "mean", "var"], ["Y"])],
                  XB, ["Y"], bn(), opset=9))
    C.append(Case("layernorm_axis_last", [node("LayerNormalization", ["X", "scale", "B"], ["Y"], axis=-1, epsilon=1e-5)],
                  [("X", F, ["N", 5, 16])], ["Y"], {"scale": W(rng, 16) + 1, "B": W(rng, 16)}))
    C.append(Case("layernorm_axis1", [node("LayerNormalization", ["X", "scale", "B"], ["Y"], axis=1)],
                  [("X", F, ["N", 5, 16])], ["Y"], {"scale": W(rng, 5, 16) + 1, "B": W(rng, 5, 16)}))
    C.append(Case("layernorm_mean_invstd_outputs", [node("LayerNormalization", ["X", "scale"], ["Y", "Mean", "InvStdDev"], axis=-1)],
                  [("X", F, ["N", 5, 16])], ["Y", "Mean", "InvStdDev"], {"scale": W(rng, 16) + 1}))
    C.append(Case("instancenorm", [node("InstanceNormalization", ["X", "scale", "B"], ["Y"], epsilon=1e-5)],
                  [("X", F, ["N", 4, 8, 8])], ["Y"], {"scale": W(rng, 4) + 1, "B": W(rng, 4)}))

    # ---------------- element-wise with broadcasting ----------------
    X345 = [("X", F, ["N", 3, 4, 5])]
    C.append(Case("add_broadcast_rank1", [node("Add", ["X", "B"], ["Y"])], X345, ["Y"], {"B": W(rng, 5)}))
    C.append(Case("add_two_inputs", [node("Add", ["A", "B"], ["Y"])],
                  [("A", F, ["N", 8]), ("B", F, ["N", 8])], ["Y"]))
    C.append(Case("sub_broadcast_channel", [node("Sub", ["X", "B"], ["Y"])], X345, ["Y"], {"B": W(rng, 3, 1, 1)}))
    C.append(Case("sub_lhs_lower_rank", [node("Sub", ["A", "X"], ["Y"])],
                  [("X", F, ["N", 1, 5])], ["Y"], {"A": W(rng, 4, 1)}))
    C.append(Case("mul_broadcast_both", [node("Mul", ["X", "B"], ["Y"])],
                  [("X", F, ["N", 1, 4, 1])], ["Y"], {"B": W(rng, 3, 1, 5)}))
    C.append(Case("div_broadcast", [node("Div", ["X", "B"], ["Y"])], X345, ["Y"],
                  {"B": np.abs(W(rng, 1, 4, 1)) + 1}))
    C.append(Case("pow_scalar_exponent", [node("Pow", ["X", "E"], ["Y"])],
                  [("X", F, ["N", 3, 4])], ["Y"], {"E": np.array(2.0, np.float32)}))
    C.append(Case("max_three_inputs_broadcast", [node("Max", ["X", "B", "C"], ["Y"])],
                  [("X", F, ["N", 3, 4])], ["Y"], {"B": W(rng, 4), "C": W(rng, 3, 1)}))
    C.append(Case("min_broadcast", [node("Min", ["X", "B"], ["Y"])],
                  [("X", F, ["N", 1, 4])], ["Y"], {"B": W(rng, 6, 1)}))
    C.append(Case("add_mul_chain", [node("Mul", ["X", "S"], ["m"]), node("Add", ["m", "B"], ["Y"])],
                  X345, ["Y"], {"S": W(rng, 3, 1, 1), "B": W(rng, 1, 4, 5)}))

    # ---------------- activations ----------------
    X38 = [("X", F, ["N", 3, 8, 8])]
    C.append(Case("relu", [node("Relu", ["X"], ["Y"])], X38, ["Y"]))
    C.append(Case("clip_min_max_inputs", [node("Clip", ["X", "lo", "hi"], ["Y"])], X38, ["Y"],
                  {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}))
    C.append(Case("clip_max_only", [node("Clip", ["X", "", "hi"], ["Y"])], X38, ["Y"],
                  {"hi": np.array(1.0, np.float32)}))
    C.append(Case("clip_no_bounds", [node("Clip", ["X"], ["Y"])], X38, ["Y"]))
    C.append(Case("sigmoid", [node("Sigmoid", ["X"], ["Y"])], X38, ["Y"]))
    C.append(Case("hardsigmoid", [node("HardSigmoid", ["X"], ["Y"], alpha=1 / 6, beta=0.5)], X38, ["Y"]))
    C.append(Case("hardswish", [node("HardSwish", ["X"], ["Y"])], X38, ["Y"]))
    C.append(Case("gelu_opset20", [node("Gelu", ["X"], ["Y"])], X38, ["Y"], opset=20))
    C.append(Case("gelu_tanh_opset20", [node("Gelu", ["X"], ["Y"], approximate="tanh")], X38, ["Y"], opset=20))
    C.append(Case("erf", [node("Erf", ["X"], ["Y"])], X38, ["Y"]))
    C.append(Case("tanh", [node("Tanh", ["X"], ["Y"])], X38, ["Y"]))
    C.append(Case("softmax_default_axis", [node("Softmax", ["X"], ["Y"])], [("X", F, ["N", 4, 10])], ["Y"]))
    C.append(Case("softmax_axis1", [node("Softmax", ["X"], ["Y"], axis=1)], [("X", F, ["N", 4, 10])], ["Y"]))
    C.append(Case("leakyrelu", [node("LeakyRelu", ["X"], ["Y"], alpha=0.1)], X38, ["Y"]))
    C.append(Case("prelu_channel_slope", [node("PRelu", ["X", "slope"], ["Y"])], X38, ["Y"], {"slope": W(rng, 3, 1, 1)}))
    C.append(Case("prelu_scalar_slope", [node("PRelu", ["X", "slope"], ["Y"])], X38, ["Y"], {"slope": W(rng, 1)}))
    C.append(Case("gelu_erf_decomposed", [
        node("Div", ["X", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]), node("Add", ["e", "one"], ["a"]),
        node("Mul", ["X", "a"], ["m"]), node("Mul", ["m", "half"], ["Y"])], X38, ["Y"],
        {"sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}))

    # ---------------- pooling ----------------
    C.append(Case("maxpool_basic", [node("MaxPool", ["X"], ["Y"], kernel_shape=[2, 2], strides=[2, 2])], X4, ["Y"]))
    C.append(Case("maxpool_ceil_mode", [node("MaxPool", ["X"], ["Y"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)],
                  [("X", F, ["N", 3, 16, 15])], ["Y"]))
    C.append(Case("maxpool_dilations", [node("MaxPool", ["X"], ["Y"], kernel_shape=[3, 3], dilations=[2, 2])], X4, ["Y"]))
    C.append(Case("maxpool_pads_strides", [node("MaxPool", ["X"], ["Y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], X4, ["Y"]))
    C.append(Case("maxpool_asym_pads", [node("MaxPool", ["X"], ["Y"], kernel_shape=[2, 3], strides=[2, 2], pads=[0, 1, 1, 0])], X4, ["Y"]))
    C.append(Case("maxpool_auto_pad_same_upper", [node("MaxPool", ["X"], ["Y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")],
                  [("X", F, ["N", 3, 15, 15])], ["Y"]))
    C.append(Case("maxpool_indices", [node("MaxPool", ["X"], ["Y", "I"], kernel_shape=[2, 2], strides=[2, 2])],
                  X4, ["Y", ("I", I64)]))
    C.append(Case("maxpool1d", [node("MaxPool", ["X"], ["Y"], kernel_shape=[3], strides=[2])], [("X", F, ["N", 4, 21])], ["Y"]))
    C.append(Case("avgpool_count_include_pad", [node("AveragePool", ["X"], ["Y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1)],
                  X4, ["Y"]))
    C.append(Case("avgpool_ceil_mode", [node("AveragePool", ["X"], ["Y"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)],
                  [("X", F, ["N", 3, 15, 15])], ["Y"]))
    C.append(Case("avgpool_basic", [node("AveragePool", ["X"], ["Y"], kernel_shape=[4, 4])], X4, ["Y"]))
    C.append(Case("globalaveragepool", [node("GlobalAveragePool", ["X"], ["Y"])], X4, ["Y"]))
    C.append(Case("globalmaxpool", [node("GlobalMaxPool", ["X"], ["Y"])], X4, ["Y"]))

    # ---------------- shape manipulation ----------------
    for ax in [0, 1, 2]:
        C.append(Case(f"flatten_axis{ax}", [node("Flatten", ["X"], ["Y"], axis=ax)], X345, ["Y"]))
    C.append(Case("flatten_axis_neg1", [node("Flatten", ["X"], ["Y"], axis=-1)], X345, ["Y"]))
    C.append(Case("reshape_zero_minus1", [node("Reshape", ["X", "s"], ["Y"])], X345, ["Y"], {"s": i64(0, -1)}))
    C.append(Case("reshape_zero_zero_minus1_allowzero0", [node("Reshape", ["X", "s"], ["Y"], allowzero=0)], X345, ["Y"], {"s": i64(0, 0, -1)}))
    C.append(Case("reshape_split_dim", [node("Reshape", ["X", "s"], ["Y"])], X345, ["Y"], {"s": i64(0, 3, 2, 2, 5)}))
    C.append(Case("reshape_fold_batch", [node("Reshape", ["X", "s"], ["Y"])], X345, ["Y"], {"s": i64(-1, 20)}))
    C.append(Case("transpose_default_perm", [node("Transpose", ["X"], ["Y"])], X345, ["Y"]))
    C.append(Case("transpose_nhwc", [node("Transpose", ["X"], ["Y"], perm=[0, 2, 3, 1])], X345, ["Y"]))
    C.append(Case("concat_negative_axis", [node("Concat", ["A", "B", "C"], ["Y"], axis=-1)],
                  [("A", F, ["N", 3, 4]), ("B", F, ["N", 3, 2]), ("C", F, ["N", 3, 1])], ["Y"]))
    C.append(Case("concat_axis1_with_initializer", [node("Concat", ["A", "B"], ["Y"], axis=1)],
                  [("A", F, [2, 3, 4])], ["Y"], {"B": W(rng, 2, 5, 4)}))
    C.append(Case("split_input", [node("Split", ["X", "split"], ["a", "b", "c"], axis=1)],
                  [("X", F, ["N", 10])], ["a", "b", "c"], {"split": i64(2, 3, 5)}))
    C.append(Case("split_equal_default", [node("Split", ["X"], ["a", "b", "c"], axis=-1)],
                  [("X", F, ["N", 4, 12])], ["a", "b", "c"]))
    C.append(Case("split_num_outputs_uneven_opset18", [node("Split", ["X"], ["a", "b", "c"], axis=1, num_outputs=3)],
                  [("X", F, ["N", 10])], ["a", "b", "c"], opset=18))
    C.append(Case("split_attr_opset11", [node("Split", ["X"], ["a", "b"], axis=1, split=[3, 7])],
                  [("X", F, ["N", 10])], ["a", "b"], opset=11))
    S = lambda name, starts, ends, axes=None, steps=None, x=X345: Case(
        name, [node("Slice", ["X", "starts", "ends"] + (["axes"] if axes is not None else [])
                    + (["steps"] if steps is not None else []), ["Y"])],
        x, ["Y"], {k: i64(*v) for k, v in [("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps)] if v is not None})
    C.append(S("slice_basic", [1], [3], [1]))
    C.append(S("slice_negative_starts", [-3], [-1], [2]))
    C.append(S("slice_steps_int64max", [0, 1], [INT64_MAX, 10], [2, 3], [2, 3]))
    C.append(S("slice_negative_step", [-1], [INT64_MIN], [3], [-1]))
    C.append(S("slice_negative_step2", [3], [0], [2], [-2]))
    C.append(S("slice_negative_axes", [1], [INT64_MAX], [-1]))
    C.append(S("slice_no_axes", [0, 1], [INT64_MAX, 3]))
    C.append(S("slice_clamped_end", [2], [100], [1]))
    C.append(Case("gather_axis0_scalar", [node("Gather", ["X", "i"], ["Y"], axis=0)],
                  [("X", F, ["N", 5, 6])], ["Y"], {"i": np.array(1, np.int64)}))
    C.append(Case("gather_axis1_tensor", [node("Gather", ["X", "i"], ["Y"], axis=1)],
                  [("X", F, ["N", 5, 6])], ["Y"], {"i": np.array([[0, 2], [1, 3]], np.int64)}))
    C.append(Case("gather_axis1_scalar_negative", [node("Gather", ["X", "i"], ["Y"], axis=1)],
                  [("X", F, ["N", 5, 6])], ["Y"], {"i": np.array(-1, np.int64)}))
    C.append(Case("gather_embedding", [node("Gather", ["E", "ids"], ["Y"], axis=0)],
                  [("ids", I64, ["N", 7])], ["Y"], {"E": W(rng, 100, 16)}, feed_high={"ids": 100}))
    C.append(Case("squeeze_axes_input", [node("Squeeze", ["X", "axes"], ["Y"])],
                  [("X", F, ["N", 1, 4, 1])], ["Y"], {"axes": i64(1, -1)}))
    C.append(Case("squeeze_no_axes_static", [node("Squeeze", ["X"], ["Y"])],
                  [("X", F, [3, 1, 4, 1])], ["Y"]))
    C.append(Case("squeeze_attr_opset11", [node("Squeeze", ["X"], ["Y"], axes=[1, 3])],
                  [("X", F, ["N", 1, 4, 1])], ["Y"], opset=11))
    C.append(Case("unsqueeze_axes_input", [node("Unsqueeze", ["X", "axes"], ["Y"])],
                  [("X", F, ["N", 3, 4])], ["Y"], {"axes": i64(1, -1)}))
    C.append(Case("unsqueeze_attr_opset11", [node("Unsqueeze", ["X"], ["Y"], axes=[0, 2])],
                  [("X", F, ["N", 3, 4])], ["Y"], opset=11))
    C.append(Case("reducemean_keepdims1_opset13", [node("ReduceMean", ["X"], ["Y"], axes=[2, 3], keepdims=1)], X345, ["Y"], opset=13))
    C.append(Case("reducemean_keepdims0_opset13", [node("ReduceMean", ["X"], ["Y"], axes=[-1], keepdims=0)], X345, ["Y"], opset=13))
    C.append(Case("reducemean_default_axes_opset13", [node("ReduceMean", ["X"], ["Y"])], X345, ["Y"], opset=13))
    C.append(Case("reducemean_axes_input_opset18", [node("ReduceMean", ["X", "axes"], ["Y"], keepdims=0)],
                  X345, ["Y"], {"axes": i64(1)}, opset=18))
    C.append(Case("reducemean_axes_input_keepdims1_opset18", [node("ReduceMean", ["X", "axes"], ["Y"])],
                  X345, ["Y"], {"axes": i64(-2, -1)}, opset=18))
    C.append(Case("reducemean_no_axes_opset18", [node("ReduceMean", ["X"], ["Y"], keepdims=0)], X345, ["Y"], opset=18))
    C.append(Case("reducesum_keepdims1", [node("ReduceSum", ["X", "axes"], ["Y"])], X345, ["Y"], {"axes": i64(1)}))
    C.append(Case("reducesum_keepdims0", [node("ReduceSum", ["X", "axes"], ["Y"], keepdims=0)], X345, ["Y"], {"axes": i64(1, 3)}))
    C.append(Case("reducesum_noop_with_empty_axes", [node("ReduceSum", ["X"], ["Y"], noop_with_empty_axes=1)], X345, ["Y"]))
    X88 = [("X", F, ["N", 3, 8, 8])]
    C.append(Case("resize_scales_nearest", [node("Resize", ["X", "", "scales"], ["Y"], mode="nearest")],
                  X88, ["Y"], {"scales": f32(1, 1, 2, 2)}))
    C.append(Case("resize_scales_linear", [node("Resize", ["X", "", "scales"], ["Y"], mode="linear")],
                  X88, ["Y"], {"scales": f32(1, 1, 1.5, 1.5)}))
    C.append(Case("resize_scales_downsample_floor", [node("Resize", ["X", "", "scales"], ["Y"], mode="nearest")],
                  X88, ["Y"], {"scales": f32(1, 1, 0.6, 0.5)}))
    C.append(Case("resize_sizes_nearest_opset13", [node("Resize", ["X", "", "", "sizes"], ["Y"], mode="nearest")],
                  [("X", F, [2, 3, 8, 8])], ["Y"], {"sizes": i64(2, 3, 5, 12)}, opset=13))
    C.append(Case("resize_sizes_linear_axes_opset18", [node("Resize", ["X", "", "", "sizes"], ["Y"], mode="linear", axes=[2, 3])],
                  X88, ["Y"], {"sizes": i64(12, 10)}, opset=18))
    C.append(Case("resize_roi_scales_opset11", [node("Resize", ["X", "roi", "scales"], ["Y"], mode="nearest")],
                  X88, ["Y"], {"roi": np.zeros(0, np.float32), "scales": f32(1, 1, 2, 3)}, opset=11))
    C.append(Case("pad_constant", [node("Pad", ["X", "pads", "v"], ["Y"], mode="constant")],
                  X88, ["Y"], {"pads": i64(0, 0, 1, 2, 0, 0, 3, 1), "v": np.array(0.5, np.float32)}))
    C.append(Case("pad_reflect", [node("Pad", ["X", "pads"], ["Y"], mode="reflect")],
                  X88, ["Y"], {"pads": i64(0, 0, 2, 2, 0, 0, 2, 2)}))
    C.append(Case("pad_edge", [node("Pad", ["X", "pads"], ["Y"], mode="edge")],
                  X88, ["Y"], {"pads": i64(0, 0, 0, 1, 0, 0, 0, 3)}))
    C.append(Case("pad_axes_input_opset18", [node("Pad", ["X", "pads", "", "axes"], ["Y"], mode="constant")],
                  X88, ["Y"], {"pads": i64(1, 2, 3, 4), "axes": i64(-1, 2)}, opset=18))
    C.append(Case("pad_attr_opset2", [node("Pad", ["X"], ["Y"], pads=[0, 0, 1, 1, 0, 0, 1, 1])], X88, ["Y"], opset=2))
    C.append(Case("cast_to_int64", [node("Cast", ["X"], ["Y"], to=I64)], X88, [("Y", I64)]))
    C.append(Case("cast_to_float16", [node("Cast", ["X"], ["Y"], to=TensorProto.FLOAT16)], X88, [("Y", TensorProto.FLOAT16)]))
    C.append(Case("cast_to_bool", [node("Cast", ["X"], ["Y"], to=BOOL)], X88, [("Y", BOOL)]))
    C.append(Case("dropout_ratio_training_mode_mask", [node("Dropout", ["X", "r", "t"], ["Y", "mask"])],
                  X88, ["Y", ("mask", BOOL)], {"r": np.array(0.3, np.float32), "t": np.array(False)}))
    C.append(Case("dropout_plain", [node("Dropout", ["X"], ["Y"])], X88, ["Y"]))
    C.append(Case("identity", [node("Identity", ["X"], ["Y"])], X88, ["Y"]))
    C.append(Case("where_broadcast", [node("Where", ["cond", "X", "y"], ["Y"])],
                  [("X", F, ["N", 1, 5])], ["Y"], {"cond": rng.random((4, 1)) > 0.5, "y": np.array(-1.0, np.float32)}))
    C.append(Case("where_from_compare", [node("Greater", ["X", "z"], ["c"]), node("Where", ["c", "X", "B"], ["Y"])],
                  [("X", F, ["N", 3, 4])], ["Y"], {"z": np.array(0.0, np.float32), "B": W(rng, 4)}))
    C.append(Case("expand_shape_lower_rank", [node("Expand", ["X", "s"], ["Y"])],
                  [("X", F, ["N", 1, 5])], ["Y"], {"s": i64(4, 1)}))
    C.append(Case("expand_shape_higher_rank", [node("Expand", ["X", "s"], ["Y"])],
                  [("X", F, ["N", 1, 5])], ["Y"], {"s": i64(3, 1, 4, 1)}))
    C.append(Case("tile", [node("Tile", ["X", "r"], ["Y"])], [("X", F, ["N", 3, 4])], ["Y"], {"r": i64(1, 2, 3)}))
    C.append(Case("shape_basic", [node("Shape", ["X"], ["Y"])], X345, [("Y", I64)]))
    C.append(Case("shape_start_end_opset15", [node("Shape", ["X"], ["Y"], start=1, end=-1)], X345, [("Y", I64)], opset=15))
    C.append(Case("shape_negative_start_opset15", [node("Shape", ["X"], ["Y"], start=-2)], X345, [("Y", I64)], opset=15))
    C.append(Case("constantofshape_static", [node("ConstantOfShape", ["s"], ["Y"], value=helper.make_tensor("v", F, [1], [1.0]))],
                  [], ["Y"], {"s": i64(3, 4)}))
    C.append(Case("constantofshape_int64_default_value", [node("ConstantOfShape", ["s"], ["Y"])],
                  [], ["Y"], {"s": i64(2, 5)}))
    C.append(Case("range_int64", [node("Range", ["a", "b", "d"], ["Y"])], [], [("Y", I64)],
                  {"a": np.array(0, np.int64), "b": np.array(10, np.int64), "d": np.array(3, np.int64)}))
    C.append(Case("range_float_negative_delta", [node("Range", ["a", "b", "d"], ["Y"])], [], ["Y"],
                  {"a": np.array(2.0, np.float32), "b": np.array(-1.0, np.float32), "d": np.array(-0.75, np.float32)}))
    C.append(Case("constant_node_tensor", [node("Constant", [], ["c"], value=numpy_helper.from_array(W(rng, 3, 1, 1), "c")),
                                           node("Add", ["X", "c"], ["Y"])], X88, ["Y"]))
    C.append(Case("constant_node_value_ints", [node("Constant", [], ["s"], value_ints=[0, 3, -1]),
                                               node("Reshape", ["X", "s"], ["Y"])], X88, ["Y"]))
    C.append(Case("constant_node_value_float", [node("Constant", [], ["c"], value_float=2.5),
                                                node("Mul", ["X", "c"], ["Y"])], X88, ["Y"]))
    C.append(Case("topk_axis_last", [node("TopK", ["X", "k"], ["V", "I"], axis=-1)],
                  [("X", F, ["N", 10])], ["V", ("I", I64)], {"k": i64(3)}))
    C.append(Case("topk_axis1_smallest", [node("TopK", ["X", "k"], ["V", "I"], axis=1, largest=0, sorted=1)],
                  [("X", F, ["N", 6, 4])], ["V", ("I", I64)], {"k": i64(2)}))
    C.append(Case("argmax_keepdims0", [node("ArgMax", ["X"], ["Y"], axis=1, keepdims=0)], X345, [("Y", I64)]))
    C.append(Case("argmax_keepdims1_last_index", [node("ArgMax", ["X"], ["Y"], axis=-1, keepdims=1, select_last_index=1)], X345, [("Y", I64)]))
    C.append(Case("einsum_matmul", [node("Einsum", ["X", "W"], ["Y"], equation="bij,jk->bik")],
                  [("X", F, ["N", 5, 8])], ["Y"], {"W": W(rng, 8, 4)}))
    C.append(Case("einsum_attention_scores", [node("Einsum", ["Q", "K"], ["Y"], equation="bhid,bhjd->bhij")],
                  [("Q", F, ["N", 2, 5, 8]), ("K", F, ["N", 2, 6, 8])], ["Y"]))

    # ---------------- shape subgraphs ----------------
    C.append(Case("shapesub_reshape_batch_minus1", [
        node("Shape", ["X"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
        node("Unsqueeze", ["n", "ax0"], ["nu"]), node("Concat", ["nu", "c12", "c5"], ["shp"], axis=0),
        node("Reshape", ["X", "shp"], ["Y"])],
        X345, ["Y"], {"zero": np.array(0, np.int64), "ax0": i64(0), "c12": i64(12), "c5": i64(5)}))
    C.append(Case("shapesub_view_size0_minus1", [  # x.view(x.size(0), -1) as the legacy exporter writes it
        node("Conv", ["X", "W", "B"], ["conv"], pads=[1, 1, 1, 1], strides=[2, 2]),
        node("Shape", ["conv"], ["s"]), node("Constant", [], ["c0"], value=numpy_helper.from_array(np.array(0, np.int64), "c0")),
        node("Gather", ["s", "c0"], ["n"], axis=0),
        node("Constant", [], ["ax"], value=numpy_helper.from_array(i64(0), "ax")),
        node("Unsqueeze", ["n", "ax"], ["nu"]),
        node("Constant", [], ["m1"], value=numpy_helper.from_array(i64(-1), "m1")),
        node("Concat", ["nu", "m1"], ["shp"], axis=0), node("Reshape", ["conv", "shp"], ["flat"]),
        node("Gemm", ["flat", "FW", "FB"], ["Y"], transB=1)],
        X4, ["Y"], {"W": W(rng, 4, 3, 3, 3), "B": W(rng, 4), "FW": W(rng, 10, 256), "FB": W(rng, 10)}))
    C.append(Case("shapesub_slice_concat_expand", [
        node("Shape", ["X"], ["s"]), node("Slice", ["s", "st", "en"], ["n"]),
        node("Concat", ["n", "c"], ["shp"], axis=0), node("Expand", ["X", "shp"], ["Y"])],
        [("X", F, ["N", 1, 6])], ["Y"], {"st": i64(0), "en": i64(1), "c": i64(4, 6)}))
    C.append(Case("shapesub_constantofshape", [
        node("Shape", ["X"], ["s"]),
        node("ConstantOfShape", ["s"], ["z"], value=helper.make_tensor("v", F, [1], [0.0])),
        node("Add", ["X", "z"], ["Y"])],
        [("X", F, ["N", 5])], ["Y"]))
    C.append(Case("shapesub_constantofshape_mask", [
        node("Shape", ["X"], ["s"]), node("Slice", ["s", "st", "en"], ["bs"]),
        node("ConstantOfShape", ["bs"], ["mask"], value=helper.make_tensor("v", I64, [1], [1]))],
        [("X", F, ["N", "seq", 8])], [("mask", I64)], {"st": i64(0), "en": i64(2)}))
    C.append(Case("shapesub_range_gather_posemb", [
        node("Shape", ["X"], ["s"]), node("Gather", ["s", "one"], ["L"], axis=0),
        node("Range", ["zero", "L", "one"], ["pos"]), node("Gather", ["P", "pos"], ["pe"], axis=0),
        node("Add", ["X", "pe"], ["Y"])],
        [("X", F, ["N", "seq", 16])], ["Y"],
        {"one": np.array(1, np.int64), "zero": np.array(0, np.int64), "P": W(rng, 32, 16)}))
    C.append(Case("shapesub_mha_head_split", [
        node("Shape", ["X"], ["s"]), node("Gather", ["s", "i0"], ["b"], axis=0), node("Gather", ["s", "i1"], ["t"], axis=0),
        node("Unsqueeze", ["b", "ax0"], ["bu"]), node("Unsqueeze", ["t", "ax0"], ["tu"]),
        node("Gather", ["s", "i2"], ["d"], axis=0), node("Div", ["d", "h"], ["hd"]),
        node("Unsqueeze", ["hd", "ax0"], ["hdu"]),
        node("Concat", ["bu", "tu", "hv", "hdu"], ["shp"], axis=0),
        node("Reshape", ["X", "shp"], ["r"]), node("Transpose", ["r"], ["Y"], perm=[0, 2, 1, 3])],
        [("X", F, ["N", "seq", 16])], ["Y"],
        {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "i2": np.array(2, np.int64),
         "ax0": i64(0), "h": np.array(4, np.int64), "hv": i64(4)}))
    C.append(Case("shapesub_shape_mul_reshape", [
        node("Shape", ["X"], ["s"], start=1, end=3), node("ReduceProd", ["s"], ["p"], keepdims=1),
        node("Concat", ["m1", "p"], ["shp"], axis=0), node("Reshape", ["X", "shp"], ["Y"])],
        X345, ["Y"], {"m1": i64(-1)}, opset=15))
    # ---------------- Scatter (docs/architecture.md's worked example of adding an op) ----------------
    C.append(Case("scatternd_rows", [node("ScatterND", ["X", "idx", "U"], ["Y"])],
                  [("X", F, [4, 5, 6]), ("U", F, [2, 5, 6])], ["Y"], {"idx": np.array([[0], [2]], np.int64)}))
    C.append(Case("scatterelements_axis1_add", [node("ScatterElements", ["X", "idx", "U"], ["Y"], axis=1, reduction="add")],
                  [("X", F, ["N", 5])], ["Y"], {"idx": np.array([[1, 3]], np.int64), "U": W(rng, 1, 2)}, opset=18))
    C += checker_cases(rng)
    C += spec_cases(rng)
    return C


def body(name, nodes, inputs, outputs, inits=None):
    """A subgraph (If branch, Loop or Scan body): inputs and outputs as (name, elem_type, shape)."""
    return helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])


def ms_node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, domain="com.microsoft", **attrs)


def checker_cases(rng):
    """Cases for the checker's kernels (tests/checker_ort.rs compares them with onnxruntime op by
    op): recurrent ops, gathers, control flow, quantization, onnxruntime's contrib ops.  Appended
    after the older cases, so that those keep their seeds."""
    C = []
    # ---------------- LSTM / GRU / RNN: X [seq, batch, input] ----------------
    # (every case has an initial state input, [directions, N, hidden]: with two different fixed
    # first axes, nnlint's --batch does not take the sequence axis for the batch)
    h = 4
    XS = [("X", F, [5, "N", 3])]
    H1, H2 = [("h0", F, [1, "N", h])], [("h0", F, [2, "N", h])]
    C.append(Case("lstm_bidirectional", [node("LSTM", ["X", "W", "R", "B", "", "h0"], ["Y", "Y_h", "Y_c"], hidden_size=h, direction="bidirectional")],
                  XS + H2, ["Y", "Y_h", "Y_c"], {"W": W(rng, 2, 4 * h, 3), "R": W(rng, 2, 4 * h, h), "B": W(rng, 2, 8 * h)}))
    C.append(Case("lstm_peepholes_initial_states", [node("LSTM", ["X", "W", "R", "B", "", "h0", "c0", "P"], ["Y", "Y_h", "Y_c"], hidden_size=h)],
                  XS + [("h0", F, [1, "N", h]), ("c0", F, [1, "N", h])], ["Y", "Y_h", "Y_c"],
                  {"W": W(rng, 1, 4 * h, 3), "R": W(rng, 1, 4 * h, h), "B": W(rng, 1, 8 * h), "P": W(rng, 1, 3 * h)}))
    C.append(Case("gru_linear_before_reset", [node("GRU", ["X", "W", "R", "B", "", "h0"], ["Y", "Y_h"], hidden_size=h, linear_before_reset=1)],
                  XS + H1, ["Y", "Y_h"], {"W": W(rng, 1, 3 * h, 3), "R": W(rng, 1, 3 * h, h), "B": W(rng, 1, 6 * h)}))
    C.append(Case("gru_reverse", [node("GRU", ["X", "W", "R", "B", "", "h0"], ["Y", "Y_h"], hidden_size=h, direction="reverse")],
                  XS + H1, ["Y", "Y_h"], {"W": W(rng, 1, 3 * h, 3), "R": W(rng, 1, 3 * h, h), "B": W(rng, 1, 6 * h)}))
    C.append(Case("rnn_sequence_lens", [node("RNN", ["X", "W", "R", "B", "L", "h0"], ["Y", "Y_h"], hidden_size=h, direction="bidirectional")],
                  XS + H2, ["Y", "Y_h"], {"W": W(rng, 2, h, 3), "R": W(rng, 2, h, h), "B": W(rng, 2, 2 * h),
                                     "L": np.array([5, 3], np.int32)}))
    # ---------------- GatherND / GatherElements ----------------
    C.append(Case("gathernd_pairs", [node("GatherND", ["X", "idx"], ["Y"])],
                  [("X", F, ["N", 4, 5])], ["Y"], {"idx": np.array([[0, 1], [1, 3], [0, 0]], np.int64)}))
    C.append(Case("gathernd_batch_dims1", [node("GatherND", ["X", "idx"], ["Y"], batch_dims=1)],
                  [("X", F, ["N", 3, 4])], ["Y"], {"idx": np.array([[[2], [0]], [[1], [1]]], np.int64)}))
    C.append(Case("gatherelements_axis1_negative", [node("GatherElements", ["X", "idx"], ["Y"], axis=1)],
                  [("X", F, ["N", 5])], ["Y"], {"idx": np.array([[4, -1, 0], [2, -5, 3]], np.int64)}))
    # ---------------- If / Loop / Scan ----------------
    then_b = body("then", [node("Mul", ["X", "two"], ["t"])], [], [("t", F, None)], {"two": f32(2.0)})
    else_b = body("else", [node("Neg", ["X"], ["e"])], [], [("e", F, None)])
    C.append(Case("if_both_branches", [
        node("ReduceSum", ["X"], ["sum"], keepdims=0), node("Greater", ["sum", "zero"], ["c"]),
        node("If", ["c"], ["Y"], then_branch=then_b, else_branch=else_b),
        node("If", ["no"], ["Z"], then_branch=then_b, else_branch=else_b)],
        [("X", F, ["N", 3])], ["Y", "Z"], {"zero": f32(0.0), "no": np.array(False)}))
    loop_b = body("loop_body", [
        node("Add", ["v", "X"], ["v_out"]), node("Cast", ["i"], ["fi"], to=F),
        node("Mul", ["v_out", "fi"], ["scan_out"]), node("Identity", ["cond_in"], ["cond_out"])],
        [("i", I64, []), ("cond_in", BOOL, []), ("v", F, None)],
        [("cond_out", BOOL, []), ("v_out", F, None), ("scan_out", F, None)])
    C.append(Case("loop_trip_count_scan_output", [node("Loop", ["M", "yes", "X"], ["V", "S"], body=loop_b)],
                  [("X", F, ["N", 3])], ["V", "S"], {"M": np.array(4, np.int64), "yes": np.array(True)}))
    stop_b = body("stop_body", [
        node("Mul", ["v", "two"], ["v_out"]), node("Less", ["i", "two_i"], ["cond_out"])],
        [("i", I64, []), ("cond_in", BOOL, []), ("v", F, None)],
        [("cond_out", BOOL, []), ("v_out", F, None)], {"two": f32(2.0), "two_i": np.array(2, np.int64)})
    C.append(Case("loop_condition_only", [node("Loop", ["", "yes", "X"], ["V"], body=stop_b)],
                  [("X", F, ["N", 3])], ["V"], {"yes": np.array(True)}))
    scan_b = body("scan_body", [node("Add", ["s", "x"], ["s_out"]), node("Mul", ["s_out", "x"], ["y"])],
                  [("s", F, [3]), ("x", F, [3])], [("s_out", F, [3]), ("y", F, [3])])
    C.append(Case("scan_cumulative_sum", [node("Scan", ["s0", "X"], ["S", "Y"], body=scan_b, num_scan_inputs=1)],
                  [("X", F, [5, 3])], ["S", "Y"], {"s0": W(rng, 3)}))
    C.append(Case("scan_axes_directions", [node("Scan", ["s0", "X"], ["S", "Y"], body=scan_b, num_scan_inputs=1,
                                                scan_input_axes=[1], scan_input_directions=[1],
                                                scan_output_axes=[1], scan_output_directions=[1])],
                  [("X", F, [3, 4])], ["S", "Y"], {"s0": W(rng, 3)}))
    # ---------------- QuantizeLinear / DequantizeLinear ----------------
    U8, I8 = TensorProto.UINT8, TensorProto.INT8
    C.append(Case("qdq_per_tensor_uint8", [node("QuantizeLinear", ["X", "s", "z"], ["Q"]),
                                           node("DequantizeLinear", ["Q", "s", "z"], ["Y"])],
                  [("X", F, ["N", 8])], [("Q", U8), "Y"], {"s": f32(0.02), "z": np.array(128, np.uint8)}))
    C.append(Case("qdq_per_axis_int8", [node("QuantizeLinear", ["X", "s", "z"], ["Q"], axis=1),
                                        node("DequantizeLinear", ["Q", "s", "z"], ["Y"], axis=1)],
                  [("X", F, ["N", 3, 4])], [("Q", I8), "Y"],
                  {"s": f32(0.01, 0.02, 0.05), "z": np.array([0, -10, 5], np.int8)}))
    C.append(Case("quantize_no_zero_point", [node("QuantizeLinear", ["X", "s"], ["Q"])],
                  [("X", F, ["N", 6])], [("Q", U8)], {"s": f32(0.01)}))
    C.append(Case("dequantize_weight_per_axis", [node("DequantizeLinear", ["Wq", "s", "z"], ["Wd"], axis=0),
                                                 node("MatMul", ["X", "Wd"], ["Y"])],
                  [("X", F, ["N", 4])], ["Wd", "Y"],
                  {"Wq": rng.integers(-128, 128, size=(4, 3)).astype(np.int8), "s": f32(0.1, 0.01, 0.5, 0.02),
                   "z": np.array([0, 3, -2, 1], np.int8)}))
    C.append(Case("dynamicquantizelinear", [node("DynamicQuantizeLinear", ["X"], ["Q", "s", "z"])],
                  [("X", F, ["N", 6])], [("Q", U8), "s", ("z", U8)]))
    # ---------------- com.microsoft contrib ops ----------------
    XB = [("X", F, ["N", 4, 8])]
    C.append(Case("ms_skiplayernorm", [ms_node("SkipLayerNormalization", ["X", "skip", "gamma", "beta", "bias"], ["Y", "", "", "S"], epsilon=1e-5)],
                  XB + [("skip", F, ["N", 4, 8])], ["Y", "S"],
                  {"gamma": 1 + W(rng, 8), "beta": W(rng, 8), "bias": W(rng, 8)}))
    C.append(Case("ms_skipsimplifiedlayernorm", [ms_node("SkipSimplifiedLayerNormalization", ["X", "skip", "gamma", "bias"], ["Y", "", "", "S"], epsilon=1e-6)],
                  XB + [("skip", F, ["N", 4, 8])], ["Y", "S"], {"gamma": 1 + W(rng, 8), "bias": W(rng, 8)}))
    C.append(Case("ms_fastgelu_bias", [ms_node("FastGelu", ["X", "bias"], ["Y"])], XB, ["Y"], {"bias": W(rng, 8)}))
    C.append(Case("ms_biasgelu", [ms_node("BiasGelu", ["X", "bias"], ["Y"])], XB, ["Y"], {"bias": W(rng, 8)}))
    C.append(Case("ms_gelu", [ms_node("Gelu", ["X"], ["Y"])], XB, ["Y"]))
    C.append(Case("ms_quickgelu", [ms_node("QuickGelu", ["X"], ["Y"], alpha=1.5)], XB, ["Y"]))
    XA = [("X", F, ["N", 5, 8])]
    C.append(Case("ms_attention_mask_index", [ms_node("Attention", ["X", "w", "b", "mask"], ["Y"], num_heads=2)],
                  XA, ["Y"], {"w": W(rng, 8, 24) * 5, "b": W(rng, 24), "mask": np.array([5, 3], np.int32)}))
    C.append(Case("ms_attention_raw_mask", [ms_node("Attention", ["X", "w", "b", "mask"], ["Y"], num_heads=4)],
                  XA, ["Y"], {"w": W(rng, 8, 24) * 5, "b": W(rng, 24),
                              "mask": np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], np.int32)}))
    C.append(Case("ms_attention_unidirectional_qkv_sizes", [ms_node("Attention", ["X", "w", "b"], ["Y"], num_heads=2,
                                                                     unidirectional=1, qkv_hidden_sizes=[8, 8, 4])],
                  XA, ["Y"], {"w": W(rng, 8, 20) * 5, "b": W(rng, 20)}))
    return C


def spec_cases(rng):
    """Ops of the ONNX spec that exporters emit (detection, vision, opset 23+ transformer ops,
    signal processing): shapes and types compared with onnxruntime by tests/shapes.rs."""
    C = []
    # ---------------- detection / vision ops (issue 10's exports) ----------------
    X38 = [("X", F, ["N", 3, 8, 8])]
    C.append(Case("nonmaxsuppression_none_selected_opset11", [node("NonMaxSuppression", ["B", "S", "m"], ["Y"])],
                  [("B", F, ["N", 6, 4]), ("S", F, ["N", 2, 6])], [("Y", I64)], {"m": i64(0)}, opset=11))
    C.append(Case("roialign_opset16", [node("RoiAlign", ["X", "rois", "bi"], ["Y"], output_height=3, output_width=4, sampling_ratio=2, spatial_scale=0.5)],
                  X38, ["Y"], {"rois": f32(0, 0, 8, 8, 2, 2, 12, 14, 0, 0, 15, 15).reshape(3, 4), "bi": i64(0, 1, 1)}, opset=16))
    C.append(Case("maxroipool", [node("MaxRoiPool", ["X", "rois"], ["Y"], pooled_shape=[2, 3])],
                  X38, ["Y"], {"rois": f32(0, 0, 0, 4, 4, 1, 1, 1, 6, 7).reshape(2, 5)}))
    C.append(Case("gridsample_bilinear_opset16", [node("GridSample", ["X", "G"], ["Y"], align_corners=1)],
                  X38 + [("G", F, ["N", 5, 6, 2])], ["Y"], opset=16))
    C.append(Case("gridsample_nearest_border_opset20", [node("GridSample", ["X", "G"], ["Y"], mode="nearest", padding_mode="border")],
                  X38 + [("G", F, ["N", 5, 6, 2])], ["Y"], opset=20))
    C.append(Case("affinegrid_opset20", [node("AffineGrid", ["T", "size"], ["Y"])],
                  [("T", F, [2, 2, 3])], ["Y"], {"size": i64(2, 3, 5, 6)}, opset=20))
    C.append(Case("onehot_axis1_opset11", [node("OneHot", ["I", "depth", "vals"], ["Y"], axis=1)],
                  [("I", I64, ["N", 3])], ["Y"], {"depth": np.array(5, np.int64), "vals": f32(0, 1)}, opset=11, feed_high={"I": 5}))
    C.append(Case("compress_axis1", [node("Compress", ["X", "cond"], ["Y"], axis=1)],
                  X38, ["Y"], {"cond": np.array([True, False, True])}))
    C.append(Case("compress_flat", [node("Compress", ["X", "cond"], ["Y"])],
                  [("X", F, ["N", 3])], ["Y"], {"cond": np.array([True, False, True, True, False])}))
    C.append(Case("reversesequence_batch_major", [node("ReverseSequence", ["X", "lens"], ["Y"], batch_axis=0, time_axis=1)],
                  [("X", F, ["N", 4, 5])], ["Y"], {"lens": i64(4, 2)}))
    C.append(Case("maxunpool_after_maxpool", [node("MaxPool", ["X"], ["P", "I"], kernel_shape=[2, 2], strides=[2, 2]),
                                              node("MaxUnpool", ["P", "I"], ["Y"], kernel_shape=[2, 2], strides=[2, 2])],
                  X38, ["Y"]))
    C.append(Case("maxunpool_output_shape", [node("MaxPool", ["X"], ["P", "I"], kernel_shape=[2, 2], strides=[2, 2]),
                                             node("MaxUnpool", ["P", "I", "os"], ["Y"], kernel_shape=[2, 2], strides=[2, 2])],
                  [("X", F, [2, 3, 9, 9])], ["Y"], {"os": i64(2, 3, 9, 9)}))
    C.append(Case("cumprod_reverse_opset26", [node("CumProd", ["X", "ax"], ["Y"], reverse=1)],
                  [("X", F, ["N", 3, 4])], ["Y"], {"ax": np.array(1, np.int64)}, opset=26))
    C.append(Case("swish_opset24", [node("Swish", ["X"], ["Y"], alpha=0.5)],
                  [("X", F, ["N", 6])], ["Y"], opset=24))
    I32 = TensorProto.INT32
    C.append(Case("bitwise_opset18", [node("BitwiseAnd", ["A", "B"], ["and"]), node("BitwiseOr", ["A", "B"], ["or"]),
                                      node("BitwiseXor", ["A", "B"], ["xor"]), node("BitwiseNot", ["A"], ["not"])],
                  [("A", I32, ["N", 4]), ("B", I32, [4])], [("and", I32), ("or", I32), ("xor", I32), ("not", I32)], opset=18))
    C.append(Case("bitcast_float_to_int32_opset26", [node("BitCast", ["X"], ["Y"], to=I32)],
                  [("X", F, ["N", 4])], [("Y", I32)], opset=26))
    C.append(Case("det_batch_opset22", [node("Det", ["X"], ["Y"])], [("X", F, ["N", 3, 3])], ["Y"], opset=22))
    C.append(Case("col2im_opset18", [node("Col2Im", ["X", "img", "blk"], ["Y"])],
                  [("X", F, ["N", 12, 25])], ["Y"], {"img": i64(6, 6), "blk": i64(2, 2)}, opset=18))
    C.append(Case("col2im_strides_pads_opset18", [node("Col2Im", ["X", "img", "blk"], ["Y"], pads=[1, 1, 1, 1], strides=[2, 2])],
                  [("X", F, ["N", 18, 9])], ["Y"], {"img": i64(5, 5), "blk": i64(3, 3)}, opset=18))
    C.append(Case("deformconv_opset22", [node("DeformConv", ["X", "W", "off"], ["Y"], pads=[1, 1, 1, 1])],
                  X38 + [("off", F, ["N", 18, 8, 8])], ["Y"], {"W": W(rng, 4, 3, 3, 3)}, opset=22))
    C.append(Case("deformconv_mask_strides_opset22", [node("DeformConv", ["X", "W", "off", "B", "mask"], ["Y"], pads=[1, 1, 1, 1], strides=[2, 2])],
                  X38 + [("off", F, ["N", 18, 4, 4]), ("mask", F, ["N", 9, 4, 4])], ["Y"], {"W": W(rng, 4, 3, 3, 3), "B": W(rng, 4)}, opset=22))
    C.append(Case("centercroppad_opset18", [node("CenterCropPad", ["X", "shape"], ["Y"], axes=[2, 3])],
                  X38, ["Y"], {"shape": i64(5, 11)}, opset=18))
    # ---------------- transformer ops of the default domain (opset 23+) ----------------
    Q4 = [("Q", F, ["N", 4, 5, 8]), ("K", F, ["N", 4, 5, 8]), ("V", F, ["N", 4, 5, 8])]
    C.append(Case("attention_4d_past_opset23", [node("Attention", ["Q", "K", "V", "", "pk", "pv"], ["Y", "present_k", "present_v", "qk"])],
                  Q4 + [("pk", F, ["N", 4, 3, 8]), ("pv", F, ["N", 4, 3, 8])], ["Y", "present_k", "present_v", "qk"], opset=23))
    C.append(Case("attention_3d_gqa_causal_opset23", [node("Attention", ["Q", "K", "V"], ["Y", "present_k", "present_v", "qk"], q_num_heads=4, kv_num_heads=2, is_causal=1)],
                  [("Q", F, ["N", 5, 32]), ("K", F, ["N", 6, 16]), ("V", F, ["N", 6, 24])], ["Y", "present_k", "present_v", "qk"], opset=23))
    C.append(Case("rotaryembedding_4d_opset23", [node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"])],
                  [("X", F, ["N", 4, 5, 8]), ("pos", I64, ["N", 5])], ["Y"], {"cos": W(rng, 10, 4), "sin": W(rng, 10, 4)}, opset=23, feed_high={"pos": 10}))
    C.append(Case("rotaryembedding_3d_partial_opset23", [node("RotaryEmbedding", ["X", "cos", "sin", "pos"], ["Y"], num_heads=2, rotary_embedding_dim=4, interleaved=1)],
                  [("X", F, ["N", 5, 16]), ("pos", I64, ["N", 5])], ["Y"], {"cos": W(rng, 10, 2), "sin": W(rng, 10, 2)}, opset=23, feed_high={"pos": 10}))
    C.append(Case("tensorscatter_circular_opset24", [node("TensorScatter", ["P", "U", "w"], ["Y"], mode="circular")],
                  [("P", F, ["N", 4, 10, 8]), ("U", F, ["N", 4, 3, 8]), ("w", I64, ["N"])], ["Y"], opset=24))
    C.append(Case("linearattention_linear_opset27", [node("LinearAttention", ["q", "k", "v"], ["Y", "state"], q_num_heads=2, kv_num_heads=2, update_rule="linear")],
                  [("q", F, ["N", 5, 8]), ("k", F, ["N", 5, 8]), ("v", F, ["N", 5, 6])], ["Y", "state"], opset=27))
    # ---------------- signal, losses, sampling, text ----------------
    C.append(Case("dft_axis_input_opset20", [node("DFT", ["X", "", "ax"], ["Y"])],
                  [("X", F, ["N", 64, 1])], ["Y"], {"ax": np.array(1, np.int64)}, opset=20))
    C.append(Case("dft_onesided_length_opset20", [node("DFT", ["X", "len", "ax"], ["Y"], onesided=1)],
                  [("X", F, ["N", 64, 1])], ["Y"], {"len": np.array(32, np.int64), "ax": np.array(1, np.int64)}, opset=20))
    C.append(Case("dft_onesided_attr_axis", [node("DFT", ["X"], ["Y"], axis=1, onesided=1)],
                  [("X", F, ["N", 64, 1])], ["Y"]))
    C.append(Case("stft_window", [node("STFT", ["X", "step", "win"], ["Y"])],
                  [("X", F, ["N", 64, 1])], ["Y"], {"step": np.array(8, np.int64), "win": np.hanning(16).astype(np.float32)}))
    C.append(Case("windows", [node("HannWindow", ["n"], ["hann"]), node("HammingWindow", ["n"], ["hamming"], periodic=0),
                              node("BlackmanWindow", ["n"], ["blackman"], output_datatype=TensorProto.DOUBLE)],
                  [], ["hann", "hamming", ("blackman", TensorProto.DOUBLE)], {"n": np.array(10, np.int64)}))
    C.append(Case("melweightmatrix", [node("MelWeightMatrix", ["bins", "dft", "rate", "lo", "hi"], ["Y"])],
                  [], ["Y"], {"bins": np.array(8, np.int64), "dft": np.array(16, np.int64), "rate": np.array(8000, np.int64), "lo": np.array(0, np.float32), "hi": np.array(4000, np.float32)}))
    C.append(Case("nllloss_none_opset22", [node("NegativeLogLikelihoodLoss", ["X", "T"], ["Y"], reduction="none")],
                  [("X", F, ["N", 5, 3]), ("T", I64, ["N", 3])], ["Y"], opset=22, feed_high={"T": 5}))
    C.append(Case("softmaxcrossentropyloss_mean_opset13", [node("SoftmaxCrossEntropyLoss", ["X", "T"], ["Y", "logp"])],
                  [("X", F, ["N", 5, 3]), ("T", I64, ["N", 3])], ["Y", "logp"], opset=13, feed_high={"T": 5}))
    C.append(Case("multinomial_opset15", [node("Multinomial", ["X"], ["Y"], sample_size=3, seed=1.0)],
                  [("X", F, ["N", 5])], [("Y", I32)], opset=15))
    C.append(Case("tfidfvectorizer_tf_opset9", [node("TfIdfVectorizer", ["X"], ["Y"], mode="TF", pool_int64s=[1, 2, 3], ngram_counts=[0],
                                                      ngram_indexes=[0, 1, 2], min_gram_length=1, max_gram_length=1, max_skip_count=0)],
                  [("X", I64, ["N", 6])], ["Y"], opset=9, feed_high={"X": 5}))
    C.append(Case("causalconvwithstate_silu_opset27", [node("CausalConvWithState", ["X", "W", "B", "P"], ["Y", "state"], activation="silu")],
                  [("X", F, ["N", 4, 7]), ("P", F, ["N", 4, 2])], ["Y", "state"], {"W": W(rng, 4, 1, 3), "B": W(rng, 4)}, opset=27))
    C.append(Case("scatter_axis1_opset10", [node("Scatter", ["X", "idx", "U"], ["Y"], axis=1)],
                  [("X", F, ["N", 5])], ["Y"], {"idx": np.array([[1, 3], [0, 2]], np.int64), "U": W(rng, 2, 2)}, opset=10))
    return C


# --------------------------------------------------------------------------
# ground truth
# --------------------------------------------------------------------------

def np_dtype_of(elem_type):
    return helper.tensor_dtype_to_np_dtype(elem_type)


def resolve_dims(model):
    dims = {}
    for vi in model.graph.input:
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                if d.dim_param not in DIM_VALUES:
                    raise ValueError(f"unknown symbolic dim {d.dim_param!r}")
                dims[d.dim_param] = DIM_VALUES[d.dim_param]
    return dims


def make_feeds(model, dims, feed_high, seed):
    rng = np.random.default_rng(seed)
    init_names = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        tt = vi.type.tensor_type
        shape = [dims[d.dim_param] if d.HasField("dim_param") else d.dim_value for d in tt.shape.dim]
        dt = np_dtype_of(tt.elem_type)
        if np.issubdtype(dt, np.floating):
            feeds[vi.name] = rng.standard_normal(shape).astype(dt)
        elif dt == np.bool_:
            feeds[vi.name] = rng.random(shape) > 0.5
        else:
            feeds[vi.name] = rng.integers(0, feed_high.get(vi.name, 10), size=shape).astype(dt)
    return feeds


def all_value_names(model):
    init_names = {i.name for i in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in init_names]
    for n in model.graph.node:
        for o in n.output:
            if o and o not in names:
                names.append(o)
    return names


def measure_values(model, feeds):
    """Shapes/dtypes of every graph input and node output, via onnxruntime."""
    import onnxruntime as ort
    m = copy.deepcopy(model)
    existing = {o.name for o in m.graph.output}
    node_outputs = [o for n in m.graph.node for o in n.output if o]
    for o in node_outputs:
        if o not in existing:
            m.graph.output.append(helper.make_empty_tensor_value_info(o))
            existing.add(o)
    values, skipped = {}, {}
    try:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        res = sess.run(names, feeds)
        source = f"onnxruntime {ort.__version__}"
        got = dict(zip(names, res))
    except Exception as e:  # fall back to the onnx reference implementation
        from onnx.reference import ReferenceEvaluator
        reason = str(e).strip().splitlines()[0][:300]
        note(f"{model.graph.name}: onnxruntime failed ({reason}); using onnx.reference")
        ev = ReferenceEvaluator(model)
        res = ev.run(node_outputs, feeds)
        got = dict(zip(node_outputs, res))
        source = f"onnx.reference {onnx.__version__} (onnxruntime failed: {reason})"
    for name in all_value_names(model):
        if name in feeds:
            arr = feeds[name]
        elif name in got:
            arr = got[name]
        else:
            skipped[name] = "not exposed by the runtime"
            continue
        arr = np.asarray(arr)
        values[name] = {"shape": [int(d) for d in arr.shape], "dtype": arr.dtype.name}
    return values, skipped, source


def onnx_inferred_shapes(model, names):
    try:
        inf = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception as e:
        note(f"{model.graph.name}: onnx shape inference failed: {e}")
        return {n: None for n in names}
    table = {}
    for vi in list(inf.graph.input) + list(inf.graph.value_info) + list(inf.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            table[vi.name] = None
            continue
        # dims onnx invents for unknowns ("unk__0", ...) are reported as null
        table[vi.name] = [d.dim_value if d.HasField("dim_value") else
                          d.dim_param if d.HasField("dim_param") and not d.dim_param.startswith("unk__") else None
                          for d in tt.shape.dim]
    return {n: table.get(n) for n in names}


def initializer_stats(model):
    count = elems = nbytes = 0
    for t in model.graph.initializer:
        n = int(np.prod(t.dims)) if len(t.dims) else 1
        count += 1
        elems += n
        nbytes += n * np.dtype(np_dtype_of(t.data_type)).itemsize
    return {"count": count, "elements": elems, "bytes": nbytes}


def external_data_length(model):
    """max(offset + length) over external initializers, and the file name."""
    files, end = set(), 0
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        files.add(info["location"])
        end = max(end, int(info.get("offset", 0)) + int(info["length"]))
    return files, end


def rel(path):
    return os.path.relpath(path, HERE).replace(os.sep, "/")


def expected_path(model_path):
    r = os.path.relpath(model_path, MODELS).replace(os.sep, "/")
    return os.path.join(EXPECTED, r[:-len(".onnx")].replace("/", "__") + ".json")


def dumps(obj, depth=0):
    """JSON with the top two levels of objects expanded, one entry per line."""
    if isinstance(obj, dict) and obj and depth <= 1:
        pad = "  " * (depth + 1)
        body = ",\n".join(f"{pad}{json.dumps(k)}: {dumps(v, depth + 1)}" for k, v in obj.items())
        return "{\n" + body + "\n" + "  " * depth + "}"
    return json.dumps(obj)


def write_expected(model_path, model_full, extra=None, feed_high=None, seed=0):
    """model_full: ModelProto with all tensor data loaded (for running)."""
    dims = resolve_dims(model_full)
    feeds = make_feeds(model_full, dims, feed_high or {}, seed)
    values, skipped, source = measure_values(model_full, feeds)
    if skipped:
        note(f"{rel(model_path)}: values not exposed: {sorted(skipped)}")
    graph_only = onnx.load(model_path, load_external_data=False)
    exp = {"model": rel(model_path), "batch": BATCH, "dims": dims, "source": source,
           "values": values}
    if skipped:
        exp["skipped_values"] = skipped
    exp["onnx_shape_inference"] = onnx_inferred_shapes(graph_only, list(values))
    exp["initializers"] = initializer_stats(graph_only)
    if extra:
        exp.update(extra)
    os.makedirs(EXPECTED, exist_ok=True)
    with open(expected_path(model_path), "w") as f:
        f.write(dumps(exp) + "\n")
    return exp


def check(path):
    onnx.checker.check_model(path)


# --------------------------------------------------------------------------
# a) op zoo, b) conv3x3_64_128
# --------------------------------------------------------------------------

def set_output_ranks(m, feed_high, seed):
    """The checker wants a shape on every graph output.  Give zoo outputs
    their rank only (every dim unknown: no dim_value, no dim_param), taken
    from an onnxruntime run, so nnlint still has to infer the dims."""
    feeds = make_feeds(m, resolve_dims(m), feed_high, seed)
    values, _, _ = measure_values(m, feeds)
    for o in m.graph.output:
        shape = o.type.tensor_type.shape
        del shape.dim[:]
        for _ in values[o.name]["shape"]:
            shape.dim.add()


ZOO_SEED0 = 1000  # op zoo case i runs on make_feeds(..., seed=ZOO_SEED0 + i)
CONV3X3_SEED = 7


def gen_zoo():
    out = os.path.join(MODELS, "ops")
    os.makedirs(out, exist_ok=True)
    cases = zoo_cases()
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "duplicate case names"
    for f in os.listdir(out):  # drop stale fixtures from removed cases
        if f.endswith(".onnx") and f[:-5] not in names:
            os.remove(os.path.join(out, f))
    for i, c in enumerate(cases):
        m = build_case(c)
        set_output_ranks(m, c.feed_high, ZOO_SEED0 + i)
        path = os.path.join(out, c.name + ".onnx")
        onnx.save_model(m, path)
        check(path)
        write_expected(path, m, feed_high=c.feed_high, seed=ZOO_SEED0 + i)
    print(f"op zoo: {len(cases)} models")


def gen_conv3x3():
    rng = np.random.default_rng(64128)
    m = build_case(Case("conv3x3_64_128",
                        [node("Conv", ["input", "weight", "bias"], ["output"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
                        [("input", F, ["N", 64, 56, 56])], ["output"],
                        {"weight": W(rng, 128, 64, 3, 3), "bias": W(rng, 128)}))
    set_output_ranks(m, {}, CONV3X3_SEED)
    path = os.path.join(MODELS, "conv3x3_64_128.onnx")
    onnx.save_model(m, path)
    check(path)
    exp = write_expected(path, m, seed=CONV3X3_SEED)
    assert exp["initializers"]["elements"] == 73856


# --------------------------------------------------------------------------
# b2) models/branches/: If decided by a scalar input's value or by a shape, and the integer ops
#     of a dynamically quantized model. The expected figures in models/branches/expected.json come
#     from onnxruntime (output shapes) and onnx.reference (the If branch that runs and the shapes
#     inside it), with textbook MAC formulas: never from nnlint.
# --------------------------------------------------------------------------

BRANCHES = os.path.join(MODELS, "branches")


def branch_models():
    rng = np.random.default_rng(1916)
    U8, I8 = TensorProto.UINT8, TensorProto.INT8
    out = {}
    # silero-vad's shape: the sample rate picks a branch; each branch slices the weights it needs
    # from a main-graph initializer (folded at load: not an activation)
    then_b = body("sr16k", [
        node("Slice", ["Wbig", "s0", "e16", "ax1"], ["W16"]),
        node("MatMul", ["x", "W16"], ["y16"])], [], [("y16", F, [1, 16])],
        {"s0": i64(0), "e16": i64(16), "ax1": i64(1)})
    else_b = body("sr8k", [
        node("Slice", ["Wbig", "s16", "e20", "ax1b"], ["W4"]),
        node("MatMul", ["x", "W4"], ["h4"]),
        node("MatMul", ["h4", "Wup"], ["y8"])], [], [("y8", F, [1, 16])],
        {"s16": i64(16), "e20": i64(20), "ax1b": i64(1)})
    out["if_sample_rate"] = (helper.make_model(helper.make_graph(
        [node("Equal", ["sr", "sr16k"], ["is16k"]),
         node("If", ["is16k"], ["y"], then_branch=then_b, else_branch=else_b)],
        "if_sample_rate",
        [helper.make_tensor_value_info("x", F, [1, 8]), helper.make_tensor_value_info("sr", I64, [])],
        [helper.make_tensor_value_info("y", F, [1, 16])],
        [numpy_helper.from_array(W(rng, 8, 32), "Wbig"), numpy_helper.from_array(W(rng, 4, 16), "Wup"),
         numpy_helper.from_array(np.array(16000, np.int64), "sr16k")]),
        opset_imports=[helper.make_opsetid("", 17)]),
        [{"sr": 16000}, {"sr": 8000}])
    # an If decided by an input's shape (a PyTorch export's `if state.size(0)`)
    mm = body("has_state", [node("MatMul", ["x", "Wm"], ["t"])], [], [("t", F, ["N", 4])])
    ident = body("no_state", [node("Identity", ["x"], ["e"])], [], [("e", F, ["N", 4])])
    out["if_state_shape"] = (helper.make_model(helper.make_graph(
        [node("Shape", ["state"], ["st_shape"]), node("Gather", ["st_shape", "zero"], ["d0"], axis=0),
         node("Cast", ["d0"], ["has"], to=BOOL),
         node("If", ["has"], ["y"], then_branch=mm, else_branch=ident)],
        "if_state_shape",
        [helper.make_tensor_value_info("x", F, ["N", 4]), helper.make_tensor_value_info("state", F, [2, "N", 4])],
        [helper.make_tensor_value_info("y", F, ["N", 4])],
        [numpy_helper.from_array(W(rng, 4, 4), "Wm"), numpy_helper.from_array(np.array(0, np.int64), "zero")]),
        opset_imports=[helper.make_opsetid("", 17)]), [{}])
    # onnxruntime's dynamic quantization: ConvInteger, MatMulInteger, DynamicQuantizeLSTM
    h = 4
    out["quantized_ops"] = (helper.make_model(helper.make_graph(
        [node("DynamicQuantizeLinear", ["X"], ["Xq", "Xs", "Xz"]),
         node("ConvInteger", ["Xq", "Wc", "Xz", "Wcz"], ["C"]),
         node("Cast", ["C"], ["Cf"], to=F),
         node("Reshape", ["Cf", "flat"], ["Cr"]),
         node("DynamicQuantizeLinear", ["Cr"], ["Aq", "As", "Az"]),
         node("MatMulInteger", ["Aq", "Wm", "Az", "Wmz"], ["M"]),
         node("Cast", ["M"], ["Mf"], to=F),
         ms_node("DynamicQuantizeLSTM", ["S", "Wl", "Rl", "Bl", "", "", "", "", "Wls", "Wlz", "Rls", "Rlz"],
                 ["Y", "Y_h", "Y_c"], hidden_size=h)],
        "quantized_ops",
        [helper.make_tensor_value_info("X", F, [1, 3, 8, 8]), helper.make_tensor_value_info("S", F, [5, 1, 10])],
        [helper.make_tensor_value_info("Mf", F, [1, 10]), helper.make_tensor_value_info("Y", F, [5, 1, 1, h])],
        [numpy_helper.from_array(rng.integers(0, 256, size=(4, 3, 3, 3)).astype(np.uint8), "Wc"),
         numpy_helper.from_array(np.array(128, np.uint8), "Wcz"),
         numpy_helper.from_array(i64(1, 144), "flat"),
         numpy_helper.from_array(rng.integers(0, 256, size=(144, 10)).astype(np.uint8), "Wm"),
         numpy_helper.from_array(np.array(128, np.uint8), "Wmz"),
         numpy_helper.from_array(rng.integers(-128, 128, size=(1, 10, 4 * h)).astype(np.int8), "Wl"),
         numpy_helper.from_array(rng.integers(-128, 128, size=(1, h, 4 * h)).astype(np.int8), "Rl"),
         numpy_helper.from_array(W(rng, 1, 8 * h), "Bl"),
         numpy_helper.from_array(f32(0.01), "Wls"), numpy_helper.from_array(np.array([0], np.int8), "Wlz"),
         numpy_helper.from_array(f32(0.01), "Rls"), numpy_helper.from_array(np.array([0], np.int8), "Rlz")]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]), [{}])
    # a Loop whose trip count is a scalar input (a number of refinement steps)
    step = body("step", [node("MatMul", ["v", "Wl"], ["v_out"]), node("Identity", ["c_in"], ["c_out"])],
                [("i", I64, []), ("c_in", BOOL, []), ("v", F, [1, 3])],
                [("c_out", BOOL, []), ("v_out", F, [1, 3])])
    out["loop_steps_input"] = (helper.make_model(helper.make_graph(
        [node("Loop", ["steps", "go", "x"], ["y"], body=step)],
        "loop_steps_input",
        [helper.make_tensor_value_info("x", F, [1, 3]), helper.make_tensor_value_info("steps", I64, [])],
        [helper.make_tensor_value_info("y", F, [1, 3])],
        [numpy_helper.from_array(W(rng, 3, 3), "Wl"), numpy_helper.from_array(np.array(True), "go")]),
        opset_imports=[helper.make_opsetid("", 17)]), [{"steps": 4}])
    return out


def reference_macs(op, ins, outs, proto):
    """Textbook MACs from measured shapes (tools/corpus/macs.py's formulas)."""
    if op in ("MatMul", "MatMulInteger"):
        return int(np.prod(outs[0])) * ins[0][-1]
    if op == "ConvInteger":
        return int(np.prod(outs[0])) * int(np.prod(ins[1][1:]))
    if op == "DynamicQuantizeLSTM":
        hidden = next(a.i for a in proto.attribute if a.name == "hidden_size")
        seq, batch, inp = ins[0]
        return ins[1][0] * seq * batch * 4 * hidden * (inp + hidden)
    return 0


def gen_branches():
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator
    os.makedirs(BRANCHES, exist_ok=True)
    expected = {}
    for name, (m, runs) in branch_models().items():
        path = os.path.join(BRANCHES, name + ".onnx")
        onnx.save_model(m, path)
        check(path)
        rng = np.random.default_rng(0)
        feeds = {"x": rng.standard_normal({"if_sample_rate": (1, 8), "loop_steps_input": (1, 3)}.get(name, (2, 4)))
                 .astype(np.float32),
                 "state": rng.standard_normal((2, 2, 4)).astype(np.float32),
                 "X": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
                 "S": rng.standard_normal((5, 1, 10)).astype(np.float32)}
        feeds = {i.name: feeds[i.name] for i in m.graph.input if i.name in feeds}
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        cases = []
        for values in runs:
            f = dict(feeds, **{k: np.array(v, np.int64) for k, v in values.items()})
            ort_out = sess.run(None, f)
            rec = {"values": values, "outputs": {o.name: list(r.shape) for o, r in zip(m.graph.output, ort_out)}}
            if any(n.op_type == "Loop" for n in m.graph.node):
                ev = ReferenceEvaluator(m)
                runs = {"n": 0, "macs": 0}
                for rt in ev.rt_nodes_:
                    for srt in rt.body.rt_nodes_:
                        def wrap_loop(srt=srt):
                            orig = srt.run

                            def run(*a, **k):
                                res = orig(*a, **k)
                                ins = [list(np.shape(x)) for x in a]
                                outs = [list(np.shape(r)) for r in res]
                                if srt.onnx_node.op_type == "MatMul":
                                    runs["n"] += 1
                                runs["macs"] += reference_macs(srt.onnx_node.op_type, ins, outs, srt.onnx_node)
                                return res
                            srt.run = run
                        wrap_loop()
                ev.run(None, f)
                rec["iterations"] = runs["n"]
                rec["loop_macs"] = runs["macs"]
            elif any(n.op_type == "If" for n in m.graph.node):
                # the branch that runs, and what its nodes produce, from onnx.reference
                ev = ReferenceEvaluator(m)
                ran, macs, sub_bytes = [], 0, 0
                for rt in ev.rt_nodes_:
                    if rt.onnx_node.op_type != "If":
                        continue
                    for attr in ("then_branch", "else_branch"):
                        for srt in getattr(rt, attr).rt_nodes_:
                            def wrap(srt=srt, attr=attr):
                                orig = srt.run

                                def run(*a, **k):
                                    res = orig(*a, **k)
                                    nonlocal macs, sub_bytes
                                    ran.append(attr)
                                    ins = [list(np.shape(x)) for x in a]
                                    outs = [list(np.shape(r)) for r in res]
                                    macs += reference_macs(srt.onnx_node.op_type, ins, outs, srt.onnx_node)
                                    # a Slice of the main graph's weights is folded at load
                                    if srt.onnx_node.op_type != "Slice":
                                        sub_bytes += sum(np.asarray(r).nbytes for r in res)
                                    return res
                                srt.run = run
                            wrap()
                ev.run(None, f)
                rec["branch"] = sorted(set(ran))
                rec["branch_macs"] = macs
                rec["branch_activation_bytes"] = sub_bytes
            else:
                ev = None
                macs = {}
                shapes = {k: list(v.shape) for k, v in f.items()}
                shapes.update({t.name: list(t.dims) for t in m.graph.initializer})
                exposed = onnx.ModelProto()
                exposed.CopyFrom(m)
                del exposed.graph.output[:]
                names = [o for n in m.graph.node for o in n.output if o]
                exposed.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names)
                got = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"]).run(names, f)
                shapes.update({k: list(v.shape) for k, v in zip(names, got)})
                for n in m.graph.node:
                    ins = [shapes.get(x) for x in n.input]
                    outs = [shapes.get(o) for o in n.output]
                    k = reference_macs(n.op_type, ins, outs, n)
                    if k:
                        macs[n.op_type] = k
                rec["macs_by_op"] = macs
                rec["shapes"] = {k: shapes[k] for k in names}
            cases.append(rec)
        expected[name] = cases
    with open(os.path.join(BRANCHES, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(json.dumps(expected, indent=1, sort_keys=True))


# --------------------------------------------------------------------------
# c) PyTorch exports
# --------------------------------------------------------------------------

def torch_stats(model):
    params = list(model.parameters())
    buffers = sum(b.numel() for n, b in model.named_buffers()
                  if n.split(".")[-1] in ("running_mean", "running_var"))
    return {"params": int(sum(p.numel() for p in params)), "buffers": int(buffers),
            "param_tensors": len(params)}


def dedegenerate(model, seed):
    """Replace every float param/buffer whose elements are all equal by seeded
    random values (see the module docstring)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    seen = set()
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if not t.is_floating_point() or t.numel() == 0:
                continue
            key = (tuple(t.shape), hashlib.sha1(t.detach().cpu().numpy().tobytes()).hexdigest())
            duplicate = key in seen  # e.g. nn.TransformerEncoder deep-copies its layer
            seen.add(key)
            if duplicate:
                t.add_(torch.randn(t.shape, generator=g) * 0.01)
                if name.endswith("running_var"):
                    t.abs_()
            elif t.numel() > 1 and bool((t == t.flatten()[0]).all()) or t.numel() == 1:
                r = torch.randn(t.shape, generator=g) * 0.1
                if name.endswith("running_var"):
                    t.copy_(1.0 + r.abs())
                elif name.split(".")[-1] in ("weight",) and bool((t == 1).all()):
                    t.copy_(1.0 + r)
                else:
                    t.copy_(r)


def legacy_export(torch, model, args, path, input_names, output_names, dynamic_axes):
    torch.onnx.export(model, args, path, dynamo=False, export_params=True,
                      training=torch.onnx.TrainingMode.PRESERVE, do_constant_folding=False,
                      opset_version=17, input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes)


def make_minicnn(torch):
    nn = torch.nn

    class ConvBNReLU(nn.Sequential):
        def __init__(self, cin, cout, stride):
            super().__init__(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    class MiniCNN(nn.Module):
        """conv-bn-relu x3 (stride 2), residual add, maxpool, adaptive avg pool,
        flatten, dropout, linear.  Input [batch, 3, 64, 64], 10 classes."""

        def __init__(self, num_classes=10):
            super().__init__()
            self.stem = ConvBNReLU(3, 16, 2)
            self.block1 = ConvBNReLU(16, 32, 2)
            self.block2 = ConvBNReLU(32, 32, 1)
            self.down = ConvBNReLU(32, 64, 2)
            self.pool = nn.MaxPool2d(2, 2)
            self.avg = nn.AdaptiveAvgPool2d(1)
            self.drop = nn.Dropout(0.2)
            self.fc = nn.Linear(64, num_classes)

        def forward(self, x):
            x = self.stem(x)
            x = self.block1(x)
            x = x + self.block2(x)      # residual
            x = self.down(x)
            x = self.pool(x)
            x = self.avg(x)
            x = torch.flatten(x, 1)
            x = self.drop(x)
            return self.fc(x)

    return MiniCNN()


class TinyTransformerFactory:
    @staticmethod
    def make(torch):
        nn = torch.nn

        class TinyTransformer(nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = nn.Embedding(1000, 64)
                layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                                   dropout=0.1, batch_first=True)
                self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)

            def forward(self, ids):
                return self.encoder(self.embed(ids))

        return TinyTransformer()


def export_torch_model(torch, name, model, example, input_name, output_name, dyn_axes,
                       external, feed_high=None, seed=0, probe_seq=False):
    out_dir = os.path.join(MODELS, "torch")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".onnx")
    stats = torch_stats(model)
    tmp = path + ".tmp"
    legacy_export(torch, model, (example,), tmp, [input_name], [output_name], dyn_axes)
    m = onnx.load(tmp)
    os.remove(tmp)
    extra = {"torch": stats}
    data_name = name + ".onnx.data"
    data_path = os.path.join(out_dir, data_name)
    if external:
        if os.path.exists(data_path):
            os.remove(data_path)
        m_full = copy.deepcopy(m)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data_name, size_threshold=0)
        check(path)
        graph_only = onnx.load(path, load_external_data=False)
        files, length = external_data_length(graph_only)
        assert files == {data_name}, files
        actual = os.path.getsize(data_path)
        if actual != length:
            note(f"{name}: data file is {actual} bytes, max(offset+length) is {length}")
        extra["external_data"] = {"file": data_name, "length": length}
    else:
        m_full = m
        onnx.save_model(m, path)
        check(path)
    if probe_seq:
        extra["notes"] = [probe_other_seq(path)]
    exp = write_expected(path, m_full, extra, feed_high=feed_high, seed=seed)
    if external:
        os.remove(data_path)
    ini = exp["initializers"]["elements"]
    if ini != stats["params"] + stats["buffers"]:
        note(f"{name}: ONNX initializer elements {ini} != torch params+buffers "
             f"{stats['params'] + stats['buffers']}")
    print(f"torch/{name}: params={stats['params']} values={len(exp['values'])}")


def probe_other_seq(path, seq=5):
    """Run an [batch, seq] int64-id model at another seq length."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 4
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    try:
        sess.run(None, {sess.get_inputs()[0].name: np.zeros((BATCH, seq), np.int64)})
        return f"also runs in onnxruntime at seq={seq}"
    except Exception as e:
        msg = str(e).split("Status Message:")[-1].strip().splitlines()[0]
        msg = msg.split("was false.")[-1].strip()
        note(f"{rel(path)}: fails in onnxruntime at seq={seq}: {msg}")
        return (f"fails in onnxruntime at seq={seq} (the legacy exporter baked the traced seq length "
                f"{SEQ} into Reshape shape constants): {msg}")


def gen_torch():
    try:
        import torch
        import torchvision
    except ImportError as e:
        note(f"torch/torchvision not available ({e}); skipping models/torch/*")
        return
    import warnings
    warnings.filterwarnings("ignore")
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    dyn = {"input": {0: "batch"}, "output": {0: "batch"}}

    torch.manual_seed(0)
    model = make_minicnn(torch)
    dedegenerate(model, 1)
    model.eval()
    export_torch_model(torch, "minicnn", model, torch.randn(1, 3, 64, 64), "input", "output", dyn,
                       external=False, seed=11)

    gen_safetensors_single(torch, model, "minicnn")

    tv = torchvision.models
    for i, (name, ctor) in enumerate([("resnet18", tv.resnet18), ("mobilenet_v2", tv.mobilenet_v2),
                                      ("vgg16", tv.vgg16), ("efficientnet_b0", tv.efficientnet_b0),
                                      ("vit_b_16", tv.vit_b_16)]):
        try:
            torch.manual_seed(0)
            model = ctor(weights=None)
            dedegenerate(model, 100 + i)
            model.eval()
            export_torch_model(torch, name, model, torch.randn(1, 3, 224, 224), "input", "output", dyn,
                               external=True, seed=20 + i)
        except Exception as e:
            traceback.print_exc()
            note(f"torch/{name}: export failed: {e}")

    torch.manual_seed(0)
    model = TinyTransformerFactory.make(torch)
    dedegenerate(model, 200)
    model.eval()
    # The legacy (TorchScript) exporter of torch 2.15 bakes the *traced*
    # sequence length into nn.MultiheadAttention's Reshape shapes (tgt_len
    # becomes a Constant; the batch dim stays dynamic), although the input is
    # declared [batch, seq].  We therefore trace with seq == SEQ (7), so that
    # the ground truth measured at seq 7 is valid; at any other seq length the
    # model fails in onnxruntime (recorded under "notes" in the expected file).
    ids = torch.randint(0, 1000, (1, SEQ))
    export_torch_model(torch, "tiny_transformer", model, ids, "ids", "output",
                       {"ids": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}},
                       external=False, feed_high={"ids": 1000}, seed=31, probe_seq=True)
    gen_dynamo_transformer(torch, model)
    gen_safetensors_sharded(torch, model, "tiny_transformer_bf16")


def weights_expected(torch, model, name, path, files):
    """Ground truth for a weights file, from PyTorch's own module (not from the file)."""
    stats = torch_stats(model)
    nbt = sum(b.numel() for n, b in model.named_buffers() if n.endswith("num_batches_tracked"))
    sd = model.state_dict()
    exp = {"model": rel(path), "torch": stats, "num_batches_tracked": nbt,
           "tensors": len(sd), "files": files}
    out = os.path.join(HERE, "expected", "weights", name + ".json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write(dumps(exp) + "\n")


def gen_safetensors_single(torch, model, name):
    """models/safetensors/<name>.safetensors: the module's state_dict in fp32 (with BatchNorm buffers)."""
    from safetensors.torch import save_file
    d = os.path.join(MODELS, "safetensors")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name + ".safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, path)
    weights_expected(torch, model, name, path, [os.path.basename(path)])
    print(f"safetensors/{name}: {len(model.state_dict())} tensors")


def gen_safetensors_sharded(torch, model, name):
    """models/safetensors/<name>/: the state_dict in bf16, in two shards with an HF-style index."""
    import json
    from safetensors.torch import save_file
    d = os.path.join(MODELS, "safetensors", name)
    os.makedirs(d, exist_ok=True)
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    keys = sorted(sd)
    half = len(keys) // 2
    files = [f"model-0000{i + 1}-of-00002.safetensors" for i in range(2)]
    weight_map = {}
    for i, part in enumerate([keys[:half], keys[half:]]):
        save_file({k: sd[k] for k in part}, os.path.join(d, files[i]))
        weight_map.update({k: files[i] for k in part})
    total = sum(v.numel() * v.element_size() for v in sd.values())
    index = os.path.join(d, "model.safetensors.index.json")
    with open(index, "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")
    weights_expected(torch, model, name, index, files)
    print(f"safetensors/{name}: {len(sd)} tensors in 2 shards")


def gen_dynamo_transformer(torch, model):
    path = os.path.join(MODELS, "torch", "tiny_transformer_dynamo.onnx")
    try:
        batch = torch.export.Dim("batch", min=1, max=64)
        seq = torch.export.Dim("seq", min=2, max=512)
        ids = torch.randint(0, 1000, (2, 5))
        prog = torch.onnx.export(model, (ids,), dynamo=True, input_names=["ids"], output_names=["output"],
                                 dynamic_shapes={"ids": {0: batch, 1: seq}}, optimize=True,
                                 verbose=False)
        prog.save(path)
        m = onnx.load(path)
        check(path)
        exp = write_expected(path, m, {"torch": torch_stats(model)}, feed_high={"ids": 1000}, seed=32)
        print(f"torch/tiny_transformer_dynamo: values={len(exp['values'])} dims={exp['dims']}")
    except Exception as e:
        traceback.print_exc()
        if os.path.exists(path):
            os.remove(path)
        note(f"torch/tiny_transformer_dynamo: dynamo export failed: {e}")



# --------------------------------------------------------------------------
# d) lint-rule fixtures: testdata/rules/<rule>/fire*.onnx and pass*.onnx
# --------------------------------------------------------------------------

RULES_DIR = os.path.join(HERE, "rules")


def rule_model(name, nodes, inputs, outputs, inits, opset=17):
    """A small named-node model.  inputs/outputs: [(name, elem_type, shape)];
    inits: name -> np.ndarray (stored as raw_data)."""
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             producer_name="nnlint-testdata", ir_version=8)


def save_rule_model(rule, file, m, seed=0):
    """Saves, checks with onnx (full shape inference) and runs it once in onnxruntime."""
    d = os.path.join(RULES_DIR, rule)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, file)
    onnx.save_model(m, path)
    onnx.checker.check_model(path, full_check=True)
    feeds = make_feeds(m, resolve_dims(m), {}, seed)
    measure_values(m, feeds)
    assert os.path.getsize(path) < 300_000, f"{rel(path)} is too big"
    return path


def named(op, name, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, name=name, **attrs)


def heavy_conv_model(rng, dtype=np.float32):
    """Conv 3x3, 64->128, bias, pads 1, on [N,64,56,56]; node 'conv'."""
    elem = F if dtype == np.float32 else TensorProto.FLOAT16
    return rule_model(
        "heavy_conv",
        [named("Conv", "conv", ["input", "weight", "bias"], ["output"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        [("input", elem, ["N", 64, 56, 56])], [("output", elem, ["N", 128, 56, 56])],
        {"weight": W(rng, 128, 64, 3, 3).astype(dtype), "bias": W(rng, 128).astype(dtype)})


def gen_rules():
    """Per-rule fixtures for tests/lint_rules.rs: fire*.onnx must produce a finding of the rule
    (named by the directory), pass*.onnx must not.  Weights are seeded random, non-zero and
    distinct (so duplicate-initializer never fires by accident); the batch dim is the symbolic
    'N' unless the case is about a fixed batch.  Rules whose thresholds are too high for a small
    fixture get an nnlint.toml next to the models."""
    # heavy-standard-conv
    rng = np.random.default_rng(101)
    save_rule_model("heavy-standard-conv", "fire.onnx", heavy_conv_model(rng))
    save_rule_model("heavy-standard-conv", "pass_separable.onnx", rule_model(
        "separable",
        [named("Conv", "dw", ["input", "dw.weight", "dw.bias"], ["dw_out"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], group=64),
         named("Conv", "pw", ["dw_out", "pw.weight", "pw.bias"], ["output"], kernel_shape=[1, 1])],
        [("input", F, ["N", 64, 56, 56])], [("output", F, ["N", 128, 56, 56])],
        {"dw.weight": W(rng, 64, 1, 3, 3), "dw.bias": W(rng, 64),
         "pw.weight": W(rng, 128, 64, 1, 1), "pw.bias": W(rng, 128)}))
    save_rule_model("heavy-standard-conv", "pass_stem.onnx", rule_model(
        "stem",
        [named("Conv", "stem", ["input", "stem.weight", "stem.bias"], ["output"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])],
        [("input", F, ["N", 3, 224, 224])], [("output", F, ["N", 32, 112, 112])],
        {"stem.weight": W(rng, 32, 3, 3, 3), "stem.bias": W(rng, 32)}))

    # large-fc-head: conv 3->32 on 4x4 -> Flatten (512) -> Gemm 512->64, vs GAP -> Gemm 32->64
    rng = np.random.default_rng(102)
    conv = named("Conv", "conv", ["input", "conv.weight", "conv.bias"], ["feat"],
                 kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    relu = named("Relu", "relu", ["feat"], ["act"])
    conv_inits = {"conv.weight": W(rng, 32, 3, 3, 3), "conv.bias": W(rng, 32)}
    save_rule_model("large-fc-head", "fire.onnx", rule_model(
        "flatten_head",
        [conv, relu, named("Flatten", "flatten", ["act"], ["flat"], axis=1),
         named("Gemm", "fc", ["flat", "fc.weight", "fc.bias"], ["output"], transB=1)],
        [("input", F, ["N", 3, 4, 4])], [("output", F, ["N", 64])],
        {**conv_inits, "fc.weight": W(rng, 64, 512), "fc.bias": W(rng, 64)}))
    save_rule_model("large-fc-head", "pass_gap.onnx", rule_model(
        "gap_head",
        [conv, relu, named("GlobalAveragePool", "gap", ["act"], ["pooled"]),
         named("Flatten", "flatten", ["pooled"], ["flat"], axis=1),
         named("Gemm", "fc", ["flat", "fc.weight", "fc.bias"], ["output"], transB=1)],
        [("input", F, ["N", 3, 4, 4])], [("output", F, ["N", 64])],
        {**conv_inits, "fc.weight": W(rng, 64, 32), "fc.bias": W(rng, 64)}))

    # oversized-linear (nnlint.toml lowers min-params and turns the spectrum on).  The fire weight
    # is U V with U 128x8, V 8x128 random with orthonormal columns/rows: 8 equal singular values,
    # so 90% of the energy needs exactly rank 8.
    rng = np.random.default_rng(103)
    u, _ = np.linalg.qr(rng.standard_normal((128, 8)))
    v, _ = np.linalg.qr(rng.standard_normal((128, 8)))
    low = (u @ v.T).astype(np.float32)
    assert np.all(low != 0)
    for file, w in [("fire_rank8.onnx", low), ("pass_full_rank.onnx", W(rng, 128, 128))]:
        save_rule_model("oversized-linear", file, rule_model(
            "linear",
            [named("Gemm", "fc", ["input", "fc.weight", "fc.bias"], ["output"], transB=1)],
            [("input", F, ["N", 128])], [("output", F, ["N", 128])],
            {"fc.weight": w, "fc.bias": W(rng, 128)}))
    with open(os.path.join(RULES_DIR, "oversized-linear", "nnlint.toml"), "w") as f:
        f.write("# tests/lint_rules.rs: small enough for a 128x128 fixture, with the measured spectrum\n"
                "[rules.oversized-linear]\nmin-params = 10000\nspectrum = true\n")

    # fp32-weights: the fire model is heavy-standard-conv/fire.onnx (fp32); pass is it in fp16
    rng = np.random.default_rng(101)
    save_rule_model("fp32-weights", "pass_fp16.onnx", heavy_conv_model(rng, np.float16))
    with open(os.path.join(RULES_DIR, "fp32-weights", "nnlint.toml"), "w") as f:
        f.write("# tests/lint_rules.rs: small enough for heavy-standard-conv/fire.onnx\n"
                "[rules.fp32-weights]\nmin-bytes = 1000\n")

    # activation-hotspot: conv 3->16 on 32x32 -> relu1 (saves 16x32x32) -> conv 16->4 stride 2
    # -> relu2 (saves 4x16x16); a single Gemm on the graph input saves nothing
    rng = np.random.default_rng(106)
    save_rule_model("activation-hotspot", "fire.onnx", rule_model(
        "conv_relu_conv",
        [named("Conv", "conv1", ["input", "conv1.weight", "conv1.bias"], ["c1"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         named("Relu", "relu1", ["c1"], ["r1"]),
         named("Conv", "conv2", ["r1", "conv2.weight", "conv2.bias"], ["c2"],
               kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
         named("Relu", "relu2", ["c2"], ["output"])],
        [("input", F, ["N", 3, 32, 32])], [("output", F, ["N", 4, 16, 16])],
        {"conv1.weight": W(rng, 16, 3, 3, 3), "conv1.bias": W(rng, 16),
         "conv2.weight": W(rng, 4, 16, 3, 3), "conv2.bias": W(rng, 4)}))
    save_rule_model("activation-hotspot", "pass_gemm.onnx", rule_model(
        "gemm",
        [named("Gemm", "fc", ["input", "fc.weight", "fc.bias"], ["output"], transB=1)],
        [("input", F, ["N", 64])], [("output", F, ["N", 32])],
        {"fc.weight": W(rng, 32, 64), "fc.bias": W(rng, 32)}))

    # unused-initializer: 'stale.weight' [16,16] read by nobody (pass: heavy-standard-conv/fire.onnx)
    rng = np.random.default_rng(107)
    save_rule_model("unused-initializer", "fire.onnx", rule_model(
        "unused_init",
        [named("Gemm", "fc", ["input", "fc.weight", "fc.bias"], ["output"], transB=1)],
        [("input", F, ["N", 16])], [("output", F, ["N", 16])],
        {"fc.weight": W(rng, 16, 16), "fc.bias": W(rng, 16), "stale.weight": W(rng, 16, 16)}))

    # dead-node: an extra Conv off the main path whose output goes nowhere
    rng = np.random.default_rng(108)
    main = [named("Conv", "conv", ["input", "conv.weight", "conv.bias"], ["c"],
                  kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
            named("Relu", "relu", ["c"], ["output"])]
    inits = {"conv.weight": W(rng, 8, 3, 3, 3), "conv.bias": W(rng, 8)}
    io = ([("input", F, ["N", 3, 16, 16])], [("output", F, ["N", 8, 16, 16])])
    save_rule_model("dead-node", "fire.onnx", rule_model(
        "dead_branch", main + [
            named("Conv", "aux_conv", ["c", "aux.weight"], ["aux"], kernel_shape=[1, 1]),
            named("Sigmoid", "aux_sigmoid", ["aux"], ["aux_out"])],
        *io, {**inits, "aux.weight": W(rng, 2, 8, 1, 1)}))
    save_rule_model("dead-node", "pass.onnx", rule_model("clean", main, *io, inits))

    # fixed-batch-input
    rng = np.random.default_rng(109)
    for file, batch in [("fire.onnx", 1), ("pass.onnx", "N")]:
        save_rule_model("fixed-batch-input", file, rule_model(
            "batch",
            [named("Conv", "conv", ["input", "conv.weight"], ["c"], kernel_shape=[3, 3]),
             named("Relu", "relu", ["c"], ["output"])],
            [("input", F, [batch, 3, 32, 32])], [("output", F, [batch, 4, 30, 30])],
            {"conv.weight": W(rng, 4, 3, 3, 3)}))

    # duplicate-initializer: two Convs 16->16 3x3 (9,216 bytes each), byte-identical or not
    rng = np.random.default_rng(110)
    w1, w2 = W(rng, 16, 16, 3, 3), W(rng, 16, 16, 3, 3)
    for file, second in [("fire.onnx", w1.copy()), ("pass.onnx", w2)]:
        save_rule_model("duplicate-initializer", file, rule_model(
            "two_convs",
            [named("Conv", "conv1", ["input", "conv1.weight"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             named("Conv", "conv2", ["c1", "conv2.weight"], ["output"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
            [("input", F, ["N", 16, 8, 8])], [("output", F, ["N", 16, 8, 8])],
            {"conv1.weight": w1, "conv2.weight": second}))
    # the same twins stored in float_data (typed fields) instead of raw_data
    m = rule_model(
        "two_convs_typed",
        [named("Conv", "conv1", ["input", "conv1.weight"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         named("Conv", "conv2", ["c1", "conv2.weight"], ["output"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        [("input", F, ["N", 16, 8, 8])], [("output", F, ["N", 16, 8, 8])], {})
    m.graph.initializer.extend(
        [helper.make_tensor(n, F, w1.shape, w1.flatten().tolist()) for n in ("conv1.weight", "conv2.weight")])
    assert not m.graph.initializer[0].raw_data and len(m.graph.initializer[0].float_data) == w1.size
    save_rule_model("duplicate-initializer", "fire_typed.onnx", m)
    print("rule fixtures: written under rules/")


# --------------------------------------------------------------------------
# e) rewrite fixtures: testdata/models/rewrite/
# --------------------------------------------------------------------------

REWRITE_DIR = os.path.join(MODELS, "rewrite")
REWRITE_META = {"source": "testdata/generate.py"}
REWRITE_SEEDS = {"vgg_like.onnx": 41, "resnet_like.onnx": 42, "resnet_like_ext.onnx": 42}  # make_feeds seeds


def he(rng, *shape):
    """He-normal float32 weight (std sqrt(2 / fan_in), fan_in = prod(shape[1:])), so that
    activations stay O(1) through a stack of ReLU layers."""
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def small(rng, *shape):
    """A small non-zero float32 tensor (biases)."""
    return (rng.standard_normal(shape) * 0.1).astype(np.float32)


def batchnorm_params(rng, prefix, c):
    """Non-trivial BatchNorm parameters and running statistics (var > 0), torch names."""
    return {f"{prefix}.weight": rng.uniform(0.5, 1.5, c).astype(np.float32),
            f"{prefix}.bias": small(rng, c),
            f"{prefix}.running_mean": small(rng, c),
            f"{prefix}.running_var": rng.uniform(0.5, 1.5, c).astype(np.float32)}


class Net:
    """A tiny graph builder that names nodes, values and initializers as torch's legacy
    exporter does: node '/features/features.0/Conv', output '/features/features.0/Conv_output_0',
    weights 'features.0.weight'."""

    def __init__(self):
        self.nodes, self.inits = [], {}

    def add(self, op, scope, ins, out=None, **attrs):
        name = f"{scope}/{op}"
        out = out or f"{name}_output_0"
        self.nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        return out

    def conv(self, scope, prefix, x, w, b=None, **attrs):
        self.inits[f"{prefix}.weight"] = w
        ins = [x, f"{prefix}.weight"]
        if b is not None:
            self.inits[f"{prefix}.bias"] = b
            ins.append(f"{prefix}.bias")
        k = list(w.shape[2:])
        return self.add("Conv", scope, ins, kernel_shape=k, **attrs)

    def bn(self, scope, prefix, x, params):
        self.inits.update(params)
        return self.add("BatchNormalization", scope,
                        [x] + [f"{prefix}.{s}" for s in ("weight", "bias", "running_mean", "running_var")],
                        epsilon=1e-5, momentum=0.9)

    def gemm(self, scope, prefix, x, w, b, out=None):
        self.inits[f"{prefix}.weight"], self.inits[f"{prefix}.bias"] = w, b
        return self.add("Gemm", scope, [x, f"{prefix}.weight", f"{prefix}.bias"], out,
                        alpha=1.0, beta=1.0, transB=1)

    def model(self, name, doc, outputs, value_info):
        """outputs / value_info: [(name, shape)], float."""
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", F, ["batch", 3, 16, 16])],
            [helper.make_tensor_value_info(n, F, s) for n, s in outputs],
            [numpy_helper.from_array(v, n) for n, v in self.inits.items()],
            value_info=[helper.make_tensor_value_info(n, F, s) for n, s in value_info])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="nnlint-testdata", producer_version="1",
                              ir_version=8, doc_string=doc)
        helper.set_model_props(m, {**REWRITE_META, "fixture": name})
        return m


def vgg_like_model(seed=201):
    """Conv 3->16 + Relu, Conv 16->32 + Relu + MaxPool, Conv 32->32 + Relu + MaxPool,
    Flatten -> Gemm 512->64 + Relu -> Gemm 64->10.  NL101 fires on the 16->32 and 32->32
    convolutions, NL102 and NL103 on the 512->64 Gemm (with the directory's nnlint.toml)."""
    rng = np.random.default_rng(seed)
    n = Net()
    x = n.conv("/features/features.0", "features.0", "input", he(rng, 16, 3, 3, 3), small(rng, 16),
               pads=[1, 1, 1, 1])
    x = n.add("Relu", "/features/features.1", [x])
    x = n.conv("/features/features.2", "features.2", x, he(rng, 32, 16, 3, 3), small(rng, 32),
               pads=[1, 1, 1, 1])
    x = n.add("Relu", "/features/features.3", [x])
    x = n.add("MaxPool", "/features/features.4", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = n.conv("/features/features.5", "features.5", x, he(rng, 32, 32, 3, 3), small(rng, 32),
               pads=[1, 1, 1, 1])
    x = n.add("Relu", "/features/features.6", [x])
    x = n.add("MaxPool", "/features/features.7", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = n.add("Flatten", "", [x], axis=1)
    x = n.gemm("/classifier/classifier.0", "classifier.0", x, he(rng, 64, 512), small(rng, 64))
    x = n.add("Relu", "/classifier/classifier.1", [x])
    n.gemm("/classifier/classifier.2", "classifier.2", x, he(rng, 10, 64), small(rng, 10), "logits")
    return n.model(
        "vgg_like", "vgg_like: a small VGG-style CNN (three 3x3 convolutions, a flattened "
        "512 -> 64 -> 10 head) for nnlint rewrite tests; built by testdata/generate.py",
        [("logits", ["batch", 10])],
        # an untouched intermediate, and the Flatten output (its shape changes under gap-head)
        [("/features/features.4/MaxPool_output_0", ["batch", 32, 8, 8]),
         ("/Flatten_output_0", ["batch", 512])])


def resnet_like_model(seed=202):
    """Stem Conv 3->16 + BN + Relu, a basic block 16->16, a downsampling block 16->32
    (stride 2, 1x1 shortcut Conv + BN), GlobalAveragePool -> Flatten -> Gemm 32->10.
    Convolutions have no bias (followed by BN), as in torchvision."""
    rng = np.random.default_rng(seed)
    n = Net()
    p1 = dict(pads=[1, 1, 1, 1])
    x = n.conv("/conv1", "conv1", "input", he(rng, 16, 3, 3, 3), **p1)
    x = n.bn("/bn1", "bn1", x, batchnorm_params(rng, "bn1", 16))
    stem = n.add("Relu", "/relu", [x])

    s, p = "/layer1/layer1.0", "layer1.0"
    x = n.conv(f"{s}/conv1", f"{p}.conv1", stem, he(rng, 16, 16, 3, 3), **p1)
    x = n.bn(f"{s}/bn1", f"{p}.bn1", x, batchnorm_params(rng, f"{p}.bn1", 16))
    x = n.add("Relu", f"{s}/relu", [x])
    x = n.conv(f"{s}/conv2", f"{p}.conv2", x, he(rng, 16, 16, 3, 3), **p1)
    x = n.bn(f"{s}/bn2", f"{p}.bn2", x, batchnorm_params(rng, f"{p}.bn2", 16))
    x = n.add("Add", s, [x, stem])
    block1 = n.add("Relu", f"{s}/relu_1", [x])

    s, p = "/layer2/layer2.0", "layer2.0"
    x = n.conv(f"{s}/conv1", f"{p}.conv1", block1, he(rng, 32, 16, 3, 3), strides=[2, 2], **p1)
    x = n.bn(f"{s}/bn1", f"{p}.bn1", x, batchnorm_params(rng, f"{p}.bn1", 32))
    x = n.add("Relu", f"{s}/relu", [x])
    x = n.conv(f"{s}/conv2", f"{p}.conv2", x, he(rng, 32, 32, 3, 3), **p1)
    x = n.bn(f"{s}/bn2", f"{p}.bn2", x, batchnorm_params(rng, f"{p}.bn2", 32))
    sc = n.conv(f"{s}/downsample/downsample.0", f"{p}.downsample.0", block1, he(rng, 32, 16, 1, 1),
                strides=[2, 2])
    sc = n.bn(f"{s}/downsample/downsample.1", f"{p}.downsample.1", sc,
              batchnorm_params(rng, f"{p}.downsample.1", 32))
    x = n.add("Add", s, [x, sc])
    x = n.add("Relu", f"{s}/relu_1", [x])

    x = n.add("GlobalAveragePool", "/avgpool", [x])
    x = n.add("Flatten", "", [x], axis=1)
    n.gemm("/fc", "fc", x, he(rng, 10, 32), small(rng, 10), "logits")
    return n.model(
        "resnet_like", "resnet_like: a small ResNet-style CNN (BatchNorm, a basic block, a "
        "downsampling block with a 1x1 shortcut, a pooled head) for nnlint rewrite tests; built by "
        "testdata/generate.py",
        [("logits", ["batch", 10])],
        [("/layer1/layer1.0/relu_1/Relu_output_0", ["batch", 16, 16, 16]),
         ("/avgpool/GlobalAveragePool_output_0", ["batch", 32, 1, 1])])


def save_rewrite_model(m, file, external=False, seed=0):
    """Saves a rewrite fixture, checks it (full shape inference, by path so external data is
    followed), runs it once in onnxruntime and returns the output's statistics."""
    import onnxruntime as ort
    os.makedirs(REWRITE_DIR, exist_ok=True)
    path = os.path.join(REWRITE_DIR, file)
    files = [path]
    if external:
        location = file + ".data"
        data = os.path.join(REWRITE_DIR, location)
        if os.path.exists(data):  # onnx appends to an existing data file
            os.remove(data)
        onnx.save_model(copy.deepcopy(m), path, save_as_external_data=True,
                        all_tensors_to_one_file=True, location=location, size_threshold=1024)
        files.append(data)
        assert os.path.getsize(data) > 0
    else:
        onnx.save_model(m, path)
    onnx.checker.check_model(path, full_check=True)
    feeds = make_feeds(m, resolve_dims(m), {}, seed)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    (out,) = sess.run(None, feeds)
    assert out.shape == (BATCH, 10) and np.all(np.isfinite(out)), out
    assert 0.1 < np.abs(out).max() < 100, f"{file}: activations not O(1): max |logits| {np.abs(out).max()}"
    for f in files:
        assert os.path.getsize(f) < 300_000, f"{rel(f)} is too big"
    return out, sum(os.path.getsize(f) for f in files)


def gen_rewrite():
    """models/rewrite/: models for `nnlint rewrite` and tests/interop (onnx.helper + numpy, no
    torch): vgg_like.onnx, resnet_like.onnx, resnet_like_ext.onnx (+ .onnx.data: the same model
    with tensors of 1 KiB and more stored externally) and an nnlint.toml that lowers NL101/NL103
    thresholds so the rules fire on these small models at batch 1."""
    out, size = save_rewrite_model(vgg_like_model(), "vgg_like.onnx", seed=REWRITE_SEEDS["vgg_like.onnx"])
    print(f"rewrite/vgg_like: {size} bytes, max |logits| {np.abs(out).max():.3f}")
    resnet = resnet_like_model()
    out, size = save_rewrite_model(resnet, "resnet_like.onnx", seed=REWRITE_SEEDS["resnet_like.onnx"])
    print(f"rewrite/resnet_like: {size} bytes, max |logits| {np.abs(out).max():.3f}")
    out_ext, size = save_rewrite_model(resnet, "resnet_like_ext.onnx", external=True,
                                       seed=REWRITE_SEEDS["resnet_like_ext.onnx"])
    assert np.array_equal(out, out_ext)
    print(f"rewrite/resnet_like_ext: {size} bytes with its .data file")
    with open(os.path.join(REWRITE_DIR, "nnlint.toml"), "w") as f:
        f.write("# testdata/models/rewrite and tests/interop: thresholds small enough for these models\n"
                "[rules.heavy-standard-conv]\nmin-macs = 100_000\n\n"
                "[rules.oversized-linear]\nmin-params = 10_000\n")


# --------------------------------------------------------------------------
# f) onnxruntime output values: testdata/ort/
# --------------------------------------------------------------------------

ORT_DIR = os.path.join(HERE, "ort")
ORT_MAX_ELEMENTS = 65_536      # a bigger tensor is listed in "skipped" instead of written
ORT_MAX_FILE_BYTES = 300_000   # a model whose file would be bigger gets no file at all


def ort_value_models():
    """The models testdata/ort/ covers, in a fixed order: models/ops/*.onnx,
    models/conv3x3_64_128.onnx, models/rewrite/*.onnx (whatever is on disk)."""
    ops = os.path.join(MODELS, "ops")
    rewrite = os.path.join(MODELS, "rewrite")
    paths = [os.path.join(ops, f) for f in sorted(os.listdir(ops)) if f.endswith(".onnx")]
    paths.append(os.path.join(MODELS, "conv3x3_64_128.onnx"))
    if os.path.isdir(rewrite):
        paths += [os.path.join(rewrite, f) for f in sorted(os.listdir(rewrite)) if f.endswith(".onnx")]
    return [p for p in paths if os.path.exists(p)]


def ort_feed_params():
    """Model path relative to models/ -> (feed_high, seed): the make_feeds arguments the generator
    itself uses for that model, so integer inputs are valid indices and the inputs are the same
    as those behind expected/*.json."""
    params = {f"ops/{c.name}.onnx": (c.feed_high, ZOO_SEED0 + i) for i, c in enumerate(zoo_cases())}
    params["conv3x3_64_128.onnx"] = ({}, CONV3X3_SEED)
    for file, seed in REWRITE_SEEDS.items():
        params[f"rewrite/{file}"] = ({}, seed)
    return params


def missing_external_data(path):
    """Why the external data of the model at `path` cannot be loaded, or None."""
    m = onnx.load(path, load_external_data=False)
    ends = {}
    for t in m.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        end = int(info.get("offset", 0)) + int(info.get("length", 0))
        ends[info["location"]] = max(ends.get(info["location"], 0), end)
    for file, end in sorted(ends.items()):
        data = os.path.join(os.path.dirname(path), file)
        if not os.path.exists(data):
            return f"external data {file} is missing"
        if os.path.getsize(data) < end:
            return f"external data {file} is shorter than {end} bytes"
    return None


def ort_run_all_outputs(model, feeds):
    """Every node output of the main graph (graph order, each name once) and its value,
    from onnxruntime on a copy of the model with all of them as graph outputs, graph
    optimisations disabled, one thread (reproducible)."""
    import onnxruntime as ort
    m = copy.deepcopy(model)
    node_outputs = []
    for n in m.graph.node:
        for o in n.output:
            if o and o not in node_outputs:
                node_outputs.append(o)
    existing = {o.name for o in m.graph.output}
    for o in node_outputs:
        if o not in existing:
            m.graph.output.append(helper.make_empty_tensor_value_info(o))
            existing.add(o)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    got = dict(zip(names, sess.run(names, feeds)))
    return [(o, got[o]) for o in node_outputs]


def json_number(v):
    """A float64 (exactly the tensor's value) as JSON: Python float repr, which round-trips;
    NaN and infinities as the strings "nan", "inf", "-inf"."""
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return v


def ort_tensor(name, arr):
    """(tensor entry, None) or (None, skipped entry) for testdata/ort/."""
    a = np.asarray(arr)
    head = {"name": name, "dtype": a.dtype.name, "shape": [int(d) for d in a.shape]}
    if a.size > ORT_MAX_ELEMENTS:
        return None, dict(head, reason=f"{a.size} elements (more than {ORT_MAX_ELEMENTS})")
    if a.dtype == np.bool_:
        values = a.astype(np.int64).ravel().tolist()
    elif np.issubdtype(a.dtype, np.integer):
        values = a.ravel().tolist()
    elif a.dtype.kind == "f" or a.dtype.name == "bfloat16":
        # float16/float32/bfloat16 -> float64 is exact
        values = [json_number(v) for v in a.astype(np.float64).ravel().tolist()]
    else:
        return None, dict(head, reason=f"dtype {a.dtype.name} not supported")
    return dict(head, values=values), None


def ort_values_json(doc):
    """The file layout: top-level keys one per line, one tensor per line."""
    lines = ["{"]
    keys = list(doc)
    for k in keys:
        v = doc[k]
        comma = "," if k != keys[-1] else ""
        if isinstance(v, list) and v:
            lines.append(f"  {json.dumps(k)}: [")
            lines += [f"    {json.dumps(t, allow_nan=False)}" + ("," if i + 1 < len(v) else "")
                      for i, t in enumerate(v)]
            lines.append("  ]" + comma)
        else:
            lines.append(f"  {json.dumps(k)}: {json.dumps(v, allow_nan=False)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def gen_ort_values():
    """testdata/ort/<key>.json: input and every node output VALUE measured by onnxruntime, for
    the models of ort_value_models(), on the same random inputs as expected/<key>.json.  Reads
    the models already on disk and writes nothing else; needs onnx, onnxruntime, numpy only."""
    import onnxruntime as ort
    params = ort_feed_params()
    os.makedirs(ORT_DIR, exist_ok=True)
    written, total, skipped_models = set(), 0, []
    for path in ort_value_models():
        key = os.path.basename(expected_path(path))
        r = os.path.relpath(path, MODELS).replace(os.sep, "/")

        def skip(why):
            skipped_models.append(f"{rel(path)}: {why}")
            note(f"ort values: {rel(path)} skipped: {why}")

        why = missing_external_data(path)
        if why:
            skip(why)
            continue
        if r not in params:
            note(f"ort values: {rel(path)} is not a known fixture; inputs from seed 0")
        feed_high, seed = params.get(r, ({}, 0))
        model = onnx.load(path)
        dims = resolve_dims(model)
        feeds = make_feeds(model, dims, feed_high, seed)
        try:
            outs = ort_run_all_outputs(model, feeds)
        except Exception as e:
            skip("onnxruntime failed: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:300])
            continue
        doc = {"model": rel(path), "source": f"onnxruntime {ort.__version__}", "dims": dims,
               "inputs": [], "outputs": [], "skipped": []}
        for part, pairs in (("inputs", feeds.items()), ("outputs", outs)):
            for name, arr in pairs:
                t, s = ort_tensor(name, arr)
                if t is not None:
                    doc[part].append(t)
                else:
                    doc["skipped"].append(dict(s, kind=part[:-1]))
        text = ort_values_json(doc)
        size = len(text.encode())
        if size > ORT_MAX_FILE_BYTES:
            skip(f"its file would be {size} bytes (more than {ORT_MAX_FILE_BYTES})")
            continue
        with open(os.path.join(ORT_DIR, key), "w") as f:
            f.write(text)
        written.add(key)
        total += size
    for f in sorted(os.listdir(ORT_DIR)):  # files of models removed or now skipped
        if f.endswith(".json") and f not in written:
            os.remove(os.path.join(ORT_DIR, f))
    print(f"ort values: {len(written)} files, {total} bytes; {len(skipped_models)} models skipped")
    for s in skipped_models:
        print("  skipped", s)


def main():
    os.makedirs(MODELS, exist_ok=True)
    if "--rules-only" in sys.argv:  # only the lint-rule fixtures (no onnxruntime ground truth rerun)
        gen_rules()
        return
    if "--rewrite-only" in sys.argv:  # only models/rewrite/ (no torch)
        gen_rewrite()
        return
    if "--branches-only" in sys.argv:  # only models/branches/ (onnxruntime, no torch)
        gen_branches()
        return
    if "--zoo-only" in sys.argv:  # only models/ops/ and their expected and ort files (no torch)
        gen_zoo()
        gen_ort_values()
        return
    if "--ort-values-only" in sys.argv:  # only testdata/ort/, from the models on disk (no torch)
        gen_ort_values()
        print("\n".join(["", "notes:"] + NOTES) if NOTES else "\nno notes")
        return
    gen_zoo()
    gen_conv3x3()
    gen_branches()
    gen_rules()
    gen_rewrite()
    gen_ort_values()
    if "--no-torch" not in sys.argv:
        gen_torch()
    print("\n".join(["", "notes:"] + NOTES) if NOTES else "\nno notes")


if __name__ == "__main__":
    main()
