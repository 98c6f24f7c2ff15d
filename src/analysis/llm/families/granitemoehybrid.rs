//! Granite 4 (`granitemoehybrid`): `layer_types` of Mamba-2 (`linear_attention`, legacy
//! `mamba`) and attention (`full_attention`, legacy `attention`) blocks, each followed by a
//! mixture of experts plus an always-on shared MLP (a shared MLP alone without experts). RoPE
//! only when `position_embedding_type` is "rope" (else NoPE).
//! transformers: `models/granitemoehybrid/{configuration,modeling}_granitemoehybrid.py`
//! (`GraniteMoeHybridMambaLayer` l.505, `GraniteMoeHybridDecoderLayer` l.943).

use super::{kinds_of, ssm_keys, GgufKeys};
use serde_json::Map;
use serde_json::{json, Value};

use super::super::arch::{decoder, Arch, ConfigError, Dispatch, Moe};
use super::super::layers::{Block, Channel, Mixer};
use super::{layer_kinds, mamba2, num, unknown_kind, with_defaults};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let d = with_defaults(
        c,
        &[
            ("intermediate_size", json!(11008)),
            ("num_hidden_layers", json!(32)),
            ("num_attention_heads", json!(32)),
        ],
    );
    let mut a = decoder(outer, &d, model_type)?;
    let kinds = layer_kinds(c, &["layer_types", "layers_block_type"], Some(a.layers))?
        .unwrap_or_else(|| vec!["linear_attention".into(); a.layers as usize]);
    let rope = c.get("position_embedding_type").and_then(Value::as_str) == Some("rope");
    if !rope {
        a.rotary_dim = 0;
    }
    let expand = num(c, "mamba_expand", Some(2))?;
    let m = mamba2(
        c,
        expand.saturating_mul(a.hidden),
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
    let experts = match c.get("num_local_experts").filter(|v| !v.is_null()) {
        None => 8,
        Some(v) if v.as_u64() == Some(0) => 0,
        Some(_) => num(c, "num_local_experts", None)?,
    };
    let shared = num(c, "shared_intermediate_size", Some(1024))?;
    let channel = if experts > 0 {
        let top_k = num(c, "num_experts_per_tok", Some(2))?;
        if top_k > experts {
            return Err(ConfigError(format!(
                "num_experts_per_tok {top_k} is more than the {experts} experts"
            )));
        }
        a.moe = Some(Moe {
            dispatch: Dispatch::Sorted,
            experts,
            top_k,
            expert_intermediate: a.intermediate,
            shared_intermediate: shared,
            // softmax over the top-k logits: weights that sum to 1
            norm_topk: true,
            // `router.layer` is an nn.Linear, but peft's all-linear gives it no adapter
            // (measured: 8,224 trainable at r=8 on the fixture, none on the router)
            router_linear: false,
            sparse: vec![true; a.layers as usize],
            moe_layers: a.layers,
            // the shared MLP is always on, with no sigmoid gate
            shared_experts: u64::from(shared > 0),
            // nor the experts (measured: all-linear's 8,224 trainable are nnlint's count)
            peft_wraps_experts: false,
            ..Moe::new(experts, top_k, a.intermediate)
        });
        Channel::Moe
    } else {
        Channel::Mlp {
            intermediate: shared,
        }
    };
    // the shared MLP's gate and up are one `input_linear`
    a.fused_gate_up = true;
    let mut attn = a.attention(None);
    attn.rope = rope;
    a.blocks = kinds
        .iter()
        .map(|k| {
            let mixer = match k.as_str() {
                "linear_attention" | "mamba" => Mixer::Mamba2(m.clone()),
                "full_attention" | "attention" => Mixer::Attention(attn.clone()),
                other => {
                    return Err(unknown_kind(
                        "layer_types",
                        other,
                        &["linear_attention", "full_attention"],
                    ))
                }
            };
            Ok(Block {
                mixer,
                channel: channel.clone(),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(a)
}

/// GGUF (`granitehybrid`): Mamba layers have no KV heads (`head_count_kv` 0); the Mamba sizes are
/// the `ssm.*` keys; `feed_forward_length` is the experts' width.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    if let Some(kv) = k.per_layer("attention.head_count_kv", layers) {
        c.insert(
            "layer_types".into(),
            kinds_of(kv.iter().map(|&h| h == 0.0), "mamba", "attention"),
        );
    }
    ssm_keys(
        k,
        c,
        [
            "mamba_n_heads",
            "mamba_d_head",
            "mamba_expand",
            "mamba_d_state",
            "mamba_n_groups",
            "mamba_d_conv",
        ],
    );
    if let Some(e) = k.u("expert_feed_forward_length") {
        c.insert("intermediate_size".into(), e.into());
    }
    if let Some(s) = k.u("expert_shared_feed_forward_length") {
        c.insert("shared_intermediate_size".into(), s.into());
    }
    let rope = k.bool("rope.scaling.finetuned") != Some(false);
    c.insert(
        "position_embedding_type".into(),
        if rope { "rope" } else { "nope" }.into(),
    );
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;
    use super::super::super::layers::{Channel, Mixer};

    #[test]
    fn mamba_and_nope_attention_blocks_with_experts() {
        let a = from_config(&serde_json::json!({
            "model_type": "granitemoehybrid", "hidden_size": 32, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16,
            "intermediate_size": 32, "shared_intermediate_size": 64, "num_local_experts": 4,
            "mamba_n_heads": 4, "mamba_d_state": 16,
            "layers_block_type": ["mamba", "attention", "mamba"]
        }))
        .unwrap()
        .unwrap();
        let Mixer::Mamba2(m) = &a.blocks[0].mixer else {
            panic!()
        };
        // d_head "auto": expand 2 × 32 / 4 heads
        assert_eq!((m.heads, m.head_dim, m.conv_dim()), (4, 16, 96));
        let at = a.blocks[1].mixer.attention().unwrap();
        assert!(!at.rope, "no position_embedding_type: NoPE");
        assert!(a.blocks.iter().all(|b| b.channel == Channel::Moe));
        assert_eq!(a.moe.as_ref().unwrap().shared_intermediate, 64);
    }
}
