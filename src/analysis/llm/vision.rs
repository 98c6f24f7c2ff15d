//! Image inputs of the multimodal wrappers (`--images N`, `--image-size HxW`): how many tokens
//! one image adds to the text sequence, and what the vision encoder and its projector hold in a
//! prefill and keep for backward.
//!
//! A wrapper's language model is estimated as usual at the longer sequence (text + image
//! tokens); the vision side adds its own terms. Each encoder's formulas were derived from
//! transformers 5.24's modeling code and checked byte for byte against PyTorch by
//! `tools/llm/measure_images.py` (`testdata/llm/<family>/images.json`, `vision_formula`).
//! Symbols: `S` the patches of all images of the batch together (what the encoder runs on),
//! `d`, `I`, `h`, `hd` the encoder's width, MLP width, heads and head size, `Dt` the language
//! model's width, `m` the merge side (m×m patches become one token).

use serde::Serialize;
use serde_json::Value;

use super::forward::{Attn, Numerics};
use crate::ir::DType;

/// The vision encoders nnlint models.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Encoder {
    /// Qwen2.5-VL: windowed attention except in `full_layers`, SwiGLU MLP, RMSNorm, a 2-layer
    /// merger of m×m patches; `window` is the attention window's side in pixels.
    Qwen25 { window: u64, full_layers: Vec<u64> },
    /// Qwen3-VL: full attention per image, GELU MLP, LayerNorm, interpolated learned positions,
    /// and `deepstack` extra mergers whose outputs feed early decoder layers.
    Qwen3 { deepstack: u64 },
    /// Pixtral (Mistral 3): the images of a batch packed into one sequence with a block-diagonal
    /// mask, SwiGLU, RMSNorm, 2-D rotary; a patch merger and a 2-layer projector.
    Pixtral,
    /// CLIP (LLaVA): a class token and the patches of a fixed-size image, quick-GELU MLP; the
    /// projector reads layer `vision_feature_layer`; `keep_cls`: the `full` feature strategy.
    Clip { keep_cls: bool },
    /// SigLIP (Gemma 3): the patches of a fixed-size image, tanh-GELU MLP; the projector
    /// average-pools them to `tokens` per image, normalises and projects (a matmul).
    Siglip { tokens: u64 },
    /// Llama 4: each image split into tiles of `image_size` (a best-fit canvas of at most
    /// `max_tiles` tiles, plus a global tile when there are several), each tile its own sequence
    /// of patches and a class token (appended last), LayerNorm, GELU MLP, 2-D rotary in fp32;
    /// a pixel shuffle (`merge` = 1 / pixel_shuffle_ratio) and a 2-layer GELU MLP (`pi` in, `po`
    /// out) inside the vision model, then `multi_modal_projector` (po → text width).
    Llama4 { pi: u64, po: u64, max_tiles: u64 },
}

/// How the vision side trains in a step ([`Vision::saved_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Training {
    /// Every parameter trains.
    Full,
    /// Full training with every encoder layer checkpointed (it keeps its input).
    Checkpoint,
    /// The base is frozen; adapters where peft puts them.
    Lora(Adapted),
    /// LoRA with every layer checkpointed. transformers' `gradient_checkpointing_enable()` then
    /// hooks each sub-model's input embeddings to require grad: on the vision side too where the
    /// tower names its patch embedding (all but Qwen3-VL's), so a frozen tower does work.
    LoraCheckpoint(Adapted),
}

/// Which of the vision side's linear layers LoRA wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Adapted {
    /// None: nothing on the vision side needs a gradient.
    Nothing,
    /// `q_proj` and `v_proj`, of this rank.
    QueryValue(u64),
    /// Every linear layer (`all-linear`), of this rank.
    AllLinear(u64),
    /// Another choice (not measured).
    Other,
}

/// The formulas' symbols for the images of a batch, in 128-bit integers (the sizes are capped
/// by [`MAX_DIM`] and [`MAX_PATCHES`], so no product overflows).
struct Sym {
    /// Encoder width, MLP width, heads, head size; the language model's width.
    d: i128,
    i: i128,
    h: i128,
    hd: i128,
    dt: i128,
    /// Patches of all images together, and after the m×m merge.
    s: i128,
    sm: i128,
    /// Encoder layers counted; image tokens of all images.
    l: i128,
    pl: i128,
    /// Tiles of all images (Llama 4; else the images).
    tiles: i128,
    /// Pixel values per patch (channels × temporal × patch²); of all images (N·C·H·W).
    pix: i128,
    images: i128,
}

/// A multimodal wrapper's vision encoder, from `vision_config`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Vision {
    pub encoder: Encoder,
    /// Encoder layers that run and reach the projector (LLaVA: up to `vision_feature_layer`).
    pub layers: u64,
    pub hidden: u64,
    pub intermediate: u64,
    pub heads: u64,
    pub patch: u64,
    /// Side of the patch square merged into one token (1: none).
    pub merge: u64,
    /// Frames per temporal patch (Qwen: a still image is repeated).
    pub temporal: u64,
    pub channels: u64,
    /// The side every image is resized to (CLIP), or the longest side kept (Pixtral); 0: none.
    pub image_size: u64,
    /// Qwen's processor: the fewest and most pixels an image is resized within.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pixels: Option<(u64, u64)>,
    /// The language model's width (the projector's output).
    pub text_hidden: u64,
}

/// What `--images` adds for one configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Images {
    /// Images per sequence.
    pub per_sequence: u64,
    /// The size asked for (`--image-size`, else the processor's), height × width.
    pub image_size: [u64; 2],
    /// The size the processor resizes it to.
    pub processed_size: [u64; 2],
    /// Placeholders per image: the rows of image features the language model receives.
    pub image_tokens: u64,
    /// Tokens per image in the text sequence: placeholders and the markers the processor adds.
    pub text_tokens: u64,
    /// Patches per image the encoder runs on (over all its tiles, class tokens included).
    pub encoder_tokens: u64,
    /// Tiles per image, each its own sequence in the encoder (Llama 4; 1 for the others).
    pub tiles: u64,
    /// Text tokens per sequence (`--seq`).
    pub text_seq: u64,
    /// The sequence the language model runs on: text + images × text_tokens.
    pub seq: u64,
    /// The encoder and projector's intermediate tensors in a prefill of the batch's images
    /// (the largest stage, an estimate within ±20% of PyTorch's allocator on test models).
    pub encoder_workspace_bytes: u64,
    /// MACs of the encoder and projector for the batch's images.
    pub encoder_macs: u64,
}

/// The largest width, side or count of a vision config nnlint takes (keeps the formulas'
/// products within 128 bits).
const MAX_DIM: u64 = 1 << 24;

/// The most patches all images of a batch may have together.
pub const MAX_PATCHES: u64 = 1 << 40;

fn u(v: &Value, k: &str) -> Option<u64> {
    v.get(k).and_then(Value::as_u64)
}

fn need(v: &Value, k: &str) -> Result<u64, String> {
    u(v, k).ok_or_else(|| format!("field 'vision_config.{k}' is missing or not a count"))
}

impl Vision {
    /// The vision encoder of a wrapper's config. `Ok(None)`: no `vision_config`; `Err`: a vision
    /// tower nnlint does not model (yet), with the reason (`--images` says it).
    pub fn from_config(outer: &Value, text_hidden: u64) -> Result<Option<Vision>, String> {
        let Some(vc) = outer.get("vision_config").filter(|v| v.is_object()) else {
            return Ok(None);
        };
        let mt = outer
            .get("model_type")
            .and_then(Value::as_str)
            .unwrap_or("");
        let v = match mt {
            "qwen2_5_vl" | "qwen3_vl" | "qwen3_5" | "qwen3_5_moe" => {
                // Qwen3.5's vision model is Qwen3-VL's without the deepstack mergers
                let encoder = if mt == "qwen2_5_vl" {
                    Encoder::Qwen25 {
                        window: u(vc, "window_size").unwrap_or(112),
                        full_layers: vc
                            .get("fullatt_block_indexes")
                            .and_then(Value::as_array)
                            .map(|a| a.iter().filter_map(Value::as_u64).collect())
                            .unwrap_or_default(),
                    }
                } else {
                    Encoder::Qwen3 {
                        deepstack: vc
                            .get("deepstack_visual_indexes")
                            .and_then(Value::as_array)
                            .map_or(0, |a| a.len() as u64),
                    }
                };
                Vision {
                    encoder,
                    layers: need(vc, "depth")?,
                    hidden: need(vc, "hidden_size")?,
                    intermediate: need(vc, "intermediate_size")?,
                    heads: need(vc, "num_heads")?,
                    patch: need(vc, "patch_size")?,
                    merge: u(vc, "spatial_merge_size").unwrap_or(2),
                    temporal: u(vc, "temporal_patch_size").unwrap_or(2),
                    channels: u(vc, "in_channels").unwrap_or(3),
                    image_size: 0,
                    // the image processor's defaults (Qwen2VLImageProcessor: 56², 28²·1280;
                    // Qwen3-VL's preprocessor_config: 2^16, 2^24); a checkpoint's
                    // preprocessor_config.json replaces them
                    pixels: Some(if mt != "qwen2_5_vl" {
                        (1 << 16, 1 << 24)
                    } else {
                        (56 * 56, 28 * 28 * 1280)
                    }),
                    text_hidden,
                }
            }
            "mistral3" => Vision {
                encoder: Encoder::Pixtral,
                layers: need(vc, "num_hidden_layers")?,
                hidden: need(vc, "hidden_size")?,
                intermediate: need(vc, "intermediate_size")?,
                heads: need(vc, "num_attention_heads")?,
                patch: need(vc, "patch_size")?,
                merge: u(outer, "spatial_merge_size").unwrap_or(2),
                temporal: 1,
                channels: u(vc, "num_channels").unwrap_or(3),
                image_size: need(vc, "image_size")?,
                pixels: None,
                text_hidden,
            },
            "llava" => {
                let all = need(vc, "num_hidden_layers")?;
                let layer = match outer.get("vision_feature_layer") {
                    None => -2,
                    Some(v) => v.as_i64().ok_or_else(|| {
                        format!("vision_feature_layer {v}: features from several layers (concatenated) are not modelled")
                    })?,
                };
                // hidden_states[k]: k = 0 is the embeddings, k = all the last layer's output
                let runs = if layer >= 0 {
                    layer as u64
                } else {
                    (all as i64 + 1 + layer).max(0) as u64
                };
                if runs > all {
                    return Err(format!(
                        "vision_feature_layer {layer} is past the {all} layers of the vision tower"
                    ));
                }
                let strategy = outer
                    .get("vision_feature_select_strategy")
                    .and_then(Value::as_str)
                    .unwrap_or("default");
                Vision {
                    encoder: Encoder::Clip {
                        keep_cls: strategy == "full",
                    },
                    layers: runs,
                    hidden: need(vc, "hidden_size")?,
                    intermediate: need(vc, "intermediate_size")?,
                    heads: need(vc, "num_attention_heads")?,
                    patch: need(vc, "patch_size")?,
                    merge: 1,
                    temporal: 1,
                    channels: u(vc, "num_channels").unwrap_or(3),
                    image_size: need(vc, "image_size")?,
                    pixels: None,
                    text_hidden,
                }
            }
            "gemma3" => {
                let tokens = u(outer, "mm_tokens_per_image").unwrap_or(256);
                let s = need(vc, "image_size")?;
                let p = need(vc, "patch_size")?;
                // avg_pool2d with kernel (image_size / patch) / sqrt(tokens)
                let side = s / p.max(1);
                let pooled = (1..=side).find(|k| k * k == tokens);
                if pooled.is_none_or(|k| side % k != 0) {
                    return Err(format!(
                        "mm_tokens_per_image {tokens} is not a square that divides the {side}x{side} patches of a {s}-pixel image"
                    ));
                }
                Vision {
                    encoder: Encoder::Siglip { tokens },
                    layers: need(vc, "num_hidden_layers")?,
                    hidden: need(vc, "hidden_size")?,
                    intermediate: need(vc, "intermediate_size")?,
                    heads: need(vc, "num_attention_heads")?,
                    patch: p,
                    merge: 1,
                    temporal: 1,
                    channels: u(vc, "num_channels").unwrap_or(3),
                    image_size: s,
                    pixels: None,
                    text_hidden,
                }
            }
            "llama4" => {
                let (d, i) = (need(vc, "hidden_size")?, need(vc, "intermediate_size")?);
                // pixel_shuffle_ratio r: (1/r)² patches become one token of (1/r)² · d features
                let ratio = vc
                    .get("pixel_shuffle_ratio")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.5);
                let merge = (1.0 / ratio).round();
                if !(ratio > 0.0 && (1.0..=64.0).contains(&merge) && (merge * ratio - 1.0).abs() < 1e-9) {
                    return Err(format!(
                        "field 'vision_config.pixel_shuffle_ratio' is {ratio}: nnlint models 1/n (0.5: 2x2 patches per token)"
                    ));
                }
                let merge = merge as u64;
                let (pi, po) = (
                    need(vc, "projector_input_dim")?,
                    need(vc, "projector_output_dim")?,
                );
                let out = u(vc, "vision_output_dim").unwrap_or(po);
                // Llama4VisionMLP2: fc1 takes the shuffled width (intermediate_size), fc2 is
                // Linear(po, po) fed fc1's pi outputs, the projector reads vision_output_dim
                if i != d.saturating_mul(merge * merge) || pi != po || out != po {
                    return Err(format!(
                        "vision_config: intermediate_size {i} must be hidden_size {d} x {} (the pixel shuffle's width) and projector_input_dim {pi}, projector_output_dim {po} and vision_output_dim {out} equal, as Llama4VisionModel's layers need",
                        merge * merge
                    ));
                }
                if pi > MAX_DIM {
                    return Err(format!(
                        "vision_config holds a size of {pi}: more than the {MAX_DIM} nnlint models"
                    ));
                }
                Vision {
                    encoder: Encoder::Llama4 {
                        pi,
                        po,
                        max_tiles: 16,
                    },
                    layers: need(vc, "num_hidden_layers")?,
                    hidden: d,
                    intermediate: i,
                    heads: need(vc, "num_attention_heads")?,
                    patch: need(vc, "patch_size")?,
                    merge,
                    temporal: 1,
                    channels: u(vc, "num_channels").unwrap_or(3),
                    image_size: need(vc, "image_size")?,
                    pixels: None,
                    text_hidden,
                }
            }
            other => {
                return Err(format!(
                    "the vision tower of '{other}' is not modelled: nnlint counts image inputs for qwen2_5_vl, qwen3_vl, qwen3_5, mistral3, llava, gemma3 and llama4"
                ))
            }
        };
        let dims = [
            v.hidden,
            v.intermediate,
            v.heads,
            v.patch,
            v.merge,
            v.channels,
            v.temporal,
            v.image_size,
            v.text_hidden,
        ];
        if let Some(big) = dims.iter().find(|&&x| x > MAX_DIM) {
            return Err(format!(
                "vision_config holds a size of {big}: more than the {MAX_DIM} nnlint models"
            ));
        }
        if v.patch > 4096 || v.channels > 64 || v.temporal > 64 {
            return Err(format!(
                "vision_config: patch {}, channels {}, temporal patch {}: larger than nnlint models (4096, 64, 64)",
                v.patch, v.channels, v.temporal
            ));
        }
        if v.layers > 4096 {
            return Err(format!(
                "vision_config has {} layers: more than the 4096 nnlint models",
                v.layers
            ));
        }
        if v.hidden == 0 || v.heads == 0 || v.patch == 0 || v.merge == 0 || v.hidden % v.heads != 0
        {
            return Err(format!(
                "vision_config: hidden_size {} is not a multiple of its {} heads, or a size is 0",
                v.hidden, v.heads
            ));
        }
        Ok(Some(v))
    }

    /// What the checkpoint's `preprocessor_config.json` changes: Qwen's pixel limits
    /// (`min_pixels`/`max_pixels` or `size.shortest_edge`/`size.longest_edge`), Pixtral's
    /// longest side (`size.longest_edge`).
    pub fn with_processor(mut self, p: &Value) -> Self {
        let size = p.get("size");
        let edge = |k: &str| size.and_then(|s| u(s, k));
        match self.encoder {
            Encoder::Qwen25 { .. } | Encoder::Qwen3 { .. } => {
                if let Some((lo, hi)) = self.pixels {
                    let lo = u(p, "min_pixels").or(edge("shortest_edge")).unwrap_or(lo);
                    let hi = u(p, "max_pixels").or(edge("longest_edge")).unwrap_or(hi);
                    let (lo, hi) = (lo.min(MAX_PATCHES), hi.min(MAX_PATCHES));
                    self.pixels = Some((lo, hi.max(lo)));
                }
            }
            Encoder::Pixtral => {
                if let Some(e) = edge("longest_edge").filter(|&e| e > 0) {
                    self.image_size = e.min(MAX_DIM);
                }
            }
            Encoder::Llama4 {
                ref mut max_tiles, ..
            } => {
                // Llama4ImageProcessor's max_patches: the most tiles of one image's canvas
                if let Some(m) = u(p, "max_patches").filter(|&m| (1..=1024).contains(&m)) {
                    *max_tiles = m;
                }
            }
            Encoder::Clip { .. } | Encoder::Siglip { .. } => {}
        }
        self
    }

    fn name(&self) -> &'static str {
        match self.encoder {
            Encoder::Qwen25 { .. } => "Qwen2.5-VL",
            Encoder::Qwen3 { .. } => "Qwen3-VL",
            Encoder::Pixtral => "Pixtral (Mistral 3)",
            Encoder::Clip { .. } => "CLIP (LLaVA)",
            Encoder::Siglip { .. } => "SigLIP (Gemma 3)",
            Encoder::Llama4 { .. } => "Llama 4",
        }
    }

    /// `n` images per sequence of `size` (height, width; `None`: the processor's own size) over
    /// `text_seq` text tokens: the tokens, as the processor lays them out.
    pub fn images(
        &self,
        n: u64,
        size: Option<(u64, u64)>,
        text_seq: u64,
    ) -> Result<Images, String> {
        let (p, m) = (self.patch, self.merge);
        let mut tiles = 1;
        let (asked, processed, image_tokens, text_tokens, encoder_tokens) = match &self.encoder {
            Encoder::Qwen25 { .. } | Encoder::Qwen3 { .. } => {
                let Some((h, w)) = size else {
                    return Err(format!(
                        "{} reads images at their own resolution: give their size with --image-size HxW (e.g. 1024x768)",
                        self.name()
                    ));
                };
                let (lo, hi) = self.pixels.unwrap_or((0, u64::MAX));
                let (rh, rw) = smart_resize(h, w, p * m, lo, hi)?;
                let patches = (rh / p) * (rw / p);
                let tokens = patches / (m * m);
                // <|vision_start|> placeholders <|vision_end|>
                ((h, w), (rh, rw), tokens, tokens + 2, patches)
            }
            Encoder::Pixtral => {
                let (h, w) = size.unwrap_or((self.image_size, self.image_size));
                let (mut rh, mut rw) = (h, w);
                let longest = self.image_size.max(1);
                if h > longest || w > longest {
                    // scaled by the larger ratio, floored (PixtralImageProcessor)
                    if h >= w {
                        rw = w * longest / h;
                        rh = longest;
                    } else {
                        rh = h * longest / w;
                        rw = longest;
                    }
                }
                // rounded up to whole patches
                let (gh, gw) = (rh.max(1).div_ceil(p), rw.max(1).div_ceil(p));
                let (rows, cols) = (gh / m, gw / m);
                if rows == 0 || cols == 0 {
                    return Err(format!(
                        "an image of {h}x{w} is smaller than one {}-pixel token of {}",
                        p * m,
                        self.name()
                    ));
                }
                // each row of [IMG] tokens ends with [IMG_BREAK], the last with [IMG_END]
                (
                    (h, w),
                    (gh * p, gw * p),
                    rows * cols,
                    rows * (cols + 1),
                    gh * gw,
                )
            }
            Encoder::Clip { keep_cls } => {
                let s = self.image_size;
                let patches = (s / p) * (s / p);
                let tokens = patches + u64::from(*keep_cls);
                (size.unwrap_or((s, s)), (s, s), tokens, tokens, patches + 1)
            }
            Encoder::Siglip { tokens } => {
                let s = self.image_size;
                // Gemma3Processor: "\n\n<start_of_image>" + placeholders + "<end_of_image>\n\n"
                (
                    size.unwrap_or((s, s)),
                    (s, s),
                    *tokens,
                    tokens + 4,
                    (s / p) * (s / p),
                )
            }
            Encoder::Llama4 { max_tiles, .. } => {
                let t = self.image_size;
                let (h, w) = size.unwrap_or((t, t));
                let (rh, rw) = llama4_canvas(h, w, t, *max_tiles)?;
                let canvas = rh * rw;
                tiles = canvas + u64::from(canvas > 1);
                let side = t / p;
                if side == 0 || !side.is_multiple_of(m) {
                    return Err(format!(
                        "a {t}-pixel tile of {} has {side} patches a side, not a multiple of the pixel shuffle's {m}",
                        self.name()
                    ));
                }
                let per_tile = side * side / (m * m);
                // Llama4Processor: <|image_start|>, for several tiles each tile's patches with
                // a separator after each (x between columns, y after each row), <|image|>, the
                // global (or only) tile's patches, <|image_end|>
                let image_tokens = tiles * per_tile;
                (
                    (h, w),
                    (rh * t, rw * t),
                    image_tokens,
                    image_tokens + 3 + if canvas > 1 { canvas } else { 0 },
                    tiles * (side * side + 1),
                )
            }
        };
        let seq = n
            .checked_mul(text_tokens)
            .and_then(|x| x.checked_add(text_seq))
            .ok_or("the sequence with the images overflows 64 bits")?;
        Ok(Images {
            per_sequence: n,
            image_size: [asked.0, asked.1],
            processed_size: [processed.0, processed.1],
            image_tokens,
            text_tokens,
            encoder_tokens,
            tiles,
            text_seq,
            seq,
            encoder_workspace_bytes: 0,
            encoder_macs: 0,
        })
    }

    fn sym(&self, img: &Images, total: u64) -> Sym {
        let d = self.hidden as i128;
        let h = self.heads as i128;
        let s = (total as i128) * img.encoder_tokens as i128;
        let n = total as i128;
        Sym {
            d,
            i: self.intermediate as i128,
            h,
            hd: d / h,
            dt: self.text_hidden as i128,
            s,
            sm: s / (self.merge * self.merge) as i128,
            l: self.layers as i128,
            pl: n * img.image_tokens as i128,
            tiles: n * img.tiles.max(1) as i128,
            pix: self.channels as i128
                * self.temporal as i128
                * self.patch as i128
                * self.patch as i128,
            images: n
                * self.channels as i128
                * img.processed_size[0] as i128
                * img.processed_size[1] as i128,
        }
    }

    /// Attention segments of one image in encoder layer `layer` (the sequences a patch attends
    /// within): Qwen2.5-VL's windows, else the whole image.
    fn segments(&self, img: &Images, layer: u64) -> Vec<u64> {
        let (p, m) = (self.patch, self.merge);
        match &self.encoder {
            Encoder::Qwen25 {
                window,
                full_layers,
            } if !full_layers.contains(&layer) => {
                // get_vision_window_index: windows of `window / m / p` merged tokens a side
                let ws = (window / m / p).max(1);
                let (lh, lw) = (img.processed_size[0] / p / m, img.processed_size[1] / p / m);
                let sides = |n: u64| -> Vec<u64> {
                    (0..n.div_ceil(ws)).map(|i| (n - i * ws).min(ws)).collect()
                };
                let mut out = Vec::new();
                for r in sides(lh) {
                    for c in sides(lw) {
                        out.push(r * c * m * m);
                    }
                }
                out
            }
            // each tile is its own sequence
            Encoder::Llama4 { .. } => {
                let t = img.tiles.max(1);
                vec![img.encoder_tokens / t; t as usize]
            }
            _ => vec![img.encoder_tokens],
        }
    }

    /// Σ over attention segments of len², for all `total` images in one layer.
    fn squares(&self, img: &Images, layer: u64, total: u64) -> Option<u64> {
        if self.encoder == Encoder::Pixtral {
            // one packed sequence over every image of the batch
            let s = total.checked_mul(img.encoder_tokens)?;
            return s.checked_mul(s);
        }
        self.segments(img, layer)
            .iter()
            .try_fold(0u64, |a, &x| a.checked_add(x.checked_mul(x)?))?
            .checked_mul(total)
    }

    /// Bytes the encoder and projector keep for backward, for `total` images (the batch's), or
    /// `None` where that setting was not measured (the caller says so): full training in fp32
    /// (sdpa and eager), bf16 autocast and bf16 weights (sdpa); gradient checkpointing in fp32;
    /// LoRA in fp32 with adapters on q_proj/v_proj or on every linear layer. A LoRA that wraps
    /// nothing on the vision side leaves it without gradients: 0.
    pub fn saved_bytes(
        &self,
        img: &Images,
        total: u64,
        attn: Attn,
        nm: Numerics,
        mode: Training,
    ) -> Option<u64> {
        #[derive(PartialEq)]
        enum P {
            Fp32,
            Auto,
            Bf16,
        }
        let p = match (nm.weights, nm.autocast) {
            (DType::F32, None) => P::Fp32,
            (DType::F32, Some(DType::BF16)) => P::Auto,
            (DType::BF16, None) => P::Bf16,
            _ => return None,
        };
        let eager = attn == Attn::Eager;
        match mode {
            Training::Lora(Adapted::Nothing) => return Some(0),
            Training::Lora(Adapted::Other) | Training::LoraCheckpoint(Adapted::Other) => {
                return None
            }
            Training::Lora(_) if eager => return None,
            // the settings of `fit`'s plans (tools/llm/measure_images_plans.py)
            Training::Lora(_) if p == P::Bf16 => {
                return self.plan_bytes(img, total, p == P::Auto, p == P::Fp32, mode)
            }
            Training::LoraCheckpoint(_) if p != P::Auto => {
                return self.plan_bytes(img, total, false, p == P::Fp32, mode)
            }
            Training::Checkpoint if p != P::Fp32 => {
                return self.plan_bytes(img, total, p == P::Auto, false, mode)
            }
            Training::Lora(_) if p != P::Fp32 => return None,
            Training::LoraCheckpoint(_) => return None,
            Training::Full if eager && p != P::Fp32 => return None,
            _ => {}
        }
        let Sym {
            d,
            i,
            h,
            hd,
            dt,
            s,
            sm,
            l,
            pl,
            pix,
            images,
            tiles,
        } = self.sym(img, total);
        let sq = |layer: u64| self.squares(img, layer, total).map(i128::from);
        let eager_sum = |per: &dyn Fn(i128) -> i128| -> Option<i128> {
            (0..self.layers).try_fold(0i128, |a, k| Some(a + per(sq(k)?)))
        };
        let gc = mode == Training::Checkpoint;
        let (all, r) = match mode {
            Training::Lora(Adapted::AllLinear(r)) => (true, r as i128),
            Training::Lora(Adapted::QueryValue(r)) => (false, r as i128),
            _ => (false, 0),
        };
        let lora = r > 0;
        // (encoder layers, once-only terms, projector), each encoder's own measured terms
        let total_bytes = match &self.encoder {
            Encoder::Qwen25 { .. } => {
                let proj32 = (5 * s * d + s) * 4;
                if gc {
                    l * 4 * s * d + 2 * sm * 8 + proj32
                } else if lora {
                    // q_proj/v_proj wrap nothing here (fused qkv): only all-linear reaches this
                    l * ((11 * s * d + 4 * s * i + 2 * s + 5 * r * s) * 4 + 4 * h * s)
                        + (2 * s * hd * 4 + sm * 8)
                        - (s * d + s) * 4
                        + (4 * s * d + s + 2 * r * sm) * 4
                } else {
                    let once = 2 * s * hd * 4 + 2 * sm * 8;
                    match p {
                        P::Auto => {
                            l * (32 * s * d + 8 * s * i + 8 * s + 4 * h * s)
                                + once
                                + s * pix * 2
                                + 12 * s * d
                                + 4 * s
                        }
                        P::Bf16 => {
                            l * (30 * s * d + 8 * s * i + 8 * s + 4 * h * s)
                                + once
                                + s * pix * 2
                                + 12 * s * d
                                + 4 * s
                        }
                        P::Fp32 => {
                            let blocks = if eager {
                                eager_sum(&|q| (12 * s * d + 4 * s * i + 2 * s + h * q) * 4)?
                            } else {
                                l * ((13 * s * d + 4 * s * i + 2 * s) * 4 + 4 * h * s)
                            };
                            blocks + once + proj32
                        }
                    }
                }
            }
            Encoder::Qwen3 { deepstack } => {
                let nd = *deepstack as i128;
                // the merger's LayerNorm before the merge, the deepstack mergers' after it
                let proj = |e: i128| (4 * s * d + 2 * s) * e + nd * (3 * s * d + 2 * sm) * e;
                let per32 = (11 * s * d + 2 * s * i + 4 * s) * 4 + 4 * h * s;
                if gc {
                    l * 4 * s * d + 48 * s + proj(4)
                } else if lora {
                    // the interpolated positions come from a frozen embedding: no grad there
                    l * (per32 + 4 * r * s * 4) + 2 * s * hd * 4 - (s * d + 2 * s) * 4
                        + proj(4)
                        + (1 + nd) * 2 * r * sm * 4
                } else {
                    let once = 2 * s * hd * 4 + 48 * s;
                    match p {
                        P::Auto => {
                            l * (22 * s * d + 4 * s * i + 16 * s + 4 * h * s)
                                + once
                                + s * pix * 2
                                + 8 * s * d
                                + 8 * s
                                + nd * (6 * s * d + 8 * sm)
                        }
                        P::Bf16 => {
                            l * ((11 * s * d + 2 * s * i + 4 * s) * 2 + 4 * h * s)
                                + once
                                + s * pix * 2
                                + proj(2)
                        }
                        P::Fp32 => {
                            let blocks = if eager {
                                eager_sum(&|q| (10 * s * d + 2 * s * i + 4 * s + h * q) * 4)?
                            } else {
                                l * per32
                            };
                            blocks + once + proj(4)
                        }
                    }
                }
            }
            Encoder::Pixtral => {
                let rope = 2 * s * hd * 4;
                let proj32 = (3 * s * d + s + sm * d + 2 * sm * dt) * 4;
                if gc {
                    // the block mask is a positional argument of every layer, saved once
                    l * 4 * s * d + (2 * s * d + s) * 4 + s * s * 4 + proj32
                } else if lora {
                    let once = rope + s * s * 4 - (s * d + s) * 4;
                    if all {
                        l * ((8 * s * d + 4 * s * i + 2 * s + 7 * r * s) * 4 + 4 * h * s)
                            + once
                            + (2 * s * d + s + sm * d + 2 * sm * dt + 3 * r * sm) * 4
                    } else {
                        l * ((7 * s * d + 3 * s * i + 2 * s + 2 * r * s) * 4 + 4 * h * s)
                            + once
                            + (s * d + s + sm * dt) * 4
                    }
                } else {
                    match p {
                        // the block mask is cast to bf16 in every layer
                        P::Auto => {
                            l * (34 * s * d + 8 * s * i + 8 * s + 4 * h * s + 2 * s * s)
                                + rope
                                + 6 * s * d
                                + 4 * s
                                + images * 2
                                + 10 * s * d
                                + 4 * s
                                + 2 * sm * d
                                + 4 * sm * dt
                        }
                        P::Bf16 => {
                            l * (24 * s * d + 8 * s * i + 8 * s + 4 * h * s)
                                + 2 * s * hd * 2
                                + 6 * s * d
                                + 4 * s
                                + images * 2
                                + 2 * s * s
                                + 8 * s * d
                                + 4 * s
                                + 2 * sm * d
                                + 4 * sm * dt
                        }
                        P::Fp32 => {
                            // ln_pre, and sdpa keeps the fp32 block mask [1, 1, S, S]
                            let (blocks, mask) = if eager {
                                (
                                    eager_sum(&|q| (10 * s * d + 4 * s * i + 2 * s + h * q) * 4)?,
                                    0,
                                )
                            } else {
                                (
                                    l * ((10 * s * d + 4 * s * i + 2 * s) * 4 + 4 * h * s),
                                    s * s * 4,
                                )
                            };
                            blocks + rope + (2 * s * d + s) * 4 + mask + proj32
                        }
                    }
                }
            }
            Encoder::Llama4 { pi, po, .. } => {
                let (pi, po) = (*pi as i128, *po as i128);
                let t = tiles;
                // every tile's pixels, the unfold's copy (the global tile included)
                let px = t * self.channels as i128 * (self.image_size as i128).pow(2);
                // layernorm_pre/post (input and statistics), the unfolded pixels
                let once = |e: i128| (2 * s * d + 4 * s) * e;
                // pixel shuffle's copy into fc1, fc1 and fc2 with their GELUs
                let proj = |e: i128| (pl * i + 2 * pl * pi + 2 * pl * po) * e;
                let per32 = (8 * s * d + 2 * s * i + 4 * s) * 4 + 4 * h * s;
                if gc {
                    // the layers take every argument by keyword: a checkpoint saves nothing
                    once(4) + px * 4 + proj(4)
                } else if lora && all {
                    l * (per32 + 6 * r * s * 4)
                        + once(4)
                        + px * 4
                        + r * (s - t) * 4
                        + proj(4)
                        + 3 * r * pl * 4
                } else if lora {
                    l * ((7 * s * d + s * i + 4 * s + 2 * r * s) * 4 + 4 * h * s)
                        + (pl * pi + pl * po) * 4
                } else {
                    match p {
                        P::Auto => {
                            l * (24 * s * d + 4 * s * i + 16 * s + 4 * h * s)
                                + once(4)
                                + px * 2
                                + 2 * pl * i
                                + 4 * pl * pi
                                + 4 * pl * po
                        }
                        P::Bf16 => {
                            l * ((8 * s * d + 2 * s * i + 4 * s) * 2 + 4 * h * s)
                                + once(2)
                                + px * 2
                                + 2 * pl * i
                                + 4 * pl * pi
                                + 4 * pl * po
                        }
                        P::Fp32 => {
                            let blocks = if eager {
                                eager_sum(&|q| (8 * s * d + 2 * s * i + 4 * s + h * q) * 4)?
                            } else {
                                l * per32
                            };
                            blocks + once(4) + px * 4 + proj(4)
                        }
                    }
                }
            }
            Encoder::Clip { .. } | Encoder::Siglip { .. } => {
                let clip = matches!(self.encoder, Encoder::Clip { .. });
                // quick-GELU keeps its input, sigmoid and product; tanh-GELU its input
                let mlp = if clip { 3 } else { 2 };
                let per32 = (8 * s * d + mlp * s * i + 4 * s) * 4 + 4 * h * s;
                let once32 = (s * d + 2 * s) * 4;
                // CLIP: one image's projector input is a view of the whole layer output (class
                // row included), more images' a copy without it; SigLIP: average pooling, the
                // soft-embedding RMSNorm (1 + w over the vision width) and a matmul
                let proj = |e: i128| {
                    if clip {
                        ((if total == 1 { s } else { pl }) * d + 2 * pl * dt) * e
                    } else {
                        (s * d + 3 * pl * d + pl + d) * e
                    }
                };
                if gc {
                    l * 4 * s * d + once32 + proj(4)
                } else if lora {
                    // the first layer's norm (and CLIP's pre-norm) see no gradient
                    let (per, proj) = match (clip, all) {
                        (true, true) => (per32 + 6 * r * s * 4, proj(4) + 2 * r * pl * 4),
                        (true, false) => (
                            (7 * s * d + 2 * s * i + 4 * s + 2 * r * s) * 4 + 4 * h * s,
                            pl * dt * 4,
                        ),
                        (false, true) => (per32 + 6 * r * s * 4, (s * d + pl * d + pl + d) * 4),
                        (false, false) => (
                            (7 * s * d + s * i + 4 * s + 2 * r * s) * 4 + 4 * h * s,
                            (s * d + pl * d + pl + d) * 4,
                        ),
                    };
                    // CLIP: pre_layrnorm and the first norm1 save nothing; SigLIP: its
                    // post_layernorm saves what the first norm1 no longer does
                    l * per + proj - if clip { once32 } else { 0 }
                } else {
                    match p {
                        P::Auto => {
                            l * (24 * s * d + 2 * mlp * s * i + 16 * s + 4 * h * s)
                                + once32
                                + images * 2
                                + if clip {
                                    2 * pl * d + 4 * pl * dt
                                } else {
                                    4 * s * d + 10 * pl * d + 4 * pl + 4 * d
                                }
                        }
                        P::Bf16 => {
                            l * ((8 * s * d + mlp * s * i + 4 * s) * 2 + 4 * h * s)
                                + (s * d + 2 * s) * 2
                                + images * 2
                                + if clip {
                                    proj(2)
                                } else {
                                    2 * s * d + 10 * pl * d + 4 * pl + 4 * d
                                }
                        }
                        P::Fp32 => {
                            let blocks = if eager {
                                eager_sum(&|q| (8 * s * d + mlp * s * i + 4 * s + h * q) * 4)?
                            } else {
                                l * per32
                            };
                            blocks + once32 + proj(4)
                        }
                    }
                }
            }
        };
        // every term is measured and positive in sum; sizes are capped (MAX_PATCHES, MAX_DIM)
        u64::try_from(total_bytes).ok()
    }

    /// The vision side's saved bytes in the settings `fit`'s plans use, measured by
    /// `tools/llm/measure_images_plans.py` (`images_plans.json`): checkpointing with bf16 weights
    /// or bf16 autocast, LoRA on a bf16 base, LoRA with checkpointing (bf16 base; fp32 with
    /// q_proj/v_proj). `auto`: bf16 autocast over fp32 weights; `fp32`: fp32 weights; else bf16
    /// weights. Under checkpointing each encoder layer keeps its input (bf16 in Qwen's towers
    /// under autocast, whose residual stream is bf16); peft casts each adapter's input to fp32.
    fn plan_bytes(
        &self,
        img: &Images,
        total: u64,
        auto: bool,
        fp32: bool,
        mode: Training,
    ) -> Option<u64> {
        let Sym {
            d,
            i,
            h,
            hd,
            dt,
            s,
            sm,
            l,
            pl,
            pix,
            images,
            tiles,
        } = self.sym(img, total);
        // the pixels the patch embedding keeps in bf16: Qwen's temporal patches, else the images
        let px = match self.encoder {
            Encoder::Qwen25 { .. } | Encoder::Qwen3 { .. } => s * pix,
            _ => images,
        };
        let (gc, adapted) = match mode {
            Training::Checkpoint => (true, None),
            Training::Lora(a) => (false, Some(a)),
            Training::LoraCheckpoint(a) => (true, Some(a)),
            Training::Full => return None,
        };
        let r = match adapted {
            Some(Adapted::QueryValue(r) | Adapted::AllLinear(r)) => r as i128,
            _ => 0,
        };
        let all = matches!(adapted, Some(Adapted::AllLinear(_)));
        let nothing = adapted == Some(Adapted::Nothing);
        // checkpointed layers keep their input: bf16 with bf16 weights (and in Qwen's towers
        // under autocast), fp32 otherwise
        let qwen = matches!(self.encoder, Encoder::Qwen25 { .. } | Encoder::Qwen3 { .. });
        let kept = if fp32 || (auto && !qwen) { 4 } else { 2 };
        // Llama 4: every tile's pixels (the unfold's copy), the pre/post norms, the projector
        let l4 = match self.encoder {
            Encoder::Llama4 { pi, po, .. } => Some((
                tiles * self.channels as i128 * (self.image_size as i128).pow(2),
                2 * s * d + 4 * s,
                pi as i128,
                po as i128,
            )),
            _ => None,
        };
        let bytes: i128 = match (&self.encoder, adapted) {
            // Llama 4 (its layers take keyword arguments only: a checkpoint saves nothing)
            (Encoder::Llama4 { .. }, None) => {
                let (px, norms, pi, po) = l4?;
                norms * if auto { 4 } else { 2 } + 2 * px + 2 * pl * i + 4 * pl * pi + 4 * pl * po
            }
            (Encoder::Llama4 { .. }, Some(_)) if nothing && !gc => 0,
            (Encoder::Llama4 { .. }, Some(_)) if all && !fp32 => {
                // peft casts each adapter's input to fp32: the patch embedding's too; under
                // checkpointing the layers keep nothing
                let (px, norms, pi, po) = l4?;
                let layers = if gc {
                    0
                } else {
                    l * (32 * s * d + 6 * s * i + 8 * s + 24 * r * s + 4 * h * s)
                };
                layers
                    + 4 * px
                    + 2 * norms
                    + 4 * r * (s - tiles)
                    + 4 * pl * i
                    + 6 * pl * pi
                    + 6 * pl * po
                    + 12 * r * pl
            }
            (Encoder::Llama4 { .. }, Some(Adapted::QueryValue(_))) if !gc => {
                let (_, _, pi, po) = l4?;
                l * (20 * s * d + 2 * s * i + 8 * s + 8 * r * s + 4 * h * s)
                    + 2 * pl * pi
                    + 2 * pl * po
            }
            (Encoder::Llama4 { .. }, Some(Adapted::QueryValue(_))) => {
                let (_, norms, pi, po) = l4?;
                let e = if fp32 { 4 } else { 2 };
                norms * e + (pl * pi + pl * po) * e
            }
            // a tower without adapters under checkpointing (the patch embedding hooked to
            // require grad) or other adapters: not measured
            (Encoder::Llama4 { .. }, Some(_)) => return None,
            // checkpointing, full training
            (Encoder::Qwen25 { .. }, None) => l * 2 * s * d + 2 * px + 16 * sm + 12 * s * d + 4 * s,
            (Encoder::Qwen3 { deepstack }, None) => {
                let nd = *deepstack as i128;
                // the mergers' LayerNorm statistics: fp32 under autocast, bf16 otherwise
                let stats = if auto { 8 } else { 4 };
                l * 2 * s * d
                    + 2 * px
                    + 48 * s
                    + 8 * s * d
                    + stats * s
                    + nd * (6 * s * d + stats * sm)
            }
            (Encoder::Pixtral, None) => {
                l * kept * s * d
                    + 6 * s * d
                    + 4 * s
                    + kept * s * s
                    + 2 * px
                    + if auto { 10 } else { 8 } * s * d
                    + 4 * s
                    + 2 * sm * d
                    + 4 * sm * dt
            }
            (Encoder::Clip { .. }, None) => {
                l * kept * s * d
                    + kept * (s * d + 2 * s)
                    + 2 * px
                    + if auto {
                        2 * pl * d + 4 * pl * dt
                    } else {
                        ((if total == 1 { s } else { pl }) * d + 2 * pl * dt) * 2
                    }
            }
            (Encoder::Siglip { .. }, None) => {
                l * kept * s * d
                    + kept * (s * d + 2 * s)
                    + 2 * px
                    + kept * s * d
                    + 10 * pl * d
                    + 4 * pl
                    + 4 * d
            }
            // LoRA on a bf16 base, no checkpointing
            (Encoder::Qwen25 { .. }, Some(_)) if !gc => {
                if nothing {
                    0
                } else {
                    l * (36 * s * d + 10 * s * i + 8 * s + 20 * r * s + 4 * h * s)
                        + 8 * s * hd
                        + 8 * sm
                        - 4 * s * d
                        - 4 * s
                        + 14 * s * d
                        + 4 * s
                        + 8 * r * sm
                }
            }
            (Encoder::Qwen3 { deepstack }, Some(_)) if !gc => {
                let nd = *deepstack as i128;
                if nothing {
                    0
                } else {
                    l * (28 * s * d + 6 * s * i + 8 * s + 16 * r * s + 4 * h * s) + 8 * s * hd
                        - 2 * s * d
                        - 4 * s
                        + 12 * s * d
                        + 4 * s
                        + 8 * r * sm
                        + nd * (10 * s * d + 4 * sm + 8 * r * sm)
                }
            }
            (Encoder::Pixtral, Some(_)) if !gc => {
                let once = 4 * s * hd + 2 * s * s - 4 * s * d - 4 * s;
                if all {
                    l * (40 * s * d + 10 * s * i + 8 * s + 28 * r * s + 4 * h * s)
                        + once
                        + 8 * s * d
                        + 4 * s
                        + 4 * sm * d
                        + 6 * sm * dt
                        + 12 * r * sm
                } else {
                    l * (24 * s * d + 6 * s * i + 8 * s + 8 * r * s + 4 * h * s)
                        + once
                        + 4 * s * d
                        + 4 * s
                        + 2 * sm * dt
                }
            }
            (Encoder::Clip { .. }, Some(_)) if !gc => {
                if all {
                    l * (32 * s * d + 8 * s * i + 8 * s + 24 * r * s + 4 * h * s)
                        - (2 * s * d + 4 * s)
                        + 4 * pl * d
                        + 6 * pl * dt
                        + 8 * r * pl
                } else {
                    l * (20 * s * d + 4 * s * i + 8 * s + 8 * r * s + 4 * h * s)
                        - (2 * s * d + 4 * s)
                        + 2 * pl * dt
                }
            }
            (Encoder::Siglip { .. }, Some(_)) if !gc => {
                let proj = 2 * s * d + 4 * pl * d + 4 * pl + 4 * d;
                if all {
                    l * (32 * s * d + 6 * s * i + 8 * s + 24 * r * s + 4 * h * s) + proj
                } else {
                    l * (20 * s * d + 2 * s * i + 8 * s + 8 * r * s + 4 * h * s) + proj
                }
            }
            // LoRA with checkpointing: the layers keep their inputs; the projector and the
            // norms before the first layer keep what they keep under LoRA
            (_, Some(_)) if fp32 && all => return None,
            (Encoder::Qwen25 { .. }, Some(_)) => {
                let e = if fp32 { 4 } else { 2 };
                l * e * s * d
                    + 16 * sm
                    + if all {
                        14 * s * d + 4 * s + 8 * r * sm
                    } else if fp32 {
                        8 * s * d + 4 * s
                    } else {
                        6 * s * d + 4 * s
                    }
            }
            // no hook on Qwen3-VL's patch embedding: a tower without adapters does nothing
            (Encoder::Qwen3 { deepstack }, Some(_)) => {
                let nd = *deepstack as i128;
                if !all {
                    0
                } else {
                    l * 2 * s * d
                        + 12 * s * d
                        + 4 * s
                        + 8 * r * sm
                        + nd * (10 * s * d + 4 * sm + 8 * r * sm)
                }
            }
            (_, Some(Adapted::Nothing)) => return None,
            (Encoder::Pixtral, Some(_)) => {
                let e = if fp32 { 4 } else { 2 };
                l * e * s * d
                    + 4 * s * d
                    + 4 * s
                    + e * s * s
                    + if all {
                        8 * s * d + 4 * s + 4 * sm * d + 6 * sm * dt + 12 * r * sm
                    } else {
                        4 * s * d + 4 * s + e * sm * dt
                    }
            }
            (Encoder::Clip { .. }, Some(_)) => {
                let e = if fp32 { 4 } else { 2 };
                l * e * s * d
                    + e * (s * d + 2 * s)
                    + if all {
                        4 * pl * d + 6 * pl * dt + 8 * r * pl
                    } else {
                        e * pl * dt
                    }
            }
            (Encoder::Siglip { .. }, Some(_)) => {
                let e = if fp32 { 4 } else { 2 };
                l * e * s * d + e * (s * d + 2 * s) + e * s * d + 4 * pl * d + 4 * pl + 4 * d
            }
        };
        u64::try_from(bytes).ok()
    }

    /// The largest stage of the encoder in a prefill of `total` images, in `elem`-byte tensors:
    /// the MLP (residual, its normed input, the live intermediates) or the attention (residual,
    /// normed input, q, k, v, rotary temporaries, output: ~12 S·d); Pixtral also holds its
    /// [S, S] block mask. Within +13% / -2% of PyTorch's allocator on the test models.
    pub fn workspace_bytes(&self, img: &Images, total: u64, elem: u64) -> Option<u64> {
        let s = total.checked_mul(img.encoder_tokens)?;
        let (d, i) = (self.hidden, self.intermediate);
        let live = match self.encoder {
            Encoder::Qwen25 { .. } | Encoder::Pixtral => 3,
            _ => 2,
        };
        let mlp = s.checked_mul(2 * d + live * i)?;
        // residual, normed input, q, k, v, output (+ rotary temporaries where there is rotary)
        let attention = if matches!(self.encoder, Encoder::Siglip { .. }) {
            8
        } else {
            12
        };
        let mut est = mlp.max(s.checked_mul(attention * d)?);
        if matches!(self.encoder, Encoder::Qwen3 { .. }) {
            est = est.max(s.checked_mul(9 * d)?);
        }
        if self.encoder == Encoder::Pixtral {
            est = est.checked_add(s.checked_mul(s)?)?;
        }
        est.checked_mul(elem)
    }

    /// MACs of the encoder and projector for `total` images: the patch embedding, each layer's
    /// projections, MLP and attention (q·k and p·v over its segments), and the mergers.
    pub fn macs(&self, img: &Images, total: u64) -> Option<u64> {
        let (e, p) = self.macs_split(img, total)?;
        e.checked_add(p)
    }

    /// [`Self::macs`] as (the module named like the encoder, a separate projector module):
    /// Qwen's merger sits inside `visual`, LLaVA's and Mistral 3's in `multi_modal_projector`.
    pub fn macs_split(&self, img: &Images, total: u64) -> Option<(u64, u64)> {
        let (d, i) = (self.hidden as u128, self.intermediate as u128);
        let s = (total as u128) * img.encoder_tokens as u128;
        let pix =
            self.channels as u128 * self.temporal as u128 * self.patch as u128 * self.patch as u128;
        let m2 = (self.merge * self.merge) as u128;
        let dt = self.text_hidden as u128;
        let mlp = match self.encoder {
            Encoder::Qwen25 { .. } | Encoder::Pixtral => 3,
            _ => 2,
        };
        // the patch embedding (Llama 4's class tokens are not patches)
        let patches = match self.encoder {
            Encoder::Llama4 { .. } => s - (total as u128) * img.tiles.max(1) as u128,
            _ => s,
        };
        let mut macs = patches * pix * d;
        for k in 0..self.layers {
            macs += s * (4 * d * d + mlp * d * i) + 2 * d * self.squares(img, k, total)? as u128;
        }
        let tokens = (total as u128) * img.image_tokens as u128;
        let merged = d * m2;
        let (inside, projector) = match self.encoder {
            Encoder::Qwen25 { .. } => (tokens * (merged * merged + merged * dt), 0),
            Encoder::Qwen3 { deepstack } => (
                (1 + deepstack as u128) * tokens * (merged * merged + merged * dt),
                0,
            ),
            Encoder::Pixtral => (0, tokens * (merged * d + d * dt + dt * dt)),
            Encoder::Clip { .. } => (0, tokens * (d * dt + dt * dt)),
            Encoder::Siglip { .. } => (0, tokens * d * dt),
            // the pixel shuffle's MLP inside the vision model, then multi_modal_projector
            Encoder::Llama4 { pi, po, .. } => {
                let (pi, po) = (pi as u128, po as u128);
                (tokens * (i * pi + po * po), tokens * po * dt)
            }
        };
        Some((
            u64::try_from(macs + inside).ok()?,
            u64::try_from(projector).ok()?,
        ))
    }
}

/// Qwen2-VL's `smart_resize`: each side rounded to a multiple of `factor` (half to even, as
/// Python's `round`), then scaled into [`min`, `max`] pixels keeping the aspect ratio.
pub fn smart_resize(h: u64, w: u64, factor: u64, min: u64, max: u64) -> Result<(u64, u64), String> {
    if h == 0 || w == 0 {
        return Err("an image side is 0".into());
    }
    if h.max(w) / h.min(w) > 200 {
        return Err(format!(
            "an image of {h}x{w}: the processor refuses an aspect ratio over 200"
        ));
    }
    let round = |x: u64| -> u64 {
        let (q, r) = (x / factor, x % factor);
        let up = 2 * r > factor || (2 * r == factor && q % 2 == 1);
        (q + u64::from(up)) * factor
    };
    let (mut hb, mut wb) = (round(h), round(w));
    let (hf, wf, f) = (h as f64, w as f64, factor as f64);
    if hb.saturating_mul(wb) > max {
        let beta = (hf * wf / max as f64).sqrt();
        hb = factor.max(((hf / beta / f).floor() as u64) * factor);
        wb = factor.max(((wf / beta / f).floor() as u64) * factor);
    } else if hb.saturating_mul(wb) < min {
        let beta = (min as f64 / (hf * wf)).sqrt();
        hb = ((hf * beta / f).ceil() as u64) * factor;
        wb = ((wf * beta / f).ceil() as u64) * factor;
    }
    Ok((hb, wb))
}

/// Llama 4's tiling (`Llama4ImageProcessor`: `find_supported_resolutions`, `get_best_fit`): the
/// canvas of `rows × cols` tiles of side `tile` an image of `h × w` is resized into. The
/// candidates are every `a × b` with `a·b ≤ max_tiles`, in Python's order (tile counts from the
/// most down, divisors ascending, grouped by aspect ratio in first-seen order); canvas `a × b`
/// scales the image by min(a·tile/h, b·tile/w); the smallest scale ≥ 1 wins (else the largest
/// below 1), and of the canvases with that scale the smallest area (the first listed on a tie).
/// Scales are compared as exact fractions (Python divides in float32: the two can differ only
/// for fractions closer than float32 tells apart).
pub fn llama4_canvas(h: u64, w: u64, tile: u64, max_tiles: u64) -> Result<(u64, u64), String> {
    if h == 0 || w == 0 || tile == 0 {
        return Err("an image side is 0".into());
    }
    let max_tiles = max_tiles.clamp(1, 1024);
    // candidates in Python's order
    type Group = ((u64, u64), Vec<(u64, u64)>);
    let mut groups: Vec<Group> = Vec::new();
    for c in (1..=max_tiles).rev() {
        for a in (1..=c).filter(|a| c % a == 0) {
            let b = c / a;
            // the aspect ratio a/b as a reduced fraction (Python keys by the float a/b)
            let g = gcd(a, b);
            let key = (a / g, b / g);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push((a, b)),
                None => groups.push((key, vec![(a, b)])),
            }
        }
    }
    let list: Vec<(u64, u64)> = groups.into_iter().flat_map(|(_, v)| v).collect();
    let (h, w, t) = (h as u128, w as u128, tile as u128);
    // the scale of canvas (a, b) as a fraction: min(a·t/h, b·t/w)
    let scale = |&(a, b): &(u64, u64)| -> (u128, u128) {
        let (a, b) = (a as u128, b as u128);
        if a * w <= b * h {
            (a * t, h)
        } else {
            (b * t, w)
        }
    };
    let less = |x: (u128, u128), y: (u128, u128)| x.0 * y.1 < y.0 * x.1;
    let scales: Vec<(u128, u128)> = list.iter().map(scale).collect();
    let up = scales.iter().copied().filter(|s| s.0 >= s.1);
    let chosen = match up.clone().reduce(|m, s| if less(s, m) { s } else { m }) {
        // the smallest upscaling
        Some(m) => m,
        // no canvas upscales: the least downscaling
        None => scales
            .iter()
            .copied()
            .reduce(|m, s| if less(m, s) { s } else { m })
            .ok_or("no canvas")?,
    };
    let best = list
        .iter()
        .zip(&scales)
        .filter(|(_, s)| s.0 * chosen.1 == chosen.0 * s.1)
        .map(|(c, _)| *c)
        .reduce(|m, c| if c.0 * c.1 < m.0 * m.1 { c } else { m })
        .ok_or("no canvas")?;
    Ok(best)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama4_tiles_as_its_image_processor_chooses_them() {
        // transformers 5.24's find_supported_resolutions + get_best_fit (run with torch on a
        // 336-pixel tile): (h, w, max_patches) -> (rows, cols)
        let cases = [
            (336, 336, 16, 1, 1),
            (336, 672, 16, 1, 2),
            (100, 100, 16, 1, 1),
            (1000, 1000, 16, 3, 3),
            (224, 1280, 16, 1, 4),
            (1080, 1920, 16, 3, 5),
            (4000, 300, 16, 12, 1),
            (337, 336, 16, 2, 1),
            (5000, 5000, 16, 4, 4),
            (700, 1500, 16, 3, 5),
            (1, 1, 16, 1, 1),
            (336, 5376, 16, 1, 16),
            (336, 336, 4, 1, 1),
            (336, 672, 4, 1, 2),
            (100, 100, 4, 1, 1),
            (1000, 1000, 4, 2, 2),
            (224, 1280, 4, 1, 4),
            (1080, 1920, 4, 2, 2),
            (4000, 300, 4, 4, 1),
            (337, 336, 4, 2, 1),
            (5000, 5000, 4, 2, 2),
            (700, 1500, 4, 1, 3),
            (1, 1, 4, 1, 1),
            (336, 5376, 4, 1, 4),
        ];
        for (h, w, m, rows, cols) in cases {
            assert_eq!(
                llama4_canvas(h, w, 336, m),
                Ok((rows, cols)),
                "{h}x{w} max {m}"
            );
        }
        assert!(llama4_canvas(0, 5, 336, 16).is_err());
        // Llama 4 Scout's vision config: 144 tokens a tile, a global tile beside several
        let v = Vision::from_config(
            &serde_json::json!({"model_type": "llama4", "vision_config": {
                "hidden_size": 1408, "intermediate_size": 5632, "num_hidden_layers": 34,
                "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
                "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
                "projector_output_dim": 4096, "vision_output_dim": 4096}}),
            5120,
        )
        .unwrap()
        .unwrap();
        let one = v.images(1, Some((336, 336)), 0).unwrap();
        assert_eq!(
            (
                one.tiles,
                one.image_tokens,
                one.text_tokens,
                one.encoder_tokens
            ),
            (1, 144, 147, 577)
        );
        let wide = v.images(1, Some((336, 672)), 0).unwrap();
        assert_eq!(
            (
                wide.tiles,
                wide.image_tokens,
                wide.text_tokens,
                wide.encoder_tokens
            ),
            (3, 432, 437, 3 * 577)
        );
        // 1080p: a 3 x 5 canvas and the global tile
        let hd = v.images(1, Some((1080, 1920)), 0).unwrap();
        assert_eq!(
            (hd.tiles, hd.image_tokens, hd.text_tokens),
            (16, 2304, 2322)
        );
        // shapes Llama4VisionModel cannot run are refused
        let bad = Vision::from_config(
            &serde_json::json!({"model_type": "llama4", "vision_config": {
                "hidden_size": 1408, "intermediate_size": 4096, "num_hidden_layers": 34,
                "num_attention_heads": 16, "image_size": 336, "patch_size": 14,
                "pixel_shuffle_ratio": 0.5, "projector_input_dim": 4096,
                "projector_output_dim": 4096}}),
            5120,
        );
        assert!(bad.unwrap_err().contains("intermediate_size 4096"));
    }

    #[test]
    fn smart_resize_rounds_as_python_and_keeps_the_pixel_limits() {
        // multiples stay, 28-pixel factor, Qwen2-VL's default limits
        assert_eq!(smart_resize(1008, 756, 28, 3136, 1003520), Ok((1008, 756)));
        // 14 = half of 28: Python's round(0.5) = 0, round(1.5) = 2
        assert_eq!(smart_resize(42, 70, 28, 0, u64::MAX), Ok((56, 56)));
        // past max_pixels: scaled down, floored to the factor
        let (h, w) = smart_resize(4000, 3000, 28, 3136, 1003520).unwrap();
        assert!(h * w <= 1003520 && h % 28 == 0 && w % 28 == 0, "{h}x{w}");
        assert_eq!((h, w), (1148, 840));
        // below min_pixels: scaled up
        assert_eq!(smart_resize(20, 20, 28, 3136, 1003520), Ok((56, 56)));
        assert!(smart_resize(1, 400, 28, 0, u64::MAX).is_err());
    }

    /// The formulas at full size: the released vision configs of Qwen2.5-VL-7B, Qwen3-VL-8B,
    /// LLaVA-1.5, Mistral-Small-3.1 and Gemma 3 4B at full width and image size (2-3 encoder
    /// layers), measured by `tools/llm/full_size_images.py`.
    #[test]
    fn full_size_vision_towers_keep_what_pytorch_measures() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/testdata/llm/full_size/images.json"
        );
        let d: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let r = d["lora_r"].as_u64().unwrap();
        let mut checked = 0;
        for (key, m) in d["models"].as_object().unwrap() {
            let rel = &m["release"];
            let mut vc = rel["vision_config"].clone();
            for (k, v) in m["reduced"]["vision_config"].as_object().unwrap() {
                vc[k] = v.clone();
            }
            let mut outer = serde_json::json!({
                "model_type": if key == "gemma3_mm" { "gemma3" } else { key.as_str() },
                "vision_config": vc,
            });
            for k in [
                "spatial_merge_size",
                "vision_feature_layer",
                "vision_feature_select_strategy",
                "mm_tokens_per_image",
            ] {
                if let Some(v) = rel.get(k) {
                    outer[k] = v.clone();
                }
            }
            let dt = rel["text_hidden_size"].as_u64().unwrap();
            let v = Vision::from_config(&outer, dt).unwrap().unwrap();
            let qwen = key.starts_with("qwen");
            for p in m["points"].as_array().unwrap() {
                let size = (
                    p["image_size"][0].as_u64().unwrap(),
                    p["image_size"][1].as_u64().unwrap(),
                );
                let n = p["images"].as_u64().unwrap();
                let img = v.images(n, Some(size), 0).unwrap();
                let at = format!("{key} {size:?} x{n}");
                assert_eq!(img.image_tokens, p["per_image"]["image_tokens"], "{at}");
                assert_eq!(img.text_tokens, p["per_image"]["text_tokens"], "{at}");
                assert_eq!(img.encoder_tokens, p["per_image"]["vision_seq"], "{at}");
                let f32 = Numerics {
                    weights: DType::F32,
                    autocast: None,
                };
                let auto = Numerics {
                    weights: DType::F32,
                    autocast: Some(DType::BF16),
                };
                let bf16 = Numerics {
                    weights: DType::BF16,
                    autocast: None,
                };
                // Qwen's fused qkv: q_proj/v_proj wrap nothing on the vision side
                let qv = if qwen {
                    Adapted::Nothing
                } else {
                    Adapted::QueryValue(r)
                };
                for (scenario, attn, nm, mode) in [
                    ("sdpa_fp32", Attn::Sdpa, f32, Training::Full),
                    ("eager_fp32", Attn::Eager, f32, Training::Full),
                    ("sdpa_autocast_bf16", Attn::Sdpa, auto, Training::Full),
                    ("sdpa_bf16_weights", Attn::Sdpa, bf16, Training::Full),
                    ("sdpa_fp32_gc", Attn::Sdpa, f32, Training::Checkpoint),
                    ("sdpa_fp32_lora_qv", Attn::Sdpa, f32, Training::Lora(qv)),
                    (
                        "sdpa_fp32_lora_all_linear",
                        Attn::Sdpa,
                        f32,
                        Training::Lora(Adapted::AllLinear(r)),
                    ),
                ] {
                    let Some(want) = p["saved"][scenario]["vision_plus_projector_bytes"].as_u64()
                    else {
                        continue;
                    };
                    assert_eq!(
                        v.saved_bytes(&img, n, attn, nm, mode),
                        Some(want),
                        "{at} {scenario}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked >= 70, "{checked}");
    }
}
