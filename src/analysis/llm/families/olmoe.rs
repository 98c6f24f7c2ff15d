//! OLMoE (`olmoe`, OLMoE-1B-7B): a Llama decoder (pre-norms, Llama's RMSNorm) with q/k RMSNorms
//! over the whole projection (`heads × head_dim`, as OLMo 2's) and a mixture of experts in every
//! block: a softmax router (`OlmoeTopKRouter`, a bare weight, top k of the fp32 probabilities,
//! renormalised only with `norm_topk_prob`), experts of `intermediate_size` with a fused
//! gate/up stack, no shared expert. `clip_qkv` (null in the released checkpoints) clamps q, k and v
//! in place, which keeps one tensor of each for backward.
//! transformers: `models/olmoe/{configuration,modeling}_olmoe.py` (`OlmoeAttention`,
//! `OlmoeExperts`, `OlmoeTopKRouter`).

use serde_json::Value;

use super::super::arch::{decoder, flag, need, Arch, ConfigError, Moe, QkNorm};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let mut a = decoder(outer, c, model_type)?;
    a.qk_norm = QkNorm::Projection;
    // transformers 5 saves `num_experts` as `num_local_experts` (its attribute map)
    let mut m = Moe::new(
        need(c, &["num_experts", "num_local_experts"])?,
        need(c, &["num_experts_per_tok"])?,
        a.intermediate,
    );
    m.norm_topk = flag(c, "norm_topk_prob", false);
    m.router_linear = false;
    let sparse = vec![true; a.layers as usize];
    a.set_moe(m.with_layers(sparse)?);
    a.clip_qkv = c.get("clip_qkv").is_some_and(|v| !v.is_null());
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::{from_config, QkNorm};

    #[test]
    fn experts_in_every_block_with_projection_norms() {
        let a = from_config(&serde_json::json!({
            "model_type": "olmoe", "hidden_size": 32, "num_hidden_layers": 3,
            "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 16,
            "intermediate_size": 8, "num_experts": 8, "num_experts_per_tok": 2
        }))
        .unwrap()
        .unwrap();
        let m = a.moe.as_ref().unwrap();
        assert_eq!((m.experts, m.top_k, m.expert_intermediate), (8, 2, 8));
        assert_eq!(m.moe_layers, 3);
        assert!(!m.norm_topk);
        assert_eq!(a.qk_norm, QkNorm::Projection);
        assert!(m.peft_wraps_experts);
    }
}
