//! The language models of Qwen2-VL, Qwen2.5-VL (`qwen2_vl_text`, `qwen2_5_vl_text`: Qwen2 with
//! q/k/v biases) and Qwen3-VL (`qwen3_vl_text`: Qwen3 with per-head q/k norms), which their
//! wrappers keep in `text_config`. What differs from the text-only families is M-RoPE: positions
//! are [3, B, S] (temporal, height, width), so the rotary tables the blocks keep for backward
//! have a row per sequence (`apply_multimodal_rotary_pos_emb`; measured: cos and sin saved as
//! [B, 1, S, head_dim] where Qwen2 saves [1, 1, S, head_dim]).
//! transformers: `models/qwen2_5_vl/modeling_qwen2_5_vl.py`, `models/qwen3_vl/modeling_qwen3_vl.py`.

use super::GgufKeys;
use serde_json::Map;
use serde_json::Value;

use super::super::arch::{decoder, Arch, ConfigError};

pub fn build(outer: &Value, c: &Value, model_type: &str) -> Result<Arch, ConfigError> {
    let base = if model_type.starts_with("qwen3") {
        "qwen3"
    } else {
        "qwen2"
    };
    let mut a = decoder(outer, c, base)?;
    a.model_type = model_type.to_string();
    a.rotary_per_sequence = true;
    Ok(a)
}
/// GGUF (`qwen2vl`, `qwen3vl`: the text halves; the vision tower is the separate mmproj file):
/// the M-RoPE sections.
pub fn gguf(k: &GgufKeys, c: &mut Map<String, Value>, _layers: u64) {
    let sections: Vec<u64> = match k.0.arch_key("rope.dimension_sections") {
        Some(crate::load::gguf::Meta::Array(_, v)) => v.iter().take(3).map(|&x| x as u64).collect(),
        _ => return,
    };
    let mut rope = serde_json::json!({"rope_type": "default", "mrope_section": sections});
    if let Some(f) = c.get("partial_rotary_factor") {
        rope["partial_rotary_factor"] = f.clone();
    }
    c.insert("rope_parameters".into(), rope);
}
