"""Full-size checks of the checkpoint path: GPT-2 small and bert-base (masked LM) as their default
configs ship (dropout 0.1), random init, saved to target/llm-full/, and PyTorch's saved bytes of one
training forward measured the way measure.py measures the fixtures (batch 2, seq 128, CPU).

    python3 tools/llm/full_size.py            # prints PyTorch's bytes
    target/debug/nnlint mem target/llm-full/gpt2 --train --batch 2 --seq 128 --attn sdpa --device cpu -f json

Results are in docs/llm-accuracy.md ("Full size").
"""
import sys
from pathlib import Path

import torch
from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "target" / "llm-full"


def main():
    torch.manual_seed(0)
    for name, model, spec in [
        ("gpt2", GPT2LMHeadModel(GPT2Config()), dict(model_type="gpt2", head="causal", dtype="float32")),
        ("bert", BertForMaskedLM(BertConfig()), dict(model_type="bert", head="mlm", dtype="float32")),
    ]:
        folder = OUT / name
        model.save_pretrained(folder)
        for sc in ["sdpa_fp32", "eager_fp32"]:
            r = M.measure_scenario(folder, spec, model.config, sc, M.SCENARIOS[sc], 2, 128)
            print(name, sc, r["saved"]["activation_bytes"], flush=True)


if __name__ == "__main__":
    main()
