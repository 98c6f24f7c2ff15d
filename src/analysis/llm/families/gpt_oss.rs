//! gpt-oss (`gpt_oss`): a Llama decoder with q/k/v/o biases, sliding and full attention layers
//! as `layer_types` says, a learned sink logit per head (`sinks`, a parameter [heads]) in every
//! softmax, and a mixture of experts in every block: a router with a bias choosing the top k of
//! its logits (softmax over those k), experts with biases whose fused gate/up projection is
//! interleaved and clamped (`(up + 1) · gate · σ(1.702 · gate)`), no shared expert.
//! transformers: `models/gpt_oss/{configuration,modeling}_gpt_oss.py` (`GptOssAttention`,
//! `GptOssExperts`, `GptOssTopKRouter`).

use super::{swa_kinds, GgufKeys};
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, need, Arch, ConfigError, Moe, Norm, Router};
use super::super::layers::Mixer;

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let mut a = decoder(outer, c, model_type)?;
    a.attention_bias = true;
    // GptOssRMSNorm: `(self.weight * hidden_states).to(input_dtype)`, the weight applied in fp32
    a.norm = Norm::RmsWeightFp32;
    // `_apply_rotary_emb`: cos and sin of head_dim / 2 applied to the two halves
    a.rotary_half_tables = true;
    for b in &mut a.blocks {
        if let Mixer::Attention(at) = &mut b.mixer {
            at.sinks = true;
        }
    }
    let mut m = Moe::new(
        need(c, &["num_local_experts", "num_experts"])?,
        need(c, &["num_experts_per_tok"])?,
        a.intermediate,
    );
    m.router = Router::TopkSoftmax;
    m.norm_topk = false;
    m.router_linear = false;
    m.router_bias = true;
    m.clamped_glu = true;
    let sparse = vec![true; a.layers as usize];
    a.set_moe(m.with_layers(sparse)?);
    Ok(a)
}

/// GGUF (`gpt-oss`): the experts' width and the window; no pattern is stored, and llama.cpp slides
/// the even layers (`src/models/openai-moe.cpp`, `load_swa_pattern(ml, 2)`).
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    if let Some(e) = k.u("expert_feed_forward_length") {
        c.insert("intermediate_size".into(), e.into());
    }
    if let Some(w) = k.u("attention.sliding_window") {
        c.insert("sliding_window".into(), w.into());
        c.insert("layer_types".into(), swa_kinds(k, layers, 2));
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::from_config;

    #[test]
    fn sinks_on_every_layer_and_experts_everywhere() {
        let a = from_config(&serde_json::json!({
            "model_type": "gpt_oss", "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "vocab_size": 16,
            "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
            "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]
        }))
        .unwrap()
        .unwrap();
        assert_eq!((a.window(0), a.window(1)), (Some(8), None));
        assert!(a.blocks.iter().all(|b| b.mixer.attention().unwrap().sinks));
        let m = a.moe.as_ref().unwrap();
        // gate_up [2I, H] + its bias 2I, down [H, I] + its bias H
        assert_eq!(m.params_per_expert(32, true), 3 * 32 * 64 + 2 * 64 + 32);
        assert_eq!(m.moe_layers, 2);
        assert_eq!(a.norm, super::super::super::arch::Norm::RmsWeightFp32);
        assert!(a.rotary_half_tables);
    }
}
