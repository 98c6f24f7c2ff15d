"""Full-size check of LoRA on fused experts: one Qwen3-30B-A3B block at its released width (hidden
2048, 128 experts of 768, top 8, 32 heads / 4 KV heads of 128, vocab 151,936), random init, bf16
weights, saved to target/llm-full/, and PyTorch's saved bytes of one training forward with peft's
LoRA (r=8, q,v and all-linear) measured the way measure.py measures the fixtures (CPU, sdpa).
All-linear makes peft wrap the 128-expert stacks (ParamWrapper): each forward keeps W + BA, the size
of every expert's weights (1.2 GB here), which the tiny fixtures check only at 4 experts.

    python3 tools/llm/full_size_moe_lora.py          # ~2 min, < 8 GB; prints PyTorch's bytes
    target/release/nnlint mem target/llm-full/qwen3_moe_30b_1l --lora 8 --lora-targets all-linear \\
        --batch 1 --seq 128 --precision bf16 --attn sdpa --device cpu -f json

Results are in testdata/llm/full_size/moe_lora.json and docs/llm-accuracy.md ("LoRA on fused experts").
"""
import json
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, Qwen3MoeConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "target" / "llm-full"


def main():
    torch.manual_seed(0)
    cfg = Qwen3MoeConfig(hidden_size=2048, num_hidden_layers=1, num_attention_heads=32, num_key_value_heads=4,
                         head_dim=128, moe_intermediate_size=768, intermediate_size=6144, num_experts=128,
                         num_experts_per_tok=8, norm_topk_prob=True, vocab_size=151936, decoder_sparse_step=1,
                         mlp_only_layers=[], max_position_embeddings=4096, tie_word_embeddings=False)
    folder = OUT / "qwen3_moe_30b_1l"
    model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    model.save_pretrained(folder)
    del model
    spec = dict(model_type="qwen3_moe", head="causal", dtype="bfloat16")
    rows = []
    for lora in ["qv", "all-linear"]:
        sc = dict(attn="sdpa", prec="bf16_weights", lora=lora)
        r = M.measure_scenario(folder, spec, cfg, f"sdpa_bf16_lora_{lora}", sc, 1, 128)
        rows.append(dict(lora=lora, batch=1, seq=128, trainable_params=r["trainable_params"],
                         activation_bytes=r["saved"]["activation_bytes"]))
        print(lora, r["trainable_params"], r["saved"]["activation_bytes"], flush=True)
    out = ROOT / "testdata" / "llm" / "full_size" / "moe_lora.json"
    out.write_text(json.dumps(dict(generated_by="tools/llm/full_size_moe_lora.py", model="Qwen3-30B-A3B, 1 block",
                                   config=cfg.to_diff_dict(), weights="bfloat16", runs=rows), indent=1) + "\n")


if __name__ == "__main__":
    main()
