//! Qwen3-Next (`qwen3_next`): `layer_types` of Gated DeltaNet (`linear_attention`) and gated
//! full attention (`full_attention`: a q projection twice as wide whose second half gates the
//! output, per-head `(1 + w)` q/k norms, partial rotary), 3:1 by default
//! (`full_attention_interval` 4); every block's channel mixer a Qwen-MoE with a gated shared
//! expert (dense where `mlp_only_layers` / `decoder_sparse_step` say); zero-centred RMSNorm.
//! transformers: `models/qwen3_next/{configuration,modeling}_qwen3_next.py`
//! (`Qwen3NextAttention` l.229, `Qwen3NextGatedDeltaNet` l.583, `Qwen3NextSparseMoeBlock` l.849).

use super::{kinds_of, GgufKeys};
use serde_json::Map;
use serde_json::{json, Value};

use super::super::arch::{
    decoder, qwen_sparse_layers, Arch, ConfigError, Dispatch, Moe, Norm, QkNorm,
};
use super::super::layers::{Block, Channel, DeltaNet, Mixer};
use super::{layer_kinds, num, unknown_kind, with_defaults};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let d = with_defaults(
        c,
        &[
            ("intermediate_size", json!(5632)),
            ("num_hidden_layers", json!(48)),
            ("num_attention_heads", json!(16)),
            ("num_key_value_heads", json!(2)),
            ("head_dim", json!(256)),
            // the config class's `kwargs.setdefault("partial_rotary_factor", 0.25)`, read where
            // rope_parameters has none
            ("partial_rotary_factor", json!(0.25)),
        ],
    );
    let mut a = decoder(outer, &d, model_type)?;
    let layers = a.layers;
    let mixers = token_mixers(&mut a, c, false)?;
    let experts = num(c, "num_experts", Some(512))?;
    let top_k = num(c, "num_experts_per_tok", Some(10))?;
    if top_k > experts {
        return Err(ConfigError(format!(
            "num_experts_per_tok {top_k} is more than the {experts} experts"
        )));
    }
    let sparse = qwen_sparse_layers(c, layers)?;
    a.moe = Some(Moe {
        dispatch: Dispatch::Sorted,
        experts,
        top_k,
        expert_intermediate: num(c, "moe_intermediate_size", Some(512))?,
        shared_intermediate: num(c, "shared_expert_intermediate_size", Some(512))?,
        norm_topk: c
            .get("norm_topk_prob")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        // the router holds a bare parameter, as Qwen2-MoE's
        router_linear: false,
        moe_layers: sparse.iter().filter(|&&s| s).count() as u64,
        sparse: sparse.clone(),
        // Qwen2-MoE's shared expert with its sigmoid gate
        shared_experts: 1,
        shared_gate: true,
        ..Moe::new(experts, top_k, 1)
    });
    a.blocks = mixers
        .into_iter()
        .zip(&sparse)
        .map(|(mixer, &moe)| Block {
            mixer,
            channel: if moe {
                Channel::Moe
            } else {
                Channel::Mlp {
                    intermediate: a.intermediate,
                }
            },
        })
        .collect();
    Ok(a)
}

/// The token mixers of Qwen3-Next, which Qwen3.5 shares: per layer, from `layer_types` (else
/// every `full_attention_interval`-th layer, 4, attends), a Gated DeltaNet or a gated full
/// attention; zero-centred RMSNorms and per-head q/k norms. `split_in_proj`: Qwen3.5's four
/// DeltaNet input projections.
pub(super) fn token_mixers(
    a: &mut Arch,
    c: &Value,
    split_in_proj: bool,
) -> Result<Vec<Mixer>, ConfigError> {
    let layers = a.layers;
    let kinds = match layer_kinds(c, &["layer_types"], Some(layers))? {
        Some(k) => k,
        None => {
            let every = num(c, "full_attention_interval", Some(4))?;
            (0..layers)
                .map(|i| {
                    if (i + 1) % every != 0 {
                        "linear_attention".to_string()
                    } else {
                        "full_attention".to_string()
                    }
                })
                .collect()
        }
    };
    let dn = DeltaNet {
        key_heads: num(c, "linear_num_key_heads", Some(16))?,
        value_heads: num(c, "linear_num_value_heads", Some(32))?,
        key_head_dim: num(c, "linear_key_head_dim", Some(128))?,
        value_head_dim: num(c, "linear_value_head_dim", Some(128))?,
        conv_kernel: num(c, "linear_conv_kernel_dim", Some(4))?,
        split_in_proj,
    };
    for (what, heads, dim) in [
        ("linear_num_key_heads", dn.key_heads, dn.key_head_dim),
        ("linear_num_value_heads", dn.value_heads, dn.value_head_dim),
    ] {
        if heads.saturating_mul(dim) > super::super::arch::MAX_FIELD {
            return Err(ConfigError(format!(
                "{what} {heads} × its head dim {dim} is more than nnlint models"
            )));
        }
    }
    a.norm = Norm::RmsGemma;
    a.qk_norm = QkNorm::Head;
    let mut attn = a.attention(None);
    attn.output_gate = true;
    kinds
        .iter()
        .map(|k| match k.as_str() {
            "linear_attention" => Ok(Mixer::GatedDeltaNet(dn.clone())),
            "full_attention" => Ok(Mixer::Attention(attn.clone())),
            other => Err(unknown_kind(
                "layer_types",
                other,
                &["linear_attention", "full_attention"],
            )),
        })
        .collect()
}

/// GGUF (`qwen3next`): the DeltaNet sizes are the `ssm.*` keys, the linear layers
/// `attention.recurrent_layers`; a block without a router is dense.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    let set = |c: &mut Map<String, Value>, f: &str, v: Option<u64>| {
        if let Some(v) = v {
            c.insert(f.into(), v.into());
        }
    };
    let ranks = k.u("ssm.time_step_rank");
    set(c, "linear_conv_kernel_dim", k.u("ssm.conv_kernel"));
    set(c, "linear_key_head_dim", k.u("ssm.state_size"));
    set(c, "linear_num_key_heads", k.u("ssm.group_count"));
    set(c, "linear_num_value_heads", ranks);
    set(
        c,
        "linear_value_head_dim",
        k.u("ssm.inner_size")
            .zip(ranks.filter(|&r| r > 0))
            .map(|(i, r)| i / r),
    );
    if let Some(r) = k.per_layer("attention.recurrent_layers", layers) {
        c.insert(
            "layer_types".into(),
            kinds_of(
                r.iter().map(|&f| f != 0.0),
                "linear_attention",
                "full_attention",
            ),
        );
    }
    let dense: Vec<u64> = (0..layers)
        .filter(|i| !k.has(&format!("blk.{i}.ffn_gate_inp.weight")))
        .collect();
    c.insert("mlp_only_layers".into(), dense.into());
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;
    use super::super::super::layers::{CacheDtypes, Channel, Mixer};

    #[test]
    fn three_deltanet_layers_then_gated_attention_by_default() {
        let a = from_config(&serde_json::json!({
            "model_type": "qwen3_next", "hidden_size": 32, "num_hidden_layers": 8,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "vocab_size": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "linear_key_head_dim": 8, "linear_value_head_dim": 8, "num_experts": 4,
            "num_experts_per_tok": 2, "mlp_only_layers": [7],
            "rope_parameters": {"partial_rotary_factor": 0.25}
        }))
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
        assert_eq!(a.blocks[7].channel, Channel::Mlp { intermediate: 5632 });
        assert_eq!(a.blocks[6].channel, Channel::Moe);
        // the fixture's DeltaNet layer at (2, 24), fp32: conv [2, 64, 4] + state [2, 4, 8, 8]
        let Mixer::GatedDeltaNet(_) = &a.blocks[0].mixer else {
            panic!()
        };
        let l = a.blocks[0]
            .mixer
            .cache(0, 2, 24, CacheDtypes { kv: 4, state: 4 })
            .unwrap();
        assert_eq!(l.bytes, 2048 + 2048);
    }
}
