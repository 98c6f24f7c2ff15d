//! Stage 3, analysis: shapes, per-layer costs, stored-tensor roles and the inference peak, gathered into a
//! [`MemReport`] that every output format renders.

pub mod fact;
pub mod fit;
pub mod memory;
pub mod ops;
pub mod saved;
pub mod shape;
pub mod storage;
pub mod training;
pub mod weights;

use std::collections::BTreeMap;

use crate::error::Result;
use crate::ir::{Attr, Dim, Graph, Model, NodeId};
use fact::Fact;
use memory::PeakError;
pub use shape::{Bindings, Inference};
use storage::Role;

/// The file format a report was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Onnx,
    Safetensors,
}

/// Per-layer and total memory and compute of a model.
#[derive(Clone, Debug)]
pub struct MemReport {
    pub model: String,
    pub format: Format,
    pub batch: Option<u64>,
    /// Every bound symbolic dimension.
    pub dims: BTreeMap<String, i64>,
    pub layers: Vec<Layer>,
    pub totals: Totals,
    pub unknown_ops: Vec<UnknownOp>,
    pub peak: Option<PeakInfo>,
    /// Why the peak is missing, when it is.
    pub peak_missing: Option<String>,
    /// Symbols still unbound in some size.
    pub unbound: Vec<String>,
    /// Layers whose outputs nnlint could not size.
    pub unaccounted: Vec<String>,
    pub notes: Vec<String>,
    pub warnings: Vec<String>,
    /// The training-memory estimate, with `--train`.
    pub training: Option<training::Training>,
}

/// One row: a node of the graph, or a group of tensors of a weights file.
#[derive(Clone, Debug)]
pub struct Layer {
    pub name: String,
    pub op: String,
    /// Output shapes (`None` where unknown). For weights files, the shapes of the stored tensors.
    pub output_shapes: Vec<Option<Vec<Dim>>>,
    pub params: u64,
    pub param_bytes: u64,
    pub buffers: u64,
    pub buffer_bytes: u64,
    /// Bytes of the outputs; `None` when some output's size is unknown (or there is no graph).
    pub activation_bytes: Option<Dim>,
    /// Multiply-accumulates; `None` when not computable.
    pub macs: Option<Dim>,
    /// A shape computation whose outputs are all folded to constants.
    pub folded: bool,
    /// With `--train`: bytes this layer saves for backward (storages charged to their first saver).
    pub saved_bytes: Option<u64>,
    /// With `--train`: bytes of this layer's parameter gradients.
    pub gradient_bytes: Option<u64>,
}

/// Totals over the model.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub params: u64,
    pub param_bytes: u64,
    pub buffers: u64,
    pub buffer_bytes: u64,
    pub constants: u64,
    pub constant_bytes: u64,
    /// Sum of every layer's output bytes that are known; `None` without a graph.
    pub activation_bytes: Option<Dim>,
    pub inference_peak_bytes: Option<u64>,
    pub macs: Option<Dim>,
}

/// An op nnlint could not account for, with the nodes that use it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UnknownOp {
    pub op: String,
    pub domain: String,
    pub nodes: Vec<String>,
}

/// Where the inference peak happens.
#[derive(Clone, Debug)]
pub struct PeakInfo {
    pub node: Option<String>,
    /// Largest live tensors at the peak: name and bytes.
    pub live: Vec<(String, u64)>,
}

fn op_label(domain: &str, op: &str) -> String {
    if domain.is_empty() || domain == "ai.onnx" {
        op.to_string()
    } else {
        format!("{domain}.{op}")
    }
}

/// Stored tensors of a graph and its subgraphs, classified, with the node each is charged to.
struct StoredTensor {
    role: Role,
    numel: u64,
    bytes: u64,
    /// The first node reading it (top-level graph), or the node holding the subgraph.
    node: Option<NodeId>,
}

fn stored_tensors(graph: &Graph, holder: Option<NodeId>, out: &mut Vec<StoredTensor>) {
    for (id, t) in graph.initializers() {
        let numel = t.numel().unwrap_or(0);
        let first_use = graph.values[id].consumers.iter().map(|&(n, _)| n).min();
        out.push(StoredTensor {
            role: storage::classify(graph, id, t.dtype, numel),
            numel,
            bytes: t.byte_size().unwrap_or(0),
            node: holder.or(first_use),
        });
    }
    for (n, node) in graph.nodes.iter().enumerate() {
        if node.op_type == "Constant" {
            if let (Some(v), Some(Attr::Tensor(t))) = (node.output(0), node.attrs.get("value")) {
                let numel = t.numel().unwrap_or(0);
                let first_use = graph.values[v].consumers.iter().map(|&(n, _)| n).min();
                out.push(StoredTensor {
                    role: storage::classify(graph, v, t.dtype, numel),
                    numel,
                    bytes: t.byte_size().unwrap_or(0),
                    node: holder.or(first_use),
                });
            } else if let Some((numel, bytes)) =
                scalar_constant_size(node.attrs.0.first().map(|(_, a)| a))
            {
                out.push(StoredTensor {
                    role: Role::Constant,
                    numel,
                    bytes,
                    node: holder.or(Some(n)),
                });
            }
        }
        for (_, sub) in node.attrs.subgraphs() {
            stored_tensors(sub, Some(holder.unwrap_or(n)), out);
        }
    }
}

/// Element count and bytes of a `Constant` given as `value_float(s)` / `value_int(s)`.
fn scalar_constant_size(attr: Option<&Attr>) -> Option<(u64, u64)> {
    Some(match attr? {
        Attr::Float(_) => (1, 4),
        Attr::Int(_) => (1, 8),
        Attr::Floats(v) => (v.len() as u64, 4 * v.len() as u64),
        Attr::Ints(v) => (v.len() as u64, 8 * v.len() as u64),
        _ => return None,
    })
}

/// Loads and analyses a model file for `nnlint mem` (an ONNX graph, or a weights file), with a
/// training plan for `--train`.
pub fn analyze_path(
    path: &std::path::Path,
    bindings: &Bindings,
    train: Option<&training::TrainConfig>,
) -> Result<MemReport> {
    match crate::load::load(path)? {
        crate::load::Loaded::Onnx(model) => analyze(&model, bindings, train),
        crate::load::Loaded::Weights(w) => {
            let mut r = weights::analyze(&w);
            if bindings.batch.is_some() || !bindings.dims.is_empty() {
                r.notes
                    .push("--batch and --dim have no effect on a weights-only file".into());
            }
            Ok(r)
        }
    }
}

/// Analyses an ONNX model: shapes, costs, stored tensors and the inference peak, and with a
/// training plan, the memory of a training step.
pub fn analyze(
    model: &Model,
    bindings: &Bindings,
    train: Option<&training::TrainConfig>,
) -> Result<MemReport> {
    let inf = shape::infer(model, bindings)?;
    if train.is_some() {
        inf.require_bound(model, "the training estimate")?;
    }
    Ok(report(model, &inf, train))
}

/// Builds the report from a finished shape inference (so callers that need both infer once).
pub fn report(model: &Model, inf: &Inference, train: Option<&training::TrainConfig>) -> MemReport {
    let graph = &model.graph;
    let is_static = memory::folded_values(graph);
    let mut rows: Vec<Option<Layer>> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(n, node)| {
            if node.op_type == "Constant" {
                return None;
            }
            let outs: Vec<&Fact> = node
                .outputs
                .iter()
                .flatten()
                .map(|&v| &inf.facts[v])
                .collect();
            let activation_bytes = outs
                .iter()
                .map(|f| f.bytes())
                .collect::<Option<Vec<Dim>>>()
                .and_then(|b| Dim::sum(&b));
            let opaque = inf.opaque.contains(&n);
            let computed_once = node.outputs.iter().flatten().all(|&v| is_static[v]);
            Some(Layer {
                name: node.name.clone(),
                op: op_label(&node.domain, &node.op_type),
                output_shapes: outs.iter().map(|f| f.shape.clone()).collect(),
                params: 0,
                param_bytes: 0,
                buffers: 0,
                buffer_bytes: 0,
                activation_bytes,
                macs: inf.macs[n].clone(),
                saved_bytes: None,
                gradient_bytes: None,
                folded: !opaque
                    && !outs.is_empty()
                    && (computed_once || outs.iter().all(|f| f.value.is_some())),
            })
        })
        .collect();

    let mut totals = Totals::default();
    let mut stored = Vec::new();
    stored_tensors(graph, None, &mut stored);
    for t in &stored {
        let (count, bytes) = match t.role {
            Role::Param => (&mut totals.params, &mut totals.param_bytes),
            Role::Buffer => (&mut totals.buffers, &mut totals.buffer_bytes),
            Role::Constant => (&mut totals.constants, &mut totals.constant_bytes),
        };
        *count = count.saturating_add(t.numel);
        *bytes = bytes.saturating_add(t.bytes);
        if let Some(row) = t.node.and_then(|n| rows[n].as_mut()) {
            match t.role {
                Role::Param => {
                    row.params = row.params.saturating_add(t.numel);
                    row.param_bytes = row.param_bytes.saturating_add(t.bytes);
                }
                Role::Buffer => {
                    row.buffers = row.buffers.saturating_add(t.numel);
                    row.buffer_bytes = row.buffer_bytes.saturating_add(t.bytes);
                }
                Role::Constant => {}
            }
        }
    }

    let training = train.map(|cfg| training::estimate(graph, inf, cfg));
    if let Some(t) = &training {
        for (n, row) in rows.iter_mut().enumerate() {
            if let Some(row) = row {
                row.saved_bytes = Some(t.per_node[n].0);
                row.gradient_bytes = Some(t.per_node[n].1);
            }
        }
    }
    let layers: Vec<Layer> = rows.into_iter().flatten().collect();
    // folded rows (shape computations, weight transposes) run once at load: not activations
    let known_acts: Vec<Dim> = layers
        .iter()
        .filter(|l| !l.folded)
        .filter_map(|l| l.activation_bytes.clone())
        .collect();
    totals.activation_bytes = Dim::sum(&known_acts);
    let known_macs: Vec<Dim> = layers.iter().filter_map(|l| l.macs.clone()).collect();
    totals.macs = Dim::sum(&known_macs);
    let unaccounted: Vec<String> = layers
        .iter()
        .filter(|l| l.activation_bytes.is_none())
        .map(|l| l.name.clone())
        .collect();

    let mut unknown: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for &n in &inf.opaque {
        let node = &graph.nodes[n];
        unknown
            .entry((node.domain.clone(), node.op_type.clone()))
            .or_default()
            .push(node.name.clone());
    }
    let unknown_ops = unknown
        .into_iter()
        .map(|((domain, op), nodes)| UnknownOp { op, domain, nodes })
        .collect();

    let (peak, peak_missing) = match memory::inference_peak(graph, &inf.facts) {
        Ok(p) => {
            totals.inference_peak_bytes = Some(p.bytes);
            let info = PeakInfo {
                node: p.at.map(|n| graph.nodes[n].name.clone()),
                live: p
                    .live
                    .iter()
                    .take(5)
                    .map(|&(v, b)| (graph.values[v].name.clone(), b))
                    .collect(),
            };
            (Some(info), None)
        }
        Err(PeakError::Symbolic(syms)) => (
            None,
            Some(format!(
                "sizes depend on unbound dimensions ({}): bind them with --dim NAME=V",
                syms.join(", ")
            )),
        ),
    };

    let mut unbound: Vec<String> = layers
        .iter()
        .filter_map(|l| l.activation_bytes.as_ref())
        .flat_map(|d| d.symbols())
        .map(|s| s.to_string())
        .collect();
    unbound.sort();
    unbound.dedup();

    let mut warnings = model.warnings.clone();
    for (n, msg) in &inf.invalid {
        warnings.push(format!("node {}: {msg}", graph.nodes[*n].label()));
    }
    warnings.extend(inf.mismatches.iter().cloned());

    MemReport {
        model: model.path.display().to_string(),
        format: Format::Onnx,
        batch: inf.batch,
        dims: inf.bound.clone(),
        layers,
        totals,
        unknown_ops,
        peak,
        peak_missing,
        unbound,
        unaccounted,
        notes: inf.notes.clone(),
        warnings,
        training,
    }
}
