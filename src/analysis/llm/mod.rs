//! Language-model checkpoints (Hugging Face folders, GGUF files): the architecture from the
//! config, parameters from the headers, the KV cache and inference memory, and the memory of a
//! fine-tuning step (full, LoRA, QLoRA) from a model of what autograd keeps ([`forward`]).

pub mod arch;
mod families;
pub mod fit;
pub mod forward;
pub mod layers;
#[cfg(test)]
mod layout_tests;
pub mod tape;
pub mod vision;

use std::collections::BTreeMap;

use super::training::{self, TrainConfig, Training};
use super::{Format, Layer, MemReport, Totals};
use crate::error::{Error, Result};
use crate::ir::{DType, Dim};
use crate::load::gguf::Gguf;
use crate::load::hf::Checkpoint;
use arch::{Arch, Head};
use forward::{Attn, Lora, Numerics, Step, Targets};
use layers::{CacheKind, CacheLayout, LayerCache, Runtime};

/// What the LLM analysis is asked (the command line's LLM options).
#[derive(Clone, Debug)]
pub struct LlmOptions {
    pub batch: u64,
    /// Tokens per sequence (`--seq`, `--max-model-len`).
    pub seq: u64,
    /// Cache dtype [default: the checkpoint's].
    pub kv_dtype: Option<DType>,
    pub attn: Attn,
    pub lora: Option<Lora>,
    /// QLoRA: the base's linear layers in 4-bit NF4 with double quantization.
    pub qlora: bool,
    /// Serving: the logits of every prefilled position, not only the last one.
    pub all_logits: bool,
    /// Whose allocation the cache is counted as (`--cache-layout`).
    pub cache_layout: CacheLayout,
    /// vLLM's tokens per block (`--block-size`).
    pub block_size: u64,
    /// Images per sequence (`--images`): their tokens join the text's `seq`.
    pub images: u64,
    /// Their size, height × width (`--image-size`) [default: the processor's].
    pub image_size: Option<(u64, u64)>,
}

impl Default for LlmOptions {
    fn default() -> Self {
        LlmOptions {
            batch: 1,
            seq: 0,
            kv_dtype: None,
            attn: Attn::Sdpa,
            lora: None,
            qlora: false,
            all_logits: false,
            cache_layout: CacheLayout::Hf,
            block_size: layers::VLLM_BLOCK_SIZE,
            images: 0,
            image_size: None,
        }
    }
}

/// The options with the images turned into tokens: `seq` becomes text + image tokens, and the
/// images' own numbers (tokens, encoder) come back beside them. Options without images come
/// back unchanged.
pub fn with_images(a: &Arch, o: &LlmOptions) -> Result<(LlmOptions, Option<vision::Images>)> {
    if o.images == 0 {
        if o.image_size.is_some() {
            return Err(Error::Usage(
                "--image-size sizes the images of --images N: give both".into(),
            ));
        }
        return Ok((o.clone(), None));
    }
    let Some(v) = &a.vision else {
        return Err(Error::Usage(format!(
            "--images: {}",
            a.vision_unmodelled.clone().unwrap_or_else(|| format!(
                "this {} model has no vision encoder nnlint reads (a vision_config in config.json{})",
                a.model_type,
                if a.family == arch::Family::Decoder {
                    "; a GGUF model's mmproj file is counted for its parameters only"
                } else {
                    ""
                }
            ))
        )));
    };
    let mut img = v
        .images(o.images, o.image_size, o.seq)
        .map_err(|e| Error::Usage(format!("--images: {e}")))?;
    let total = o.batch.saturating_mul(o.images);
    if total
        .checked_mul(img.encoder_tokens)
        .is_none_or(|s| s > vision::MAX_PATCHES)
    {
        return Err(Error::Usage(format!(
            "--images {} at batch {}: more than 2^40 image patches in one batch",
            o.images, o.batch
        )));
    }
    img.encoder_macs = v.macs(&img, total).ok_or_else(|| {
        Error::Usage(format!(
            "--images {}: the encoder's sizes overflow 64 bits",
            o.images
        ))
    })?;
    let mut e = o.clone();
    e.seq = img.seq;
    e.images = 0;
    e.image_size = None;
    Ok((e, Some(img)))
}

/// Serving memory of a causal LM at `batch` sequences of `seq` tokens.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LlmInference {
    pub batch: u64,
    pub seq: u64,
    pub weights_bytes: u64,
    /// The cache after a prefill of `seq` tokens for each sequence (as Hugging Face's
    /// `DynamicCache` holds it: sliding layers keep every prefilled token until the next step).
    pub kv_cache_bytes: u64,
    /// The cache in steady decoding at `seq` tokens (sliding layers hold their window).
    pub kv_cache_decode_bytes: u64,
    /// Bytes one more token of one sequence adds to the cache at this context: full-attention
    /// layers, and sliding layers still filling their window.
    pub kv_bytes_per_token: u64,
    /// Bytes of the decoding cache that do not grow with the context: sliding layers at their
    /// full window.
    pub kv_fixed_bytes: u64,
    pub kv_dtype: String,
    /// Whose allocation the cache fields count (absent: `hf`, what transformers holds).
    #[serde(skip_serializing_if = "is_hf")]
    pub cache_layout: CacheLayout,
    /// The layout's assumptions in one line (block size, cells, dtypes), as the notes say them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_assumptions: Option<String>,
    /// vLLM: the tokens per block of the attention layers (raised in hybrids).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_block_size: Option<u64>,
    /// The cache by what it holds (attention keys and values, sliding windows, MLA, recurrent
    /// and convolution states), in the order the kinds first appear.
    pub cache: Vec<CacheGroup>,
    /// Each layer's cache.
    pub cache_layers: Vec<LayerCache>,
    /// Intermediate tensors of the largest layer in the prefill.
    pub activation_workspace_bytes: u64,
    /// The logits the runtime allocates: by default the last position of each sequence, in the
    /// weights' dtype plus the fp32 copy sampling reads (`generate` with `logits_to_keep=1`,
    /// vLLM); with `--all-logits` every prefilled position (`forward()`).
    pub logits_bytes: u64,
    /// Whether `logits_bytes` covers every prefilled position.
    pub all_logits: bool,
    pub overhead_bytes: u64,
    /// Weights + KV cache + the larger of workspace and logits + overhead.
    pub total_bytes: u64,
    /// MACs per token of one decode step at context `seq` (active parameters plus attention).
    pub macs_per_token: u64,
    /// `--images`: the images' tokens (in `seq`) and the vision encoder's prefill.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<vision::Images>,
}

/// Extra facts the LLM analysis adds to a [`MemReport`].
#[derive(Clone, Debug, serde::Serialize)]
pub struct LlmInfo {
    pub model_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub architecture: Option<Arch>,
    /// Parameters a token passes through (MoE: routed experts only).
    pub active_params: Option<u64>,
    /// GPTQ, AWQ, bitsandbytes or FP8, from `quantization_config`; GGUF's file type.
    pub quantization: Option<String>,
    #[serde(skip)]
    pub inference: Option<LlmInference>,
    /// LoRA adapter parameters (with --lora).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trainable_params: Option<u64>,
    /// What `fit` needs to re-run the estimates.
    #[serde(skip)]
    pub model: Option<LlmModel>,
}

/// A language model as the estimates need it.
#[derive(Clone, Debug)]
pub struct LlmModel {
    pub name: String,
    pub arch: Arch,
    pub params: u64,
    pub param_bytes: u64,
    /// Parameters of the blocks' linear layers (LoRA targets, QLoRA's 4-bit part).
    pub block_linear: u64,
    /// Linear parameters a token passes through (MoE: routed experts only), head included.
    pub active_linear: u64,
    /// Bytes per element of the weights' dtype.
    pub elem: u64,
}

/// How a stored tensor counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stored {
    /// A parameter with this many logical elements.
    Param(u64),
    /// Quantization state (scales, zeros, maps): bytes, no parameters.
    QuantState,
    Buffer,
}

/// Logical elements of a stored tensor, reading packed quantized layouts (GPTQ/AWQ int4 in I32,
/// bitsandbytes 4-bit in U8) by their names; `bits` from `quantization_config`.
fn stored_kind(name: &str, dtype: DType, numel: u64, bits: u64, method: Option<&str>) -> Stored {
    let last = name.rsplit('.').next().unwrap_or(name);
    const STATE: &[&str] = &[
        "qzeros",
        "scales",
        "g_idx",
        "absmax",
        "quant_map",
        "nested_absmax",
        "nested_quant_map",
        "SCB",
        "weight_format",
        "weight_scale_inv",
        "weight_scale",
        "input_scale",
    ];
    // bitsandbytes' `weight.quant_state.bitsandbytes__nf4`: never a name ending in weight or bias,
    // which most are (the scan runs for every tensor)
    if STATE.contains(&last)
        || (!matches!(last, "weight" | "bias") && name.contains(".quant_state."))
    {
        return Stored::QuantState;
    }
    if matches!(last, "inv_freq" | "position_ids" | "masked_bias") {
        return Stored::Buffer;
    }
    // DeepSeek-V3's, GLM-4.5's and Nemotron-H's router keep it as a persistent buffer (in the
    // file, not in `parameters()`); ERNIE 4.5's `moe_statics` holds it as a frozen parameter
    if last == "e_score_correction_bias" && !name.contains("moe_statics.") {
        return Stored::Buffer;
    }
    if last == "qweight" {
        return Stored::Param(numel.saturating_mul(32 / bits.clamp(1, 32)));
    }
    if last == "weight" && dtype == DType::U8 && matches!(method, Some("bitsandbytes")) {
        return Stored::Param(numel.saturating_mul(2)); // two 4-bit values per byte
    }
    // MXFP4 (gpt-oss): blocks of 32 FP4 values in 16 bytes, one E8M0 scale byte per block
    if dtype == DType::U8 && matches!(method, Some("mxfp4")) {
        if last.ends_with("_blocks") {
            return Stored::Param(numel.saturating_mul(2));
        }
        if last.ends_with("_scales") {
            return Stored::QuantState;
        }
    }
    if !dtype.is_float() && !matches!(dtype, DType::I8 | DType::U8) {
        return Stored::Buffer;
    }
    Stored::Param(numel)
}

/// Modules of a multimodal wrapper outside its language model, each one row of the table: the
/// vision encoder (Qwen-VL's `visual` holds its merger too) and the projector into the text width.
const VISION_MODULES: &[(&str, &str)] = &[
    ("visual", "Vision"),
    ("vision_tower", "Vision"),
    ("vision_model", "Vision"),
    ("multi_modal_projector", "Projector"),
];

/// The vision-side row a tensor belongs to, with its op label.
fn vision_row(name: &str) -> Option<(&str, &'static str)> {
    // most names hold none of the modules: one scan for what they share rejects them (this runs
    // for every tensor: 75,000 on a checkpoint with many experts)
    if !name.contains("vis") && !name.contains("multi_modal") {
        return None;
    }
    let mut end = 0;
    for p in name.split('.') {
        end += p.len();
        if let Some((_, op)) = VISION_MODULES.iter().find(|(m, _)| *m == p) {
            return Some((&name[..end], op));
        }
        end += 1;
    }
    None
}

/// The row a tensor belongs to: a multimodal wrapper's vision tower or projector, its transformer
/// block (`model.layers.3`), else its module; a vision module anywhere in the name wins over a
/// block.
fn row_of(name: &str) -> &str {
    if let Some((row, _)) = vision_row(name) {
        return row;
    }
    let mut after_blocks = false;
    let mut start = 0;
    for p in name.split('.') {
        let end = start + p.len();
        if after_blocks && p.parse::<u64>().is_ok() {
            return &name[..end];
        }
        after_blocks = matches!(p, "layers" | "h" | "layer" | "blk" | "block");
        start = end + 1;
    }
    name.rsplit_once('.').map_or(name, |(m, _)| m)
}

fn block_index(row: &str) -> Option<u64> {
    row.rsplit('.').next()?.parse().ok()
}

fn natural(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for p in s.split('.') {
        match p.parse::<u64>() {
            Ok(n) => out.push((String::new(), n)),
            Err(_) => out.push((p.to_string(), 0)),
        }
    }
    out
}

/// A stored tensor, from safetensors or GGUF.
struct T<'a> {
    name: &'a str,
    dtype: Option<DType>,
    shape: &'a [u64],
    numel: u64,
    bytes: u64,
}

fn quant_method(config: &serde_json::Value) -> (Option<String>, u64) {
    let q = config.get("quantization_config");
    let method = q
        .and_then(|q| q.get("quant_method"))
        .and_then(|m| m.as_str())
        .map(str::to_string);
    let bits = q
        .and_then(|q| q.get("bits").or_else(|| q.get("w_bit")))
        .and_then(|b| b.as_u64())
        .unwrap_or(4);
    (method, bits)
}

fn dtype_name(d: DType) -> String {
    format!("{d}").to_lowercase()
}

/// Layers and totals from stored tensors, and per layer the parameters of its matrices (rank 2 or
/// more: what multiplies activations; biases and norm weights add no MACs and stay unquantized).
/// `gguf_buffers`: a GGUF file's router correction biases (`exp_probs_b`) are buffers, as
/// transformers keeps DeepSeek-V3's and GLM-4.5's (ERNIE's are parameters).
fn layers_of(
    tensors: &[T],
    bits: u64,
    method: Option<&str>,
    gguf_buffers: bool,
) -> (Vec<Layer>, Totals, Vec<u64>) {
    // tensors of one row are mostly stored together: the previous row is checked first
    let mut at: std::collections::HashMap<&str, usize, foldhash::fast::FixedState> =
        Default::default();
    let mut rows: Vec<(&str, Vec<&T>)> = Vec::new();
    for t in tensors {
        let row = row_of(t.name);
        let i = match rows.last() {
            Some((last, _)) if *last == row => rows.len() - 1,
            _ => *at.entry(row).or_insert_with(|| {
                rows.push((row, Vec::new()));
                rows.len() - 1
            }),
        };
        rows[i].1.push(t);
    }
    rows.sort_by_cached_key(|(n, _)| (natural(n), *n));
    let mut totals = Totals::default();
    let mut layers = Vec::new();
    let mut matrices = Vec::new();
    for (name, ts) in rows {
        let mut matrix = 0u64;
        let op = if let Some((_, op)) = vision_row(name) {
            op.into()
        } else if block_index(name).is_some() {
            "Block".into()
        } else if ["embed", "embd", "wte", "wpe"]
            .iter()
            .any(|e| name.contains(e))
        {
            "Embedding".into()
        } else if name.contains("norm") || name.contains("ln_f") {
            "Norm".into()
        } else {
            "Linear".into()
        };
        let mut l = Layer::of_tensors(name.to_string(), op, Vec::new());
        for t in &ts {
            let kind = match t.dtype {
                Some(d) => stored_kind(t.name, d, t.numel, bits, method),
                // GGUF: every tensor is a parameter but the routers' correction biases, which
                // transformers keeps as buffers
                None if gguf_buffers && t.name.ends_with("exp_probs_b.bias") => Stored::Buffer,
                None => Stored::Param(t.numel),
            };
            match kind {
                Stored::Param(n) => {
                    l.params = l.params.saturating_add(n);
                    l.param_bytes = l.param_bytes.saturating_add(t.bytes);
                    // packed quantized layouts store matrices with a rank of 2 as well
                    if t.shape.len() >= 2 {
                        matrix = matrix.saturating_add(n);
                    }
                }
                Stored::QuantState => l.param_bytes = l.param_bytes.saturating_add(t.bytes),
                Stored::Buffer => {
                    l.buffers = l.buffers.saturating_add(t.numel);
                    l.buffer_bytes = l.buffer_bytes.saturating_add(t.bytes);
                }
            }
            if ts.len() == 1 {
                l.output_shapes.push(Some(
                    t.shape.iter().map(|&d| Dim::known(d as i64)).collect(),
                ));
            }
        }
        totals.params = totals.params.saturating_add(l.params);
        totals.param_bytes = totals.param_bytes.saturating_add(l.param_bytes);
        totals.buffers = totals.buffers.saturating_add(l.buffers);
        totals.buffer_bytes = totals.buffer_bytes.saturating_add(l.buffer_bytes);
        layers.push(l);
        matrices.push(matrix);
    }
    (layers, totals, matrices)
}

fn checked(what: &str, v: Option<u64>) -> Result<u64> {
    v.ok_or_else(|| {
        Error::Usage(format!(
            "{what} overflows 64 bits: use a smaller --batch or --seq"
        ))
    })
}

fn is_hf(l: &CacheLayout) -> bool {
    *l == CacheLayout::Hf
}

/// The cache a batch holds, layer by layer, as Hugging Face's cache classes hold it.
pub fn kv_cache(a: &Arch, batch: u64, seq: u64, elem: u64) -> Option<KvCache> {
    kv_cache_in(a, batch, seq, elem, &Runtime::Hf)
}

/// The runtime rules of `layout` for this model: `kv` the key/value element size, `model` the
/// weights'.
pub fn runtime(
    a: &Arch,
    layout: CacheLayout,
    block_size: u64,
    batch: u64,
    seq: u64,
    kv: u64,
    model: u64,
) -> Option<Runtime> {
    Runtime::plan(
        layout,
        a.blocks.iter().map(|b| &b.mixer),
        block_size,
        batch,
        seq,
        kv,
        model,
        // vLLM keeps NemotronH's SSM state in fp32 by default (models/config.py:1143-1170)
        a.model_type == "nemotron_h",
    )
}

/// The cache a batch takes, layer by layer, under a runtime's rules.
pub fn kv_cache_in(a: &Arch, batch: u64, seq: u64, elem: u64, rt: &Runtime) -> Option<KvCache> {
    let mut kv = KvCache::default();
    if !a.is_causal_lm() {
        return Some(kv);
    }
    // transformers' torch scans compute the recurrent and SSM states in fp32 and the cache
    // keeps that dtype whatever the weights' (measured: testdata/llm/mamba2, bf16 point)
    let e = layers::CacheDtypes { kv: elem, state: 4 };
    for (i, b) in a.blocks.iter().enumerate() {
        // a block without a token mixer holds nothing (transformers' DummyLayer)
        if !b.mixer.caches() {
            continue;
        }
        let l = b.mixer.cache_in(i as u64, batch, seq, e, rt)?;
        kv.prefill = kv.prefill.checked_add(l.bytes)?;
        kv.decode = kv.decode.checked_add(l.decode_bytes)?;
        kv.per_token = kv.per_token.checked_add(l.bytes_per_token)?;
        kv.fixed = kv.fixed.checked_add(l.fixed_bytes)?;
        kv.layers.push(l);
    }
    Some(kv)
}

/// The one line that names a layout's assumptions for this model (`None` for `hf`, whose
/// numbers the other notes and fields describe).
pub fn layout_assumptions(
    a: &Arch,
    rt: &Runtime,
    block_size: u64,
    batch: u64,
    seq: u64,
    kv_dtype: &str,
) -> Option<String> {
    let leaves: Vec<&layers::Mixer> = a.blocks.iter().flat_map(|b| b.mixer.leaves()).collect();
    let window = |chunked: bool| {
        leaves.iter().any(|m| {
            m.attention().is_some_and(|x| match x.window {
                layers::Window::Chunked(_) => chunked,
                layers::Window::Sliding(_) => !chunked,
                layers::Window::Full => false,
            })
        })
    };
    let mla = leaves.iter().any(|m| matches!(m, layers::Mixer::Mla(_)));
    let states = leaves.iter().any(|m| {
        matches!(
            m,
            layers::Mixer::GatedDeltaNet(_)
                | layers::Mixer::Mamba2(_)
                | layers::Mixer::ShortConv(_)
        )
    });
    let mut parts: Vec<String> = Vec::new();
    match *rt {
        Runtime::Hf => return None,
        Runtime::Vllm {
            block,
            state_page,
            conv,
            ssm,
        } => {
            parts.push(format!(
                "cache layout vllm: what vLLM 0.34's paged allocator takes for {batch} sequences of {seq} tokens (TP 1, steady decoding): blocks of {block_size} tokens{} per layer and sequence (--block-size; vLLM's default, 64 since 0.34, was 16), keys and values in {kv_dtype}",
                if block != block_size {
                    format!(
                        ", raised to {block} in this hybrid so a recurrent state fits one attention page"
                    )
                } else {
                    String::new()
                }
            ));
            if mla {
                parts.push("MLA one head of kv_lora_rank + qk_rope_head_dim, no V".into());
            }
            if window(false) {
                parts.push(format!(
                    "sliding layers drop the blocks below their window in decoding; the prefill runs in chunks of {} tokens (max_num_batched_tokens)",
                    layers::VLLM_PREFILL_CHUNK
                ));
            }
            if window(true) {
                parts.push("chunked layers allocated as full attention (vLLM turns its hybrid allocator off for chunked attention)".into());
            }
            if states {
                parts.push(format!(
                    "recurrent states one page per sequence{}: K - 1 convolution columns in {} B and the state in {} B elements (no prefix-caching reservation)",
                    state_page.map_or(String::new(), |p| format!(
                        " padded to the attention page ({})",
                        crate::util::units::bytes(p)
                    )),
                    conv,
                    ssm
                ));
            }
        }
        Runtime::LlamaCpp { cells } => {
            parts.push(format!(
                "cache layout llama.cpp: what llama.cpp (0c1e57098) allocates for {batch} sequences of {seq} tokens: one unified cache of pad256({batch} x {seq}) = {cells} cells, keys and values in {kv_dtype} (its default f16; --kv-dtype overrides)"
            ));
            if mla {
                parts.push("MLA keys only (kv_lora_rank + rope; V is a view of K)".into());
            }
            if window(false) {
                parts.push(format!(
                    "sliding layers pad256(min(cells, window x sequences + n_ubatch {})) cells (swa_full off, as the CLI and server run)",
                    layers::LLAMA_CPP_UBATCH
                ));
            }
            if window(true) {
                parts.push(format!(
                    "chunked layers the same with llama.cpp's window of {} tokens",
                    layers::LLAMA_CPP_CHUNK
                ));
            }
            if states {
                parts.push(
                    "recurrent states f32 per sequence with K - 1 convolution columns".into(),
                );
            }
        }
    }
    Some(parts.join("; "))
}

/// The cache of a batch: after the prefill, in steady decoding, how decoding's splits into what
/// grows with the context and what does not, and each layer's part.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvCache {
    pub prefill: u64,
    pub decode: u64,
    /// Bytes one more token of one sequence adds at this context: full-attention layers, and
    /// sliding layers still filling their window.
    pub per_token: u64,
    /// Bytes of the batch's cache that do not grow: sliding layers at their full window (and
    /// the cache's int64 counters), recurrent and convolution states.
    pub fixed: u64,
    pub layers: Vec<LayerCache>,
}

impl KvCache {
    /// The layers summed by what they hold, in the order kinds first appear.
    pub fn by_kind(&self) -> Vec<CacheGroup> {
        let mut out: Vec<CacheGroup> = Vec::new();
        for l in &self.layers {
            let g = match out.iter_mut().find(|g| g.kind == l.kind) {
                Some(g) => g,
                None => {
                    out.push(CacheGroup {
                        kind: l.kind,
                        layers: 0,
                        bytes: 0,
                        decode_bytes: 0,
                        bytes_per_token: 0,
                        fixed_bytes: 0,
                    });
                    out.last_mut().expect("just pushed")
                }
            };
            g.layers += 1;
            g.bytes = g.bytes.saturating_add(l.bytes);
            g.decode_bytes = g.decode_bytes.saturating_add(l.decode_bytes);
            g.bytes_per_token = g.bytes_per_token.saturating_add(l.bytes_per_token);
            g.fixed_bytes = g.fixed_bytes.saturating_add(l.fixed_bytes);
        }
        out
    }
}

/// The cache of the layers of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CacheGroup {
    pub kind: CacheKind,
    pub layers: u64,
    pub bytes: u64,
    pub decode_bytes: u64,
    /// Bytes one more token of one sequence adds to these layers.
    pub bytes_per_token: u64,
    /// Bytes of the batch that do not grow with the context.
    pub fixed_bytes: u64,
}

/// MACs per token of a decode step at context `seq`: every active linear weight once, plus
/// each mixer's work over the context (q·k and p·v for attention, a state update for a
/// recurrence).
fn macs_per_token(a: &Arch, active_linear: u64, seq: u64) -> u64 {
    let mix: u64 = a
        .blocks
        .iter()
        .map(|b| b.mixer.context_macs(seq))
        .fold(0u64, u64::saturating_add);
    active_linear.saturating_add(mix)
}

/// Active parameters per token of an MoE model: all but the unrouted experts (shared experts,
/// dense blocks, routers and attention are always active).
fn active_params(a: &Arch, total: u64) -> Option<u64> {
    let m = a.moe.as_ref()?;
    let per_expert = m.params_per_expert(a.hidden, a.gated);
    let unrouted = m
        .moe_layers
        .saturating_mul(m.experts - m.top_k)
        .saturating_mul(per_expert);
    Some(total.saturating_sub(unrouted))
}

/// Intermediate tensors of the largest layer in a prefill of `tokens` tokens.
fn workspace(a: &Arch, batch: u64, n: u64, elem: u64, attn: Attn) -> u64 {
    let t = batch.saturating_mul(n);
    let dense = t.saturating_mul(a.hidden + 3 * a.intermediate);
    let mlp = match &a.moe {
        Some(m) => {
            let routed = t
                .saturating_mul(m.top_k)
                .saturating_mul(a.hidden + 3 * m.expert_intermediate);
            if m.moe_layers < a.layers {
                routed.max(dense)
            } else {
                routed
            }
        }
        None => dense,
    }
    .saturating_mul(elem);
    let qkv = t
        .saturating_mul(2 * a.q_dim() + 2 * a.kv_dim() + a.hidden)
        .saturating_mul(elem);
    let scores = match attn {
        Attn::Eager => batch
            .saturating_mul(a.heads)
            .saturating_mul(n)
            .saturating_mul(n)
            .saturating_mul(8), // fp32 scores and probabilities
        _ => 0,
    };
    mlp.max(qkv.saturating_add(scores))
}

fn numerics(c: &TrainConfig, qlora: bool) -> Numerics {
    use super::saved::Precision as P;
    if qlora {
        return Numerics {
            weights: DType::BF16,
            autocast: None,
        };
    }
    match c.precision {
        P::Fp32 => Numerics {
            weights: DType::F32,
            autocast: None,
        },
        P::AmpBf16 => Numerics {
            weights: DType::F32,
            autocast: Some(DType::BF16),
        },
        P::AmpFp16 => Numerics {
            weights: DType::F32,
            autocast: Some(DType::F16),
        },
        P::Bf16 => Numerics {
            weights: DType::BF16,
            autocast: None,
        },
    }
}

/// Block parameters QLoRA leaves unquantized: transformers 5 keeps a mixture of experts' routed
/// experts as 3-D parameters of one module (`gate_up_proj`, `down_proj`) and its router's weight
/// as a bare parameter where the router is not an `nn.Linear`, and bitsandbytes converts
/// `nn.Linear` (and GPT-2's `Conv1D`) modules only.
fn bnb_skips(a: &Arch) -> u64 {
    let Some(m) = a.moe.as_ref() else {
        return 0;
    };
    let per_expert = m.params_per_expert(a.hidden, a.gated);
    let router = if m.router_linear {
        0
    } else {
        m.experts
            .saturating_mul(a.hidden)
            .saturating_add(if m.router_bias { m.experts } else { 0 })
    };
    m.moe_layers
        .saturating_mul(m.experts.saturating_mul(per_expert).saturating_add(router))
}

/// Bytes of the NF4 base of QLoRA per parameter of a quantized linear layer: 4 bits, an 8-bit
/// absmax per block of 64 and an fp32 scale per 256 blocks (double quantization).
fn nf4_bytes(params: u64) -> u64 {
    let blocks = params.div_ceil(64);
    params.div_ceil(2) + blocks + blocks.div_ceil(256) * 4
}

/// Why peft refuses these LoRA targets on this model, if it does: peft 0.21 gives no adapter to
/// Mamba-based models' `out_proj` and `conv1d` (`_check_lora_target_modules_mamba`), and
/// all-linear reaches `out_proj`.
fn peft_refuses(a: &Arch, targets: &Targets) -> Option<String> {
    const MAMBA: &[&str] = &["falcon_h1", "mamba", "mamba2", "falcon_mamba", "nemotron_h"];
    if !MAMBA.contains(&a.model_type.as_str()) {
        return None;
    }
    let hit = match targets {
        Targets::AllLinear => "out_proj".to_string(),
        Targets::Named(names) => names
            .iter()
            .find(|n| matches!(n.as_str(), "out_proj" | "conv1d"))?
            .clone(),
    };
    let asked = match targets {
        Targets::AllLinear => "all-linear".to_string(),
        Targets::Named(_) => hit.clone(),
    };
    Some(format!(
        "--lora-targets {asked}: peft refuses LoRA on '{hit}' of Mamba-based models ({}): its out_proj and conv1d are incompatible; name the other linear layers instead (in_proj, and the attention's q_proj, k_proj, v_proj, o_proj where it has them)",
        a.model_type
    ))
}

/// The training step of a checkpoint.
pub fn training_step(
    a: &Arch,
    params: u64,
    linear_params: u64,
    c: &TrainConfig,
    o: &LlmOptions,
) -> Result<(Training, u64)> {
    let (o, images) = with_images(a, o)?;
    let o = &o;
    let nm = numerics(c, o.qlora);
    let lora = o.lora.clone().or_else(|| {
        o.qlora.then_some(Lora {
            rank: 16,
            targets: Targets::AllLinear,
        })
    });
    if let Some(l) = &lora {
        if let Some(why) = peft_refuses(a, &l.targets) {
            return Err(Error::Usage(why));
        }
    }
    // peft also wraps a wrapper's vision linears that match
    let (vision_params, vision_hit, adapted) = match &lora {
        Some(l) => vision_adapters(a, l),
        None => (0, Vec::new(), vision::Adapted::Nothing),
    };
    let input_grad = images.is_some() && lora.is_some() && vision_params > 0;
    let step = |ckpt: bool| Step {
        batch: o.batch,
        seq: o.seq,
        attn: o.attn,
        numerics: nm,
        checkpoint: ckpt,
        lora: lora.clone(),
        padded: false,
        input_grad,
        cuda: c.device == super::saved::Device::Cuda,
    };
    let ckpt = c.checkpoint != training::Checkpoint::None;
    let run = forward::training_forward(a, &step(ckpt));
    let full = if ckpt {
        forward::training_forward(a, &step(false))
    } else {
        run.clone()
    };
    if run.overflow || full.overflow {
        return Err(Error::Usage(format!(
            "the saved activations at batch {} x seq {} overflow 64 bits",
            o.batch, o.seq
        )));
    }
    if let Some(why) = &run.peft_fails {
        let targets = match lora.as_ref().map(|l| &l.targets) {
            Some(Targets::Named(names)) => names.join(","),
            _ => "all-linear".into(),
        };
        return Err(Error::Usage(format!("--lora-targets {targets}: {why}")));
    }
    let unmatched: Vec<String> = run
        .unmatched_targets
        .iter()
        .filter(|t| !vision_hit.contains(t))
        .cloned()
        .collect();
    if let Some(Targets::Named(names)) = lora.as_ref().map(|l| &l.targets) {
        if unmatched.len() == names.len() {
            // peft: "Target modules {...} not found in the base model"
            return Err(Error::Usage(format!(
                "--lora-targets {}: no linear layer of this {} model has that name (peft refuses it); its linear layers answer to {}, or all-linear",
                names.join(","),
                a.model_type,
                run.linear_names.join(", ")
            )));
        }
    }
    let per_param = training::state_bytes(c);
    let mut notes = Vec::new();
    if !unmatched.is_empty() {
        notes.push(format!(
            "--lora-targets: {} matched no linear layer and got no adapter (peft ignores them too); the layers answer to {}",
            unmatched.join(", "),
            run.linear_names.join(", ")
        ));
    }
    let mut unknown = Vec::new();
    if run.unmodelled.is_empty() && !full.unmodelled.is_empty() {
        notes.push(
            "checkpointed blocks keep their input only, so the saved activations miss nothing here; the figure without checkpointing (saved_activation_bytes_full) is a lower bound: the hybrid's scans are not modelled yet".into(),
        );
        unknown.push(
            "backward makes each checkpointed block's tensors again, and what the hybrid's scans keep then is not modelled yet: the peak counts everything else (a lower bound)".into(),
        );
    }
    if !run.unmodelled.is_empty() {
        let list: Vec<String> = run
            .unmodelled
            .iter()
            .map(|(what, n)| format!("{n} {what} block{}", if *n == 1 { "" } else { "s" }))
            .collect();
        unknown.push(format!(
            "what the token mixers of {} keep for backward is not modelled yet: the saved activations count everything else (a lower bound)",
            list.join(" and ")
        ));
    }
    if !a.dropout.is_empty() {
        let list: Vec<String> = a.dropout.iter().map(|(k, p)| format!("{k} {p}")).collect();
        unknown.push(format!(
            "config.json trains the head with dropout ({}): what it keeps for backward (a full-size tensor on CPU, a byte per element on CUDA) is not counted",
            list.join(", ")
        ));
    }
    match &a.head {
        Head::None => unknown.push(format!(
            "{} has no head: the head, the loss and their saved tensors that you add are not counted (with a loss that sums the outputs the count is exact)",
            a.class.as_deref().unwrap_or("the model")
        )),
        Head::Other { class } => unknown.push(format!(
            "{class}: nnlint does not model this head; the blocks are counted, the head and its loss are not"
        )),
        _ => {}
    }
    let elem = nm.weights.bytes_for(1).unwrap_or(4);
    // what is trained, at how many bytes an element, over what frozen base
    let (trainable, per_elem, frozen) = match &lora {
        None => (params, per_param, 0),
        Some(l) => {
            let trainable = run.adapter_params.saturating_add(vision_params);
            if vision_params > 0 {
                notes.push(format!(
                    "LoRA: peft also wraps {} of the vision side ({} adapter parameters); with --images they train on the images' gradients",
                    if vision_hit.is_empty() {
                        "every linear layer".to_string()
                    } else {
                        vision_hit.join(", ")
                    },
                    vision_params
                ));
            }
            let base = if o.qlora {
                // bitsandbytes replaces nn.Linear modules only (transformers 5's
                // `replace_with_bnb_linear`): the fused expert stacks and bare router weights
                // stay in bf16 (measured on the MoE fixtures)
                let nf4 = linear_params.saturating_sub(bnb_skips(a));
                if a.moe.is_some() {
                    notes.push(format!(
                        "QLoRA: bitsandbytes quantizes the nn.Linear layers ({nf4} parameters); the fused expert stacks and the router weights ({} parameters) stay in bf16, as transformers 5 loads them",
                        linear_params.min(bnb_skips(a))
                    ));
                }
                nf4_bytes(nf4).saturating_add((params - nf4.min(params)).saturating_mul(2))
            } else {
                params.saturating_mul(elem)
            };
            notes.push(format!(
                "{}: rank {}, {} adapter parameters ({:.3}% of {}); the base is frozen{}",
                if o.qlora { "QLoRA" } else { "LoRA" },
                l.rank,
                trainable,
                trainable as f64 * 100.0 / params.max(1) as f64,
                params,
                if o.qlora {
                    " in 4-bit NF4 with double quantization, computing in bf16"
                } else {
                    ""
                }
            ));
            if a.moe.as_ref().is_some_and(|m| m.peft_wraps_experts) && run.wraps_experts {
                notes.push("LoRA on the experts: peft wraps the fused expert parameters (ParamWrapper) and keeps W + BA, the size of every expert's weights, for backward in each MoE block, and backward makes a gradient of that size".into());
                if nm.autocast.is_some() {
                    unknown.push("LoRA on the fused experts under autocast (baddbmm runs in half precision there) is not measured: the saved W + BA is counted in the weights' dtype".into());
                }
            }
            // peft keeps adapters in fp32 (autocast_adapter_dtype) with fp32 gradients
            let per = training::StateBytes {
                weight: 4,
                grad: 4,
                optimizer: c.optimizer.state_bytes(4),
            };
            (trainable, per, base)
        }
    };
    let (vision_saved, vision_note) = match images.as_ref() {
        Some(img) => image_training(
            a,
            img,
            o,
            nm,
            ckpt,
            lora.as_ref().map(|l| (l, adapted)),
            &mut unknown,
        )?,
        None => (0, None),
    };
    notes.extend(vision_note);
    if images.is_some() && nm.autocast.is_some() {
        unknown.push("autocast's half copies of the vision tower's and projector's weights, which backward keeps, are not counted yet (the language model's are)".into());
    }
    // autocast's half copies of the weights are saved too (as a graph's count has them)
    let saved = checked(
        "the saved activations",
        run.saved
            .activation
            .checked_add(run.saved.weight_copy)
            .and_then(|v| v.checked_add(vision_saved)),
    )?;
    let saved_full = checked(
        "the saved activations",
        full.saved
            .activation
            .checked_add(full.saved.weight_copy)
            .and_then(|v| v.checked_add(vision_saved)),
    )?;
    // the vision encoder ran first: its backward runs last
    let mut backward = run.backward.clone();
    backward.push(crate::analysis::step::BackwardStep {
        freed: vision_saved,
        ..Default::default()
    });
    let unit = trainable
        .saturating_mul(per_elem.weight)
        .saturating_add(frozen)
        / a.layers.max(1);
    let step_model = crate::analysis::step::StepModel {
        trainable,
        per_param: per_elem,
        frozen_bytes: frozen,
        buffer_bytes: 0,
        // FSDP wraps each block: one block's weights gathered at a time
        gather_unit_bytes: unit,
        saved_bytes: saved,
        backward,
        // input_ids and labels, int64
        input_bytes: o.batch.saturating_mul(o.seq).saturating_mul(16),
    };
    let acc = crate::analysis::step::account(&step_model, c).map_err(|what| {
        Error::Usage(format!(
            "{what} at batch {} x seq {} overflow 64 bits",
            o.batch, o.seq
        ))
    })?;
    if c.optimizer.is_8bit() {
        notes.push("8-bit optimizer state (bitsandbytes): 1 byte per state per parameter".into());
    }
    if ckpt {
        notes.push(format!(
            "gradient checkpointing as Hugging Face does it: every block (checkpoint {} is applied per block); backward recomputes one block at a time",
            c.checkpoint
        ));
    }
    if c.device == super::saved::Device::Cuda {
        if nm.autocast.is_some() {
            unknown.push("on CUDA, autocast runs norms, softmax and some pointwise ops in fp32 and keeps those copies for backward: not counted yet for checkpoints (an ONNX graph's count has them)".into());
        }
        let mut note = "saved activations follow PyTorch's kernels as measured on CPU, with CUDA's dropout and attention kernels; flash attention also keeps an RNG state".to_string();
        if a.drop != arch::Dropout::default() {
            note.push_str("; dropout keeps a bool mask (a byte per element), and SDPA with dropout stays on a fused kernel (counted)");
        }
        notes.push(note);
    }
    let t = Training {
        config: *c,
        trainable_params: trainable,
        micro_batch: Some(o.batch),
        effective_batch: Some(
            o.batch
                .saturating_mul(c.accumulate as u64)
                .saturating_mul(u64::from(c.gpus.max(1))),
        ),
        weights_bytes: acc.weights_bytes,
        gradient_bytes: acc.gradient_bytes,
        optimizer_bytes: acc.optimizer_bytes,
        saved_activation_bytes: saved,
        saved_activation_bytes_full: saved_full,
        autocast_weight_copy_bytes: run.saved.weight_copy,
        saved_buffer_bytes: 0,
        parallel_bytes: acc.parallel_bytes,
        overhead_bytes: acc.overhead_bytes,
        total_bytes: acc.total_bytes,
        peak: acc.peak,
        recompute_macs: 0,
        recompute_fraction: if ckpt { 1.0 / 3.0 } else { 0.0 },
        communication_bytes: acc.communication_bytes,
        host_bytes: acc.host_bytes,
        per_node: Vec::new(),
        lower_bound: !unknown.is_empty(),
        unknown,
        notes,
    };
    Ok((t, trainable))
}

/// The adapters peft gives a wrapper's vision side (its linear layers matched as peft matches
/// `target_modules`: the module's name or a dotted suffix of it; all-linear takes them all):
/// their parameters, the target names that matched there, and the case for the saved bytes.
fn vision_adapters(a: &Arch, l: &Lora) -> (u64, Vec<String>, vision::Adapted) {
    use vision::Adapted;
    let mut params = 0u64;
    let mut hit: Vec<String> = Vec::new();
    for (module, i, o) in &a.vision_linears {
        let matched = match &l.targets {
            Targets::AllLinear => Some(String::new()),
            Targets::Named(names) => names
                .iter()
                .find(|n| module == *n || module.ends_with(&format!(".{n}")))
                .cloned(),
        };
        if let Some(name) = matched {
            params = params.saturating_add(l.rank.saturating_mul(i.saturating_add(*o)));
            if !name.is_empty() && !hit.contains(&name) {
                hit.push(name);
            }
        }
    }
    // named targets that reach every linear layer of the vision side adapt it as all-linear
    // does (what Llama 4 needs: peft's all-linear fails on its router)
    let every = a.vision_linears.iter().fold(0u64, |s, (_, i, o)| {
        s.saturating_add(l.rank.saturating_mul(i.saturating_add(*o)))
    });
    let adapted = if params == 0 {
        Adapted::Nothing
    } else {
        match &l.targets {
            Targets::AllLinear => Adapted::AllLinear(l.rank),
            Targets::Named(_) => {
                let mut h = hit.clone();
                h.sort();
                if h == ["q_proj", "v_proj"] {
                    Adapted::QueryValue(l.rank)
                } else if params == every {
                    Adapted::AllLinear(l.rank)
                } else {
                    Adapted::Other
                }
            }
        }
    };
    (params, hit, adapted)
}

/// What `--images` adds to a training step's saved activations: the encoder and projector's
/// ([`vision::Vision::saved_bytes`]) and, in the language model, the image mask `masked_scatter`
/// keeps (a bool per position) and Gemma 3's bidirectional image mask; with the note that says
/// so. What was not measured goes to `unknown` (the total is then a lower bound).
#[allow(clippy::too_many_arguments)]
fn image_training(
    a: &Arch,
    img: &vision::Images,
    o: &LlmOptions,
    nm: Numerics,
    ckpt: bool,
    lora: Option<(&Lora, vision::Adapted)>,
    unknown: &mut Vec<String>,
) -> Result<(u64, Option<String>)> {
    use vision::{Adapted, Encoder, Training};
    let Some(v) = &a.vision else {
        return Ok((0, None));
    };
    let total = o.batch.saturating_mul(img.per_sequence);
    let mode = match lora {
        Some((_, adapted)) if ckpt => Training::LoraCheckpoint(adapted),
        Some((_, adapted)) => Training::Lora(adapted),
        None if ckpt => Training::Checkpoint,
        None => Training::Full,
    };
    // the image features carry a gradient when the encoder trains or holds adapters; Qwen3-VL's
    // deepstack index_put keeps the mask in any case, and under checkpointing transformers hooks
    // the text embeddings to require grad
    let features_grad = !matches!(mode, Training::Lora(Adapted::Nothing));
    let deepstack = matches!(v.encoder, Encoder::Qwen3 { deepstack } if deepstack > 0);
    let mut lm = if features_grad || deepstack || ckpt {
        o.batch.saturating_mul(img.seq)
    } else {
        0
    };
    if matches!(v.encoder, Encoder::Siglip { .. }) {
        // Gemma 3: token_type_ids make the image tokens attend both ways in the full-attention
        // layers: each keeps a [B, 1, S, S] mask and, with a mask, SDPA gets K/V repeated to
        // every head instead of enable_gqa (measured)
        let e: u64 = match (nm.weights, nm.autocast) {
            (DType::F32, None) => 4,
            _ => 2,
        };
        let full = (0..a.layers as usize)
            .filter(|&i| {
                a.blocks
                    .get(i)
                    .is_some_and(|b| b.mixer.attention().is_some())
                    && a.window(i).is_none()
            })
            .count() as u64;
        let s = img.seq;
        let per = s
            .saturating_mul(s)
            .saturating_add(2 * a.heads.saturating_sub(a.kv_heads) * s * a.head_dim)
            .saturating_mul(e);
        match mode {
            // checkpointed layers keep their input only; eager attention already keeps a full
            // mask and per-head K/V (measured: nothing more)
            Training::Checkpoint | Training::LoraCheckpoint(_) => {}
            _ if o.attn == Attn::Eager => {}
            Training::Full | Training::Lora(_) => {
                lm = lm.saturating_add(o.batch.saturating_mul(full).saturating_mul(per))
            }
        }
    }
    let encoder = v.saved_bytes(img, total, o.attn, nm, mode);
    let what = match mode {
        Training::Lora(Adapted::Other) | Training::LoraCheckpoint(Adapted::Other) => {
            "with LoRA adapters on other vision layers than q_proj and v_proj or all-linear"
        }
        Training::Lora(_) => "with LoRA in this setting (measured: fp32 and bf16 weights, sdpa)",
        Training::LoraCheckpoint(_) => {
            "with LoRA and checkpointing in this setting (measured: a bf16 base; fp32 with q_proj/v_proj)"
        }
        Training::Checkpoint => "with gradient checkpointing in this setting",
        Training::Full => "in this precision (measured: fp32, bf16 autocast, bf16 weights)",
    };
    let enc = encoder;
    if enc.is_none() {
        unknown.push(format!(
            "--images: what the vision encoder keeps for backward {what} is not modelled yet; the language model's image tokens are counted"
        ));
    }
    let enc_bytes = enc.unwrap_or(0);
    let note = enc.map(|e| {
        format!(
            "--images {}: the vision encoder and projector keep {} for backward ({} image{} of {}x{}, {}{} patches each{})",
            img.per_sequence,
            crate::util::units::bytes(e),
            total,
            if total == 1 { "" } else { "s" },
            img.processed_size[0],
            img.processed_size[1],
            if img.tiles > 1 {
                format!("{} tiles, ", img.tiles)
            } else {
                String::new()
            },
            img.encoder_tokens,
            match mode {
                Training::Lora(Adapted::Nothing) => "; LoRA wraps none of its layers, so it needs no gradient",
                Training::Checkpoint | Training::LoraCheckpoint(_) => "; each encoder layer checkpointed",
                _ => "",
            }
        )
    });
    Ok((
        checked("the saved activations", enc_bytes.checked_add(lm))?,
        note,
    ))
}

/// The logits a serving runtime allocates for `batch` sequences of `n` tokens. Generation
/// computes the head on the last position only (transformers' `generate` passes
/// `logits_to_keep=1` and copies those logits to fp32 for sampling; vLLM gathers the sampled
/// positions before the head and samples in fp32); `all` asks for `forward()` over every
/// position, in the weights' dtype. A classifier's logits are `labels` wide; a bare model has none.
fn logits_bytes(a: &Arch, batch: u64, n: u64, elem: u64, all: bool) -> Option<u64> {
    let width = match a.head {
        Head::CausalLm | Head::MaskedLm => a.vocab.max(1),
        Head::Classifier { labels } => labels,
        Head::None | Head::Other { .. } => 0,
    };
    if all || !a.head.is_lm() {
        batch.checked_mul(n)?.checked_mul(width)?.checked_mul(elem)
    } else {
        batch.checked_mul(width)?.checked_mul(elem.checked_add(4)?)
    }
}

/// Inference memory at `o.batch` × `o.seq`.
pub fn inference(
    a: &Arch,
    weights_bytes: u64,
    linear_active: u64,
    elem: u64,
    o: &LlmOptions,
    overhead: &training::Overhead,
) -> Result<LlmInference> {
    let (o, mut images) = with_images(a, o)?;
    let o = &o;
    // llama.cpp keeps keys and values in f16 unless told (--cache-type-k/-v)
    let kv_default = match o.cache_layout {
        CacheLayout::LlamaCpp => DType::F16,
        _ => match elem {
            2 => DType::BF16,
            1 => DType::F8E4M3FN,
            _ => DType::F32,
        },
    };
    let kv_elem = o
        .kv_dtype
        .and_then(|d| d.bytes_for(1))
        .unwrap_or(match o.cache_layout {
            CacheLayout::LlamaCpp => 2,
            _ => elem,
        });
    let overflow = || {
        Error::Usage(format!(
            "the KV cache at batch {} x seq {} overflows 64 bits",
            o.batch, o.seq
        ))
    };
    let rt = runtime(
        a,
        o.cache_layout,
        o.block_size,
        o.batch,
        o.seq,
        kv_elem,
        elem,
    )
    .ok_or_else(overflow)?;
    let cache = kv_cache_in(a, o.batch, o.seq, kv_elem, &rt).ok_or_else(overflow)?;
    let kv_dtype = dtype_name(o.kv_dtype.unwrap_or(kv_default));
    let n = a.tokens(o.seq);
    let ws = workspace(a, o.batch, n, elem, o.attn);
    let logits = checked(
        "the logits",
        logits_bytes(a, o.batch, n, elem, o.all_logits),
    )?;
    // the vision encoder runs before the language model's prefill, on every image of the batch
    let encoder = match (&mut images, &a.vision) {
        (Some(img), Some(v)) => {
            let total = o.batch.saturating_mul(img.per_sequence);
            img.encoder_workspace_bytes = checked(
                "the vision encoder's workspace",
                v.workspace_bytes(img, total, elem),
            )?;
            img.encoder_workspace_bytes
        }
        _ => 0,
    };
    let allocated = checked(
        "the inference peak",
        cache
            .prefill
            .checked_add(ws.max(logits))
            .map(|x| x.max(encoder))
            .and_then(|x| x.checked_add(weights_bytes)),
    )?;
    let oh = overhead.bytes(allocated);
    Ok(LlmInference {
        batch: o.batch,
        seq: o.seq,
        weights_bytes,
        kv_cache_bytes: cache.prefill,
        kv_cache_decode_bytes: cache.decode,
        kv_bytes_per_token: cache.per_token,
        kv_fixed_bytes: cache.fixed,
        cache: cache.by_kind(),
        cache_layers: cache.layers.clone(),
        cache_assumptions: layout_assumptions(a, &rt, o.block_size, o.batch, o.seq, &kv_dtype),
        cache_layout: o.cache_layout,
        cache_block_size: match rt {
            Runtime::Vllm { block, .. } => Some(block),
            _ => None,
        },
        kv_dtype,
        activation_workspace_bytes: ws,
        logits_bytes: logits,
        all_logits: o.all_logits,
        overhead_bytes: oh,
        total_bytes: checked("the serving peak", allocated.checked_add(oh))?,
        macs_per_token: macs_per_token(a, linear_active, o.seq),
        images,
    })
}

/// A linear layer of the head other than the vocabulary projection, by its row's name: the rows
/// it runs on (one per sequence on the pooled [CLS] token, else every token) and its shape.
fn head_linear(a: &Arch, row: &str, batch: u64, tokens: u64) -> Option<(u64, u64, u64)> {
    let last = |s: &str| row == s || row.ends_with(&format!(".{s}"));
    let h = a.hidden;
    let labels = match a.head {
        arch::Head::Classifier { labels } => labels,
        _ => 0,
    };
    if last("pooler.dense") || last("classifier.dense") {
        Some((batch, h, h))
    } else if last("predictions.transform.dense") || last("lm_head.dense") {
        Some((tokens, h, h))
    } else if (last("classifier") || last("classifier.out_proj")) && labels > 0 {
        Some((batch, h, labels))
    } else if last("score") && labels > 0 {
        // every position is scored, then the last token of each sequence gathered
        Some((tokens, h, labels))
    } else {
        None
    }
}

/// Parameters of an LM head stored apart from the embeddings (0 when tied or without one).
fn untied_head(a: &Arch) -> u64 {
    if a.tied || !a.head.is_lm() {
        0
    } else {
        a.vocab.saturating_mul(a.hidden)
    }
}

/// Parameters of the linear layers inside the blocks (what LoRA targets and QLoRA quantizes),
/// and those a token passes through.
fn linear_params(a: &Arch, layers: &[Layer], matrices: &[u64]) -> (u64, u64) {
    let block: u64 = layers
        .iter()
        .zip(matrices)
        .filter(|(l, _)| block_index(&l.name).is_some())
        .map(|(_, &m)| m)
        .sum();
    let active = active_params(a, block).unwrap_or(block);
    (block, active.saturating_add(untied_head(a)))
}

/// The first attention projection whose stored rows contradict the heads config.json gives its
/// block (`q_proj` rows = heads × head_dim, doubled with an output gate; `k_proj`, `v_proj` rows =
/// KV heads × head_dim): every estimate from the heads would be wrong, so it is an error.
fn projection_mismatch<'a>(
    a: &Arch,
    tensors: impl Iterator<Item = (&'a str, &'a [u64])>,
) -> Option<String> {
    for (name, shape) in tensors {
        let Some(stem) = name.strip_suffix(".weight") else {
            continue;
        };
        let Some((module, proj)) = stem.rsplit_once('.') else {
            continue;
        };
        if !module.ends_with("self_attn") || shape.len() != 2 {
            continue;
        }
        let Some(layer) = block_index(row_of(name)) else {
            continue;
        };
        let Some(at) = a
            .blocks
            .get(layer as usize)
            .and_then(|b| b.mixer.attention())
        else {
            continue;
        };
        let (want, fields) = match proj {
            "q_proj" => (
                at.q_dim() * if at.output_gate { 2 } else { 1 },
                format!(
                    "num_attention_heads {} x head_dim {}{}",
                    at.heads,
                    at.head_dim,
                    if at.output_gate {
                        " x 2 (output gate)"
                    } else {
                        ""
                    }
                ),
            ),
            "k_proj" => (
                at.kv_dim(),
                format!(
                    "num_key_value_heads {} x head_dim {}",
                    at.kv_heads, at.head_dim
                ),
            ),
            "v_proj" => (
                at.kv_heads * at.v_head_dim,
                format!(
                    "num_key_value_heads {} x head_dim {}",
                    at.kv_heads, at.v_head_dim
                ),
            ),
            _ => continue,
        };
        if shape[0] != want {
            return Some(format!(
                "{fields} = {want} output features, but {name} has {} rows: the head fields contradict the weights",
                shape[0]
            ));
        }
    }
    None
}

/// Compares the headers with the config: the embedding's shape and the block count.
fn consistency(a: &Arch, layers: &[Layer], file: &str, format: Format) -> Vec<String> {
    let mut w = Vec::new();
    let blocks = layers.iter().filter_map(|l| block_index(&l.name)).max();
    let (source, key) = match format {
        Format::Gguf => ("the GGUF metadata", "block_count"),
        _ => ("config.json", "num_hidden_layers"),
    };
    if let Some(max) = blocks {
        if max + 1 != a.layers {
            w.push(format!(
                "{file}: {source} says {} layers ({key}) but the weights hold {} blocks",
                a.layers,
                max + 1
            ));
        }
    }
    w
}

/// Analyses a checkpoint folder.
pub fn analyze_checkpoint(
    ck: &Checkpoint,
    o: &LlmOptions,
    train: Option<&TrainConfig>,
) -> Result<MemReport> {
    let cfg_file = ck.config_path.display().to_string();
    let mut arch =
        arch::from_config(&ck.config).map_err(|e| Error::malformed(&ck.config_path, e.0))?;
    if let Some(a) = arch.as_mut() {
        Head::refine(a, ck.weights.tensors.iter().map(|t| t.name.as_str()));
        if let Some(p) = &ck.preprocessor {
            a.vision = a.vision.take().map(|v| v.with_processor(p));
        }
        // the vision side's nn.Linear layers: 2-D weights outside embeddings (patch
        // convolutions are 4-D or 5-D, norms 1-D, Gemma 3's projection a bare parameter)
        a.vision_linears = ck
            .weights
            .tensors
            .iter()
            .filter(|t| t.shape.len() == 2 && t.dtype.is_float() && vision_row(&t.name).is_some())
            .filter_map(|t| {
                let module = t.name.strip_suffix(".weight")?;
                // an embedding table (positions) is no Linear; Llama 4's patch embedding
                // (`patch_embedding.linear`) is one
                let last = module.rsplit('.').next().unwrap_or(module);
                (!last.contains("embed")).then(|| (module.to_string(), t.shape[1], t.shape[0]))
            })
            .collect();
        let shapes = ck
            .weights
            .tensors
            .iter()
            .filter(|t| t.dtype.is_float())
            .map(|t| (t.name.as_str(), t.shape.as_slice()));
        if let Some(why) = projection_mismatch(a, shapes) {
            return Err(Error::malformed(&ck.config_path, why));
        }
    }
    let (method, bits) = quant_method(&ck.config);
    let tensors: Vec<T> = ck
        .weights
        .tensors
        .iter()
        .map(|t| T {
            name: &t.name,
            dtype: Some(t.dtype),
            shape: &t.shape,
            numel: t.numel(),
            bytes: t.bytes(),
        })
        .collect();
    let (mut layers, totals, matrices) = layers_of(&tensors, bits, method.as_deref(), false);
    let elem = arch
        .as_ref()
        .and_then(|a| a.dtype)
        .or_else(|| {
            ck.weights
                .tensors
                .iter()
                .map(|t| t.dtype)
                .find(|d| d.is_float())
        })
        .and_then(|d| d.bytes_for(1))
        .unwrap_or(2);
    // a sentence-transformers model's modules after its transformer (a Dense layer) run once per
    // sequence on the pooled vector: their outputs and MACs are per sequence, said here (`finish`
    // keeps rows that arrive with their activations)
    for l in layers.iter_mut() {
        let Some((_, class)) = ck.modules.iter().find(|(m, _)| {
            l.name == *m
                || l.name
                    .strip_prefix(m.as_str())
                    .is_some_and(|r| r.starts_with('.'))
        }) else {
            continue;
        };
        let (mut out, mut macs) = (0u64, 0u64);
        for t in tensors.iter().filter(|t| {
            t.shape.len() == 2
                && t.name
                    .strip_prefix(l.name.as_str())
                    .is_some_and(|r| r.starts_with('.'))
        }) {
            out = out.saturating_add(t.shape[0]);
            macs = macs.saturating_add(t.numel);
        }
        let known = |v: Option<u64>| v.and_then(|v| i64::try_from(v).ok()).map(Dim::known);
        l.op = class.clone().into();
        l.activation_bytes = known(o.batch.checked_mul(out).and_then(|x| x.checked_mul(elem)));
        l.macs = known(o.batch.checked_mul(macs));
    }
    let mut warnings = ck.weights.warnings.clone();
    if ck.config.get("model_type").is_none() {
        if let Some(a) = &arch {
            warnings.push(format!(
                "{cfg_file} has no model_type: read as {} from its architectures",
                a.model_type
            ));
        }
    }
    let guess = if arch.is_none() {
        kv_guess(&ck.config, o, elem)
    } else {
        None
    };
    let mut r = finish(
        ck.dir.display().to_string(),
        Format::Checkpoint,
        arch,
        layers,
        matrices,
        totals,
        elem,
        method,
        o,
        train,
        &cfg_file,
        &mut warnings,
        Vec::new(),
        ck.config
            .get("model_type")
            .and_then(|m| m.as_str())
            .map(str::to_string),
    )
    .map_err(|e| e.in_file(&ck.dir))?;
    r.notes.extend(guess);
    // what the loader says about the folder (a sentence-transformers model's modules)
    r.notes.extend(ck.weights.notes.iter().cloned());
    Ok(r)
}

/// For a `model_type` nnlint does not model: the KV cache its config's usual fields imply if its
/// attention layers cache keys and values as Llama's do, said as a guess (a note, never a number
/// in the JSON's fields), with the layers that do not fit that picture named.
fn kv_guess(config: &serde_json::Value, o: &LlmOptions, elem: u64) -> Option<String> {
    let c = config
        .get("text_config")
        .filter(|t| t.is_object())
        .unwrap_or(config);
    let u = |k: &str| c.get(k).and_then(serde_json::Value::as_u64);
    if u("kv_lora_rank").is_some() {
        // multi-head latent attention caches a compressed latent, not per-head keys and values
        return Some(
            "multi-head latent attention (kv_lora_rank in config.json): its cache is not per-head keys and values, and nnlint gives no guess of it".into(),
        );
    }
    // the cache takes the dtype the config runs in, else the stored weights'
    let elem = match ["torch_dtype", "dtype"]
        .iter()
        .find_map(|k| c.get(*k).or(config.get(*k))?.as_str())
    {
        Some("bfloat16" | "float16") => 2,
        Some("float32") => 4,
        _ => elem,
    };
    let layers = u("num_hidden_layers")?;
    let heads = u("num_attention_heads")?;
    let kv_heads = u("num_key_value_heads").unwrap_or(heads);
    let head_dim = u("head_dim").or_else(|| Some(u("hidden_size")? / heads.max(1)))?;
    let seq = if o.seq > 0 {
        o.seq
    } else {
        u("max_position_embeddings").unwrap_or(4096).clamp(1, 4096)
    };
    // layer_types, when given, says which layers attend (and which slide)
    let window = u("sliding_window");
    let (mut full, mut sliding, mut other) = (0u64, 0u64, Vec::new());
    match c.get("layer_types").and_then(serde_json::Value::as_array) {
        Some(types) => {
            for t in types.iter().filter_map(serde_json::Value::as_str) {
                match t {
                    "full_attention" | "attention" => full += 1,
                    "sliding_attention" | "chunked_attention" => sliding += 1,
                    t => other.push(t.to_string()),
                }
            }
        }
        None => full = layers,
    }
    other.sort();
    other.dedup();
    let per_token_layer = 2u64
        .checked_mul(kv_heads)?
        .checked_mul(head_dim)?
        .checked_mul(elem)?;
    let kept = |n: u64| seq.min(n);
    let per_seq = full
        .checked_mul(seq)?
        .checked_add(sliding.checked_mul(kept(window.unwrap_or(seq)))?)?
        .checked_mul(per_token_layer)?;
    let total = per_seq.checked_mul(o.batch)?;
    Some(format!(
        "a guess, not a model: if the {} attention layers of this config cache keys and values as Llama's do ({kv_heads} KV heads x head_dim {head_dim}, {elem} B each{}), the KV cache at batch {} x {seq} tokens is about {}{}",
        full + sliding,
        if sliding > 0 {
            format!(", {sliding} of them keeping a window of {}", window.unwrap_or(seq))
        } else {
            String::new()
        },
        o.batch,
        crate::util::units::bytes(total),
        if other.is_empty() {
            String::new()
        } else {
            format!(
                "; its {} layers hold a state of their own, not counted",
                other.join(", ")
            )
        }
    ))
}

/// Analyses a GGUF file from its metadata.
pub fn analyze_gguf(g: &Gguf, o: &LlmOptions, train: Option<&TrainConfig>) -> Result<MemReport> {
    let file = g.path.display().to_string();
    let tensors: Vec<T> = g
        .tensors
        .iter()
        .map(|t| T {
            name: &t.name,
            dtype: None,
            shape: &t.shape,
            numel: t.elements,
            bytes: t.bytes,
        })
        .collect();
    if is_mmproj(g) {
        let kind = g
            .metadata
            .get("clip.projector_type")
            .and_then(|m| m.as_str())
            .unwrap_or("unknown");
        let (layers, totals, matrices) = layers_of(&tensors, 4, None, true);
        let note = format!(
            "a multimodal projector file (mmproj, projector type {kind}): a vision tower and projector whose language model is another GGUF file; nnlint counts their parameters, image activations are not modelled"
        );
        let mut warnings = g.warnings.clone();
        return finish(
            file.clone(),
            Format::Gguf,
            None,
            layers,
            matrices,
            totals,
            2,
            None,
            o,
            train,
            &file,
            &mut warnings,
            vec![note],
            Some("clip".into()),
        )
        .map_err(|e| e.in_file(&g.path));
    }
    let (mut arch, mut notes) = gguf_arch(g);
    let buffers = arch
        .as_ref()
        .and_then(|a| a.moe.as_ref())
        .is_none_or(|m| m.correction != Some(arch::Correction::Parameter));
    let (mut layers, mut totals, mut matrices) = layers_of(&tensors, 4, None, buffers);
    // the vision tower and projector of a multimodal model sit in a separate mmproj file
    match mmproj_beside(&g.path) {
        Some(Ok(m)) => {
            for (prefix, row, op) in [
                ("v.", "mmproj: vision tower", "Vision"),
                ("mm.", "mmproj: projector", "Projector"),
            ] {
                let mut l = Layer::of_tensors(row.into(), op.into(), Vec::new());
                let mut matrix = 0u64;
                for t in m.tensors.iter().filter(|t| t.name.starts_with(prefix)) {
                    l.params = l.params.saturating_add(t.elements);
                    l.param_bytes = l.param_bytes.saturating_add(t.bytes);
                    if t.shape.len() >= 2 {
                        matrix = matrix.saturating_add(t.elements);
                    }
                }
                if l.params > 0 {
                    totals.params = totals.params.saturating_add(l.params);
                    totals.param_bytes = totals.param_bytes.saturating_add(l.param_bytes);
                    layers.push(l);
                    matrices.push(matrix);
                }
            }
            notes.push(format!(
                "the vision tower and projector are read from {} beside the model: their parameters are counted, image inputs are not modelled",
                m.path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
            ));
        }
        Some(Err(e)) => notes.push(format!(
            "the mmproj file beside the model was not read: {e}"
        )),
        None => {}
    }
    if let Some(a) = arch.as_mut() {
        Head::refine(a, g.tensors.iter().map(|t| t.name.as_str()));
    }
    let quant = g
        .metadata
        .get("general.file_type")
        .and_then(|m| m.as_u64())
        .map(|ft| format!("GGUF file type {ft}"));
    let mut warnings = g.warnings.clone();
    let mt = g
        .metadata
        .get("general.architecture")
        .and_then(|m| m.as_str())
        .map(str::to_string);
    finish(
        file.clone(),
        Format::Gguf,
        arch,
        layers,
        matrices,
        totals,
        2,
        quant,
        o,
        train,
        &file,
        &mut warnings,
        notes,
        mt,
    )
    .map_err(|e| e.in_file(&g.path))
}

/// Whether a GGUF file is a multimodal projector (llama.cpp's `mmproj`: `general.type` mmproj,
/// architecture `clip`).
fn is_mmproj(g: &Gguf) -> bool {
    let get = |k: &str| g.metadata.get(k).and_then(|m| m.as_str());
    get("general.type") == Some("mmproj") || get("general.architecture") == Some("clip")
}

/// The mmproj file that goes with a model file: the one `*mmproj*.gguf` in its folder, when the
/// folder holds no other model (several models or projectors: no pairing, as llama.cpp needs
/// `--mmproj` named).
fn mmproj_beside(model: &std::path::Path) -> Option<Result<Gguf>> {
    let dir = model
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let (mut projectors, mut models) = (Vec::new(), 0usize);
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let name = e.file_name().to_string_lossy().to_lowercase();
        if !name.ends_with(".gguf") {
            continue;
        }
        if name.contains("mmproj") {
            projectors.push(e.path());
        } else {
            models += 1;
        }
    }
    if models != 1 || projectors.len() != 1 {
        return None;
    }
    let p = projectors.pop()?;
    Some(crate::load::gguf::load(&p).and_then(|m| {
        if is_mmproj(&m) {
            Ok(m)
        } else {
            Err(Error::malformed(
                &p,
                "is named like a projector but is not an mmproj file",
            ))
        }
    }))
}

/// The architecture from GGUF metadata: the keys llama.cpp reads (`{arch}.block_count`,
/// `{arch}.attention.head_count`...), read as the config of the matching Hugging Face family
/// (whose rules then say, for instance, which Gemma layers slide). Shapes the metadata leaves out
/// (vocabulary, FFN width) are read off the tensors. The notes say what is estimated and why.
fn gguf_arch(g: &Gguf) -> (Option<Arch>, Vec<String>) {
    let mut notes = Vec::new();
    let name = g
        .metadata
        .get("general.architecture")
        .and_then(|m| m.as_str())
        .unwrap_or("");
    let keys = families::GgufKeys(g);
    let get = |k: &str| keys.u(k);
    // the outermost dimension (the loader lists them outermost first, as PyTorch does): a
    // matrix's output width, or the embedding's vocabulary
    let rows = |tensor: &str| {
        g.tensors
            .iter()
            .find(|t| t.name == tensor && t.shape.len() == 2)
            .and_then(|t| t.shape.first().copied())
    };
    let family = families::gguf(name);
    let mt = family.map(|(t, _)| t);
    // Mamba-2 files have no attention (head_count 0), and its family needs none
    let recurrent = mt == Some("mamba2");
    let (Some(hidden), Some(heads), Some(blocks)) = (
        get("embedding_length"),
        get("attention.head_count").or(recurrent.then_some(0)),
        get("block_count"),
    ) else {
        notes.push(format!(
            "the GGUF metadata lacks {name}.embedding_length, .attention.head_count or .block_count: parameters are from the tensor headers; the KV cache, activations and training memory need them"
        ));
        return (None, notes);
    };
    // multi-token-prediction blocks (GLM-4.5, Qwen3-Next) come after the model's own
    let layers = blocks.saturating_sub(get("nextn_predict_layers").unwrap_or(0));
    let vocab = get("vocab_size")
        .or_else(|| match g.metadata.get("tokenizer.ggml.tokens") {
            Some(crate::load::gguf::Meta::Array(n, _)) => Some(*n),
            _ => None,
        })
        .or_else(|| rows("token_embd.weight"));
    let Some(vocab) = vocab else {
        notes.push(
            "the GGUF file gives no vocabulary size (no vocab_size, tokenizer.ggml.tokens or token_embd.weight): the KV cache, activations and training memory need it".into(),
        );
        return (None, notes);
    };
    let intermediate = get("feed_forward_length")
        .or_else(|| rows("blk.0.ffn_up.weight"))
        .unwrap_or(hidden.saturating_mul(4));
    let mut cfg = serde_json::json!({
        "model_type": mt.unwrap_or("llama"),
        "hidden_size": hidden,
        "n_embd": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": get("attention.head_count_kv").unwrap_or(heads),
        "intermediate_size": intermediate,
        "n_inner": intermediate,
        "vocab_size": vocab,
        "max_position_embeddings": get("context_length").unwrap_or(0),
        "tie_word_embeddings": !g.tensors.iter().any(|t| t.name == "output.weight"),
    });
    let set = |cfg: &mut serde_json::Value, k: &str, v: serde_json::Value| {
        if let Some(m) = cfg.as_object_mut() {
            m.insert(k.to_string(), v);
        }
    };
    if let Some(d) = get("attention.key_length") {
        set(&mut cfg, "head_dim", d.into());
    }
    if let (Some(r), Some(d)) = (
        get("rope.dimension_count"),
        get("attention.key_length").or((heads > 0).then(|| hidden / heads)),
    ) {
        if d > 0 && r < d {
            set(
                &mut cfg,
                "partial_rotary_factor",
                (r as f64 / d as f64).into(),
            );
        }
    }
    // llama.cpp slides only Gemma 2's even layers and five of every six of Gemma 3's; it reads
    // and ignores the window of the other architectures above (Phi-3's included)
    let window = get("attention.sliding_window").filter(|&w| w > 0);
    match (mt, window) {
        (Some("gemma2" | "gemma3_text"), Some(w)) => {
            set(&mut cfg, "sliding_window", w.into());
            match g.arch_key("attention.sliding_window_pattern") {
                // newer files: a period, or per layer whether it slides
                Some(crate::load::gguf::Meta::Array(n, flags)) if *n == layers => {
                    let types: Vec<&str> = flags
                        .iter()
                        .map(|&f| {
                            if f != 0.0 {
                                "sliding_attention"
                            } else {
                                "full_attention"
                            }
                        })
                        .collect();
                    if types.len() as u64 == layers {
                        set(&mut cfg, "layer_types", types.into());
                    }
                }
                Some(m) => {
                    if let Some(p) = m.as_u64() {
                        set(&mut cfg, "sliding_window_pattern", p.into());
                    }
                }
                None => {}
            }
        }
        (None, Some(w)) => notes.push(format!(
            "the file declares a {w}-token sliding window, but nnlint does not know which layers of a '{name}' model use it: the KV cache assumes full attention everywhere (an upper bound)"
        )),
        _ => {}
    }
    for k in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if let Some(v) = g.arch_key(k).and_then(|m| m.as_f64()) {
            set(&mut cfg, k, v.into());
        }
    }
    if let (Some(e), Some(k)) = (get("expert_count"), get("expert_used_count")) {
        if e > 0 {
            set(&mut cfg, "num_local_experts", e.into());
            set(&mut cfg, "num_experts", e.into());
            set(&mut cfg, "num_experts_per_tok", k.into());
            set(
                &mut cfg,
                "moe_intermediate_size",
                get("expert_feed_forward_length")
                    .unwrap_or(intermediate)
                    .into(),
            );
            if let Some(s) = get("expert_shared_feed_forward_length") {
                set(&mut cfg, "shared_expert_intermediate_size", s.into());
            }
            // llama.cpp's llama architecture with experts is Mixtral (and so is the estimate of
            // an architecture nnlint does not know)
            if mt.is_none_or(|m| m == "llama") {
                set(&mut cfg, "model_type", "mixtral".into());
            }
        }
    }
    if let (Some((_, Some(fill))), Some(m)) = (family, cfg.as_object_mut()) {
        fill(&keys, m, layers);
    }
    if mt.is_none() {
        let known: Vec<&str> = families::GGUF.iter().map(|(a, _, _)| *a).collect();
        notes.push(format!(
            "GGUF architecture '{name}' is modelled as a llama-style decoder (nnlint models {}): the parameters are exact, the activations and training memory are estimates",
            known.join(", ")
        ));
    }
    match arch::from_config(&cfg) {
        Ok(Some(mut a)) => {
            if !name.is_empty() {
                a.model_type = name.to_string();
            }
            // GGUF keeps no scan chunk size (the training kernel pads to it): Mamba-2's scan
            // stays off the tape, a stated lower bound
            for b in a.blocks.iter_mut() {
                let parts: Vec<&mut layers::Mixer> = match &mut b.mixer {
                    layers::Mixer::Parallel { parts } => parts.iter_mut().collect(),
                    m => vec![m],
                };
                for m in parts {
                    if let layers::Mixer::Mamba2(s) = m {
                        s.tape = false;
                    }
                }
            }
            (Some(a), notes)
        }
        Ok(None) => (None, notes),
        Err(e) => {
            notes.push(format!(
                "the GGUF metadata does not describe a model nnlint can size ({}): parameters are from the tensor headers",
                e.0
            ));
            (None, notes)
        }
    }
}

/// A note on multi-token-prediction weights stored beside the model (DeepSeek-V3's block 61,
/// Qwen3-Next's and Qwen3.5's `mtp.*`, GLM-4.5's extra block): transformers does not load them, so
/// `model.parameters()` is smaller than the file's count, which nnlint reports.
fn unloaded_mtp(a: &Arch, layers: &[Layer]) -> Option<String> {
    let extra: Vec<&Layer> = layers
        .iter()
        .filter(|l| {
            l.name.starts_with("mtp.")
                || l.name == "mtp"
                || l.name.starts_with("model.mtp")
                || (l.op == "Block" && block_index(&l.name).is_some_and(|i| i >= a.layers))
        })
        .collect();
    if extra.is_empty() {
        return None;
    }
    let params: u64 = extra.iter().map(|l| l.params).sum();
    Some(format!(
        "{params} parameters in {} ({}) lie beyond the config's {} blocks: multi-token-prediction weights that transformers does not load (model.parameters() is {params} fewer) and vLLM loads only for speculative decoding; they are counted here as stored",
        if extra.len() == 1 { "one row" } else { "rows" },
        extra.iter().take(3).map(|l| l.name.as_str()).collect::<Vec<_>>().join(", "),
        a.layers
    ))
}

#[allow(clippy::too_many_arguments)]
fn finish(
    model: String,
    format: Format,
    arch: Option<Arch>,
    mut layers: Vec<Layer>,
    matrices: Vec<u64>,
    totals: Totals,
    elem: u64,
    quantization: Option<String>,
    o: &LlmOptions,
    train: Option<&TrainConfig>,
    file: &str,
    warnings: &mut Vec<String>,
    mut notes: Vec<String>,
    model_type: Option<String>,
) -> Result<MemReport> {
    let Some(a) = arch else {
        // a GGUF file's notes already say why there is no architecture
        if notes.is_empty() {
            let given = model_type.as_deref().unwrap_or("(none)");
            let known: Vec<&str> = arch::known().collect();
            let hint = crate::util::suggest::closest(given, &known)
                .map(|k| format!(" (did you mean '{k}'?)"))
                .unwrap_or_default();
            notes.push(format!(
                "model_type {given}{hint} is not one nnlint models ({}): parameters are from the headers; the KV cache, activations and training memory need the architecture",
                // the wrappers' text models (qwen2_5_vl_text) are reached through their wrapper
                known
                    .iter()
                    .filter(|k| !k.ends_with("_vl_text"))
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        if train.is_some() {
            return Err(Error::refused(
                file,
                format!(
                    "--train needs the architecture: {}",
                    notes.last().map_or("", String::as_str)
                ),
            ));
        }
        return Ok(report(
            model,
            format,
            layers,
            totals,
            notes,
            warnings.clone(),
            None,
            None,
            o,
        ));
    };
    warnings.extend(consistency(&a, &layers, file, format));
    if let Some(n) = unloaded_mtp(&a, &layers) {
        notes.push(n);
    }
    let mut o = o.clone();
    // RoBERTa's positions start after padding_idx (1): 2 of its table are never a token's
    let limit = if a.model_type == "roberta" {
        a.max_positions.saturating_sub(2)
    } else {
        a.max_positions
    };
    if o.seq == 0 {
        o.seq = if a.image.is_some() {
            1
        } else {
            limit.clamp(1, 4096)
        };
        if a.image.is_none() {
            notes.push(format!(
                "--seq not given: {} tokens per sequence (the context length, at most 4096)",
                o.seq
            ));
        }
    }
    // images join the text: the language model runs on both
    let (eo, images) = with_images(&a, &o)?;
    if let Some(img) = &images {
        notes.push(format!(
            "--images {}: an image of {}x{}{} is {} tokens in the text ({} image features{}); each sequence is {} text + {} image tokens = {}",
            img.per_sequence,
            img.image_size[0],
            img.image_size[1],
            if img.processed_size != img.image_size {
                format!(
                    " (resized by the processor to {}x{})",
                    img.processed_size[0], img.processed_size[1]
                )
            } else {
                String::new()
            },
            img.text_tokens,
            img.image_tokens,
            if img.text_tokens > img.image_tokens {
                " and the markers the processor adds"
            } else {
                ""
            },
            img.text_seq,
            img.seq - img.text_seq,
            img.seq
        ));
    }
    if a.image.is_none() && limit > 0 && eo.seq > limit {
        match a.family {
            arch::Family::Gpt2 | arch::Family::Bert => {
                return Err(Error::Usage(format!(
                    "--seq {}: {} has learned positions for {limit} tokens (max_position_embeddings), a longer sequence cannot run",
                    eo.seq, a.model_type
                )))
            }
            _ => notes.push(format!(
                "{} {} is past the {limit} positions {} was trained for (max_position_embeddings): the memory is as counted, but without rope scaling its output degrades",
                if images.is_some() { "the sequence with the images," } else { "--seq" },
                eo.seq, a.model_type
            )),
        }
    }
    let usual = match a.family {
        arch::Family::Bert => a.head == Head::MaskedLm,
        arch::Family::Vit => matches!(a.head, Head::Classifier { .. }),
        _ => a.head == Head::CausalLm,
    };
    if !usual {
        notes.push(format!(
            "{}: counted with {}{}",
            a.class.as_deref().unwrap_or("the checkpoint's tensors"),
            a.head.describe(),
            if a.pooler { " and the pooler" } else { "" }
        ));
    }
    let n = a.tokens(eo.seq);
    let (block_linear, active_linear) = linear_params(&a, &layers, &matrices);
    let active = active_params(&a, totals.params);
    // per-block rows: the output activation and the MACs of the prefill
    let tokens = o.batch.saturating_mul(n);
    let per_block_macs =
        macs_per_token(&a, active_linear.saturating_sub(untied_head(&a)), eo.seq) / a.layers.max(1);
    let hidden_bytes = tokens
        .checked_mul(a.hidden)
        .and_then(|x| x.checked_mul(elem));
    let known = |v: Option<u64>| v.and_then(|v| i64::try_from(v).ok()).map(Dim::known);
    let lm = a.head.is_lm();
    let mut vision = Vec::new();
    for l in layers.iter_mut() {
        if l.activation_bytes.is_some() {
            // computed by the caller (a sentence-transformers module)
            continue;
        }
        if vision_row(&l.name).is_some() || matches!(&*l.op, "Vision" | "Projector") {
            // a multimodal wrapper's vision side runs on images only: known zeros on text
            let projector = l.op == "Projector";
            let (act, macs) = match (&images, &a.vision) {
                (Some(img), Some(v)) => {
                    let total = o.batch.saturating_mul(img.per_sequence);
                    let split = v.macs_split(img, total);
                    // the encoder's last hidden state, the projector's image features
                    let (rows, width) = if projector {
                        (img.image_tokens, a.hidden)
                    } else if let vision::Encoder::Llama4 { po, .. } = v.encoder {
                        // the vision model ends with the pixel shuffle's MLP
                        (img.image_tokens, po)
                    } else {
                        (img.encoder_tokens, v.hidden)
                    };
                    (
                        total
                            .checked_mul(rows)
                            .and_then(|x| x.checked_mul(width))
                            .and_then(|x| x.checked_mul(elem)),
                        split.map(|(e, p)| if projector { p } else { e }),
                    )
                }
                _ => (Some(0), Some(0)),
            };
            l.activation_bytes = known(act);
            l.macs = known(macs);
            vision.push(l.name.clone());
            continue;
        }
        let head = l.params == a.vocab * a.hidden && l.op == "Linear" && a.vocab > 0 && lm;
        let (act, macs) = if block_index(&l.name).is_some() {
            (hidden_bytes, tokens.checked_mul(per_block_macs))
        } else if let Some((rows, inp, out)) = head_linear(&a, &l.name, o.batch, tokens) {
            (
                rows.checked_mul(out).and_then(|x| x.checked_mul(elem)),
                rows.checked_mul(inp).and_then(|x| x.checked_mul(out)),
            )
        } else if head {
            l.op = "LmHead".into();
            (
                tokens
                    .checked_mul(a.vocab)
                    .and_then(|x| x.checked_mul(elem)),
                tokens.checked_mul(l.params),
            )
        } else if l.op == "Embedding" && a.tied && lm && l.params == a.vocab * a.hidden {
            // the tied head multiplies by this matrix
            (hidden_bytes, tokens.checked_mul(l.params))
        } else if l.params > 0 {
            (hidden_bytes, Some(0))
        } else {
            continue;
        };
        l.activation_bytes = known(act);
        l.macs = known(macs);
    }
    // graph order: embeddings, blocks, the final norm, the head
    layers.sort_by_key(|l| match &*l.op {
        "Vision" => 0,
        "Projector" => 1,
        "Embedding" => 2,
        "Block" => 3,
        "LmHead" => 5,
        _ => 4,
    });
    if !vision.is_empty() && images.is_none() {
        notes.push(format!(
            "the vision side of {} ({}) has rows of its own with exact parameters; the estimates are for text input: {}",
            a.class.as_deref().unwrap_or("this multimodal model"),
            vision.join(", "),
            match (&a.vision, &a.vision_unmodelled) {
                (Some(_), _) => "--images N (and --image-size HxW) adds images, their tokens and the encoder's activations".to_string(),
                (None, Some(why)) => format!("images are not counted ({why})"),
                (None, None) => "images, their tokens and their encoder's activations are not counted".to_string(),
            }
        ));
    }
    let mut totals = totals;
    let sum = |f: &dyn Fn(&Layer) -> Option<u64>| {
        layers
            .iter()
            .try_fold(0u64, |s, l| f(l).and_then(|v| s.checked_add(v)))
    };
    totals.activation_bytes = known(sum(&|l| {
        l.activation_bytes
            .as_ref()
            .and_then(Dim::as_u64)
            .or(Some(0))
    }));
    totals.macs = known(sum(&|l| l.macs.as_ref().and_then(Dim::as_u64).or(Some(0))));
    let inf = if a.is_causal_lm() {
        let overhead = train.map(|c| c.overhead).unwrap_or_default();
        let i = inference(&a, totals.param_bytes, active_linear, elem, &o, &overhead)?;
        notes.extend(i.cache_assumptions.clone());
        Some(i)
    } else {
        None
    };
    let mut trainable = None;
    let training = match train {
        Some(c) => {
            let (t, tp) = training_step(&a, totals.params, block_linear, c, &o)?;
            if o.lora.is_some() || o.qlora {
                trainable = Some(tp);
            }
            Some(t)
        }
        None => None,
    };
    if a.moe.is_some() {
        notes.push(format!(
            "mixture of experts: {} parameters, {} active per token",
            totals.params,
            active.unwrap_or(totals.params)
        ));
    }
    let model_info = LlmModel {
        name: model.clone(),
        arch: a.clone(),
        params: totals.params,
        param_bytes: totals.param_bytes,
        block_linear,
        active_linear,
        elem,
    };
    let info = LlmInfo {
        model: Some(model_info),
        model_type: Some(a.model_type.clone()),
        active_params: active,
        quantization,
        inference: inf,
        trainable_params: trainable.or(training.as_ref().map(|_| totals.params)),
        architecture: Some(a),
    };
    let mut r = report(
        model,
        format,
        layers,
        totals,
        notes,
        warnings.clone(),
        training,
        Some(info),
        &o,
    );
    r.batch = Some(o.batch);
    r.peak_missing = Some("see the serving memory below (weights, KV cache, logits)".into());
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
fn report(
    model: String,
    format: Format,
    layers: Vec<Layer>,
    totals: Totals,
    notes: Vec<String>,
    warnings: Vec<String>,
    training: Option<Training>,
    llm: Option<LlmInfo>,
    o: &LlmOptions,
) -> MemReport {
    let mut dims = BTreeMap::new();
    if o.seq > 0 {
        dims.insert("seq".to_string(), o.seq as i64);
    }
    MemReport {
        model,
        format,
        batch: None,
        dims,
        layers: layers.into(),
        totals,
        unknown_ops: Vec::new(),
        peak: None,
        peak_missing: None,
        unbound: Vec::new(),
        unaccounted: Vec::new(),
        notes,
        warnings,
        branches: Vec::new(),
        training,
        llm,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_architectures_map_to_families_nnlint_models() {
        for (name, mt, _) in families::GGUF {
            assert!(arch::known().any(|k| k == *mt), "{name} -> {mt}");
        }
        assert!(families::gguf("mamba").is_none());
    }

    #[test]
    fn packed_layouts_count_logical_parameters() {
        assert_eq!(
            stored_kind("a.qweight", DType::I32, 8 * 64, 4, Some("gptq")),
            Stored::Param(4096)
        );
        assert_eq!(
            stored_kind("a.scales", DType::F16, 128, 4, Some("gptq")),
            Stored::QuantState
        );
        assert_eq!(
            stored_kind("a.weight", DType::U8, 2048, 4, Some("bitsandbytes")),
            Stored::Param(4096)
        );
        assert_eq!(
            stored_kind("a.weight", DType::I8, 4096, 8, Some("bitsandbytes")),
            Stored::Param(4096)
        );
        assert_eq!(
            stored_kind("a.weight_scale_inv", DType::F32, 1, 8, Some("fp8")),
            Stored::QuantState
        );
    }

    #[test]
    fn rows_are_blocks() {
        assert_eq!(
            row_of("model.layers.12.mlp.up_proj.weight"),
            "model.layers.12"
        );
        assert_eq!(
            row_of("transformer.h.0.attn.c_attn.weight"),
            "transformer.h.0"
        );
        assert_eq!(row_of("blk.3.attn_q.weight"), "blk.3");
        assert_eq!(row_of("lm_head.weight"), "lm_head");
        // the first block index after a block keyword; a vision module anywhere wins
        assert_eq!(row_of("model.layers.layers.3.w"), "model.layers.layers.3");
        assert_eq!(
            row_of("model.visual.blocks.0.attn.qkv.weight"),
            "model.visual"
        );
        assert_eq!(
            row_of("model.layers.0.vision_tower.x.weight"),
            "model.layers.0.vision_tower"
        );
        assert_eq!(row_of("model.layers.x.weight"), "model.layers.x");
        assert_eq!(row_of("bias"), "bias");
    }

    #[test]
    fn nf4_with_double_quantization_is_about_4_127_bits() {
        let b = nf4_bytes(64 * 256 * 100);
        let bits = b as f64 * 8.0 / (64.0 * 256.0 * 100.0);
        assert!((bits - 4.127).abs() < 0.001, "{bits}");
    }
}
