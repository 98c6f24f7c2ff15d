#!/usr/bin/env python3
"""Full-size check of measure_images.py's vision formulas: the vision encoder + projector of the released multimodal
checkpoints at their full width and full image size, random init, CPU.

measure_images.py derives closed-form formulas (`vision_formulas`) for the bytes autograd saves in the vision tower
and projector and checks them byte-exact on the tiny fixtures (width 32, 16x16-pixel images). A formula exact at
width 32 can still be off at real widths (a kernel that takes another path at larger sizes, SDPA picking another
backend, chunking, alignment). This script builds each wrapper with the released vision config (full hidden, MLP
width, heads, patch, merge, window, position table) and the real text width Dt (the projector's output), keeps the
full image size and the full vision sequence, and cuts only the number of encoder layers (2, or 3 where a layer kind
differs) and the language model (2 layers, MLP width 64, vocab 128: not measured, only its hidden size is real). Per
image size, number of images N and scenario it measures the vision + projector bytes exactly as measure_images.py
does (its `measure_saved`, imported) and compares them with what measure_images.vision_formulas predicts for the same
config (its `formula_check`, imported). Where a ratio is not 1.0 the per-tensor breakdown (shape, dtype, first torch
function) is written next to it.

Config values come from the released config.json files as recalled (no hub access here): each model's `release`
block says which checkpoint, `reduced` what was cut and why. LoRA uses r = 16 (measure_images.LORA_R, which
vision_formulas reads too, is set to 16 here; the tiny fixtures use 8), alpha 16, dropout 0, as measure_images.py
configures peft otherwise.

    python tools/llm/full_size_images.py [--only qwen2_5_vl,llava] [--threads 2] [--scenarios sdpa_fp32,...]
    python tools/llm/full_size_images.py --only llama4 --out testdata/llm/full_size/images_llama4.json  # ~2 min

Checkpoints go to target/llm-full/<family>-vision/ (about 0.3-0.9 GB each, fp32), results to
testdata/llm/full_size/images.json (an --only run replaces those models' entries and keeps the others). Every build
and every scenario runs in a forked child. About 17 minutes on 2 cores (--threads 2) for all five; the largest child
peaks at 5.6 GiB resident (gemma3_mm eager: 4096 patches, 16 heads, fp32 probabilities of 1 GiB per layer).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M  # noqa: E402  (offline env, torch threads = 1)
import measure_images as MI  # noqa: E402
import torch  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForImageTextToText,
    Gemma3Config,
    Llama4Config,
    LlavaConfig,
    Mistral3Config,
    Qwen2_5_VLConfig,
    Qwen3VLConfig,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "testdata" / "llm" / "full_size" / "images.json"
WORK = ROOT / "target" / "llm-full"
LORA_R = 16
SCENARIOS = ["sdpa_fp32", "eager_fp32", "sdpa_autocast_bf16", "sdpa_bf16_weights", "sdpa_fp32_gc",
             "sdpa_fp32_lora_qv", "sdpa_fp32_lora_all_linear"]  # = the keys formula_check checks
# the language model: only its hidden size (= the projector's output width) is real; it is not measured
TEXT_TINY = dict(vocab_size=128, intermediate_size=64, num_hidden_layers=2, max_position_embeddings=4096,
                 bos_token_id=1, eos_token_id=2, attention_dropout=0.0, tie_word_embeddings=False)
SOURCE = ("values of the released config.json, as recalled (no hub access in this environment); the transformers "
          "5.24 config class defaults were checked against them, and every value is passed explicitly")

MODELS = {
    "qwen2_5_vl": dict(
        label="Qwen2.5-VL-7B",
        config_class=Qwen2_5_VLConfig,
        release=dict(checkpoint="Qwen/Qwen2.5-VL-7B-Instruct", source=SOURCE,
                     vision_config=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16,
                                        hidden_act="silu", in_channels=3, patch_size=14, spatial_merge_size=2,
                                        temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
                                        out_hidden_size=3584, tokens_per_second=2),
                     text_hidden_size=3584,
                     note="Qwen2_5_VLVisionConfig's defaults are the 7B's except hidden_size (class default 3584, "
                          "the 7B's vision hidden is 1280; 3584 is its out_hidden_size = text hidden) and "
                          "tokens_per_second (4 vs 2, video only)"),
        reduced=dict(vision_config=dict(depth=2, fullatt_block_indexes=[1]),
                     why="2 blocks: block 0 windowed (window 112 px = 8x8 patches), block 1 full attention, the two "
                         "layer kinds of the 32-block tower"),
        top=dict(M.MM_IDS, tie_word_embeddings=False),
        text=dict(hidden_size=3584, num_attention_heads=28, num_key_value_heads=4, pad_token_id=0,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]}),
        # 392x532: 28x38 patches, 14x19 merged units, windows of 4x4 merged units: partial windows at the edges
        points=[(448, 448, 1), (448, 672, 1), (392, 532, 1), (448, 448, 2)],
    ),
    "qwen3_vl": dict(
        label="Qwen3-VL-8B",
        config_class=Qwen3VLConfig,
        release=dict(checkpoint="Qwen/Qwen3-VL-8B-Instruct", source=SOURCE,
                     vision_config=dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16,
                                        hidden_act="gelu_pytorch_tanh", in_channels=3, patch_size=16,
                                        spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=4096,
                                        num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24]),
                     text_hidden_size=4096),
        reduced=dict(vision_config=dict(depth=2, deepstack_visual_indexes=[0]),
                     why="2 blocks, one deepstack merger after block 0 (the release has 3, after blocks 8, 16, 24 of "
                         "27, none after the last block: the same kind of position)"),
        top=dict(M.MM_IDS, tie_word_embeddings=False),
        text=dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128, pad_token_id=0,
                  rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                                   "mrope_interleaved": True}),
        points=[(512, 512, 1), (512, 512, 2)],
    ),
    "llava": dict(
        label="LLaVA-1.5-7B",
        config_class=LlavaConfig,
        release=dict(checkpoint="llava-hf/llava-1.5-7b-hf", source=SOURCE,
                     vision_config=dict(model_type="clip_vision_model", hidden_size=1024, intermediate_size=4096,
                                        num_hidden_layers=24, num_attention_heads=16, image_size=336, patch_size=14,
                                        hidden_act="quick_gelu", projection_dim=768, layer_norm_eps=1e-5),
                     vision_feature_layer=-2, vision_feature_select_strategy="default", projector_hidden_act="gelu",
                     multimodal_projector_bias=True, image_seq_length=576, text_hidden_size=4096),
        reduced=dict(vision_config=dict(num_hidden_layers=3),
                     why="3 CLIP layers: with vision_feature_layer -2 the output of layer 2 feeds the projector, so 2 "
                         "layers are counted (L = 3 + 1 - 2) and the last one runs but saves nothing reachable"),
        top=dict(image_token_index=127, image_seq_length=576, tie_word_embeddings=False, vision_feature_layer=-2,
                 vision_feature_select_strategy="default", projector_hidden_act="gelu",
                 multimodal_projector_bias=True),
        text=dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=32),
        points=[(336, 336, 1), (336, 336, 2)],
    ),
    "mistral3": dict(
        label="Mistral-Small-3.1-24B (Pixtral vision)",
        config_class=Mistral3Config,
        release=dict(checkpoint="mistralai/Mistral-Small-3.1-24B-Instruct-2503", source=SOURCE,
                     vision_config=dict(model_type="pixtral", hidden_size=1024, intermediate_size=4096,
                                        num_hidden_layers=24, num_attention_heads=16, head_dim=64, hidden_act="silu",
                                        image_size=1540, patch_size=14, num_channels=3,
                                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                     spatial_merge_size=2, vision_feature_layer=-1, projector_hidden_act="gelu",
                     multimodal_projector_bias=False, text_hidden_size=5120,
                     note="PixtralVisionConfig's default hidden_act is 'gelu'; the release's is 'silu' (the tiny "
                          "fixture runs gelu)"),
        reduced=dict(vision_config=dict(num_hidden_layers=2), why="2 of 24 identical layers"),
        top=dict(image_token_index=127, tie_word_embeddings=False, spatial_merge_size=2, vision_feature_layer=-1,
                 projector_hidden_act="gelu", multimodal_projector_bias=False),
        text=dict(model_type="mistral", hidden_size=5120, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                  sliding_window=None),
        points=[(448, 448, 1), (448, 448, 2)],
    ),
    "gemma3_mm": dict(
        label="Gemma 3 4B (SigLIP)",
        config_class=Gemma3Config,
        release=dict(checkpoint="google/gemma-3-4b-it", source=SOURCE,
                     vision_config=dict(model_type="siglip_vision_model", hidden_size=1152, intermediate_size=4304,
                                        num_hidden_layers=27, num_attention_heads=16, image_size=896, patch_size=14,
                                        hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6, vision_use_head=False),
                     mm_tokens_per_image=256, text_hidden_size=2560),
        reduced=dict(vision_config=dict(num_hidden_layers=2),
                     why="2 of 27 identical layers; one image only (N = 2 doubles eager's 1 GiB-per-layer "
                         "probabilities)"),
        top=dict(image_token_index=124, boi_token_index=125, eoi_token_index=126, mm_tokens_per_image=256,
                 tie_word_embeddings=True),
        text=dict(model_type="gemma3_text", hidden_size=2560, num_attention_heads=8, num_key_value_heads=4,
                  head_dim=256, pad_token_id=0, tie_word_embeddings=True, sliding_window=1024,
                  layer_types=["sliding_attention", "full_attention"], query_pre_attn_scalar=256),
        points=[(896, 896, 1)],
    ),
    "llama4": dict(
        label="Llama 4 Scout 17B-16E (vision)",
        config_class=Llama4Config,
        release=dict(checkpoint="meta-llama/Llama-4-Scout-17B-16E-Instruct", source=SOURCE,
                     vision_config=dict(model_type="llama4_vision_model", hidden_size=1408, num_attention_heads=16,
                                        num_hidden_layers=34, intermediate_size=5632, image_size=336, patch_size=14,
                                        num_channels=3, hidden_act="gelu", norm_eps=1e-5, pixel_shuffle_ratio=0.5,
                                        projector_input_dim=4096, projector_output_dim=4096, vision_output_dim=4096,
                                        projector_dropout=0.0, attention_dropout=0.0,
                                        multi_modal_projector_bias=False, vision_feature_select_strategy="default",
                                        rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
                     text_hidden_size=5120, max_patches=16,
                     note="tile 336 (Llama4ImageProcessor size 336x336, max_patches 16), 24x24 patches + CLS per "
                          "tile, pixel shuffle 0.5 -> 144 image tokens per tile"),
        reduced=dict(vision_config=dict(num_hidden_layers=2), why="2 of 34 identical layers"),
        top=dict(image_token_index=127, boi_token_index=125, eoi_token_index=126, tie_word_embeddings=False),
        # Llama-4 text model: real width and attention heads; MoE experts / dense MLP tiny (not measured)
        text=dict(model_type="llama4_text", hidden_size=5120, num_attention_heads=40, num_key_value_heads=8,
                  head_dim=128, intermediate_size_mlp=64, num_local_experts=2, num_experts_per_tok=1,
                  interleave_moe_layer_step=1, attention_chunk_size=8192, use_qk_norm=True),
        # 336x336: 1 tile; 336x672: canvas 1x2 tiles + the global tile = 3 tiles
        points=[(336, 336, 1), (336, 672, 1)],
    ),
}

METHOD = {
    "model": "config class of the wrapper with the released vision_config (full width, heads, patch, merge, window, "
             "position table, image size) and the released text hidden size, fewer vision layers (see 'reduced'), "
             "a 2-layer language model of MLP width 64 and vocab 128; random init (seed 0), saved fp32 to "
             "target/llm-full/<family>-vision and reloaded per scenario by measure_images.measure_saved",
    "saved": "measure_images.measure_saved unchanged (one training forward with labels, saved_tensors_hooks, storages "
             "deduplicated, attributed to the module region in which they were first packed); measured = "
             "vision_tower_bytes + projector_bytes; the images and text layout of measure_images.make_batch",
    "formula": "measure_images.formula_check(family, config, H, W, N, saved) unchanged: L * per_layer + once + "
               "projector of measure_images.vision_formulas for this config (L = the reduced layer count; llava: "
               "layers up to vision_feature_layer); ratio = formula / measured",
    "lora": f"r = {LORA_R} (measure_images.LORA_R set to {LORA_R} for both peft and the formulas), alpha 16, dropout "
            "0, targets as measure_images.apply_lora: 'qv' = q_proj/v_proj wherever they are, 'all-linear'",
    "vision_storages": "only where the ratio is not 1.0: measure_saved's per-region list of saved storages "
                       "[count, bytes each, dtype, shape, first torch function]",
    "max_rss_bytes": "ru_maxrss of the forked child that ran the scenario (includes the parent's ~0.5 GB at the fork)",
    "seconds": "wall time per scenario (load + forward + backward in the child), --threads torch threads",
}


def build_config(name, m):
    rv = m["release"]["vision_config"]
    vis = dict(rv, **m["reduced"]["vision_config"])
    text = dict(TEXT_TINY, **m["text"])
    return m["config_class"](text_config=text, vision_config=vis, **m["top"])


def build(name, m, folder):
    cfg = build_config(name, m)
    torch.manual_seed(MI.SEED)
    model = AutoModelForImageTextToText.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(folder)
    n_vis = sum(p.numel() for n, p in model.named_parameters() if "language_model" not in n and "lm_head" not in n)
    n_all = sum(p.numel() for p in model.parameters())
    del model
    return n_vis, n_all


def rss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


THREADS = [2]


def forked(fn, *args):
    """fn(*args) in a forked child (the parent runs no torch kernels, so OpenMP is not yet started when it forks):
    every build and every scenario starts from the same memory, and what a run leaves alive is freed with the child
    (after measure_saved returns, llava's CLIPVisionModel stays alive, held from outside Python's gc, also on the
    tiny fixture: about 0.9 GB per run at full size with 2 images). Returns (result, the child's max RSS, which
    includes the parent's pages at the fork)."""
    ctx = multiprocessing.get_context("fork")
    r, w = ctx.Pipe(duplex=False)

    def target():
        try:
            torch.set_num_threads(THREADS[0])
            out = fn(*args)
            w.send(("ok", out, rss_bytes()))
        except BaseException:
            w.send(("error", traceback.format_exc(), rss_bytes()))

    p = ctx.Process(target=target)
    p.start()
    w.close()
    try:
        status, out, rss = r.recv()
    except EOFError:
        p.join()
        raise RuntimeError(f"child died (exit code {p.exitcode}, killed for memory?)")
    p.join()
    if status != "ok":
        raise RuntimeError(out)
    return out, rss


def run_model(name, m, scenarios):
    t0 = time.time()
    folder = WORK / f"{name}-vision"
    folder.mkdir(parents=True, exist_ok=True)
    (n_vis, n_all), _ = forked(build, name, m, folder)
    cfg = M.AutoConfig.from_pretrained(folder, local_files_only=True)
    spec = M.FAMILIES[name]  # head 'vlm', id_high 124: what measure_saved / make_batch / apply_lora read
    res = {"label": m["label"], "model_class": cfg.architectures[0],
           "release": {k: v for k, v in m["release"].items()},
           "reduced": m["reduced"],
           "language_model": {"hidden_size": cfg.get_text_config(decoder=True).hidden_size,
                              **{k: v for k, v in m["text"].items() if k != "hidden_size"},
                              **{k: v for k, v in TEXT_TINY.items()},
                              "why": "not measured; its hidden size is the projector's output width Dt"},
           "vision": MI.vision_dims(name, cfg),
           "params": {"vision_and_projector": n_vis, "all": n_all},
           "checkpoint_folder": str(folder.relative_to(ROOT)),
           "points": []}
    print(f"{name}: built ({n_vis / 1e6:.1f} M vision+projector params) in {time.time() - t0:.1f} s", flush=True)
    for H, W, N in m["points"]:
        lay = MI.image_layout(name, cfg, H, W)
        pt = {"image_size": [H, W], "images": N,
              "per_image": {"image_tokens": lay["image_tokens"], "text_tokens": len(lay["ids"]),
                            "vision_seq": lay["vision_seq"]},
              "saved": {}, "seconds": {}, "max_rss_bytes": {}}
        for sc_name in scenarios:
            t1 = time.time()
            r, rss = forked(MI.measure_saved, folder, name, cfg, spec, H, W, N, MI.SCENARIOS[sc_name])
            pt["seconds"][sc_name] = round(time.time() - t1, 1)
            pt["max_rss_bytes"][sc_name] = rss
            pt["saved"][sc_name] = r
            print(f"  {H}x{W} N={N} {sc_name}: vision {r['vision_tower_bytes']} projector {r['projector_bytes']} "
                  f"({pt['seconds'][sc_name]} s, max rss {rss / 2**30:.2f} GiB)", flush=True)
        if set(SCENARIOS) <= set(scenarios):
            fc = MI.formula_check(name, cfg, H, W, N, pt["saved"])
            pt["vision_formula"] = fc
            for k, c in fc["checks"].items():
                print(f"  {H}x{W} N={N} {k}: measured {c['measured']} formula {c['formula']} ratio {c['ratio']}",
                      flush=True)
        else:  # a partial run (--scenarios): formula_check needs all seven
            fc = None
        # keep the measurement summary; the per-tensor list only where the formula is not exact
        for sc_name, r in pt["saved"].items():
            exact = fc is not None and fc["checks"][sc_name]["formula"] == fc["checks"][sc_name]["measured"]
            keep = {k: r[k] for k in ("vision_blocks_bytes", "vision_other_bytes", "vision_tower_bytes",
                                      "projector_bytes", "autocast_weight_copy_by_region",
                                      "unreachable_live_bytes_by_region")}
            keep["vision_plus_projector_bytes"] = r["vision_tower_bytes"] + r["projector_bytes"]
            if not exact:
                keep["vision_storages_columns"] = r["vision_storages_columns"]
                keep["vision_storages"] = r["vision_storages"]
            pt["saved"][sc_name] = keep
        res["points"].append(pt)
    res["seconds"] = round(time.time() - t0, 1)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args()
    THREADS[0] = args.threads
    MI.LORA_R = LORA_R
    names = list(MODELS) if not args.only else args.only.split(",")
    scenarios = args.scenarios.split(",")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(out.read_text()) if out.exists() else {}
    doc.update({"generated_by": "tools/llm/full_size_images.py", "versions": M.VERSIONS, "device": "cpu",
                "torch_threads": args.threads, "seed": MI.SEED, "lora_r": LORA_R, "method": METHOD,
                "text_tokens": MI.TEXT_TOKENS})
    models = doc.setdefault("models", {})
    for name in names:
        models[name] = run_model(name, MODELS[name], scenarios)
        doc["models"] = {k: models[k] for k in MODELS if k in models}
        M.write_json(out, doc)
        print(f"{name}: {models[name]['seconds']} s", flush=True)


if __name__ == "__main__":
    main()
