//! Falcon-H1 (`falcon_h1`): every block runs a Mamba-2 mixer and attention side by side on the
//! same normed input ([`Mixer::Parallel`]), then a SwiGLU MLP; the cache holds both in one layer
//! (`LinearAttentionAndFullAttentionLayer`, kind `hybrid`). The mixer's width is `mamba_d_ssm`
//! (else `mamba_expand × hidden_size`).
//! transformers: `models/falcon_h1/{configuration,modeling}_falcon_h1.py` (`FalconH1Mixer` l.589,
//! `FalconH1DecoderLayer` l.867).

use super::{ssm_keys, GgufKeys};
use serde_json::Map;
use serde_json::{json, Value};

use super::super::arch::{decoder, Arch, ConfigError};
use super::super::layers::{Block, Channel, Mixer};
use super::{mamba2, num, with_defaults};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let d = with_defaults(
        c,
        &[
            ("intermediate_size", json!(14336)),
            ("num_hidden_layers", json!(32)),
            ("num_attention_heads", json!(32)),
            ("num_key_value_heads", json!(8)),
        ],
    );
    let mut a = decoder(outer, &d, model_type)?;
    let inner = match c.get("mamba_d_ssm").filter(|v| !v.is_null()) {
        Some(_) => num(c, "mamba_d_ssm", None)?,
        None => num(c, "mamba_expand", Some(2))?.saturating_mul(a.hidden),
    };
    let m = mamba2(
        c,
        inner,
        [
            ("mamba_n_heads", Some(128)),
            ("mamba_d_head", None),
            ("mamba_d_state", Some(256)),
            ("mamba_n_groups", Some(1)),
            ("mamba_d_conv", Some(4)),
        ],
    )?;
    let mut m = m;
    m.chunk = num(c, "mamba_chunk_size", Some(256))?.max(1);
    // FalconH1Mixer: the input scaled by ssm_in_multiplier, the projection by mup_vector; the
    // measured tape has the gated RMSNorm before the gate (mamba_rms_norm, norm_before_gate)
    m.falcon = true;
    let flag = |k: &str, d: bool| c.get(k).and_then(Value::as_bool).unwrap_or(d);
    m.tape = flag("mamba_rms_norm", false) && flag("mamba_norm_before_gate", true);
    let attn = a.attention(None);
    a.blocks = vec![
        Block {
            mixer: Mixer::Parallel {
                parts: vec![Mixer::Mamba2(m), Mixer::Attention(attn)],
            },
            channel: Channel::Mlp {
                intermediate: a.intermediate,
            },
        };
        a.layers as usize
    ];
    Ok(a)
}

/// GGUF (`falcon-h1`): attention and Mamba on every layer; the Mamba sizes are the `ssm.*` keys.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, _layers: u64) {
    ssm_keys(
        k,
        c,
        [
            "mamba_n_heads",
            "mamba_d_head",
            "",
            "mamba_d_state",
            "mamba_n_groups",
            "mamba_d_conv",
        ],
    );
    if let Some(i) = k.u("ssm.inner_size") {
        c.insert("mamba_d_ssm".into(), i.into());
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;
    use super::super::super::layers::{CacheDtypes, CacheKind, Mixer};

    #[test]
    fn every_layer_is_mamba_and_attention_in_one_cache_layer() {
        let a = from_config(&serde_json::json!({
            "model_type": "falcon_h1", "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16,
            "mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_state": 16
        }))
        .unwrap()
        .unwrap();
        let Mixer::Parallel { parts } = &a.blocks[1].mixer else {
            panic!()
        };
        assert_eq!(parts.len(), 2);
        // the fixture's (2, 24) fp32 layer: K/V 6,144 + conv 3,072 + ssm 8,192
        let l = a.blocks[0]
            .mixer
            .cache(0, 2, 24, CacheDtypes { kv: 4, state: 4 })
            .unwrap();
        assert_eq!(
            (l.kind, l.bytes, l.fixed_bytes),
            (CacheKind::Hybrid, 17_408, 11_264)
        );
        assert_eq!(l.bytes_per_token, 2 * 2 * 8 * 4);
    }
}
