//! Families described as layers: each file maps one family's `config.json` (the fields its
//! transformers modeling code reads) onto the shared layer model ([`super::layers`]), starting
//! from the Llama-style decoder ([`super::arch::decoder`]) and changing what differs. Adding a
//! family is its file and one line in [`FAMILIES`].

use serde_json::Value;

use super::arch::{Arch, ConfigError, MAX_FIELD};
use super::layers::Mamba2;

mod qwen_vl;
mod falcon_h1;
mod granitemoehybrid;
mod lfm2;
mod mamba2;
mod nemotron_h;
mod qwen3_next;
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
    ("falcon_h1", falcon_h1::build),
];

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
    };
    if m.head_dim == 0 || m.inner > MAX_FIELD || m.heads.saturating_mul(m.head_dim) > MAX_FIELD {
        return Err(ConfigError(format!(
            "field '{}' {} and '{}' {} do not give a Mamba-2 width nnlint models",
            heads.0, m.heads, head_dim.0, m.head_dim
        )));
    }
    Ok(m)
}
