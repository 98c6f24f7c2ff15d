//! Families described as layers: each file maps one family's `config.json` (the fields its
//! transformers modeling code reads) onto the shared layer model ([`super::layers`]), starting
//! from the Llama-style decoder ([`super::arch::decoder`]) and changing what differs. Adding a
//! family is its file and one line in [`FAMILIES`].

use serde_json::Value;

use super::arch::{Arch, ConfigError};

mod deepseek_v3;
mod ernie4_5_moe;
mod glm4_moe;
mod gpt_oss;
mod smollm3;

/// Builds a family's architecture from its config (`c`: the language model's config, which a
/// multimodal wrapper keeps in `text_config`; `outer`: the whole file).
pub type Build = fn(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError>;

/// The families, by `model_type`.
pub const FAMILIES: &[(&str, Build)] = &[
    ("smollm3", smollm3::build),
    ("deepseek_v3", deepseek_v3::build),
    ("deepseek_v2", deepseek_v3::build),
    ("kimi_k2", deepseek_v3::build),
    ("glm4_moe", glm4_moe::build),
    ("gpt_oss", gpt_oss::build),
    ("ernie4_5_moe", ernie4_5_moe::build),
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
