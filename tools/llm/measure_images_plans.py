#!/usr/bin/env python3
"""Ground truth for the settings `nnlint fit` plans with images: what autograd saves with images fed, for bf16
weights / autocast under gradient checkpointing and bf16 (and fp32) LoRA with and without checkpointing.

measure_images.py measures the multimodal wrappers (qwen2_5_vl, qwen3_vl, qwen3_5, mistral3, llava, gemma3_mm,
llama4) for
sdpa/eager fp32, autocast, bf16 weights, fp32 checkpointing and fp32 LoRA. This script reuses its inputs
(make_batch), its measurement (measure_saved: saved_tensors_hooks, storages deduplicated, attributed to vision
blocks / the rest of the vision tower / projector / language model / head) and its points (image sizes x image
counts), for the settings of PLAN_SCENARIOS:
  - sdpa_bf16_gc: weights loaded in bf16 (no autocast), model.gradient_checkpointing_enable() (transformers'
    default: torch.utils.checkpoint with use_reentrant=False);
  - sdpa_autocast_bf16_gc: fp32 weights, torch.autocast("cpu", bfloat16), checkpointing;
  - sdpa_bf16_lora_qv / sdpa_bf16_lora_all_linear: bf16 base weights, peft LoRA r 8, alpha 16, dropout 0 configured
    as measure_images.apply_lora (q_proj/v_proj wherever they are, or all-linear), peft's defaults otherwise
    (autocast_adapter_dtype=True: the adapters are fp32);
  - sdpa_bf16_lora_qv_gc / sdpa_bf16_lora_all_linear_gc / sdpa_fp32_lora_qv_gc: the same with checkpointing,
    enabled as measure_images.measure_saved does (gradient_checkpointing_enable() on the base model, then
    get_peft_model). model.enable_input_require_grads() is not called here: transformers 5.24's
    gradient_checkpointing_enable() calls it by itself (modeling_utils._activation_checkpointing_enable: when
    main_input_name == "input_ids", which every wrapper has) and peft's PeftModel.__init__ calls it again
    (prepare_model_for_gradient_checkpointing, when model.is_gradient_checkpointing); setup_info records the hooks
    it installs: on every PreTrainedModel's get_input_embeddings(), the vision tower's patch embedding included
    where the vision model exposes one (qwen2_5_vl, mistral3, llava, gemma3_mm; not qwen3_vl / qwen3_5, whose
    vision get_input_embeddings raises NotImplementedError).
For every point and setting: the regions' bytes, the vision tower + projector bytes against the closed form of
plan_vision_formulas (L * per_layer + once + projector, measure_images' notation, PLAN_FORMULA_SYMBOLS), and the
language model + head with images minus the same model on text alone at the same sequence length against
lm_difference_plans. Every ratio must be exactly 1.0 (asserted). Writes testdata/llm/<wrapper>/images_plans.json.

Run after measure.py (it empties the fixture folders). CPU only, about 1 minute on 1 core:
    python tools/llm/measure_images_plans.py [--only qwen2_5_vl,llava] [--out DIR]
"""
from __future__ import annotations

import argparse
import collections
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure as M  # noqa: E402  (offline env, torch threads = 1)
import measure_images as MI  # noqa: E402
import torch  # noqa: E402

R = MI.LORA_R
PLAN_SCENARIOS = {
    "sdpa_bf16_gc": dict(attn="sdpa", autocast=False, freeze_vision=False, dtype="bfloat16", gc=True),
    "sdpa_autocast_bf16_gc": dict(attn="sdpa", autocast=True, freeze_vision=False, gc=True),
    "sdpa_bf16_lora_qv": dict(attn="sdpa", autocast=False, freeze_vision=False, dtype="bfloat16", lora="qv"),
    "sdpa_bf16_lora_all_linear": dict(attn="sdpa", autocast=False, freeze_vision=False, dtype="bfloat16",
                                      lora="all-linear"),
    "sdpa_bf16_lora_qv_gc": dict(attn="sdpa", autocast=False, freeze_vision=False, dtype="bfloat16", lora="qv",
                                 gc=True),
    "sdpa_bf16_lora_all_linear_gc": dict(attn="sdpa", autocast=False, freeze_vision=False, dtype="bfloat16",
                                         lora="all-linear", gc=True),
    "sdpa_fp32_lora_qv_gc": dict(attn="sdpa", autocast=False, freeze_vision=False, lora="qv", gc=True),
}
METHOD = {
    "saved": "measure_images.measure_saved (one training forward, use_cache=False, labels with placeholders -100; "
             "saved_tensors_hooks; storages by data_ptr, counted once at nbytes(), attributed to the region that "
             "packed them first; only what backward can reach). Under checkpointing a checkpointed layer's saved "
             "tensors are the positional tensor arguments torch.utils.checkpoint stores (_NoopSaveInputs), in "
             "whatever dtype the layer gets them; keyword arguments (cos/sin, cu_seqlens, masks passed by name) are "
             "held by the checkpoint's closure and are not saved tensors.",
    "setup": "as measure_images.measure_saved: M.load(dtype bf16 for the bf16 settings), model.train(), "
             "model.gradient_checkpointing_enable() without kwargs, then peft.get_peft_model(LoraConfig(r=8, "
             "lora_alpha=16, lora_dropout=0, target_modules=q_proj/v_proj or 'all-linear', task_type None)) with "
             "peft's defaults (autocast_adapter_dtype=True). No explicit enable_input_require_grads(): see "
             "setup_info, which also builds the other order (get_peft_model first, then "
             "PeftModel.gradient_checkpointing_enable(), what Trainer does) and shows the same hooks.",
    "formulas": "vision tower + projector = L * per_layer + once + projector (plan_vision_formulas); language model "
                "+ head with images - text alone at the same S = lm_difference_plans. Symbols: "
                "measure_images.VISION_FORMULA_SYMBOLS (S patches of all images, d, I, h, hd vision hidden / MLP "
                "width / heads / head width, Sm = S / merge^2, P = N * image tokens, Dt text hidden, r = 8, "
                "C t p channels / temporal patch / patch, N C H W pixel elements of the batch, L vision layers "
                "counted, nd deepstack mergers); for the language model S is the text sequence (T + N * text tokens "
                "per image) and h_t, kv_t, hd_t, nfull are the text heads, KV heads, head dim and full-attention "
                "layers.",
}


# ---------------------------------------------------------------------------------------------------
# formulas
# ---------------------------------------------------------------------------------------------------
def dims(name, cfg, H, W, N):
    vc = cfg.vision_config
    d, I = vc.hidden_size, vc.intermediate_size
    h = getattr(vc, "num_heads", None) or vc.num_attention_heads
    lay = MI.image_layout(name, cfg, H, W)
    S = N * lay["vision_seq"]
    out = dict(d=d, I=I, h=h, hd=d // h, S=S, Dt=cfg.get_text_config(decoder=True).hidden_size,
               P=N * lay["image_tokens"], r=R)
    if name in ("qwen2_5_vl", "qwen3_vl", "qwen3_5"):
        m = vc.spatial_merge_size
        out.update(L=vc.depth, Sm=S // (m * m), px=S * vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2,
                   nd=len(getattr(vc, "deepstack_visual_indexes", None) or []))
    elif name == "mistral3":
        m = cfg.spatial_merge_size
        out.update(L=vc.num_hidden_layers, Sm=S // (m * m), px=N * vc.num_channels * H * W)
    elif name == "gemma3_mm":
        out.update(L=vc.num_hidden_layers, px=N * vc.num_channels * H * W)
    elif name == "llama4":  # T tiles of the batch; px = pixel elements of all tiles
        T = N * lay["tiles"]
        out.update(L=vc.num_hidden_layers, T=T, px=T * vc.num_channels * vc.image_size ** 2,
                   Pi=vc.projector_input_dim, Po=vc.projector_output_dim)
    else:  # llava: the layers up to vision_feature_layer
        fl = cfg.vision_feature_layer
        out.update(L=fl if fl >= 0 else vc.num_hidden_layers + 1 + fl, px=N * vc.num_channels * H * W)
    return out


def plan_vision_formulas(name, cfg, H, W, N):
    """{scenario: (per_layer, once, projector)} in bytes; total = L * per_layer + once + projector.

    Conventions shared with measure_images.vision_formulas: a storage two regions save is counted once, in the
    per-layer term when it is a block's input (qwen3_vl: the deepstack merger's LayerNorm input is the next block's
    input, so a deepstack merger's term leaves it out, even though measure_saved finds it in the projector, which
    packs it first); the first block's missing norm1 saves and the rotary cos/sin, which measure_saved finds in
    block 0, are in `once`."""
    D = dims(name, cfg, H, W, N)
    S, d, I, h, hd, r, Dt, L = D["S"], D["d"], D["I"], D["h"], D["hd"], D["r"], D["Dt"], D["L"]
    f = {}
    if name == "qwen2_5_vl":
        Sm, px = D["Sm"], D["px"]
        win = 2 * Sm * 8  # window_index [Sm] and its argsort, int64 (the reverse only when the input has no grad)
        # bf16 weights + checkpointing: a block keeps its input [S, d] bf16; the conv3d keeps its bf16 pixel copy
        # [S, C t p p]; merger: RMSNorm x fp32 4 S d + rsqrt 4 S + x_hat bf16 2 S d, mlp.0 input, GELU input,
        # mlp.2 input 3 x 2 S d (measure_images' sdpa_bf16_weights projector)
        f["sdpa_bf16_gc"] = (2 * S * d, px * 2 + win, 12 * S * d + 4 * S)
        # autocast: the ViT's residual stream is bf16 (conv3d output bf16, the RMSNorm returns weight * x.to(bf16)
        # = ... the blocks add bf16 outputs): the kept inputs are bf16 too; projector = measure_images' autocast
        f["sdpa_autocast_bf16_gc"] = (2 * S * d, px * 2 + win, 12 * S * d + 4 * S)
        # q/v LoRA without checkpointing: the ViT has a fused qkv, nothing in the vision tower requires grad
        f["sdpa_bf16_lora_qv"] = (0, 0, 0)
        # all-linear (qkv, proj, gate, up, down): peft casts each adapter's input to the fp32 adapter dtype, a copy
        # per adapter (qkv, proj, gate, up: 4 x 4 S d; down: 4 S I); frozen bf16 linears save nothing; qkv output
        # storage 6 S d (v is a view of it), rotated q and k and the output 3 x 2 S d, logsumexp 4 h S; SwiGLU
        # silu input + mul operands 3 x 2 S I; two RMSNorms: fp32 x 2 x 4 S d, rsqrt 2 x 4 S (frozen weight: no
        # x_hat); 5 lora_A outputs [S, r] fp32. once: fp32 cos/sin, the reverse window index, block 0's norm1
        # saves nothing (its input has no grad)
        f["sdpa_bf16_lora_all_linear"] = (36 * S * d + 10 * S * I + 8 * S + 20 * r * S + 4 * h * S,
                                          2 * S * hd * 4 + Sm * 8 - (4 * S * d + 4 * S),
                                          14 * S * d + 4 * S + 8 * r * Sm)
        # + checkpointing: the patch embedding's require-grads hook gives the ViT input grad: each block keeps its
        # bf16 input, both window indices are saved, and the frozen merger saves for the input gradient: RMSNorm x
        # fp32 + rsqrt, GELU input bf16 [Sm, 4d] (= 2 S d)
        f["sdpa_bf16_lora_qv_gc"] = (2 * S * d, win, 6 * S * d + 4 * S)
        f["sdpa_bf16_lora_all_linear_gc"] = (2 * S * d, win, 14 * S * d + 4 * S + 8 * r * Sm)
        f["sdpa_fp32_lora_qv_gc"] = (4 * S * d, win, 8 * S * d + 4 * S)
    elif name in ("qwen3_vl", "qwen3_5"):
        Sm, px, nd = D["Sm"], D["px"], D["nd"]
        pos = 48 * S  # position-embedding interpolation: int64 indices [S, 4] + fp32 weights [S, 4, 1]
        # merger LayerNorm on [S, d] + mlp on [Sm, 4d]; deepstack mergers (postshuffle LayerNorm on [Sm, 4d], its
        # input left out, see the docstring)
        f["sdpa_bf16_gc"] = (2 * S * d, px * 2 + pos, 8 * S * d + 4 * S + nd * (6 * S * d + S))
        # autocast: bf16 residual stream in the ViT (the kept inputs are bf16); LayerNorm stats fp32
        f["sdpa_autocast_bf16_gc"] = (2 * S * d, px * 2 + pos, 8 * S * d + 8 * S + nd * (6 * S * d + 2 * S))
        # fused qkv, no q/v in the mergers, and no require-grads hook on this vision model (its
        # get_input_embeddings raises NotImplementedError): nothing saved, with or without checkpointing
        f["sdpa_bf16_lora_qv"] = (0, 0, 0)
        f["sdpa_bf16_lora_qv_gc"] = (0, 0, 0)
        f["sdpa_fp32_lora_qv_gc"] = (0, 0, 0)
        # all-linear (qkv, proj, fc1, fc2): fp32 adapter-input copies 3 x 4 S d + 4 S I; qkv storage 6 S d, rotated
        # q, k, output 3 x 2 S d, logsumexp 4 h S; GELU input 2 S I; two LayerNorms: bf16 inputs 2 x 2 S d, bf16
        # mean/rstd 4 x 2 S; 4 lora_A outputs. once: fp32 cos/sin, block 0's norm1 saves nothing, pos_embed frozen
        # (the interpolation saves nothing). Mergers: LayerNorm input 2 S d (main only) + stats, fc1/fc2 adapter
        # inputs 2 x 4 S d, GELU input 2 S d, 2 lora_A outputs [Sm, r]
        proj_all = 12 * S * d + 4 * S + 8 * r * Sm + nd * (10 * S * d + S + 8 * r * Sm)
        f["sdpa_bf16_lora_all_linear"] = (28 * S * d + 6 * S * I + 8 * S + 16 * r * S + 4 * h * S,
                                          2 * S * hd * 4 - (2 * S * d + 4 * S), proj_all)
        # + checkpointing: the blocks keep their bf16 input (positional, saved whether or not it needs grad)
        f["sdpa_bf16_lora_all_linear_gc"] = (2 * S * d, 0, proj_all)
    elif name == "mistral3":
        Sm, px = D["Sm"], D["px"]
        # checkpointing: each layer keeps its input and the positional block mask [1, 1, S, S] (one storage, in
        # the model dtype); ln_pre (fp32 x 4 S d, x_hat 2 S d, rsqrt 4 S) and the bf16 pixel copy stay
        f["sdpa_bf16_gc"] = (2 * S * d, 6 * S * d + 4 * S + 2 * S * S + px * 2,
                             8 * S * d + 4 * S + 2 * Sm * d + 4 * Sm * Dt)
        # autocast: ln_pre returns fp32 (weight fp32 * x_hat): fp32 stream, fp32 inputs and fp32 mask kept
        f["sdpa_autocast_bf16_gc"] = (4 * S * d, 6 * S * d + 4 * S + 4 * S * S + px * 2,
                                      10 * S * d + 4 * S + 2 * Sm * d + 4 * Sm * Dt)
        # q/v LoRA (pixtral's q_proj, v_proj): two RMSNorms fp32 x + rsqrt (8 S d + 8 S), two fp32 adapter-input
        # copies 8 S d, q/k/v/out bf16 8 S d, logsumexp, SwiGLU gate out / act out / up out 6 S I, 2 lora_A outputs;
        # once: bf16 cos/sin 2 S hd * 2 and the bf16 block mask 2 S^2 (sdpa's attn_mask), block 0's attention
        # norm saves nothing; projector frozen: its RMSNorm x + rsqrt, GELU input bf16 [Sm, Dt]
        once_lora = 2 * S * hd * 2 + 2 * S * S - (4 * S * d + 4 * S)
        f["sdpa_bf16_lora_qv"] = (24 * S * d + 6 * S * I + 8 * S + 8 * r * S + 4 * h * S, once_lora,
                                  4 * S * d + 4 * S + 2 * Sm * Dt)
        # all-linear (q, k, v, o, gate, up, down): fp32 adapter-input copies 6 x 4 S d + 4 S I, 7 lora_A outputs;
        # projector: merging_layer / linear_1 / linear_2 adapter inputs 4 S d + 4 Sm d + 4 Sm Dt, GELU input
        # bf16 2 Sm Dt, RMSNorm x + rsqrt, 3 lora_A outputs
        proj_all = 8 * S * d + 4 * S + 4 * Sm * d + 6 * Sm * Dt + 12 * r * Sm
        f["sdpa_bf16_lora_all_linear"] = (40 * S * d + 10 * S * I + 8 * S + 28 * r * S + 4 * h * S, once_lora,
                                          proj_all)
        # + checkpointing: the patch_conv require-grads hook: ln_pre saves x fp32 + rsqrt (frozen weight: no
        # x_hat); the layers keep their input and the mask
        f["sdpa_bf16_lora_qv_gc"] = (2 * S * d, 4 * S * d + 4 * S + 2 * S * S, 4 * S * d + 4 * S + 2 * Sm * Dt)
        f["sdpa_bf16_lora_all_linear_gc"] = (2 * S * d, 4 * S * d + 4 * S + 2 * S * S, proj_all)
        f["sdpa_fp32_lora_qv_gc"] = (4 * S * d, 4 * S * d + 4 * S + 4 * S * S, 4 * S * d + 4 * S + 4 * Sm * Dt)
    elif name == "gemma3_mm":
        P, px = D["P"], D["px"]
        # checkpointing: inputs kept; post_layernorm (input + mean/rstd) and the pixel copy stay; projector as
        # measure_images' bf16 / autocast: avg_pool input, Gemma3RMSNorm fp32 x, x_hat, rsqrt, 1 + w, matmul input
        f["sdpa_bf16_gc"] = (2 * S * d, 2 * S * d + 4 * S + px * 2, 2 * S * d + 10 * P * d + 4 * P + 4 * d)
        f["sdpa_autocast_bf16_gc"] = (4 * S * d, 4 * S * d + 8 * S + px * 2, 4 * S * d + 10 * P * d + 4 * P + 4 * d)
        # q/v LoRA (SigLIP's q_proj, v_proj): LayerNorms bf16 inputs 2 x 2 S d + stats 8 S, norm1 output copies
        # for the 2 adapters 8 S d, q/k/v/out 8 S d, logsumexp, GELU input 2 S I (fc1, fc2 frozen), 2 lora_A
        # outputs; once: post_layernorm saves (2 S d + 4 S), block 0's norm1 not (-(2 S d + 4 S)) = 0; projector
        # frozen: avg_pool input bf16, RMSNorm fp32 x, rsqrt, 1 + w (no x_hat, no matmul input)
        proj_lora = 2 * S * d + 4 * P * d + 4 * P + 4 * d
        f["sdpa_bf16_lora_qv"] = (20 * S * d + 2 * S * I + 8 * S + 8 * r * S + 4 * h * S, 0, proj_lora)
        # all-linear (q, k, v, out_proj, fc1, fc2): 5 x 4 S d + 4 S I adapter-input copies, 6 lora_A outputs; the
        # projector has no nn.Linear
        f["sdpa_bf16_lora_all_linear"] = (32 * S * d + 6 * S * I + 8 * S + 24 * r * S + 4 * h * S, 0, proj_lora)
        # + checkpointing: the blocks keep their input, post_layernorm saves
        f["sdpa_bf16_lora_qv_gc"] = (2 * S * d, 2 * S * d + 4 * S, proj_lora)
        f["sdpa_bf16_lora_all_linear_gc"] = (2 * S * d, 2 * S * d + 4 * S, proj_lora)
        f["sdpa_fp32_lora_qv_gc"] = (4 * S * d, 4 * S * d + 8 * S, 4 * S * d + 4 * P * d + 4 * P + 4 * d)
    elif name == "llama4":
        P, px, T, Pi, Po = D["P"], D["px"], D["T"], D["Pi"], D["Po"]
        ln2, ln4 = (2 * S * d + 4 * S) * 2, (2 * S * d + 4 * S) * 4  # layernorm_pre + layernorm_post, bf16 / fp32
        # checkpointing: the vision layers are called with keyword arguments only, so the checkpoint saves no
        # tensor for them; once and projector as measure_images' bf16 weights / autocast (bf16 unfold output or
        # its bf16 cast, pix * 2)
        proj_bf16 = 2 * P * I + 4 * P * Pi + 4 * P * Po
        f["sdpa_bf16_gc"] = (0, ln2 + px * 2, proj_bf16)
        f["sdpa_autocast_bf16_gc"] = (0, ln4 + px * 2, proj_bf16)
        # q/v LoRA: LayerNorm bf16 inputs 2 x 2 S d + stats 8 S, fp32 adapter-input copies of the norm output for
        # q and v 8 S d, q/k/v/out bf16 8 S d, GELU input bf16 2 S I, logsumexp, 2 lora_A outputs; once:
        # layernorm_post saves, block 0's input_layernorm not: 0; projector frozen: the two GELU inputs bf16
        f["sdpa_bf16_lora_qv"] = (20 * S * d + 2 * S * I + 8 * S + 8 * r * S + 4 * h * S, 0, 2 * P * Pi + 2 * P * Po)
        # all-linear: fp32 adapter-input copies 5 x 4 S d (q, k, v, o, fc1) + 4 S I (fc2), 6 lora_A outputs;
        # once: the fp32 copy of the bf16 unfold output for the patch-embedding adapter (4 pix), both LayerNorms
        # (bf16), its lora_A output [S - T, r]; projector: fp32 adapter-input copies 4 P I + 4 P Pi + 4 P Po, GELU
        # inputs bf16 2 P Pi + 2 P Po, 3 lora_A outputs
        once_all = px * 4 + ln2 + 4 * r * (S - T)
        proj_all = 4 * P * I + 6 * P * Pi + 6 * P * Po + 12 * r * P
        f["sdpa_bf16_lora_all_linear"] = (32 * S * d + 6 * S * I + 8 * S + 24 * r * S + 4 * h * S, once_all,
                                          proj_all)
        # + checkpointing: the patch_embedding require-grads hook: layernorm_pre saves too
        f["sdpa_bf16_lora_qv_gc"] = (0, ln2, 2 * P * Pi + 2 * P * Po)
        f["sdpa_bf16_lora_all_linear_gc"] = (0, once_all, proj_all)
        f["sdpa_fp32_lora_qv_gc"] = (0, ln4, (P * Pi + P * Po) * 4)
    else:  # llava (CLIP, N images of patches + CLS; L = layers up to vision_feature_layer)
        P, px = D["P"], D["px"]
        rows = S if N == 1 else P  # N = 1: the projector input is a view of the whole block output (CLS included)
        f["sdpa_bf16_gc"] = (2 * S * d, 2 * S * d + 4 * S + px * 2, (rows * d + 2 * P * Dt) * 2)
        # autocast: fp32 stream (pre_layrnorm runs in fp32), linear_1 casts its [P, d] input to bf16
        f["sdpa_autocast_bf16_gc"] = (4 * S * d, 4 * S * d + 8 * S + px * 2, 2 * P * d + 4 * P * Dt)
        # q/v LoRA (CLIP's q_proj, v_proj): LayerNorms 2 x 2 S d + stats 8 S, 2 adapter-input copies 8 S d, q/k/v/
        # out 8 S d, quick_gelu's fc1 output and sigmoid 4 S I, logsumexp, 2 lora_A outputs; pre_layrnorm and
        # block 0's norm1 save nothing; projector frozen: GELU input bf16 [P, Dt]
        f["sdpa_bf16_lora_qv"] = (20 * S * d + 4 * S * I + 8 * S + 8 * r * S + 4 * h * S, -(2 * S * d + 4 * S),
                                  2 * P * Dt)
        # all-linear (q, k, v, out_proj, fc1, fc2): 5 x 4 S d + 4 S I adapter-input copies, 6 lora_A outputs;
        # projector: linear_1 / linear_2 adapter-input copies 4 P d + 4 P Dt, GELU input 2 P Dt, 2 lora_A outputs
        proj_all = 4 * P * d + 6 * P * Dt + 8 * r * P
        f["sdpa_bf16_lora_all_linear"] = (32 * S * d + 8 * S * I + 8 * S + 24 * r * S + 4 * h * S,
                                          -(2 * S * d + 4 * S), proj_all)
        # + checkpointing: the patch_embedding require-grads hook: pre_layrnorm saves its input and stats
        f["sdpa_bf16_lora_qv_gc"] = (2 * S * d, 2 * S * d + 4 * S, 2 * P * Dt)
        f["sdpa_bf16_lora_all_linear_gc"] = (2 * S * d, 2 * S * d + 4 * S, proj_all)
        f["sdpa_fp32_lora_qv_gc"] = (4 * S * d, 4 * S * d + 8 * S, 4 * P * Dt)
    assert set(f) == set(PLAN_SCENARIOS), name
    return f, D


_GC_ONLY_INPUT = "2 S d (the block's bf16 input, kept by the checkpoint)"
_Q3_PROJ_BF16 = "(4 S d + 2 S) * 2 + nd (3 S d + S/2) * 2 = 8 S d + 4 S + nd (6 S d + S)"
_Q3_PROJ_ALL = "12 S d + 4 S + 8 r Sm + nd (10 S d + S + 8 r Sm)"
_QWEN3 = {
    "sdpa_bf16_gc": [_GC_ONLY_INPUT, "S C t p^2 * 2 (bf16 pixel copy) + 48 S (pos-embed interpolation)", _Q3_PROJ_BF16],
    "sdpa_autocast_bf16_gc": ["2 S d (bf16: the ViT's residual stream is bf16 under autocast)",
                              "S C t p^2 * 2 + 48 S", "8 S d + 8 S + nd (6 S d + 2 S)"],
    "sdpa_bf16_lora_qv": ["0", "0", "0 (fused qkv, no vision require-grads hook)"],
    "sdpa_bf16_lora_all_linear": ["28 S d + 6 S I + 8 S + 16 r S + 4 h S", "2 S hd * 4 - (2 S d + 4 S)", _Q3_PROJ_ALL],
    "sdpa_bf16_lora_qv_gc": ["0", "0", "0 (get_input_embeddings of the vision model is not implemented: no hook)"],
    "sdpa_bf16_lora_all_linear_gc": [_GC_ONLY_INPUT, "0", _Q3_PROJ_ALL],
    "sdpa_fp32_lora_qv_gc": ["0", "0", "0"],
}
_L4_GC = "0 (Llama4VisionEncoder passes hidden_state by keyword: the checkpoint saves no tensor)"
PLAN_FORMULA_SYMBOLS = {
    "llama4": {
        "sdpa_bf16_gc": [_L4_GC, "(2 S d + 4 S) * 2 + pix * 2", "2 P I + 4 P Pi + 4 P Po"],
        "sdpa_autocast_bf16_gc": [_L4_GC, "(2 S d + 4 S) * 4 + pix * 2", "2 P I + 4 P Pi + 4 P Po"],
        "sdpa_bf16_lora_qv": ["20 S d + 2 S I + 8 S + 8 r S + 4 h S", "0", "2 P Pi + 2 P Po"],
        "sdpa_bf16_lora_all_linear": ["32 S d + 6 S I + 8 S + 24 r S + 4 h S",
                                      "pix * 4 + (2 S d + 4 S) * 2 + 4 r (S - T)",
                                      "4 P I + 6 P Pi + 6 P Po + 12 r P"],
        "sdpa_bf16_lora_qv_gc": [_L4_GC, "(2 S d + 4 S) * 2", "2 P Pi + 2 P Po"],
        "sdpa_bf16_lora_all_linear_gc": [_L4_GC, "pix * 4 + (2 S d + 4 S) * 2 + 4 r (S - T)",
                                         "4 P I + 6 P Pi + 6 P Po + 12 r P"],
        "sdpa_fp32_lora_qv_gc": [_L4_GC, "(2 S d + 4 S) * 4", "(P Pi + P Po) * 4"],
    },
    "qwen2_5_vl": {
        "sdpa_bf16_gc": [_GC_ONLY_INPUT, "S C t p^2 * 2 + 2 Sm * 8 (window_index and its argsort)", "12 S d + 4 S"],
        "sdpa_autocast_bf16_gc": ["2 S d (bf16: the ViT's residual stream is bf16 under autocast)",
                                  "S C t p^2 * 2 + 2 Sm * 8", "12 S d + 4 S"],
        "sdpa_bf16_lora_qv": ["0", "0", "0 (fused qkv)"],
        "sdpa_bf16_lora_all_linear": ["36 S d + 10 S I + 8 S + 20 r S + 4 h S",
                                      "2 S hd * 4 + Sm * 8 - (4 S d + 4 S)", "14 S d + 4 S + 8 r Sm"],
        "sdpa_bf16_lora_qv_gc": [_GC_ONLY_INPUT, "2 Sm * 8", "6 S d + 4 S (the frozen merger passes the input grad "
                                                            "that the patch_embed hook asks for)"],
        "sdpa_bf16_lora_all_linear_gc": [_GC_ONLY_INPUT, "2 Sm * 8", "14 S d + 4 S + 8 r Sm"],
        "sdpa_fp32_lora_qv_gc": ["4 S d", "2 Sm * 8", "8 S d + 4 S"],
    },
    "qwen3_vl": _QWEN3,
    "qwen3_5": _QWEN3,
    "mistral3": {
        "sdpa_bf16_gc": [_GC_ONLY_INPUT, "6 S d + 4 S (ln_pre) + 2 S^2 (bf16 block mask, a positional layer "
                                         "argument) + N C H W * 2", "8 S d + 4 S + 2 Sm d + 4 Sm Dt"],
        "sdpa_autocast_bf16_gc": ["4 S d (fp32 stream)", "6 S d + 4 S + 4 S^2 (fp32 mask) + N C H W * 2",
                                  "10 S d + 4 S + 2 Sm d + 4 Sm Dt"],
        "sdpa_bf16_lora_qv": ["24 S d + 6 S I + 8 S + 8 r S + 4 h S", "2 S hd * 2 + 2 S^2 - (4 S d + 4 S)",
                              "4 S d + 4 S + 2 Sm Dt"],
        "sdpa_bf16_lora_all_linear": ["40 S d + 10 S I + 8 S + 28 r S + 4 h S", "2 S hd * 2 + 2 S^2 - (4 S d + 4 S)",
                                      "8 S d + 4 S + 4 Sm d + 6 Sm Dt + 12 r Sm"],
        "sdpa_bf16_lora_qv_gc": [_GC_ONLY_INPUT, "4 S d + 4 S (ln_pre: fp32 x + rsqrt) + 2 S^2",
                                 "4 S d + 4 S + 2 Sm Dt"],
        "sdpa_bf16_lora_all_linear_gc": [_GC_ONLY_INPUT, "4 S d + 4 S + 2 S^2",
                                         "8 S d + 4 S + 4 Sm d + 6 Sm Dt + 12 r Sm"],
        "sdpa_fp32_lora_qv_gc": ["4 S d", "4 S d + 4 S + 4 S^2", "4 S d + 4 S + 4 Sm Dt"],
    },
    "llava": {
        "sdpa_bf16_gc": [_GC_ONLY_INPUT, "2 S d + 4 S (pre_layrnorm) + N C H W * 2", "((N = 1 ? S : P) d + 2 P Dt) * 2"],
        "sdpa_autocast_bf16_gc": ["4 S d (fp32 stream)", "4 S d + 8 S + N C H W * 2", "2 P d + 4 P Dt"],
        "sdpa_bf16_lora_qv": ["20 S d + 4 S I + 8 S + 8 r S + 4 h S", "-(2 S d + 4 S)", "2 P Dt"],
        "sdpa_bf16_lora_all_linear": ["32 S d + 8 S I + 8 S + 24 r S + 4 h S", "-(2 S d + 4 S)",
                                      "4 P d + 6 P Dt + 8 r P"],
        "sdpa_bf16_lora_qv_gc": [_GC_ONLY_INPUT, "2 S d + 4 S (pre_layrnorm, its input has grad from the hook)",
                                 "2 P Dt"],
        "sdpa_bf16_lora_all_linear_gc": [_GC_ONLY_INPUT, "2 S d + 4 S", "4 P d + 6 P Dt + 8 r P"],
        "sdpa_fp32_lora_qv_gc": ["4 S d", "4 S d + 8 S", "4 P Dt"],
    },
    "gemma3_mm": {
        "sdpa_bf16_gc": [_GC_ONLY_INPUT, "2 S d + 4 S (post_layernorm) + N C H W * 2", "2 S d + 10 P d + 4 P + 4 d"],
        "sdpa_autocast_bf16_gc": ["4 S d (fp32 stream)", "4 S d + 8 S + N C H W * 2", "4 S d + 10 P d + 4 P + 4 d"],
        "sdpa_bf16_lora_qv": ["20 S d + 2 S I + 8 S + 8 r S + 4 h S",
                              "0 (post_layernorm 2 S d + 4 S, minus block 0's norm1)", "2 S d + 4 P d + 4 P + 4 d"],
        "sdpa_bf16_lora_all_linear": ["32 S d + 6 S I + 8 S + 24 r S + 4 h S", "0", "2 S d + 4 P d + 4 P + 4 d"],
        "sdpa_bf16_lora_qv_gc": [_GC_ONLY_INPUT, "2 S d + 4 S", "2 S d + 4 P d + 4 P + 4 d"],
        "sdpa_bf16_lora_all_linear_gc": [_GC_ONLY_INPUT, "2 S d + 4 S", "2 S d + 4 P d + 4 P + 4 d"],
        "sdpa_fp32_lora_qv_gc": ["4 S d", "4 S d + 8 S", "4 S d + 4 P d + 4 P + 4 d"],
    },
}


def lm_difference_plans(name, cfg, sc, S):
    """Language model + head bytes with images minus text alone at the same sequence S, by formula: (bytes, why)."""
    tc = cfg.get_text_config(decoder=True)
    Dt = tc.hidden_size
    lora, gc = sc.get("lora"), sc.get("gc")
    features_grad = lora in MI.LORA_FEATURES_TRAINED[name] if lora else True
    terms, parts = 0, []
    if gc or features_grad or name == "qwen3_vl":
        terms += S
        why = ("the text embeddings require grad (enable_input_require_grads hook of gradient checkpointing)" if gc
               and lora and not features_grad else "the image features require grad" if features_grad else
               "qwen3_vl's deepstack index_put on hidden states that need grad")
        parts.append(f"S = {S} (the bool placeholder mask [1, S, 1] masked_scatter saves: {why})")
    else:
        parts.append("0: neither the features nor the text embeddings need grad (no adapter before the language "
                     "model, no require-grads hook without checkpointing): masked_scatter saves no mask")
    if name == "gemma3_mm" and not gc:
        es = 2 if sc.get("autocast") or sc.get("dtype") == "bfloat16" else 4
        h, kv, hd = tc.num_attention_heads, tc.num_key_value_heads, tc.head_dim
        nfull = sum(t == "full_attention" for t in tc.layer_types)
        x = nfull * (S * S * es + 2 * (h - kv) * S * hd * es)
        terms += x
        parts.append(f"+ full-attention layers {nfull} x (S^2 x {es} B block mask + 2 (h_t - kv_t) S hd_t x {es} B "
                     f"K/V repeated to h_t heads) = {x}")
    if lora and features_grad and not gc:
        plus_one = name in ("qwen3_5", "gemma3_mm")
        x = S * Dt * 4 + S * 4 + (Dt * 4 if plus_one else 0)
        terms += x
        parts.append("+ the first decoder layer's input RMSNorm sees an input with grad: x [S, Dt] + rsqrt [S, 1]"
                     + (" + (1 + w) [Dt]" if plus_one else "") + f", fp32 even with bf16 weights (upcast) = {x}")
        if name == "gemma3_mm" and lora == "qv":
            kv, hd = tc.num_key_value_heads, tc.head_dim
            x = (S * kv * hd + S * kv + hd) * 4
            terms += x
            parts.append(f"+ its k_norm: x [S, kv_t, hd_t] + rsqrt [S, kv_t] + (1 + w) [hd_t], fp32 = {x}")
        if name == "llama4" and lora == "qv":
            x = MI.llama4_k_norm(tc, S)
            terms += x
            parts.append(f"+ its qk_norm on k (L2, no weight): fp32 x [S, kv_t, hd_t] + rsqrt [S, kv_t] = {x}")
    if gc and lora:
        parts.append("(the first layer's RMSNorm and, for gemma3, the block mask live inside the checkpointed layer)")
    elif gc:
        parts.append("(everything else lives inside the checkpointed layers, which keep only their input)")
    return terms, " ".join(parts)


def _lm_symbols(name):
    lora_rms = "(S Dt + S" + (" + Dt" if name in ("qwen3_5", "gemma3_mm") else "") + ") * 4"
    g3 = " + nfull (2 S^2 + 4 (h_t - kv_t) S hd_t)" if name == "gemma3_mm" else ""
    qv = {"qwen2_5_vl": "0", "qwen3_5": "0", "qwen3_vl": "S (deepstack index_put mask)",
          "gemma3_mm": f"S{g3} + {lora_rms} + (S kv_t hd_t + S kv_t + hd_t) * 4 (k_norm)",
          "llama4": f"S + {lora_rms} + (S kv_t hd_t + S kv_t) * 4 (layer 0's L2 qk_norm on k)"}.get(name, f"S + {lora_rms}")
    return {"sdpa_bf16_gc": "S", "sdpa_autocast_bf16_gc": "S", "sdpa_bf16_lora_qv": qv,
            "sdpa_bf16_lora_all_linear": f"S{g3} + {lora_rms}", "sdpa_bf16_lora_qv_gc": "S",
            "sdpa_bf16_lora_all_linear_gc": "S", "sdpa_fp32_lora_qv_gc": "S"}


# ---------------------------------------------------------------------------------------------------
# setup facts: adapters' dtype, require-grads hooks, checkpoint function
# ---------------------------------------------------------------------------------------------------
def _hooked(model):
    return sorted(n.split("base_model.model.", 1)[-1] for n, m in model.named_modules()
                  if any(getattr(h, "__name__", "") == "make_inputs_require_grads" for h in m._forward_hooks.values()))


def setup_info(folder, name, spec, sc):
    res = {}
    for order in ("gc_then_peft", "peft_then_gc"):
        if order == "peft_then_gc" and not (sc.get("gc") and sc.get("lora")):
            continue
        torch.manual_seed(MI.SEED)
        model = MI.load(folder, spec, attn=sc["attn"],
                        dtype=torch.bfloat16 if sc.get("dtype") == "bfloat16" else torch.float32)
        if sc.get("gc") and order == "gc_then_peft":
            model.gradient_checkpointing_enable()
        if sc.get("lora"):
            model, targets, wrapped = MI.apply_lora(model, spec, sc["lora"])
        if sc.get("gc") and order == "peft_then_gc":
            model.gradient_checkpointing_enable()  # PeftModel -> base model, as Trainer(gradient_checkpointing)
        hooked = _hooked(model)
        if order == "peft_then_gc":
            res["require_grads_hooks_other_order"] = hooked
            res["same_hooks_either_order"] = hooked == res["require_grads_hooks"]
            continue
        res["require_grads_hooks"] = hooked
        res["weights_dtype"] = M.dtype_name(torch.bfloat16 if sc.get("dtype") == "bfloat16" else torch.float32)
        if sc.get("gc"):
            fn = next((m._gradient_checkpointing_func for m in model.modules()
                       if getattr(m, "gradient_checkpointing", False) and hasattr(m, "_gradient_checkpointing_func")),
                      None)
            res["checkpoint_function"] = (f"{fn.func.__module__}.{fn.func.__name__} {fn.keywords}"
                                          if isinstance(fn, functools.partial) else repr(fn))
        if sc.get("lora"):
            dts = collections.Counter(M.dtype_name(p.dtype) for n, p in model.named_parameters() if "lora_" in n)
            base = collections.Counter(M.dtype_name(p.dtype) for n, p in model.named_parameters()
                                       if "lora_" not in n and p.is_floating_point())
            res.update(target_modules=targets if isinstance(targets, str) else sorted(targets),
                       wrapped_modules=len(wrapped), adapter_param_dtypes=dict(dts), base_param_dtypes=dict(base),
                       trainable_params=sum(p.numel() for p in model.parameters() if p.requires_grad),
                       autocast_adapter_dtype="peft default True: adapters of a bf16/fp16 base are created in fp32; "
                                              "peft's Linear casts each adapter's input to the adapter dtype (a "
                                              "separate fp32 copy per adapter, saved by lora_A) and the sum back "
                                              "to the base output dtype")
        del model
    return res


# ---------------------------------------------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None)
    ap.add_argument("--out", default=str(M.DEFAULT_OUT))
    args = ap.parse_args()
    out = Path(args.out)
    names = list(MI.SIZES) if not args.only else args.only.split(",")
    t_all = time.time()
    for name in names:
        t0 = time.time()
        spec = M.FAMILIES[name]
        folder = out / name
        cfg = M.AutoConfig.from_pretrained(folder, local_files_only=True)
        tc = cfg.get_text_config(decoder=True)
        res = {
            "family": name, "generated_by": "tools/llm/measure_images_plans.py", "versions": M.VERSIONS,
            "device": "cpu", "seed": MI.SEED, "model_class": cfg.architectures[0], "method": METHOD,
            "scenarios": PLAN_SCENARIOS, "text_tokens": MI.TEXT_TOKENS,
            "layout": f"input_ids [1, S]: {MI.SPLIT} text tokens, the N images' tokens, "
                      f"{MI.TEXT_TOKENS - MI.SPLIT} text tokens (measure_images.make_batch)",
            "vision": MI.vision_dims(name, cfg),
            "text": {"hidden": tc.hidden_size, "heads": tc.num_attention_heads, "kv_heads": tc.num_key_value_heads,
                     "head_dim": getattr(tc, "head_dim", None) or tc.hidden_size // tc.num_attention_heads},
            "setup": {k: setup_info(folder, name, spec, sc) for k, sc in PLAN_SCENARIOS.items()},
            "points": [],
        }
        for H, W in MI.SIZES[name]:
            for N in MI.NUM_IMAGES:
                inputs, lay = MI.make_batch(name, cfg, H, W, N, spec)
                S_text = inputs["input_ids"].shape[1]
                f, D = plan_vision_formulas(name, cfg, H, W, N)
                pt = {"image_size": [H, W], "images": N, "seq": S_text,
                      "vision_dims": {k: v for k, v in D.items()}, "saved": {}, "regions": {},
                      "vision_formula": {"S": D["S"], "layers_counted": D["L"], "per_layer": {}, "once": {},
                                         "projector": {}, "checks": {}},
                      "language_model_vs_text_only": {}}
                for sc_name, sc in PLAN_SCENARIOS.items():
                    r = MI.measure_saved(folder, name, cfg, spec, H, W, N, sc)
                    pt["saved"][sc_name] = r
                    pt["regions"][sc_name] = {"vision_blocks": r["vision_blocks_bytes"],
                                              "vision_other": r["vision_other_bytes"],
                                              "projector": r["projector_bytes"],
                                              "language_model": r["language_model_bytes"], "head": r["head_bytes"]}
                    per, once, proj = f[sc_name]
                    pred = D["L"] * per + once + proj
                    meas = r["vision_tower_bytes"] + r["projector_bytes"]
                    vf = pt["vision_formula"]
                    vf["per_layer"][sc_name], vf["once"][sc_name], vf["projector"][sc_name] = per, once, proj
                    vf["checks"][sc_name] = {"formula": pred, "measured": meas,
                                             "ratio": round(pred / meas, 4) if meas else (1.0 if pred == 0 else None)}
                    if meas == 0:
                        vf["checks"][sc_name]["note"] = "nothing saved: ratio 1.0 means formula and measurement are 0"
                    assert pred == meas, (name, H, W, N, sc_name, pred, meas)
                    t = MI.measure_saved(folder, name, cfg, spec, H, W, N, sc, text_only_seq=S_text)
                    with_images = r["language_model_bytes"] + r["head_bytes"]
                    txt = t["language_model_bytes"] + t["head_bytes"]
                    fl, why = lm_difference_plans(name, cfg, sc, S_text)
                    pt["language_model_vs_text_only"][sc_name] = {
                        "with_images": with_images, "text_only_same_seq": txt, "difference": with_images - txt,
                        "difference_formula": fl, "ratio": round(fl / (with_images - txt), 4) if with_images != txt
                        else (1.0 if fl == 0 else None), "formula": why}
                    assert fl == with_images - txt, (name, sc_name, fl, with_images - txt)
                res["points"].append(pt)
        res["vision_formula_symbols"] = {
            "total": "L * per_layer + once + projector (bytes); notation in measure_images.VISION_FORMULA_SYMBOLS",
            **{k: dict(zip(["per_layer", "once", "projector"], v)) for k, v in PLAN_FORMULA_SYMBOLS[name].items()}}
        res["language_model_difference_symbols"] = _lm_symbols(name)
        M.write_json(folder / "images_plans.json", res)
        print(f"{name}: {time.time() - t0:.1f} s", flush=True)
    print(f"all: {time.time() - t_all:.1f} s", flush=True)


if __name__ == "__main__":
    main()
