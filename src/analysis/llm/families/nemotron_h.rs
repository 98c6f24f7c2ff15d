//! Nemotron-H (`nemotron_h`): one mixer per block, as `layers_block_type` (or the older
//! `hybrid_override_pattern` "M-*E") lists: Mamba-2 (`linear_attention`), NoPE attention
//! (`full_attention`), a relu² MLP (`mlp`) or a mixture of experts (`moe`). The MLP and MoE
//! blocks have no token mixer ([`Mixer::None`]) and cache nothing (`DummyLayer`); the block
//! count is the list's length. Checkpoint prefix `backbone.`.
//! transformers: `models/nemotron_h/{configuration,modeling}_nemotron_h.py` (`NemotronHMamba2Mixer`
//! l.390, `NemotronHMoE` l.715, `NemotronHBlock` l.934).

use super::{moe_keys, ssm_keys, GgufKeys};
use serde_json::Map;
use serde_json::{json, Value};

use super::super::arch::{decoder, Arch, ConfigError, Correction, Dispatch, Moe, Norm, Router};
use super::super::layers::{Block, Channel, Mixer};
use super::{layer_kinds, mamba2, num, unknown_kind, with_defaults};

const KINDS: &[&str] = &["linear_attention", "full_attention", "mlp", "moe"];

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let kinds = match layer_kinds(c, &["layers_block_type", "layer_types"], None)? {
        Some(k) => k,
        None => match c.get("hybrid_override_pattern").filter(|v| !v.is_null()) {
            Some(Value::String(p)) => p
                .chars()
                .map(|ch| match ch {
                    'M' => Ok("linear_attention".to_string()),
                    '*' => Ok("full_attention".to_string()),
                    '-' => Ok("mlp".to_string()),
                    'E' => Ok("moe".to_string()),
                    other => Err(ConfigError(format!(
                        "field 'hybrid_override_pattern' holds '{other}', not one of M, *, -, E"
                    ))),
                })
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(ConfigError(format!(
                    "field 'hybrid_override_pattern' is {v}, not a string"
                )))
            }
            // the configuration's default
            None => ["linear_attention", "moe", "full_attention", "mlp"]
                .iter()
                .map(|k| k.to_string())
                .collect(),
        },
    };
    if kinds.is_empty() {
        return Err(ConfigError("field 'layers_block_type' is empty".into()));
    }
    // num_hidden_layers is deprecated: the list decides
    let mut d = with_defaults(
        c,
        &[
            ("intermediate_size", json!(21504)),
            ("num_attention_heads", json!(32)),
            ("num_key_value_heads", json!(8)),
            ("head_dim", json!(128)),
        ],
    );
    if let Some(o) = d.as_object_mut() {
        o.insert("num_hidden_layers".into(), json!(kinds.len()));
    }
    let mut a = decoder(outer, &d, model_type)?;
    // NemotronHRMSNorm: `(self.weight.to(torch.float32) * hidden_states).to(input_dtype)`
    a.norm = Norm::RmsWeightCastFp32;
    a.rotary_dim = 0;
    a.gated = false;
    let heads = num(c, "mamba_num_heads", Some(128))?;
    let head_dim = num(c, "mamba_head_dim", Some(64))?;
    let m = mamba2(
        c,
        heads.saturating_mul(head_dim),
        [
            ("mamba_num_heads", Some(128)),
            ("mamba_head_dim", Some(64)),
            ("ssm_state_size", Some(128)),
            ("n_groups", Some(8)),
            ("conv_kernel", Some(4)),
        ],
    )?;
    let mut m = m;
    m.chunk = num(c, "chunk_size", Some(128))?.max(1);
    let mut attn = a.attention(None);
    attn.rope = false;
    let sparse: Vec<bool> = kinds.iter().map(|k| k == "moe").collect();
    if sparse.iter().any(|&s| s) {
        let experts = num(c, "n_routed_experts", Some(8))?;
        let top_k = num(c, "num_experts_per_tok", Some(2))?;
        if top_k > experts {
            return Err(ConfigError(format!(
                "num_experts_per_tok {top_k} is more than the {experts} experts"
            )));
        }
        let shared = num(c, "moe_shared_expert_intermediate_size", Some(7688))?
            .saturating_mul(num(c, "n_shared_experts", Some(1))?);
        a.moe = Some(Moe {
            dispatch: Dispatch::Sorted,
            experts,
            top_k,
            expert_intermediate: num(c, "moe_intermediate_size", Some(7688))?,
            shared_intermediate: shared,
            norm_topk: c
                .get("norm_topk_prob")
                .and_then(Value::as_bool)
                .unwrap_or(true),
            // NemotronHTopkRouter holds a bare weight (DeepSeek-style)
            router_linear: false,
            moe_layers: sparse.iter().filter(|&&s| s).count() as u64,
            sparse,
            // DeepSeek-style sigmoid routing with an fp32 correction buffer; ungated shared MLP
            router: Router::SigmoidGroup,
            correction: Some(Correction::Buffer),
            shared_experts: u64::from(shared > 0),
            ..Moe::new(experts, top_k, 1)
        });
    }
    a.blocks = kinds
        .iter()
        .map(|k| {
            let (mixer, channel) = match k.as_str() {
                "linear_attention" | "mamba" => (Mixer::Mamba2(m.clone()), Channel::None),
                "full_attention" | "attention" => (Mixer::Attention(attn.clone()), Channel::None),
                "mlp" => (
                    Mixer::None,
                    Channel::Mlp {
                        intermediate: a.intermediate,
                    },
                ),
                "moe" => (Mixer::None, Channel::Moe),
                other => return Err(unknown_kind("layers_block_type", other, KINDS)),
            };
            Ok(Block { mixer, channel })
        })
        .collect::<Result<_, _>>()?;
    Ok(a)
}

/// GGUF (`nemotron_h`, `nemotron_h_moe`): each block's kind from its tensors (the metadata's rule,
/// no KV heads and no FFN width means Mamba, misreads the dense blocks of MoE files); the Mamba
/// sizes are the `ssm.*` keys.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    let kinds: Vec<&str> = (0..layers)
        .map(|i| {
            let t = |n: &str| k.has(&format!("blk.{i}.{n}.weight"));
            if t("ssm_in") {
                "mamba"
            } else if t("attn_q") {
                "attention"
            } else if t("ffn_up_exps") {
                "moe"
            } else {
                "mlp"
            }
        })
        .collect();
    if let Some(i) = kinds.iter().position(|&k| k == "mlp") {
        if let Some(w) = k.rows(&format!("blk.{i}.ffn_up.weight")) {
            c.insert("intermediate_size".into(), w.into());
        }
    }
    c.insert("layers_block_type".into(), kinds.into());
    ssm_keys(
        k,
        c,
        [
            "mamba_num_heads",
            "mamba_head_dim",
            "",
            "ssm_state_size",
            "n_groups",
            "conv_kernel",
        ],
    );
    if let Some(s) = k.u("expert_shared_feed_forward_length") {
        c.insert("moe_shared_expert_intermediate_size".into(), s.into());
    }
    moe_keys(k, c);
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;
    use super::super::super::layers::{Channel, Mixer};

    #[test]
    fn the_pattern_gives_one_mixer_per_block() {
        let a = from_config(&serde_json::json!({
            "model_type": "nemotron_h", "hidden_size": 32, "num_hidden_layers": 52,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
            "vocab_size": 16, "mamba_num_heads": 4, "mamba_head_dim": 16,
            "ssm_state_size": 16, "n_groups": 1, "n_routed_experts": 4,
            "hybrid_override_pattern": "M-*E"
        }))
        .unwrap()
        .unwrap();
        assert_eq!(a.layers, 4, "the pattern decides the block count");
        assert!(matches!(a.blocks[0].mixer, Mixer::Mamba2(_)));
        assert_eq!(a.blocks[0].channel, Channel::None);
        assert_eq!(a.blocks[1].mixer, Mixer::None);
        assert!(matches!(a.blocks[1].channel, Channel::Mlp { .. }));
        assert!(!a.blocks[2].mixer.attention().unwrap().rope);
        assert_eq!(
            (&a.blocks[3].mixer, &a.blocks[3].channel),
            (&Mixer::None, &Channel::Moe)
        );
    }

    #[test]
    fn a_bad_pattern_is_named() {
        let e = from_config(&serde_json::json!({
            "model_type": "nemotron_h", "hidden_size": 32, "num_attention_heads": 4,
            "vocab_size": 16, "hybrid_override_pattern": "MX"
        }))
        .unwrap_err();
        assert!(e.0.contains("hybrid_override_pattern"), "{}", e.0);
    }
}
