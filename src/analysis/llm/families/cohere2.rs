//! Cohere 2 (`cohere2`, Command R7B / A): a parallel block (one `input_layernorm` feeding the
//! attention and the MLP, both added to the residual), `CohereLayerNorm` (mean-subtracted, weight
//! only, in fp32), rotary positions on the sliding layers only (the full layers are NoPE), the
//! logits multiplied by `logit_scale`, tied embeddings. `layer_types` defaults to three sliding
//! layers then a full one (`sliding_window_pattern` 4, `sliding_window` 4096); `head_dim` is
//! always `hidden_size / num_attention_heads`.
//! transformers: `models/cohere2/{configuration,modeling}_cohere2.py`.

use super::{swa_kinds, GgufKeys};
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, float, uint, Arch, ConfigError, Norm, NormPlace};
use super::{set_rope, with_layer_types};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let every = uint(c, &["sliding_window_pattern"])?.unwrap_or(4).max(1);
    let mut c = with_layer_types(c, Some(4096), |i| (i + 1) % every != 0)?;
    if let Some(o) = c.as_object_mut() {
        // Cohere2Config sets head_dim = hidden_size // num_attention_heads
        o.remove("head_dim");
        if o.get("tie_word_embeddings").is_none_or(Value::is_null) {
            o.insert("tie_word_embeddings".into(), true.into());
        }
    }
    let mut a = decoder(outer, &c, model_type)?;
    a.norm = Norm::LayerNormFp32;
    a.norms = NormPlace::Parallel;
    a.logit_scale = Some(float(&c, "logit_scale").unwrap_or(0.0625));
    set_rope(&mut a, |_, sliding| sliding);
    Ok(a)
}

/// GGUF (`cohere2`): the window and `logit_scale`; no pattern key is written, and llama.cpp slides
/// three layers of every four (`src/models/cohere2.cpp`, `load_swa_pattern(ml, 4)`).
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    if let Some(w) = k.u("attention.sliding_window") {
        c.insert("sliding_window".into(), w.into());
        c.insert("layer_types".into(), swa_kinds(k, layers, 4));
    }
    if let Some(s) = k.f("logit_scale") {
        c.insert("logit_scale".into(), s.into());
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::{from_config, NormPlace};

    #[test]
    fn full_layers_are_nope_and_the_block_is_parallel() {
        let a = from_config(&serde_json::json!({
            "model_type": "cohere2", "hidden_size": 32, "num_hidden_layers": 4,
            "num_attention_heads": 4, "vocab_size": 16, "sliding_window": 8
        }))
        .unwrap()
        .unwrap();
        let rope: Vec<bool> = a
            .blocks
            .iter()
            .map(|b| b.mixer.attention().unwrap().rope)
            .collect();
        assert_eq!(rope, [true, true, true, false]);
        assert_eq!(a.window(0), Some(8));
        assert_eq!(a.window(3), None);
        assert!(a.tied);
        assert_eq!(a.norms, NormPlace::Parallel);
        assert_eq!(a.logit_scale, Some(0.0625));
    }
}
