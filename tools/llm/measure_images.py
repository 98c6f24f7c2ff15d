#!/usr/bin/env python3
"""Ground truth for `nnlint mem WRAPPER --images N`: image tokens and vision-tower memory of the multimodal wrappers.

For every wrapper fixture in testdata/llm/ (qwen2_5_vl, qwen3_vl, mistral3, llava, qwen3_5, gemma3_mm, llama4;
written by measure.py) this script
reloads the saved checkpoint on CPU and, for N images in {1, 2} per sequence at one or two image sizes valid for the
tiny configs, measures
  - the text-sequence tokens one image becomes: the placeholder tokens the model fills with image features (counted
    in input_ids, checked by running the model: one placeholder more or less is refused) and the extra special
    tokens the processor inserts around them (vision_start/end, [IMG_BREAK]/[IMG_END], Llama 4's image_start/image/
    image_end and tile separators; Llama 4 tiles an image as its image processor does: llama4_canvas);
  - the vision tower's sequence length, output shapes and the projected features per image;
  - the KV cache of a use_cache=True forward over T text tokens + the image tokens (bytes of the DynamicCache);
  - the bytes autograd saves for backward (saved_tensors_hooks, storages deduplicated as in measure.py), split into
    vision blocks, the rest of the vision tower, the projector/merger and the language model, for sdpa fp32,
    sdpa bf16 autocast, eager fp32, sdpa fp32 with the vision tower frozen, and measure.py's sdpa_bf16_weights,
    sdpa_fp32_gc (gradient_checkpointing_enable()) and peft LoRA q/v and all-linear (which modules peft wraps and
    trains, which layers are checkpointed);
  - the closed-form vision + projector formulas (vision_formulas, VISION_FORMULA_SYMBOLS) checked against the
    measurements, and the language model's bytes with images against the same model on text alone at the same
    sequence length (lm_difference);
  - the CPU allocator peak of the vision tower + projector alone in inference (no_grad);
and writes testdata/llm/<wrapper>/images.json, each number with the formula it is checked against.

Run after measure.py (its build step empties the fixture folders). CPU only, about 40 s on 1 core:
    python tools/llm/measure_images.py [--only qwen2_5_vl,llava] [--out DIR]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import math
import os
import sys
import time
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M  # noqa: E402  (sets the offline env, torch threads = 1, imports transformers)
import torch  # noqa: E402
import torch.utils.checkpoint  # noqa: E402  (GraphExecGroup)

SEED = 0
DEBUG_REGIONS = [r for r in os.environ.get("MEASURE_IMAGES_DEBUG_REGIONS", "").split(",") if r]  # derivation aid
TEXT_TOKENS = 8  # T: text tokens around the images (4 before, T - 4 after)
SPLIT = 4
NUM_IMAGES = [1, 2]
# image sizes (height, width) valid for the tiny vision configs (patch 4, merge 2 where there is one)
SIZES = {
    "qwen2_5_vl": [(16, 32), (32, 32)],
    "qwen3_vl": [(16, 32), (32, 32)],
    "mistral3": [(8, 16), (16, 16)],  # <= vision_config.image_size 16 (Pixtral's rotary table size)
    "llava": [(16, 16)],  # CLIP: fixed vision_config.image_size
    "qwen3_5": [(16, 32), (32, 32)],  # the Qwen3-VL vision code without deepstack mergers
    "gemma3_mm": [(16, 16)],  # SigLIP: fixed vision_config.image_size (Gemma3ImageProcessor resizes to it)
    # Llama 4: tiles of vision_config.image_size 16; 16x16 -> 1 tile, 16x32 -> 1x2 tiles + 1 global tile = 3 tiles
    "llama4": [(16, 16), (16, 32)],
}
LORA_R = 8  # measure.py's LoRA rank
# ordinary text ids standing in for the special tokens that the model does not replace
PIXTRAL_BREAK, PIXTRAL_END = 125, 126
# Gemma3Processor wraps every image in "\n\n<start_of_image>...<end_of_image>\n\n"; "\n\n" is one token (id 108)
# in Gemma 3's tokenizer, an ordinary text id in the tiny vocabulary too
GEMMA3_NL2 = 108
# Llama4Processor's <|image_start|>, <|image|> (before the global tile), <|image_end|>, <|tile_x_separator|>,
# <|tile_y_separator|>: ordinary text ids here (the model replaces only <|patch|> = config.image_token_id)
LLAMA4_IMG_START, LLAMA4_IMG, LLAMA4_IMG_END, LLAMA4_X_SEP, LLAMA4_Y_SEP = 125, 124, 126, 122, 123
LLAMA4_MAX_PATCHES = 16  # Llama4ImageProcessor.max_patches (the released preprocessor_config.json's value too)
SCENARIOS = {
    "sdpa_fp32": dict(attn="sdpa", autocast=False, freeze_vision=False),
    "sdpa_autocast_bf16": dict(attn="sdpa", autocast=True, freeze_vision=False),
    "eager_fp32": dict(attn="eager", autocast=False, freeze_vision=False),
    "sdpa_fp32_frozen_vision": dict(attn="sdpa", autocast=False, freeze_vision=True),
    # the training setups of measure.py's scenarios of the same names
    "sdpa_bf16_weights": dict(attn="sdpa", autocast=False, freeze_vision=False, dtype="bfloat16"),
    "sdpa_fp32_gc": dict(attn="sdpa", autocast=False, freeze_vision=False, gc=True),
    "sdpa_fp32_lora_qv": dict(attn="sdpa", autocast=False, freeze_vision=False, lora="qv"),
    "sdpa_fp32_lora_all_linear": dict(attn="sdpa", autocast=False, freeze_vision=False, lora="all-linear"),
}
# scenarios checked against vision_formulas beyond sdpa_fp32, eager_fp32, sdpa_autocast_bf16
NEW_FORMULA_SCENARIOS = ["sdpa_bf16_weights", "sdpa_fp32_gc", "sdpa_fp32_lora_qv", "sdpa_fp32_lora_all_linear"]
# scenarios whose language model part is also measured on text alone (language_model_vs_text_only)
TEXT_ONLY_SCENARIOS = ["sdpa_fp32", "sdpa_autocast_bf16", "sdpa_bf16_weights", "sdpa_fp32_gc", "sdpa_fp32_lora_qv",
                       "sdpa_fp32_lora_all_linear"]
METHOD = {
    "tokens": "image_tokens = placeholder ids the model replaces with image features (image_token_id); text_tokens "
              "= what one image adds to the text sequence, placeholders + the special tokens the processor adds "
              "(qwen: <|vision_start|> + <|vision_end|> from the chat template; pixtral: one [IMG_BREAK] per row "
              "with the last replaced by [IMG_END]; gemma3: Gemma3Processor replaces each <start_of_image> of the "
              "prompt by '\\n\\n<start_of_image>' + mm_tokens_per_image x <image_soft_token> + "
              "'<end_of_image>\\n\\n', '\\n\\n' being one token (108) in Gemma 3's tokenizer, and returns "
              "token_type_ids = 1 on the placeholders, which the model turns into a bidirectional mask over each "
              "image's placeholders). Checked by running the model: input_ids with one placeholder "
              "more is refused ('Image features and image tokens do not match').",
    "kv_cache": "model fp32, eval, no_grad, sdpa, forward(input_ids [1, T + N*text_tokens], pixel values, "
                "use_cache=True); bytes of every tensor of the returned DynamicCache, each storage once "
                "(measure.cache_summary).",
    "saved": "one training forward (model.train(), use_cache=False, labels = input_ids with image placeholders set to "
             "-100, loss from the model) under torch.autograd.graph.saved_tensors_hooks; storages deduplicated by "
             "data_ptr and counted once at nbytes(), classified as in measure.py (parameter, buffer, input = "
             "input_ids/labels/pixel values, autocast_weight_copy, activation). Each activation storage is "
             "attributed to the module region in which it was first packed: vision.block.<i> (one encoder "
             "layer), vision (patch embedding, positions, pre/post norms), projector (qwen merger + deepstack "
             "mergers, llava/mistral3 multi_modal_projector incl. pixtral's patch merger), language_model (text "
             "decoder), head (lm_head + loss, outside the other regions).",
    "scenarios": "sdpa_fp32, sdpa_autocast_bf16 (torch.autocast cpu bf16), eager_fp32, sdpa_fp32_frozen_vision (vision "
                 "tower parameters requires_grad False, projector trained); as measure.py: sdpa_bf16_weights (model "
                 "loaded in bf16, no autocast), sdpa_fp32_gc (model.gradient_checkpointing_enable() without kwargs: "
                 "non-reentrant torch.utils.checkpoint on every GradientCheckpointingLayer, vision blocks "
                 "included), sdpa_fp32_lora_qv / sdpa_fp32_lora_all_linear (peft LoraConfig(r=8, lora_alpha=16, "
                 "lora_dropout=0, target_modules=measure.lora_targets(model, kind), task_type None) over the whole "
                 "wrapper: every base parameter frozen; 'qv' = modules named q_proj / v_proj wherever they are, "
                 "'all-linear' = every nn.Linear but the output embedding).",
    "vision_inference": "torch.profiler CPU memory events (measure.AllocTrace) around model.model.get_image_features "
                        "under no_grad, fp32 weights, sdpa: peak = max running sum of allocations above the start, "
                        "net = what is still allocated at the end (the returned features and outputs).",
}


# ---------------------------------------------------------------------------------------------------
# image inputs, as each processor would produce them (shapes only; values random)
# ---------------------------------------------------------------------------------------------------
def qwen_smart_resize(h, w, factor, min_pixels, max_pixels):
    """transformers/models/qwen2_vl/image_processing_qwen2_vl.py smart_resize (l.63), copied to avoid torchvision."""
    h_bar = round(h / factor) * factor
    w_bar = round(w / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((h * w) / max_pixels)
        h_bar = max(factor, math.floor(h / beta / factor) * factor)
        w_bar = max(factor, math.floor(w / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar = math.ceil(h * beta / factor) * factor
        w_bar = math.ceil(w * beta / factor) * factor
    return h_bar, w_bar


def llama4_canvas(H, W, tile, max_patches=LLAMA4_MAX_PATCHES):
    """Llama4ImageProcessor's tiling (image_processing_llama4.py, resize_to_max_canvas False), copied without torch:
    find_supported_resolutions(max_patches, tile) = every (a*tile, b*tile) with a*b <= max_patches, grouped by aspect
    ratio a/b in the order the chunk counts max_patches..1 first produce them; get_best_fit: scale of a canvas =
    min(canvas_h / H, canvas_w / W); if some scale >= 1 take the smallest such scale, else the largest scale (< 1);
    among the canvases with that scale the one of least area (the first in list order on a tie). The image is then
    resized without distortion into min(max(H, tile), canvas_h) x min(max(W, tile), canvas_w) (no upscaling beyond
    one tile) and padded to the canvas: the canvas alone decides the tiles. Returns (rh, rw) = canvas / tile."""
    from fractions import Fraction
    groups = {}
    for chunks in range(max_patches, 0, -1):
        for a in sorted(x for x in range(1, chunks + 1) if chunks % x == 0):
            groups.setdefault(Fraction(a, chunks // a), []).append((a, chunks // a))
    res = [(a * tile, b * tile) for v in groups.values() for a, b in v]
    scales = [min(Fraction(th, H), Fraction(tw, W)) for th, tw in res]
    up = [x for x in scales if x >= 1]
    sel = min(up) if up else max(scales)
    cands = [r for r, x in zip(res, scales) if x == sel]
    best = min(cands, key=lambda r: r[0] * r[1])  # min() keeps the first of equal areas, as torch.argmin
    return best[0] // tile, best[1] // tile


def image_layout(name, cfg, H, W):
    """Per image: placeholders, text-sequence tokens (as a list of ids), vision sequence, formula."""
    vc = cfg.vision_config
    if name == "llama4":
        p, t, ratio = vc.patch_size, vc.image_size, vc.pixel_shuffle_ratio
        rh, rw = llama4_canvas(H, W, t)
        tiles = rh * rw + (1 if rh * rw > 1 else 0)  # + the global tile (the image resized to one tile)
        n = (t // p) ** 2  # patches per tile
        ds = int(round(1.0 / ratio ** 2))  # Llama4Processor.downsample_ratio
        Pt = n // ds  # placeholders per tile (pixel shuffle keeps n * ratio^2 rows)
        ids = [LLAMA4_IMG_START]
        if rh * rw > 1:
            for yy in range(rh):
                for xx in range(rw):
                    ids += [cfg.image_token_id] * Pt
                    if xx < rw - 1:
                        ids.append(LLAMA4_X_SEP)
                ids.append(LLAMA4_Y_SEP)
        ids += [LLAMA4_IMG] + [cfg.image_token_id] * Pt + [LLAMA4_IMG_END]
        sep = rh * rw if rh * rw > 1 else 0
        return dict(image_tokens=tiles * Pt, ids=ids, vision_seq=tiles * (n + 1), tiles=tiles, canvas=[rh, rw],
                    tokens_per_tile=Pt, pixel_shape_per_image=[tiles, vc.num_channels, t, t],
                    formula=f"canvas (rh, rw) = ({rh}, {rw}) tiles of {t}x{t} (Llama4ImageProcessor: best fit among "
                            f"a x b tiles, a*b <= max_patches {LLAMA4_MAX_PATCHES}, smallest upscale >= 1 else "
                            f"least downscale, least area on ties); tiles = rh*rw + (rh*rw > 1 ? 1 global : 0) = "
                            f"{tiles}; per tile (tile/patch)^2 * ratio^2 = ({t}/{p})^2 / {ds} = {Pt} <|patch|> "
                            f"placeholders: tiles*{Pt} = {tiles * Pt} placeholders + 3 (<|image_start|>, <|image|>, "
                            f"<|image_end|>) + (rh*rw > 1 ? rh*(rw-1) <|tile_x_separator|> + rh "
                            f"<|tile_y_separator|> = rh*rw : 0) = {sep} = {tiles * Pt + 3 + sep} text tokens; vision "
                            f"sequence per tile (tile/patch)^2 + 1 (CLS, appended last) = {n + 1}, "
                            f"tiles*{n + 1} = {tiles * (n + 1)} rows (attention within each tile)")
    if name in ("qwen2_5_vl", "qwen3_vl", "qwen3_5"):
        p, m, t = vc.patch_size, vc.spatial_merge_size, vc.temporal_patch_size
        rh, rw = qwen_smart_resize(H, W, p * m, min_pixels=(p * m) ** 2, max_pixels=1 << 40)
        assert (rh, rw) == (H, W), "choose sizes that are multiples of patch*merge"
        gh, gw = H // p, W // p
        P = gh * gw // (m * m)
        ids = [cfg.vision_start_token_id] + [cfg.image_token_id] * P + [cfg.vision_end_token_id]
        return dict(image_tokens=P, ids=ids, vision_seq=gh * gw, grid_thw=[1, gh, gw],
                    pixel_shape_per_image=[gh * gw, vc.in_channels * t * p * p],
                    formula=f"(H/{p})*(W/{p})/{m}^2 = ({H}/{p})*({W}/{p})/{m * m} = {P} placeholders "
                            f"(H, W after smart_resize to multiples of patch*merge = {p * m}) + 2 "
                            f"(<|vision_start|>, <|vision_end|>) = {P + 2} text tokens; vision sequence "
                            f"(H/{p})*(W/{p}) = {gh * gw} patches, each a {vc.in_channels}x{t}x{p}x{p} "
                            f"temporal patch (a still image is repeated {t}x)")
    if name == "mistral3":
        p, m = vc.patch_size, cfg.spatial_merge_size
        rows, cols = H // (p * m), W // (p * m)
        P = rows * cols
        ids = []
        for r in range(rows):
            ids += [cfg.image_token_id] * cols + [PIXTRAL_BREAK]
        ids[-1] = PIXTRAL_END
        return dict(image_tokens=P, ids=ids, vision_seq=(H // p) * (W // p),
                    pixel_shape_per_image=[vc.num_channels, H, W],
                    formula=f"rows = ceil(H/({p}*{m})) = {rows}, cols = ceil(W/({p}*{m})) = {cols}: rows*cols = {P} "
                            f"[IMG] placeholders + rows = {rows} [IMG_BREAK]/[IMG_END] = rows*(cols+1) = "
                            f"{rows * (cols + 1)} text tokens; vision sequence (H/{p})*(W/{p}) = "
                            f"{(H // p) * (W // p)} patches, all images of a batch packed into one sequence")
    if name == "llava":
        p, s = vc.patch_size, vc.image_size
        assert (H, W) == (s, s)
        n = (s // p) ** 2
        P = n + 1 - 1 if cfg.vision_feature_select_strategy == "default" else n + 1
        return dict(image_tokens=P, ids=[cfg.image_token_id] * P, vision_seq=n + 1,
                    pixel_shape_per_image=[vc.num_channels, s, s],
                    formula=f"(image_size/patch)^2 + 1 (CLS) - 1 (vision_feature_select_strategy 'default' drops "
                            f"CLS) = ({s}/{p})^2 = {P} placeholders = text tokens; vision sequence "
                            f"(image_size/patch)^2 + 1 = {n + 1}")
    if name == "gemma3_mm":
        p, s = vc.patch_size, vc.image_size
        assert (H, W) == (s, s)
        n = (s // p) ** 2
        P = cfg.mm_tokens_per_image
        side = math.isqrt(P)
        assert side * side == P and (s // p) % side == 0, "the projector's avg-pool needs tokens_per_side | s/p"
        k = (s // p) // side
        ids = [GEMMA3_NL2, cfg.boi_token_id] + [cfg.image_token_id] * P + [cfg.eoi_token_id, GEMMA3_NL2]
        return dict(image_tokens=P, ids=ids, vision_seq=n, pixel_shape_per_image=[vc.num_channels, s, s],
                    formula=f"mm_tokens_per_image = {P} placeholders (the projector avg-pools the "
                            f"(image_size/patch)^2 = ({s}/{p})^2 = {n} patches with kernel (s/p)/sqrt(mm_tokens) = "
                            f"{k}) + 4 ('\\n\\n', <start_of_image>, <end_of_image>, '\\n\\n' that "
                            f"Gemma3Processor wraps around them) = {P + 4} text tokens in input_ids per image (the "
                            f"<start_of_image> the prompt carries is one of them; a newline of the prompt right "
                            f"next to an image may merge with its '\\n\\n' into one multi-newline token of "
                            f"Gemma 3's tokenizer, not checked here: no tokenizer offline); vision sequence "
                            f"(image_size/patch)^2 = {n}, no CLS; image resized to image_size x image_size, no "
                            f"pan-and-scan crops (do_pan_and_scan False by default)")
    raise KeyError(name)


def make_batch(name, cfg, H, W, N, spec, extra_placeholder=0):
    lay = image_layout(name, cfg, H, W)
    g = torch.Generator().manual_seed(1)
    text = torch.randint(3, spec.get("id_high", 124), (TEXT_TOKENS,), generator=g).tolist()
    img_ids = []
    for _ in range(N):
        img_ids += lay["ids"]
    if extra_placeholder:
        img_ids += [cfg.image_token_id] * extra_placeholder
    ids = text[:SPLIT] + img_ids + text[SPLIT:]
    input_ids = torch.tensor([ids])
    gp = torch.Generator().manual_seed(2)
    inputs = {"input_ids": input_ids}
    if name in ("qwen2_5_vl", "qwen3_vl", "qwen3_5"):
        rows, dim = lay["pixel_shape_per_image"]
        inputs["pixel_values"] = torch.randn(N * rows, dim, generator=gp)
        inputs["image_grid_thw"] = torch.tensor([lay["grid_thw"]] * N)
        mm = (input_ids == cfg.image_token_id).int()
        inputs["mm_token_type_ids"] = mm
    elif name == "mistral3":
        inputs["pixel_values"] = torch.randn(N, *lay["pixel_shape_per_image"], generator=gp)
        inputs["image_sizes"] = torch.tensor([[H, W]] * N)
    elif name == "gemma3_mm":
        inputs["pixel_values"] = torch.randn(N, *lay["pixel_shape_per_image"], generator=gp)
        inputs["token_type_ids"] = (input_ids == cfg.image_token_id).long()  # what Gemma3Processor returns
    elif name == "llama4":  # [N * tiles, C, tile, tile]: every image's tiles, its global tile last
        tiles, *chw = lay["pixel_shape_per_image"]
        inputs["pixel_values"] = torch.randn(N * tiles, *chw, generator=gp)
    else:
        inputs["pixel_values"] = torch.randn(N, *lay["pixel_shape_per_image"], generator=gp)
    return inputs, lay


def pixel_keys(inputs):
    """The get_image_features arguments: pixel_values and image_grid_thw / image_sizes."""
    return {k: v for k, v in inputs.items() if k not in ("input_ids", "mm_token_type_ids", "token_type_ids")}


# ---------------------------------------------------------------------------------------------------
# module regions for attributing saved tensors
# ---------------------------------------------------------------------------------------------------
def regions(model, name):
    if name == "llama4":  # Llama4ForConditionalGeneration has no .model: its parts sit at the top level
        vis = model.vision_model
        blocks = list(vis.model.layers)
        proj = [vis.vision_adapter, model.multi_modal_projector]  # pixel shuffle + MLP2, then linear_1
        out = [("vision", vis)] + [(f"vision.block.{i}", b) for i, b in enumerate(blocks)]
        out += [("projector", p) for p in proj] + [("language_model", model.language_model.model)]
        return out, vis, blocks
    core = model.model
    if name in ("qwen2_5_vl", "qwen3_vl", "qwen3_5"):
        vis = core.visual
        proj = [vis.merger] + list(getattr(vis, "deepstack_merger_list", []))
        blocks = list(vis.blocks)
    else:
        vis = core.vision_tower
        proj = [core.multi_modal_projector]
        blocks = list(vis.transformer.layers) if name == "mistral3" else list(vis.encoder.layers)
    out = [("vision", vis)] + [(f"vision.block.{i}", b) for i, b in enumerate(blocks)]
    out += [("projector", p) for p in proj] + [("language_model", core.language_model)]
    return out, vis, blocks


class RegionStack:
    def __init__(self, model, name):
        self.stack = ["head"]
        self.handles = []
        regs, self.vision, self.blocks = regions(model, name)
        for label, mod in regs:
            self.handles.append(mod.register_forward_pre_hook(self._enter(label)))
            self.handles.append(mod.register_forward_hook(self._leave))

    def _enter(self, label):
        def hook(module, args):
            self.stack.append(label)
        return hook

    def _leave(self, module, args, output):
        self.stack.pop()

    def close(self):
        for h in self.handles:
            h.remove()


def vision_dims(name, cfg):
    vc = cfg.vision_config
    if name == "llama4":
        return dict(layers=vc.num_hidden_layers, hidden=vc.hidden_size, heads=vc.num_attention_heads,
                    intermediate=vc.intermediate_size, mlp="fc1 -> GELU (erf) -> fc2 (bias)", norm="LayerNorm",
                    qkv="separate q/k/v/o, bias", patch_size=vc.patch_size, image_size=vc.image_size,
                    patch_embedding="Unfold(patch, stride patch) + Linear(C p^2, d, no bias)",
                    cls="class_embedding appended after the patches; positional_embedding_vlm [(s/p)^2 + 1, d] added",
                    rotary="2-D rotary as complex numbers in fp32 (freqs_ci buffer [(s/p)^2 + 1, 1, hd/2] complex64)",
                    pixel_shuffle_ratio=vc.pixel_shuffle_ratio, projector_input_dim=vc.projector_input_dim,
                    projector_output_dim=vc.projector_output_dim, vision_output_dim=vc.vision_output_dim,
                    projector="vision_adapter: layernorm_post output without CLS -> pixel_shuffle(ratio) [T, "
                              "(s/p)^2 r^2, d / r^2] -> fc1 (d/r^2 = I -> Pi, no bias) -> GELU -> dropout -> fc2 "
                              "(Po -> Po, no bias) -> GELU; multi_modal_projector.linear_1 (vision_output_dim -> Dt, "
                              "no bias)",
                    max_patches=LLAMA4_MAX_PATCHES)
    if name == "qwen2_5_vl":
        return dict(layers=vc.depth, hidden=vc.hidden_size, heads=vc.num_heads, intermediate=vc.intermediate_size,
                    mlp="SwiGLU (gate, up, down; bias)", norm="RMSNorm", qkv="fused, bias",
                    window_size=vc.window_size, fullatt_block_indexes=vc.fullatt_block_indexes,
                    patch_size=vc.patch_size, spatial_merge_size=vc.spatial_merge_size,
                    window_patches=(vc.window_size // vc.patch_size) ** 2)
    if name == "qwen3_5":
        return dict(layers=vc.depth, hidden=vc.hidden_size, heads=vc.num_heads, intermediate=vc.intermediate_size,
                    mlp="fc1 -> gelu_pytorch_tanh -> fc2", norm="LayerNorm", qkv="fused, bias",
                    deepstack_visual_indexes=None, patch_size=vc.patch_size, spatial_merge_size=vc.spatial_merge_size,
                    same_code_as="qwen3_vl: Qwen3_5VisionModel(Qwen3VLVisionModel) in modular_qwen3_5.py, "
                                 "deepstack_merger_list deleted; blocks, attention, rotary, patch embed and merger "
                                 "are Qwen3-VL's code under new names")
    if name == "gemma3_mm":
        side = math.isqrt(cfg.mm_tokens_per_image)
        return dict(layers=vc.num_hidden_layers, hidden=vc.hidden_size, heads=vc.num_attention_heads,
                    intermediate=vc.intermediate_size, mlp="fc1 -> gelu_pytorch_tanh -> fc2", norm="LayerNorm",
                    qkv="separate, bias", patch_size=vc.patch_size, image_size=vc.image_size,
                    vision_use_head=vc.vision_use_head, mm_tokens_per_image=cfg.mm_tokens_per_image,
                    projector="avg_pool2d(kernel (image_size/patch)/sqrt(mm_tokens_per_image) = "
                              f"{(vc.image_size // vc.patch_size) // side}) -> Gemma3RMSNorm (1 + w) -> matmul "
                              "with mm_input_projection_weight [d, Dt] (a Parameter, no nn.Linear)")
    if name == "qwen3_vl":
        return dict(layers=vc.depth, hidden=vc.hidden_size, heads=vc.num_heads, intermediate=vc.intermediate_size,
                    mlp="fc1 -> gelu_pytorch_tanh -> fc2", norm="LayerNorm", qkv="fused, bias",
                    deepstack_visual_indexes=vc.deepstack_visual_indexes, patch_size=vc.patch_size,
                    spatial_merge_size=vc.spatial_merge_size)
    if name == "mistral3":
        return dict(layers=vc.num_hidden_layers, hidden=vc.hidden_size, heads=vc.num_attention_heads,
                    intermediate=vc.intermediate_size, mlp="SwiGLU (no bias)", norm="RMSNorm", qkv="separate, no bias",
                    patch_size=vc.patch_size, spatial_merge_size=cfg.spatial_merge_size, max_image_size=vc.image_size)
    return dict(layers=vc.num_hidden_layers, hidden=vc.hidden_size, heads=vc.num_attention_heads,
                intermediate=vc.intermediate_size, mlp="fc1 -> quick_gelu -> fc2", norm="LayerNorm",
                qkv="separate, bias", patch_size=vc.patch_size, image_size=vc.image_size,
                vision_feature_layer=cfg.vision_feature_layer,
                vision_feature_select_strategy=cfg.vision_feature_select_strategy)


# ---------------------------------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------------------------------
def load(folder, spec, attn, dtype=torch.float32):
    return M.load(folder, spec, attn=attn, dtype=dtype)


def check_tokens(model, name, cfg, spec, H, W, N):
    """Run the model with exactly the placeholders, then with one more: the second must be refused."""
    inputs, lay = make_batch(name, cfg, H, W, N, spec)
    with torch.no_grad():
        if name == "llama4":  # get_image_features is the vision tower + adapter; the wrapper projects it flat
            feats = model.get_image_features(**pixel_keys(inputs), return_dict=True)
            hs = feats.last_hidden_state
            pooled = [model.multi_modal_projector(hs.view(-1, hs.size(-1)))]
        else:
            feats = model.model.get_image_features(**pixel_keys(inputs), return_dict=True)
            pooled = feats.pooler_output
            pooled = list(pooled) if isinstance(pooled, (list, tuple)) else [pooled]
        if name == "gemma3_mm":  # one [N, mm_tokens, Dt] tensor
            pooled = list(pooled[0])
        out = model(**inputs, use_cache=False)
    bad, _ = make_batch(name, cfg, H, W, N, spec, extra_placeholder=1)
    try:
        with torch.no_grad():
            model(**bad, use_cache=False)
        refused = False
    except Exception:
        refused = True
    placeholders = int((inputs["input_ids"] == cfg.image_token_id).sum())
    res = {
        "placeholders_in_input_ids": placeholders,
        "features_rows": sum(int(p.shape[-2] if p.dim() > 1 else 1) for p in pooled),
        "features_per_image": [list(p.shape) for p in pooled],
        "vision_last_hidden_state": list(feats.last_hidden_state.shape),
        "logits": list(out.logits.shape),
        "one_more_placeholder_refused": refused,
    }
    if getattr(feats, "deepstack_features", None):
        res["deepstack_features"] = [[list(x.shape) for x in f] for f in feats.deepstack_features]
    assert placeholders == N * lay["image_tokens"] == res["features_rows"], (name, res)
    assert refused, name
    return res


def measure_kv(model, name, cfg, spec, H, W, N):
    inputs, lay = make_batch(name, cfg, H, W, N, spec)
    tc = cfg.get_text_config(decoder=True)
    S = inputs["input_ids"].shape[1]
    with torch.no_grad():
        out = model(**inputs, use_cache=True)
    cs = M.cache_summary(out.cache)
    hd = getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads
    formula = 2 * tc.num_hidden_layers * 1 * tc.num_key_value_heads * S * hd * 4
    res = {"seq": S, "seq_formula": f"T + N*text_tokens = {TEXT_TOKENS} + {N}*{len(lay['ids'])} = "
                                    f"{TEXT_TOKENS + N * len(lay['ids'])}",
           "cache_seq_length": cs["seq_length"], "storage_bytes": cs["storage_bytes"],
           "kv_view_bytes": cs["kv_view_bytes"], "formula_bytes": formula,
           "formula": f"2 * layers {tc.num_hidden_layers} * B 1 * kv_heads {tc.num_key_value_heads} * S {S} * "
                      f"head_dim {hd} * 4 B"}
    kinds = list(getattr(tc, "layer_types", None) or [])
    if any(k != "full_attention" for k in kinds):
        # qwen3_5: Gated DeltaNet layers keep a conv state [B, conv_dim, kernel] and a recurrent state
        # [B, v_heads, k_dim, v_dim] whatever S; gemma3: a sliding layer's storage holds all S after the prefill
        # (its view keeps window - 1) plus an int64 _sliding_window_tensor scalar
        # llama4: chunked_attention layers are DynamicSlidingWindowLayer (window attention_chunk_size), as sliding
        nfull = sum(k in ("full_attention", "sliding_attention", "chunked_attention") for k in kinds)
        nslide = sum(k in ("sliding_attention", "chunked_attention") for k in kinds)
        nlin = sum(k == "linear_attention" for k in kinds)
        kv_full = 2 * nfull * tc.num_key_value_heads * S * hd * 4
        lin = 0
        if nlin:
            conv_dim = (2 * tc.linear_num_key_heads * tc.linear_key_head_dim
                        + tc.linear_num_value_heads * tc.linear_value_head_dim)
            lin = nlin * (conv_dim * tc.linear_conv_kernel_dim
                          + tc.linear_num_value_heads * tc.linear_key_head_dim * tc.linear_value_head_dim) * 4
        res["formula_bytes"] = kv_full + lin + 8 * nslide
        res["formula"] = (f"attention layers {nfull} ({nslide} sliding): 2 * {nfull} * B 1 * kv_heads "
                          f"{tc.num_key_value_heads} * S {S} * head_dim {hd} * 4 B = {kv_full}"
                          + (f" + sliding layers {nslide} * 8 B (int64 _sliding_window_tensor)" if nslide else "")
                          + (f" + linear-attention layers {nlin} * (conv_dim {conv_dim} * kernel "
                             f"{tc.linear_conv_kernel_dim} + v_heads {tc.linear_num_value_heads} * k_dim "
                             f"{tc.linear_key_head_dim} * v_dim {tc.linear_value_head_dim}) * 4 B = {lin}" if nlin
                             else ""))
        if nslide:
            w = getattr(tc, "sliding_window", None) or tc.attention_chunk_size
            view = 2 * tc.num_key_value_heads * hd * 4 * ((nfull - nslide) * S + nslide * min(S, w - 1))
            res["kv_view_formula_bytes"] = view
            res["kv_view_formula"] = (f"2 * kv_heads * head_dim * 4 B * (full layers {nfull - nslide} * S + "
                                      f"sliding layers {nslide} * min(S, window {w} - 1))")
    assert S == TEXT_TOKENS + N * len(lay["ids"])
    return res


def apply_lora(model, spec, kind):
    """peft LoRA exactly as measure.measure_scenario configures it (r 8, alpha 16, dropout 0, task_type None for a
    wrapper); returns the PeftModel and the wrapped module names (relative to the wrapper)."""
    from peft import LoraConfig, get_peft_model
    targets = (spec["lora_qv_targets"] if kind == "qv" and spec.get("lora_qv_targets")
               else M.lora_targets(model, kind))
    task = "CAUSAL_LM" if spec["head"] == "causal" else None
    # llama4: Llama4Router is an nn.Linear whose forward returns a tuple; peft's all-linear wraps it and fails
    # ('tuple' object has no attribute 'dtype', as in measure.py's llama4_text fixture): leave it out
    extra = {"exclude_modules": spec["lora_all_linear_exclude"]} if kind == "all-linear" and \
        spec.get("lora_all_linear_exclude") else {}
    lcfg = LoraConfig(r=LORA_R, lora_alpha=16, lora_dropout=0.0, target_modules=targets, task_type=task, **extra)
    model = get_peft_model(model, lcfg)
    wrapped = sorted(n.split("base_model.model.", 1)[-1] for n, m in model.named_modules()
                     if hasattr(m, "lora_A") and len(m.lora_A))
    return model, targets, wrapped


def region_of_names(model, name):
    """(prefix, region) pairs of the wrapper's region modules, longest prefix first."""
    ids = {id(m): n for n, m in model.named_modules()}
    regs, _, _ = regions(model, name)
    out = [(ids[id(mod)], label) for label, mod in regs]
    return sorted(out, key=lambda x: -len(x[0]))


def region_of(prefixes, qual):
    for pre, label in prefixes:
        if qual == pre or qual.startswith(pre + "."):
            return label
    return "head"


def lora_info(folder, name, spec, kind):
    """What peft wraps and trains in the wrapper (the model of the sdpa_fp32_lora_* scenarios)."""
    torch.manual_seed(SEED)
    model = load(folder, spec, attn="sdpa")
    prefixes = region_of_names(model, name)
    model, targets, wrapped = apply_lora(model, spec, kind)
    trainable, total = model.get_nb_trainable_parameters()
    by_region = collections.Counter()
    wrapped_by_region = collections.Counter()
    for n in wrapped:
        wrapped_by_region[region_of(prefixes, n).split(".")[0]] += 1
    for n, p in model.named_parameters():
        if p.requires_grad:
            by_region[region_of(prefixes, n.split("base_model.model.", 1)[-1]).split(".")[0]] += p.numel()
    vision = [n for n in wrapped if region_of(prefixes, n).startswith("vision")]
    res = {"r": LORA_R, "alpha": 16, "dropout": 0.0, "task_type": None,
           "target_modules": targets if isinstance(targets, (str, list)) else sorted(targets),
           "wrapped_modules": len(wrapped), "wrapped_by_region": dict(sorted(wrapped_by_region.items())),
           "vision_modules_wrapped": bool(vision),
           "trainable_params": trainable, "all_params": total,
           "trainable_params_by_region": dict(sorted(by_region.items())),
           "trainable_params_formula": "sum over wrapped Linear(in, out) of r * (in + out)",
           "trainable_params_by_formula": sum(LORA_R * (m.in_features + m.out_features) for n, m in model.named_modules()
                                              if hasattr(m, "lora_A") and len(m.lora_A)),
           "wrapped_module_names": wrapped}
    del model
    return res


def gc_info(folder, name, spec):
    """Which modules gradient_checkpointing_enable() switches on, by region."""
    from transformers.modeling_layers import GradientCheckpointingLayer
    torch.manual_seed(SEED)
    model = load(folder, spec, attn="sdpa")
    model.gradient_checkpointing_enable()
    prefixes = region_of_names(model, name)
    by_region = collections.defaultdict(list)
    for n, m in model.named_modules():
        if isinstance(m, GradientCheckpointingLayer):
            by_region[region_of(prefixes, n).split(".")[0]].append(f"{n}: {type(m).__name__} "
                                                                     f"{'on' if m.gradient_checkpointing else 'off'}")
    fn = next((m._gradient_checkpointing_func for m in model.modules() if hasattr(m, "_gradient_checkpointing_func")),
              None)
    res = {"call": "model.gradient_checkpointing_enable()",
           "checkpoint_function": (f"{fn.func.__module__}.{fn.func.__name__} {fn.keywords}"
                                   if isinstance(fn, functools.partial) else repr(fn)),
           "checkpointed_layers_by_region": dict(sorted(by_region.items())),
           "one_checkpointed_vision_layer_keeps": (
               "nothing: Llama4VisionEncoder calls each layer with keyword arguments only (hidden_state=, "
               "freqs_ci=, attention_mask=), so torch.utils.checkpoint gets no positional tensor to save; the input "
               "stays referenced by the checkpoint's closure (alive, not a saved tensor) and the layer is recomputed "
               "in backward" if name == "llama4" else
               "its positional tensor arguments, saved through torch's saved-tensor hooks by the checkpoint: the "
               "input hidden_states [S, d] in the weights' dtype"
               + (" and the attention_mask [1, 1, S, S] (one storage shared by all layers)" if name == "mistral3"
                  else "")
               + "; keyword arguments (rotary cos/sin, cu_seqlens, max_seqlen) stay referenced by the checkpoint's "
                 "closure and the CPU RNG state is stashed per layer (preserve_rng_state=True): alive, but not saved "
                 "tensors (see measure.py's forward_net_not_in_saved_bytes); the layer is recomputed in backward")}
    del model
    return res


def measure_saved(folder, name, cfg, spec, H, W, N, sc, text_only_seq=None):
    torch.manual_seed(SEED)
    if sc.get("dtype") == "bfloat16":
        model = load(folder, spec, attn=sc["attn"], dtype=torch.bfloat16)
    else:
        model = load(folder, spec, attn=sc["attn"])
    model.train()
    if sc.get("gc"):
        model.gradient_checkpointing_enable()
    if sc.get("lora"):
        model, _, _ = apply_lora(model, spec, sc["lora"])
        model.train()
        rs = RegionStack(model.get_base_model(), name)
    else:
        rs = RegionStack(model, name)
    if sc["freeze_vision"]:
        for p in rs.vision.parameters():
            p.requires_grad_(False)
    if text_only_seq:  # the same model on text alone, as long as the sequence with images
        g = torch.Generator().manual_seed(3)
        inputs = {"input_ids": torch.randint(3, spec.get("id_high", 124), (1, text_only_seq), generator=g)}
    else:
        inputs, lay = make_batch(name, cfg, H, W, N, spec)
        if name == "llama4" and sc.get("dtype") == "bfloat16":
            # Llama4UnfoldConvolution does not cast: pixels must come in the weights' dtype (Llama4ImageProcessor
            # returns bf16 pixel values; with fp32 weights they are cast to fp32 by the caller)
            inputs["pixel_values"] = inputs["pixel_values"].to(torch.bfloat16)
    labels = inputs["input_ids"].clone()
    labels[labels == cfg.image_token_id] = -100
    inputs["labels"] = labels
    param_ptrs = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters(remove_duplicate=False)}
    buf_ptrs = {b.untyped_storage().data_ptr(): n for n, b in model.named_buffers(remove_duplicate=False)}
    input_ptrs = {t.untyped_storage().data_ptr(): k for k, t in inputs.items()}
    casts = collections.defaultdict(list)
    if sc["autocast"]:
        for n, p in model.named_parameters():
            if p.is_floating_point() and p.dim() >= 1:
                casts[p.numel()].append((n, p.detach().to(torch.bfloat16).reshape(-1)))
    holders = []
    tracker = M.FuncTracker()

    def pack(t):
        fn = tracker.stack[-1] if tracker.stack else "<none>"
        h = M._Holder(t, len(holders), (rs.stack[-1], fn))
        holders.append(weakref.ref(h))
        return h

    last = []

    def unpack(h):
        last.append(h.idx)
        return h.t

    ac = torch.autocast("cpu", dtype=torch.bfloat16) if sc["autocast"] else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack), tracker, ac:
        out = model(**inputs, use_cache=False)
        loss = out.loss
    del out
    rs.close()
    # which saved tensors backward can reach (a layer after vision_feature_layer is run but feeds nothing)
    reach = set()
    # under checkpointing, reading a saved tensor of a checkpointed layer recomputes the layer (that is how the
    # layer's own saved input is reached); one group makes it one recomputation per layer instead of one per read
    group = torch.utils.checkpoint.GraphExecGroup() if sc.get("gc") else contextlib.nullcontext()
    group.__enter__()
    for n in M.node_walk(loss.grad_fn):
        attrs = [a for a in dir(n) if a.startswith("_saved_")]
        for a in attrs:
            last.clear()
            try:
                getattr(n, a)
            except Exception:
                pass
            reach.update(last)
        if hasattr(n, "saved_tensors") and not attrs:
            last.clear()
            try:
                n.saved_tensors
            except Exception:
                pass
            reach.update(last)
    group.__exit__(None, None, None)
    storages = {}
    unreachable = collections.Counter()
    live = [(ref(), ref) for ref in holders]
    reached_ptrs = {h.t.untyped_storage().data_ptr() for h, _ in live if h is not None and h.idx in reach}
    for h, _ in live:
        if h is None:
            continue
        s = h.t.untyped_storage()
        ptr, nb = s.data_ptr(), s.nbytes()
        if nb == 0 or ptr in storages:
            continue
        if ptr not in reached_ptrs:
            if ptr not in param_ptrs and ptr not in buf_ptrs and ptr not in input_ptrs:
                unreachable[h.func[0]] += nb
            storages[ptr] = None
            continue
        if ptr in param_ptrs:
            cat = "parameter"
        elif ptr in buf_ptrs:
            cat = "buffer"
        elif ptr in input_ptrs:
            cat = "input"
        else:
            cat = "activation"
            if sc["autocast"] and h.t.dtype == torch.bfloat16 and nb % 2 == 0:
                flat = torch.empty(0, dtype=torch.bfloat16).set_(s)
                if any(torch.equal(flat, pc) for _, pc in casts.get(flat.numel(), [])):
                    cat = "autocast_weight_copy"
        storages[ptr] = (cat, h.func, nb, M.dtype_name(h.t.dtype), list(h.t.shape))
    by_region = collections.Counter()
    by_cat = collections.Counter()
    wcopy_region = collections.Counter()
    block_detail = collections.Counter()
    for v in storages.values():
        if v is None:
            continue
        cat, (region, fn), nb, dt, shape = v
        by_cat[cat] += nb
        if cat == "activation":
            by_region[region] += nb
            if region.startswith("vision") or (DEBUG_REGIONS and region in DEBUG_REGIONS):
                block_detail[(region, nb, dt, tuple(shape), fn)] += 1
        elif cat == "autocast_weight_copy":
            wcopy_region[region.split(".")[0]] += nb
    blocks = [by_region.get(f"vision.block.{i}", 0) for i in range(len(rs.blocks))]
    res = {
        "activation_bytes": by_cat["activation"],
        "vision_blocks_bytes": blocks,
        "vision_other_bytes": by_region.get("vision", 0),
        "vision_tower_bytes": sum(blocks) + by_region.get("vision", 0),
        "projector_bytes": by_region.get("projector", 0),
        "language_model_bytes": by_region.get("language_model", 0),
        "head_bytes": by_region.get("head", 0),
        "autocast_weight_copy_bytes": by_cat["autocast_weight_copy"],
        "autocast_weight_copy_by_region": dict(sorted(wcopy_region.items())),
        "input_bytes": by_cat["input"],
        "unreachable_live_bytes_by_region": dict(sorted(unreachable.items())),
        "vision_storages_columns": ["count", "bytes_each", "dtype", "shape", "first packed in torch function"],
        "vision_storages": {r: [[n, nb, dt, list(sh), fn] for (r2, nb, dt, sh, fn), n in
                                sorted(block_detail.items(), key=lambda kv: (-kv[0][1], kv[0][4])) if r2 == r]
                            for r in sorted({k[0] for k in block_detail})},
    }
    assert sum(by_region.values()) == by_cat["activation"]
    del live, h
    loss.backward()
    del loss, model
    return res


def measure_vision_inference(model, name, cfg, spec, H, W, N):
    inputs, _ = make_batch(name, cfg, H, W, N, spec)
    px = pixel_keys(inputs)
    with torch.no_grad():
        with M.AllocTrace() as tr:
            if name == "llama4":  # vision tower + adapter, then the wrapper's projector on the flat features
                feats = model.get_image_features(**px, return_dict=True).last_hidden_state
                feats = model.multi_modal_projector(feats.view(-1, feats.size(-1)))
            else:
                feats = model.model.get_image_features(**px, return_dict=True)
    del feats
    return {"peak_bytes": tr.peak, "net_bytes": tr.net}


# ---------------------------------------------------------------------------------------------------
# formulas (what nnlint should compute), checked against the measurements
# ---------------------------------------------------------------------------------------------------
def vision_formulas(name, cfg, H, W, N):
    """What nnlint should compute for the vision tower + projector: bytes saved for backward, by formula.

    S = patches of all N images together (the packed sequence of qwen/pixtral, N * (S_img) for CLIP's and SigLIP's
    batch), d = vision hidden, I = vision MLP width, h = vision heads, hd = d / h, r = LoRA rank, Sm = S / merge^2
    (merged rows), P = N * image tokens, Dt = text hidden. Returns per-layer values, once-only terms and the
    projector for every scenario of formula_check; the total is L * per_layer + once + projector (eager: the sum of
    its per-layer list). The symbols are in VISION_FORMULA_SYMBOLS; every term is derived in the comments below."""
    vc = cfg.vision_config
    d, I = vc.hidden_size, vc.intermediate_size
    h = getattr(vc, "num_heads", None) or vc.num_attention_heads
    hd = d // h
    tc = cfg.get_text_config(decoder=True)
    Dt = tc.hidden_size
    lay = image_layout(name, cfg, H, W)
    S_img = lay["vision_seq"]
    S = N * S_img
    r = LORA_R
    if name in ("qwen2_5_vl", "qwen3_vl", "qwen3_5"):
        from transformers.vision_utils import get_vision_window_index
        m = vc.spatial_merge_size
        grid = torch.tensor([lay["grid_thw"]] * N)
        full = [S_img] * N
        px = S * vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2 * 2  # the bf16 copy of pixel_values
        Sm = S // (m * m)
        if name == "qwen2_5_vl":
            _, cu = get_vision_window_index(grid, m, vc.window_size, vc.patch_size)
            win = (cu[1:] - cu[:-1]).tolist()
            segs = [full if i in vc.fullatt_block_indexes else win for i in range(vc.depth)]
            per = (13 * S * d + 4 * S * I + 2 * S) * 4 + 4 * h * S
            eager = [(12 * S * d + 4 * S * I + 2 * S + h * sum(x * x for x in sg)) * 4 for sg in segs]
            auto = 32 * S * d + 8 * S * I + 8 * S + 4 * h * S
            once = 2 * S * hd * 4 + 2 * (S // (m * m)) * 8
            once_auto = once + S * vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2 * 2
            proj, proj_auto = (5 * S * d + S) * 4, 12 * S * d + 4 * S
            L = vc.depth
            # bf16 weights: every saved tensor at 2 B except what the RMSNorm upcasts (its fp32 input x, saved by
            # pow and by x * rsqrt, and the fp32 rsqrt [S, 1]), the fp32 rotary cos/sin and SDPA's fp32 logsumexp
            per_bf16 = (13 * S * d + 4 * S * I) * 2 + 2 * (2 * S * d) + 2 * S * 4 + 4 * h * S
            once_bf16 = 2 * S * hd * 4 + 2 * Sm * 8 + px
            proj_bf16 = 4 * S * d + 2 * S * d + 4 * S + 3 * S * d * 2  # ln_q: fp32 x, bf16 x_hat, fp32 rsqrt; MLP
            # checkpointing: a block keeps its positional input (hidden_states [S, d]); cos/sin and cu_seqlens are
            # keyword arguments the checkpoint closure holds (not saved tensors); the window reorder indices stay
            per_gc, once_gc, proj_gc = 4 * S * d, 2 * Sm * 8, proj
            # LoRA q_proj/v_proj: the ViT has a fused qkv, the merger no q/v: nothing in the vision tower or the
            # merger requires grad, so nothing is saved there
            per_qv = once_qv = proj_qv = 0
            # LoRA all-linear (qkv, proj, gate, up, down per block; merger mlp.0, mlp.2): a frozen linear saves
            # nothing, its adapter saves the input (as a trained linear would) and the [rows, r] lora_A output; a
            # frozen RMSNorm weight needs no x_hat (-2 S d per block); the first block's norm1 input has no grad
            # (patch embed frozen): no x, no rsqrt; the input reordering by window_index saves nothing (no grad
            # yet), the reverse at the end keeps its indices
            per_all = (11 * S * d + 4 * S * I + 2 * S + 5 * r * S) * 4 + 4 * h * S
            once_all = 2 * S * hd * 4 + Sm * 8 - (S * d + S) * 4
            proj_all = (4 * S * d + S + 2 * r * Sm) * 4
        else:
            nd = len(getattr(vc, "deepstack_visual_indexes", None) or [])  # qwen3_5: no deepstack
            per = (11 * S * d + 2 * S * I + 4 * S) * 4 + 4 * h * S
            eager = [(10 * S * d + 2 * S * I + 4 * S + h * sum(x * x for x in full)) * 4] * vc.depth
            auto = 22 * S * d + 4 * S * I + 16 * S + 4 * h * S
            once = 2 * S * hd * 4 + 48 * S
            once_auto = once + S * vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2 * 2
            # a deepstack merger's LayerNorm input is the block output that the next block's norm1 saves too
            proj = (4 * S * d + 2 * S) * 4 + nd * (3 * S * d + S // 2) * 4
            proj_auto = 8 * S * d + 8 * S + nd * (6 * S * d + 2 * S)
            L = vc.depth
            # bf16 weights: all at 2 B (LayerNorm mean/rstd too) but the fp32 rotary cos/sin (apply_rotary upcasts),
            # the fp32 position-interpolation weights [S, 4, 1] + int64 indices [S, 4] (48 S) and the logsumexp
            per_bf16 = (11 * S * d + 2 * S * I + 4 * S) * 2 + 4 * h * S
            once_bf16 = 2 * S * hd * 4 + 48 * S + px
            proj_bf16 = (4 * S * d + 2 * S) * 2 + nd * (3 * S * d + S // 2) * 2
            # checkpointing: each block keeps its input [S, d]; cos/sin are keyword arguments (not saved tensors);
            # block i's input is deepstack merger i-1's LayerNorm input, counted here and not in the projector
            per_gc, once_gc, proj_gc = 4 * S * d, 48 * S, proj
            per_qv = once_qv = proj_qv = 0  # fused qkv: LoRA q/v wraps nothing in the ViT or the mergers
            # LoRA all-linear (qkv, proj, fc1, fc2 per block; fc1, fc2 per merger): LayerNorm saves the same with a
            # frozen weight; + r S per adapter; pos_embed frozen: the interpolation saves nothing (-48 S); the first
            # block's norm1 input has no grad (-S d - 2 S)
            per_all = per + 4 * r * S * 4
            once_all = 2 * S * hd * 4 - (S * d + 2 * S) * 4
            proj_all = proj + (1 + nd) * 2 * r * Sm * 4
    elif name == "mistral3":
        m = cfg.spatial_merge_size
        L = vc.num_hidden_layers
        per = (10 * S * d + 4 * S * I + 2 * S) * 4 + 4 * h * S
        eager = [(10 * S * d + 4 * S * I + 2 * S + h * S * S) * 4] * L  # one packed sequence: S^2 over all images
        auto = 34 * S * d + 8 * S * I + 8 * S + 4 * h * S + 2 * S * S  # the block mask cast to bf16 per layer
        once = 2 * S * hd * 4 + (2 * S * d + S) * 4 + S * S * 4  # rope cos/sin, ln_pre, the fp32 block mask
        once_auto = 2 * S * hd * 4 + 4 * S * d + 2 * S * d + 4 * S + N * vc.num_channels * H * W * 2
        Sm = S // (m * m)
        proj = (2 * S * d + S + S * d + Sm * d + 2 * Sm * Dt) * 4
        proj_auto = 8 * S * d + 4 * S + 2 * S * d + 2 * Sm * d + 4 * Sm * Dt
        # bf16 weights: 2 B but the RMSNorms' fp32 x and rsqrt (2 per block) and the logsumexp; pixtral casts cos/sin
        # and the block mask to the model dtype (2 B); ln_pre: fp32 x, bf16 x_hat, fp32 rsqrt
        per_bf16 = (10 * S * d + 4 * S * I) * 2 + 2 * (2 * S * d) + 2 * S * 4 + 4 * h * S
        once_bf16 = 2 * S * hd * 2 + (4 * S * d + 2 * S * d + 4 * S) + N * vc.num_channels * H * W * 2 + S * S * 2
        proj_bf16 = (4 * S * d + 2 * S * d + 4 * S) + 2 * S * d + 2 * Sm * d + 4 * Sm * Dt
        # checkpointing: each layer keeps its input [S, d] and its positional attention_mask (one [1, 1, S, S] fp32
        # storage for all layers); cos/sin are keyword arguments
        per_gc, once_gc, proj_gc = 4 * S * d, (2 * S * d + S) * 4 + S * S * 4, proj
        # LoRA q/v (pixtral's q_proj, v_proj are wrapped): frozen RMSNorm = x + rsqrt; the attention norm output
        # (adapter input), q, k, v, out, two [S, r]; gate out, act out, up out (frozen down saves nothing);
        # the first block's attention norm saves nothing (its input has no grad: patch conv and ln_pre frozen);
        # projector frozen: its RMSNorm (x, rsqrt) and the GELU input; the rest saves nothing
        per_qv = (7 * S * d + 3 * S * I + 2 * S + 2 * r * S) * 4 + 4 * h * S
        once_qv = 2 * S * hd * 4 + S * S * 4 - (S * d + S) * 4
        proj_qv = (S * d + S + Sm * Dt) * 4
        # LoRA all-linear (q, k, v, o, gate, up, down; merging_layer, linear_1, linear_2): as full training but no
        # x_hat in the frozen RMSNorms (-2 S d per block, -S d in the projector) + r rows per adapter
        per_all = (8 * S * d + 4 * S * I + 2 * S + 7 * r * S) * 4 + 4 * h * S
        once_all = once_qv
        proj_all = (2 * S * d + S + Sm * d + 2 * Sm * Dt + 3 * r * Sm) * 4
    elif name == "gemma3_mm":  # SigLIP: batch of N images of S_img patches (no CLS), post_layernorm, avg-pool projector
        L = vc.num_hidden_layers
        P = N * lay["image_tokens"]
        nchw = N * vc.num_channels * H * W * 2
        # block: LayerNorm inputs 2 S d + stats 4 S, norm outputs 2 S d, q, k, v, out (= out_proj input) 4 S d,
        # fc1 out (gelu input) and gelu out (fc2 input) 2 S I, logsumexp h S fp32
        per = (8 * S * d + 2 * S * I + 4 * S) * 4 + 4 * h * S
        # eager: q, k^T, v, the attention output copy, and the fp32 probabilities [N, h, S_img, S_img]
        eager = [(8 * S * d + 2 * S * I + 4 * S + h * N * S_img * S_img) * 4] * L
        # autocast: LayerNorm inputs fp32, each of q/k/v_proj casts the norm output to bf16 separately (3 copies),
        # fc1 one more; q, k, v, out bf16; GELU in/out bf16; stats fp32
        auto = 24 * S * d + 4 * S * I + 16 * S + 4 * h * S
        once = (S * d + 2 * S) * 4  # post_layernorm input + stats
        once_auto = once + nchw
        # projector: avg_pool2d input (a contiguous [N, d, s/p, s/p] copy of the tower output, S d), Gemma3RMSNorm
        # (x P d, rsqrt P, x_hat P d, 1 + w [d]), the matmul input P d (mm_input_projection_weight is trained)
        proj = (S * d + 3 * P * d + P + d) * 4
        proj_auto = 4 * S * d + 4 * P * d + 4 * P * d + 4 * d + 4 * P + 2 * P * d  # matmul input cast to bf16
        per_bf16 = (8 * S * d + 2 * S * I + 4 * S) * 2 + 4 * h * S
        once_bf16 = (S * d + 2 * S) * 2 + nchw
        proj_bf16 = 2 * S * d + 4 * P * d + 4 * P * d + 4 * d + 4 * P + 2 * P * d  # Gemma3RMSNorm computes in fp32
        per_gc, once_gc, proj_gc = 4 * S * d, once, proj  # SigLIP passes no attention mask to its layers
        # LoRA q/v (SigLIP's q_proj, v_proj are wrapped): LayerNorms save as trained, the norm1 output (adapter
        # input), q, k, v, out, two [S, r], the GELU input (fc1, fc2 frozen); first block's norm1 input has no grad;
        # post_layernorm saves (its input has grad); projector: avg_pool input, RMSNorm x, rsqrt, 1 + w (frozen
        # weight: no x_hat, frozen matmul weight: no input)
        per_qv = (7 * S * d + S * I + 4 * S + 2 * r * S) * 4 + 4 * h * S
        once_qv = once - (S * d + 2 * S) * 4
        proj_qv = (S * d + P * d + P + d) * 4
        # LoRA all-linear (q, k, v, out_proj, fc1, fc2): full training + r rows per adapter; the projector has no
        # nn.Linear (a matmul with a Parameter): as with q/v
        per_all = per + 6 * r * S * 4
        once_all = once_qv
        proj_all = proj_qv
    elif name == "llama4":  # T tiles of S_t = (tile/patch)^2 + 1 rows each (CLS last), attention within a tile
        L = vc.num_hidden_layers
        T = N * lay["tiles"]
        S_t = S_img // lay["tiles"]
        P = N * lay["image_tokens"]  # = T * (tile/patch)^2 * ratio^2
        Pi, Po = vc.projector_input_dim, vc.projector_output_dim
        pix = T * vc.num_channels * vc.image_size ** 2  # pixel elements of the batch
        # I = intermediate_size = d / ratio^2: the encoder MLP width and the pixel-shuffle output width (MLP2's fc1
        # input is Linear(intermediate_size, Pi), so the release has intermediate_size = d / ratio^2)
        assert I * vc.pixel_shuffle_ratio ** 2 == d, "Llama4VisionMLP2.fc1 takes intermediate_size = d / ratio^2"
        # block: input_layernorm / post_attention_layernorm inputs 2 S d + mean/rstd 4 S, their outputs (q/k/v_proj
        # input, fc1 input) 2 S d, SDPA q, k (rotated: the complex multiply by the freqs_ci buffer saves only the
        # buffer; query.float() / type_as are no-ops in fp32), v, output (= o_proj input, SDPA's output is already
        # in [T, S_t, h, hd] memory order, so transpose().contiguous() copies nothing) 4 S d, fc1 output (GELU
        # input) and GELU output (fc2 input) 2 S I, logsumexp h S fp32
        per = (8 * S * d + 2 * S * I + 4 * S) * 4 + 4 * h * S
        # eager (vision_eager_attention_forward, no fp32 upcast, no mask): q, k^T, v and the o_proj input copy
        # replace SDPA's q, k, v, output; + the probabilities [T, h, S_t, S_t]; no logsumexp; dropout p 0 saves none
        eager = [(8 * S * d + 2 * S * I + 4 * S + h * T * S_t * S_t) * 4] * L
        # autocast: LayerNorm inputs and stats fp32; q/k/v_proj each cast the norm output to bf16 (3 copies), fc1
        # one more; q, k, v, out bf16 (the rotary computes in fp32 and returns bf16; it saves only the buffer);
        # GELU in/out bf16
        auto = 24 * S * d + 4 * S * I + 16 * S + 4 * h * S
        # once: the unfold output [T, C p^2, (t/p)^2] (a new tensor; patch_embedding.linear saves it, the pixel
        # values themselves are not saved), layernorm_pre and layernorm_post inputs [S, d] + mean/rstd; the class
        # token cat, the position add, the last-row slice and pixel shuffle's permute().contiguous() save nothing
        once = (2 * S * d + 4 * S) * 4 + pix * 4
        once_auto = (2 * S * d + 4 * S) * 4 + pix * 2  # the linear's bf16 cast of the unfold output
        # projector (vision_adapter + multi_modal_projector): fc1 input = the pixel-shuffle output [P, d/r^2 = I],
        # the two GELU inputs [P, Pi] / [P, Po], fc2 input (GELU 1 output, F.dropout p 0 saves nothing) [P, Pi],
        # linear_1 input (GELU 2 output) [P, Po]
        proj = (P * I + 2 * P * Pi + 2 * P * Po) * 4
        proj_auto = 2 * P * I + 4 * P * Pi + 4 * P * Po
        # bf16 weights (pixels given in bf16): everything at 2 B, LayerNorm stats too, but the logsumexp
        per_bf16 = (8 * S * d + 2 * S * I + 4 * S) * 2 + 4 * h * S
        once_bf16 = (2 * S * d + 4 * S) * 2 + pix * 2
        proj_bf16 = proj // 2
        # checkpointing: Llama4VisionEncoder calls its layers with keyword arguments only (hidden_state=...,
        # freqs_ci=...), so the checkpoint gets no positional tensor and saves nothing per layer (the input stays
        # alive in the checkpoint's closure, not as a saved tensor)
        per_gc, once_gc, proj_gc = 0, once, proj
        # LoRA q/v (vision q_proj, v_proj wrapped; fp32: q and v adapters share the norm output): LayerNorms as
        # trained 2 S d + 4 S, norm1 output S d, q, k, v, out 4 S d, two [S, r], the GELU input S I (fc1, fc2
        # frozen); layernorm_pre and block 0's input_layernorm save nothing (no grad before the first adapter),
        # layernorm_post saves: once = (S d + 2 S) - (S d + 2 S) = 0; projector frozen: the two GELU inputs
        per_qv = (7 * S * d + S * I + 4 * S + 2 * r * S) * 4 + 4 * h * S
        once_qv = 0
        proj_qv = (P * Pi + P * Po) * 4
        # LoRA all-linear (q, k, v, o, fc1, fc2 per block; patch_embedding.linear; vision_adapter fc1, fc2;
        # multi_modal_projector.linear_1): the patch-embedding adapter gives grad from the start, so everything
        # saves as in full training + the [rows, r] lora_A outputs: 6 r S per block, r (S - T) for the patch
        # embedding (patch rows, no CLS), 3 r P in the projector
        per_all = per + 6 * r * S * 4
        once_all = once + r * (S - T) * 4
        proj_all = proj + 3 * r * P * 4
    else:  # llava: CLIP, batch of N images of S_img = patches + CLS
        L_all = vc.num_hidden_layers
        fl = cfg.vision_feature_layer
        L = fl if fl >= 0 else L_all + 1 + fl  # layers whose output reaches the projector
        per = (8 * S * d + 3 * S * I + 4 * S) * 4 + 4 * h * S
        eager = [(8 * S * d + 3 * S * I + 4 * S + h * N * S_img * S_img) * 4] * L
        auto = 24 * S * d + 6 * S * I + 16 * S + 4 * h * S
        once = (S * d + 2 * S) * 4
        once_auto = once + N * vc.num_channels * H * W * 2
        P = N * lay["image_tokens"]
        proj = ((S if N == 1 else P) * d + 2 * P * Dt) * 4  # N = 1: the projector input is a view of the whole
        proj_auto = 2 * P * d + 4 * P * Dt  # block output (CLS row included); N > 1: a copy without CLS
        # bf16 weights: everything at 2 B (LayerNorm stats too) but the logsumexp; + the bf16 pixel copy
        per_bf16 = (8 * S * d + 3 * S * I + 4 * S) * 2 + 4 * h * S
        once_bf16 = (S * d + 2 * S) * 2 + N * vc.num_channels * H * W * 2
        proj_bf16 = proj // 2
        per_gc, once_gc, proj_gc = 4 * S * d, once, proj  # the counted layers' inputs; CLIP passes no mask
        # LoRA q/v (CLIP's q_proj, v_proj): LayerNorms as trained, norm1 output, q, k, v, out, two [S, r], the
        # quick_gelu's fc1 out and sigmoid (fc1, fc2 frozen); pre_layrnorm and the first block's norm1 save nothing
        # (no grad before the first adapter); projector frozen: the GELU input only
        per_qv = (7 * S * d + 2 * S * I + 4 * S + 2 * r * S) * 4 + 4 * h * S
        once_qv = -(S * d + 2 * S) * 4
        proj_qv = P * Dt * 4
        per_all = per + 6 * r * S * 4  # q, k, v, out_proj, fc1, fc2
        once_all = once_qv
        proj_all = proj + 2 * r * P * 4  # linear_1, linear_2
    return {"S": S, "layers_counted": L, "per_layer_sdpa_fp32": per, "per_layer_eager_fp32": eager,
            "per_layer_sdpa_autocast_bf16": auto, "once_fp32": once, "once_autocast_bf16": once_auto,
            "projector_fp32": proj, "projector_autocast_bf16": proj_auto,
            "per_layer_sdpa_bf16_weights": per_bf16, "once_sdpa_bf16_weights": once_bf16,
            "projector_sdpa_bf16_weights": proj_bf16,
            "per_layer_sdpa_fp32_gc": per_gc, "once_sdpa_fp32_gc": once_gc, "projector_sdpa_fp32_gc": proj_gc,
            "per_layer_sdpa_fp32_lora_qv": per_qv, "once_sdpa_fp32_lora_qv": once_qv,
            "projector_sdpa_fp32_lora_qv": proj_qv,
            "per_layer_sdpa_fp32_lora_all_linear": per_all, "once_sdpa_fp32_lora_all_linear": once_all,
            "projector_sdpa_fp32_lora_all_linear": proj_all}


# vision_formulas in symbols: bytes saved for backward by the vision tower + projector = L * per_layer + once +
# projector (eager: the sum of per-layer values). S = patches of all images, d, I, h, hd = d / h: vision hidden, MLP
# width, heads, head width; Sm = S / merge^2; P = N * image tokens; Dt = text hidden; r = LoRA rank 8; C, t, p:
# channels, temporal patch, patch; N C H W: pixel elements of a batch of N images; L = vision layers (llava: those
# up to vision_feature_layer); nd = deepstack mergers (qwen3_vl 1 here, qwen3_5 0).
_QWEN3 = {
    "sdpa_fp32": ["(11 S d + 2 S I + 4 S) * 4 + 4 h S",
                  "2 S hd * 4 (rotary cos/sin) + 48 S (pos-embed interpolation: int64 indices [S, 4], fp32 weights [S, 4, 1])",
                  "(4 S d + 2 S) * 4 + nd (3 S d + S/2) * 4"],
    "eager_fp32": ["(10 S d + 2 S I + 4 S + h * sum over images of S_img^2) * 4", "as sdpa_fp32", "as sdpa_fp32"],
    "sdpa_autocast_bf16": ["22 S d + 4 S I + 16 S + 4 h S", "once_fp32 + S C t p^2 * 2 (bf16 pixel copy)",
                           "8 S d + 8 S + nd (6 S d + 2 S)"],
    "sdpa_bf16_weights": ["(11 S d + 2 S I + 4 S) * 2 + 4 h S (fp32 logsumexp)",
                          "2 S hd * 4 (fp32 cos/sin) + 48 S + S C t p^2 * 2", "(4 S d + 2 S) * 2 + nd (3 S d + S/2) * 2"],
    "sdpa_fp32_gc": ["4 S d (the block's input only)", "48 S (cos/sin are checkpoint kwargs, not saved)",
                     "as sdpa_fp32"],
    "sdpa_fp32_lora_qv": ["0", "0", "0 (fused qkv: q/v LoRA wraps nothing in the ViT or the mergers, nothing there "
                                    "requires grad)"],
    "sdpa_fp32_lora_all_linear": ["per_layer sdpa_fp32 + 4 r S * 4", "2 S hd * 4 - (S d + 2 S) * 4",
                                  "projector sdpa_fp32 + (1 + nd) * 2 r Sm * 4"],
}
VISION_FORMULA_SYMBOLS = {
    "qwen2_5_vl": {
        "sdpa_fp32": ["(13 S d + 4 S I + 2 S) * 4 + 4 h S", "2 S hd * 4 + 2 Sm * 8 (window_index and its argsort)",
                      "(5 S d + S) * 4"],
        "eager_fp32": ["(12 S d + 4 S I + 2 S + h * sum over attention segments of len^2) * 4 (segments: windows, or "
                       "whole images in fullatt_block_indexes)", "as sdpa_fp32", "as sdpa_fp32"],
        "sdpa_autocast_bf16": ["32 S d + 8 S I + 8 S + 4 h S", "once_fp32 + S C t p^2 * 2", "12 S d + 4 S"],
        "sdpa_bf16_weights": ["(13 S d + 4 S I) * 2 + 2 * 2 S d (the RMSNorms' fp32 inputs) + 2 S * 4 (fp32 rsqrt) "
                              "+ 4 h S = 30 S d + 8 S I + 8 S + 4 h S",
                              "2 S hd * 4 + 2 Sm * 8 + S C t p^2 * 2", "12 S d + 4 S"],
        "sdpa_fp32_gc": ["4 S d", "2 Sm * 8", "as sdpa_fp32"],
        "sdpa_fp32_lora_qv": ["0", "0", "0 (fused qkv: nothing in the ViT or merger requires grad)"],
        "sdpa_fp32_lora_all_linear": ["(11 S d + 4 S I + 2 S + 5 r S) * 4 + 4 h S",
                                      "2 S hd * 4 + Sm * 8 - (S d + S) * 4", "(4 S d + S + 2 r Sm) * 4"],
    },
    "qwen3_vl": _QWEN3,
    "qwen3_5": _QWEN3,
    "mistral3": {
        "sdpa_fp32": ["(10 S d + 4 S I + 2 S) * 4 + 4 h S",
                      "2 S hd * 4 + (2 S d + S) * 4 (ln_pre) + S^2 * 4 (the block-diagonal mask)",
                      "(3 S d + S + Sm d + 2 Sm Dt) * 4"],
        "eager_fp32": ["(10 S d + 4 S I + 2 S + h S^2) * 4", "once_fp32 - S^2 * 4", "as sdpa_fp32"],
        "sdpa_autocast_bf16": ["34 S d + 8 S I + 8 S + 4 h S + 2 S^2", "2 S hd * 4 + 6 S d + 4 S + N C H W * 2",
                               "10 S d + 4 S + 2 Sm d + 4 Sm Dt"],
        "sdpa_bf16_weights": ["24 S d + 8 S I + 8 S + 4 h S", "2 S hd * 2 + 6 S d + 4 S + N C H W * 2 + 2 S^2",
                              "8 S d + 4 S + 2 Sm d + 4 Sm Dt"],
        "sdpa_fp32_gc": ["4 S d", "(2 S d + S) * 4 + S^2 * 4 (the mask is a positional layer argument, saved once)",
                         "as sdpa_fp32"],
        "sdpa_fp32_lora_qv": ["(7 S d + 3 S I + 2 S + 2 r S) * 4 + 4 h S", "2 S hd * 4 + S^2 * 4 - (S d + S) * 4",
                              "(S d + S + Sm Dt) * 4"],
        "sdpa_fp32_lora_all_linear": ["(8 S d + 4 S I + 2 S + 7 r S) * 4 + 4 h S",
                                      "2 S hd * 4 + S^2 * 4 - (S d + S) * 4",
                                      "(2 S d + S + Sm d + 2 Sm Dt + 3 r Sm) * 4"],
    },
    "llava": {
        "sdpa_fp32": ["(8 S d + 3 S I + 4 S) * 4 + 4 h S", "(S d + 2 S) * 4 (pre_layrnorm)",
                      "((N = 1 ? S : P) d + 2 P Dt) * 4"],
        "eager_fp32": ["(8 S d + 3 S I + 4 S + h N S_img^2) * 4", "as sdpa_fp32", "as sdpa_fp32"],
        "sdpa_autocast_bf16": ["24 S d + 6 S I + 16 S + 4 h S", "once_fp32 + N C H W * 2", "2 P d + 4 P Dt"],
        "sdpa_bf16_weights": ["(8 S d + 3 S I + 4 S) * 2 + 4 h S", "(S d + 2 S) * 2 + N C H W * 2",
                              "((N = 1 ? S : P) d + 2 P Dt) * 2"],
        "sdpa_fp32_gc": ["4 S d", "(S d + 2 S) * 4", "as sdpa_fp32"],
        "sdpa_fp32_lora_qv": ["(7 S d + 2 S I + 4 S + 2 r S) * 4 + 4 h S",
                              "-(S d + 2 S) * 4 (pre_layrnorm and the first norm1 save nothing)", "P Dt * 4"],
        "sdpa_fp32_lora_all_linear": ["per_layer sdpa_fp32 + 6 r S * 4", "-(S d + 2 S) * 4",
                                      "projector sdpa_fp32 + 2 r P * 4"],
    },
    "gemma3_mm": {
        "sdpa_fp32": ["(8 S d + 2 S I + 4 S) * 4 + 4 h S", "(S d + 2 S) * 4 (post_layernorm)",
                      "(S d + 3 P d + P + d) * 4 (avg_pool input, RMSNorm x / x_hat / rsqrt / 1 + w, matmul input)"],
        "eager_fp32": ["(8 S d + 2 S I + 4 S + h N S_img^2) * 4", "as sdpa_fp32", "as sdpa_fp32"],
        "sdpa_autocast_bf16": ["24 S d + 4 S I + 16 S + 4 h S", "(S d + 2 S) * 4 + N C H W * 2",
                               "4 S d + 10 P d + 4 P + 4 d"],
        "sdpa_bf16_weights": ["(8 S d + 2 S I + 4 S) * 2 + 4 h S", "(S d + 2 S) * 2 + N C H W * 2",
                              "2 S d + 10 P d + 4 P + 4 d"],
        "sdpa_fp32_gc": ["4 S d", "(S d + 2 S) * 4", "as sdpa_fp32"],
        "sdpa_fp32_lora_qv": ["(7 S d + S I + 4 S + 2 r S) * 4 + 4 h S",
                              "(S d + 2 S) * 4 - (S d + 2 S) * 4 = 0 (post_layernorm saves, the first norm1 not)",
                              "(S d + P d + P + d) * 4"],
        "sdpa_fp32_lora_all_linear": ["per_layer sdpa_fp32 + 6 r S * 4", "0", "(S d + P d + P + d) * 4 (no "
                                      "nn.Linear in the projector)"],
    },
}


VISION_FORMULA_SYMBOLS["llama4"] = {
    # T tiles of the batch, S = T * ((tile/patch)^2 + 1) encoder rows (CLS included), S_t = (tile/patch)^2 + 1,
    # P = T * (tile/patch)^2 * ratio^2 placeholders, I = intermediate_size = d / ratio^2, Pi / Po =
    # projector_input_dim / projector_output_dim, pix = T * C * tile^2 pixel elements
    "sdpa_fp32": ["(8 S d + 2 S I + 4 S) * 4 + 4 h S", "(2 S d + 4 S) * 4 (layernorm_pre, layernorm_post) + pix * 4 "
                  "(the unfold output patch_embedding.linear saves)", "(P I + 2 P Pi + 2 P Po) * 4"],
    "eager_fp32": ["(8 S d + 2 S I + 4 S + h T S_t^2) * 4", "as sdpa_fp32", "as sdpa_fp32"],
    "sdpa_autocast_bf16": ["24 S d + 4 S I + 16 S + 4 h S", "(2 S d + 4 S) * 4 + pix * 2", "2 P I + 4 P Pi + 4 P Po"],
    "sdpa_bf16_weights": ["(8 S d + 2 S I + 4 S) * 2 + 4 h S", "(2 S d + 4 S) * 2 + pix * 2",
                          "2 P I + 4 P Pi + 4 P Po"],
    "sdpa_fp32_gc": ["0 (the encoder passes hidden_state by keyword: the checkpoint saves no tensor)",
                     "as sdpa_fp32", "as sdpa_fp32"],
    "sdpa_fp32_lora_qv": ["(7 S d + S I + 4 S + 2 r S) * 4 + 4 h S",
                          "0 (layernorm_post (S d + 2 S) * 4 minus block 0's input_layernorm)", "(P Pi + P Po) * 4"],
    "sdpa_fp32_lora_all_linear": ["per_layer sdpa_fp32 + 6 r S * 4", "once sdpa_fp32 + r (S - T) * 4",
                                  "projector sdpa_fp32 + 3 r P * 4"],
}


# LoRA kinds whose adapters sit in the vision tower or projector, so that the image features require grad
LORA_FEATURES_TRAINED = {"qwen2_5_vl": ["all-linear"], "qwen3_vl": ["all-linear"], "qwen3_5": ["all-linear"],
                         "mistral3": ["qv", "all-linear"], "llava": ["qv", "all-linear"],
                         "gemma3_mm": ["qv", "all-linear"], "llama4": ["qv", "all-linear"]}


def llama4_k_norm(tc, S):
    """Llama 4 text layer 0 with q/v LoRA and image features that need grad: its k gets grad, so the L2 qk_norm (on
    RoPE layers when use_qk_norm) saves its fp32 input [S, kv, hd] and rsqrt [S, kv]; the complex rotary multiply
    saves only freqs_cis, already saved for q."""
    if not (tc.use_qk_norm and tc.no_rope_layers[0]):
        return 0
    return (S * tc.num_key_value_heads * tc.head_dim + S * tc.num_key_value_heads) * 4


LLAMA4_NOTES = {
    "model": "Llama4ForConditionalGeneration has no .model: vision_model, multi_modal_projector and language_model "
             "(a Llama4ForCausalLM with its lm_head) sit at the top level. transformers 5.24's forward ends with "
             "outputs.image_outputs, which the language model's output lacks: measure.load adds a forward hook "
             "that gives it image_outputs = None (no tensor involved)",
    "regions": "vision = vision_model minus its encoder layers and vision_adapter (unfold + linear patch embedding, "
               "class token, positional_embedding_vlm, layernorm_pre / layernorm_post, freqs_ci); vision.block.<i> = "
               "vision_model.model.layers[i]; projector = vision_model.vision_adapter (pixel shuffle + MLP2) + "
               "multi_modal_projector; language_model = language_model.model (lm_head and the loss are 'head')",
    "tokens": "Llama4Processor._prompt_split_image: <|image_start|>, for rh*rw > 1 rh rows of rw blocks of P_t "
              "<|patch|> with <|tile_x_separator|> between blocks and <|tile_y_separator|> after each row, then "
              "<|image|>, P_t <|patch|> (the global tile, or the only tile), <|image_end|>; P_t = (tile/patch)^2 / "
              "round(1/ratio^2); only <|patch|> (config.image_token_id) is replaced by features. Tiles: "
              "llama4_canvas (Llama4ImageProcessor's best fit, max_patches 16) + 1 global tile when rh*rw > 1",
    "pixels": "Llama4ImageProcessor returns bf16 pixel values and Llama4UnfoldConvolution does not cast: the "
              "measurements give fp32 pixels to fp32 weights (autocast included) and bf16 pixels to bf16 weights",
    "vision_inference": "model.get_image_features (vision tower + vision_adapter) then multi_modal_projector on the "
                        "flattened features, under no_grad",
    "lora_all_linear": "peft's all-linear wraps Llama4Router (an nn.Linear whose forward returns a tuple) and then "
                       "fails ('tuple' object has no attribute 'dtype', as measure.py records for llama4_text and "
                       "llama4): the all-linear LoRA here is LoraConfig(target_modules='all-linear', "
                       "exclude_modules=['router']); the vision side is unaffected",
    "gradient_checkpointing": "Llama4VisionEncoder calls its layers with keyword arguments only: the checkpoint "
                              "saves no tensor for a vision layer (per_layer 0); the input stays alive in the "
                              "checkpoint's closure",
}


def lm_difference(name, cfg, sc_name, S):
    """Language model + head bytes with images minus the same on text alone at the same total sequence S (input_ids
    [1, S], no pixels), by formula. Returns (bytes, explanation)."""
    tc = cfg.get_text_config(decoder=True)
    Dt = tc.hidden_size
    sc = SCENARIOS[sc_name]
    lora = sc.get("lora")
    terms, parts = 0, []
    features_grad = lora in LORA_FEATURES_TRAINED[name] if lora else True
    # masked_scatter(inputs_embeds, mask [1, S, 1] bool, features) keeps the mask when either side needs grad;
    # qwen3_vl's deepstack also index_puts the hidden states (which need grad after layer 0) with the same mask
    if features_grad or name == "qwen3_vl":
        terms += S
        parts.append(f"S = {S} (the bool placeholder mask [1, S, 1] that masked_scatter"
                     + (" / the deepstack index_put" if name == "qwen3_vl" else "") + " saves)")
    else:
        parts.append("0: the features need no grad (no adapter before the language model), so masked_scatter "
                     "saves no mask")
    if name == "gemma3_mm" and not sc.get("gc"):
        es = 2 if sc.get("autocast") or sc.get("dtype") == "bfloat16" else 4
        h, kv = tc.num_attention_heads, tc.num_key_value_heads
        hd = tc.head_dim
        nfull = sum(t == "full_attention" for t in tc.layer_types)
        x = nfull * (S * S * es + 2 * (h - kv) * S * hd * es)
        terms += x
        parts.append(f"+ full-attention layers {nfull} x (S^2 x {es} B, the token_type_ids block mask that "
                     f"text alone does not need, + 2 (h - kv) S hd x {es} B: with a mask SDPA gets K/V repeated "
                     f"to h = {h} heads instead of enable_gqa at kv = {kv}) = {x}")
    if lora and features_grad:
        plus_one = name in ("qwen3_5", "gemma3_mm")  # (1 + w) RMSNorms make 1 + w an activation
        x = S * Dt * 4 + S * 4 + (Dt * 4 if plus_one else 0)
        terms += x
        parts.append(f"+ the first decoder layer's input RMSNorm now sees an input with grad: x [S, Dt] fp32 + "
                     f"rsqrt [S, 1]" + (" + (1 + w) [Dt]" if plus_one else "") + f" = {x}")
        if name == "gemma3_mm" and lora == "qv":
            kv, hd = tc.num_key_value_heads, tc.head_dim
            x = (S * kv * hd + S * kv + hd) * 4
            terms += x
            parts.append(f"+ its k_norm (k_proj is frozen, so k needs grad only through the image features): "
                         f"x [S, kv, hd] + rsqrt [S, kv] + (1 + w) [hd], fp32 = {x}")
        if name == "llama4" and lora == "qv":
            x = llama4_k_norm(tc, S)
            terms += x
            parts.append(f"+ layer 0's qk_norm on k (Llama4TextL2Norm, no weight; k_proj is frozen, so k needs grad "
                         f"only through the image features): fp32 x [S, kv, hd] + rsqrt [S, kv] = {x}")
    if name == "gemma3_mm" and sc.get("gc"):
        parts.append("(the block mask and repeated K/V live inside the checkpointed layers: the mask is a keyword "
                     "argument the checkpoint holds, not a saved tensor)")
    return terms, " ".join(parts)


def inference_estimate(name, cfg, H, W, N):
    """Rough peak of the vision tower + projector in no_grad inference, above the weights (fp32, sdpa):
    the larger of the MLP stage (residual + normed input + the MLP's live intermediates) and the attention stage
    (residual, normed input, q/k/v, the rotary temporaries and the attention output ~ 12 S d), plus qwen3's
    position-embedding interpolation (a [S, 4, d] gather and its weighted copy)."""
    vc = cfg.vision_config
    d, I = vc.hidden_size, vc.intermediate_size
    S = N * image_layout(name, cfg, H, W)["vision_seq"]
    k = 3 if name in ("qwen2_5_vl", "mistral3") else 2  # SwiGLU keeps act(gate), up and their product
    est = max(2 * S * d + k * S * I, 12 * S * d)
    if name == "gemma3_mm":  # no rotary temporaries: residual, normed input, q, k, v, the attention output ~ 8 S d
        est = max(2 * S * d + k * S * I, 8 * S * d)
    if name in ("qwen3_vl", "qwen3_5"):
        est = max(est, 8 * S * d + S * d)
    if name == "mistral3":
        est += S * S  # the [1, 1, S, S] block mask, alive for the whole tower
    if name == "llama4":  # attention stage ~ 12 S d: residual, normed input, q, k, v, the complex rotary
        est = max(2 * S * d + k * S * I, 12 * S * d)  # products and real views of q and k, the output
    return est * 4


def formula_check(name, cfg, H, W, N, saved):
    f = vision_formulas(name, cfg, H, W, N)
    L = f["layers_counted"]
    pred = {
        "sdpa_fp32": L * f["per_layer_sdpa_fp32"] + f["once_fp32"] + f["projector_fp32"],
        "eager_fp32": sum(f["per_layer_eager_fp32"][:L]) + f["once_fp32"] - (f["S"] ** 2 * 4 if name == "mistral3"
                                                                            else 0) + f["projector_fp32"],
        "sdpa_autocast_bf16": L * f["per_layer_sdpa_autocast_bf16"] + f["once_autocast_bf16"]
        + f["projector_autocast_bf16"],
    }
    for k in NEW_FORMULA_SCENARIOS:
        pred[k] = L * f["per_layer_" + k] + f["once_" + k] + f["projector_" + k]
    out = {"S": f["S"], "layers_counted": L, "per_layer": {k: f["per_layer_" + k] for k in pred},
           "once": {k: f["once_" + k] for k in NEW_FORMULA_SCENARIOS},
           "projector": {k: f["projector_" + k] for k in NEW_FORMULA_SCENARIOS}, "checks": {}}
    for k, v in pred.items():
        meas = saved[k]["vision_tower_bytes"] + saved[k]["projector_bytes"]
        out["checks"][k] = {"formula": v, "measured": meas, "ratio": round(v / meas, 4) if meas else
                            (1.0 if v == 0 else None)}
        if meas == 0:
            out["checks"][k]["note"] = "nothing saved: ratio 1.0 means formula and measurement are both 0"
    return out


def write_preprocessor(name, cfg, folder):
    """The Qwen fixtures' preprocessor_config.json: the image processor's pixel limits as the measurements use
    them (images are not resized: min_pixels = (patch * merge)^2, no practical maximum), in the two spellings real
    checkpoints use (Qwen2.5-VL's min_pixels/max_pixels, Qwen3-VL's size.shortest_edge/longest_edge). nnlint reads it
    to resize --image-size as the processor would."""
    if name not in ("qwen2_5_vl", "qwen3_vl", "qwen3_5"):
        return
    vc = cfg.vision_config
    p, m, t = vc.patch_size, vc.spatial_merge_size, vc.temporal_patch_size
    lo, hi = (p * m) ** 2, 1 << 40
    common = {"patch_size": p, "merge_size": m, "temporal_patch_size": t}
    if name == "qwen2_5_vl":
        pre = {"image_processor_type": "Qwen2VLImageProcessor", "min_pixels": lo, "max_pixels": hi, **common}
    else:
        pre = {"image_processor_type": "Qwen2VLImageProcessorFast",
               "size": {"shortest_edge": lo, "longest_edge": hi}, **common}
    M.write_json(folder / "preprocessor_config.json", pre)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=str(M.DEFAULT_OUT))
    args = ap.parse_args()
    out = Path(args.out)
    names = list(SIZES) if not args.only else args.only.split(",")
    for name in names:
        t0 = time.time()
        spec = M.FAMILIES[name]
        folder = out / name
        cfg = M.AutoConfig.from_pretrained(folder, local_files_only=True)
        write_preprocessor(name, cfg, folder)
        res = {
            "family": name, "generated_by": "tools/llm/measure_images.py", "versions": M.VERSIONS, "device": "cpu",
            "seed": SEED, "model_class": cfg.architectures[0], "method": METHOD,
            "text_tokens": TEXT_TOKENS,
            "layout": f"input_ids [1, S]: {SPLIT} text tokens, the N images' tokens, {TEXT_TOKENS - SPLIT} text tokens",
            "vision": vision_dims(name, cfg),
            "points": [],
        }
        model = load(folder, spec, attn="sdpa").eval()
        for H, W in SIZES[name]:
            for N in NUM_IMAGES:
                _, lay = make_batch(name, cfg, H, W, N, spec)
                pt = {"image_size": [H, W], "images": N,
                      "per_image": {"image_tokens": lay["image_tokens"], "text_tokens": len(lay["ids"]),
                                    "vision_seq": lay["vision_seq"], "formula": lay["formula"]},
                      "check": check_tokens(model, name, cfg, spec, H, W, N),
                      "kv_cache": measure_kv(model, name, cfg, spec, H, W, N),
                      "vision_inference": measure_vision_inference(model, name, cfg, spec, H, W, N),
                      "saved": {}}
                for sc_name, sc in SCENARIOS.items():
                    pt["saved"][sc_name] = measure_saved(folder, name, cfg, spec, H, W, N, sc)
                pt["vision_formula"] = formula_check(name, cfg, H, W, N, pt["saved"])
                for k, c in pt["vision_formula"]["checks"].items():
                    assert c["formula"] == c["measured"], (name, H, W, N, k, c)
                est = inference_estimate(name, cfg, H, W, N)
                pt["vision_inference"].update(estimate=est, estimate_ratio=round(est / pt["vision_inference"]["peak_bytes"], 3))
                S = pt["kv_cache"]["seq"]
                pt["language_model_vs_text_only"] = {}
                for sc_name in TEXT_ONLY_SCENARIOS:
                    r = pt["saved"][sc_name]
                    with_images = r["language_model_bytes"] + r["head_bytes"]
                    t = measure_saved(folder, name, cfg, spec, H, W, N, SCENARIOS[sc_name], text_only_seq=S)
                    txt = t["language_model_bytes"] + t["head_bytes"]
                    f, why = lm_difference(name, cfg, sc_name, S)
                    pt["language_model_vs_text_only"][sc_name] = {
                        "with_images": with_images, "text_only_same_seq": txt, "difference": with_images - txt,
                        "difference_formula": f, "formula": why, "equals_seq_bytes": with_images - txt == S}
                    assert f == with_images - txt, (name, sc_name, f, with_images - txt)
                res["points"].append(pt)
        del model
        res["lora"] = {kind: lora_info(folder, name, spec, kind) for kind in ("qv", "all-linear")}
        res["gradient_checkpointing"] = gc_info(folder, name, spec)
        if name == "llama4":
            res["llama4_notes"] = LLAMA4_NOTES
        res["vision_formula_symbols"] = {
            "total": "L * per_layer + once + projector (bytes); notation in measure_images.VISION_FORMULA_SYMBOLS",
            **{k: dict(zip(["per_layer", "once", "projector"], v)) for k, v in VISION_FORMULA_SYMBOLS[name].items()}}
        M.write_json(folder / "images.json", res)
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
