#!/usr/bin/env python3
"""Ground truth for nnlint's LLM support: tiny random-init transformers models, measured on CPU.

For each family in FAMILIES this script
  1. builds a tiny model from a config with a fixed seed and saves it with save_pretrained
     (safetensors) into testdata/llm/<family>/ (plus a sharded copy of llama in llama-sharded/);
  2. reloads the folder offline and measures
     - parameters (count, bytes, tied tensors, MoE total vs active),
     - the KV cache returned by a use_cache=True forward (bytes of every tensor the cache object holds),
     - the bytes autograd saves for backward in one training forward (saved_tensors_hooks,
       storages deduplicated by data_ptr, classified as in shared/reference/autograd-saved-tensors.md)
       for eager/sdpa attention, fp32/bf16 autocast/bf16 weights, gradient checkpointing and LoRA,
     - the CPU allocator's net and peak bytes of forward and backward (torch.profiler memory events),
     - AdamW state after one step;
  3. writes testdata/llm/<family>/expected.json with the method next to every number.

Everything runs on CPU in a few minutes on 2 cores. Usage:
    python tools/llm/measure.py [--only llama,gpt2] [--no-train] [--out DIR]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import math
import os
import shutil
import struct
import sys
import warnings
import weakref
from pathlib import Path

os.environ.setdefault("KINETO_LOG_LEVEL", "5")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
import peft  # noqa: E402
import safetensors  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonfmt  # noqa: E402
from transformers import (  # noqa: E402
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForImageClassification,
    AutoModelForImageTextToText,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "testdata" / "llm"
SEED = 0
TRAIN_POINTS = [(2, 24), (3, 40)]  # (batch, seq) for training measurements
KV_POINTS = [(2, 24), (3, 40)]  # (batch, seq) for KV-cache measurements
SLIDING = 8  # sliding window of the families that have one (< every measured seq)

VERSIONS = {
    "python": sys.version.split()[0],
    "torch": torch.__version__,
    "transformers": transformers.__version__,
    "peft": peft.__version__,
    "safetensors": safetensors.__version__,
    "numpy": np.__version__,
}

# ---------------------------------------------------------------------------------------------------
# Families. Common tiny decoder shape: 2 layers, hidden 32, 4 heads of 8, 2 KV heads (GQA),
# intermediate 64, vocab 128, 64 positions. Families that allow head_dim != hidden/heads get 16.
# All dropouts 0 except the *_dropout families (the saved-bytes rules for dropout are in the reference doc).
# ---------------------------------------------------------------------------------------------------
DEC = dict(
    vocab_size=128,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    bos_token_id=1,
    eos_token_id=2,
    attention_dropout=0.0,
)

FAMILIES: dict[str, dict] = {
    "llama": dict(model_type="llama", head="causal", dtype="float32",
                  config=dict(DEC, tie_word_embeddings=False),
                  why="baseline: GQA, RMSNorm, SwiGLU, untied lm_head"),
    "mistral": dict(model_type="mistral", head="causal", dtype="float32",
                    config=dict(DEC, sliding_window=SLIDING, tie_word_embeddings=False),
                    why="sliding_window=8 on every layer"),
    "qwen2": dict(model_type="qwen2", head="causal", dtype="float32",
                  config=dict(DEC, tie_word_embeddings=True),
                  why="q/k/v bias, tied lm_head"),
    "qwen3": dict(model_type="qwen3", head="causal", dtype="bfloat16",
                  config=dict(DEC, head_dim=16, tie_word_embeddings=True),
                  why="q_norm/k_norm, head_dim 16 != hidden/heads 8, bf16 storage"),
    "gemma": dict(model_type="gemma", head="causal", dtype="bfloat16",
                  config=dict(DEC, head_dim=16, pad_token_id=0, tie_word_embeddings=True),
                  why="head_dim 16 != hidden/heads 8, embeddings scaled by sqrt(hidden), tied, bf16"),
    "gemma2": dict(model_type="gemma2", head="causal", dtype="bfloat16",
                   config=dict(DEC, head_dim=16, pad_token_id=0, tie_word_embeddings=True,
                               sliding_window=SLIDING,
                               layer_types=["sliding_attention", "full_attention"],
                               attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                               query_pre_attn_scalar=16),
                   why="sliding/global alternation, attention and final logit softcapping, 4 norms/layer"),
    "gemma3": dict(model_type="gemma3_text", head="causal", dtype="bfloat16",
                   config=dict(DEC, head_dim=16, pad_token_id=0, tie_word_embeddings=True,
                               sliding_window=SLIDING,
                               layer_types=["sliding_attention", "full_attention"],
                               query_pre_attn_scalar=16),
                   why="text model (Gemma3ForCausalLM), q/k norm, sliding pattern, head_dim 16"),
    "phi3": dict(model_type="phi3", head="causal", dtype="float32",
                 config=dict(DEC, pad_token_id=0, tie_word_embeddings=False,
                             resid_pdrop=0.0, embd_pdrop=0.0, original_max_position_embeddings=64),
                 why="fused qkv_proj and gate_up_proj"),
    "gpt2": dict(model_type="gpt2", head="causal", dtype="float32",
                 config=dict(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64,
                             resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                             bos_token_id=1, eos_token_id=2, tie_word_embeddings=True),
                 why="Conv1D weights stored [in, out], fused c_attn, learned positions, LayerNorm, tied"),
    "gpt2_seqcls": dict(model_type="gpt2", head="seqcls", dtype="float32",
                        config=dict(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64,
                                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
                                    bos_token_id=1, eos_token_id=2, pad_token_id=0, num_labels=3),
                        why="GPT2ForSequenceClassification: score over every position, gathered at each "
                            "sequence's last token, 3 labels"),
    "gpt_neox": dict(model_type="gpt_neox", head="causal", dtype="float32",
                     config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                 intermediate_size=64, max_position_embeddings=64, hidden_dropout=0.0,
                                 attention_dropout=0.0, bos_token_id=1, eos_token_id=2,
                                 tie_word_embeddings=False),
                     why="fused query_key_value with bias, parallel residual, partial rotary, embed_out"),
    "mixtral": dict(model_type="mixtral", head="causal", dtype="bfloat16",
                    config=dict(DEC, num_local_experts=4, num_experts_per_tok=2, router_jitter_noise=0.0,
                                tie_word_embeddings=False),
                    why="4 experts, top-2, no shared expert"),
    "qwen2_moe": dict(model_type="qwen2_moe", head="causal", dtype="bfloat16",
                      config=dict(DEC, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                  shared_expert_intermediate_size=64, decoder_sparse_step=1,
                                  norm_topk_prob=False, tie_word_embeddings=False),
                      why="4 routed experts top-2 + one shared expert with a sigmoid gate, qkv bias"),
    "qwen3_moe": dict(model_type="qwen3_moe", head="causal", dtype="bfloat16",
                      config=dict(DEC, num_hidden_layers=3, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                  moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1,
                                  mlp_only_layers=[1], tie_word_embeddings=False),
                      why="Qwen3-MoE: q_norm/k_norm, 4 routed experts top-2 renormalised, no shared expert; "
                          "block 1 dense (mlp_only_layers)"),
    "bert": dict(model_type="bert", head="mlm", dtype="float32",
                 config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0),
                 why="encoder, BertForMaskedLM (decoder tied to word embeddings)"),
    "roberta": dict(model_type="roberta", head="mlm", dtype="float32",
                    config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=66, type_vocab_size=1,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                pad_token_id=1, bos_token_id=0, eos_token_id=2),
                    why="encoder, RobertaForMaskedLM, positions offset by padding_idx+1 (66 = 64 + 2)"),
    "bert_model": dict(model_type="bert", head="bare", dtype="float32",
                       config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0),
                       why="encoder, BertModel: no head, the pooler (dense + tanh on [CLS]); "
                           "loss = last_hidden_state.sum() + pooler_output.sum()"),
    "bert_seqcls": dict(model_type="bert", head="seqcls", dtype="float32",
                        config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0,
                                    num_labels=3),
                        why="encoder, BertForSequenceClassification: pooler + classifier (3 labels), "
                            "cross_entropy"),
    "bert_dropout": dict(model_type="bert", head="mlm", dtype="float32",
                         config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, pad_token_id=0),
                         why="bert with hidden and attention dropout 0.1 (each dropout saves its scaled noise "
                             "on CPU; SDPA with dropout runs the math path)"),
    "gpt2_dropout": dict(model_type="gpt2", head="causal", dtype="float32",
                         config=dict(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_inner=64, n_positions=64,
                                     resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                                     bos_token_id=1, eos_token_id=2, tie_word_embeddings=True),
                         why="gpt2 with resid/embd/attn dropout 0.1"),
    "roberta_dropout": dict(model_type="roberta", head="mlm", dtype="float32",
                            config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=64, max_position_embeddings=66, type_vocab_size=1,
                                        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                        pad_token_id=1, bos_token_id=0, eos_token_id=2),
                            why="roberta with hidden and attention dropout 0.1"),
    "bert_seqcls_dropout": dict(model_type="bert", head="seqcls", dtype="float32",
                                config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                                            type_vocab_size=2, hidden_dropout_prob=0.1,
                                            attention_probs_dropout_prob=0.1, pad_token_id=0, num_labels=3),
                                why="bert_seqcls with dropout 0.1 (the classifier's dropout on the pooled output "
                                    "takes hidden_dropout_prob)"),
    "roberta_seqcls": dict(model_type="roberta", head="seqcls", dtype="float32",
                           config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=64, max_position_embeddings=66, type_vocab_size=1,
                                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                       pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=3),
                           why="RobertaForSequenceClassification: its head (dense + tanh on <s>, out_proj), "
                               "no pooler"),
    "roberta_seqcls_dropout": dict(model_type="roberta", head="seqcls", dtype="float32",
                                   config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=64,
                                               max_position_embeddings=66, type_vocab_size=1,
                                               hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                                               pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=3),
                                   why="roberta_seqcls with dropout 0.1 (its head drops <s> before the dense "
                                       "and after the tanh)"),
    "gpt_neox_dropout": dict(model_type="gpt_neox", head="causal", dtype="float32",
                             config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                         intermediate_size=64, max_position_embeddings=64, hidden_dropout=0.1,
                                         attention_dropout=0.1, bos_token_id=1, eos_token_id=2,
                                         tie_word_embeddings=False),
                             why="gpt_neox with hidden and attention dropout 0.1"),
    "llama_dropout": dict(model_type="llama", head="causal", dtype="float32",
                          config=dict(DEC, tie_word_embeddings=False, attention_dropout=0.1),
                          why="llama (GQA) with attention dropout 0.1"),
    "phi3_dropout": dict(model_type="phi3", head="causal", dtype="float32",
                         config=dict(DEC, pad_token_id=0, tie_word_embeddings=False, attention_dropout=0.1,
                                     resid_pdrop=0.1, embd_pdrop=0.1, original_max_position_embeddings=64),
                         why="phi3 with attention and residual dropout 0.1 (embd_pdrop is read but applied nowhere)"),
    "gemma2_dropout": dict(model_type="gemma2", head="causal", dtype="bfloat16",
                           config=dict(DEC, head_dim=16, pad_token_id=0, tie_word_embeddings=True,
                                       sliding_window=SLIDING,
                                       layer_types=["sliding_attention", "full_attention"],
                                       attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                       query_pre_attn_scalar=16, attention_dropout=0.1),
                           why="gemma2 (bf16, sliding window, softcapping) with attention dropout 0.1"),
    "vit_dropout": dict(model_type="vit", head="image", dtype="float32",
                        config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=16, patch_size=4, num_channels=3, hidden_dropout_prob=0.1,
                                    attention_probs_dropout_prob=0.1, num_labels=10),
                        why="vit with hidden and attention dropout 0.1"),
    "vit": dict(model_type="vit", head="image", dtype="float32",
                config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                            image_size=16, patch_size=4, num_channels=3, hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, num_labels=10),
                why="ViTForImageClassification, 16x16 image, patch 4: 16 patches + [CLS] = 17 tokens"),
}

# ---------------------------------------------------------------------------------------------------
# Newer families (ext=True): measured through run_family_ext, which adds a per-layer cache breakdown
# (kv_cache.points[].layers_detail), the config fields that decide each layer's kind (config.layer_kind_fields),
# MoE counts from the model's own expert tensors, and, for multimodal wrappers, params.by_prefix. The older
# families above keep their original path, so their expected.json files do not change.
# ---------------------------------------------------------------------------------------------------
MIN_SCENARIOS = ["sdpa_fp32", "eager_fp32", "sdpa_autocast_bf16", "sdpa_fp32_gc", "sdpa_fp32_lora_all_linear"]
MOE_SMALL = dict(moe_intermediate_size=32, num_experts_per_tok=2)
MAMBA_TINY = dict(mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=16, mamba_d_conv=4,
                  mamba_expand=2, mamba_chunk_size=16)
# multimodal wrappers: special ids 124..127 are kept out of the random text ids (make_inputs id_high)
MM_IDS = dict(image_token_id=124, video_token_id=125, vision_start_token_id=126, vision_end_token_id=127)

# Qwen3.5 (dense and MoE): 4 layers, 3 Gated DeltaNet + 1 gated full attention, as the qwen3_next fixture
QWEN3_5_LINEAR = dict(num_hidden_layers=4, head_dim=16, layer_types=["linear_attention"] * 3 + ["full_attention"],
                      linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                      linear_value_head_dim=8, linear_conv_kernel_dim=4)
QWEN3_5_VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=32, patch_size=4,
                      spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)

# Llama-4 text model: the llama4_text fixture, also the language model of the llama4 wrapper
LLAMA4_TEXT = dict(DEC, num_hidden_layers=4, head_dim=8, intermediate_size=32, intermediate_size_mlp=64,
                   num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
                   attention_chunk_size=SLIDING, no_rope_layers=[1, 1, 1, 0], use_qk_norm=True,
                   tie_word_embeddings=False)

NEW_FAMILIES: dict[str, dict] = {
    # group 1: dense decoders
    "smollm3": dict(model_type="smollm3", head="causal", dtype="bfloat16",
                    config=dict(DEC, pad_token_id=0, no_rope_layers=[1, 0], tie_word_embeddings=True),
                    layer_kind_fields=["no_rope_layers", "no_rope_layer_interval", "use_sliding_window",
                                       "sliding_window", "layer_types"],
                    why="SmolLM3: llama-like, no_rope_layers [1, 0] (layer 1 is NoPE: no rotary on q/k), tied"),
    "olmo2": dict(model_type="olmo2", head="causal", dtype="float32",
                  config=dict(DEC, pad_token_id=0, tie_word_embeddings=False),
                  layer_kind_fields=[],
                  why="OLMo-2: post-norms only (post_attention_layernorm, post_feedforward_layernorm), "
                      "q_norm/k_norm RMSNorm over the full projected width (heads*head_dim, kv_heads*head_dim)"),
    "olmo3": dict(model_type="olmo3", head="causal", dtype="bfloat16",
                  config=dict(DEC, pad_token_id=0, tie_word_embeddings=False, sliding_window=SLIDING,
                              layer_types=["sliding_attention", "full_attention"]),
                  layer_kind_fields=["layer_types", "sliding_window"],
                  why="OLMo-3: OLMo-2 blocks with layer_types [sliding, full], sliding window 8"),
    "cohere2": dict(model_type="cohere2", head="causal", dtype="bfloat16",
                    config=dict(DEC, head_dim=8, pad_token_id=0, tie_word_embeddings=True, sliding_window=SLIDING,
                                layer_types=["sliding_attention", "full_attention"]),
                    layer_kind_fields=["layer_types", "sliding_window"],
                    why="Cohere2: parallel attention + MLP off one LayerNorm (no bias), logit_scale 0.0625, tied, "
                        "[sliding, full]; rotary on sliding layers only"),
    "exaone4": dict(model_type="exaone4", head="causal", dtype="bfloat16",
                    config=dict(DEC, tie_word_embeddings=False, sliding_window=SLIDING, sliding_window_pattern=2),
                    layer_kind_fields=["sliding_window_pattern", "layer_types", "sliding_window"],
                    why="EXAONE-4: post-norms, q/k norm per head, sliding_window_pattern 2 -> layer_types "
                        "[sliding, full]; rotary on sliding layers only (when sliding layers exist)"),
    # group 2: MoE / MLA
    "deepseek_v3": dict(model_type="deepseek_v3", head="causal", dtype="bfloat16",
                        config=dict(DEC, num_hidden_layers=3, num_key_value_heads=4, q_lora_rank=16, kv_lora_rank=24,
                                    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, head_dim=8,
                                    n_routed_experts=4, n_shared_experts=1, first_k_dense_replace=1,
                                    n_group=1, topk_group=1, routed_scaling_factor=2.5, norm_topk_prob=True,
                                    tie_word_embeddings=False, **MOE_SMALL),
                        lora_qv_targets=["q_b_proj", "kv_b_proj"],
                        layer_kind_fields=["first_k_dense_replace", "n_routed_experts", "n_shared_experts",
                                           "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                           "v_head_dim", "n_group", "topk_group"],
                        why="DeepSeek-V3: MLA (q_lora_rank 16, kv_lora_rank 24, rope 8 + nope 8, v 8), block 0 dense, "
                            "blocks 1-2 MoE (4 routed experts top-2 sigmoid group routing + 1 shared expert)"),
    "deepseek_v3_noqlora": dict(model_type="deepseek_v3", head="causal", dtype="bfloat16",
                                config=dict(DEC, num_hidden_layers=3, num_key_value_heads=4, q_lora_rank=None,
                                            kv_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
                                            head_dim=8, n_routed_experts=4, n_shared_experts=1,
                                            first_k_dense_replace=1, n_group=1, topk_group=1,
                                            routed_scaling_factor=2.5, norm_topk_prob=True,
                                            tie_word_embeddings=False, **MOE_SMALL),
                                lora_qv_targets=["q_proj", "kv_b_proj"],
                                layer_kind_fields=["first_k_dense_replace", "q_lora_rank", "kv_lora_rank"],
                                why="deepseek_v3 with q_lora_rank None: q_proj [heads*(nope+rope), H] directly"),
    "glm4_moe": dict(model_type="glm4_moe", head="causal", dtype="bfloat16",
                     config=dict(DEC, num_hidden_layers=3, n_routed_experts=4, n_shared_experts=1,
                                 first_k_dense_replace=1, n_group=1, topk_group=1, use_qk_norm=True,
                                 attention_bias=True, norm_topk_prob=True, tie_word_embeddings=False,
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                  "partial_rotary_factor": 0.5}, **MOE_SMALL),
                     layer_kind_fields=["first_k_dense_replace", "n_routed_experts", "n_shared_experts",
                                        "use_qk_norm", "attention_bias"],
                     why="GLM-4.5 MoE: partial rotary 0.5, qkv bias, q/k norm, block 0 dense, 4 routed experts "
                         "top-2 (sigmoid, e_score_correction_bias) + 1 shared"),
    "gpt_oss": dict(model_type="gpt_oss", head="causal", dtype="bfloat16",
                    config=dict(DEC, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=SLIDING,
                                layer_types=["sliding_attention", "full_attention"], tie_word_embeddings=False),
                    layer_kind_fields=["layer_types", "sliding_window"],
                    why="gpt-oss: attention sinks (per-head learned logit), qkv/o bias, [sliding, full], 4 experts "
                        "top-2 with biases (gate_up_proj interleaved + bias, down_proj + bias), router with bias"),
    "ernie4_5_moe": dict(model_type="ernie4_5_moe", head="causal", dtype="bfloat16",
                         config=dict(DEC, num_hidden_layers=3, moe_num_experts=4, moe_k=2, moe_num_shared_experts=1,
                                     moe_intermediate_size=32, moe_layer_start_index=1, moe_layer_end_index=2,
                                     moe_layer_interval=1, use_bias=False, pad_token_id=0, tie_word_embeddings=True),
                         layer_kind_fields=["moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval",
                                            "moe_num_experts", "moe_k", "moe_num_shared_experts"],
                         why="ERNIE-4.5 MoE: block 0 dense, blocks 1-2 MoE (4 experts top-2, softmax router, "
                             "e_score_correction_bias, 1 shared expert of moe_intermediate*1), tied"),
    "olmoe": dict(model_type="olmoe", head="causal", dtype="bfloat16",
                  config=dict(DEC, num_hidden_layers=2, num_key_value_heads=4, intermediate_size=32, num_experts=4,
                              num_experts_per_tok=2, norm_topk_prob=False, pad_token_id=0, eos_token_id=1,
                              tie_word_embeddings=False),
                  layer_kind_fields=["num_experts", "num_experts_per_tok", "norm_topk_prob", "clip_qkv"],
                  why="OLMoE: q_norm/k_norm over the whole projection, 4 experts top-2 in every block, softmax "
                      "router not renormalised (norm_topk_prob False), experts of intermediate_size"),
    "llama4_text": dict(model_type="llama4_text", head="causal", dtype="bfloat16",
                        config=dict(LLAMA4_TEXT),
                        layer_kind_fields=["layer_types", "attention_chunk_size", "no_rope_layers",
                                           "no_rope_layer_interval", "interleave_moe_layer_step", "moe_layers",
                                           "use_qk_norm", "attn_temperature_tuning"],
                        why="Llama-4 text: chunked attention (chunk 8) on RoPE layers, layer 3 NoPE full attention "
                            "with temperature tuning, MoE on layers 1 and 3 (interleave step 2: 4 experts top-1 + "
                            "shared expert), dense MLP (intermediate_size_mlp 64) on 0 and 2, qk L2 norm"),
    # group 3: state-space / hybrid
    "mamba2": dict(model_type="mamba2", head="causal", dtype="float32",
                   config=dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16,
                               expand=2, state_size=16, n_groups=1, conv_kernel=4, chunk_size=16,
                               pad_token_id=0, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False),
                   layer_kind_fields=[],
                   lora_qv_targets=["in_proj"],
                   why="Mamba-2 (torch reference path): in_proj -> conv1d(k=4) -> SSD chunked scan (chunk 16), gated "
                       "RMSNorm, out_proj; no attention (so no SDPA: the sdpa scenarios run as eager). LoRA 'qv' "
                       "targets in_proj; peft refuses all-linear (out_proj/conv1d are incompatible with Mamba "
                       "models)"),
    "lfm2": dict(model_type="lfm2", head="causal", dtype="bfloat16",
                 config=dict(DEC, pad_token_id=0, tie_word_embeddings=True, conv_L_cache=3,
                             block_auto_adjust_ff_dim=False, layer_types=["conv", "full_attention"]),
                 layer_kind_fields=["layer_types", "full_attn_idxs", "conv_L_cache"],
                 why="LFM2: layer 0 gated short conv (in_proj 3H, depthwise conv k=3, out_proj), layer 1 GQA "
                     "attention with q/k layernorm; SwiGLU feed-forward on both"),
    "granitemoehybrid": dict(model_type="granitemoehybrid", head="causal", dtype="bfloat16",
                             config=dict(DEC, layer_types=["linear_attention", "full_attention"],
                                         num_local_experts=4, num_experts_per_tok=2, intermediate_size=32,
                                         shared_intermediate_size=64, position_embedding_type="rope",
                                         tie_word_embeddings=False, **MAMBA_TINY),
                             layer_kind_fields=["layer_types", "position_embedding_type", "num_local_experts",
                                                "shared_intermediate_size"],
                             why="Granite-4 hybrid: layer 0 Mamba-2 mixer, layer 1 GQA attention; every layer a "
                                 "4-expert top-2 MoE + shared MLP; scaled embeddings/residuals/logits"),
    "qwen3_next": dict(model_type="qwen3_next", head="causal", dtype="bfloat16",
                       config=dict(DEC, num_hidden_layers=4, head_dim=16,
                                   layer_types=["linear_attention"] * 3 + ["full_attention"],
                                   linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                                   linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=4,
                                   moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                   num_experts_per_tok=2, decoder_sparse_step=1, tie_word_embeddings=False),
                       layer_kind_fields=["layer_types", "decoder_sparse_step", "mlp_only_layers",
                                          "linear_conv_kernel_dim"],
                       why="Qwen3-Next: layers 0-2 Gated DeltaNet (torch chunked reference), layer 3 gated full "
                           "attention (q_proj 2x for the output gate, q/k norm, partial rotary 0.25); MoE on every "
                           "layer (4 experts top-2 + sigmoid-gated shared expert)"),
    "qwen3_5_text": dict(model_type="qwen3_5_text", head="causal", dtype="bfloat16",
                         config=dict(DEC, **QWEN3_5_LINEAR, tie_word_embeddings=False,
                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                      "partial_rotary_factor": 0.5, "mrope_section": [2, 1, 1],
                                                      "mrope_interleaved": True}),
                         layer_kind_fields=["layer_types", "linear_conv_kernel_dim"],
                         why="Qwen3.5 dense text model (Qwen3_5ForCausalLM): layers 0-2 Gated DeltaNet with separate "
                             "in_proj_qkv / in_proj_z / in_proj_b / in_proj_a, layer 3 gated full attention (q_proj 2x "
                             "for the output gate, (1+w) q/k norm, partial rotary 0.5, M-RoPE sections [2,1,1] on "
                             "[3,B,S] positions); dense SwiGLU MLP (intermediate 64) on every layer"),
    "qwen3_5_moe_text": dict(model_type="qwen3_5_moe_text", head="causal", dtype="bfloat16",
                             config=dict({k: v for k, v in DEC.items() if k != "intermediate_size"},
                                         **QWEN3_5_LINEAR, num_experts=4, moe_intermediate_size=32,
                                         shared_expert_intermediate_size=64, num_experts_per_tok=2,
                                         tie_word_embeddings=False,
                                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                          "mrope_section": [1, 1, 0], "mrope_interleaved": True}),
                             layer_kind_fields=["layer_types", "linear_conv_kernel_dim", "num_experts"],
                             why="Qwen3.5 MoE text model (Qwen3_5MoeForCausalLM): Qwen3.5's DeltaNet / gated attention "
                                 "layers (partial rotary left at its 0.25 default, M-RoPE [1,1,0]); every layer a MoE "
                                 "(4 experts top-2, always renormalised, + sigmoid-gated shared expert of 64); no "
                                 "intermediate_size, no dense layers"),
    "falcon_h1": dict(model_type="falcon_h1", head="causal", dtype="bfloat16",
                      config=dict(DEC, mamba_d_ssm=64, mamba_rms_norm=True, tie_word_embeddings=False,
                                  **MAMBA_TINY),
                      layer_kind_fields=[],
                      why="Falcon-H1: every layer runs GQA attention and a Mamba-2 mixer in parallel on the same "
                          "normed input (summed), then SwiGLU; muP multipliers"),
    "nemotron_h": dict(model_type="nemotron_h", head="causal", dtype="bfloat16",
                       config=dict(vocab_size=128, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                   head_dim=8, max_position_embeddings=64, intermediate_size=64,
                                   layers_block_type=["linear_attention", "moe", "full_attention", "mlp"],
                                   mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=16, n_groups=1,
                                   conv_kernel=4, expand=2, chunk_size=16, use_mamba_kernels=False,
                                   n_routed_experts=4, n_shared_experts=1, moe_intermediate_size=32,
                                   moe_shared_expert_intermediate_size=32, num_experts_per_tok=2,
                                   n_group=1, topk_group=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                   tie_word_embeddings=False),
                       layer_kind_fields=["layers_block_type", "mamba_ssm_cache_dtype"],
                       why="Nemotron-H: one mixer per block: Mamba-2, MoE (relu2 experts + shared), attention "
                           "(no rotary), relu2 MLP; pre-norm only"),
    # group 4: multimodal wrappers (text-only training and KV; vision/projector params by prefix)
    "qwen2_5_vl": dict(model_type="qwen2_5_vl", head="vlm", dtype="bfloat16", id_high=124,
                       config=dict(MM_IDS, tie_word_embeddings=False,
                                   text_config=dict(DEC, pad_token_id=0, tie_word_embeddings=False,
                                                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                     "mrope_section": [1, 1, 2]}),
                                   vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4,
                                                      out_hidden_size=32, patch_size=4, spatial_merge_size=2,
                                                      temporal_patch_size=2, window_size=16,
                                                      fullatt_block_indexes=[1])),
                       layer_kind_fields=[],
                       why="Qwen2.5-VL wrapper: Qwen2 text model (M-RoPE sections [1,1,2], qkv bias) + ViT "
                           "(window attention, full attention block 1) + patch merger; text-only measurements"),
    "qwen3_vl": dict(model_type="qwen3_vl", head="vlm", dtype="bfloat16", id_high=124,
                     config=dict(MM_IDS, tie_word_embeddings=False,
                                 text_config=dict(DEC, head_dim=16, pad_token_id=0, tie_word_embeddings=False,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                   "mrope_section": [4, 2, 2],
                                                                   "mrope_interleaved": True}),
                                 vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=4,
                                                    out_hidden_size=32, patch_size=4, spatial_merge_size=2,
                                                    temporal_patch_size=2, num_position_embeddings=16,
                                                    deepstack_visual_indexes=[0])),
                     layer_kind_fields=[],
                     why="Qwen3-VL wrapper: Qwen3 text model (q/k norm, head_dim 16, interleaved M-RoPE) + ViT "
                         "with deepstack mergers; text-only measurements"),
    "qwen3_5": dict(model_type="qwen3_5", head="vlm", dtype="bfloat16", id_high=124,
                    config=dict(MM_IDS, tie_word_embeddings=False,
                                text_config=dict(DEC, **QWEN3_5_LINEAR, pad_token_id=0, tie_word_embeddings=False,
                                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                  "partial_rotary_factor": 0.5,
                                                                  "mrope_section": [2, 1, 1],
                                                                  "mrope_interleaved": True}),
                                vision_config=dict(QWEN3_5_VISION)),
                    layer_kind_fields=["layer_types", "linear_conv_kernel_dim"],
                    why="Qwen3.5 wrapper (Qwen3_5ForConditionalGeneration): the qwen3_5_text model of the qwen3_5_text "
                        "fixture (pad_token_id 0) + Qwen3-VL-style ViT without deepstack mergers; text-only "
                        "measurements"),
    "qwen3_5_moe": dict(model_type="qwen3_5_moe", head="vlm", dtype="bfloat16", id_high=124,
                        config=dict(MM_IDS, tie_word_embeddings=False,
                                    text_config=dict({k: v for k, v in DEC.items() if k != "intermediate_size"},
                                                     **QWEN3_5_LINEAR, pad_token_id=0, num_experts=4,
                                                     moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                                     num_experts_per_tok=2, tie_word_embeddings=False,
                                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                                      "mrope_section": [1, 1, 0],
                                                                      "mrope_interleaved": True}),
                                    vision_config=dict(QWEN3_5_VISION)),
                        layer_kind_fields=["layer_types", "linear_conv_kernel_dim", "num_experts"],
                        why="Qwen3.5-MoE wrapper (Qwen3_5MoeForConditionalGeneration): the qwen3_5_moe_text model of "
                            "the qwen3_5_moe_text fixture (pad_token_id 0) + the Qwen3.5 ViT; text-only measurements"),
    "mistral3": dict(model_type="mistral3", head="vlm", dtype="bfloat16", id_high=124,
                     config=dict(image_token_index=127, tie_word_embeddings=False, spatial_merge_size=2,
                                 text_config=dict(DEC, model_type="mistral", sliding_window=None,
                                                  tie_word_embeddings=False),
                                 vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=64,
                                                    num_hidden_layers=2, num_attention_heads=4, head_dim=8,
                                                    image_size=16, patch_size=4)),
                     layer_kind_fields=[],
                     why="Mistral-3 wrapper: Mistral text model + Pixtral vision tower + patch-merger projector; "
                         "text-only measurements"),
    "llava": dict(model_type="llava", head="vlm", dtype="float32", id_high=124,
                  config=dict(image_token_index=127, image_seq_length=16, tie_word_embeddings=False,
                              text_config=dict(DEC, model_type="llama", tie_word_embeddings=False),
                              vision_config=dict(model_type="clip_vision_model", hidden_size=32, intermediate_size=64,
                                                 num_hidden_layers=2, num_attention_heads=4, image_size=16,
                                                 patch_size=4, projection_dim=32)),
                  layer_kind_fields=[],
                  why="LLaVA wrapper: Llama text model + CLIP vision tower + 2-layer MLP projector; text-only "
                      "measurements"),
    # testdata/llm/gemma3 is the text model (Gemma3ForCausalLM); the wrapper gets its own folder
    "gemma3_mm": dict(model_type="gemma3", head="vlm", dtype="bfloat16", id_high=124,
                      config=dict(image_token_index=124, boi_token_index=125, eoi_token_index=126,
                                  mm_tokens_per_image=4, tie_word_embeddings=True,
                                  text_config=dict(DEC, model_type="gemma3_text", head_dim=16, pad_token_id=0,
                                                   tie_word_embeddings=True, sliding_window=SLIDING,
                                                   layer_types=["sliding_attention", "full_attention"],
                                                   query_pre_attn_scalar=16),
                                  vision_config=dict(model_type="siglip_vision_model", hidden_size=32,
                                                     intermediate_size=64, num_hidden_layers=2,
                                                     num_attention_heads=4, image_size=16, patch_size=4,
                                                     vision_use_head=False)),
                      layer_kind_fields=["layer_types"],
                      why="Gemma 3 wrapper (Gemma3ForConditionalGeneration): the gemma3 text model (q/k norm, "
                          "[sliding, full], head_dim 16, tied) + SigLIP vision tower (16x16 image, patch 4, no "
                          "head) + avg-pool projector (4x4 patches -> mm_tokens_per_image 4, RMSNorm, matmul); "
                          "text-only measurements"),
    # Llama 4 wrapper: the llama4_text fixture's text model + the Llama 4 vision tower (unfold patch embedding, CLS
    # appended last, complex 2-D rotary, pixel-shuffle MLP adapter) + a bias-free linear projector
    "llama4": dict(model_type="llama4", head="vlm", dtype="bfloat16", id_high=124,
                   config=dict(image_token_index=127, boi_token_index=125, eoi_token_index=126,
                               tie_word_embeddings=False,
                               text_config=dict(LLAMA4_TEXT, model_type="llama4_text"),
                               vision_config=dict(model_type="llama4_vision_model", hidden_size=32,
                                                  num_attention_heads=4, num_hidden_layers=2, intermediate_size=128,
                                                  image_size=16, patch_size=4, pixel_shuffle_ratio=0.5,
                                                  projector_input_dim=64, projector_output_dim=64,
                                                  vision_output_dim=64, projector_dropout=0.0,
                                                  attention_dropout=0.0,
                                                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
                   layer_kind_fields=["layer_types", "attention_chunk_size", "no_rope_layers",
                                      "interleave_moe_layer_step", "moe_layers", "use_qk_norm"],
                   lora_all_linear_exclude=["router"],  # read by measure_images.apply_lora only
                   why="Llama 4 wrapper (Llama4ForConditionalGeneration, no .model: vision_model, "
                       "multi_modal_projector, language_model at the top level): the llama4_text model of the "
                       "llama4_text fixture (chunked attention, NoPE layer 3, MoE on layers 1 and 3) + Llama 4 "
                       "vision tower (16x16 tiles, patch 4: 16 patches + CLS, 2 layers, pixel shuffle 0.5 -> 4 "
                       "tokens per tile, MLP2 128 -> 64 -> 64) + linear projector 64 -> 32; text-only measurements"),
}
for _n, _s in NEW_FAMILIES.items():
    _s["ext"] = True
FAMILIES.update(NEW_FAMILIES)

HEADS = {"causal": AutoModelForCausalLM, "mlm": AutoModelForMaskedLM, "image": AutoModelForImageClassification,
         "bare": AutoModel, "seqcls": AutoModelForSequenceClassification, "vlm": AutoModelForImageTextToText}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHARDED_FAMILY = "llama"
SHARD_SIZE = "20KB"

SCENARIOS = {
    "eager_fp32": dict(attn="eager", prec="fp32"),
    "sdpa_fp32": dict(attn="sdpa", prec="fp32"),
    "eager_autocast_bf16": dict(attn="eager", prec="autocast_bf16"),
    "sdpa_autocast_bf16": dict(attn="sdpa", prec="autocast_bf16"),
    "sdpa_bf16_weights": dict(attn="sdpa", prec="bf16_weights"),
    "sdpa_fp32_padded": dict(attn="sdpa", prec="fp32", pad=4),
    "sdpa_fp32_gc": dict(attn="sdpa", prec="fp32", gc="default"),
    "sdpa_fp32_gc_reentrant": dict(attn="sdpa", prec="fp32", gc="reentrant"),
    "sdpa_fp32_lora_qv": dict(attn="sdpa", prec="fp32", lora="qv"),
    "sdpa_fp32_lora_all_linear": dict(attn="sdpa", prec="fp32", lora="all-linear"),
}
OPTIMIZER_SCENARIOS = ["sdpa_fp32", "sdpa_bf16_weights", "sdpa_fp32_lora_qv", "sdpa_fp32_lora_all_linear"]
# per-storage lists, backward node counts and LoRA module names at the first training point
DETAIL_SCENARIOS = ["eager_fp32", "sdpa_fp32", "sdpa_autocast_bf16", "eager_autocast_bf16", "sdpa_fp32_gc",
                    "eager_fp32_gc", "sdpa_fp32_lora_qv", "eager_fp32_lora_qv"]

METHODS = {
    "params": "sum(p.numel() for p in model.parameters()) on the model loaded from this folder; "
              "parameters() yields a tied tensor once. bytes = count x element size of the stored dtype "
              "(storage_dtype) and of fp32.",
    "safetensors": "parsed from the files' headers: tensors, sum of elements, data bytes "
                   "(sum of data_offsets spans), header bytes (the 8-byte length prefix excluded); "
                   "tied tensors are stored once, non-persistent buffers not at all.",
    "kv_cache": "model in fp32, eval, torch.no_grad(), forward(input_ids[B,S], use_cache=True); every "
                "torch.Tensor reachable from the returned cache object (attributes, lists, dicts; "
                "configs skipped) is collected; storage_bytes counts each untyped storage once at "
                "nbytes() (a view pins its whole base), view_bytes = sum of numel*element_size of the "
                "key/value tensors as the cache exposes them.",
    "saved": "one training forward (model.train(), use_cache=False, labels given, loss computed by the "
             "model) under torch.autograd.graph.saved_tensors_hooks; each packed tensor's untyped storage "
             "is deduplicated by data_ptr() and counted once at nbytes(). Classes: parameter (storage of a "
             "model parameter), buffer, input (input_ids / labels / pixel_values storages), "
             "autocast_weight_copy (a bf16 storage equal element-for-element to a parameter cast to bf16), "
             "activation (everything else: op outputs and new tensors). activation_bytes is the number to "
             "predict; the other classes are reported separately.",
    "allocator": "torch.profiler(profile_memory=True) CPU memory events of the c10 allocator, in time order: "
                 "net = bytes allocated minus freed inside the window, peak = max running sum. forward window: "
                 "model call + loss, model outputs other than loss dropped inside the window (what remains is "
                 "what the graph keeps alive: saved storages, checkpoint RNG states, the loss). backward "
                 "window: loss.backward(); its peak is measured above the live bytes at its start and "
                 "includes parameter gradients (created during backward) and temporaries.",
    "optimizer": "torch.optim.AdamW(trainable params, lr=1e-3, defaults: foreach on CPU not used, "
                 "non-capturable) after one loss.backward() and one opt.step(); state bytes = every tensor in "
                 "opt.state (exp_avg, exp_avg_sq: param dtype and shape; step: 0-dim float32 CPU tensor).",
}


# ---------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------
def storage_key(t: torch.Tensor):
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def dtype_name(d: torch.dtype) -> str:
    return str(d).replace("torch.", "")


def read_safetensors_header(path: Path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return n, header


ST_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
            "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


def safetensors_summary(folder: Path):
    files = sorted(folder.glob("*.safetensors"))
    out = {"files": [], "tensors": 0, "elements": 0, "data_bytes": 0, "header_bytes": 0, "by_dtype": {},
           "names": {}}
    for f in files:
        n, header = read_safetensors_header(f)
        data = 0
        cnt = 0
        for name, info in header.items():
            if name == "__metadata__":
                continue
            numel = math.prod(info["shape"])
            span = info["data_offsets"][1] - info["data_offsets"][0]
            assert span == numel * ST_SIZES[info["dtype"]], (name, info)
            out["tensors"] += 1
            cnt += 1
            out["elements"] += numel
            data += span
            d = out["by_dtype"].setdefault(info["dtype"], {"tensors": 0, "elements": 0, "bytes": 0})
            d["tensors"] += 1
            d["elements"] += numel
            d["bytes"] += span
            out["names"][name] = [info["dtype"], info["shape"], f.name]
        out["data_bytes"] += data
        out["header_bytes"] += n
        out["files"].append({"file": f.name, "tensors": cnt, "header_bytes": n, "data_bytes": data,
                             "file_bytes": f.stat().st_size, "metadata": header.get("__metadata__")})
    return out


def folder_files(folder: Path):
    return {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file() and p.name != "expected.json"}


def make_config(spec):
    cfg = AutoConfig.for_model(spec["model_type"], **spec["config"])
    return cfg


def _llama4_image_outputs(module, args, output):
    """transformers 5.24's Llama4ForConditionalGeneration.forward ends with image_outputs=outputs.image_outputs, an
    attribute its language model's output (MoeCausalLMOutputWithPast) does not have: every call raises
    AttributeError after the loss is computed. This forward hook on the language model gives its output the
    attribute (None: nothing is kept alive by it, no tensor is created or saved), so the wrapper returns."""
    if not hasattr(output, "image_outputs"):
        output.image_outputs = None
    return output


def load(folder: Path, spec, attn="sdpa", dtype=torch.float32):
    cls = HEADS[spec["head"]]
    model = cls.from_pretrained(folder, dtype=dtype, attn_implementation=attn, local_files_only=True)
    if type(model).__name__ == "Llama4ForConditionalGeneration":
        model.language_model.register_forward_hook(_llama4_image_outputs)
    return model


def make_inputs(spec, cfg, B, S, seed=1):
    g = torch.Generator().manual_seed(seed)
    if spec["head"] == "image":
        px = torch.randn(B, cfg.num_channels, cfg.image_size, cfg.image_size, generator=g)
        labels = torch.randint(0, cfg.num_labels, (B,), generator=g)
        return {"pixel_values": px, "labels": labels}
    vocab = getattr(cfg, "vocab_size", None) or cfg.get_text_config(decoder=True).vocab_size
    ids = torch.randint(3, spec.get("id_high", vocab), (B, S), generator=g)  # no pad/bos/eos (or image) ids
    if spec["head"] == "bare":
        return {"input_ids": ids}
    if spec["head"] == "seqcls":
        return {"input_ids": ids, "labels": torch.randint(0, cfg.num_labels, (B,), generator=g)}
    return {"input_ids": ids, "labels": ids.clone()}


def seq_tokens(spec, cfg, S):
    if spec["head"] == "image":
        return (cfg.image_size // cfg.patch_size) ** 2 + 1
    return S


# ---------------------------------------------------------------------------------------------------
# build and save
# ---------------------------------------------------------------------------------------------------
def build(name, spec, out: Path):
    folder = out / name
    if folder.exists():
        for p in folder.iterdir():
            if p.name != "expected.json":
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
    folder.mkdir(parents=True, exist_ok=True)
    cfg = make_config(spec)
    torch.manual_seed(SEED)
    model = HEADS[spec["head"]].from_config(cfg, dtype=torch.float32)
    model.to(DTYPES[spec["dtype"]])
    model.save_pretrained(folder)
    if name == SHARDED_FAMILY:
        sharded = out / f"{name}-sharded"
        if sharded.exists():
            for p in sharded.iterdir():
                if p.name != "expected.json":
                    p.unlink()
        sharded.mkdir(exist_ok=True)
        model.save_pretrained(sharded, max_shard_size=SHARD_SIZE)
    return folder


# ---------------------------------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------------------------------
def param_info(model, spec, cfg):
    info = param_info_base(model, spec)
    moe = moe_info(model, spec, cfg)
    if moe:
        info["moe"] = moe
    return info


def param_info_base(model, spec):
    params = list(model.parameters())
    count = sum(p.numel() for p in params)
    stored = DTYPES[spec["dtype"]]
    esz = torch.empty(0, dtype=stored).element_size()
    groups = collections.defaultdict(list)
    for n, p in model.named_parameters(remove_duplicate=False):
        groups[p.data_ptr()].append(n)
    tied = [names for names in groups.values() if len(names) > 1]
    sd_keys = set(model.state_dict().keys())
    bufs = []
    for n, b in model.named_buffers(remove_duplicate=False):
        bufs.append({"name": n, "shape": list(b.shape), "dtype": dtype_name(b.dtype),
                     "persistent": n in sd_keys})
    info = {
        "count": count,
        "tensors": len(params),
        "bytes_stored_dtype": count * esz,
        "bytes_fp32": count * 4,
        "storage_dtype": spec["dtype"],
        "tied": tied,
        "buffers": bufs,
        "buffer_elements": sum(math.prod(b["shape"]) for b in bufs),
        "persistent_buffer_elements": sum(math.prod(b["shape"]) for b in bufs if b["persistent"]),
        "method": METHODS["params"],
    }
    return info


def moe_info(model, spec, cfg):
    E = getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None)
    if not E:
        return None
    k = cfg.num_experts_per_tok
    H = cfg.hidden_size
    L = cfg.num_hidden_layers
    if spec["model_type"] == "mixtral":
        I = cfg.intermediate_size
        per_expert = 3 * H * I
        shared = 0
        how = ("mixtral: expert = w1 [I,H] + w3 [I,H] + w2 [H,I] = 3*H*I = 3*%d*%d = %d; router gate [E,H] "
               "always active; no shared expert" % (H, I, per_expert))
    else:
        I = cfg.moe_intermediate_size
        per_expert = 3 * H * I
        S = getattr(cfg, "shared_expert_intermediate_size", 0) or 0
        shared = 3 * H * S + H if S else 0
        how = ("%s: routed expert = 3*H*moe_intermediate = 3*%d*%d = %d; shared expert 3*H*%d plus "
               "shared_expert_gate [1,H] = %d, always active; router gate [E,H] always active"
               % (spec["model_type"], H, I, per_expert, S, shared))
    # blocks that route (Qwen-MoE's mlp_only_layers and decoder_sparse_step; every block otherwise)
    dense = set(getattr(cfg, "mlp_only_layers", None) or [])
    step = getattr(cfg, "decoder_sparse_step", 1) or 1
    L = sum(1 for i in range(L) if i not in dense and (i + 1) % step == 0)
    total = sum(p.numel() for p in model.parameters())
    expert_params = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n or n.endswith(".experts"))
    by_hand_experts = L * E * per_expert
    active = total - L * (E - k) * per_expert
    return {
        "num_experts": E, "top_k": k, "layers": L,
        "params_per_expert": per_expert,
        "routed_expert_params_total": by_hand_experts,
        "routed_expert_params_from_model": expert_params,
        "shared_params_per_layer_always_active": shared,
        "total_params": total,
        "active_params_per_token": active,
        "method": "by hand from the config: active = total - layers*(E - top_k)*params_per_expert, i.e. "
                  "everything (embeddings, lm_head, attention, norms, router, shared expert) plus top_k "
                  "routed experts per layer. " + how + ". routed_expert_params_from_model sums parameters "
                  "whose name contains '.experts.' (fused 3-D expert tensors in transformers 5) as a check.",
    }


# ---------------------------------------------------------------------------------------------------
# KV cache
# ---------------------------------------------------------------------------------------------------
def collect_tensors(obj, path="cache", seen=None, out=None, depth=0):
    if seen is None:
        seen, out = set(), []
    if isinstance(obj, torch.Tensor):
        out.append((path, obj))
        return out
    if depth > 8 or id(obj) in seen or obj is None or isinstance(obj, (int, float, str, bool, type)):
        return out
    if isinstance(obj, transformers.PreTrainedConfig):
        return out
    seen.add(id(obj))
    if isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            collect_tensors(x, f"{path}[{i}]", seen, out, depth + 1)
    elif isinstance(obj, dict):
        for k, x in obj.items():
            collect_tensors(x, f"{path}[{k!r}]", seen, out, depth + 1)
    elif hasattr(obj, "__dict__"):
        for k, x in vars(obj).items():
            collect_tensors(x, f"{path}.{k}", seen, out, depth + 1)
    return out


def _seq_length(cache):
    try:
        return cache.get_seq_length() if hasattr(cache, "get_seq_length") else None
    except ValueError:  # a cache of linear-attention (state) layers only, e.g. Mamba-2
        return None


def cache_summary(cache):
    tensors = collect_tensors(cache)
    storages = {}
    kv_view = 0
    other = []
    for path, t in tensors:
        key = storage_key(t)
        storages.setdefault(key[0], key[1])
        if path.endswith(".keys") or path.endswith(".values"):
            kv_view += t.numel() * t.element_size()
        else:
            other.append({"path": path, "shape": list(t.shape), "dtype": dtype_name(t.dtype),
                          "bytes": t.numel() * t.element_size()})
    layers = []
    for i, layer in enumerate(getattr(cache, "layers", [])):
        k, v = getattr(layer, "keys", None), getattr(layer, "values", None)
        entry = {"index": i, "class": type(layer).__name__,
                 "is_sliding": bool(getattr(layer, "is_sliding", False)),
                 "sliding_window": getattr(layer, "sliding_window", None)}
        if isinstance(k, torch.Tensor):
            entry.update(keys_shape=list(k.shape), values_shape=list(v.shape), dtype=dtype_name(k.dtype),
                         keys_view_bytes=k.numel() * k.element_size(),
                         values_view_bytes=v.numel() * v.element_size(),
                         keys_storage_bytes=k.untyped_storage().nbytes(),
                         values_storage_bytes=v.untyped_storage().nbytes(),
                         keys_storage_elements_tokens=k.untyped_storage().nbytes()
                         // (k.element_size() * k.shape[0] * k.shape[1] * k.shape[3]))
        layers.append(entry)
    return {
        "class": type(cache).__name__,
        "seq_length": _seq_length(cache),
        "storage_bytes": sum(storages.values()),
        "storages": len(storages),
        "kv_view_bytes": kv_view,
        "kv_storage_bytes": sum(l.get("keys_storage_bytes", 0) + l.get("values_storage_bytes", 0) for l in layers),
        "other_tensors": other,
        "layers": layers,
    }


def measure_kv(folder, spec, cfg):
    if spec["head"] != "causal":
        return {"applicable": False, "why": "encoder-only model: no KV cache"}
    model = load(folder, spec, attn=spec["default_attn"], dtype=torch.float32).eval()
    res = {"applicable": True, "method": METHODS["kv_cache"], "model_dtype": "float32",
           "attn_implementation": spec["default_attn"], "points": []}
    L = cfg.num_hidden_layers
    kvh = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if getattr(cfg, "sliding_window", None) and (getattr(cfg, "use_sliding_window", True) is not False):
        res["sliding_window_note"] = (
            "DynamicCache(config) gives sliding layers a DynamicSlidingWindowLayer, which keeps "
            "full[:, :, -window+1:, :] of the concatenated states: the view holds window-1 tokens, but after "
            "prefill it is a view of the whole S-token tensor, so the storage still holds S tokens "
            "(keys_storage_elements_tokens); after one decode step the storage is window tokens. Each sliding "
            "layer also holds an int64 scalar _sliding_window_tensor (8 B).")
    res["dims"] = {"layers": L, "kv_heads": kvh, "head_dim": hd,
                   "sliding_window": getattr(cfg, "sliding_window", None),
                   "layer_types": getattr(cfg, "layer_types", None)}
    for B, S in KV_POINTS:
        inp = make_inputs(spec, cfg, B, S)
        with torch.no_grad():
            out = model(input_ids=inp["input_ids"], use_cache=True)
            cache = out.cache
            pre = cache_summary(cache)
            pre.update(batch=B, seq=S, phase="prefill")
            pre["full_formula_bytes"] = 2 * L * B * kvh * S * hd * 4
            pre["full_formula"] = "2 (k,v) * layers * B * kv_heads * S * head_dim * 4 B"
            res["points"].append(pre)
            nxt = torch.randint(3, cfg.vocab_size, (B, 1), generator=torch.Generator().manual_seed(7))
            out2 = model(input_ids=nxt, cache=cache, use_cache=True)
            dec = cache_summary(out2.cache)
            dec.update(batch=B, seq=S + 1, phase="prefill S tokens then decode 1 token")
            res["points"].append(dec)
        del out, out2, cache
    return res


# ---------------------------------------------------------------------------------------------------
# saved for backward
# ---------------------------------------------------------------------------------------------------
class _Holder:
    __slots__ = ("t", "idx", "func", "__weakref__")

    def __init__(self, t, idx, func):
        self.t, self.idx, self.func = t, idx, func


class FuncTracker(TorchFunctionMode):
    """Remembers the outermost torch function being run, so a saved tensor can be attributed to it."""

    def __init__(self):
        super().__init__()
        self.stack = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", None) or str(func)
        self.stack.append(name)
        try:
            return func(*args, **(kwargs or {}))
        finally:
            self.stack.pop()


@contextlib.contextmanager
def quiet_stderr():
    """Kineto prints start/stop lines on fd 2 from C++; hide them."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class AllocTrace:
    def __init__(self):
        self.prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)

    def __enter__(self):
        gc.collect()  # objects of an earlier model must not be freed inside the window
        with quiet_stderr():
            self.prof.__enter__()
        return self

    def __exit__(self, *exc):
        with quiet_stderr():
            self.prof.__exit__(*exc)
        evs = sorted((e.start_ns(), e.nbytes()) for e in self.prof.profiler.kineto_results.events()
                     if e.name() == "[memory]")
        cum = peak = 0
        for _, n in evs:
            cum += n
            peak = max(peak, cum)
        self.net, self.peak, self.events = cum, peak, len(evs)
        del self.prof
        return False


def node_walk(root):
    seen, order, stack = set(), [], [root]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        order.append(n)
        for nxt, _ in n.next_functions:
            if nxt is not None:
                stack.append(nxt)
    return order


def lora_targets(model, kind):
    """["q_proj", "v_proj"] where the model has them, else the family's fused/renamed equivalent."""
    if kind == "all-linear":
        return "all-linear"
    leaves = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    for cand in (["q_proj", "v_proj"], ["query", "value"], ["qkv_proj"], ["query_key_value"], ["c_attn"]):
        if set(cand) <= leaves:
            return cand
    raise ValueError("no q/v projection found")


def measure_scenario(folder, spec, cfg, sc_name, sc, B, S, detail=False, with_optimizer=False):
    torch.manual_seed(SEED)
    dtype = torch.bfloat16 if sc["prec"] == "bf16_weights" else torch.float32
    model = load(folder, spec, attn=sc["attn"], dtype=dtype)
    model.train()
    result = {"batch": B, "seq": S, "tokens_per_sequence": seq_tokens(spec, cfg, S),
              "attn_implementation": model.config._attn_implementation,
              "weights_dtype": dtype_name(dtype), "autocast": sc["prec"] == "autocast_bf16"}
    if sc.get("gc"):
        kw = {"use_reentrant": True} if sc["gc"] == "reentrant" else None
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
        result["gradient_checkpointing"] = {"kwargs_passed": kw, "use_reentrant": sc["gc"] == "reentrant"}
    if sc.get("lora"):
        from peft import LoraConfig, get_peft_model
        targets = (spec["lora_qv_targets"] if sc["lora"] == "qv" and spec.get("lora_qv_targets")
                   else lora_targets(model, sc["lora"]))
        task = "CAUSAL_LM" if spec["head"] == "causal" else None
        lcfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets, task_type=task)
        model = get_peft_model(model, lcfg)
        lora_modules = sorted(n for n, m in model.named_modules() if hasattr(m, "lora_A") and len(m.lora_A))
        result["lora"] = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": targets,
                          "wrapped_modules": len(lora_modules)}
        if detail:
            result["lora"]["wrapped_module_names"] = [n.split("base_model.model.", 1)[-1] for n in lora_modules]
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    result["trainable_params"] = sum(p.numel() for p in trainable)
    result["trainable_tensors"] = len(trainable)
    result["total_params"] = sum(p.numel() for p in model.parameters())

    param_ptrs = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters(remove_duplicate=False)}
    buf_ptrs = {b.untyped_storage().data_ptr(): n for n, b in model.named_buffers(remove_duplicate=False)}
    inputs = make_inputs(spec, cfg, B, S)
    if sc.get("pad") and spec["head"] != "image":
        mask = torch.ones(B, S, dtype=torch.long)
        mask[-1, -sc["pad"]:] = 0  # right padding of the last sequence
        inputs["attention_mask"] = mask
        result["attention_mask"] = f"int64 [B,S], last {sc['pad']} positions of the last sequence are 0"
    input_ptrs = {t.untyped_storage().data_ptr(): k for k, t in inputs.items()}
    autocast = sc["prec"] == "autocast_bf16"
    casts = collections.defaultdict(list)
    if autocast:
        for n, p in model.named_parameters():
            if p.is_floating_point() and p.dim() >= 1:
                casts[p.numel()].append((n, p.detach().to(torch.bfloat16).reshape(-1)))

    tracker = FuncTracker()
    holders = []

    def pack(t):
        h = _Holder(t, len(holders), tracker.stack[-1] if tracker.stack else "<none>")
        holders.append(weakref.ref(h))
        return h

    last = []

    def unpack(h):
        last.append(h.idx)
        return h.t

    kwargs = dict(inputs)
    # decoders are trained without a KV cache (use_cache=True would keep copies of every layer's
    # keys and values for the whole step)
    if spec["head"] in ("causal", "vlm") or (spec["head"] == "seqcls" and spec["model_type"] not in ("bert", "roberta")):
        kwargs["use_cache"] = False
    ac = torch.autocast("cpu", dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    with AllocTrace() as fwd:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack), tracker, ac:
            out = model(**kwargs)
            if spec["head"] == "bare":
                # a bare model has no loss: the sums keep nothing for backward
                loss = out.last_hidden_state.sum()
                if getattr(out, "pooler_output", None) is not None:
                    loss = loss + out.pooler_output.sum()
            else:
                loss = out.loss
        del out

    # attribution to backward nodes (not under checkpointing: unpacking there would trigger recomputation)
    nodes = node_walk(loss.grad_fn)
    if detail:
        result["backward_nodes"] = " ".join(
            f"{k}:{v}" for k, v in sorted(collections.Counter(type(n).__name__ for n in nodes).items()))
    savers = collections.defaultdict(set)
    if not sc.get("gc"):
        for n in nodes:
            nm = type(n).__name__
            attrs = [a for a in dir(n) if a.startswith("_saved_")]
            for a in attrs:
                last.clear()
                try:
                    getattr(n, a)
                except Exception:
                    pass
                for idx in last:
                    savers[idx].add(f"{nm}.{a[len('_saved_'):]}")
            if hasattr(n, "saved_tensors") and not attrs:
                last.clear()
                try:
                    n.saved_tensors
                except Exception:
                    pass
                for idx in last:
                    savers[idx].add(f"{nm}.saved_tensors")
        last.clear()

    storages = {}
    for ref in holders:
        h = ref()
        if h is None:
            continue
        t = h.t
        s = t.untyped_storage()
        ptr, nb = s.data_ptr(), s.nbytes()
        if nb == 0:
            continue
        e = storages.get(ptr)
        if e is None:
            if ptr in param_ptrs:
                cat, what = "parameter", param_ptrs[ptr]
            elif ptr in buf_ptrs:
                cat, what = "buffer", buf_ptrs[ptr]
            elif ptr in input_ptrs:
                cat, what = "input", input_ptrs[ptr]
            else:
                cat, what = "activation", None
                if autocast and t.dtype == torch.bfloat16 and nb % 2 == 0:
                    flat = torch.empty(0, dtype=torch.bfloat16).set_(s)
                    for pn, pc in casts.get(flat.numel(), []):
                        if torch.equal(flat, pc):
                            cat, what = "autocast_weight_copy", pn
                            break
            e = storages[ptr] = {"bytes": nb, "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                                 "category": cat, "of": what, "savers": set(), "funcs": set(), "tensors": 0}
        e["tensors"] += 1
        e["funcs"].add(h.func)
        e["savers"] |= savers.get(h.idx, set())
        del t, s
    del h

    by_cat = collections.Counter()
    n_cat = collections.Counter()
    by_dtype = collections.Counter()
    by_saver = collections.Counter()
    by_func = collections.Counter()
    for e in storages.values():
        by_cat[e["category"]] += e["bytes"]
        n_cat[e["category"]] += 1
        if e["category"] == "activation":
            by_dtype[e["dtype"]] += e["bytes"]
            by_saver[" + ".join(sorted(e["savers"])) or "?"] += e["bytes"]
            by_func[" + ".join(sorted(e["funcs"]))] += e["bytes"]
    result["saved"] = {
        "activation_bytes": by_cat["activation"],
        "activation_storages": n_cat["activation"],
        "parameter_bytes": by_cat["parameter"],
        "buffer_bytes": by_cat["buffer"],
        "input_bytes": by_cat["input"],
        "autocast_weight_copy_bytes": by_cat["autocast_weight_copy"],
        "storages": dict(n_cat),
        "packed_tensors": sum(1 for r in holders if r() is not None),
        "activation_bytes_by_dtype": dict(by_dtype),
        "activation_bytes_by_saver": dict(sorted(by_saver.items(), key=lambda kv: -kv[1])) if not sc.get("gc") else
        "not attributed under checkpointing (reading a saved tensor of a checkpointed region would recompute it)",
        "activation_bytes_by_torch_function": dict(sorted(by_func.items(), key=lambda kv: -kv[1])),
    }
    if detail:
        groups = collections.Counter()
        for e in storages.values():
            if e["category"] == "parameter":
                continue
            who = " + ".join(sorted(e["savers"])) or "torch fn: " + " + ".join(sorted(e["funcs"]))
            groups[(e["category"], e["bytes"], e["dtype"], tuple(e["shape"]), who, e["of"] or "")] += 1
        result["saved"]["storages_detail_columns"] = ["count", "category", "bytes_each", "dtype", "shape",
                                                      "savers", "of"]
        result["saved"]["storages_detail"] = [
            [n, c, b, d, list(sh), sv] + ([of] if of else [])
            for (c, b, d, sh, sv, of), n in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[0][1], kv[0][4]))]
    storages.clear()
    casts.clear()

    with AllocTrace() as bwd:
        loss.backward()
    grads = {}
    for p in model.parameters():
        if p.grad is not None:
            grads.setdefault(p.grad.untyped_storage().data_ptr(), p.grad.untyped_storage().nbytes())
    result["allocator"] = {
        "forward_net_bytes": fwd.net, "forward_peak_bytes": fwd.peak,
        "backward_peak_above_start_bytes": bwd.peak, "backward_net_bytes": bwd.net,
        "step_peak_above_weights_bytes": max(fwd.peak, fwd.net + bwd.peak),
        "gradient_bytes": sum(grads.values()),
        # what the forward left allocated that the saved-tensor hooks did not see (0 without checkpointing;
        # with checkpointing: CPU RNG states and tensors held by the checkpoint closures)
        "forward_net_not_in_saved_bytes": fwd.net - result["saved"]["activation_bytes"]
        - result["saved"]["autocast_weight_copy_bytes"] - loss.numel() * loss.element_size(),
    }
    result["loss"] = float(loss.detach())
    if with_optimizer:
        opt = torch.optim.AdamW(trainable, lr=1e-3)
        with AllocTrace() as st:
            opt.step()
        seen = {}
        kinds = collections.Counter()
        dts = set()
        for p, state in opt.state.items():
            for k, v in state.items():
                if isinstance(v, torch.Tensor):
                    key = v.untyped_storage().data_ptr()
                    if key not in seen:
                        seen[key] = v.untyped_storage().nbytes()
                        kinds[k] += seen[key]
                        dts.add(f"{k}:{dtype_name(v.dtype)}{list(v.shape) if v.dim() == 0 else ''}")
        pb = sum(p.numel() * p.element_size() for p in trainable)
        result["optimizer"] = {
            "class": "AdamW", "state_bytes": sum(seen.values()), "by_kind": dict(kinds),
            "dtypes": sorted(dts), "trainable_param_bytes": pb, "trainable_tensors": len(trainable),
            "formula": "2 * trainable_param_bytes (exp_avg, exp_avg_sq in the param dtype) + 4 * trainable_tensors "
                       "(step) = %d" % (2 * pb + 4 * len(trainable)),
            "step_allocator_net_bytes": st.net, "step_allocator_peak_bytes": st.peak,
        }
    del loss, model, trainable
    return result


def measure_training(folder, spec, cfg, scenarios, sdpa_error=None):
    res = {"method": {"saved": METHODS["saved"], "allocator": METHODS["allocator"],
                      "optimizer": METHODS["optimizer"],
                      "step_peak_above_weights": "max(forward peak, forward net + backward peak); gradients are "
                                                 "part of the backward peak"},
           "loss_fn": ("cross_entropy over the logits, shifted inside the model, from labels = input_ids"
                       if spec["head"] == "causal" else
                       "masked-LM head (BertForMaskedLM-style) cross_entropy with labels = input_ids at every "
                       "position" if spec["head"] == "mlm" else
                       "no head (BertModel): loss = last_hidden_state.sum() + pooler_output.sum(), which saves "
                       "nothing" if spec["head"] == "bare" else
                       "BertForSequenceClassification cross_entropy on the pooled [CLS] logits, 3 labels"
                       if spec["head"] == "seqcls" else
                       "ViTForImageClassification cross_entropy on the [CLS] logits, 10 labels"),
           "inputs": ("input_ids int64 [B,S] uniform in [3, vocab), labels a separate copy; no attention_mask "
                      "(all tokens valid; HF then uses is_causal / no mask where it can) except in *_padded, "
                      "which passes an int64 attention_mask with the last sequence right-padded"
                      if spec["head"] != "image" else "pixel_values fp32 [B,3,16,16], labels int64 [B]"),
           "gradient_checkpointing_default": "transformers %s gradient_checkpointing_enable() without kwargs "
                                             "passes use_reentrant=False to torch.utils.checkpoint"
                                             % transformers.__version__,
           "points": [{"batch": B, "seq": S} for B, S in TRAIN_POINTS],
           "cpu_vs_cuda": "measured on CPU. SDPA here is ScaledDotProductFlashAttentionForCpuBackward0 (q, k, v, "
                          "output, fp32 logsumexp; no SxS matrix; a given mask is saved as a float [B,1,S,S]); "
                          "with dropout_p > 0 (the *_dropout families) CPU SDPA runs the math path instead, which "
                          "saves q*s, k*s, the probabilities, the noise, the dropped probabilities and v, all fp32. "
                          "On CUDA the flash/efficient/cuDNN kernels also save no SxS matrix (plus an RNG state); "
                          "CUDA autocast additionally runs norms/softmax/log_softmax in fp32; dropout (0 but in the "
                          "*_dropout families) would save a bool mask on CUDA instead of scaled noise on CPU.",
           "summary_activation_bytes": {}, "scenarios": {}}
    for name in scenarios:
        sc = SCENARIOS[name]
        if sc.get("pad") and spec["head"] == "image":
            res["scenarios"][name] = {"config": sc, "not_applicable": "images have no attention mask"}
            continue
        if sdpa_error and sc["attn"] == "sdpa":
            eager_name = name.replace("sdpa_", "eager_")
            if eager_name in SCENARIOS:
                res["scenarios"][name] = {"config": sc, "unsupported": sdpa_error}
                continue
            # no eager twin in the list: run it with eager attention under the eager name
            res["scenarios"][name] = {"config": sc, "unsupported": sdpa_error, "see": eager_name}
            name, sc = eager_name, dict(sc, attn="eager")
        runs = []
        for i, (B, S) in enumerate(TRAIN_POINTS):
            try:
                r = measure_scenario(folder, spec, cfg, name, sc, B, S,
                                     detail=(i == 0 and name in DETAIL_SCENARIOS),
                                     with_optimizer=(i == 0 and name.replace("eager_", "sdpa_")
                                                     in OPTIMIZER_SCENARIOS))
            except Exception as exc:  # record, don't stop the whole run
                r = {"batch": B, "seq": S, "error": f"{type(exc).__name__}: {exc}"}
            runs.append(r)
        res["scenarios"][name] = {"config": sc, "runs": runs}
        res["summary_activation_bytes"][name] = [r["saved"]["activation_bytes"] if "saved" in r else None
                                                 for r in runs]
    return res


# ---------------------------------------------------------------------------------------------------
def summarize_config(cfg):
    keys = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "sliding_window", "layer_types", "tie_word_embeddings", "attention_bias", "num_local_experts",
            "num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
            "attn_logit_softcapping", "final_logit_softcapping", "n_embd", "n_layer", "n_head", "n_inner",
            "n_positions", "image_size", "patch_size", "num_channels", "num_labels", "type_vocab_size",
            "use_sliding_window"]
    d = cfg.to_dict()
    out = {k: d[k] for k in keys if k in d and d[k] is not None}
    if "rope_parameters" in d:
        out["rope_parameters"] = d["rope_parameters"]
    return out


def run_family(name, spec, out: Path, train=True, scenarios=None):
    folder = build(name, spec, out)
    cfg = AutoConfig.from_pretrained(folder, local_files_only=True)
    sdpa_error = None
    try:
        model = load(folder, spec, attn="sdpa", dtype=torch.float32)
    except ValueError as exc:
        sdpa_error = str(exc).split(". Please")[0]
        model = load(folder, spec, attn="eager", dtype=torch.float32)
    spec = dict(spec, default_attn="eager" if sdpa_error else "sdpa")
    exp = {
        "family": name,
        "generated_by": "tools/llm/measure.py",
        "versions": VERSIONS,
        "device": "cpu",
        "seed": SEED,
        "what": spec["why"],
        "model_class": type(model).__name__,
        "sdpa_supported": sdpa_error is None,
        **({"sdpa_error": sdpa_error} if sdpa_error else {}),
        "storage_dtype": spec["dtype"],
        "config": summarize_config(cfg),
        "files": folder_files(folder),
        "safetensors": dict(safetensors_summary(folder), method=METHODS["safetensors"]),
        "params": param_info(model, spec, cfg),
    }
    if getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None):
        exp["params"]["moe"]["experts_implementation"] = getattr(model.config, "_experts_implementation_internal",
                                                                 getattr(model.config, "_experts_implementation", None))
        exp["params"]["moe"]["routing_at_first_training_point"] = routing_counts(model, spec, cfg)
    del model
    exp["kv_cache"] = measure_kv(folder, spec, cfg)
    if train:
        exp["training"] = measure_training(folder, spec, cfg, scenarios or list(SCENARIOS), sdpa_error)
    write_json(folder / "expected.json", exp)
    if name == SHARDED_FAMILY:
        sh = out / f"{name}-sharded"
        idx = json.loads((sh / "model.safetensors.index.json").read_text())
        write_json(sh / "expected.json", {
            "family": name, "generated_by": "tools/llm/measure.py", "versions": VERSIONS,
            "what": f"the same weights as ../{name}/ saved with save_pretrained(max_shard_size={SHARD_SIZE!r})",
            "storage_dtype": spec["dtype"],
            "files": folder_files(sh),
            "index_total_size": idx["metadata"].get("total_size"),
            "index_total_size_method": "metadata.total_size of model.safetensors.index.json as written by "
                                       "transformers: the sum of tensor data bytes (headers excluded)",
            "safetensors": dict(safetensors_summary(sh), method=METHODS["safetensors"]),
            "params": {"count": exp["params"]["count"], "bytes_stored_dtype": exp["params"]["bytes_stored_dtype"],
                       "same_as": f"../{name}/expected.json"},
        })
    return exp


def routing_counts(model, spec, cfg):
    B, S = TRAIN_POINTS[0]
    inp = make_inputs(spec, cfg, B, S)
    got = []
    hooks = []
    for n, m in model.named_modules():
        if type(m).__name__.endswith("TopKRouter"):
            hooks.append(m.register_forward_hook(lambda mod, a, o, n=n: got.append((n, o[2].detach().clone()))))
    with torch.no_grad():
        model(input_ids=inp["input_ids"], use_cache=False)
    for h in hooks:
        h.remove()
    E = getattr(cfg, "num_local_experts", None) or cfg.num_experts
    return {n: torch.bincount(idx.reshape(-1), minlength=E).tolist() for n, idx in got} | {
        "note": f"tokens routed to each expert (B={B}, S={S}, top_k={cfg.num_experts_per_tok}): expert "
                "activations saved for backward scale with these counts"}


# ---------------------------------------------------------------------------------------------------
# the ext path (NEW_FAMILIES)
# ---------------------------------------------------------------------------------------------------
def text_config(cfg):
    return cfg.get_text_config(decoder=True)


def layer_tensors(obj, prefix="", depth=0):
    """(attribute path, tensor) for every tensor a cache layer holds in its attributes (dicts/lists followed)."""
    out = []
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if depth > 3:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += layer_tensors(v, f"{prefix}[{k!r}]", depth + 1)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out += layer_tensors(v, f"{prefix}[{i}]", depth + 1)
    elif depth == 0 and hasattr(obj, "__dict__"):
        for k, v in vars(obj).items():
            out += layer_tensors(v, k, depth + 1)
    return out


def layers_detail(cache, tc):
    """Per cache layer: its class, the layer kind the config gives it, and every tensor it holds."""
    kinds = getattr(tc, "layer_types", None) or getattr(tc, "layers_block_type", None)
    rows = []
    seen = set()
    for i, layer in enumerate(getattr(cache, "layers", [])):
        tens = []
        for path, t in layer_tensors(layer):
            st = t.untyped_storage()
            key = (st.data_ptr(), st.nbytes())
            tens.append({"attr": path, "shape": list(t.shape), "dtype": dtype_name(t.dtype),
                         "view_bytes": t.numel() * t.element_size(), "storage_bytes": st.nbytes(),
                         **({"storage_counted_before": True} if key in seen else {})})
            seen.add(key)
        rows.append({"index": i, "class": type(layer).__name__,
                     "mro": [c.__name__ for c in type(layer).__mro__[1:] if c.__name__ not in ("object", "ABC")],
                     "config_kind": kinds[i] if kinds and i < len(kinds) else None,
                     "tensors": tens,
                     "storage_bytes": sum(t["storage_bytes"] for t in tens if not t.get("storage_counted_before")),
                     "view_bytes": sum(t["view_bytes"] for t in tens)})
    return rows


def measure_kv_ext(folder, spec, cfg):
    tc = text_config(cfg)
    res = {"applicable": True, "method": METHODS["kv_cache"] + " layers_detail: per cache layer, every tensor "
           "attribute of the layer object (keys, values, conv_states, recurrent_states, _sliding_window_tensor, "
           "...), its shape, dtype, bytes as exposed (view) and of its whole storage; a storage already counted "
           "in an earlier entry is flagged.",
           "model_dtype": "float32", "attn_implementation": spec["default_attn"], "points": []}
    L = tc.num_hidden_layers
    kvh = getattr(tc, "num_key_value_heads", None) or getattr(tc, "num_attention_heads", None)
    hd = getattr(tc, "head_dim", None) or (tc.hidden_size // tc.num_attention_heads
                                           if getattr(tc, "num_attention_heads", None) else None)
    res["dims"] = {"layers": L, "kv_heads": kvh, "head_dim": hd,
                   "sliding_window": getattr(tc, "sliding_window", None),
                   "attention_chunk_size": getattr(tc, "attention_chunk_size", None),
                   "layer_types": getattr(tc, "layer_types", None)}
    res["sliding_window_note"] = (
        "sliding_attention and chunked_attention layers are both DynamicSlidingWindowLayer (window = sliding_window "
        "or attention_chunk_size): the view keeps window-1 tokens, the storage after prefill is the whole S-token "
        "tensor, after one decode step window tokens. LinearAttentionLayer (conv / linear_attention / mamba "
        "layers) holds conv_states [B, channels, kernel] and recurrent_states of fixed size, independent of S.")
    for dtype in ("float32", "bfloat16"):
        model = load(folder, spec, attn=spec["default_attn"], dtype=DTYPES[dtype]).eval()
        points = KV_POINTS if dtype == "float32" else KV_POINTS[:1]
        for B, S in points:
            inp = make_inputs(spec, cfg, B, S)
            with torch.no_grad():
                out = model(input_ids=inp["input_ids"], use_cache=True)
                cache = out.cache
                pre = cache_summary(cache)
                pre["layers_detail"] = layers_detail(cache, tc)
                pre.update(batch=B, seq=S, phase="prefill", model_dtype=dtype)
                if kvh and hd:
                    pre["full_formula_bytes"] = 2 * L * B * kvh * S * hd * DTYPES[dtype].itemsize
                    pre["full_formula"] = ("2 (k,v) * layers * B * kv_heads * S * head_dim * element size, as if "
                                           "every layer were plain full attention (a reference, not the answer)")
                res["points"].append(pre)
                nxt = torch.randint(3, spec.get("id_high", tc.vocab_size), (B, 1),
                                    generator=torch.Generator().manual_seed(7))
                out2 = model(input_ids=nxt, cache=cache, use_cache=True)
                dec = cache_summary(out2.cache)
                dec["layers_detail"] = layers_detail(out2.cache, tc)
                dec.update(batch=B, seq=S + 1, phase="prefill S tokens then decode 1 token", model_dtype=dtype)
                res["points"].append(dec)
            del out, out2, cache
        del model
    return res


def decoder_layers(model, tc):
    L = tc.num_hidden_layers
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.ModuleList) and len(m) == L and n.endswith("layers") and "vision" not in n \
                and "visual" not in n:
            return n, m
    return None, None


def layer_structure(model, tc):
    name, layers = decoder_layers(model, tc)
    if layers is None:
        return None
    rows = []
    for i, layer in enumerate(layers):
        kids = {}
        for cn, child in layer.named_children():
            sub = {gn: type(g).__name__ for gn, g in child.named_children()}
            kids[cn] = type(child).__name__ + (" {" + ", ".join(f"{k}: {v}" for k, v in sub.items()) + "}"
                                               if sub else "")
        direct = {pn: list(p.shape) for pn, p in layer.named_parameters(recurse=False)}
        bufs = sorted({bn.split(".")[-1] + ":" + ("persistent" if bn in layer.state_dict() else "non-persistent")
                       for bn, _ in layer.named_buffers()})
        rows.append({"index": i, "class": type(layer).__name__, "children": kids,
                     **({"direct_params": direct} if direct else {}),
                     **({"buffers": bufs} if bufs else {}),
                     "params": sum(p.numel() for p in layer.parameters())})
    return {"module_list": name, "layers": rows}


def by_prefix(model):
    out = collections.Counter()
    for n, p in model.named_parameters():
        parts = n.split(".")
        key = ".".join(parts[:2]) if parts[0] == "model" and len(parts) > 2 else parts[0]
        if parts[0] == "model" and len(parts) > 3 and parts[1] in ("model",):
            key = ".".join(parts[:3])
        out[key] += p.numel()
    return dict(out)


def moe_info_ext(model, tc):
    E = (getattr(tc, "num_local_experts", None) or getattr(tc, "num_experts", None)
         or getattr(tc, "n_routed_experts", None) or getattr(tc, "moe_num_experts", None))
    k = getattr(tc, "num_experts_per_tok", None) or getattr(tc, "moe_k", None)
    if not E:
        return None
    name, layers = decoder_layers(model, tc)
    per_layer = []
    for i, layer in enumerate(layers):
        ex = [(n, p) for n, p in layer.named_parameters() if ".experts." in "." + n]
        if not ex:
            per_layer.append({"index": i, "moe": False})
            continue
        lead = sorted({p.shape[0] for _, p in ex})
        routed = sum(p.numel() for _, p in ex)
        shared = sum(p.numel() for n, p in layer.named_parameters() if "shared_expert" in n or "shared_mlp" in n)
        per_layer.append({"index": i, "moe": True, "routed_expert_params": routed, "expert_tensor_leading_dims": lead,
                          "params_per_expert": routed // E, "shared_expert_params": shared,  # shared_expert* / shared_mlp
                          "expert_tensors": {n: list(p.shape) for n, p in ex}})
    total = sum(p.numel() for p in model.parameters())
    inactive = sum((E - k) * r["params_per_expert"] for r in per_layer if r["moe"])
    return {"num_experts": E, "top_k": k, "moe_layers": [r["index"] for r in per_layer if r["moe"]],
            "per_layer": per_layer, "total_params": total, "active_params_per_token": total - inactive,
            "method": "from the loaded model: routed expert tensors are the parameters under '.experts.' in each "
                      "decoder layer (fused 3-D [E, ...] tensors in transformers 5, biases included); params_per_"
                      "expert = their sum / E; active = total - sum over MoE layers of (E - top_k) * "
                      "params_per_expert (router, shared experts, dense layers, attention always count)"}


def summarize_config_ext(cfg, spec):
    tc = text_config(cfg)
    out = summarize_config(tc)
    kinds = {}
    for f in list(spec.get("layer_kind_fields", [])) + ["layer_types", "sliding_window"]:
        if hasattr(tc, f) and f not in kinds:
            v = getattr(tc, f)
            kinds[f] = list(v) if isinstance(v, tuple) else v
    out["layer_kind_fields"] = kinds
    d = tc.to_dict()
    skip = {"id2label", "label2id", "architectures", "transformers_version", "_name_or_path", "output_attentions",
            "return_dict", "output_hidden_states", "dtype", "chunk_size_feed_forward", "is_encoder_decoder",
            "problem_type", "tokenizer_class", "torchscript", "use_cache", "initializer_range"}
    out["all_text_config_fields"] = {k: v for k, v in d.items() if k not in skip and not isinstance(v, dict)
                                     or k == "rope_parameters"}
    if cfg is not tc:
        out["wrapper_model_type"] = cfg.model_type
        top = cfg.to_dict()
        out["wrapper_fields"] = {k: v for k, v in top.items() if k not in skip and not isinstance(v, dict)}
        vc = getattr(cfg, "vision_config", None)
        if vc is not None:
            out["vision_config"] = {k: v for k, v in vc.to_dict().items() if k not in skip and not isinstance(v, dict)}
    return out


def routing_counts_ext(model, spec, cfg, tc):
    B, S = TRAIN_POINTS[0]
    inp = make_inputs(spec, cfg, B, S)
    got = []
    hooks = []
    for n, m in model.named_modules():
        cn = type(m).__name__
        if cn.endswith("TopKRouter") or cn.endswith("Router"):
            hooks.append(m.register_forward_hook(lambda mod, a, o, n=n: got.append((n, o))))
    with torch.no_grad():
        model(input_ids=inp["input_ids"], use_cache=False)
    for h in hooks:
        h.remove()
    E = (getattr(tc, "num_local_experts", None) or getattr(tc, "num_experts", None)
         or getattr(tc, "n_routed_experts", None) or getattr(tc, "moe_num_experts", None))
    res = {}
    for n, o in got:
        outs = o if isinstance(o, tuple) else (o,)
        idx = [t for t in outs if isinstance(t, torch.Tensor) and not t.is_floating_point()]
        if idx:
            res[n] = torch.bincount(idx[-1].reshape(-1), minlength=E).tolist()
        elif outs[0].dim() == 2 and outs[0].shape[-1] == E:  # dense [tokens, E] scores, 0 where not routed
            res[n] = (outs[0] != 0).sum(0).tolist()
        else:
            res[n] = "router output " + ", ".join(f"{type(t).__name__}{list(t.shape) if isinstance(t, torch.Tensor) else ''}"
                                                  for t in outs)
    res["note"] = f"tokens routed to each expert (B={B}, S={S}); read from the router module's integer output"
    return res


def run_family_ext(name, spec, out: Path, train=True, scenarios=None):
    import time
    t0 = time.time()
    folder = build(name, spec, out)
    cfg = AutoConfig.from_pretrained(folder, local_files_only=True)
    tc = text_config(cfg)
    sdpa_error = None
    try:
        model = load(folder, spec, attn="sdpa", dtype=torch.float32)
    except ValueError as exc:
        sdpa_error = str(exc).split(". Please")[0]
        model = load(folder, spec, attn="eager", dtype=torch.float32)
    spec = dict(spec, default_attn="eager" if sdpa_error else "sdpa")
    params = param_info_ext(model, spec, cfg, tc)
    exp = {
        "family": name,
        "generated_by": "tools/llm/measure.py",
        "versions": VERSIONS,
        "device": "cpu",
        "seed": SEED,
        "what": spec["why"],
        "model_class": type(model).__name__,
        "sdpa_supported": sdpa_error is None,
        **({"sdpa_error": sdpa_error} if sdpa_error else {}),
        "storage_dtype": spec["dtype"],
        "config": summarize_config_ext(cfg, spec),
        "layer_structure": layer_structure(model, tc),
        "files": folder_files(folder),
        "safetensors": dict(safetensors_summary(folder), method=METHODS["safetensors"]),
        "params": params,
    }
    if "moe" in params:
        params["moe"]["experts_implementation"] = getattr(model.config, "_experts_implementation_internal",
                                                          getattr(model.config, "_experts_implementation", None))
        try:
            params["moe"]["routing_at_first_training_point"] = routing_counts_ext(model, spec, cfg, tc)
        except Exception as exc:
            params["moe"]["routing_at_first_training_point"] = f"{type(exc).__name__}: {exc}"
    del model
    exp["kv_cache"] = measure_kv_ext(folder, spec, cfg)
    if train:
        chosen = scenarios or spec.get("scenarios") or list(SCENARIOS)
        exp["training"] = measure_training(folder, spec, cfg, chosen, sdpa_error)
        if spec["head"] == "vlm":
            exp["training"]["loss_fn"] = ("text only: the ForConditionalGeneration model's cross_entropy over "
                                          "shifted logits from labels = input_ids; no pixel_values, so the vision "
                                          "tower and projector are not run (their parameters still get no grad)")
        if spec.get("scenarios") and not scenarios:
            exp["training"]["scenario_subset"] = ("only these scenarios are measured for this family: "
                                                  + ", ".join(chosen))
    write_json(folder / "expected.json", exp)
    print(f"  ({name}: {time.time() - t0:.1f} s)", flush=True)
    return exp


def param_info_ext(model, spec, cfg, tc):
    info = param_info_base(model, spec)
    info["by_prefix"] = by_prefix(model)
    info["by_prefix_method"] = ("parameter counts grouped by name prefix: the first two dotted components for names "
                                "under 'model.' (model.embed_tokens, model.layers, model.visual, "
                                "model.language_model, model.multi_modal_projector, ...), else the first (lm_head)")
    if spec["head"] == "vlm":
        deeper = collections.Counter()
        for n, p in model.named_parameters():
            parts = n.split(".")
            deeper[".".join(parts[:3]) if parts[0] == "model" and parts[1] != "language_model" else
                   ".".join(parts[:2])] += p.numel()
        info["by_prefix_depth3"] = dict(deeper)
    moe = moe_info_ext(model, tc)
    if moe:
        info["moe"] = moe
    return info


def write_json(path: Path, obj):
    def default(o):
        if isinstance(o, set):
            return sorted(o)
        if isinstance(o, torch.dtype):
            return dtype_name(o)
        raise TypeError(type(o))
    path.write_text(jsonfmt.dumps(json.loads(json.dumps(obj, default=default))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated families")
    ap.add_argument("--scenarios", help="comma-separated training scenarios")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args()
    gc.freeze()  # keeps the per-window gc.collect() cheap
    names = args.only.split(",") if args.only else list(FAMILIES)
    scen = args.scenarios.split(",") if args.scenarios else None
    args.out.mkdir(parents=True, exist_ok=True)
    for name in names:
        run = run_family_ext if FAMILIES[name].get("ext") else run_family
        exp = run(name, FAMILIES[name], args.out, train=not args.no_train, scenarios=scen)
        line = f"{name:10s} params {exp['params']['count']:7d}"
        kv = exp["kv_cache"]
        if kv.get("applicable"):
            line += f"  kv {kv['points'][0]['storage_bytes']:7d}"
        if "training" in exp:
            for sn, s in exp["training"]["scenarios"].items():
                if "runs" not in s:
                    line += f"  {sn}=n/a"
                    continue
                r = s["runs"][0]
                line += f"  {sn}={r['saved']['activation_bytes'] if 'saved' in r else 'ERR'}"
        print(line, flush=True)
    gc.unfreeze()


if __name__ == "__main__":
    main()
