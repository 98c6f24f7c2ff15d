//! ERNIE 4.5 MoE (`ernie4_5_moe`): a Llama decoder with biases on q/k/v/o, the MLPs and the
//! LM head when `use_bias`, tied embeddings by default, and mixtures of experts in block `i` when
//! `(i + 1) % moe_layer_interval == 0` and `moe_layer_start_index <= i <= moe_layer_end_index`
//! (−1: the last block): a softmax router whose choice adds `moe_statics.e_score_correction_bias`
//! (a frozen fp32 *parameter* here, unlike DeepSeek's buffer), weights renormalised over the top
//! k, and `moe_num_shared_experts` shared experts of `moe_intermediate_size`.
//! transformers: `models/ernie4_5_moe/{configuration,modeling}_ernie4_5_moe.py`
//! (`Ernie4_5_MoeTopKRouter`, `Ernie4_5_MoeSparseMoeBlock`, `Ernie4_5_MoeDecoderLayer`).

use super::GgufKeys;
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, flag, need, uint, Arch, ConfigError, Correction, Moe, Router};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let mut a = decoder(outer, c, model_type)?;
    a.attention_bias = flag(c, "use_bias", false);
    a.tied = flag(c, "tie_word_embeddings", true);
    // `apply_rotary_pos_emb`: the fp32 tables' halves `repeat_interleave`d afresh in every layer,
    // q and k rotated in fp32 and cast back
    a.rotary_fp32_per_layer = true;
    let mut m = Moe::new(
        need(c, &["moe_num_experts", "num_experts"])?,
        need(c, &["moe_k", "num_experts_per_tok"])?,
        need(c, &["moe_intermediate_size"])?,
    );
    m.shared_experts = uint(c, &["moe_num_shared_experts"])?.unwrap_or(2);
    m.shared_intermediate = m.expert_intermediate.saturating_mul(m.shared_experts);
    m.router = Router::SoftmaxBias;
    m.norm_topk = true;
    m.router_linear = false;
    m.correction = Some(Correction::Parameter);
    let interval = uint(c, &["moe_layer_interval"])?.unwrap_or(1);
    if interval == 0 {
        return Err(ConfigError("field 'moe_layer_interval' is 0".into()));
    }
    let start = uint(c, &["moe_layer_start_index"])?.unwrap_or(1);
    let end = match c.get("moe_layer_end_index") {
        None | Some(Value::Null) => a.layers - 1,
        Some(v) if v.as_i64() == Some(-1) => a.layers - 1,
        Some(_) => uint(c, &["moe_layer_end_index"])?.unwrap_or(a.layers - 1),
    };
    let sparse = (0..a.layers)
        .map(|i| (i + 1) % interval == 0 && start <= i && i <= end)
        .collect();
    a.set_moe(m.with_layers(sparse)?);
    Ok(a)
}

/// GGUF (`ernie4_5-moe`): ERNIE's `moe_*` fields from the standard expert keys (the experts run
/// from `leading_dense_block_count` to the last block, every `interleave_moe_layer_step`).
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, layers: u64) {
    let set = |c: &mut Map<String, Value>, f: &str, v: Option<u64>| {
        if let Some(v) = v {
            c.insert(f.into(), v.into());
        }
    };
    set(c, "moe_num_experts", k.u("expert_count"));
    set(c, "moe_k", k.u("expert_used_count"));
    set(
        c,
        "moe_intermediate_size",
        k.u("expert_feed_forward_length"),
    );
    set(c, "moe_num_shared_experts", k.u("expert_shared_count"));
    set(c, "moe_layer_start_index", k.u("leading_dense_block_count"));
    set(c, "moe_layer_interval", k.u("interleave_moe_layer_step"));
    c.insert(
        "moe_layer_end_index".into(),
        layers.saturating_sub(1).into(),
    );
    c.insert("use_bias".into(), k.has("blk.0.attn_q.bias").into());
}

#[cfg(test)]
mod tests {
    use super::super::super::arch::{from_config, Correction};

    fn sparse(extra: serde_json::Value) -> Vec<bool> {
        let mut c = serde_json::json!({
            "model_type": "ernie4_5_moe", "hidden_size": 32, "num_hidden_layers": 6,
            "num_attention_heads": 4, "vocab_size": 16, "moe_intermediate_size": 16,
            "moe_num_experts": 4, "moe_k": 2
        });
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        let a = from_config(&c).unwrap().unwrap();
        assert!(a.tied);
        assert_eq!(
            a.moe.as_ref().unwrap().correction,
            Some(Correction::Parameter)
        );
        a.moe.unwrap().sparse
    }

    #[test]
    fn the_moe_layers_follow_interval_start_and_end() {
        assert_eq!(
            sparse(serde_json::json!({})),
            [false, true, true, true, true, true]
        );
        assert_eq!(
            sparse(serde_json::json!({"moe_layer_interval": 2, "moe_layer_end_index": 4})),
            [false, true, false, true, false, false]
        );
        assert_eq!(
            sparse(serde_json::json!({"moe_layer_start_index": 0, "moe_layer_end_index": -1})),
            [true; 6]
        );
    }
}
