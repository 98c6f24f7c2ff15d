//! Families described as layers: each file maps one family's `config.json` (the fields its
//! transformers modeling code reads) onto the shared layer model ([`super::layers`]), starting
//! from the Llama-style decoder ([`super::arch::decoder`]) and changing what differs. Adding a
//! family is its file and one line in [`FAMILIES`].

use serde_json::Value;

use super::arch::{need, uint, Arch, ConfigError, MAX_FIELD};
use super::layers::{Mamba2, Mixer};

mod cohere2;
mod deepseek_v3;
mod ernie4_5_moe;
mod exaone4;
mod falcon_h1;
mod glm4_moe;
mod gpt_oss;
mod granitemoehybrid;
mod lfm2;
mod llama4;
mod mamba2;
mod nemotron_h;
mod olmo2;
mod olmoe;
mod qwen3_5;
mod qwen3_next;
mod qwen_vl;
mod smollm3;

/// Builds a family's architecture from its config (`c`: the language model's config, which a
/// multimodal wrapper keeps in `text_config`; `outer`: the whole file).
pub type Build = fn(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError>;

/// The families, by `model_type`.
pub const FAMILIES: &[(&str, Build)] = &[
    ("smollm3", smollm3::build),
    ("qwen2_vl_text", qwen_vl::build),
    ("qwen2_5_vl_text", qwen_vl::build),
    ("qwen3_vl_text", qwen_vl::build),
    ("mamba2", mamba2::build),
    ("lfm2", lfm2::build),
    ("granitemoehybrid", granitemoehybrid::build),
    ("nemotron_h", nemotron_h::build),
    ("qwen3_next", qwen3_next::build),
    ("qwen3_5_text", qwen3_5::build),
    ("qwen3_5", qwen3_5::build),
    ("qwen3_5_moe_text", qwen3_5::build),
    ("qwen3_5_moe", qwen3_5::build),
    ("falcon_h1", falcon_h1::build),
    ("olmo2", olmo2::build),
    ("olmo3", olmo2::build),
    ("cohere2", cohere2::build),
    ("exaone4", exaone4::build),
    ("llama4_text", llama4::build),
    ("llama4", llama4::build),
    ("deepseek_v3", deepseek_v3::build),
    ("deepseek_v2", deepseek_v3::build),
    ("kimi_k2", deepseek_v3::build),
    ("glm4_moe", glm4_moe::build),
    ("gpt_oss", gpt_oss::build),
    ("ernie4_5_moe", ernie4_5_moe::build),
    ("olmoe", olmoe::build),
];

/// A GGUF file's metadata and tensors, as a family's [`GgufFill`] reads them: llama.cpp's keys
/// (`{arch}.key`, scalars or per-layer arrays) and which tensors are present.
pub struct GgufKeys<'a>(pub &'a crate::load::gguf::Gguf);

impl GgufKeys<'_> {
    /// An integer key (`{arch}.key`); a per-layer array gives its largest entry.
    pub fn u(&self, key: &str) -> Option<u64> {
        match self.0.arch_key(key)? {
            crate::load::gguf::Meta::Array(_, v) => v
                .iter()
                .filter(|x| x.is_finite() && **x >= 0.0)
                .map(|&x| x as u64)
                .max(),
            m => m.as_u64(),
        }
    }
    pub fn f(&self, key: &str) -> Option<f64> {
        self.0.arch_key(key).and_then(|m| m.as_f64())
    }
    pub fn bool(&self, key: &str) -> Option<bool> {
        match self.0.arch_key(key)? {
            crate::load::gguf::Meta::Bool(b) => Some(*b),
            m => m.as_u64().map(|v| v != 0),
        }
    }
    /// A per-layer array key, when it is one with `n` entries.
    pub fn per_layer(&self, key: &str, n: u64) -> Option<&[f64]> {
        match self.0.arch_key(key)? {
            crate::load::gguf::Meta::Array(len, v) if *len == n && v.len() as u64 == n => Some(v),
            _ => None,
        }
    }
    pub fn has(&self, tensor: &str) -> bool {
        self.0.tensors.iter().any(|t| t.name == tensor)
    }
    /// The outermost dimension of a stored tensor (a matrix's output width).
    pub fn rows(&self, tensor: &str) -> Option<u64> {
        self.0
            .tensors
            .iter()
            .find(|t| t.name == tensor)
            .and_then(|t| t.shape.first().copied())
    }
}

/// Completes the Hugging Face config a GGUF file's common keys gave (`hidden_size`,
/// `num_hidden_layers`, heads, `head_dim`, `intermediate_size`, experts...) with the family's own
/// fields, from the keys llama.cpp's converter writes for it.
pub type GgufFill = fn(k: &GgufKeys, c: &mut serde_json::Map<String, Value>, layers: u64);

/// llama.cpp's architectures (`general.architecture`), the family each is read as, and what the
/// family adds to the common keys. Checked against llama.cpp 0c1e57098's `conversion/*.py` and
/// `src/models/*.cpp` (tools/llm/make_gguf.py writes the twins the tests read).
pub const GGUF: &[(&str, &str, Option<GgufFill>)] = &[
    ("llama", "llama", None),
    ("qwen2", "qwen2", None),
    ("qwen3", "qwen3", None),
    ("qwen2moe", "qwen2_moe", None),
    ("qwen3moe", "qwen3_moe", None),
    ("gemma", "gemma", None),
    ("gemma2", "gemma2", None),
    ("gemma3", "gemma3_text", None),
    ("phi3", "phi3", None),
    ("gpt2", "gpt2", None),
    ("gptneox", "gpt_neox", None),
    ("bert", "bert", None),
    ("mistral3", "mistral", None),
    ("smollm3", "smollm3", Some(smollm3::gguf)),
    ("olmo2", "olmo2", Some(olmo2::gguf)),
    ("cohere2", "cohere2", Some(cohere2::gguf)),
    ("exaone4", "exaone4", Some(exaone4::gguf)),
    ("llama4", "llama4_text", Some(llama4::gguf)),
    ("deepseek2", "deepseek_v3", Some(deepseek_v3::gguf)),
    ("glm4moe", "glm4_moe", Some(glm4_moe::gguf)),
    ("gpt-oss", "gpt_oss", Some(gpt_oss::gguf)),
    ("ernie4_5-moe", "ernie4_5_moe", Some(ernie4_5_moe::gguf)),
    ("qwen3next", "qwen3_next", Some(qwen3_next::gguf)),
    ("qwen2vl", "qwen2_5_vl_text", Some(qwen_vl::gguf)),
    ("qwen3vl", "qwen3_vl_text", Some(qwen_vl::gguf)),
    ("mamba2", "mamba2", Some(mamba2::gguf)),
    ("lfm2", "lfm2", Some(lfm2::gguf)),
    (
        "granitehybrid",
        "granitemoehybrid",
        Some(granitemoehybrid::gguf),
    ),
    ("nemotron_h", "nemotron_h", Some(nemotron_h::gguf)),
    ("nemotron_h_moe", "nemotron_h", Some(nemotron_h::gguf)),
    ("falcon-h1", "falcon_h1", Some(falcon_h1::gguf)),
];

/// The family a llama.cpp architecture is read as, and its GGUF fill.
pub fn gguf(arch: &str) -> Option<(&'static str, Option<GgufFill>)> {
    GGUF.iter()
        .find(|(a, _, _)| *a == arch)
        .map(|(_, t, f)| (*t, *f))
}

/// Which layers slide, as llama.cpp reads it: the per-layer pattern where the file has one, a
/// period there, else the architecture's period (`load_swa_pattern`: with period p, layer i slides
/// when `i % p < p - 1`).
pub fn swa_kinds(k: &GgufKeys, layers: u64, period: u64) -> Value {
    if let Some(p) = k.per_layer("attention.sliding_window_pattern", layers) {
        return kinds_of(
            p.iter().map(|&f| f != 0.0),
            "sliding_attention",
            "full_attention",
        );
    }
    let p = k
        .u("attention.sliding_window_pattern")
        .unwrap_or(period)
        .max(1);
    kinds_of(
        (0..layers).map(|i| i % p < p - 1),
        "sliding_attention",
        "full_attention",
    )
}

/// The DeepSeek-style expert keys (`expert_count`, `expert_shared_count`,
/// `leading_dense_block_count`, groups, `expert_weights_norm`) as those families' config fields.
pub fn moe_keys(k: &GgufKeys, c: &mut serde_json::Map<String, Value>) {
    for (field, key) in [
        ("n_routed_experts", "expert_count"),
        ("num_experts_per_tok", "expert_used_count"),
        ("moe_intermediate_size", "expert_feed_forward_length"),
        ("n_shared_experts", "expert_shared_count"),
        ("first_k_dense_replace", "leading_dense_block_count"),
        ("n_group", "expert_group_count"),
        ("topk_group", "expert_group_used_count"),
    ] {
        if let Some(v) = k.u(key) {
            c.insert(field.into(), v.into());
        }
    }
    if let Some(n) = k.bool("expert_weights_norm") {
        c.insert("norm_topk_prob".into(), n.into());
    }
}

/// Mamba-2's sizes from the `ssm.*` keys, under the family's field names (in this order: heads,
/// head width, expansion, state size, groups, conv kernel; "" where the family has no such field).
pub fn ssm_keys(k: &GgufKeys, c: &mut serde_json::Map<String, Value>, names: [&str; 6]) {
    let heads = k.u("ssm.time_step_rank").filter(|&h| h > 0);
    let inner = k.u("ssm.inner_size");
    let hidden = k.u("embedding_length").filter(|&h| h > 0);
    let values = [
        heads,
        inner.zip(heads).map(|(i, h)| i / h),
        inner.zip(hidden).map(|(i, h)| i / h),
        k.u("ssm.state_size"),
        k.u("ssm.group_count"),
        k.u("ssm.conv_kernel"),
    ];
    for (name, v) in names.iter().zip(values) {
        if let (false, Some(v)) = (name.is_empty(), v) {
            c.insert((*name).into(), v.into());
        }
    }
}

/// Per layer, `kind_if` where `flags[i]` is true, else `otherwise` (GGUF's per-layer booleans).
pub fn kinds_of(flags: impl Iterator<Item = bool>, kind_if: &str, otherwise: &str) -> Value {
    Value::Array(
        flags
            .map(|f| Value::from(if f { kind_if } else { otherwise }))
            .collect(),
    )
}

/// The family that builds `model_type`.
pub fn find(model_type: &str) -> Option<Build> {
    FAMILIES
        .iter()
        .find(|(t, _)| *t == model_type)
        .map(|(_, b)| *b)
}

/// A per-layer list of integers in `field` (`no_rope_layers`, `mlp_only_layers`...): `None` when
/// absent, an error naming the field when it is malformed or has the wrong length.
pub fn layer_flags(c: &Value, field: &str, layers: u64) -> Result<Option<Vec<u64>>, ConfigError> {
    let Some(v) = c.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(items) = v.as_array() else {
        return Err(ConfigError(format!(
            "field '{field}' is {v}, not a list with one entry per layer"
        )));
    };
    if items.len() as u64 != layers {
        return Err(ConfigError(format!(
            "field '{field}' has {} entries for {layers} layers",
            items.len()
        )));
    }
    items
        .iter()
        .map(|i| {
            i.as_u64()
                .or_else(|| i.as_bool().map(u64::from))
                .ok_or_else(|| ConfigError(format!("field '{field}' holds {i}, not 0 or 1")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A positive width or count in `field`, `default` when absent (an error naming the field when
/// it is absent without a default, 0, too large or not an integer).
pub fn num(c: &Value, field: &str, default: Option<u64>) -> Result<u64, ConfigError> {
    match c.get(field).filter(|v| !v.is_null()) {
        None => default.ok_or_else(|| ConfigError(format!("field '{field}' is missing"))),
        Some(v) => match v.as_u64() {
            Some(0) => Err(ConfigError(format!("field '{field}' is 0"))),
            Some(n) if n <= MAX_FIELD => Ok(n),
            Some(n) => Err(ConfigError(format!(
                "field '{field}' is {n}: more than nnlint models (at most {MAX_FIELD})"
            ))),
            None => Err(ConfigError(format!(
                "field '{field}' is {v}, not a positive integer"
            ))),
        },
    }
}

/// `c` with `pairs` set where `c` lacks them (or holds null): a family's defaults, and the
/// names the Llama decoder reads for fields the family calls otherwise.
pub fn with_defaults(c: &Value, pairs: &[(&str, Value)]) -> Value {
    let mut out = c.clone();
    if let Some(o) = out.as_object_mut() {
        for (k, v) in pairs {
            if o.get(*k).is_none_or(Value::is_null) {
                o.insert((*k).to_string(), v.clone());
            }
        }
    }
    out
}

/// Per-layer kinds (strings) in the first of `fields` present: `None` when none is, an error
/// naming the field when it is not a list of strings of `layers` entries (`layers`: `None` to
/// take its length).
pub fn layer_kinds(
    c: &Value,
    fields: &[&str],
    layers: Option<u64>,
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some((field, v)) = fields
        .iter()
        .find_map(|f| c.get(*f).filter(|v| !v.is_null()).map(|v| (*f, v)))
    else {
        return Ok(None);
    };
    let Some(items) = v.as_array() else {
        return Err(ConfigError(format!(
            "field '{field}' is {v}, not a list with one entry per layer"
        )));
    };
    if let Some(n) = layers {
        if items.len() as u64 != n {
            return Err(ConfigError(format!(
                "field '{field}' has {} entries for {n} layers",
                items.len()
            )));
        }
    }
    items
        .iter()
        .map(|i| {
            i.as_str()
                .map(str::to_string)
                .ok_or_else(|| ConfigError(format!("field '{field}' holds {i}, not a string")))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// A kind in a layer list that the family does not have.
pub fn unknown_kind(field: &str, kind: &str, known: &[&str]) -> ConfigError {
    ConfigError(format!(
        "field '{field}' names a layer kind '{kind}' this family does not have (it has {})",
        known.join(", ")
    ))
}

/// A Mamba-2 mixer from the family's field names (`[inner, heads, head_dim, state, groups,
/// kernel]`; `head_dim` "auto" or absent: `inner / heads`); `inner` is given by the caller.
pub fn mamba2(c: &Value, inner: u64, f: [(&str, Option<u64>); 5]) -> Result<Mamba2, ConfigError> {
    let [heads, head_dim, state, groups, kernel] = f;
    let heads_n = num(c, heads.0, heads.1)?;
    let head_dim_n = match c.get(head_dim.0) {
        Some(Value::String(s)) if s == "auto" => inner / heads_n,
        _ => num(c, head_dim.0, head_dim.1.or(Some(inner / heads_n)))?,
    };
    let m = Mamba2 {
        inner,
        heads: heads_n,
        head_dim: head_dim_n,
        state_size: num(c, state.0, state.1)?,
        groups: num(c, groups.0, groups.1)?,
        conv_kernel: num(c, kernel.0, kernel.1)?,
        chunk: 256,
        falcon: false,
        tape: true,
    };
    if m.head_dim == 0 || m.inner > MAX_FIELD || m.heads.saturating_mul(m.head_dim) > MAX_FIELD {
        return Err(ConfigError(format!(
            "field '{}' {} and '{}' {} do not give a Mamba-2 width nnlint models",
            heads.0, m.heads, head_dim.0, m.head_dim
        )));
    }
    Ok(m)
}

/// A copy of `c` with what the family's config class fills in when config.json leaves it out:
/// `sliding_window` (`window`: the class default, `None` for none) and `layer_types`, layer `i`
/// sliding when `sliding(i)` (all full without a window). An explicit `"sliding_window": null`
/// keeps no window.
pub fn with_layer_types(
    c: &Value,
    window: Option<u64>,
    sliding: impl Fn(u64) -> bool,
) -> Result<Value, ConfigError> {
    let mut c = c.clone();
    let layers = need(&c, &["num_hidden_layers"])?;
    let window = match c.get("sliding_window") {
        None => window,
        Some(_) => uint(&c, &["sliding_window"])?.filter(|&w| w > 0),
    };
    let Some(obj) = c.as_object_mut() else {
        return Err(ConfigError("is not a JSON object".into()));
    };
    match window {
        Some(w) => {
            obj.insert("sliding_window".into(), w.into());
        }
        None => {
            obj.remove("sliding_window");
        }
    }
    let given = obj.get("layer_types").is_some_and(|t| !t.is_null());
    if !given || window.is_none() {
        let types: Vec<Value> = (0..layers)
            .map(|i| {
                let kind = if window.is_some() && sliding(i) {
                    "sliding_attention"
                } else if given {
                    // no window: the listed kinds stay, sliding ones see everything
                    return match obj["layer_types"].get(i as usize) {
                        Some(Value::String(t)) if t != "sliding_attention" => t.clone().into(),
                        _ => "full_attention".into(),
                    };
                } else {
                    "full_attention"
                };
                kind.into()
            })
            .collect();
        obj.insert("layer_types".into(), types.into());
    }
    Ok(c)
}

/// Sets each attention block's rotary positions from `rope(layer, sliding)`.
pub fn set_rope(a: &mut Arch, rope: impl Fn(usize, bool) -> bool) {
    for (i, b) in a.blocks.iter_mut().enumerate() {
        if let Mixer::Attention(at) = &mut b.mixer {
            at.rope = rope(i, at.window.tokens().is_some());
        }
    }
}
