"""One training step's CPU memory peak for GPT-2 small at full size (124M), measured with
PyTorch's allocator: the full-size check of nnlint's backward timeline (analysis/step.rs).

    python tools/llm/step_peak_gpt2.py --write testdata/llm/full_size/step_peak_gpt2.json

Each point runs in a fresh process: GPT2LMHeadModel(GPT2Config()) (dropout 0.1, tied head),
random weights (seed 0), fp32, sdpa, model.train(); input_ids uniform in [3, vocab), labels a
copy, the loss computed by the model. torch.profiler(profile_memory=True) records the c10 CPU
allocator's events over the forward (with the loss) and over loss.backward(), with gradients
None at the start (as after zero_grad(set_to_none=True)). step_peak_above_weights =
max(forward peak, forward net + backward peak), as tools/llm/measure.py defines it: what one
step holds above the weights, with no optimizer state. nnlint's figure for the same point is
`nnlint mem DIR --train --batch B --seq S --attn sdpa --precision fp32 --device cpu --optimizer
sgd`: total_bytes - weights_bytes (tests/llm.rs, the_backward_peak_at_full_size).
"""
import argparse, json, subprocess, sys
from pathlib import Path

POINTS = [(2, 128), (4, 128), (1, 128), (1, 512)]


def one(batch, seq):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from measure import AllocTrace  # the allocator window measure.py measures every fixture with

    torch.manual_seed(0)
    cfg = GPT2Config()
    m = GPT2LMHeadModel(cfg)
    m.config._attn_implementation = "sdpa"
    m.train()
    ids = torch.randint(3, cfg.vocab_size, (batch, seq))
    labels = ids.clone()
    with AllocTrace() as fwd:
        loss = m(input_ids=ids, labels=labels, use_cache=False).loss
    with AllocTrace() as bwd:
        loss.backward()
    grads = sum(p.grad.untyped_storage().nbytes() for p in m.parameters() if p.grad is not None)
    return {"batch": batch, "seq": seq, "forward_net_bytes": fwd.net, "forward_peak_bytes": fwd.peak,
            "backward_peak_above_start_bytes": bwd.peak, "gradient_bytes": grads,
            "step_peak_above_weights_bytes": max(fwd.peak, fwd.net + bwd.peak)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--write")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(*a.one)))
        return
    import torch, transformers
    runs = []
    for b, s in POINTS:
        out = subprocess.run([sys.executable, __file__, "--one", str(b), str(s)], check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        print(runs[-1], file=sys.stderr)
    doc = {"model": "GPT2LMHeadModel(GPT2Config()): 124,439,808 parameters, dropout 0.1, tied head, fp32, sdpa, random weights (seed 0)",
           "device": "cpu", "generated_by": "tools/llm/step_peak_gpt2.py",
           "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
           "method": __doc__.strip(), "runs": runs}
    text = json.dumps(doc, indent=1) + "\n"
    if a.write:
        open(a.write, "w").write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
