//! GLM-4.5 / GLM-4.6 (`glm4_moe`): a Llama decoder with q/k/v biases (`attention_bias`),
//! optional per-head q/k RMSNorm (`use_qk_norm`), rotary positions on the first half of each
//! head (`partial_rotary_factor`, 0.5 by default), dense MLPs in the first
//! `first_k_dense_replace` blocks and DeepSeek-V3's mixture after them: a sigmoid,
//! group-limited router with the persistent fp32 `e_score_correction_bias` buffer, and
//! `n_shared_experts` shared experts of `moe_intermediate_size`.
//! transformers: `models/glm4_moe/{configuration,modeling}_glm4_moe.py` (`Glm4MoeAttention`,
//! `Glm4MoeTopkRouter`, `Glm4MoeMoE`, `Glm4MoeDecoderLayer`).

use super::{moe_keys, GgufKeys};
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{
    decoder, flag, need, uint, Arch, ConfigError, Correction, Moe, QkNorm, Router,
};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let mut a = decoder(outer, c, model_type)?;
    a.qk_norm = if flag(c, "use_qk_norm", false) {
        QkNorm::Head
    } else {
        QkNorm::None
    };
    // Glm4MoeConfig sets partial_rotary_factor 0.5 when the config gives none; the rotary
    // width is int(head_dim × factor)
    let factor = c
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
        .or_else(|| c.get("partial_rotary_factor"))
        .and_then(Value::as_f64)
        .unwrap_or(0.5)
        .clamp(0.0, 1.0);
    a.rotary_dim = ((a.head_dim as f64) * factor) as u64;
    let experts = need(c, &["n_routed_experts", "num_local_experts"])?;
    let mut m = Moe::new(
        experts,
        need(c, &["num_experts_per_tok"])?,
        need(c, &["moe_intermediate_size"])?,
    );
    m.shared_experts = uint(c, &["n_shared_experts"])?.unwrap_or(1);
    m.shared_intermediate = m.expert_intermediate.saturating_mul(m.shared_experts);
    m.norm_topk = flag(c, "norm_topk_prob", true);
    m.router = Router::SigmoidGroup;
    m.router_linear = false;
    m.correction = Some(Correction::Buffer);
    let groups = uint(c, &["n_group"])?.unwrap_or(1);
    if groups == 0 || experts % groups != 0 {
        return Err(ConfigError(format!(
            "n_group {groups} does not divide the {experts} routed experts"
        )));
    }
    let dense = uint(c, &["first_k_dense_replace"])?.unwrap_or(1);
    let sparse = (0..a.layers).map(|i| i >= dense).collect();
    a.set_moe(m.with_layers(sparse)?);
    Ok(a)
}

/// GGUF (`glm4moe`): partial rotary from `rope.dimension_count`, q/k norms where the tensors are,
/// the DeepSeek-style expert keys.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, _layers: u64) {
    c.insert(
        "use_qk_norm".into(),
        k.has("blk.0.attn_q_norm.weight").into(),
    );
    moe_keys(k, c);
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;
    use super::super::super::layers::Channel;

    #[test]
    fn half_rotary_and_experts_after_the_first_dense_block() {
        let a = from_config(&serde_json::json!({
            "model_type": "glm4_moe", "hidden_size": 32, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 16,
            "intermediate_size": 64, "moe_intermediate_size": 16, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "use_qk_norm": true
        }))
        .unwrap()
        .unwrap();
        assert_eq!((a.head_dim, a.rotary_dim), (8, 4));
        assert_eq!(a.qk_norm, super::super::super::arch::QkNorm::Head);
        let m = a.moe.as_ref().unwrap();
        assert_eq!((m.shared_intermediate, m.moe_layers), (16, 2));
        assert_eq!(a.blocks[0].channel, Channel::Mlp { intermediate: 64 });
        assert_eq!(a.blocks[2].channel, Channel::Moe);
    }
}
