//! Llama 4 (`llama4_text`, and `llama4`'s `text_config`): a Llama decoder whose rotary layers
//! attend within chunks of `attention_chunk_size` tokens and whose other layers
//! (`no_rope_layers` 0, every `no_rope_layer_interval`-th by default) are full-attention NoPE
//! layers with a per-position temperature on q (`attn_temperature_tuning`); a weightless L2 norm
//! on q and k of the rotary layers (`use_qk_norm`); rotary positions as a complex table; eager
//! softmax in the scores' dtype. Every `interleave_moe_layer_step`-th block (or `moe_layers`) is
//! a mixture of experts where every expert runs every token scaled by its sigmoid router score,
//! plus a shared expert of `intermediate_size`; the other blocks are MLPs of
//! `intermediate_size_mlp`. The experts are fused `[E, H, 2I]` / `[E, I, H]` in the checkpoint.
//! `head_dim` defaults to 128, not `hidden_size / num_attention_heads`.
//! transformers: `models/llama4/{configuration,modeling}_llama4.py` (`Llama4TextConfig.__post_init__`,
//! `Llama4TextAttention`, `Llama4TextMoe`).

use super::{kinds_of, GgufKeys};
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{
    decoder, flag, need, uint, Arch, ConfigError, Dispatch, Moe, QkNorm, MAX_POSITIONS,
};
use super::super::layers::{Channel, Mixer, Window};
use super::layer_flags;

pub fn build(outer: &Value, c: &Value, _model_type: &str) -> Result<Arch, ConfigError> {
    let mut c = c.clone();
    let layers = need(&c, &["num_hidden_layers"])?;
    let rope: Vec<bool> = match layer_flags(&c, "no_rope_layers", layers)? {
        Some(flags) if !flags.is_empty() => flags.iter().map(|&f| f != 0).collect(),
        _ => {
            let every = uint(&c, &["no_rope_layer_interval"])?.unwrap_or(4);
            if every == 0 {
                return Err(ConfigError("field 'no_rope_layer_interval' is 0".into()));
            }
            (0..layers).map(|i| (i + 1) % every != 0).collect()
        }
    };
    let chunk = match c.get("attention_chunk_size") {
        None => Some(8192),
        Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n > 0 && n <= MAX_POSITIONS => Some(n),
            _ => {
                return Err(ConfigError(format!(
                    "field 'attention_chunk_size' is {v}, not a positive integer"
                )))
            }
        },
    };
    let chunked: Vec<bool> = match c.get("layer_types").filter(|t| !t.is_null()) {
        Some(types) => {
            let Some(types) = types.as_array().filter(|t| t.len() as u64 == layers) else {
                return Err(ConfigError(format!(
                    "field 'layer_types' is {types}, not a list with one entry per layer"
                )));
            };
            types
                .iter()
                .map(|t| match t.as_str() {
                    Some("chunked_attention") if chunk.is_some() => Ok(true),
                    Some("chunked_attention") => Err(ConfigError(
                        "field 'layer_types' names chunked layers but 'attention_chunk_size' is null"
                            .into(),
                    )),
                    Some(_) => Ok(false),
                    None => Err(ConfigError(format!(
                        "field 'layer_types' holds {t}, not a string"
                    ))),
                })
                .collect::<Result<_, _>>()?
        }
        None => rope.iter().map(|&r| r && chunk.is_some()).collect(),
    };
    let step = uint(&c, &["interleave_moe_layer_step"])?.unwrap_or(1);
    if step == 0 {
        return Err(ConfigError("field 'interleave_moe_layer_step' is 0".into()));
    }
    let sparse: Vec<bool> = match c.get("moe_layers").filter(|m| !m.is_null()) {
        Some(Value::Array(list)) => {
            let mut s = vec![false; layers as usize];
            for v in list {
                match v.as_u64() {
                    Some(i) if i < layers => s[i as usize] = true,
                    _ => {
                        return Err(ConfigError(format!(
                            "field 'moe_layers' holds {v}, not a layer index below {layers}"
                        )))
                    }
                }
            }
            s
        }
        Some(v) => {
            return Err(ConfigError(format!(
                "field 'moe_layers' is {v}, not a list of layer indices"
            )))
        }
        None => (0..layers).map(|i| (i + 1) % step == 0).collect(),
    };
    let expert = uint(&c, &["intermediate_size"])?.unwrap_or(8192);
    let dense = uint(&c, &["intermediate_size_mlp"])?.unwrap_or(16384);
    let experts = uint(&c, &["num_local_experts"])?.unwrap_or(16);
    let top_k = uint(&c, &["num_experts_per_tok"])?.unwrap_or(1);
    if experts == 0 || top_k == 0 || top_k > experts {
        return Err(ConfigError(format!(
            "num_experts_per_tok {top_k} and num_local_experts {experts}: not 1 ≤ top-k ≤ experts"
        )));
    }
    if let Some(o) = c.as_object_mut() {
        // the kinds are set below; the decoder would read chunked layers as full
        o.remove("layer_types");
        o.remove("sliding_window");
        if o.get("head_dim").is_none_or(Value::is_null) {
            o.insert("head_dim".into(), 128.into());
        }
        o.insert("intermediate_size".into(), expert.into());
    }
    let mut a = decoder(outer, &c, "llama4_text")?;
    a.intermediate = dense;
    a.qk_norm = if flag(&c, "use_qk_norm", true) {
        QkNorm::L2
    } else {
        QkNorm::None
    };
    a.complex_rope = true;
    a.softmax_fp32 = false;
    a.attn_temperature = flag(&c, "attn_temperature_tuning", true);
    let moe_layers = sparse.iter().filter(|&&s| s).count() as u64;
    a.moe = Some(Moe {
        experts,
        top_k,
        expert_intermediate: expert,
        shared_intermediate: expert,
        norm_topk: false,
        router_linear: true,
        sparse: sparse.clone(),
        moe_layers,
        dispatch: Dispatch::AllExperts,
        shared_experts: 1,
        ..Moe::new(experts, top_k, expert)
    });
    for (i, b) in a.blocks.iter_mut().enumerate() {
        if let Mixer::Attention(at) = &mut b.mixer {
            at.rope = rope[i];
            at.window = match (chunked[i], chunk) {
                (true, Some(w)) => Window::Chunked(w),
                _ => Window::Full,
            };
        }
        b.channel = if sparse[i] {
            Channel::Moe
        } else {
            Channel::Mlp {
                intermediate: dense,
            }
        };
    }
    Ok(a)
}

/// GGUF (`llama4`): `feed_forward_length` is the dense width and `expert_feed_forward_length`
/// the experts'; the chunk size and the NoPE layers are not stored: llama.cpp chunks three layers
/// of every four by 8192 tokens and skips RoPE on the fourth (`src/models/llama4.cpp`), unless the
/// window is 0 (no chunking).
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    if let Some(f) = k.u("feed_forward_length") {
        c.insert("intermediate_size_mlp".into(), f.into());
    }
    if let Some(e) = k.u("expert_feed_forward_length") {
        c.insert("intermediate_size".into(), e.into());
    }
    if let Some(s) = k.u("interleave_moe_layer_step") {
        c.insert("interleave_moe_layer_step".into(), s.into());
    }
    let chunked = k.u("attention.sliding_window") != Some(0);
    let full = |i: u64| (i + 1).is_multiple_of(4);
    if chunked {
        c.insert("attention_chunk_size".into(), 8192.into());
        c.insert(
            "layer_types".into(),
            kinds_of(
                (0..layers).map(|i| !full(i)),
                "chunked_attention",
                "full_attention",
            ),
        );
    } else {
        c.insert("attention_chunk_size".into(), Value::Null);
    }
    let rope: Vec<u64> = (0..layers)
        .map(|i| u64::from(!chunked || !full(i)))
        .collect();
    c.insert("no_rope_layers".into(), rope.into());
    c.insert(
        "use_qk_norm".into(),
        (k.u("expert_count") != Some(128)).into(),
    );
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::{from_config, QkNorm};
    use super::super::super::layers::{Channel, Window};

    #[test]
    fn defaults_chunk_the_rope_layers_and_interleave_the_experts() {
        let a = from_config(&serde_json::json!({
            "model_type": "llama4_text", "hidden_size": 32, "num_hidden_layers": 4,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16,
            "attention_chunk_size": 8, "interleave_moe_layer_step": 2
        }))
        .unwrap()
        .unwrap();
        let at: Vec<_> = a
            .blocks
            .iter()
            .map(|b| {
                let at = b.mixer.attention().unwrap();
                (at.window, at.rope)
            })
            .collect();
        let c = (Window::Chunked(8), true);
        assert_eq!(at, [c, c, c, (Window::Full, false)]);
        let ch: Vec<_> = a.blocks.iter().map(|b| b.channel.clone()).collect();
        let d = Channel::Mlp {
            intermediate: 16384,
        };
        assert_eq!(ch, [d.clone(), Channel::Moe, d, Channel::Moe]);
        assert_eq!((a.head_dim, a.qk_norm), (128, QkNorm::L2));
        let m = a.moe.unwrap();
        assert_eq!((m.experts, m.top_k, m.moe_layers), (16, 1, 2));
    }

    #[test]
    fn the_multimodal_config_keeps_it_in_text_config() {
        let a = from_config(&serde_json::json!({
            "model_type": "llama4",
            "text_config": {"model_type": "llama4_text", "hidden_size": 32,
                "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 16,
                "head_dim": 8, "moe_layers": [1]}
        }))
        .unwrap()
        .unwrap();
        assert_eq!(a.head_dim, 8);
        assert_eq!(a.blocks[1].channel, Channel::Moe);
        let e = from_config(&serde_json::json!({
            "model_type": "llama4_text", "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 16, "moe_layers": [5]
        }))
        .unwrap_err();
        assert!(e.0.contains("moe_layers"), "{}", e.0);
    }
}
