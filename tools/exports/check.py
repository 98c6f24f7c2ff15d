"""Eval-mode and deduplicating exports against PyTorch (issue 19, items 1 and 7).

Exports torchvision/transformers models the ways users do (TorchScript exporter in eval mode,
dynamo exporter in eval and train mode), runs `nnlint mem` on each, and prints, per export:
PyTorch's parameter and BatchNorm-statistics counts against nnlint's, and for the CNNs the saved
activations of a training step from the eval export (a lower bound, with nnlint's estimate of
the folded BatchNorms' inputs) against the training-mode export of the same model.

    NNLINT=target/debug/nnlint python3 tools/exports/check.py [--out DIR]

Needs torch, torchvision, transformers, onnx, onnxscript (tools/llm/requirements.txt and
testdata/requirements.txt pin them). CPU only; about 3 minutes on 2 cores.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import torch
import torchvision


def nnlint(path, *extra):
    exe = os.environ.get("NNLINT", "target/debug/nnlint")
    out = subprocess.run([exe, "mem", path, "--format", "json", *extra], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"nnlint failed on {path}: {out.stderr}")
    return json.loads(out.stdout)


def export(model, args, path, dynamo, train):
    model.train(train)
    kw = dict(input_names=["x"])
    if dynamo:
        torch.onnx.export(model, args, path, dynamo=True, **kw)
    else:
        mode = torch.onnx.TrainingMode.TRAINING if train else torch.onnx.TrainingMode.EVAL
        torch.onnx.export(model, args, path, dynamo=False, training=mode,
                          do_constant_folding=not train, **kw)


def torch_counts(model):
    params = sum(p.numel() for p in model.parameters())
    stats = sum(b.numel() for n, b in model.named_buffers() if "running" in n)
    return params, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="target/exports")
    ap.add_argument("--batch", type=int, default=8)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    cnns = {
        "resnet18": (torchvision.models.resnet18(), torch.randn(1, 3, 224, 224)),
        "mobilenet_v2": (torchvision.models.mobilenet_v2(), torch.randn(1, 3, 224, 224)),
    }
    for name, (m, x) in cnns.items():
        tp, ts = torch_counts(m)
        train_path = f"{a.out}/{name}_train_legacy.onnx"
        export(m, (x,), train_path, dynamo=False, train=True)
        exact = nnlint(train_path, "--train", "--batch", str(a.batch), "--device", "cpu")["training"]
        for dynamo in (False, True):
            path = f"{a.out}/{name}_eval_{'dynamo' if dynamo else 'legacy'}.onnx"
            export(m, (x,), path, dynamo=dynamo, train=False)
            r = nnlint(path, "--train", "--batch", str(a.batch), "--device", "cpu")
            t = r["training"]
            why = " ".join(t["unknown"])
            more = re.search(r"about ([0-9.]+ [KMG]?i?B) more", why)
            rows.append(dict(model=name, export=f"eval, {'dynamo' if dynamo else 'TorchScript'}",
                             torch_params=tp, nnlint_params=r["totals"]["params"],
                             torch_bn_stats=ts, nnlint_buffers=r["totals"]["buffers"],
                             saved_MiB=round(t["saved_activation_bytes"] / 2**20, 1),
                             lower_bound=t["lower_bound"], folded_estimate=more.group(1) if more else None,
                             train_export_saved_MiB=round(exact["saved_activation_bytes"] / 2**20, 1)))
    # Swin (relative-position bias tables folded in eval mode), small enough to run quickly
    swin = torchvision.models.SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
                                              window_size=[4, 4], num_classes=10)
    tables = sum(p.numel() for n, p in swin.named_parameters() if "relative_position_bias_table" in n)
    tp, _ = torch_counts(swin)
    for dynamo in (False, True):
        path = f"{a.out}/swin_small_eval_{'dynamo' if dynamo else 'legacy'}.onnx"
        export(swin, (torch.randn(1, 3, 64, 64),), path, dynamo=dynamo, train=False)
        r = nnlint(path)
        rows.append(dict(model="swin (32 wide, window 4)", export=f"eval, {'dynamo' if dynamo else 'TorchScript'}",
                         torch_params=tp, torch_params_without_bias_tables=tp - tables,
                         nnlint_params=r["totals"]["params"]))
    # GPT-2 (fresh LayerNorms and zero biases: the dynamo exporter deduplicates and removes them)
    from transformers import GPT2Config, GPT2LMHeadModel

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).logits

    for cfg in (dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64),
                dict(n_layer=12, n_embd=768, n_head=12)):
        g = GPT2LMHeadModel(GPT2Config(**cfg))
        tp, _ = torch_counts(g)
        path = f"{a.out}/gpt2_{cfg['n_embd']}_train_dynamo.onnx"
        export(Logits(g), (torch.randint(0, 256, (2, 16)),), path, dynamo=True, train=True)
        r = nnlint(path)
        wpe = g.transformer.wpe.weight.numel()
        rows.append(dict(model=f"gpt2 ({cfg['n_layer']} layers, {cfg['n_embd']} wide)", export="train, dynamo",
                         torch_params=tp, nnlint_params=r["totals"]["params"],
                         note=f"wpe {wpe}: folded to the 16 exported positions when small" ))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
