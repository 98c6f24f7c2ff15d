#!/usr/bin/env python3
"""Print the markdown tables of testdata/llm/*/expected.json (the README's results section)."""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "testdata" / "llm"
FAMS = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi3", "gpt2", "gpt2_seqcls", "gpt_neox",
        "mixtral", "qwen2_moe", "qwen3_moe", "bert", "roberta", "vit", "bert_model", "bert_seqcls",
        "bert_dropout", "roberta_dropout", "bert_seqcls_dropout", "roberta_seqcls",
        "roberta_seqcls_dropout", "gpt2_dropout", "gpt_neox_dropout",
        "llama_dropout", "vit_dropout",
        "phi3_dropout", "gemma2_dropout",
        # newer families (measure.py NEW_FAMILIES)
        "smollm3", "olmo2", "olmo3", "cohere2", "exaone4", "deepseek_v3", "deepseek_v3_noqlora", "glm4_moe",
        "gpt_oss", "ernie4_5_moe", "llama4_text", "mamba2", "lfm2", "granitemoehybrid", "qwen3_next", "falcon_h1",
        "nemotron_h", "qwen2_5_vl", "qwen3_vl", "mistral3", "llava"]
COLS = ["eager_fp32", "sdpa_fp32", "sdpa_fp32_padded", "eager_autocast_bf16", "sdpa_autocast_bf16",
        "sdpa_bf16_weights", "sdpa_fp32_gc", "sdpa_fp32_gc_reentrant", "sdpa_fp32_lora_qv",
        "sdpa_fp32_lora_all_linear"]


def folder_bytes(p):
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def main():
    rows = []
    print("| family | dtype | params | active | KV B=2,S=24 (storage / view) | KV B=3,S=40 | folder |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for f in FAMS:
        e = json.loads((ROOT / f / "expected.json").read_text())
        p = e["params"]
        act = p.get("moe", {}).get("active_params_per_token", "")
        kv = e["kv_cache"]
        if kv.get("applicable"):
            pts = [x for x in kv["points"] if x["phase"] == "prefill"]
            k1 = f"{pts[0]['storage_bytes']} / {pts[0]['kv_view_bytes']}"
            k2 = f"{pts[1]['storage_bytes']} / {pts[1]['kv_view_bytes']}"
        else:
            k1 = k2 = "-"
        print(f"| {f} | {e['storage_dtype']} | {p['count']} | {act} | {k1} | {k2} | {folder_bytes(ROOT / f)} |")
        rows.append(e)
    print()
    print("Activation bytes saved for backward, B=2 S=24 (second point B=3 S=40 in the files):")
    print()
    print("| family | " + " | ".join(c.replace("sdpa_fp32_", "").replace("_", " ") for c in COLS) + " |")
    print("|---|" + "---:|" * len(COLS))
    for f, e in zip(FAMS, rows):
        sc = e["training"]["scenarios"]
        cells = []
        for c in COLS:
            s = sc.get(c, {})
            if "runs" in s:
                r = s["runs"][0]
                cells.append(str(r["saved"]["activation_bytes"]) if "saved" in r else "refused")
            elif "see" in s and "runs" in sc.get(s["see"], {}):
                r = sc[s["see"]]["runs"][0]
                cells.append(f"{r['saved']['activation_bytes']} (eager)" if "saved" in r else "refused (eager)")
            else:
                cells.append("n/a")
        print(f"| {f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
