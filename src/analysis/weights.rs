//! Layers of a weights-only checkpoint (safetensors): tensors grouped by name prefix and classified
//! by name and shape. Without a graph there are no activations or MACs, and the report says so.

use std::collections::BTreeMap;

use super::{Format, Layer, MemReport, Totals};
use crate::ir::Dim;
use crate::load::safetensors::{WeightTensor, Weights};

/// Tensors that are state, not trainable parameters, by their last name component.
const BUFFER_NAMES: &[&str] = &[
    "running_mean",
    "running_var",
    "num_batches_tracked",
    "position_ids",
    "inv_freq",
    "masked_bias",
    "token_type_ids",
];

fn is_buffer(t: &WeightTensor) -> bool {
    let last = t.name.rsplit('.').next().unwrap_or(&t.name);
    !t.dtype.is_float() || BUFFER_NAMES.contains(&last)
        // GPT-2's causal mask is stored as `attn.bias` with 4 dims
        || (last == "bias" && t.shape.len() == 4 && t.name.contains("attn"))
}

/// The layer a tensor belongs to: its name without the last component.
fn layer_of(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(prefix, _)| prefix)
}

/// What kind of layer a group of tensors is, from names and the weight's rank.
fn classify(name: &str, tensors: &[&WeightTensor]) -> &'static str {
    let lower = name.to_ascii_lowercase();
    let has = |suffix: &str| tensors.iter().any(|t| t.name.ends_with(suffix));
    if has(".running_mean") || has(".running_var") {
        return "BatchNorm";
    }
    let weight = tensors.iter().find(|t| t.name.ends_with("weight"));
    let Some(w) = weight else {
        return if tensors.iter().all(|t| is_buffer(t)) {
            "Buffer"
        } else {
            "Parameter"
        };
    };
    let embed = [
        "embed",
        "wte",
        "wpe",
        "tok_embeddings",
        "embedding",
        "shared",
    ];
    match w.shape.len() {
        5 => "Conv3d",
        4 => "Conv2d",
        3 => "Conv1d",
        2 if embed.iter().any(|e| lower.contains(e)) => "Embedding",
        2 => "Linear",
        1 if ["norm", "ln", "bn"].iter().any(|n| lower.contains(n)) => "Norm",
        1 => "Norm/Scale",
        _ => "Parameter",
    }
}

/// Splits a name into text and number chunks so that `layers.2` sorts before `layers.10`.
fn natural_key(s: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            let mut num = c.to_digit(10).unwrap_or(0) as u64;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                num = num.saturating_mul(10).saturating_add(d as u64);
                chars.next();
            }
            out.push((std::mem::take(&mut text), num));
        } else {
            text.push(c);
        }
    }
    out.push((text, u64::MAX));
    out
}

/// Builds the per-layer report of a weights checkpoint.
pub fn analyze(w: &Weights) -> MemReport {
    let mut groups: BTreeMap<&str, Vec<&WeightTensor>> = BTreeMap::new();
    for t in &w.tensors {
        groups.entry(layer_of(&t.name)).or_default().push(t);
    }
    let mut names: Vec<&str> = groups.keys().copied().collect();
    names.sort_by_cached_key(|n| natural_key(n));
    let mut totals = Totals::default();
    let mut layers = Vec::with_capacity(names.len());
    for name in names {
        let mut tensors = groups[name].clone();
        tensors.sort_by_cached_key(|t| (!t.name.ends_with("weight"), natural_key(&t.name)));
        let mut layer = Layer::of_tensors(
            name.to_string(),
            classify(name, &tensors).to_string(),
            tensors
                .iter()
                .map(|t| Some(t.shape.iter().map(|&d| Dim::known(d as i64)).collect()))
                .collect(),
        );
        for t in &tensors {
            if is_buffer(t) {
                layer.buffers += t.numel();
                layer.buffer_bytes += t.bytes();
            } else {
                layer.params += t.numel();
                layer.param_bytes += t.bytes();
            }
        }
        totals.params += layer.params;
        totals.param_bytes += layer.param_bytes;
        totals.buffers += layer.buffers;
        totals.buffer_bytes += layer.buffer_bytes;
        layers.push(layer);
    }
    // a pipeline's loader says what it read and what is out of scope
    let mut notes = if w.notes.is_empty() {
        vec![
            "weights only: activations, MACs and the inference peak need a graph (run nnlint on an ONNX export)".to_string(),
        ]
    } else {
        w.notes.clone()
    };
    if w.shards.len() > 1 {
        notes.push(format!("{} shards", w.shards.len()));
    }
    MemReport {
        model: w.path.display().to_string(),
        format: Format::Safetensors,
        batch: None,
        dims: BTreeMap::new(),
        layers: layers.into(),
        totals,
        unknown_ops: Vec::new(),
        peak: None,
        peak_missing: Some("a weights file has no graph".into()),
        unbound: Vec::new(),
        unaccounted: Vec::new(),
        notes,
        warnings: w.warnings.clone(),
        branches: Vec::new(),
        training: None,
        llm: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn t(name: &str, dtype: DType, shape: &[u64]) -> WeightTensor {
        WeightTensor {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
            shard: 0,
        }
    }

    #[test]
    fn groups_and_classifies() {
        let w = Weights {
            path: "m.safetensors".into(),
            shards: vec!["m.safetensors".into()],
            tensors: vec![
                t("features.10.weight", DType::F32, &[128, 64, 3, 3]),
                t("features.2.weight", DType::F32, &[64]),
                t("features.2.bias", DType::F32, &[64]),
                t("features.2.running_mean", DType::F32, &[64]),
                t("features.2.running_var", DType::F32, &[64]),
                t("features.2.num_batches_tracked", DType::I64, &[]),
                t("classifier.weight", DType::BF16, &[10, 128]),
                t("embed_tokens.weight", DType::F16, &[1000, 64]),
            ],
            warnings: vec![],
            notes: vec![],
        };
        let r = analyze(&w);
        let layers = r.layers.to_vec();
        let ops: Vec<(&str, &str)> = layers.iter().map(|l| (l.name.as_str(), &*l.op)).collect();
        assert_eq!(
            ops,
            [
                ("classifier", "Linear"),
                ("embed_tokens", "Embedding"),
                ("features.2", "BatchNorm"),
                ("features.10", "Conv2d"),
            ]
        );
        let bn = &layers[2];
        assert_eq!((bn.params, bn.buffers), (128, 129));
        assert_eq!(bn.buffer_bytes, 64 * 4 * 2 + 8);
        assert_eq!(r.totals.params, 128 * 64 * 9 + 128 + 1280 + 64000);
        assert_eq!(
            r.totals.param_bytes,
            128 * 64 * 9 * 4 + 128 * 4 + 1280 * 2 + 64000 * 2
        );
    }
}
