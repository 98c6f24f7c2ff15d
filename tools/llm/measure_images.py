#!/usr/bin/env python3
"""Ground truth for `nnlint mem WRAPPER --images N`: image tokens and vision-tower memory of the multimodal wrappers.

For every wrapper fixture in testdata/llm/ (qwen2_5_vl, qwen3_vl, mistral3, llava; written by measure.py) this script
reloads the saved checkpoint on CPU and, for N images in {1, 2} per sequence at one or two image sizes valid for the
tiny configs, measures
  - the text-sequence tokens one image becomes: the placeholder tokens the model fills with image features (counted
    in input_ids, checked by running the model: one placeholder more or less is refused) and the extra special
    tokens the processor inserts around them (vision_start/end, [IMG_BREAK]/[IMG_END]);
  - the vision tower's sequence length, output shapes and the projected features per image;
  - the KV cache of a use_cache=True forward over T text tokens + the image tokens (bytes of the DynamicCache);
  - the bytes autograd saves for backward (saved_tensors_hooks, storages deduplicated as in measure.py), split into
    vision blocks, the rest of the vision tower, the projector/merger and the language model, for sdpa fp32,
    sdpa bf16 autocast, eager fp32 and sdpa fp32 with the vision tower frozen;
  - the CPU allocator peak of the vision tower + projector alone in inference (no_grad);
and writes testdata/llm/<wrapper>/images.json, each number with the formula it is checked against.

Run after measure.py (its build step empties the fixture folders). CPU only, about 40 s on 2 cores:
    python tools/llm/measure_images.py [--only qwen2_5_vl,llava] [--out DIR]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import math
import sys
import time
import weakref
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M  # noqa: E402  (sets the offline env, torch threads = 1, imports transformers)
import torch  # noqa: E402

SEED = 0
TEXT_TOKENS = 8  # T: text tokens around the images (4 before, T - 4 after)
SPLIT = 4
NUM_IMAGES = [1, 2]
# image sizes (height, width) valid for the tiny vision configs (patch 4, merge 2 where there is one)
SIZES = {
    "qwen2_5_vl": [(16, 32), (32, 32)],
    "qwen3_vl": [(16, 32), (32, 32)],
    "mistral3": [(8, 16), (16, 16)],  # <= vision_config.image_size 16 (Pixtral's rotary table size)
    "llava": [(16, 16)],  # CLIP: fixed vision_config.image_size
}
# ordinary text ids standing in for the special tokens that the model does not replace
PIXTRAL_BREAK, PIXTRAL_END = 125, 126
SCENARIOS = {
    "sdpa_fp32": dict(attn="sdpa", autocast=False, freeze_vision=False),
    "sdpa_autocast_bf16": dict(attn="sdpa", autocast=True, freeze_vision=False),
    "eager_fp32": dict(attn="eager", autocast=False, freeze_vision=False),
    "sdpa_fp32_frozen_vision": dict(attn="sdpa", autocast=False, freeze_vision=True),
}
METHOD = {
    "tokens": "image_tokens = placeholder ids the model replaces with image features (image_token_id); text_tokens "
              "= what one image adds to the text sequence, placeholders + the special tokens the processor adds "
              "(qwen: <|vision_start|> + <|vision_end|> from the chat template; pixtral: one [IMG_BREAK] per row "
              "with the last replaced by [IMG_END]). Checked by running the model: input_ids with one placeholder "
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


def image_layout(name, cfg, H, W):
    """Per image: placeholders, text-sequence tokens (as a list of ids), vision sequence, formula."""
    vc = cfg.vision_config
    if name in ("qwen2_5_vl", "qwen3_vl"):
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
    if name in ("qwen2_5_vl", "qwen3_vl"):
        rows, dim = lay["pixel_shape_per_image"]
        inputs["pixel_values"] = torch.randn(N * rows, dim, generator=gp)
        inputs["image_grid_thw"] = torch.tensor([lay["grid_thw"]] * N)
        mm = (input_ids == cfg.image_token_id).int()
        inputs["mm_token_type_ids"] = mm
    elif name == "mistral3":
        inputs["pixel_values"] = torch.randn(N, *lay["pixel_shape_per_image"], generator=gp)
        inputs["image_sizes"] = torch.tensor([[H, W]] * N)
    else:
        inputs["pixel_values"] = torch.randn(N, *lay["pixel_shape_per_image"], generator=gp)
    return inputs, lay


def pixel_keys(inputs):
    """The get_image_features arguments: pixel_values and image_grid_thw / image_sizes."""
    return {k: v for k, v in inputs.items() if k not in ("input_ids", "mm_token_type_ids")}


# ---------------------------------------------------------------------------------------------------
# module regions for attributing saved tensors
# ---------------------------------------------------------------------------------------------------
def regions(model, name):
    core = model.model
    if name in ("qwen2_5_vl", "qwen3_vl"):
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
    if name == "qwen2_5_vl":
        return dict(layers=vc.depth, hidden=vc.hidden_size, heads=vc.num_heads, intermediate=vc.intermediate_size,
                    mlp="SwiGLU (gate, up, down; bias)", norm="RMSNorm", qkv="fused, bias",
                    window_size=vc.window_size, fullatt_block_indexes=vc.fullatt_block_indexes,
                    patch_size=vc.patch_size, spatial_merge_size=vc.spatial_merge_size,
                    window_patches=(vc.window_size // vc.patch_size) ** 2)
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
        feats = model.model.get_image_features(**pixel_keys(inputs), return_dict=True)
        pooled = feats.pooler_output
        pooled = list(pooled) if isinstance(pooled, (list, tuple)) else [pooled]
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
    assert S == TEXT_TOKENS + N * len(lay["ids"])
    return res


def measure_saved(folder, name, cfg, spec, H, W, N, sc, text_only_seq=None):
    torch.manual_seed(SEED)
    model = load(folder, spec, attn=sc["attn"])
    model.train()
    rs = RegionStack(model, name)
    if sc["freeze_vision"]:
        for p in rs.vision.parameters():
            p.requires_grad_(False)
    if text_only_seq:  # the same model on text alone, as long as the sequence with images
        g = torch.Generator().manual_seed(3)
        inputs = {"input_ids": torch.randint(3, spec.get("id_high", 124), (1, text_only_seq), generator=g)}
    else:
        inputs, lay = make_batch(name, cfg, H, W, N, spec)
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
            if region.startswith("vision"):
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
            feats = model.model.get_image_features(**px, return_dict=True)
    del feats
    return {"peak_bytes": tr.peak, "net_bytes": tr.net}


# ---------------------------------------------------------------------------------------------------
# formulas (what nnlint should compute), checked against the measurements
# ---------------------------------------------------------------------------------------------------
def vision_formulas(name, cfg, H, W, N):
    """What nnlint should compute for the vision tower + projector: bytes saved for backward, by formula.

    S = patches of all N images together (the packed sequence of qwen/pixtral, N * (S_img) for CLIP's batch),
    d = vision hidden, I = vision MLP width, h = vision heads, hd = d / h. Returns per-layer lists and extras
    for fp32 sdpa, fp32 eager and sdpa bf16 autocast (see notes-images.md for the derivation)."""
    vc = cfg.vision_config
    d, I = vc.hidden_size, vc.intermediate_size
    h = getattr(vc, "num_heads", None) or vc.num_attention_heads
    hd = d // h
    tc = cfg.get_text_config(decoder=True)
    Dt = tc.hidden_size
    lay = image_layout(name, cfg, H, W)
    S_img = lay["vision_seq"]
    S = N * S_img
    if name in ("qwen2_5_vl", "qwen3_vl"):
        from transformers.vision_utils import get_vision_window_index
        m = vc.spatial_merge_size
        grid = torch.tensor([lay["grid_thw"]] * N)
        full = [S_img] * N
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
        else:
            nd = len(vc.deepstack_visual_indexes)
            per = (11 * S * d + 2 * S * I + 4 * S) * 4 + 4 * h * S
            eager = [(10 * S * d + 2 * S * I + 4 * S + h * sum(x * x for x in full)) * 4] * vc.depth
            auto = 22 * S * d + 4 * S * I + 16 * S + 4 * h * S
            once = 2 * S * hd * 4 + 48 * S
            once_auto = once + S * vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2 * 2
            # a deepstack merger's LayerNorm input is the block output that the next block's norm1 saves too
            proj = (4 * S * d + 2 * S) * 4 + nd * (3 * S * d + S // 2) * 4
            proj_auto = 8 * S * d + 8 * S + nd * (6 * S * d + 2 * S)
            L = vc.depth
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
    return {"S": S, "layers_counted": L, "per_layer_sdpa_fp32": per, "per_layer_eager_fp32": eager,
            "per_layer_sdpa_autocast_bf16": auto, "once_fp32": once, "once_autocast_bf16": once_auto,
            "projector_fp32": proj, "projector_autocast_bf16": proj_auto}


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
    if name == "qwen3_vl":
        est = max(est, 8 * S * d + S * d)
    if name == "mistral3":
        est += S * S  # the [1, 1, S, S] block mask, alive for the whole tower
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
    out = {"S": f["S"], "layers_counted": L, "per_layer": {k: f["per_layer_" + k] for k in pred}, "checks": {}}
    for k, v in pred.items():
        meas = saved[k]["vision_tower_bytes"] + saved[k]["projector_bytes"]
        out["checks"][k] = {"formula": v, "measured": meas, "ratio": round(v / meas, 4)}
    return out


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
                est = inference_estimate(name, cfg, H, W, N)
                pt["vision_inference"].update(estimate=est, estimate_ratio=round(est / pt["vision_inference"]["peak_bytes"], 3))
                S = pt["kv_cache"]["seq"]
                pt["language_model_vs_text_only"] = {}
                for sc_name in ("sdpa_fp32", "sdpa_autocast_bf16"):
                    r = pt["saved"][sc_name]
                    with_images = r["language_model_bytes"] + r["head_bytes"]
                    t = measure_saved(folder, name, cfg, spec, H, W, N, SCENARIOS[sc_name], text_only_seq=S)
                    txt = t["language_model_bytes"] + t["head_bytes"]
                    pt["language_model_vs_text_only"][sc_name] = {
                        "with_images": with_images, "text_only_same_seq": txt, "difference": with_images - txt}
                res["points"].append(pt)
        del model
        M.write_json(folder / "images.json", res)
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
