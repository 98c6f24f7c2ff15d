//! OLMo 2 (`olmo2`) and OLMo 3 (`olmo3`): Llama decoders whose norms sit after each mixer
//! (`post_attention_layernorm`, `post_feedforward_layernorm` on the sublayer's output before the
//! residual add; no input norm), with the RMSNorm weight applied in fp32, and q/k RMSNorms over
//! the whole projection (`heads × head_dim`) before the reshape to heads. OLMo 3 adds
//! `layer_types` (three sliding layers then a full one by default, `sliding_window` 4096) and a
//! rotary table per layer type.
//! transformers: `models/olmo2/modeling_olmo2.py` (`Olmo2DecoderLayer`, `Olmo2Attention`),
//! `models/olmo3/{configuration,modeling}_olmo3.py` (`Olmo3RotaryEmbedding`).

use super::{swa_kinds, GgufKeys};
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, Arch, ConfigError, Norm, NormPlace, QkNorm};
use super::with_layer_types;

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let mut a = if model_type == "olmo3" {
        let c = with_layer_types(c, Some(4096), |i| (i + 1) % 4 != 0)?;
        let mut a = decoder(outer, &c, model_type)?;
        // Olmo3RotaryEmbedding: one table per layer type present
        let sliding = (0..a.layers as usize)
            .filter(|&i| a.window(i).is_some())
            .count() as u64;
        a.rotary_tables = u64::from(sliding > 0) + u64::from(sliding < a.layers);
        a
    } else {
        decoder(outer, c, model_type)?
    };
    a.norm = Norm::RmsWeightFp32;
    a.norms = NormPlace::Post;
    a.qk_norm = QkNorm::Projection;
    Ok(a)
}

/// GGUF (`olmo2`, also Olmo 3): a sliding window makes it Olmo 3, with the per-layer pattern the
/// converter writes (else llama.cpp's period 4: three sliding layers, one full).
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    if let Some(w) = k.u("attention.sliding_window").filter(|&w| w > 0) {
        c.insert("model_type".into(), "olmo3".into());
        c.insert("sliding_window".into(), w.into());
        c.insert("layer_types".into(), swa_kinds(k, layers, 4));
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::{from_config, NormPlace, QkNorm};

    fn cfg(mt: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut c = serde_json::json!({
            "model_type": mt, "hidden_size": 32, "num_hidden_layers": 8,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    #[test]
    fn olmo3_slides_three_layers_in_four_by_default() {
        let a = from_config(&cfg("olmo3", serde_json::json!({})))
            .unwrap()
            .unwrap();
        let w: Vec<_> = (0..8).map(|i| a.window(i)).collect();
        let s = Some(4096);
        assert_eq!(w, [s, s, s, None, s, s, s, None]);
        assert_eq!(a.rotary_tables, 2);
        assert_eq!((a.norms, a.qk_norm), (NormPlace::Post, QkNorm::Projection));
        // no window: every layer full, one table
        let a = from_config(&cfg("olmo3", serde_json::json!({"sliding_window": null})))
            .unwrap()
            .unwrap();
        assert!((0..8).all(|i| a.window(i).is_none()));
        assert_eq!(a.rotary_tables, 1);
    }

    #[test]
    fn olmo2_is_full_attention_with_post_norms() {
        let a = from_config(&cfg("olmo2", serde_json::json!({})))
            .unwrap()
            .unwrap();
        assert!((0..8).all(|i| a.window(i).is_none()));
        assert!(!a.tied);
        assert_eq!(a.norms, NormPlace::Post);
    }

    #[test]
    fn a_bad_layer_types_is_named() {
        let e = from_config(&cfg(
            "olmo3",
            serde_json::json!({"layer_types": ["full_attention"]}),
        ))
        .unwrap_err();
        assert!(e.0.contains("layer_types"), "{}", e.0);
    }
}
