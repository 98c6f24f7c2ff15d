//! Mamba-2 (`mamba2`): `backbone.layers[i]` = RMSNorm → Mamba-2 mixer → residual, no attention
//! and no MLP (the block is the mixer alone), `backbone.norm_f`, an untied head by default.
//! transformers: `models/mamba2/{configuration,modeling}_mamba2.py` (`Mamba2Mixer` l.374: inner
//! width `expand × hidden_size`, conv over x, B and C; `Mamba2Block` l.626).

use super::{ssm_keys, GgufKeys};
use serde_json::Map;
use serde_json::{json, Value};

use super::super::arch::{decoder, Arch, ConfigError};
use super::super::layers::{Block, Channel, Mixer};
use super::{mamba2, num, with_defaults};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let hidden = num(c, "hidden_size", None)?;
    let heads = num(c, "num_heads", Some(128))?;
    let head_dim = num(c, "head_dim", Some(64))?;
    let expand = num(c, "expand", Some(2))?;
    // the Llama decoder's fields, for the parts every family shares (embeddings, head, norm)
    let d = with_defaults(
        c,
        &[
            ("num_attention_heads", json!(heads)),
            ("head_dim", json!(head_dim)),
            ("num_hidden_layers", json!(64)),
        ],
    );
    let mut a = decoder(outer, &d, model_type)?;
    let m = mamba2(
        c,
        expand.saturating_mul(hidden),
        [
            ("num_heads", Some(128)),
            ("head_dim", Some(64)),
            ("state_size", Some(128)),
            ("n_groups", Some(8)),
            ("conv_kernel", Some(4)),
        ],
    )?;
    let mut m = m;
    m.chunk = num(c, "chunk_size", Some(256))?.max(1);
    a.rotary_dim = 0;
    a.blocks = vec![
        Block {
            mixer: Mixer::Mamba2(m),
            channel: Channel::None,
        };
        a.layers as usize
    ];
    Ok(a)
}

/// GGUF (`mamba2`): no attention (`head_count` 0); the mixer's sizes are the `ssm.*` keys.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, _layers: u64) {
    for f in [
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "partial_rotary_factor",
    ] {
        c.remove(f);
    }
    ssm_keys(
        k,
        c,
        [
            "num_heads",
            "head_dim",
            "expand",
            "state_size",
            "n_groups",
            "conv_kernel",
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;
    use super::super::super::layers::{Channel, Mixer};

    #[test]
    fn every_block_is_a_mamba2_mixer_alone() {
        let a = from_config(&serde_json::json!({
            "model_type": "mamba2", "hidden_size": 32, "num_hidden_layers": 3,
            "num_heads": 4, "head_dim": 16, "state_size": 16, "n_groups": 1, "vocab_size": 16
        }))
        .unwrap()
        .unwrap();
        assert_eq!(a.blocks.len(), 3);
        for b in &a.blocks {
            assert_eq!(b.channel, Channel::None);
            let Mixer::Mamba2(m) = &b.mixer else {
                panic!("{:?}", b.mixer)
            };
            // conv over x (expand 2 × 32) and B, C (1 group × 16)
            assert_eq!((m.inner, m.conv_dim(), m.conv_kernel), (64, 96, 4));
        }
        assert!(!a.tied);
    }

    #[test]
    fn a_bad_field_is_named() {
        let e = from_config(&serde_json::json!({
            "model_type": "mamba2", "hidden_size": 32, "num_hidden_layers": 3,
            "num_heads": 4, "state_size": "big", "vocab_size": 16
        }))
        .unwrap_err();
        assert!(e.0.contains("state_size"), "{}", e.0);
    }
}
