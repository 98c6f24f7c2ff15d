//! EXAONE 4 (`exaone4`): norms after each mixer only (like OLMo 2, with Llama's RMSNorm), q/k
//! RMSNorms per head, and layer kinds from `sliding_window_pattern` when `layer_types` is absent:
//! an integer N (layer `i` slides unless `(i + 1) % N == 0`) or a string like `"LLLG"` (L: local
//! sliding, G: global). With a window configured the full layers are NoPE
//! (`Exaone4Attention`: rotary only `if self.sliding_window is None or self.is_sliding`).
//! transformers: `models/exaone4/{configuration,modeling}_exaone4.py`.

use super::{swa_kinds, GgufKeys};
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, Arch, ConfigError, NormPlace, QkNorm};
use super::{set_rope, with_layer_types};

/// Which layers slide, from `sliding_window_pattern` (default 4).
fn pattern(c: &Value) -> Result<Box<dyn Fn(u64) -> bool>, ConfigError> {
    match c.get("sliding_window_pattern") {
        None | Some(Value::Null) => Ok(Box::new(|i| (i + 1) % 4 != 0)),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(0) => Ok(Box::new(|_| false)),
            Some(n) => Ok(Box::new(move |i| (i + 1) % n != 0)),
            None => Err(ConfigError(format!(
                "field 'sliding_window_pattern' is {n}, not a non-negative integer"
            ))),
        },
        Some(Value::String(s)) if !s.is_empty() && s.chars().all(|ch| ch == 'L' || ch == 'G') => {
            let kinds: Vec<bool> = s.chars().map(|ch| ch == 'L').collect();
            Ok(Box::new(move |i| kinds[i as usize % kinds.len()]))
        }
        Some(v) => Err(ConfigError(format!(
            "field 'sliding_window_pattern' is {v}, not an integer or a string of L and G"
        ))),
    }
}

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let sliding = pattern(c)?;
    let c = with_layer_types(c, Some(4096), sliding)?;
    let mut a = decoder(outer, &c, model_type)?;
    a.norms = NormPlace::Post;
    a.qk_norm = QkNorm::Head;
    a.attention_bias = false;
    let windowed = c.get("sliding_window").is_some();
    set_rope(&mut a, |_, sliding| !windowed || sliding);
    Ok(a)
}

/// GGUF (`exaone4`): llama.cpp applies the sliding window only to the 64-layer model (EXAONE 4.0
/// 32B, `src/models/exaone4.cpp`); every other file runs full attention on every layer.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    match k
        .u("attention.sliding_window")
        .filter(|&w| w > 0 && layers == 64)
    {
        Some(w) => {
            c.insert("sliding_window".into(), w.into());
            c.insert("layer_types".into(), swa_kinds(k, layers, 4));
        }
        None => {
            c.insert("sliding_window".into(), Value::Null);
            c.insert(
                "layer_types".into(),
                vec!["full_attention"; layers as usize].into(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;

    fn kinds(extra: serde_json::Value) -> Vec<(Option<u64>, bool)> {
        let mut c = serde_json::json!({
            "model_type": "exaone4", "hidden_size": 32, "num_hidden_layers": 4,
            "num_attention_heads": 4, "vocab_size": 16, "sliding_window": 8
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        let a = from_config(&c).unwrap().unwrap();
        (0..4)
            .map(|i| (a.window(i), a.blocks[i].mixer.attention().unwrap().rope))
            .collect()
    }

    #[test]
    fn the_pattern_gives_the_layer_kinds_and_full_layers_are_nope() {
        let l = (Some(8), true);
        let g = (None, false);
        assert_eq!(kinds(serde_json::json!({})), [l, l, l, g]);
        assert_eq!(
            kinds(serde_json::json!({"sliding_window_pattern": 2})),
            [l, g, l, g]
        );
        assert_eq!(
            kinds(serde_json::json!({"sliding_window_pattern": "LLG"})),
            [l, l, g, l]
        );
        // no window: full attention everywhere, with rotary positions
        assert_eq!(
            kinds(serde_json::json!({"sliding_window": null})),
            [(None, true); 4]
        );
        let e = from_config(&serde_json::json!({
            "model_type": "exaone4", "hidden_size": 32, "num_hidden_layers": 4,
            "num_attention_heads": 4, "vocab_size": 16, "sliding_window_pattern": "LXG"
        }))
        .unwrap_err();
        assert!(e.0.contains("sliding_window_pattern"), "{}", e.0);
    }
}
