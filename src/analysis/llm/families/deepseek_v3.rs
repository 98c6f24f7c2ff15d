//! DeepSeek-V3 (`deepseek_v3`), Kimi-K2 (`kimi_k2`, DeepSeek-V3's modeling code under its own
//! name) and DeepSeek-V2 (`deepseek_v2`): multi-head latent attention in every block, dense
//! MLPs in the first `first_k_dense_replace` blocks and mixtures of experts after them, each with
//! `n_shared_experts` always-on experts folded into one MLP of `moe_intermediate_size ×
//! n_shared_experts`. V3's router scores with a sigmoid, adds the persistent fp32
//! `e_score_correction_bias` buffer for the choice and limits it to `topk_group` of `n_group`
//! groups; V2's takes a softmax (no correction bias, no renormalisation by default).
//! transformers: `models/deepseek_v3/{configuration,modeling}_deepseek_v3.py`
//! (`DeepseekV3Attention`, `DeepseekV3TopkRouter`, `DeepseekV3MoE`), `models/deepseek_v2/`.

use super::{moe_keys, GgufKeys};
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, flag, need, uint, Arch, ConfigError, Correction, Moe, Router};
use super::super::layers::{Mixer, Mla};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let v2 = model_type == "deepseek_v2";
    let mut a = decoder(outer, c, model_type)?;
    // the defaults of DeepseekV3Config (V2's where they differ)
    let or = |names: &[&str], default: u64| -> Result<u64, ConfigError> {
        match uint(c, names)? {
            Some(0) => Err(ConfigError(format!("field '{}' is 0", names[0]))),
            Some(v) => Ok(v),
            None => Ok(default),
        }
    };
    // q_lora_rank: null is a plain q_proj (DeepSeek-V2-Lite), absent the config's default
    let q_lora_rank = match c.get("q_lora_rank") {
        Some(Value::Null) => None,
        Some(_) => Some(need(c, &["q_lora_rank"])?),
        None => Some(1536),
    };
    let mla = Mla {
        heads: a.heads,
        q_lora_rank,
        kv_lora_rank: or(&["kv_lora_rank"], 512)?,
        qk_nope_head_dim: or(&["qk_nope_head_dim"], 128)?,
        qk_rope_head_dim: or(&["qk_rope_head_dim"], 64)?,
        v_head_dim: or(&["v_head_dim"], 128)?,
    };
    // only the rotary part of q and k turns (DeepseekV3RotaryEmbedding's dim is head_dim,
    // which the config sets to qk_rope_head_dim)
    a.head_dim = mla.qk_rope_head_dim;
    a.rotary_dim = mla.qk_rope_head_dim;
    for b in &mut a.blocks {
        b.mixer = Mixer::Mla(mla.clone());
    }
    let experts = or(
        &["n_routed_experts", "num_local_experts"],
        if v2 { 64 } else { 256 },
    )?;
    let mut m = Moe::new(
        experts,
        or(&["num_experts_per_tok"], if v2 { 6 } else { 8 })?,
        or(&["moe_intermediate_size"], if v2 { 1407 } else { 2048 })?,
    );
    m.shared_experts = uint(c, &["n_shared_experts"])?.unwrap_or(if v2 { 2 } else { 1 });
    m.shared_intermediate = m.expert_intermediate.saturating_mul(m.shared_experts);
    m.norm_topk = flag(c, "norm_topk_prob", !v2);
    // the router holds a bare fp32 parameter, not an nn.Linear
    m.router_linear = false;
    if v2 {
        m.router = Router::Softmax;
    } else {
        m.router = Router::SigmoidGroup;
        m.correction = Some(Correction::Buffer);
        let groups = or(&["n_group"], 8)?;
        if experts % groups != 0 {
            return Err(ConfigError(format!(
                "n_group {groups} does not divide the {experts} routed experts"
            )));
        }
    }
    let dense = uint(c, &["first_k_dense_replace"])?.unwrap_or(if v2 { 0 } else { 3 });
    let sparse = (0..a.layers).map(|i| i >= dense).collect();
    a.set_moe(m.with_layers(sparse)?);
    Ok(a)
}

/// GGUF (`deepseek2`): MLA is written as MQA (`head_count_kv` 1, `key_length` = the cached
/// width); the head widths are the `_mla` keys (older files: `key_length` and `value_length`
/// themselves). A file whose router has correction biases (`exp_probs_b`) is DeepSeek-V3's.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, _layers: u64) {
    let rope = k.u("rope.dimension_count").unwrap_or(64);
    let v3 =
        k.0.tensors
            .iter()
            .any(|t| t.name.ends_with("exp_probs_b.bias"));
    c.insert(
        "model_type".into(),
        if v3 { "deepseek_v3" } else { "deepseek_v2" }.into(),
    );
    for f in ["head_dim", "partial_rotary_factor"] {
        c.remove(f);
    }
    if let Some(h) = k.u("attention.head_count") {
        c.insert("num_key_value_heads".into(), h.into());
    }
    let (qk, v) = match (
        k.u("attention.key_length_mla"),
        k.u("attention.value_length_mla"),
    ) {
        (Some(qk), Some(v)) => (qk, v),
        _ => (
            k.u("attention.key_length").unwrap_or(rope),
            k.u("attention.value_length").unwrap_or(0),
        ),
    };
    c.insert("qk_rope_head_dim".into(), rope.into());
    c.insert("qk_nope_head_dim".into(), qk.saturating_sub(rope).into());
    c.insert("v_head_dim".into(), v.into());
    c.insert(
        "kv_lora_rank".into(),
        k.u("attention.kv_lora_rank").unwrap_or(512).into(),
    );
    c.insert(
        "q_lora_rank".into(),
        k.u("attention.q_lora_rank")
            .map_or(Value::Null, Value::from),
    );
    moe_keys(k, c);
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::{from_config, Router};
    use super::super::super::layers::{Channel, Mixer};

    fn config(extra: serde_json::Value) -> serde_json::Value {
        let mut c = serde_json::json!({
            "model_type": "deepseek_v3", "hidden_size": 32, "num_hidden_layers": 4,
            "num_attention_heads": 4, "vocab_size": 16, "intermediate_size": 64,
            "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2,
            "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1, "n_shared_experts": 2,
            "kv_lora_rank": 24, "q_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
            "v_head_dim": 8
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        c
    }

    #[test]
    fn latent_attention_everywhere_experts_after_the_first_k() {
        let a = from_config(&config(serde_json::json!({})))
            .unwrap()
            .unwrap();
        let m = a.moe.as_ref().unwrap();
        assert_eq!((m.shared_intermediate, m.moe_layers), (32, 3));
        assert_eq!(m.router, Router::SigmoidGroup);
        assert_eq!(a.blocks[0].channel, Channel::Mlp { intermediate: 64 });
        assert!(a.blocks[1..].iter().all(|b| b.channel == Channel::Moe));
        let Mixer::Mla(mla) = &a.blocks[0].mixer else {
            panic!("not MLA")
        };
        assert_eq!((mla.q_lora_rank, mla.qk_head_dim()), (Some(16), 12));
        // a plain q_proj when q_lora_rank is null
        let a = from_config(&config(serde_json::json!({"q_lora_rank": null})))
            .unwrap()
            .unwrap();
        let Mixer::Mla(mla) = &a.blocks[0].mixer else {
            panic!("not MLA")
        };
        assert_eq!(mla.q_lora_rank, None);
    }

    #[test]
    fn v2_routes_by_softmax_and_kimi_k2_is_v3() {
        let v2 = from_config(&config(serde_json::json!({"model_type": "deepseek_v2"})))
            .unwrap()
            .unwrap();
        let m = v2.moe.unwrap();
        assert_eq!((m.router, m.correction), (Router::Softmax, None));
        let k2 = from_config(&config(serde_json::json!({"model_type": "kimi_k2"})))
            .unwrap()
            .unwrap();
        assert_eq!(k2.moe.unwrap().router, Router::SigmoidGroup);
    }

    #[test]
    fn bad_fields_are_named() {
        for (extra, field) in [
            (serde_json::json!({"n_group": 3}), "n_group"),
            (serde_json::json!({"kv_lora_rank": "x"}), "kv_lora_rank"),
            (
                serde_json::json!({"num_experts_per_tok": 9}),
                "num_experts_per_tok",
            ),
        ] {
            let e = from_config(&config(extra)).unwrap_err();
            assert!(e.0.contains(field), "{}", e.0);
        }
    }
}
