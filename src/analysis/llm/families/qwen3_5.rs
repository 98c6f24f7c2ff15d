//! Qwen3.5 (`qwen3_5_text`, `qwen3_5_moe_text`, and the multimodal wrappers `qwen3_5`,
//! `qwen3_5_moe` that keep them in `text_config`): Qwen3-Next's token mixers — Gated DeltaNet
//! (`linear_attention`) and gated full attention (`full_attention`: a q projection twice as wide
//! whose second half gates the output, per-head `(1 + w)` q/k norms, partial rotary) from
//! `layer_types` (else `full_attention_interval`, 4) — with three differences: the DeltaNet's input
//! projections are four linear layers (`in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`)
//! where Qwen3-Next fuses two; the rotary positions are interleaved M-RoPE over [3, B, S]
//! positions, so the rotary tables have a row per sequence; and the channel mixer is a dense
//! SwiGLU on every block (`qwen3_5_text`) or a Qwen-MoE with a sigmoid-gated shared expert on
//! every block, its top k always renormalised (`qwen3_5_moe_text`: no `mlp_only_layers`,
//! `decoder_sparse_step` or `norm_topk_prob`; transformers ignores them). Zero-centred RMSNorm.
//! The cache is Qwen3-Next's. A wrapper's tying is its outer `tie_word_embeddings`.
//! transformers: `models/qwen3_5/modeling_qwen3_5.py` (`Qwen3_5GatedDeltaNet` l.500,
//! `Qwen3_5Attention` l.742, `Qwen3_5TextRotaryEmbedding` l.136, `Qwen3_5DecoderLayer` l.855),
//! `models/qwen3_5_moe/modeling_qwen3_5_moe.py` (`Qwen3_5MoeTopKRouter` l.894,
//! `Qwen3_5MoeSparseMoeBlock` l.913, `Qwen3_5MoeDecoderLayer` l.956).
//!

use serde_json::{json, Value};

use super::super::arch::{decoder, flag, Arch, ConfigError, Dispatch, Moe};
use super::super::layers::{Block, Channel};
use super::qwen3_next::token_mixers;
use super::{num, with_defaults};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let moe = model_type.starts_with("qwen3_5_moe");
    // the config classes' defaults (Qwen3_5TextConfig, Qwen3_5MoeTextConfig); the MoE has no
    // intermediate_size (no dense block uses one). partial_rotary_factor: the classes'
    // `kwargs.setdefault("partial_rotary_factor", 0.25)`, read only where rope_parameters has none
    let mut defaults = vec![
        ("num_attention_heads", json!(16)),
        ("head_dim", json!(256)),
        ("partial_rotary_factor", json!(0.25)),
    ];
    if moe {
        defaults.extend([
            ("num_hidden_layers", json!(40)),
            ("num_key_value_heads", json!(2)),
            ("intermediate_size", json!(0)),
        ]);
    } else {
        defaults.extend([
            ("intermediate_size", json!(12288)),
            ("num_hidden_layers", json!(32)),
            ("num_key_value_heads", json!(4)),
        ]);
    }
    let d = with_defaults(c, &defaults);
    let mut a = decoder(outer, &d, model_type)?;
    let layers = a.layers;
    // in_proj_qkv [H → 2·key_dim + value_dim], in_proj_z [H → value_dim], in_proj_b, in_proj_a
    // [H → value heads] (Qwen3_5GatedDeltaNet l.540-543)
    let mixers = token_mixers(&mut a, c, true)?;
    if moe {
        let experts = num(c, "num_experts", Some(256))?;
        let top_k = num(c, "num_experts_per_tok", Some(8))?;
        if top_k > experts {
            return Err(ConfigError(format!(
                "num_experts_per_tok {top_k} is more than the {experts} experts"
            )));
        }
        let m = Moe {
            dispatch: Dispatch::Sorted,
            expert_intermediate: num(c, "moe_intermediate_size", Some(512))?,
            shared_intermediate: num(c, "shared_expert_intermediate_size", Some(512))?,
            // Qwen3_5MoeTopKRouter renormalises the top k unconditionally (l.907)
            norm_topk: true,
            // the router holds a bare parameter, as Qwen2-MoE's
            router_linear: false,
            // Qwen2-MoE's shared expert with its sigmoid gate
            shared_experts: 1,
            shared_gate: true,
            // peft 0.21's all-linear wraps neither the experts nor the router here (its MoE
            // remapping covers the types transformers maps to qwen2_moe / mixtral; measured)
            peft_wraps_experts: false,
            ..Moe::new(experts, top_k, 1)
        };
        // every block routes (Qwen3_5MoeDecoderLayer l.965: no mlp_only_layers)
        a.moe = Some(m.with_layers(vec![true; layers as usize])?);
    } else {
        a.moe = None;
    }
    // M-RoPE: position_ids [3, B, S] even for text (Qwen3_5TextModel.forward l.1245)
    a.rotary_per_sequence = true;
    // a wrapper's lm_head is tied by the ForConditionalGeneration's own config (the outer
    // field, default false), not by text_config's
    if outer.get("text_config").is_some_and(Value::is_object) {
        a.tied = flag(outer, "tie_word_embeddings", false);
    }
    let channel = if moe {
        Channel::Moe
    } else {
        Channel::Mlp {
            intermediate: a.intermediate,
        }
    };
    a.blocks = mixers
        .into_iter()
        .map(|mixer| Block {
            mixer,
            channel: channel.clone(),
        })
        .collect();
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::{from_config, Norm};
    use super::super::super::layers::{CacheDtypes, Channel, Mixer};
    use serde_json::json;

    fn text(extra: serde_json::Value) -> serde_json::Value {
        let mut c = json!({
            "hidden_size": 32, "num_hidden_layers": 8, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 16,
            "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 8, "linear_value_head_dim": 8
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    #[test]
    fn dense_three_deltanet_layers_then_gated_attention_and_an_mlp_everywhere() {
        let a = from_config(&text(json!({
            "model_type": "qwen3_5_text", "intermediate_size": 64,
            // no partial_rotary_factor anywhere: the class default 0.25
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                "mrope_section": [1, 1, 0], "mrope_interleaved": true}
        })))
        .unwrap()
        .unwrap();
        let attn: Vec<bool> = a
            .blocks
            .iter()
            .map(|b| b.mixer.attention().is_some())
            .collect();
        assert_eq!(attn, [false, false, false, true, false, false, false, true]);
        assert!(a.blocks[3].mixer.attention().unwrap().output_gate);
        assert_eq!(a.rotary_dim, 4);
        assert!(a.rotary_per_sequence);
        assert_eq!(a.norm, Norm::RmsGemma);
        assert!(a.moe.is_none());
        assert!(a
            .blocks
            .iter()
            .all(|b| b.channel == Channel::Mlp { intermediate: 64 }));
        let Mixer::GatedDeltaNet(d) = &a.blocks[0].mixer else {
            panic!()
        };
        assert!(d.split_in_proj);
    }

    #[test]
    fn moe_routes_every_block_and_renormalises_whatever_the_config_says() {
        let a = from_config(&text(json!({
            "model_type": "qwen3_5_moe_text", "num_hidden_layers": 4,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64,
            // read by Qwen3-Next, ignored by Qwen3.5-MoE
            "mlp_only_layers": [1], "decoder_sparse_step": 2, "norm_topk_prob": false
        })))
        .unwrap()
        .unwrap();
        assert!(a.blocks.iter().all(|b| b.channel == Channel::Moe));
        let m = a.moe.as_ref().unwrap();
        assert_eq!((m.moe_layers, m.norm_topk, m.shared_gate), (4, true, true));
        assert_eq!(m.shared_intermediate, 64);
        assert!(!m.router_linear);
    }

    #[test]
    fn interval_when_layer_types_is_absent() {
        let a = from_config(&text(json!({
            "model_type": "qwen3_5_text", "num_hidden_layers": 4, "full_attention_interval": 2
        })))
        .unwrap()
        .unwrap();
        let attn: Vec<bool> = a
            .blocks
            .iter()
            .map(|b| b.mixer.attention().is_some())
            .collect();
        assert_eq!(attn, [false, true, false, true]);
    }

    #[test]
    fn a_wrapper_is_tied_by_its_outer_field() {
        let t = text(json!({"model_type": "qwen3_5_text", "tie_word_embeddings": true}));
        // outer field absent: untied although text_config says tied (measured with 5.24)
        let a = from_config(&json!({"model_type": "qwen3_5", "text_config": t.clone()}))
            .unwrap()
            .unwrap();
        assert!(!a.tied);
        let a = from_config(&json!({
            "model_type": "qwen3_5", "tie_word_embeddings": true, "text_config": t
        }))
        .unwrap()
        .unwrap();
        assert!(a.tied);
        assert_eq!(a.model_type, "qwen3_5_text");
    }

    #[test]
    fn the_fixture_cache_is_qwen3_next_s() {
        // testdata/llm/qwen3_5_moe_text at (2, 24), fp32: 3 × (conv [2, 64, 4] + state
        // [2, 4, 8, 8]) + K/V 2 × [2, 2, 24, 16] = 24,576 B; bf16 K/V and conv: 15,360 B
        let a = from_config(&text(json!({
            "model_type": "qwen3_5_moe_text", "num_hidden_layers": 4,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
            "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
            "shared_expert_intermediate_size": 64
        })))
        .unwrap()
        .unwrap();
        for (e, want) in [
            (CacheDtypes { kv: 4, state: 4 }, 24_576),
            (CacheDtypes { kv: 2, state: 4 }, 15_360),
        ] {
            let total: u64 = a
                .blocks
                .iter()
                .enumerate()
                .map(|(i, b)| b.mixer.cache(i as u64, 2, 24, e).unwrap().bytes)
                .sum();
            assert_eq!(total, want);
        }
    }
}
