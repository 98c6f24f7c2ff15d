#!/usr/bin/env python3
"""One training step's CPU memory peak for GPT-2 small (124M) at full size, with and without
dropout, measured with PyTorch's allocator and set against `nnlint mem --train`.

    python tools/llm/full_size_step_peak.py --write testdata/llm/full_size/step_peak.json
    (options: --dir /tmp/nnlint-gpt2-full for the saved folders, --nnlint target/release/nnlint)

Model: GPT2LMHeadModel(GPT2Config()) (124,439,808 parameters, tied head), random init under
torch.manual_seed(0), fp32, saved with save_pretrained once per dropout setting: dropout 0.1 (the
config's defaults) and dropout 0.0 (resid_pdrop = embd_pdrop = attn_pdrop = 0). Every measured
point runs in a fresh process that reloads that folder the way tools/llm/measure.py loads a
fixture (from_pretrained(dtype=float32, attn_implementation="sdpa"), torch.manual_seed(0), one
CPU thread) and measures one step as measure.py's measure_scenario does, reusing its AllocTrace
and make_inputs: model.train(), input_ids uniform in [3, vocab) from a generator seeded 1,
labels = a copy of input_ids, use_cache=False, the loss computed by the model; gradients None at
the start (as after zero_grad(set_to_none=True)).

  forward window  : model(...) and the loss; the outputs other than the loss are dropped inside it.
  backward window : loss.backward().
  Both are torch.profiler(profile_memory=True) CPU memory events of the c10 allocator in time
  order: net = allocated minus freed in the window, peak = max running sum (the backward peak is
  above the live bytes at its start and includes the parameter gradients created during it).
  step_peak_above_weights_bytes = max(forward_peak_bytes, forward_net_bytes +
  backward_peak_above_start_bytes): what one step holds above the weights, no optimizer state.
  gradient_bytes: the distinct .grad storages after backward.

nnlint's figure for each point: `nnlint mem DIR --train --batch B --seq S --attn sdpa --precision
fp32 --device cpu --optimizer sgd --format json`, training.total_bytes - training.weights_bytes
(SGD keeps no state; on CPU nnlint adds no overhead), with training.peak's breakdown.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SEED = 0
POINTS = [(2, 128), (4, 128), (1, 512)]
DROPOUTS = [0.1, 0.0]
NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def folder_for(root: Path, dropout: float) -> Path:
    return root / ("dropout_0.1" if dropout else "dropout_0.0")


def save(folder: Path, dropout: float):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config() if dropout else GPT2Config(**NO_DROPOUT)
    assert (cfg.resid_pdrop, cfg.embd_pdrop, cfg.attn_pdrop) == (dropout,) * 3
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(cfg)
    model.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def one(folder: Path, batch: int, seq: int):
    import gc
    import torch
    sys.path.insert(0, str(HERE))
    from measure import AllocTrace, make_inputs  # same allocator window and inputs as every fixture
    from transformers import AutoConfig, GPT2LMHeadModel

    gc.freeze()  # as measure.py's main: keeps AllocTrace's gc.collect() cheap
    cfg = AutoConfig.from_pretrained(folder, local_files_only=True)
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa",
                                            local_files_only=True)
    model.train()
    assert all(p.grad is None for p in model.parameters())
    inputs = make_inputs({"head": "causal"}, cfg, batch, seq)
    t0 = time.time()
    with AllocTrace() as fwd:
        out = model(**inputs, use_cache=False)
        loss = out.loss
        del out
    with AllocTrace() as bwd:
        loss.backward()
    secs = time.time() - t0
    grads = {}
    for p in model.parameters():
        if p.grad is not None:
            s = p.grad.untyped_storage()
            grads.setdefault(s.data_ptr(), s.nbytes())
    weights = {}
    for p in model.parameters():
        s = p.untyped_storage()
        weights.setdefault(s.data_ptr(), s.nbytes())
    return {
        "dropout": cfg.resid_pdrop, "batch": batch, "seq": seq,
        "attn_implementation": model.config._attn_implementation,
        "step_peak_above_weights_bytes": max(fwd.peak, fwd.net + bwd.peak),
        "forward_net_bytes": fwd.net, "forward_peak_bytes": fwd.peak,
        "backward_peak_above_start_bytes": bwd.peak, "backward_net_bytes": bwd.net,
        "gradient_bytes": sum(grads.values()), "weight_bytes": sum(weights.values()),
        "params": sum(p.numel() for p in model.parameters()),
        "allocator_events": {"forward": fwd.events, "backward": bwd.events},
        "loss": float(loss.detach()), "step_seconds": round(secs, 1),
    }


def nnlint(binary: str, folder: Path, batch: int, seq: int):
    cmd = [binary, "mem", str(folder), "--train", "--batch", str(batch), "--seq", str(seq), "--attn", "sdpa",
           "--precision", "fp32", "--device", "cpu", "--optimizer", "sgd", "--format", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"command": " ".join(cmd[1:]), "error": proc.stderr.strip()}
    tr = json.loads(proc.stdout)["training"]
    pk = tr.get("peak", {})
    return {
        "command": " ".join(["nnlint"] + cmd[1:]).replace(str(folder), "DIR"),
        "total_minus_weights_bytes": tr["total_bytes"] - tr["weights_bytes"],
        "total_bytes": tr["total_bytes"], "weights_bytes": tr["weights_bytes"],
        "gradient_bytes": tr["gradient_bytes"], "saved_activation_bytes": tr["saved_activation_bytes"],
        "peak": {k: pk.get(k) for k in ("phase", "gradient_bytes", "saved_activation_bytes", "transient_bytes")},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--one", nargs=3, metavar=("FOLDER", "B", "S"), help=argparse.SUPPRESS)
    ap.add_argument("--save", nargs=2, metavar=("FOLDER", "DROPOUT"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/nnlint-gpt2-full"))
    ap.add_argument("--nnlint", default=str(ROOT / "target" / "release" / "nnlint"))
    ap.add_argument("--write", type=Path)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(Path(a.one[0]), int(a.one[1]), int(a.one[2]))))
        return
    if a.save:
        print(json.dumps({"params": save(Path(a.save[0]), float(a.save[1]))}))
        return

    import torch
    import transformers
    for d in DROPOUTS:
        f = folder_for(a.dir, d)
        if not (f / "model.safetensors").exists():
            subprocess.run([sys.executable, __file__, "--save", str(f), str(d)], check=True,
                           capture_output=True, text=True)
    runs = []
    for d in DROPOUTS:
        f = folder_for(a.dir, d)
        for b, s in POINTS:
            out = subprocess.run([sys.executable, __file__, "--one", str(f), str(b), str(s)], check=True,
                                 capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            r["nnlint"] = nnlint(a.nnlint, f, b, s)
            n = r["nnlint"].get("total_minus_weights_bytes")
            if n is not None:
                r["nnlint_relative_error"] = round(n / r["step_peak_above_weights_bytes"] - 1, 5)
            runs.append(r)
            print(json.dumps({k: r[k] for k in ("dropout", "batch", "seq", "step_peak_above_weights_bytes",
                                                "step_seconds")} | {"nnlint": n}), file=sys.stderr, flush=True)
    doc = {
        "model": "GPT2LMHeadModel(GPT2Config()): 12 layers, n_embd 768, 12 heads, vocab 50257, n_positions "
                 "1024, tied head, random init (torch.manual_seed(0)), fp32, attn_implementation sdpa; "
                 "dropout 0.1 = GPT2Config() defaults (resid/embd/attn_pdrop 0.1), dropout 0.0 = all three 0",
        "params": runs[0]["params"],
        "device": "cpu", "threads": 1,
        "generated_by": "tools/llm/full_size_step_peak.py",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "method": __doc__.strip(),
        "runs": runs,
    }
    sys.path.insert(0, str(HERE))
    import jsonfmt
    text = jsonfmt.dumps(doc)
    if a.write:
        a.write.parent.mkdir(parents=True, exist_ok=True)
        a.write.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
