//! A transformer's architecture read from its Hugging Face `config.json`, by `model_type` and the
//! fields that family's modeling code reads (not by guessing from tensor names).

use serde_json::Value;

use super::layers::{Attention, Block, Channel, Mixer, Window};
use crate::ir::DType;

/// How the families build their blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Llama-style decoders: Llama, Mistral, Qwen2/3, Gemma 1-3, Phi-3, Mixtral, Qwen2-MoE.
    Decoder,
    /// GPT-2: learned positions, Conv1D weights, fused `c_attn`, LayerNorm, gelu_new.
    Gpt2,
    /// GPT-NeoX: fused `query_key_value`, partial rotary, parallel residual, LayerNorm.
    GptNeox,
    /// BERT / RoBERTa encoders with the masked-LM head.
    Bert,
    /// Vision Transformer (image classification).
    Vit,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// `w * x / rms(x)` computed in fp32 (Llama).
    Rms,
    /// `(1 + w) * x / rms(x)` in fp32 (Gemma).
    RmsGemma,
    LayerNorm,
    /// `(w * x / rms(x)).to(dtype)`: the weight applied in fp32 before the cast back (OLMo 2/3,
    /// gpt-oss): the fp32 normalized rows are kept, not a half copy.
    RmsWeightFp32,
    /// `(w.to(fp32) * x / rms(x)).to(dtype)`: as [`Norm::RmsWeightFp32`], the weight cast to
    /// fp32 first, so a half model also keeps that fp32 copy of the weight (Nemotron-H).
    RmsWeightCastFp32,
    /// Mean-subtracted, weight only, no bias, all in fp32 (Cohere's `CohereLayerNorm`).
    LayerNormFp32,
}

/// Where a block's norms sit around its token and channel mixers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NormPlace {
    /// Before each mixer, on the residual stream's copy it reads (Llama): 2 per block.
    Pre,
    /// Before and after each mixer (Gemma 2/3): 4 per block.
    Sandwich,
    /// After each mixer only, on its output before the residual add (OLMo 2/3, EXAONE 4).
    Post,
    /// One norm whose output feeds the attention and the MLP side by side, both added to the
    /// residual (Cohere 2; GPT-NeoX's parallel residual has its own block).
    Parallel,
}

/// The norm on queries and keys before the rotary embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    None,
    /// The family's norm over each head's `head_dim` (Qwen3, Gemma 3, EXAONE 4).
    Head,
    /// The family's norm over the whole projection (`heads × head_dim`), before the reshape to
    /// heads (OLMo 2/3).
    Projection,
    /// A weightless L2 norm over each head, after the rotary embedding, on rotary layers only
    /// (Llama 4's `use_qk_norm`).
    L2,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    Silu,
    /// `gelu` or `gelu_pytorch_tanh`: one fused op.
    Gelu,
    /// GPT-2's `gelu_new`, written out of pow, tanh and products.
    GeluNew,
}

/// What sits on top of the blocks: it decides the logits, their MACs and what training keeps.
/// From `architectures` in config.json, else from the tensors present ([`Head::from_tensors`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Head {
    /// A language-model head over every position (`*ForCausalLM`, `GPT2LMHeadModel`).
    CausalLm,
    /// BERT's masked-LM head: dense, activation, LayerNorm and the decoder over every position.
    MaskedLm,
    /// A classifier with `labels` outputs: on the pooled [CLS] token (BERT, ViT) or on every
    /// position then gathered at the last token (decoders' `*ForSequenceClassification`).
    Classifier { labels: u64 },
    /// The bare model (`BertModel`, `LlamaModel`, `GPT2Model`): its outputs are the last hidden
    /// state (and BERT's pooler output); the head and loss a user adds are not counted.
    None,
    /// A head nnlint does not model (`architectures` names it): like `None`, said so.
    Other { class: String },
}

impl Head {
    /// The head an `architectures` entry names, `None` for a class of another kind.
    fn from_class(class: &str, labels: u64) -> Head {
        let ends = |s: &str| class.ends_with(s);
        // GPT2DoubleHeadsModel: the LM head and a small multiple-choice head
        if ends("ForCausalLM")
            || ends("LMHeadModel")
            || ends("DoubleHeadsModel")
            || ends("ForConditionalGeneration")
        {
            Head::CausalLm
        } else if ends("ForMaskedLM") || ends("ForPreTraining") {
            Head::MaskedLm
        } else if ends("ForSequenceClassification") || ends("ForImageClassification") {
            Head::Classifier { labels }
        } else if ends("Model") {
            Head::None
        } else {
            Head::Other {
                class: class.to_string(),
            }
        }
    }

    /// The head the tensor names show (for a config without `architectures`): `None` when they
    /// show none the family could have.
    pub fn from_tensors<'a>(
        family: Family,
        names: impl Iterator<Item = &'a str> + Clone,
        labels: u64,
    ) -> Option<Head> {
        let has = |suffix: &str| {
            names.clone().any(|n| {
                n.strip_suffix(suffix)
                    .is_some_and(|head| head.is_empty() || head.ends_with('.'))
            })
        };
        if has("cls.predictions.bias")
            || has("cls.predictions.transform.dense.weight")
            || has("lm_head.dense.weight")
        {
            return Some(Head::MaskedLm);
        }
        if has("lm_head.weight") || has("embed_out.weight") || has("output.weight") {
            return Some(Head::CausalLm);
        }
        // RoBERTa's classifier is `classifier.dense` + `classifier.out_proj`
        if has("classifier.weight") || has("classifier.out_proj.weight") || has("score.weight") {
            return Some(Head::Classifier { labels });
        }
        match family {
            // an encoder without head tensors is the bare model; a tied decoder's head has no
            // tensor of its own, so its tensors cannot tell
            Family::Bert | Family::Vit => Some(Head::None),
            _ => None,
        }
    }

    /// Refines a head guessed from the family (no `architectures` in config.json) with the
    /// tensors present, and the pooler with `pooler.dense.weight`.
    pub fn refine<'a>(a: &mut Arch, names: impl Iterator<Item = &'a str> + Clone) {
        if !a.head_from_config {
            let labels = match a.head {
                Head::Classifier { labels } => labels,
                _ => a.image.map_or(2, |i| i.3),
            };
            if let Some(h) = Head::from_tensors(a.family, names.clone(), labels) {
                a.head = h;
            }
        }
        if matches!(a.family, Family::Bert | Family::Vit) {
            a.pooler = names.clone().any(|n| n.ends_with("pooler.dense.weight"));
        }
    }

    /// Whether the head produces vocabulary-sized logits at every position.
    pub fn is_lm(&self) -> bool {
        matches!(self, Head::CausalLm | Head::MaskedLm)
    }

    /// Words for notes and tables.
    pub fn describe(&self) -> String {
        match self {
            Head::CausalLm => "causal-LM head".into(),
            Head::MaskedLm => "masked-LM head".into(),
            Head::Classifier { labels } => format!("classifier head ({labels} labels)"),
            Head::None => "no head (the bare model)".into(),
            Head::Other { class } => format!("the head of {class}, which nnlint does not model"),
        }
    }
}

/// How a router scores the experts and picks a token's top k.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Router {
    /// Softmax over every expert in fp32, the top k of the probabilities (Mixtral, Qwen-MoE,
    /// DeepSeek-V2).
    Softmax,
    /// Sigmoid scores; `e_score_correction_bias` added for the choice, group-limited top k,
    /// weights gathered from the unbiased scores, × `routed_scaling_factor` (DeepSeek-V3,
    /// GLM-4.5).
    SigmoidGroup,
    /// Softmax over every expert in fp32; the correction bias added for the choice, weights
    /// gathered from the probabilities (ERNIE 4.5).
    SoftmaxBias,
    /// The top k of the logits, a softmax over those k (gpt-oss).
    TopkSoftmax,
}

/// Where a router's `e_score_correction_bias` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Correction {
    /// A persistent fp32 buffer: in the file, not in `parameters()` (DeepSeek-V3, GLM-4.5).
    Buffer,
    /// A frozen parameter (`moe_statics.e_score_correction_bias`, ERNIE 4.5).
    Parameter,
}

/// Mixture-of-experts blocks: one description for every family's routed experts, shared
/// experts and router.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Moe {
    pub experts: u64,
    pub top_k: u64,
    pub expert_intermediate: u64,
    /// The always-on shared experts, as one MLP of this width (Qwen2-MoE's
    /// `shared_expert_intermediate_size`; DeepSeek's `moe_intermediate_size × n_shared_experts`);
    /// 0: none.
    pub shared_intermediate: u64,
    /// How many shared experts that width stands for (for the tables).
    pub shared_experts: u64,
    /// The shared expert's output is scaled by a sigmoid gate (Qwen2-MoE's
    /// `shared_expert_gate`).
    pub shared_gate: bool,
    /// How the router picks the experts.
    pub router: Router,
    /// Routing weights renormalised over the top k.
    pub norm_topk: bool,
    /// The router is an `nn.Linear` (peft's all-linear gives it an adapter); Qwen2-MoE's
    /// transformers-5 router holds a bare parameter.
    pub router_linear: bool,
    /// The router has a bias (gpt-oss).
    pub router_bias: bool,
    /// The router's `e_score_correction_bias`, if any.
    pub correction: Option<Correction>,
    /// Experts with biases on gate_up and down, an interleaved gate/up split and a clamped
    /// GLU `(up + 1) · gate · σ(α · gate)` (gpt-oss).
    pub clamped_glu: bool,
    /// Per block, whether it is a mixture of experts; the others are dense MLPs of
    /// `intermediate_size` (Qwen-MoE's `mlp_only_layers` and `decoder_sparse_step`,
    /// DeepSeek's `first_k_dense_replace`).
    #[serde(skip)]
    pub sparse: Vec<bool>,
    /// How many blocks are mixtures of experts.
    pub moe_layers: u64,
    /// How tokens reach the experts.
    pub dispatch: Dispatch,
    /// peft moves the targets that name the experts' and the router's v4 linear layers
    /// (`gate_proj`/`up_proj`/`down_proj`/`gate`, all of them under all-linear) onto the fused
    /// expert parameters and the router's weight ([`peft_converts_moe`]), set from the model
    /// type once the family is built.
    #[serde(skip)]
    pub peft_wraps_experts: bool,
}

/// How an MoE block sends tokens to its experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dispatch {
    /// Tokens sorted by expert, grouped matmuls, outputs weighted by the routing weights
    /// (transformers 5's `grouped_mm`: Mixtral, Qwen-MoE).
    Sorted,
    /// Every expert runs every token, its input scaled by the sigmoid of the router's top-k
    /// logits (0 elsewhere), with batched matmuls over all experts, plus an ungated shared
    /// expert (Llama 4's `Llama4TextMoe`).
    AllExperts,
}

impl Moe {
    /// A router-softmax mixture without shared experts (Mixtral's), to adjust.
    pub fn new(experts: u64, top_k: u64, expert_intermediate: u64) -> Moe {
        Moe {
            experts,
            top_k,
            expert_intermediate,
            shared_intermediate: 0,
            shared_experts: 0,
            shared_gate: false,
            router: Router::Softmax,
            norm_topk: true,
            router_linear: true,
            router_bias: false,
            correction: None,
            clamped_glu: false,
            sparse: Vec::new(),
            moe_layers: 0,
            dispatch: Dispatch::Sorted,
            peft_wraps_experts: false,
        }
    }

    /// Whether block `layer` routes to experts.
    pub fn at(&self, layer: usize) -> bool {
        self.sparse.get(layer).copied().unwrap_or(true)
    }

    /// Parameters of one routed expert: gate, up and down, or up and down where the experts are
    /// not gated (Nemotron-H's relu²); gpt-oss's with their biases.
    pub fn params_per_expert(&self, hidden: u64, gated: bool) -> u64 {
        let i = self.expert_intermediate;
        let w = if gated { 3u64 } else { 2 }
            .saturating_mul(hidden)
            .saturating_mul(i);
        if self.clamped_glu {
            w.saturating_add(2 * i + hidden)
        } else {
            w
        }
    }

    /// Sets which blocks route to experts (the others are dense), checking top k.
    pub fn with_layers(mut self, sparse: Vec<bool>) -> Result<Moe, ConfigError> {
        self.moe_layers = sparse.iter().filter(|&&s| s).count() as u64;
        self.sparse = sparse;
        if self.top_k > self.experts {
            return Err(ConfigError(format!(
                "num_experts_per_tok {} is more than the {} experts",
                self.top_k, self.experts
            )));
        }
        Ok(self)
    }
}

/// Everything the memory model needs about a model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Arch {
    pub model_type: String,
    pub family: Family,
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub intermediate: u64,
    pub vocab: u64,
    pub max_positions: u64,
    pub tied: bool,
    pub norm: Norm,
    pub act: Act,
    /// gate and up projections (SwiGLU / GeGLU).
    pub gated: bool,
    pub attention_bias: bool,
    /// q/k/v in one projection (Phi-3).
    pub fused_qkv: bool,
    /// gate and up in one projection (Phi-3).
    pub fused_gate_up: bool,
    /// The norm on q and k (Qwen3 and Gemma 3: per head).
    pub qk_norm: QkNorm,
    /// q, k and v clamped in place after their norms (OLMoE's `clip_qkv`).
    pub clip_qkv: bool,
    /// Where the blocks' norms sit (Llama: before each mixer).
    pub norms: NormPlace,
    /// Embeddings scaled by sqrt(hidden) (Gemma).
    pub embed_scale: bool,
    /// Rotary dimensions per head (0: learned or absolute positions).
    pub rotary_dim: u64,
    /// Separate rotary tables for sliding and global layers (Gemma 3).
    pub rotary_tables: u64,
    /// The rotary tables have a row per sequence (M-RoPE's [3, B, S] positions: Qwen2-VL,
    /// Qwen2.5-VL, Qwen3-VL), not one shared by the batch.
    pub rotary_per_sequence: bool,
    /// cos and sin hold `rotary_dim / 2` numbers a position, applied to each half of q and k
    /// (gpt-oss's `_apply_rotary_emb`), not the halves repeated.
    pub rotary_half_tables: bool,
    /// Each attention layer builds its own fp32 cos and sin from the shared tables and rotates q
    /// and k in fp32 before casting back (ERNIE 4.5's `repeat_interleave` in
    /// `apply_rotary_pos_emb`): one fresh pair kept per layer, the shared tables not kept.
    pub rotary_fp32_per_layer: bool,
    /// Per block: its token mixer and channel mixer ([`super::layers`]).
    pub blocks: Vec<Block>,
    pub attn_softcap: Option<f64>,
    pub final_softcap: Option<f64>,
    /// The logits multiplied by this (Cohere's `logit_scale`).
    pub logit_scale: Option<f64>,
    /// Rotary positions as one complex64 table multiplied into q and k viewed as complex
    /// numbers, in fp32 (Llama 4's `apply_rotary_emb`), rather than cos and sin tables.
    pub complex_rope: bool,
    /// Eager attention's softmax in fp32 (most families); Llama 4 keeps the scores' dtype.
    pub softmax_fp32: bool,
    /// NoPE layers scale q by a per-position temperature (Llama 4's `attn_temperature_tuning`).
    pub attn_temperature: bool,
    pub moe: Option<Moe>,
    /// GPT-NeoX's parallel attention and MLP.
    pub parallel_residual: bool,
    /// The attention output projection keeps its own copy of the attention output (Phi-3's
    /// reshape is not a view of SDPA's output).
    pub o_proj_copy: bool,
    /// The checkpoint's dtype (`dtype` / `torch_dtype`).
    #[serde(skip)]
    pub dtype: Option<DType>,
    /// ViT: image side, patch side, channels and classes.
    pub image: Option<(u64, u64, u64, u64)>,
    /// What sits on the blocks (`architectures`, refined by the tensors present).
    pub head: Head,
    /// The class `architectures` names (`BertModel`, `LlamaForCausalLM`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// BERT's pooler (dense + tanh on the [CLS] token): `BertModel` and the classifiers have
    /// it, the masked-LM model does not.
    pub pooler: bool,
    /// Whether `head` was read from `architectures` (else from the family's usual head, until
    /// the tensors refine it).
    #[serde(skip)]
    pub head_from_config: bool,
    /// Dropout probabilities above 0 that config.json sets for a head nnlint does not model
    /// (GPT-2's and GPT-NeoX's token classifiers): a training estimate with any is a lower bound.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropout: Vec<(String, f64)>,
    /// The dropouts the forward models, by site (0: none).
    #[serde(skip)]
    pub drop: Dropout,
    /// A multimodal wrapper's vision encoder, where nnlint models its image inputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<super::vision::Vision>,
    /// Why a wrapper's vision encoder is not modelled (what `--images` answers).
    #[serde(skip)]
    pub vision_unmodelled: Option<String>,
    /// A wrapper's linear layers outside the language model (vision tower, projector), as
    /// (module path, in, out), from the checkpoint's tensors: peft gives them adapters too.
    #[serde(skip)]
    pub vision_linears: Vec<(String, u64, u64)>,
}

/// Dropout probabilities where the family's modeling code (transformers 5) applies them in
/// training.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Dropout {
    /// On the embeddings (BERT: after the LayerNorm; GPT-2: after adding positions; GPT-NeoX:
    /// on `embed_in`; ViT: after adding positions).
    pub embed: f64,
    /// On the attention probabilities (eager) or SDPA's `dropout_p`.
    pub attn: f64,
    /// On the attention output projection's and the MLP's outputs, before the residual add.
    pub hidden: f64,
    /// BERT's sequence classifier, on the pooled output.
    pub classifier: f64,
}

impl Arch {
    /// Attention width: heads × head_dim (not always `hidden`).
    pub fn q_dim(&self) -> u64 {
        self.heads * self.head_dim
    }
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }
    pub fn is_causal_lm(&self) -> bool {
        !matches!(self.family, Family::Bert | Family::Vit)
    }
    /// Tokens per sequence the model sees for a given `--seq` (ViT: patches + [CLS]).
    pub fn tokens(&self, seq: u64) -> u64 {
        match self.image {
            Some((img, patch, _, _)) => (img / patch.max(1)).pow(2) + 1,
            None => seq,
        }
    }
    /// Block `layer`'s attention window (`None`: full attention, or not attention).
    pub fn window(&self, layer: usize) -> Option<u64> {
        self.blocks
            .get(layer)
            .and_then(|b| b.mixer.attention())
            .and_then(|a| a.window.tokens())
    }
    /// The family's attention for block `layer` (its heads, widths, window and positions).
    pub fn attention(&self, window: Option<u64>) -> Attention {
        Attention {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            v_head_dim: self.head_dim,
            window: window.map_or(Window::Full, Window::Sliding),
            rope: self.rotary_dim > 0,
            sinks: false,
            output_gate: false,
        }
    }
    /// Makes `m` the family's mixture of experts: the blocks it marks route to experts, the
    /// others keep (or get) a dense MLP of `intermediate_size`.
    pub fn set_moe(&mut self, m: Moe) {
        for (i, b) in self.blocks.iter_mut().enumerate() {
            if m.at(i) {
                b.channel = Channel::Moe;
            } else if b.channel == Channel::Moe {
                b.channel = Channel::Mlp {
                    intermediate: self.intermediate,
                };
            }
        }
        self.moe = Some(m);
    }

    /// Whether any block routes to experts.
    pub fn has_moe(&self) -> bool {
        self.moe.is_some() && self.blocks.iter().any(|b| b.channel == Channel::Moe)
    }
}

/// An error in config.json: the field and what is wrong.
#[derive(Debug)]
pub struct ConfigError(pub String);

fn get<'a>(c: &'a Value, names: &[&str]) -> Option<&'a Value> {
    names
        .iter()
        .find_map(|n| c.get(*n).filter(|v| !v.is_null()))
}

/// The largest width, head count, expert count or vocabulary a config may give: 2^24 is 64× the
/// widest released model's FFN and 64× the largest vocabulary, and keeps the estimates' products
/// (vocab × hidden, layers × experts × hidden × FFN) inside 64 bits.
pub const MAX_FIELD: u64 = 1 << 24;

/// The largest context length or sliding window a config may give (2^40 tokens).
pub const MAX_POSITIONS: u64 = 1 << 40;

pub(crate) fn uint(c: &Value, names: &[&str]) -> Result<Option<u64>, ConfigError> {
    let limit = if names
        .iter()
        .any(|n| n.contains("position") || n.contains("sliding_window"))
    {
        MAX_POSITIONS
    } else {
        MAX_FIELD
    };
    match get(c, names) {
        None => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= limit => Ok(Some(n)),
            Some(n) => Err(ConfigError(format!(
                "field '{}' is {n}: more than nnlint models (at most {limit})",
                names[0]
            ))),
            None => Err(ConfigError(format!(
                "field '{}' is {v}, not a non-negative integer",
                names[0]
            ))),
        },
    }
}

pub(crate) fn need(c: &Value, names: &[&str]) -> Result<u64, ConfigError> {
    match uint(c, names)? {
        Some(0) => Err(ConfigError(format!("field '{}' is 0", names[0]))),
        Some(v) => Ok(v),
        None => Err(ConfigError(format!("field '{}' is missing", names[0]))),
    }
}

pub(crate) fn flag(c: &Value, name: &str, default: bool) -> bool {
    c.get(name).and_then(Value::as_bool).unwrap_or(default)
}

pub(crate) fn float(c: &Value, name: &str) -> Option<f64> {
    c.get(name).and_then(Value::as_f64)
}

fn dtype_of(c: &Value) -> Option<DType> {
    let s = get(c, &["dtype", "torch_dtype"])?.as_str()?;
    Some(match s.trim_start_matches("torch.") {
        "float32" | "float" => DType::F32,
        "bfloat16" => DType::BF16,
        "float16" | "half" => DType::F16,
        "float64" => DType::F64,
        _ => return None,
    })
}

/// The partial rotary factor, from `rope_parameters`, `rope_scaling`-era fields or `rotary_pct`.
fn rotary_factor(c: &Value) -> f64 {
    let nested = c
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
        .and_then(Value::as_f64);
    nested
        .or_else(|| float(c, "partial_rotary_factor"))
        .or_else(|| float(c, "rotary_pct"))
        .unwrap_or(1.0)
}

/// The most blocks a config may declare.
pub const MAX_LAYERS: u64 = 4096;

/// Families nnlint models, by `model_type`.
pub const KNOWN: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "gemma3",
    "phi3",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "gpt2",
    "gpt_neox",
    "bert",
    "roberta",
    "vit",
];

/// The `model_type` the class in `architectures` belongs to, for a config that lacks the field
/// (older exports): `LlamaForCausalLM` is `llama`.
pub fn model_type_of_class(config: &Value) -> Option<&'static str> {
    let class = config.get("architectures")?.as_array()?.first()?.as_str()?;
    // the longest prefix first: Qwen2Moe before Qwen2, GPTNeoX before GPT2
    const PREFIXES: &[(&str, &str)] = &[
        ("Qwen2Moe", "qwen2_moe"),
        ("Qwen3Moe", "qwen3_moe"),
        ("GPTNeoX", "gpt_neox"),
        ("Gemma3ForCausalLM", "gemma3_text"),
        ("Gemma3", "gemma3"),
        ("Gemma2", "gemma2"),
        ("Gemma", "gemma"),
        ("Qwen2", "qwen2"),
        ("Qwen3", "qwen3"),
        ("Llama", "llama"),
        ("Mistral", "mistral"),
        ("Mixtral", "mixtral"),
        ("Phi3", "phi3"),
        ("GPT2", "gpt2"),
        ("Roberta", "roberta"),
        ("Bert", "bert"),
        ("ViT", "vit"),
    ];
    PREFIXES
        .iter()
        .find(|(p, _)| {
            class.strip_prefix(p).is_some_and(|rest| {
                rest.is_empty()
                    || rest.starts_with("For")
                    || rest.starts_with("Model")
                    || rest.starts_with("LMHead")
                    || p.ends_with("ForCausalLM")
            })
        })
        .map(|(_, t)| *t)
}

/// Qwen-MoE's blocks: block `i` routes to experts unless it is in `mlp_only_layers` or `i + 1`
/// is not a multiple of `decoder_sparse_step` (transformers' `Qwen2MoeDecoderLayer`).
pub(crate) fn qwen_sparse_layers(c: &Value, layers: u64) -> Result<Vec<bool>, ConfigError> {
    let step = uint(c, &["decoder_sparse_step"])?.unwrap_or(1);
    if step == 0 {
        return Err(ConfigError("field 'decoder_sparse_step' is 0".into()));
    }
    let dense: Vec<u64> = match c.get("mlp_only_layers") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_u64().ok_or_else(|| {
                    ConfigError(format!(
                        "field 'mlp_only_layers' holds {v}, not a layer index"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(v) => {
            return Err(ConfigError(format!(
                "field 'mlp_only_layers' is {v}, not a list of layer indices"
            )))
        }
    };
    Ok((0..layers)
        .map(|i| !dense.contains(&i) && (i + 1) % step == 0)
        .collect())
}

/// Reads the architecture. `Ok(None)`: a `model_type` nnlint does not model (the caller still
/// reports the parameters from the headers).
pub fn from_config(config: &Value) -> Result<Option<Arch>, ConfigError> {
    if !config.is_object() {
        return Err(ConfigError("is not a JSON object".into()));
    }
    // multimodal wrappers keep the language model in text_config
    let outer_type = config.get("model_type").and_then(Value::as_str);
    let c = match config.get("text_config") {
        Some(t) if t.is_object() => t,
        _ => config,
    };
    let model_type = match c
        .get("model_type")
        .and_then(Value::as_str)
        .or(outer_type)
        .or_else(|| model_type_of_class(config))
    {
        Some(t) => t.to_string(),
        None => return Err(ConfigError("field 'model_type' is missing".into())),
    };
    let mut a = if let Some(build) = super::families::find(&model_type) {
        build(config, c, &model_type)?
    } else if KNOWN.contains(&model_type.as_str()) {
        decoder(config, c, &model_type)?
    } else {
        return Ok(None);
    };
    match super::vision::Vision::from_config(config, a.hidden) {
        Ok(v) => a.vision = v,
        Err(why) => a.vision_unmodelled = Some(why),
    }
    if let Some(m) = a.moe.as_mut() {
        // peft reads the model's own config (the wrapper's, for a multimodal one)
        m.peft_wraps_experts = peft_converts_moe(outer_type.unwrap_or(&model_type));
    }
    Ok(Some(a))
}

/// Whether peft 0.21 moves LoRA targets onto a transformers-5 MoE's fused expert parameters:
/// its conversion (`peft/utils/transformers_weight_conversion.py`, `_convert_peft_config_moe`)
/// acts on the model types that transformers' `_MODEL_TO_CONVERSION_PATTERN`
/// (`conversion_mapping.py`) maps to `"mixtral"` or `"qwen2_moe"`, plus `mixtral`, which peft
/// adds. Not `qwen2_moe` itself, not gpt-oss, not Qwen3.5-MoE (measured: their experts stay
/// unwrapped).
pub fn peft_converts_moe(model_type: &str) -> bool {
    const CONVERTED: &[&str] = &[
        "mixtral",
        "minimax",
        "minimax_m2",
        "Dots3NoteTextModel",
        "afmoe",
        "deepseek_v2",
        "deepseek_v3",
        "deepseek_v32",
        "dots1",
        "ernie4_5_moe",
        "glm4_moe",
        "glm4_moe_lite",
        "glm_moe_dsa",
        "glm4v_moe",
        "longcat_flash",
        "solar_open",
        "mellum",
        "qwen3_moe",
        "beam",
        "qwen3_omni_moe",
        "qwen3_omni_moe_thinker",
        "qwen3_omni_moe_text",
        "qwen3_next",
        "hunyuan_v1_moe",
        "flex_olmo",
        "olmoe",
        "sarvam_mla",
        "exaone_moe",
        "cohere2_moe",
    ];
    CONVERTED.contains(&model_type)
}

/// Every `model_type` nnlint models: the families built here and those in
/// [`super::families::FAMILIES`].
pub fn known() -> impl Iterator<Item = &'static str> {
    KNOWN
        .iter()
        .copied()
        .chain(super::families::FAMILIES.iter().map(|(t, _)| *t))
}

/// The architecture of the families built here (Llama-style decoders, GPT-2, GPT-NeoX, BERT,
/// ViT), and the starting point of the family files: a `model_type` not named below gets the
/// Llama decoder (RMSNorm, SwiGLU, rotary, `layer_types` and `sliding_window` as given).
/// `outer` is the whole config.json, `c` the language model's part of it.
pub fn decoder(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let config = outer;
    let model_type = model_type.to_string();
    let mt = model_type.as_str();
    let family = match mt {
        "gpt2" => Family::Gpt2,
        "gpt_neox" => Family::GptNeox,
        "bert" | "roberta" => Family::Bert,
        "vit" => Family::Vit,
        _ => Family::Decoder,
    };
    let hidden = need(c, &["hidden_size", "n_embd"])?;
    let layers = need(c, &["num_hidden_layers", "n_layer"])?;
    let heads = need(c, &["num_attention_heads", "n_head"])?;
    // the deepest released models have ~130 blocks; the estimates walk every block
    if layers > MAX_LAYERS {
        return Err(ConfigError(format!(
            "field 'num_hidden_layers' is {layers}: more than the {MAX_LAYERS} blocks nnlint models"
        )));
    }
    if hidden % heads != 0 && uint(c, &["head_dim"])?.is_none() {
        return Err(ConfigError(format!(
            "hidden_size {hidden} is not a multiple of num_attention_heads {heads} and head_dim is not given"
        )));
    }
    let kv_heads = uint(c, &["num_key_value_heads"])?.unwrap_or(heads);
    if kv_heads == 0 || heads % kv_heads != 0 {
        return Err(ConfigError(format!(
            "num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}"
        )));
    }
    let head_dim = uint(c, &["head_dim"])?.unwrap_or(hidden / heads);
    // the projections' widths are bounded like the fields
    for (what, heads) in [
        ("num_attention_heads", heads),
        ("num_key_value_heads", kv_heads),
    ] {
        if heads.saturating_mul(head_dim) > MAX_FIELD {
            return Err(ConfigError(format!(
                "{what} {heads} × head_dim {head_dim} is more than nnlint models (at most {MAX_FIELD})"
            )));
        }
    }
    let intermediate = match family {
        Family::Gpt2 => uint(c, &["n_inner"])?.unwrap_or(4 * hidden),
        _ => uint(c, &["intermediate_size"])?.unwrap_or(4 * hidden),
    };
    let vocab = match family {
        Family::Vit => 0,
        _ => need(c, &["vocab_size"])?,
    };
    let max_positions = uint(c, &["max_position_embeddings", "n_positions"])?.unwrap_or(0);
    let gemma = mt.starts_with("gemma");
    let tied = flag(
        c,
        "tie_word_embeddings",
        matches!(family, Family::Gpt2 | Family::Bert) || gemma,
    );
    let sliding_window = uint(c, &["sliding_window"])?.filter(|&w| w > 0);
    let sliding = sliding_layers(c, mt, layers, sliding_window)?;
    let moe = match mt {
        "mixtral" => {
            let mut m = Moe::new(
                need(c, &["num_local_experts"])?,
                need(c, &["num_experts_per_tok"])?,
                intermediate,
            );
            // transformers 5's MixtralTopKRouter holds a bare weight, not an nn.Linear
            m.router_linear = false;
            Some(m)
        }
        "qwen2_moe" | "qwen3_moe" => {
            // transformers 5 saves `num_experts` as `num_local_experts` (its attribute map)
            let mut m = Moe::new(
                need(c, &["num_experts", "num_local_experts"])?,
                need(c, &["num_experts_per_tok"])?,
                need(c, &["moe_intermediate_size"])?,
            );
            m.shared_intermediate = uint(c, &["shared_expert_intermediate_size"])?.unwrap_or(0);
            m.shared_experts = u64::from(m.shared_intermediate > 0);
            m.shared_gate = m.shared_intermediate > 0;
            m.norm_topk = flag(c, "norm_topk_prob", false);
            m.router_linear = false;
            m.sparse = qwen_sparse_layers(c, layers)?;
            Some(m)
        }
        _ => None,
    };
    let moe = match moe {
        Some(m) => {
            let mut sparse = m.sparse.clone();
            sparse.resize(layers as usize, true);
            Some(m.with_layers(sparse)?)
        }
        None => None,
    };
    let act_name = get(
        c,
        &["hidden_act", "hidden_activation", "activation_function"],
    )
    .and_then(Value::as_str)
    .unwrap_or("");
    let act = match (family, act_name) {
        (Family::Gpt2, _) => Act::GeluNew,
        (_, "silu" | "swish") => Act::Silu,
        (Family::Decoder, "") if !gemma => Act::Silu,
        _ => Act::Gelu,
    };
    let rotary_dim = match family {
        Family::Decoder | Family::GptNeox => {
            ((head_dim as f64) * rotary_factor(c).clamp(0.0, 1.0)).round() as u64 / 2 * 2
        }
        _ => 0,
    };
    let image = match family {
        Family::Vit => {
            let labels = c
                .get("id2label")
                .and_then(Value::as_object)
                .map(|m| m.len() as u64)
                .or(uint(c, &["num_labels"])?)
                .unwrap_or(2);
            let (size, patch) = (need(c, &["image_size"])?, need(c, &["patch_size"])?);
            let channels = uint(c, &["num_channels"])?.unwrap_or(3);
            // a patch's pixels, and the patches of an image, are widths too
            let patches = (size / patch).saturating_mul(size / patch);
            if channels.saturating_mul(patch).saturating_mul(patch) > MAX_FIELD
                || patches > MAX_FIELD
            {
                return Err(ConfigError(format!(
                    "image_size {size}, patch_size {patch} and num_channels {channels} make more patches or pixels per patch than nnlint models (at most {MAX_FIELD})"
                )));
            }
            Some((size, patch, channels, labels.min(MAX_FIELD)))
        }
        _ => None,
    };
    let labels = c
        .get("id2label")
        .and_then(Value::as_object)
        .map(|m| m.len() as u64)
        .or(uint(c, &["num_labels"])?)
        .unwrap_or(2)
        .min(MAX_FIELD);
    // the class saved with the checkpoint; a multimodal wrapper's class names the wrapper, whose
    // language model has the causal-LM head
    let class = config
        .get("architectures")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_str);
    let (head, head_from_config) = match class {
        Some(class) => (Head::from_class(class, labels), true),
        None => (
            match family {
                Family::Bert => Head::MaskedLm,
                Family::Vit => Head::Classifier { labels },
                _ => Head::CausalLm,
            },
            false,
        ),
    };
    // BertModel, ViTModel and BERT's classifiers have the pooler (dense + tanh on [CLS]); the
    // LM heads and ViT's classifier are built with add_pooling_layer=False
    let pooler = match family {
        Family::Bert => !head.is_lm(),
        Family::Vit => head == Head::None,
        _ => false,
    };
    // the dropouts the family's modeling code (transformers 5.24) applies in training, by site:
    // each family reads only the keys below (others in config.json are ignored by it, so they
    // keep nothing); head-only keys of heads nnlint does not model are listed (a lower bound,
    // as the head itself is)
    let prob = |k: &str| {
        c.get(k)
            .and_then(Value::as_f64)
            .filter(|p| *p > 0.0 && *p < 1.0)
    };
    let mut drop = Dropout::default();
    let mut set = |k: &str, sites: &[fn(&mut Dropout) -> &mut f64]| {
        if let Some(p) = prob(k) {
            for f in sites {
                *f(&mut drop) = p;
            }
        }
    };
    match family {
        Family::Bert | Family::Vit => {
            set(
                "hidden_dropout_prob",
                &[|d| &mut d.embed, |d| &mut d.hidden, |d| &mut d.classifier],
            );
            set("attention_probs_dropout_prob", &[|d| &mut d.attn]);
        }
        Family::Gpt2 => {
            set("embd_pdrop", &[|d| &mut d.embed]);
            set("attn_pdrop", &[|d| &mut d.attn]);
            set("resid_pdrop", &[|d| &mut d.hidden]);
        }
        Family::GptNeox => {
            set("hidden_dropout", &[|d| &mut d.embed, |d| &mut d.hidden]);
            set("attention_dropout", &[|d| &mut d.attn]);
        }
        Family::Decoder => {
            set("attention_dropout", &[|d| &mut d.attn]);
            if mt == "phi3" {
                // Phi-3 drops the attention and MLP outputs (it applies embd_pdrop nowhere)
                set("resid_pdrop", &[|d| &mut d.hidden]);
            }
        }
    }
    // BERT's classifiers take classifier_dropout when set, RoBERTa's head too (ViT's has none)
    match (family, c.get("classifier_dropout").and_then(Value::as_f64)) {
        (Family::Bert, Some(p)) => drop.classifier = if p > 0.0 && p < 1.0 { p } else { 0.0 },
        (Family::Bert, None) => {}
        _ => drop.classifier = 0.0,
    }
    let head_only: &[&str] = match (family, &head) {
        (Family::Gpt2, Head::Other { .. }) => &["hidden_dropout", "classifier_dropout"],
        (Family::GptNeox, Head::Other { .. }) => &["classifier_dropout"],
        _ => &[],
    };
    let dropout: Vec<(String, f64)> = head_only
        .iter()
        .filter_map(|k| Some((k.to_string(), prob(k)?)))
        .collect();
    let mut a = Arch {
        dropout,
        drop,
        head,
        class: class.map(str::to_string),
        pooler,
        head_from_config,
        family,
        layers,
        hidden,
        heads,
        kv_heads,
        head_dim,
        intermediate,
        vocab,
        max_positions,
        tied,
        norm: match family {
            Family::Decoder if gemma => Norm::RmsGemma,
            Family::Decoder => Norm::Rms,
            _ => Norm::LayerNorm,
        },
        act,
        gated: family == Family::Decoder,
        attention_bias: match mt {
            "qwen2" | "qwen2_moe" => true,
            _ => flag(c, "attention_bias", matches!(family, Family::GptNeox)),
        },
        fused_qkv: mt == "phi3",
        fused_gate_up: mt == "phi3",
        clip_qkv: false,
        qk_norm: if matches!(mt, "qwen3" | "qwen3_moe" | "gemma3_text" | "gemma3") {
            QkNorm::Head
        } else {
            QkNorm::None
        },
        norms: if matches!(mt, "gemma2" | "gemma3_text" | "gemma3") {
            NormPlace::Sandwich
        } else {
            NormPlace::Pre
        },
        embed_scale: gemma,
        rotary_dim,
        rotary_tables: if matches!(mt, "gemma3_text" | "gemma3") {
            2
        } else {
            1
        },
        rotary_per_sequence: false,
        rotary_half_tables: false,
        rotary_fp32_per_layer: false,
        blocks: Vec::new(),
        attn_softcap: if mt == "gemma2" {
            float(c, "attn_logit_softcapping")
        } else {
            None
        },
        final_softcap: if mt == "gemma2" {
            float(c, "final_logit_softcapping")
        } else {
            None
        },
        logit_scale: None,
        complex_rope: false,
        softmax_fp32: true,
        attn_temperature: false,
        moe,
        parallel_residual: family == Family::GptNeox && flag(c, "use_parallel_residual", true),
        o_proj_copy: mt == "phi3",
        dtype: dtype_of(config).or_else(|| dtype_of(c)),
        image,
        model_type,
        vision: None,
        vision_unmodelled: None,
        vision_linears: Vec::new(),
    };
    a.blocks = sliding
        .iter()
        .enumerate()
        .map(|(i, w)| Block {
            mixer: Mixer::Attention(a.attention(*w)),
            channel: match &a.moe {
                Some(m) if m.at(i) => Channel::Moe,
                _ => Channel::Mlp {
                    intermediate: a.intermediate,
                },
            },
        })
        .collect();
    Ok(a)
}

/// Which layers use a sliding window, from `layer_types` where given, else the family's rule.
fn sliding_layers(
    c: &Value,
    mt: &str,
    layers: u64,
    window: Option<u64>,
) -> Result<Vec<Option<u64>>, ConfigError> {
    let n = layers as usize;
    if let Some(types) = c.get("layer_types").and_then(Value::as_array) {
        if types.len() != n {
            return Err(ConfigError(format!(
                "field 'layer_types' has {} entries for {layers} layers",
                types.len()
            )));
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("sliding_attention") => match window {
                    Some(w) => Ok(Some(w)),
                    None => Err(ConfigError(
                        "field 'layer_types' names sliding layers but 'sliding_window' is missing"
                            .into(),
                    )),
                },
                Some(_) => Ok(None),
                None => Err(ConfigError(format!(
                    "field 'layer_types' holds {t}, not a string"
                ))),
            })
            .collect();
    }
    let every = match mt {
        "mistral" | "mixtral" => window,
        "qwen2" | "qwen2_moe" | "qwen3" | "qwen3_moe" if flag(c, "use_sliding_window", false) => {
            window
        }
        "phi3" => window.filter(|&w| {
            w < uint(c, &["max_position_embeddings"])
                .ok()
                .flatten()
                .unwrap_or(u64::MAX)
        }),
        _ => None,
    };
    Ok(match (mt, window) {
        // Gemma 2 alternates sliding and global layers, starting with sliding
        ("gemma2", Some(w)) => (0..n).map(|i| (i % 2 == 0).then_some(w)).collect(),
        // Gemma 3: five sliding layers, then a global one
        ("gemma3_text" | "gemma3", Some(w)) => {
            let pattern = uint(c, &["sliding_window_pattern"])?.unwrap_or(6).max(1) as usize;
            (0..n)
                .map(|i| ((i + 1) % pattern != 0).then_some(w))
                .collect()
        }
        _ => vec![every; n],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(json: &str) -> Arch {
        from_config(&serde_json::from_str(json).unwrap())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn the_head_comes_from_the_class_then_the_tensors() {
        for (class, head) in [
            ("LlamaForCausalLM", Head::CausalLm),
            ("GPT2LMHeadModel", Head::CausalLm),
            ("GPT2DoubleHeadsModel", Head::CausalLm),
            ("Gemma3ForConditionalGeneration", Head::CausalLm),
            ("BertForMaskedLM", Head::MaskedLm),
            (
                "BertForSequenceClassification",
                Head::Classifier { labels: 5 },
            ),
            ("ViTForImageClassification", Head::Classifier { labels: 5 }),
            ("BertModel", Head::None),
            ("LlamaModel", Head::None),
        ] {
            assert_eq!(Head::from_class(class, 5), head, "{class}");
        }
        assert_eq!(
            Head::from_class("BertForQuestionAnswering", 5),
            Head::Other {
                class: "BertForQuestionAnswering".into()
            }
        );
        let of = |family, names: &[&str]| Head::from_tensors(family, names.iter().copied(), 3);
        assert_eq!(
            of(
                Family::Bert,
                &[
                    "bert.encoder.layer.0.output.dense.weight",
                    "cls.predictions.bias"
                ]
            ),
            Some(Head::MaskedLm)
        );
        assert_eq!(
            of(
                Family::Bert,
                &["roberta.pooler.dense.weight", "classifier.out_proj.weight"]
            ),
            Some(Head::Classifier { labels: 3 })
        );
        assert_eq!(
            of(
                Family::Bert,
                &["encoder.layer.0.attention.output.dense.weight"]
            ),
            Some(Head::None)
        );
        assert_eq!(
            of(Family::Decoder, &["lm_head.weight"]),
            Some(Head::CausalLm)
        );
        assert_eq!(
            of(Family::Decoder, &["score.weight"]),
            Some(Head::Classifier { labels: 3 })
        );
        // a tied decoder's head has no tensor: the tensors cannot tell
        assert_eq!(of(Family::Decoder, &["model.embed_tokens.weight"]), None);
    }

    #[test]
    fn llama_defaults() {
        let a = arch(
            r#"{"model_type":"llama","hidden_size":4096,"num_hidden_layers":32,
            "num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,
            "vocab_size":128256,"torch_dtype":"bfloat16"}"#,
        );
        assert_eq!((a.head_dim, a.kv_dim(), a.rotary_dim), (128, 1024, 128));
        assert!(!a.tied && a.gated && (0..32).all(|i| a.window(i).is_none()));
        assert_eq!(a.dtype, Some(DType::BF16));
    }

    #[test]
    fn gemma2_alternates_sliding_layers() {
        let a = arch(
            r#"{"model_type":"gemma2","hidden_size":32,"num_hidden_layers":4,
            "num_attention_heads":4,"head_dim":16,"vocab_size":10,"sliding_window":8}"#,
        );
        assert_eq!(
            (0..4).map(|i| a.window(i)).collect::<Vec<_>>(),
            vec![Some(8), None, Some(8), None]
        );
        assert!(a.tied && a.embed_scale);
    }

    #[test]
    fn bad_fields_are_named() {
        for (json, field) in [
            (r#"{"model_type":"llama"}"#, "hidden_size"),
            (
                r#"{"model_type":"llama","hidden_size":"x","num_hidden_layers":1,"num_attention_heads":1,"vocab_size":1}"#,
                "hidden_size",
            ),
            (
                r#"{"model_type":"llama","hidden_size":8,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":3,"vocab_size":1}"#,
                "num_key_value_heads",
            ),
        ] {
            let e = from_config(&serde_json::from_str(json).unwrap()).unwrap_err();
            assert!(e.0.contains(field), "{}", e.0);
        }
    }

    #[test]
    fn unknown_model_types_are_not_errors() {
        let v = serde_json::json!({"model_type": "mamba", "hidden_size": 8});
        assert!(from_config(&v).unwrap().is_none());
    }

    #[test]
    fn dropouts_are_placed_by_the_keys_each_family_reads() {
        let d = |json: &str| arch(json).drop;
        let gpt2 = d(
            r#"{"model_type":"gpt2","n_embd":8,"n_layer":1,"n_head":2,"vocab_size":4,
            "embd_pdrop":0.1,"attn_pdrop":0.2,"resid_pdrop":0.3}"#,
        );
        assert_eq!(
            (gpt2.embed, gpt2.attn, gpt2.hidden, gpt2.classifier),
            (0.1, 0.2, 0.3, 0.0)
        );
        let bert = d(
            r#"{"model_type":"bert","hidden_size":8,"num_hidden_layers":1,
            "num_attention_heads":2,"vocab_size":4,"hidden_dropout_prob":0.1,
            "attention_probs_dropout_prob":0.2,"classifier_dropout":0.3}"#,
        );
        assert_eq!(
            (bert.embed, bert.attn, bert.hidden, bert.classifier),
            (0.1, 0.2, 0.1, 0.3)
        );
        // Llama reads attention_dropout only; Phi-3 resid_pdrop too (embd_pdrop nowhere)
        let llama = d(
            r#"{"model_type":"llama","hidden_size":8,"num_hidden_layers":1,
            "num_attention_heads":2,"vocab_size":4,"attention_dropout":0.1,"resid_pdrop":0.2,
            "hidden_dropout":0.3}"#,
        );
        assert_eq!(
            llama,
            Dropout {
                attn: 0.1,
                ..Dropout::default()
            }
        );
        let phi3 = d(
            r#"{"model_type":"phi3","hidden_size":8,"num_hidden_layers":1,
            "num_attention_heads":2,"vocab_size":4,"resid_pdrop":0.2,"embd_pdrop":0.3}"#,
        );
        assert_eq!(
            phi3,
            Dropout {
                hidden: 0.2,
                ..Dropout::default()
            }
        );
        let neox = d(
            r#"{"model_type":"gpt_neox","hidden_size":8,"num_hidden_layers":1,
            "num_attention_heads":2,"vocab_size":4,"hidden_dropout":0.1,"attention_dropout":0.2}"#,
        );
        assert_eq!((neox.embed, neox.attn, neox.hidden), (0.1, 0.2, 0.1));
    }
}
