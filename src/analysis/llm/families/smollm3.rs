//! SmolLM3 (`smollm3`): a Llama decoder whose every `no_rope_layer_interval`-th layer (4 by
//! default) uses no rotary positions, as `no_rope_layers` lists per layer (1: rotary, 0: NoPE).
//! transformers: `models/smollm3/{configuration,modeling}_smollm3.py` (`SmolLM3Attention.use_rope`).

use super::GgufKeys;
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, Arch, ConfigError};
use super::super::layers::Mixer;
use super::layer_flags;

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let mut a = decoder(outer, c, model_type)?;
    let rope = match layer_flags(c, "no_rope_layers", a.layers)? {
        Some(flags) => flags.iter().map(|&f| f != 0).collect(),
        None => {
            let every = c
                .get("no_rope_layer_interval")
                .and_then(Value::as_u64)
                .unwrap_or(4)
                .max(1);
            (0..a.layers)
                .map(|i| (i + 1) % every != 0)
                .collect::<Vec<_>>()
        }
    };
    for (b, rope) in a.blocks.iter_mut().zip(rope) {
        if let Mixer::Attention(at) = &mut b.mixer {
            at.rope = rope;
        }
    }
    Ok(a)
}

/// GGUF (`smollm3`): llama.cpp does not store `no_rope_layers`; it skips RoPE on every 4th layer
/// (`src/models/smollm3.cpp`, `n_no_rope_layer_step = 4`).
pub fn gguf(_: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    let rope: Vec<u64> = (0..layers).map(|i| u64::from((i + 1) % 4 != 0)).collect();
    c.insert("no_rope_layers".into(), rope.into());
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;

    #[test]
    fn every_fourth_layer_is_nope_by_default() {
        let a = from_config(&serde_json::json!({
            "model_type": "smollm3", "hidden_size": 32, "num_hidden_layers": 8,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16
        }))
        .unwrap()
        .unwrap();
        let rope: Vec<bool> = a
            .blocks
            .iter()
            .map(|b| b.mixer.attention().unwrap().rope)
            .collect();
        assert_eq!(rope, [true, true, true, false, true, true, true, false]);
    }
}
