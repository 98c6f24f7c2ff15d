//! `duplicate-initializer` (NL304): byte-identical initializers stored more than once. Only tensors
//! with an equal-typed, equal-shaped twin are read, so the cost stays proportional to the duplicates.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use serde::Deserialize;

use super::{options, Finding, LintContext, Rule, Saving};
use crate::ir::{DType, Tensor, TensorData, TypedData};
use crate::util::units::bytes;

pub struct DuplicateInitializer;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    /// Smallest initializer size compared.
    min_bytes: u64,
}

/// The file external data was last read from, kept open for the next tensor (most live in one
/// file: the model's own, for the payloads loading left there).
type OpenFile = Option<(std::sync::Arc<std::path::Path>, std::fs::File)>;

/// The tensor's bytes (raw data, the external range, or the typed fields' values). `None` when
/// they cannot be read.
fn tensor_bytes(t: &Tensor, open: &mut OpenFile) -> Option<Vec<u8>> {
    match &t.data {
        TensorData::Raw(b) => Some(b.to_vec()),
        TensorData::External(e) => {
            use std::io::{Read, Seek, SeekFrom};
            if open.as_ref().is_none_or(|(p, _)| *p != e.path) {
                *open = Some((e.path.clone(), std::fs::File::open(&e.path).ok()?));
            }
            let (_, f) = open.as_mut()?;
            f.seek(SeekFrom::Start(e.offset)).ok()?;
            let mut buf = vec![0u8; usize::try_from(e.length).ok()?];
            f.read_exact(&mut buf).ok()?;
            Some(buf)
        }
        // typed fields (`float_data`, ...): each element's little-endian bytes in its field's type.
        // Equal dtype and shape give equal lengths, so equal bytes mean equal values.
        TensorData::Typed(typed) => Some(match typed {
            TypedData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TypedData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TypedData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TypedData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TypedData::U64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }),
        TensorData::Empty | TensorData::Unavailable(_) => None,
    }
}

/// A cheap key for equal bytes: the length, both ends and 64 words spread over the middle. Tensors
/// with equal keys are compared in full, so the key only has to separate most different tensors
/// (hashing every byte with SipHash cost 60% of `lint` on a model of 30 same-shaped convolutions).
fn fingerprint(data: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data.len().hash(&mut h);
    let ends = 256.min(data.len());
    data[..ends].hash(&mut h);
    data[data.len() - ends..].hash(&mut h);
    let step = (data.len() / 64).max(8);
    for chunk in data.chunks(step) {
        chunk[..8.min(chunk.len())].hash(&mut h);
    }
    h.finish()
}

impl Rule for DuplicateInitializer {
    fn name(&self) -> &'static str {
        "duplicate-initializer"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL304-duplicate-initializer")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        options::<Options>(self.meta(), user).map(|_| ())
    }

    fn check(&self, cx: &LintContext, user: &toml::Table) -> Result<Vec<Finding>, String> {
        let o: Options = options(self.meta(), user)?;
        let meta = self.meta();
        let g = cx.graph();
        let mut by_shape: HashMap<(DType, Vec<u64>), Vec<usize>> = HashMap::new();
        for (id, t) in g.initializers() {
            if t.byte_size().unwrap_or(0) >= o.min_bytes {
                by_shape
                    .entry((t.dtype, t.dims.to_vec()))
                    .or_default()
                    .push(id);
            }
        }
        let mut groups: Vec<Vec<usize>> = by_shape.into_values().filter(|v| v.len() > 1).collect();
        // the rule compares bytes: without them it cannot say the tensors differ
        let unavailable: Vec<&str> = groups
            .iter()
            .flatten()
            .filter_map(|&id| g.values[id].init.as_deref()?.unavailable())
            .collect();
        if let Some(why) = unavailable.first() {
            return Err(format!(
                "needs the weight bytes, and {} candidate initializers have none ({why})",
                unavailable.len()
            ));
        }
        groups.sort();
        let mut out = Vec::new();
        let mut open: OpenFile = None;
        for group in groups {
            // the tensors seen so far by fingerprint; bytes are read again for a fingerprint
            // that recurs (holding every tensor's bytes held a graph's weights whole: 24 MB for
            // the 66,678 small weights of a 100,000-node graph)
            let mut by_content: HashMap<u64, Vec<usize>> = HashMap::new();
            for id in group {
                let t = g.values[id].init.as_deref().expect("initializers only");
                let Some(data) = tensor_bytes(t, &mut open) else {
                    continue;
                };
                let entry = by_content.entry(fingerprint(&data)).or_default();
                let same = entry.iter().copied().find(|&seen| {
                    let t = g.values[seen].init.as_deref().expect("initializers only");
                    tensor_bytes(t, &mut open).is_some_and(|d| d == data)
                });
                match same {
                    Some(first) => {
                        let b = t.byte_size().unwrap_or(0);
                        out.push(Finding {
                            code: &meta.code,
                            rewrite: None,
                            name: &meta.name,
                            severity: meta.severity,
                            node: g.value_name(id).to_string(),
                            op: "initializer".into(),
                            message: format!(
                                "initializer '{}' {:?} is byte-identical to '{}': {} stored twice",
                                g.value_name(id),
                                t.dims,
                                g.value_name(first),
                                bytes(b)
                            ),
                            measured: b as f64,
                            limit: o.min_bytes as f64,
                            unit: "bytes",
                            fix: format!(
                                "read '{}' in both places and drop the copy",
                                g.value_name(first)
                            ),
                            saving: Saving {
                                params: None,
                                bytes: Some(b),
                                macs: None,
                                training_bytes: None,
                            },
                        });
                    }
                    None => entry.push(id),
                }
            }
        }
        Ok(out)
    }
}
