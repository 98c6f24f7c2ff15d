"""Validates nnlint's training-memory model against PyTorch.

For each torchvision model: export ONNX with BatchNorm and Dropout preserved (legacy exporter,
`training=TrainingMode.PRESERVE`, model in train mode, no constant folding), measure the bytes of
tensors PyTorch saves for backward in one training-mode forward at batch 8 (fp32, and under
`torch.autocast('cpu', dtype=torch.bfloat16)`), and compare with `nnlint mem --train`.

Measurement: `torch.autograd.graph.saved_tensors_hooks`; each packed tensor's storage is
deduplicated by `untyped_storage().data_ptr()` and counted at `untyped_storage().nbytes()` once;
parameters and the input are left out. The input does not require grad.

Run it with `bash testdata/validate_training.sh` (creates its own venv); it writes the table to
docs/training-accuracy.md and prints it. Not part of CI: it needs torch and a few minutes of CPU.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

import warnings

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NNLINT = os.environ.get("NNLINT", os.path.join(ROOT, "target", "release", "nnlint"))
CACHE = os.path.join(ROOT, "target", "validation")
BATCH = 8

MODELS = [
    ("resnet18", "ResNet"),
    ("resnet50", "ResNet"),
    ("vgg16", "VGG"),
    ("vgg11_bn", "VGG"),
    ("mobilenet_v2", "MobileNet"),
    ("mobilenet_v3_large", "MobileNet"),
    ("efficientnet_b0", "EfficientNet"),
    ("densenet121", "DenseNet"),
    ("shufflenet_v2_x1_0", "ShuffleNet"),
    ("squeezenet1_1", "SqueezeNet"),
    ("regnet_y_400mf", "RegNet"),
    ("mnasnet1_0", "MnasNet"),
    ("convnext_tiny", "ConvNeXt"),
    ("vit_b_16", "ViT"),
    ("swin_t", "Swin"),
]


def measure_saved(model, x, autocast):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip = params | {x.untyped_storage().data_ptr()}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if autocast:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y = model(x)
        else:
            y = model(x)
    del y
    return sum(seen.values())


def export(name, model):
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"{name}.onnx")
    if os.path.exists(path):
        return path
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(
        model, (x,), path, dynamo=False, training=torch.onnx.TrainingMode.PRESERVE,
        do_constant_folding=False, opset_version=17, input_names=["input"], output_names=["output"],
        dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
    )
    return path


def nnlint_saved(path, precision):
    out = subprocess.run(
        [NNLINT, "mem", path, "--train", "--batch", str(BATCH), "--precision", precision, "--device", "cpu",
         "--format", "json"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout)["training"]["saved_activation_bytes"]


def main():
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    only = set(sys.argv[1:])
    rows = []
    for name, family in MODELS:
        if only and name not in only:
            continue
        model = getattr(torchvision.models, name)(weights=None)
        model.train()
        path = export(name, model)
        x = torch.randn(BATCH, 3, 224, 224)
        row = {"model": name, "family": family}
        for precision, autocast in [("fp32", False), ("amp-bf16", True)]:
            torch.manual_seed(1)
            measured = measure_saved(model, x, autocast)
            estimated = nnlint_saved(path, precision)
            row[precision] = (measured, estimated, 100.0 * (estimated - measured) / measured)
            print(f"{name:20s} {precision:8s} torch {measured:>13,d}  nnlint {estimated:>13,d}  "
                  f"{row[precision][2]:+7.2f}%", flush=True)
        rows.append(row)
    write_table(rows)


def write_table(rows):
    lines = [
        "# Training memory: nnlint against PyTorch",
        "",
        f"Bytes of activations saved for backward, one training-mode forward at batch {BATCH}, 224x224,",
        "measured with `torch.autograd.graph.saved_tensors_hooks` (storages deduplicated, parameters and the",
        "input left out) on CPU, against `nnlint mem --train --batch 8 --device cpu --precision P` on the",
        "legacy `TrainingMode.PRESERVE` export of the same module. Reproduce with",
        "`bash testdata/validate_training.sh` (torch " + torch.__version__ + ", torchvision "
        + torchvision.__version__ + ").",
        "",
        "| model | family | fp32 PyTorch | fp32 nnlint | error | bf16 autocast PyTorch | bf16 nnlint | error |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        f, b = r["fp32"], r["amp-bf16"]
        lines.append(
            f"| {r['model']} | {r['family']} | {f[0]:,} | {f[1]:,} | {f[2]:+.2f}% | {b[0]:,} | {b[1]:,} | {b[2]:+.2f}% |"
        )
    for key, label in [("fp32", "fp32"), ("amp-bf16", "bf16 autocast")]:
        errs = [abs(r[key][2]) for r in rows]
        if errs:
            lines.append("")
            lines.append(f"{label}: median absolute error {statistics.median(errs):.2f}%, "
                         f"largest {max(errs):.2f}% ({len(errs)} models).")
    text = "\n".join(lines) + "\n"
    if len(rows) == len(MODELS):
        with open(os.path.join(ROOT, "docs", "training-accuracy.md"), "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
