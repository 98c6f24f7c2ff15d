//! LFM2 (`lfm2`): `layer_types` of `conv` (a gated short convolution over the hidden width:
//! `in_proj` to 3H, depthwise causal conv of `conv_L_cache`, `out_proj`) and `full_attention`
//! (GQA with per-head q/k RMSNorm), each followed by a SwiGLU MLP; tied embeddings by default.
//! transformers: `models/lfm2/{configuration,modeling}_lfm2.py` (`Lfm2ShortConv` l.317,
//! `Lfm2MLP` l.111: `block_auto_adjust_ff_dim` rewrites the width).

use super::{kinds_of, GgufKeys};
use serde_json::Map;
use serde_json::{json, Value};

use super::super::arch::{decoder, Arch, ConfigError, QkNorm};
use super::super::layers::{Block, Channel, Mixer, ShortConv};
use super::{layer_kinds, num, unknown_kind, with_defaults};

/// The MLP width `Lfm2MLP` builds.
fn ff_width(c: &Value, intermediate: u64) -> Result<u64, ConfigError> {
    if !c
        .get("block_auto_adjust_ff_dim")
        .and_then(Value::as_bool)
        .unwrap_or(true)
    {
        return Ok(intermediate);
    }
    let mut w = (2 * intermediate) / 3;
    // the config class defaults the multiplier to 1.0 (rounding applies); an explicit null skips it
    let one = Value::from(1.0);
    let multiplier = match c.get("block_ffn_dim_multiplier") {
        None => Some(&one),
        Some(v) if v.is_null() => None,
        Some(v) => Some(v),
    };
    if let Some(m) = multiplier {
        let m = m.as_f64().filter(|m| *m > 0.0 && *m < 1e6).ok_or_else(|| {
            ConfigError(format!(
                "field 'block_ffn_dim_multiplier' is {m}, not a positive number"
            ))
        })?;
        w = (m * w as f64) as u64;
        let of = num(c, "block_multiple_of", Some(256))?;
        w = w.div_ceil(of).saturating_mul(of);
    }
    if w == 0 || w > super::super::arch::MAX_FIELD {
        return Err(ConfigError(format!(
            "field 'intermediate_size' {intermediate} gives an MLP width of {w} after block_auto_adjust_ff_dim"
        )));
    }
    Ok(w)
}

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let d = with_defaults(
        c,
        &[
            ("tie_word_embeddings", json!(true)),
            ("intermediate_size", json!(12288)),
        ],
    );
    let mut a = decoder(outer, &d, model_type)?;
    let layers = a.layers;
    let kinds = match layer_kinds(c, &["layer_types"], Some(layers))? {
        Some(k) => k,
        None => {
            // legacy: full_attn_idxs lists the attention layers (all of them when absent)
            let idx: Option<Vec<u64>> = match c.get("full_attn_idxs").filter(|v| !v.is_null()) {
                None => None,
                Some(v) => Some(
                    v.as_array()
                        .and_then(|a| a.iter().map(Value::as_u64).collect())
                        .ok_or_else(|| {
                            ConfigError(format!(
                                "field 'full_attn_idxs' is {v}, not a list of layer indices"
                            ))
                        })?,
                ),
            };
            (0..layers)
                .map(|i| match &idx {
                    Some(idx) if !idx.contains(&i) => "conv".to_string(),
                    _ => "full_attention".to_string(),
                })
                .collect()
        }
    };
    let kernel = num(c, "conv_L_cache", Some(3))?;
    let ff = ff_width(c, a.intermediate)?;
    a.intermediate = ff;
    a.qk_norm = QkNorm::Head;
    a.blocks = kinds
        .iter()
        .map(|k| {
            let mixer = match k.as_str() {
                "full_attention" => Mixer::Attention(a.attention(None)),
                "conv" => Mixer::ShortConv(ShortConv {
                    width: a.hidden,
                    kernel,
                }),
                other => {
                    return Err(unknown_kind(
                        "layer_types",
                        other,
                        &["conv", "full_attention"],
                    ))
                }
            };
            Ok(Block {
                mixer,
                channel: Channel::Mlp { intermediate: ff },
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(a)
}

/// GGUF (`lfm2`): conv layers have no KV heads (`head_count_kv` 0); the MLP width is stored
/// already adjusted.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    if let Some(kv) = k.per_layer("attention.head_count_kv", layers) {
        c.insert(
            "layer_types".into(),
            kinds_of(kv.iter().map(|&h| h == 0.0), "conv", "full_attention"),
        );
    }
    if let Some(l) = k.u("shortconv.l_cache") {
        c.insert("conv_L_cache".into(), l.into());
    }
    c.insert("block_auto_adjust_ff_dim".into(), false.into());
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;
    use super::super::super::layers::{Channel, Mixer};

    #[test]
    fn conv_and_attention_layers_and_the_adjusted_mlp_width() {
        let a = from_config(&serde_json::json!({
            "model_type": "lfm2", "hidden_size": 32, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16,
            "intermediate_size": 600, "full_attn_idxs": [2]
        }))
        .unwrap()
        .unwrap();
        assert!(
            matches!(a.blocks[0].mixer, Mixer::ShortConv(ref s) if s.kernel == 3 && s.width == 32)
        );
        assert!(matches!(a.blocks[1].mixer, Mixer::ShortConv(_)));
        assert!(a.blocks[2].mixer.attention().is_some());
        // int(2·600/3) = 400, rounded up to a multiple of 256
        assert_eq!(a.blocks[0].channel, Channel::Mlp { intermediate: 512 });
        assert!(a.tied);
    }

    #[test]
    fn an_unknown_layer_kind_is_named() {
        let e = from_config(&serde_json::json!({
            "model_type": "lfm2", "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 16, "layer_types": ["conv", "mamba"]
        }))
        .unwrap_err();
        assert!(
            e.0.contains("layer_types") && e.0.contains("mamba"),
            "{}",
            e.0
        );
    }
}
