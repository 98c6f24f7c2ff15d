#!/usr/bin/env python3
"""Wide-shape check of nnlint's saved-activation bytes for gpt_oss, ernie4_5_moe and nemotron_h.

The tiny fixtures (hidden 32, head_dim 8) are exact; this rebuilds the same families at hidden 512,
head_dim 64 (8 heads, 4 KV heads), 4 layers, intermediate 1024, 4 experts top-2, vocab 1000, 512 positions,
saves them in bfloat16 with tools/llm/measure.py's build(), measures PyTorch's saved bytes with
measure.py's measure_scenario() and runs nnlint with the flags tests/llm.rs maps each scenario to.

    python3 tools/llm/wide_bf16.py [--nnlint target/debug/nnlint] [--only gpt_oss,...]

Writes target/wide-check/<family>/ (checkpoint), results.json (with per-storage detail) and results.md.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "target" / "wide-check"
HERE.mkdir(parents=True, exist_ok=True)
sys.path.insert(0, str(ROOT / "tools" / "llm"))
import measure as M  # noqa: E402
from transformers import AutoConfig  # noqa: E402

WIDE = dict(vocab_size=1000, hidden_size=512, intermediate_size=1024, num_hidden_layers=4,
            num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=512)


def wide(family, **sizes):
    """The fixture's spec from measure.py (one description per family), at the wide sizes."""
    base = M.FAMILIES[family]
    return dict(model_type=base["model_type"], head=base["head"], dtype=base["dtype"],
                config=dict(base["config"], **sizes))


SPECS = {
    "gpt_oss": wide("gpt_oss", **WIDE, sliding_window=32,
                    layer_types=["sliding_attention", "full_attention"] * 2),
    "ernie4_5_moe": wide("ernie4_5_moe", **WIDE, moe_intermediate_size=512, moe_layer_end_index=3),
    # the Mamba inner width is mamba_num_heads * mamba_head_dim = 512 (transformers ignores expand;
    # 1 so that expand * hidden agrees); num_hidden_layers comes from layers_block_type
    "nemotron_h": wide("nemotron_h", **{k: v for k, v in WIDE.items() if k != "num_hidden_layers"},
                       mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=64, expand=1, chunk_size=64,
                       moe_intermediate_size=512, moe_shared_expert_intermediate_size=512),
}
# scenario -> nnlint --precision (tests/llm.rs: fp32 / amp-bf16 / bf16)
PREC = {"fp32": "fp32", "autocast_bf16": "amp-bf16", "bf16_weights": "bf16"}
SCEN = {
    "gpt_oss": ["eager_fp32", "eager_bf16_weights", "eager_autocast_bf16"],  # no SDPA in transformers
    "ernie4_5_moe": ["sdpa_fp32", "eager_fp32", "sdpa_bf16_weights", "sdpa_autocast_bf16"],
    "nemotron_h": ["sdpa_fp32", "eager_fp32", "sdpa_bf16_weights", "sdpa_autocast_bf16"],
}
POINTS = [(2, 64), (1, 128)]


def scenario(name):
    attn, prec = name.split("_", 1)
    return dict(attn=attn, prec=prec)


def nnlint_cmd(exe, folder, sc, B, S):
    return [exe, "mem", str(folder), "--train", "--batch", str(B), "--seq", str(S), "--attn", sc["attn"],
            "--precision", PREC[sc["prec"]], "--device", "cpu", "--format", "json"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nnlint", default=str(ROOT / "target" / "debug" / "nnlint"))
    ap.add_argument("--only")
    args = ap.parse_args()
    fams = args.only.split(",") if args.only else list(SPECS)
    rows, detail = [], {}
    for fam in fams:
        spec = SPECS[fam]
        folder = M.build(fam, spec, HERE)
        cfg = AutoConfig.from_pretrained(folder, local_files_only=True)
        for sn in SCEN[fam]:
            sc = scenario(sn)
            for B, S in POINTS:
                r = M.measure_scenario(folder, spec, cfg, sn, sc, B, S, detail=True)
                want = r["saved"]["activation_bytes"]
                cmd = nnlint_cmd(args.nnlint, folder, sc, B, S)
                j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
                got = j["training"]["saved_activation_bytes"]
                err = (got - want) / want * 100
                rows.append(dict(family=fam, scenario=sn, B=B, S=S, nnlint=got, pytorch=want, err_pct=err,
                                 lower_bound=j["training"].get("lower_bound"),
                                 cmd=" ".join(cmd[1:]).replace(str(ROOT) + "/", "")))
                detail[f"{fam}/{sn}/{B}x{S}"] = dict(saved=r["saved"], nnlint_training=j["training"])
                print(f"{fam:13s} {sn:20s} B={B} S={S:4d} nnlint {got:10d} pytorch {want:10d} {err:+8.3f}%",
                      flush=True)
    (HERE / "results.json").write_text(json.dumps(dict(rows=rows, detail=detail, versions=M.VERSIONS),
                                                  indent=1, default=str))
    lines = ["# nnlint vs PyTorch saved activation bytes, wide shapes", "",
             "hidden 512, head_dim 64, 8 heads / 4 KV heads, 4 layers, intermediate 1024, 4 experts top-2, "
             "vocab 1000, bf16 checkpoints; measured with tools/llm/measure.py measure_scenario on CPU "
             f"(torch {M.VERSIONS['torch']}, transformers {M.VERSIONS['transformers']}).", "",
             "| family | scenario | B | S | nnlint | pytorch | error % |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['scenario']} | {r['B']} | {r['S']} | {r['nnlint']} | {r['pytorch']} | "
                     f"{r['err_pct']:+.3f} |")
    lines += ["", "nnlint command per row: `nnlint mem target/wide-check/<family> --train --batch B --seq S "
              "--attn eager|sdpa --precision fp32|bf16|amp-bf16 --device cpu --format json`, field "
              "`training.saved_activation_bytes`."]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
