"""Full-size GPT-2 saved-for-backward bytes: PyTorch against `nnlint mem --train` on its dynamo export.

GPT2LMHeadModel(GPT2Config()) (124M: 12 layers, 768 wide, 12 heads, vocab 50257, default dropout
0.1), random weights, `model.train()`, exported with `torch.onnx.export(dynamo=True)` (symbolic
batch and seq) once per attention implementation (eager, sdpa). PyTorch's bytes: one training-mode
forward of `model(input_ids)` (logits, no loss: what the export computes) under
`torch.autograd.graph.saved_tensors_hooks`, storages deduplicated by `data_ptr()` and counted once
at `nbytes()`, parameters and the input left out (as testdata/validate_training.py).

    python tools/training/gpt2_saved.py [--batch 8] [--seq 128] [--layers 12] [--width 768]
        [--heads 12] [--dropout 0.1] [--precision fp32,amp-bf16] [--attn eager,sdpa]
        [--no-optimize] [--out DIR] [--fixtures DIR --name NAME] [--write FILE.json]

The exports (~500 MB each) go to --out (default target/validation/gpt2). --fixtures writes
graph-only copies (no weights, per-node metadata cut to the entries nnlint reads to count
parameters the file does not store, such as the optimizer's removed Gemm biases: ~100 kB) that
nnlint reads the same;
--write stores PyTorch's bytes and nnlint's. The committed ones (tests/training.rs checks them):

    python tools/training/gpt2_saved.py --precision fp32,amp-bf16 --fixtures testdata/models/training \
        --name gpt2 --write testdata/expected/training/gpt2_124m.json
    python tools/training/gpt2_saved.py --dropout 0 --precision fp32,amp-bf16 \
        --fixtures testdata/models/training --name gpt2_nodropout \
        --write testdata/expected/training/gpt2_124m_nodropout.json

NNLINT (default target/release/nnlint) picks the binary.
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NNLINT = os.environ.get("NNLINT", os.path.join(ROOT, "target", "release", "nnlint"))


def build(args, attn):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.heads, vocab_size=args.vocab,
                     n_positions=args.positions, resid_pdrop=args.dropout, embd_pdrop=args.dropout,
                     attn_pdrop=args.dropout, use_cache=False)
    cfg._attn_implementation = attn
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    model.config.use_cache = False
    model.train()
    return model


class Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False).logits


def measure(model, ids, autocast=False):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    skip = params | {ids.untyped_storage().data_ptr()}
    seen = {}

    def pack(t):
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = (s.nbytes(), tuple(t.shape), str(t.dtype))
        return t

    ac = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ac:
        y = model(input_ids=ids, use_cache=False).logits
    del y
    return sum(v[0] for v in seen.values()), seen


def export(model, path, args):
    if os.path.exists(path):
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ids = torch.randint(0, args.vocab, (2, args.seq))
    batch = torch.export.Dim("batch", min=1, max=1024)
    seq = torch.export.Dim("seq", min=2, max=args.positions)
    torch.onnx.export(Logits(model), (ids,), path, dynamo=True, input_names=["input_ids"],
                      output_names=["logits"], dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                      external_data=True, optimize=not args.no_optimize)


def kept_metadata(e):
    """Whether a node metadata entry is one nnlint reads (src/load/onnx.rs `removed_bias`,
    `fused_eval_norm`): parameters the file does not store (a zero bias the onnxscript optimizer
    removed from a Gemm/Conv, an inference-mode BatchNorm fused into a node)."""
    if e.key == "pkg.onnxscript.rewriter.rule_name":
        return "RemoveOptionalBiasFrom" in e.value or "FuseBatchNorm" in e.value
    if e.key in ("namespace", "pkg.torch.onnx.class_hierarchy"):
        return "_native_batch_norm_legit_no_training" in e.value
    return False


def graph_only(path, dest):
    """The export without its weights (the external data file is not written) and with only the
    per-node metadata entries nnlint reads (`kept_metadata`: optimizer rule names
    RemoveOptionalBiasFrom*/FuseBatchNorm*, and namespace/class hierarchy entries naming
    _native_batch_norm_legit_no_training), so parameter counts match the full export; every other
    metadata entry and doc string is dropped, small enough to commit."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    for n in m.graph.node:
        keep = [(e.key, e.value) for e in n.metadata_props if kept_metadata(e)]
        del n.metadata_props[:]
        for k, v in keep:
            n.metadata_props.add(key=k, value=v)
        n.doc_string = ""
    del m.metadata_props[:]
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = os.path.basename(dest) + ".data"
    onnx.save_model(m, dest)


def nnlint(path, args, precision):
    out = subprocess.run([NNLINT, "mem", path, "--train", "--batch", str(args.batch), "--dim",
                          f"seq={args.seq}", "--device", "cpu", "--precision", precision, "-f", "json",
                          "-q"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["training"]["saved_activation_bytes"]


def main():
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--attn", default="eager,sdpa")
    ap.add_argument("--precision", default="fp32", help="fp32, amp-bf16 or both: fp32,amp-bf16")
    ap.add_argument("--no-optimize", action="store_true", help="export with optimize=False")
    ap.add_argument("--out", default=os.path.join(ROOT, "target", "validation", "gpt2"))
    ap.add_argument("--no-nnlint", action="store_true")
    ap.add_argument("--detail", action="store_true")
    ap.add_argument("--write", help="write the measurements to this JSON file")
    ap.add_argument("--fixtures", help="write graph-only copies of the exports to this folder, "
                    "named <name>_<attn>.onnx")
    ap.add_argument("--name", default="gpt2", help="fixture name prefix")
    ap.add_argument("--check", help="measure the scenario of this expectations file (its config, "
                    "batch and seq) and fail unless PyTorch's and nnlint's bytes equal the file's")
    args = ap.parse_args()
    want = None
    if args.check:
        with open(args.check) as f:
            want = json.load(f)
        for k, v in want["config"].items():
            setattr(args, k, v)
        args.batch, args.seq = want["batch"], want["seq"]
        args.attn = ",".join(want["saved_activation_bytes"])
        args.precision = ",".join(k for k in next(iter(want["saved_activation_bytes"].values()))
                                  if k != "onnx")
    torch.set_num_threads(os.cpu_count() or 1)
    tag = f"l{args.layers}_w{args.width}_h{args.heads}_v{args.vocab}_p{args.positions}_d{args.dropout}"
    if args.no_optimize:
        tag += "_noopt"
    rows = {}
    for attn in args.attn.split(","):
        model = build(args, attn)
        path = os.path.join(args.out, f"gpt2_{tag}_{attn}.onnx")
        export(model, path, args)
        rows[attn] = {}
        if args.fixtures:
            dest = os.path.join(args.fixtures, f"{args.name}_{attn}.onnx")
            graph_only(path, dest)
            rows[attn]["onnx"] = os.path.relpath(dest, ROOT)
            path = dest
        for precision in args.precision.split(","):
            torch.manual_seed(1)
            ids = torch.randint(0, args.vocab, (args.batch, args.seq))
            measured, seen = measure(model, ids, autocast=precision == "amp-bf16")
            if args.detail:
                for ptr, (nb, shape, dt) in sorted(seen.items(), key=lambda kv: -kv[1][0]):
                    print(f"  {nb:>12,d} {dt} {list(shape)}")
            est = None if args.no_nnlint else nnlint(path, args, precision)
            err = None if est is None else 100.0 * (est - measured) / measured
            rows[attn][precision] = {"pytorch": measured, "nnlint": est}
            print(f"{attn:6s} {precision:8s} batch {args.batch} seq {args.seq}: torch {measured:>14,d}  "
                  f"nnlint {est if est is None else format(est, ',d'):>14}  "
                  f"{'' if err is None else format(err, '+.2f') + '%'}", flush=True)
    if want is not None:
        bad = []
        for attn, runs in rows.items():
            for precision, got in runs.items():
                if precision == "onnx":
                    continue
                exp = want["saved_activation_bytes"][attn][precision]
                for who in ("pytorch", "nnlint"):
                    if got[who] is not None and got[who] != exp[who]:
                        bad.append(f"{attn} {precision} {who}: {got[who]:,} (expected {exp[who]:,})")
        print(f"{args.check}: " + ("as expected" if not bad else "MISMATCH\n  " + "\n  ".join(bad)))
        if bad:
            sys.exit(1)
    if args.write:
        import transformers
        doc = {"model": "GPT2LMHeadModel(GPT2Config(...)), random weights, model.train(), "
               "torch.onnx.export(dynamo=True), symbolic batch and seq",
               "config": {k: getattr(args, k) for k in (
                   "layers", "width", "heads", "vocab", "positions", "dropout")},
               "batch": args.batch, "seq": args.seq, "device": "cpu",
               "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
               "method": "saved_tensors_hooks over model(input_ids).logits, storages deduplicated "
                         "by data_ptr and counted at nbytes, parameters and the input left out; "
                         "nnlint: mem --train --batch B --dim seq=S --device cpu --precision P",
               "reproduce": f"python tools/training/gpt2_saved.py --dropout {args.dropout} --precision "
                            f"fp32,amp-bf16 --fixtures testdata/models/training --name {args.name} "
                            f"--write {args.write}",
               "saved_activation_bytes": rows}
        with open(args.write, "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
