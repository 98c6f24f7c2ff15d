//! Families described as layers: each file maps one family's `config.json` (the fields its
//! transformers modeling code reads) onto the shared layer model ([`super::layers`]), starting
//! from the Llama-style decoder ([`super::arch::decoder`]) and changing what differs. Adding a
//! family is its file and one line in [`FAMILIES`].

use serde_json::Value;

use super::arch::{need, uint, Arch, ConfigError};
use super::layers::Mixer;

mod cohere2;
mod exaone4;
mod llama4;
mod olmo2;
mod smollm3;

/// Builds a family's architecture from its config (`c`: the language model's config, which a
/// multimodal wrapper keeps in `text_config`; `outer`: the whole file).
pub type Build = fn(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError>;

/// The families, by `model_type`.
pub const FAMILIES: &[(&str, Build)] = &[
    ("smollm3", smollm3::build),
    ("olmo2", olmo2::build),
    ("olmo3", olmo2::build),
    ("cohere2", cohere2::build),
    ("exaone4", exaone4::build),
    ("llama4_text", llama4::build),
    ("llama4", llama4::build),
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
