//! Stage 3, analysis: shapes, per-layer costs, stored-tensor roles and the inference peak, gathered into a
//! [`MemReport`] that every output format renders.

pub mod export_mode;
pub mod fact;
pub mod fit;
pub mod llm;
pub mod memory;
pub mod ops;
pub mod plan;
mod rows;
pub mod saved;
pub mod shape;
pub mod step;
pub mod storage;
pub mod training;
pub mod weights;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::error::Result;
use crate::ir::{Attr, Dim, Graph, Model, NodeId};
use memory::PeakError;
use rows::{GraphRows, RowOf, RowParts};
pub use rows::{LayerRef, Layers, OutputShapes};
pub use shape::{Bindings, Inference};
use storage::Role;

/// The file format a report was made from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Onnx,
    Safetensors,
    /// A Hugging Face checkpoint folder.
    Checkpoint,
    Gguf,
}

/// Per-layer and total memory and compute of a model.
#[derive(Clone, Debug)]
pub struct MemReport {
    pub model: String,
    pub format: Format,
    pub batch: Option<u64>,
    /// Every bound symbolic dimension.
    pub dims: BTreeMap<String, i64>,
    pub layers: Layers,
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
    /// Every `If` the totals go through: which branch they count, and why.
    pub branches: Vec<BranchNote>,
    /// The training-memory estimate, with `--train`.
    pub training: Option<training::Training>,
    /// Language-model checkpoints: architecture, KV cache and inference memory.
    pub llm: Option<llm::LlmInfo>,
}

/// One row: a node of the graph, or a group of tensors of a weights file.
#[derive(Clone, Debug)]
pub struct Layer {
    pub name: String,
    /// The op type (`domain.Type` outside the default domain): the node's own interned text for
    /// a registered op, not a copy per row.
    pub op: crate::ir::Sym,
    /// Output shapes (`None` where unknown). For weights files, the shapes of the stored tensors.
    pub output_shapes: Vec<Option<Box<[Dim]>>>,
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
    /// 0 for the main graph; 1 and more for the nodes of a control-flow node's subgraphs, listed
    /// under it (their costs are in its row already: totals add depth-0 rows only).
    pub depth: u32,
    /// For a subgraph's node: `If_0.then_branch`, and whether that branch runs.
    pub branch: Option<Box<str>>,
    /// In a branch that does not run (at any depth): listed, never counted.
    pub skipped: bool,
}

impl Layer {
    /// A row of stored tensors (a weights file, a checkpoint): no graph, so no outputs yet.
    pub fn of_tensors(name: String, op: String, output_shapes: Vec<Option<Box<[Dim]>>>) -> Layer {
        Layer {
            name,
            op: op.into(),
            output_shapes,
            params: 0,
            param_bytes: 0,
            buffers: 0,
            buffer_bytes: 0,
            activation_bytes: None,
            macs: None,
            folded: false,
            saved_bytes: None,
            gradient_bytes: None,
            depth: 0,
            branch: None,
            skipped: false,
        }
    }
}

/// Which branch of an `If` the totals count, and why.
#[derive(Clone, Debug)]
pub struct BranchNote {
    /// The `If`, after the branches that hold it when it is nested (`If_0.then_branch > If_1`).
    pub node: String,
    /// The branch the totals count: `then_branch` or `else_branch`.
    pub counted: String,
    /// Whether it is the branch that runs; `false`: the condition depends on input values and
    /// the larger branch is counted (the totals then say so).
    pub decided: bool,
    /// What decided it.
    pub reason: BranchReason,
    /// The graph inputs the condition is computed from: for `condition`, those whose value
    /// `--value` gives, else those whose shape it reads; for `larger`, those whose values it reads.
    pub inputs: Vec<String>,
    /// Each branch's MACs and activations for one run of the `If`.
    pub costs: Vec<(String, Option<Dim>, Option<Dim>)>,
    /// The reason in words.
    pub why: String,
}

crate::named_enum! {
    /// What decided which branch of an `If` is counted.
    pub enum BranchReason {
        /// The condition folds: from the input shapes, constants or `--value`.
        Condition = "condition",
        /// The condition is not known, but the other branch cannot run at these input shapes.
        Shapes = "shapes",
        /// The condition depends on input values: the larger branch is counted.
        Larger = "larger",
    }
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
    /// Which totals leave something out (they are then lower bounds), and what.
    pub lower: LowerBounds,
}

/// Why totals are lower bounds: what nnlint could not account for. A total that leaves layers
/// out is never shown as if it were the whole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LowerBounds {
    /// Layers whose output bytes are unknown (left out of the activations and the peak).
    pub layers_without_size: usize,
    /// Layers whose MACs are unknown (left out of the total).
    pub layers_without_macs: usize,
    /// Stored tensors whose element count is unknown (left out of the parameters).
    pub tensors_without_size: usize,
    /// Control-flow nodes whose branch is not known (the larger branch is counted).
    pub undecided_branches: usize,
    /// `Loop`s and `Scan`s whose trip count is not known (their body is counted once).
    pub unknown_trip_counts: usize,
    /// Of those, the ones whose body has MACs, and whose body has activations (any other count
    /// of runs gives the other totals).
    pub unknown_trips_with_macs: usize,
    pub unknown_trips_with_bytes: usize,
}

impl LowerBounds {
    pub fn activations(&self) -> bool {
        self.layers_without_size > 0 || self.unknown_trips_with_bytes > 0
    }
    pub fn macs(&self) -> bool {
        self.layers_without_macs > 0 || self.unknown_trips_with_macs > 0
    }
    pub fn params(&self) -> bool {
        self.tensors_without_size > 0
    }
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
    /// The liveness curve: each node of the main graph in topological order, with the bytes live
    /// while it runs (the peak is its maximum).
    pub curve: Curve,
}

/// The liveness curve: the bytes live at each step (each node of the main graph in topological
/// order), and the names of the steps a drawing of it shows (the report page's hover labels).
/// A drawing shows at most [`Curve::POINTS`] points, each the most live of [`Curve::per_point`]
/// consecutive steps: only those steps' names are kept, and those of the steps at the peak (a
/// graph of 100,000 nodes held a copy of every node's name here, 4 MiB at `mem`'s peak).
#[derive(Clone, Debug, Default)]
pub struct Curve {
    bytes: Vec<u64>,
    /// The steps whose names are kept, ascending; `names` holds their names in the same order.
    named: Vec<usize>,
    names: crate::util::lists::Texts,
}

impl Curve {
    /// Most points a drawing of the curve shows.
    pub const POINTS: usize = 2000;

    /// The curve of `bytes` per step, with the names (`name(step)`) of each point's most live
    /// step (the first of equals) and of every step at `peak`.
    pub fn new<'a>(bytes: Vec<u64>, peak: u64, name: impl Fn(usize) -> &'a str) -> Curve {
        let per_point = bytes.len().div_ceil(Self::POINTS).max(1);
        let mut named = Vec::new();
        for (g, group) in bytes.chunks(per_point).enumerate() {
            let first = g * per_point;
            let most = first + Self::most(group);
            named.extend((first..first + group.len()).filter(|&k| k == most || bytes[k] == peak));
        }
        let mut names = crate::util::lists::Texts::with_capacity(named.len(), 0);
        for &k in &named {
            names.push(name(k));
        }
        Curve {
            bytes,
            named,
            names,
        }
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// How many consecutive steps a point of a drawing stands for.
    pub fn per_point(&self) -> usize {
        self.len().div_ceil(Self::POINTS).max(1)
    }

    /// The bytes live at each step.
    pub fn bytes(&self) -> &[u64] {
        &self.bytes
    }

    /// Step `i`'s node name, where it is kept (a point's most live step, a step at the peak).
    pub fn name(&self, i: usize) -> Option<&str> {
        self.named.binary_search(&i).ok().map(|j| self.names.get(j))
    }

    /// The points of a drawing, in order: each one's most live step, that step's name and its
    /// bytes.
    pub fn points(&self) -> impl Iterator<Item = (usize, &str, u64)> + '_ {
        let per_point = self.per_point();
        self.bytes
            .chunks(per_point)
            .enumerate()
            .map(move |(g, group)| {
                let most = Self::most(group);
                let k = g * per_point + most;
                (k, self.name(k).unwrap_or_default(), group[most])
            })
    }

    /// The position of a group's most live step, the first of equals.
    fn most(group: &[u64]) -> usize {
        (0..group.len())
            .reduce(|a, b| if group[b] > group[a] { b } else { a })
            .unwrap_or(0)
    }
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
    /// Whether its size is known (a count of 0 for an unknown one is a lower bound).
    known: bool,
    numel: u64,
    bytes: u64,
    /// The first node reading it (top-level graph), or the node holding the subgraph.
    node: Option<NodeId>,
}

fn stored_tensors(graph: &Graph, holder: Option<NodeId>, out: &mut dyn FnMut(StoredTensor)) {
    // what the exporter's metadata says the model has and the file does not store
    for (n, params, buffers, elem) in storage::implied(graph) {
        for (role, numel) in [(Role::Param, params), (Role::Buffer, buffers)] {
            if numel > 0 {
                out(StoredTensor {
                    role,
                    known: true,
                    numel,
                    bytes: numel.saturating_mul(elem),
                    node: holder.or(Some(n)),
                });
            }
        }
    }
    for (id, t) in graph.initializers() {
        let numel = t
            .numel()
            .map(|n| storage::logical_numel(graph, id, t.dtype, n));
        let first_use = storage::charged_node(graph, id);
        let role = storage::classify(graph, id, t.dtype, numel.unwrap_or(0));
        let shared = (role == Role::Param)
            .then(|| storage::shared_readers(graph, id, t))
            .flatten();
        if let Some(readers) = shared {
            // one stored tensor standing for each reader's own parameter: charged to each
            for n in readers {
                out(StoredTensor {
                    role,
                    known: numel.is_some() && t.byte_size().is_some(),
                    numel: numel.unwrap_or(0),
                    bytes: t.byte_size().unwrap_or(0),
                    node: holder.or(Some(n)),
                });
            }
            continue;
        }
        out(StoredTensor {
            role,
            known: numel.is_some() && t.byte_size().is_some(),
            numel: numel.unwrap_or(0),
            bytes: t.byte_size().unwrap_or(0),
            node: holder.or(first_use),
        });
    }
    for (n, node) in graph.nodes.iter().enumerate() {
        if node.op_type == "Constant" {
            if let (Some(v), Some(Attr::Tensor(t))) = (node.output(0), node.attrs.get("value")) {
                let numel = t.numel();
                let first_use = storage::charged_node(graph, v);
                out(StoredTensor {
                    role: storage::classify(graph, v, t.dtype, numel.unwrap_or(0)),
                    known: numel.is_some() && t.byte_size().is_some(),
                    numel: numel.unwrap_or(0),
                    bytes: t.byte_size().unwrap_or(0),
                    node: holder.or(first_use),
                });
            } else if let Some((numel, bytes)) =
                scalar_constant_size(node.attrs.0.first().map(|(_, a)| a))
            {
                out(StoredTensor {
                    role: Role::Constant,
                    known: true,
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
    analyze_path_with(path, bindings, train, None)
}

/// [`analyze_path`] with the options of language-model checkpoints (`--seq`, `--kv-dtype`,
/// `--attn`, `--lora`, `--qlora`); `None` for their defaults. The batch comes from `bindings`.
pub fn analyze_path_with(
    path: &std::path::Path,
    bindings: &Bindings,
    train: Option<&training::TrainConfig>,
    llm_options: Option<&llm::LlmOptions>,
) -> Result<MemReport> {
    analyze_loaded_with(
        path,
        &crate::load::load(path)?,
        bindings,
        train,
        llm_options,
    )
}

/// [`analyze_path`] on a file already loaded (`nnlint report` reuses the graph for lint and fit).
pub fn analyze_loaded(
    path: &std::path::Path,
    loaded: &crate::load::Loaded,
    bindings: &Bindings,
    train: Option<&training::TrainConfig>,
) -> Result<MemReport> {
    analyze_loaded_with(path, loaded, bindings, train, None)
}

/// [`analyze_loaded`] with the options of language-model checkpoints.
pub fn analyze_loaded_with(
    path: &std::path::Path,
    loaded: &crate::load::Loaded,
    bindings: &Bindings,
    train: Option<&training::TrainConfig>,
    llm_options: Option<&llm::LlmOptions>,
) -> Result<MemReport> {
    let llm_opts = || {
        let mut o = llm_options.cloned().unwrap_or_default();
        o.batch = bindings.batch.unwrap_or(1);
        o
    };
    match loaded {
        crate::load::Loaded::Checkpoint(ck) => llm::analyze_checkpoint(ck, &llm_opts(), train),
        crate::load::Loaded::Gguf(g) => llm::analyze_gguf(g, &llm_opts(), train),
        crate::load::Loaded::Onnx(model) => analyze(model, bindings, train),
        crate::load::Loaded::Weights(_) if train.is_some() => Err(crate::Error::refused(
            path,
            "is a weights-only file (safetensors): --train needs a graph (the activations saved for backward); pass the model exported to ONNX",
        )),
        crate::load::Loaded::Weights(w) => {
            let mut r = weights::analyze(w);
            if bindings.batch.is_some() || !bindings.dims.is_empty() {
                r.notes
                    .push("--batch and --dim have no effect on a weights-only file".into());
            }
            Ok(r)
        }
    }
}

/// What is folded in one graph (the main graph or a subgraph), and what is computed from the values
/// `--value` gives: those are known to the analysis but are runtime tensors all the same.
struct Frame<'a> {
    graph: &'a Graph,
    /// Folded once the input shapes are known (weights, shape arithmetic; in a subgraph, also
    /// what it computes from the folded values of the graphs around it).
    is_static: Vec<bool>,
    /// Computed from a `--value` input.
    given: Vec<bool>,
    parent: Option<&'a Frame<'a>>,
}

impl<'a> Frame<'a> {
    fn main(graph: &'a Graph, inf: &Inference) -> Frame<'a> {
        Frame {
            graph,
            is_static: memory::folded_values(graph),
            given: memory::reached_from(graph, &|name| inf.values.contains_key(name)),
            parent: None,
        }
    }

    fn sub(&'a self, graph: &'a Graph) -> Frame<'a> {
        Frame {
            graph,
            is_static: memory::folded_values_within(graph, &|name| self.lookup(name, true)),
            given: memory::reached_from(graph, &|name| self.lookup(name, false)),
            parent: Some(self),
        }
    }

    /// Whether the value called `name` here or in an enclosing graph is static (`true`) or
    /// computed from a given value (`false`).
    fn lookup(&self, name: &str, is_static: bool) -> bool {
        match self.graph.value_by_name(name) {
            Some(v) if !self.graph.values[v].outer() => {
                if is_static {
                    self.is_static[v]
                } else {
                    self.given[v]
                }
            }
            _ => self.parent.is_some_and(|p| p.lookup(name, is_static)),
        }
    }
}

/// Whether node `n` is a `Constant`, which has no row (its tensor is counted as stored).
fn is_constant(inf: &Inference, n: NodeId) -> bool {
    matches!(inf.ops.get(n), Some(ops::Op::Constant(_)))
}

/// Which nodes of the inference's graph are `Constant`s (they have no row).
fn constants(inf: &Inference) -> Vec<bool> {
    let mut c = Vec::with_capacity(inf.ops.len());
    c.extend(inf.ops.iter().map(|op| matches!(op, ops::Op::Constant(_))));
    c
}

/// What the row of one node holds besides its name and shapes: its op, its outputs' bytes, its
/// MACs (parameters are added after); `None` for a `Constant` (`constant`), which has no row.
fn row_parts(
    node: &crate::ir::Node,
    n: NodeId,
    constant: bool,
    inf: &Inference,
    f: &Frame,
) -> Option<RowParts> {
    let is_static = &f.is_static;
    if constant {
        return None;
    }
    let outs = || node.outputs().values().map(|v| &inf.facts[v]);
    // unknown when any output's size is (then nothing is added), or the sum overflows
    let activation_bytes = outs().try_fold(Dim::ZERO, |sum, f| sum.checked_add(&f.bytes()?));
    // sorted (the walk goes in node order): a graph of 100k unknown ops stays linear
    let opaque = inf.opaque.binary_search(&n).is_ok();
    let computed_once = node.outputs().values().all(|v| is_static[v]);
    Some(RowParts {
        op: match ops::def_of(node) {
            // the registry's name is the node's op type in the default domain
            Some(def) if def.domain.is_empty() => node.op_type.clone(),
            _ => op_label(&node.domain, &node.op_type).into(),
        },
        activation_bytes,
        macs: inf.macs[n].clone(),
        // a value known because it is computed from a `--value` input still runs
        folded: !opaque
            && outs().next().is_some()
            && (computed_once
                || (outs().all(|f| f.value.is_some())
                    && node.outputs().values().all(|v| !f.given[v]))),
    })
}

/// A node's outputs' shapes, one per output it names.
fn output_shapes<'a>(
    node: &'a crate::ir::Node,
    inf: &'a Inference,
) -> impl Iterator<Item = Option<Box<[Dim]>>> + 'a {
    node.outputs()
        .iter()
        .flatten()
        .map(|v| inf.facts[v].shape.clone())
}

/// The row of one node of a subgraph, as a `Layer` ([`row_parts`]), with its outputs' shapes.
fn row(
    node: &crate::ir::Node,
    n: NodeId,
    constant: bool,
    inf: &Inference,
    f: &Frame,
    depth: u32,
) -> Option<Layer> {
    let p = row_parts(node, n, constant, inf, f)?;
    Some(Layer {
        name: f.graph.name(node.name).to_string(),
        op: p.op,
        // exactly one slot per output (`flatten` gives no size hint: a row held four)
        output_shapes: {
            let mut shapes = Vec::with_capacity(node.outputs().len());
            shapes.extend(output_shapes(node, inf));
            shapes
        },
        params: 0,
        param_bytes: 0,
        buffers: 0,
        buffer_bytes: 0,
        activation_bytes: p.activation_bytes,
        macs: p.macs,
        saved_bytes: None,
        gradient_bytes: None,
        folded: p.folded,
        depth,
        branch: None,
        skipped: false,
    })
}

/// The subgraph of `node` held in attribute `attr`.
fn branch_graph<'a>(node: &'a crate::ir::Node, attr: &str) -> Option<&'a Graph> {
    node.attrs
        .subgraphs()
        .find(|(a, _)| *a == attr)
        .map(|(_, g)| g)
}

/// Bytes a subgraph's nodes produce in one run of its node: the outputs of every node that is not
/// folded, times the runs (the branch that runs; the larger of two undecided ones).
fn branch_activations(node: &crate::ir::Node, bs: &[shape::Branch], up: &Frame) -> Option<Dim> {
    let known: Vec<Dim> = each_branch_activations(node, bs, up)
        .into_iter()
        .filter(|(b, _)| b.runs != Some(false))
        .map(|(_, d)| d)
        .collect::<Option<_>>()?;
    if bs.iter().any(|b| b.runs.is_none()) {
        return known
            .into_iter()
            .max_by_key(|d| d.as_i64().unwrap_or(i64::MAX));
    }
    Dim::sum(&known)
}

/// The bytes each branch's nodes produce in one run of `node` (whether it runs or not).
fn each_branch_activations<'b>(
    node: &crate::ir::Node,
    bs: &'b [shape::Branch],
    up: &Frame,
) -> Vec<(&'b shape::Branch, Option<Dim>)> {
    let mut parts = Vec::new();
    for b in bs {
        let Some(g) = branch_graph(node, &b.attr) else {
            parts.push((b, None));
            continue;
        };
        let frame = up.sub(g);
        let mut sum = Some(Dim::ZERO);
        for (n, sub) in g.nodes.iter().enumerate() {
            let Some(r) = row(
                sub,
                n,
                is_constant(&b.inference, n),
                &b.inference,
                &frame,
                1,
            ) else {
                continue;
            };
            let mut bytes = if r.folded {
                Some(Dim::ZERO)
            } else {
                r.activation_bytes
            };
            if let Some(inner) = b.inference.branches.get(&n) {
                bytes = bytes
                    .zip(branch_activations(sub, inner, &frame))
                    .and_then(|(a, c)| a.checked_add(&c));
            }
            sum = sum.zip(bytes).and_then(|(a, c)| a.checked_add(&c));
        }
        let times = i64::try_from(b.times.unwrap_or(1)).ok().map(Dim::known);
        parts.push((b, sum.zip(times).and_then(|(s, t)| s.checked_mul(&t))));
    }
    parts
}

/// What [`branch_notes`] finds: the `If`s, and the loops of unknown trip count (the note, and
/// whether the body has MACs and activations).
#[derive(Default)]
struct Found {
    branches: Vec<BranchNote>,
    loops: Vec<(String, bool, bool)>,
}

/// Which branch each `If` counts and why, for the graph and the subgraphs of it that run (an `If`
/// inside a branch that does not run is not listed). `given`: the `--value`s.
fn branch_notes(
    graph: &Graph,
    inf: &Inference,
    up: &Frame,
    path: &str,
    given: &BTreeMap<String, i64>,
    scalars: &std::collections::BTreeSet<String>,
    out: &mut Found,
) {
    use crate::util::units::{bytes, count};
    for (&n, bs) in &inf.branches {
        let node = &graph.nodes[n];
        if let Some(shape::Choice::UnknownTrips { values }) = inf.choices.get(&n) {
            let nonzero = |d: Option<Dim>| d.is_none_or(|d| d != Dim::ZERO);
            let has_macs = bs.iter().any(|b| nonzero(b.macs()));
            let has_bytes = each_branch_activations(node, bs, up)
                .into_iter()
                .any(|(_, a)| nonzero(a));
            let text = format!(
                "{path}{}: trip count unknown{}: its body is counted once, so the totals are lower bounds{}",
                graph.name(node.name),
                if values.is_empty() {
                    String::new()
                } else {
                    format!(" (it depends on the value of {})", values.join(", "))
                },
                match values.first() {
                    Some(v) => format!("; --value {v}=N gives it"),
                    None => String::new(),
                }
            );
            out.loops.push((text, has_macs, has_bytes));
        } else if let Some(choice) = inf.choices.get(&n) {
            let acts = each_branch_activations(node, bs, up);
            let costs: Vec<(String, Option<Dim>, Option<Dim>)> = acts
                .into_iter()
                .map(|(b, a)| (b.attr.clone(), b.macs(), a))
                .collect();
            let show = |d: &Option<Dim>, f: fn(u64) -> String| match d {
                Some(d) => d.as_u64().map_or_else(|| d.to_string(), f),
                None => "?".into(),
            };
            let by_size = |(_, m, a): &&(String, Option<Dim>, Option<Dim>)| {
                let k = |d: &Option<Dim>| {
                    d.as_ref()
                        .map_or(i64::MAX, |d| d.as_i64().unwrap_or(i64::MAX))
                };
                (k(m), k(a))
            };
            let taken = bs.iter().find(|b| b.runs == Some(true)).map(|b| &b.attr);
            // undecided: the larger (by MACs, then activations; the first on a tie)
            let larger = costs
                .iter()
                .rev()
                .max_by_key(by_size)
                .map(|c| c.0.clone())
                .unwrap_or_default();
            let counted = taken.cloned().unwrap_or(larger);
            let other = if counted == "then_branch" {
                "else_branch"
            } else {
                "then_branch"
            };
            let (reason, inputs, why) = match choice {
                shape::Choice::Condition {
                    value,
                    values,
                    shapes,
                } => {
                    let why = if !values.is_empty() {
                        let with: Vec<String> = values
                            .iter()
                            .map(|v| match given.get(v) {
                                Some(x) => format!("--value {v}={x}"),
                                None => format!("the value of {v}"),
                            })
                            .collect();
                        format!("its condition is {value} with {}", with.join(" "))
                    } else if !shapes.is_empty() {
                        format!(
                            "its condition is {value} at these input shapes (it reads the shape of {})",
                            shapes.join(", ")
                        )
                    } else {
                        format!("its condition is the constant {value}")
                    };
                    let inputs = if values.is_empty() { shapes } else { values };
                    (BranchReason::Condition, inputs.clone(), why)
                }
                shape::Choice::Consistent { branch, why } => {
                    let other = if branch == "then_branch" {
                        "else_branch"
                    } else {
                        "then_branch"
                    };
                    (
                        BranchReason::Shapes,
                        Vec::new(),
                        format!(
                            "its condition is not known, but the {other} cannot run at these input shapes ({why})"
                        ),
                    )
                }
                shape::Choice::Undecided { values, shapes } => {
                    let (m, a) = costs
                        .iter()
                        .find(|c| c.0 == other)
                        .map(|c| (show(&c.1, count), show(&c.2, bytes)))
                        .unwrap_or_default();
                    let scalar: Vec<&String> =
                        values.iter().filter(|v| scalars.contains(*v)).collect();
                    let depends = if values.is_empty() && !shapes.is_empty() {
                        format!(
                            "its condition depends on the shape of {}, not fully bound (--dim or --input binds it)",
                            shapes.join(", ")
                        )
                    } else if values.is_empty() {
                        "its condition is computed from values known only at run time".to_string()
                    } else if scalar.len() == values.len() {
                        format!(
                            "its condition depends on the value of {}",
                            values.join(", ")
                        )
                    } else {
                        format!(
                            "its condition depends on the contents of {}",
                            values.join(", ")
                        )
                    };
                    let hint = if scalar.is_empty() {
                        String::new()
                    } else {
                        format!("; --value {}=V counts the branch that runs", scalar[0])
                    };
                    (
                        BranchReason::Larger,
                        values.clone(),
                        format!(
                            "{depends}: the larger branch is counted; the {other} has {m} MACs and {a} of activations{hint}"
                        ),
                    )
                }
                // handled above
                shape::Choice::UnknownTrips { .. } => continue,
            };
            out.branches.push(BranchNote {
                node: format!("{path}{}", graph.name(node.name)),
                counted: counted.clone(),
                decided: taken.is_some(),
                reason,
                inputs,
                costs,
                why,
            });
        }
        // the Ifs inside the branches that run (or may run)
        for b in bs.iter().filter(|b| b.runs != Some(false)) {
            if let Some(g) = branch_graph(node, &b.attr) {
                let frame = up.sub(g);
                let inner = format!("{path}{}.{} > ", graph.name(node.name), b.attr);
                branch_notes(g, &b.inference, &frame, &inner, given, scalars, out);
            }
        }
    }
}

/// Inconsistent nodes and declared-shape disagreements, in the graph and its subgraphs (named by
/// their path: `If_0.else_branch/Conv_3`).
fn subgraph_warnings(graph: &Graph, inf: &Inference, path: &str, out: &mut Vec<String>) {
    for (n, msg) in &inf.invalid {
        out.push(format!(
            "node {path}{}: {msg}",
            graph.label(&graph.nodes[*n])
        ));
    }
    for m in &inf.mismatches {
        out.push(if path.is_empty() {
            m.clone()
        } else {
            format!("{path}{m}")
        });
    }
    for (&n, bs) in &inf.branches {
        let node = &graph.nodes[n];
        // a branch that does not run (its condition is known, or its nodes cannot run with
        // these shapes) has nothing to warn about
        for b in bs.iter().filter(|b| b.runs != Some(false)) {
            if let Some(g) = branch_graph(node, &b.attr) {
                let inner = format!("{path}{}.{}/", graph.name(node.name), b.attr);
                subgraph_warnings(g, &b.inference, &inner, out);
            }
        }
    }
}

/// The rows of a control-flow node's subgraphs, after its own.
fn branch_rows(
    node: &crate::ir::Node,
    bs: &[shape::Branch],
    depth: u32,
    up: &Frame,
    skipped: bool,
    out: &mut Vec<Layer>,
) {
    for b in bs {
        let Some(g) = branch_graph(node, &b.attr) else {
            continue;
        };
        let frame = up.sub(g);
        let label = format!(
            "{}.{}{}",
            up.graph.name(node.name),
            b.attr,
            match (b.runs, b.times) {
                (Some(false), _) => " (not taken)".to_string(),
                (None, _) => " (one of two)".to_string(),
                (Some(true), Some(t)) if t != 1 => format!(" (x{t})"),
                (Some(true), None) => " (trip count unknown: counted once)".to_string(),
                _ => String::new(),
            }
        );
        for (n, sub) in g.nodes.iter().enumerate() {
            if let Some(mut r) = row(
                sub,
                n,
                is_constant(&b.inference, n),
                &b.inference,
                &frame,
                depth,
            ) {
                let skip = skipped || b.runs == Some(false);
                r.branch = Some(label.as_str().into());
                r.skipped = skip;
                out.push(r);
                if let Some(inner) = b.inference.branches.get(&n) {
                    branch_rows(sub, inner, depth + 1, &frame, skip, out);
                }
            }
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
    let mut inf = shape::infer(model, bindings)?;
    if train.is_some() {
        inf.require_bound(model, "the training estimate")?;
    }
    let report = checked_report_with(model, &mut Inferred::Owned(&mut inf), train);
    // the facts' array and what the rows did not take, before the report is written
    let freed = std::mem::size_of_val(inf.facts.as_slice());
    drop(inf);
    crate::util::pages::give_back_freed(freed);
    report
}

/// The inference a report is built from: borrowed (the caller uses it after), or given up, when
/// the rows take their output shapes from it instead of copying them (on a graph of 100,000 nodes,
/// 5 MiB at the peak of `mem` and two allocations per row).
enum Inferred<'a> {
    Shared(&'a Inference),
    Owned(&'a mut Inference),
}

impl Inferred<'_> {
    fn get(&self) -> &Inference {
        match self {
            Inferred::Shared(inf) => inf,
            Inferred::Owned(inf) => inf,
        }
    }

    fn is_shared(&self) -> bool {
        matches!(self, Inferred::Shared(_))
    }
}

/// [`report`], refusing bindings whose sizes overflow 64-bit arithmetic (an error naming the
/// node, never a total that silently wraps or drops the layer).
pub fn checked_report(
    model: &Model,
    inf: &Inference,
    train: Option<&training::TrainConfig>,
) -> Result<MemReport> {
    checked_report_with(model, &mut Inferred::Shared(inf), train)
}

fn checked_report_with(
    model: &Model,
    inferred: &mut Inferred,
    train: Option<&training::TrainConfig>,
) -> Result<MemReport> {
    let inf = inferred.get();
    let batch = inf.batch;
    let too_large = |what: String| {
        crate::Error::graph(
            &model.path,
            format!(
                "{what} overflow 64-bit arithmetic at batch {}: bind a smaller batch or dimension",
                batch.map_or("?".into(), |b| b.to_string())
            ),
        )
    };
    if let Some(&n) = inf.overflow.first() {
        return Err(too_large(format!(
            "node {}: its output sizes or MACs",
            model.graph.label(&model.graph.nodes[n])
        )));
    }
    if let Some(cfg) = train {
        training::check_range(&model.graph, inf, cfg)
            .map_err(|m| crate::Error::graph(&model.path, m))?;
    }
    crate::ir::take_overflow();
    let r = report_with(model, inferred, train);
    if crate::ir::take_overflow() {
        return Err(too_large("the model's totals".into()));
    }
    Ok(r)
}

/// Builds the report from a finished shape inference (so callers that need both infer once).
pub fn report(model: &Model, inf: &Inference, train: Option<&training::TrainConfig>) -> MemReport {
    report_with(model, &mut Inferred::Shared(inf), train)
}

fn report_with(
    model: &Model,
    inferred: &mut Inferred,
    train: Option<&training::TrainConfig>,
) -> MemReport {
    let constants = constants(inferred.get());
    if let (Inferred::Owned(inf), None) = (&mut *inferred, train) {
        // what the rows do not read goes before them: the ops (the rows need only which nodes are
        // constants, above; a training estimate reads them all) and the initializers' folded
        // values (the rows read only whether a node's outputs were folded). On a graph of 100,000
        // nodes, 4 MiB and 4.7 MiB held through the rows, which were the peak of `mem`.
        inf.ops = Arc::from([]);
        for (v, value) in model.graph.values.iter().enumerate() {
            if value.init.is_some() && value.producer().is_none() {
                if let Some(f) = inf.facts.get_mut(v) {
                    f.value = None;
                }
            }
        }
    }
    let (mut report, layer_of) = report_rows(
        model,
        inferred.get(),
        train,
        inferred.is_shared(),
        true,
        &constants,
    );
    if let Inferred::Owned(inf) = inferred {
        // every reading of the inference is done, and it is freed after this: its ops, MACs and
        // folded values go first, before the rows take their outputs' shapes (the peak of `mem` on
        // a graph of 100,000 nodes was there, with all of them held)
        inf.ops = Arc::from([]);
        inf.macs = Vec::new();
        // the facts become their shapes in place (the folded values dropped on the way): held
        // rows take theirs out, compact rows read them by value id
        let facts = std::mem::take(&mut inf.facts);
        let bytes = std::mem::size_of_val(facts.as_slice());
        let mut shapes: Vec<Option<Box<[Dim]>>> = facts.into_iter().map(|f| f.shape).collect();
        shapes.shrink_to_fit();
        crate::util::pages::give_back_freed(
            bytes.saturating_sub(std::mem::size_of_val(shapes.as_slice())),
        );
        let graph = &model.graph;
        report
            .layers
            .take_shapes(&layer_of, |n| graph.nodes[n].outputs(), shapes);
    }
    report
}

/// The report, and for each node of the main graph, its row's index in the layers (`None`: no row).
/// With `copy_shapes` false, those rows' output shapes are left empty for the caller to fill. With
/// `compact` false, the main graph's rows are held as `Layer`s (as for a graph too large for
/// compact rows).
fn report_rows(
    model: &Model,
    inf: &Inference,
    train: Option<&training::TrainConfig>,
    copy_shapes: bool,
    compact: bool,
    constants: &[bool],
) -> (MemReport, RowOf) {
    let graph = &model.graph;
    // before the rows: the replay's arrays and the rows are not held at once (heaptrack put the
    // heap's peak of `mem` on a graph of 100,000 nodes in the replay, beside the rows)
    let inference_peak = memory::inference_peak(graph, &inf.facts);
    if !copy_shapes {
        // the inference is given up (`report_with`): what it freed before the rows (its ops, the
        // initializers' folded values) and the replay's arrays go back to the system before the
        // rows' arrays are made (with the purges after the load and after the analysis, the peak
        // of `mem` on a graph of 100,000 nodes 78.4 → 70.5 MiB)
        crate::util::pages::give_back_freed(
            graph.nodes.len() * std::mem::size_of::<ops::Op>()
                + graph.values.len() * std::mem::size_of::<u64>(),
        );
    }
    let frame = Frame::main(graph, inf);
    // the rows of the main graph's nodes, compact (names read from the graph's), found by node
    // through `row_of` (a row per node but the `Constant`s, which have none)
    let constant = |n: NodeId| constants.get(n).copied().unwrap_or(false);
    let constant_count = (0..graph.nodes.len()).filter(|&n| constant(n)).count();
    let outputs = graph.nodes.iter().map(|n| n.outputs().len()).sum();
    let mut rows = compact
        .then(|| {
            GraphRows::new(
                graph.names(),
                graph.nodes.len() - constant_count,
                outputs,
                copy_shapes,
            )
        })
        .flatten();
    let mut held: Vec<Layer> = Vec::new();
    let mut row_of = RowOf::with_capacity(graph.nodes.len());
    for (n, node) in graph.nodes.iter().enumerate() {
        let Some(parts) = row_parts(node, n, constant(n), inf, &frame) else {
            row_of.push(None);
            continue;
        };
        match &mut rows {
            Some(rows) => {
                row_of.push(Some(rows.len()));
                rows.push(
                    node.name,
                    parts,
                    // left to the caller to move in, when not copied
                    copy_shapes
                        .then(|| output_shapes(node, inf))
                        .into_iter()
                        .flatten(),
                );
            }
            // a graph too large for compact rows
            None => {
                row_of.push(Some(held.len()));
                held.extend(row(node, n, constant(n), inf, &frame, 0));
            }
        }
    }
    let mut rows: Layers = match rows {
        Some(rows) => rows.into(),
        None => held.into(),
    };
    // a control-flow node's row carries what its subgraphs compute
    for (&n, branches) in &inf.branches {
        if let Some(a) = row_of.get(n).and_then(|i| rows.activation_mut(i)) {
            *a = a
                .take()
                .zip(branch_activations(&graph.nodes[n], branches, &frame))
                .and_then(|(a, b)| a.checked_add(&b));
        }
    }
    let mut totals = Totals::default();
    // a row for each initializer and constant at most (more only where a shared parameter is
    // charged to each of its readers, and then the list grows)
    rows.reserve_stored(graph.initializers().count() + constant_count);
    // each stored tensor is counted as it is found (a list of them was 5 MiB at the peak of `mem`
    // on a graph of 100,000 nodes)
    stored_tensors(graph, None, &mut |t| {
        if !t.known && t.role != Role::Constant {
            totals.lower.tensors_without_size += 1;
        }
        let (count, bytes) = match t.role {
            Role::Param => (&mut totals.params, &mut totals.param_bytes),
            Role::Buffer => (&mut totals.buffers, &mut totals.buffer_bytes),
            Role::Constant => (&mut totals.constants, &mut totals.constant_bytes),
        };
        *count = count.saturating_add(t.numel);
        *bytes = bytes.saturating_add(t.bytes);
        let slot = match t.role {
            Role::Param => 0,
            Role::Buffer => 2,
            Role::Constant => return,
        };
        if let Some(sizes) = t
            .node
            .and_then(|n| row_of.get(n))
            .and_then(|i| rows.stored_mut(i))
        {
            *sizes[slot] = sizes[slot].saturating_add(t.numel);
            *sizes[slot + 1] = sizes[slot + 1].saturating_add(t.bytes);
        }
    });

    let training = train.map(|cfg| training::estimate(graph, inf, cfg));
    if let Some(t) = &training {
        rows.set_train(&row_of, &t.per_node);
    }
    let layers: Layers = if inf.branches.is_empty() {
        rows
    } else {
        let rows = rows.into_held();
        // each control-flow node's subgraph rows follow its own
        let mut node_of = vec![0; rows.len()];
        for (n, i) in row_of.iter().enumerate() {
            if let Some(i) = i {
                node_of[i] = n;
            }
        }
        let mut layers = Vec::with_capacity(rows.len());
        for (r, n) in rows.into_iter().zip(node_of) {
            // the row's index among the layers, for the caller
            row_of.set(n, layers.len());
            layers.push(r);
            if let Some(bs) = inf.branches.get(&n) {
                branch_rows(&graph.nodes[n], bs, 1, &frame, false, &mut layers);
            }
        }
        layers.into()
    };
    // one pass over the rows, summed as they come (two lists of the known values were 4 MiB at
    // the peak of `mem` on a graph of 100,000 nodes): the totals add the main graph's rows (a
    // subgraph's are in its node's), and folded rows (shape computations, weight transposes) run
    // once at load: not activations
    let (mut acts, mut macs) = (Some(Dim::ZERO), Some(Dim::ZERO));
    let mut unaccounted: Vec<String> = Vec::new();
    let mut unbound: Vec<String> = Vec::new();
    for l in layers.iter() {
        if let Some(d) = l.activation_bytes {
            unbound.extend(d.bindable_symbols().into_iter().map(|s| s.to_string()));
        } else if !l.skipped {
            unaccounted.push(l.name.to_string());
        }
        if l.depth != 0 {
            continue;
        }
        if !l.folded {
            match l.activation_bytes {
                Some(d) => acts = acts.and_then(|a| a.checked_add(d)),
                None => totals.lower.layers_without_size += 1,
            }
        }
        match l.macs {
            Some(m) => macs = macs.and_then(|a| a.checked_add(m)),
            None => totals.lower.layers_without_macs += 1,
        }
    }
    totals.activation_bytes = acts;
    totals.macs = macs;
    unbound.sort();
    unbound.dedup();
    totals.lower.undecided_branches = inf
        .branches
        .values()
        .filter(|bs| bs.iter().any(|b| b.runs.is_none()))
        .count();

    let mut unknown: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for &n in &inf.opaque {
        let node = &graph.nodes[n];
        unknown
            .entry((node.domain.to_string(), node.op_type.to_string()))
            .or_default()
            .push(graph.name(node.name).to_string());
    }
    let unknown_ops = unknown
        .into_iter()
        .map(|((domain, op), nodes)| UnknownOp { op, domain, nodes })
        .collect();

    let (peak, peak_missing) = match inference_peak {
        Ok(p) => {
            totals.inference_peak_bytes = Some(p.bytes);
            let info = PeakInfo {
                node: p.at.map(|n| graph.name(graph.nodes[n].name).to_string()),
                live: p
                    .live
                    .iter()
                    .take(5)
                    .map(|&(v, b)| (graph.value_name(v).to_string(), b))
                    .collect(),
                curve: {
                    let mut bytes = p.curve;
                    bytes.truncate(graph.nodes.len());
                    Curve::new(bytes, p.bytes, |i| graph.name(graph.nodes[i].name))
                },
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

    let mut warnings = model.warnings.clone();
    subgraph_warnings(graph, inf, "", &mut warnings);
    let mut found = Found::default();
    // the graph inputs that hold one element: those `--value` can give
    let scalars = graph
        .inputs
        .iter()
        .filter(|&&v| {
            inf.facts[v]
                .numel()
                .and_then(|d| d.as_i64())
                .is_some_and(|k| k == 1)
        })
        .map(|&v| graph.value_name(v).to_string())
        .collect();
    branch_notes(graph, inf, &frame, "", &inf.values, &scalars, &mut found);
    let Found { branches, loops } = found;
    totals.lower.unknown_trip_counts = loops.len();
    totals.lower.unknown_trips_with_macs = loops.iter().filter(|l| l.1).count();
    totals.lower.unknown_trips_with_bytes = loops.iter().filter(|l| l.2).count();
    let mut notes = inf.notes.clone();
    notes.extend(loops.into_iter().map(|l| l.0));
    notes.extend(storage::notes(graph));

    (
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
            notes,
            warnings,
            branches,
            training,
            llm: None,
        },
        row_of,
    )
}

#[cfg(test)]
mod rows_tests {
    use super::*;

    fn fixture(path: &str) -> Model {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/models")
            .join(path);
        crate::load::onnx::load(&path).unwrap()
    }

    /// Every row, as text: `Layer` has no `PartialEq` (its `Dim`s compare by value there too).
    fn rows(r: &MemReport) -> Vec<String> {
        r.layers
            .iter()
            .map(|l| format!("{:?}", l.to_layer()))
            .collect()
    }

    /// A graph's compact rows, read in any order, and made whole, are the
    /// rows held as `Layer`s: with copied and with moved shapes, with and without `--train`,
    /// with multi-output nodes, unknown shapes, stored tensors and control-flow subgraphs.
    #[test]
    fn compact_rows_are_the_held_rows() {
        let cfg = training::TrainConfig::default();
        for (path, train, dims) in [
            ("torch/tiny_transformer.onnx", None, &[] as &[(&str, i64)]),
            ("torch/minicnn.onnx", Some(&cfg), &[][..]),
            ("training/gpt2_sdpa.onnx", Some(&cfg), &[("seq", 8)]),
            ("branches/if_sample_rate.onnx", None, &[][..]),
            ("branches/loop_steps_input.onnx", Some(&cfg), &[][..]),
            ("branches/quantized_ops.onnx", None, &[][..]),
            ("ops/lstm_bidirectional.onnx", None, &[][..]),
            ("ops/split_num_outputs_uneven_opset18.onnx", None, &[][..]),
            ("ops/dynamicquantizelinear.onnx", None, &[][..]),
            (
                "ops/dropout_ratio_training_mode_mask.onnx",
                Some(&cfg),
                &[][..],
            ),
            ("ops/topk_axis_last.onnx", None, &[][..]),
        ] {
            let model = fixture(path);
            let bindings = Bindings {
                dims: dims.iter().map(|&(d, v)| (d.to_string(), v)).collect(),
                ..Bindings::default()
            };
            let inf = shape::infer(&model, &bindings).unwrap();
            let constants = super::constants(&inf);
            let (held, held_of) = report_rows(&model, &inf, train, true, false, &constants);
            let (compact, compact_of) = report_rows(&model, &inf, train, true, true, &constants);
            assert_eq!(held_of, compact_of, "{path}");
            let want = rows(&held);
            assert!(!want.is_empty(), "{path}");
            assert_eq!(rows(&compact), want, "{path}");
            assert_eq!(
                format!("{:?}", compact.totals),
                format!("{:?}", held.totals)
            );
            assert_eq!(compact.unaccounted, held.unaccounted, "{path}");
            // rows out of order, and made whole
            for i in (0..want.len()).rev() {
                assert_eq!(format!("{:?}", compact.layers.get(i).to_layer()), want[i]);
            }
            let made: Vec<String> = compact
                .layers
                .to_vec()
                .iter()
                .map(|l| format!("{l:?}"))
                .collect();
            assert_eq!(made, want, "{path}");
            // the shapes moved out of an inference given up are the ones copied; without
            // `--train`, its ops and its initializers' folded values go before the rows: rows and
            // totals are the same (constants have no row, folded rows stay folded)
            let moved = analyze(&model, &bindings, train).unwrap();
            assert_eq!(rows(&moved), want, "{path}");
            assert_eq!(
                format!("{:?}", moved.totals),
                format!("{:?}", held.totals),
                "{path}"
            );
            assert_eq!(moved.unaccounted, held.unaccounted, "{path}");
        }
    }
}

#[cfg(test)]
mod curve_tests {
    use super::Curve;

    /// The points are what the report page drew from every step's name before: each group of
    /// `per_point` consecutive steps shows its most live step (the first of equals), by name;
    /// every step at the peak keeps its name; no other name is held.
    #[test]
    fn a_curve_keeps_the_names_a_drawing_shows() {
        let mut seed = 7u64;
        for len in [0usize, 1, 5, 1999, 2000, 2001, 4500, 10_007] {
            let bytes: Vec<u64> = (0..len)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (seed >> 33) % 50 // many ties
                })
                .collect();
            let peak = bytes.iter().copied().max().unwrap_or(0);
            let names: Vec<String> = (0..len).map(|i| format!("node{i}")).collect();
            let c = Curve::new(bytes.clone(), peak, |i| names[i].as_str());
            let per_point = len.div_ceil(2000).max(1);
            assert_eq!(c.per_point(), per_point);
            let want: Vec<(usize, &str, u64)> = (0..len.div_ceil(per_point))
                .map(|g| {
                    let k = (g * per_point..((g + 1) * per_point).min(len))
                        .reduce(|a, b| if bytes[b] > bytes[a] { b } else { a })
                        .unwrap();
                    (k, names[k].as_str(), bytes[k])
                })
                .collect();
            assert_eq!(c.points().collect::<Vec<_>>(), want, "{len} steps");
            assert!(c.points().count() <= Curve::POINTS);
            let mut kept = 0;
            for k in 0..len {
                let shown = want.iter().any(|w| w.0 == k);
                if bytes[k] == peak || shown {
                    assert_eq!(c.name(k), Some(names[k].as_str()), "step {k}");
                    kept += 1;
                } else {
                    assert_eq!(c.name(k), None, "step {k}");
                }
            }
            assert_eq!(c.named.len(), kept);
            assert_eq!(c.bytes(), &bytes[..]);
        }
    }
}
