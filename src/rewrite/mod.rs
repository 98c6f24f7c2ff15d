//! Stage 5, rewrites: the fixes the lint rules propose, applied to the model's protobuf.
//!
//! A rewrite replaces a few nodes by new ones that compute the same output value (the value's name
//! is kept, so every consumer is untouched), with weights initialised from the original's:
//!
//! - [`depthwise`]: a standard convolution becomes a depthwise one and a 1x1 one, from a
//!   per-input-channel SVD of the kernel (Network Decoupling, Guo et al. 2018);
//! - [`gap_head`]: Flatten → Gemm over a C x H x W map becomes GlobalAveragePool → Flatten → Gemm
//!   with the weight summed over H x W;
//! - [`low_rank`]: a Gemm or MatMul with a 2-D weight becomes two, from a truncated SVD.
//!
//! Planning reads the IR (shapes, weights); [`apply`] edits the compact protobuf the loader produced
//! (weights still in the input file, referenced, never copied) and [`emit`] streams it to disk.
//! Every rewrite is recorded in the output's metadata (`nnlint.rewrites`) so that `nnlint verify`
//! can later check the two models against each other.

pub mod depthwise;
pub mod emit;
pub mod gap_head;
pub mod low_rank;
pub mod text;

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::analysis::fact::Fact;
use crate::analysis::ops::conv::{AutoPad, WindowAttrs};
use crate::analysis::ops::linalg::Gemm;
use crate::analysis::ops::Op;
use crate::ir::{DType, Dim, Graph, Model, Node, NodeId, Tensor, ValueId, Values};
use crate::load::onnx_pb as pb;
use crate::rules::{Finding, Fix, Plan};
use crate::util::glob::glob_match;

pub use crate::rules::fix::{Applied, RewriteKind, Safety, METADATA_KEY};

/// The rank a factorising rewrite keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum RankChoice {
    /// `--rank N` (clamped to the full rank).
    Fixed(u64),
    /// `--rank full`: the exact decomposition.
    Full,
    /// `--energy E`: the smallest rank keeping this share of the squared singular values.
    Energy(f64),
    /// Neither: the rank the finding proposes (1 for convolutions, the MobileNet block; half the
    /// break-even rank, or the energy rank with `spectrum = true`, for linear layers).
    Default,
}

/// Options shared by every rewrite.
#[derive(Clone, Debug)]
pub struct Options {
    pub rank: RankChoice,
    /// Seed of the randomized SVD's sketch.
    pub seed: u64,
    /// The least safe rewrite to apply: [`Safety::Exact`] by default (a rewrite that changes the
    /// model's output is planned, then skipped with the way to ask for it), [`Safety::Approximate`]
    /// when `--rank N` or `--energy E` asks for a truncated factorisation, [`Safety::Lossy`] with
    /// `--lossy`.
    pub allow: Safety,
}

/// How far a safety level is from the same function: what `--lossy` and `--rank` widen.
fn loss(s: Safety) -> u8 {
    match s {
        Safety::Exact => 0,
        Safety::Approximate => 1,
        Safety::Lossy => 2,
    }
}

/// Why a rewrite of this safety is not applied under `allow`, and how to ask for it.
fn refused(p: &Planned, allow: Safety) -> Option<String> {
    let s = p.record.safety;
    if loss(s) <= loss(allow) {
        return None;
    }
    let what = match (s, p.record.rank) {
        (Safety::Lossy, _) => {
            "a lossy rewrite: it changes the model's output (fine-tune after it)".to_string()
        }
        (_, Some(r)) => format!(
            "rank {r} is below the full rank: it changes the model's output (fine-tune after it)"
        ),
        _ => {
            "an approximate rewrite: it changes the model's output (fine-tune after it)".to_string()
        }
    };
    let ask = if s == Safety::Lossy {
        "pass --lossy to apply it"
    } else {
        "pass --lossy (or --rank N, --energy E) to apply it, or --rank full for the exact decomposition"
    };
    Some(format!("{what}; {ask}"))
}

/// A tensor a rewrite creates, encoded in its element type.
#[derive(Clone, Debug)]
pub struct NewTensor {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<u64>,
    pub data: Vec<u8>,
}

/// A planned rewrite: the record, the nodes and tensors to add, and its accounting.
#[derive(Clone, Debug)]
pub struct Planned {
    pub record: Applied,
    /// Nodes of the original graph this replaces.
    pub removed: Vec<NodeId>,
    pub nodes: Vec<pb::NodeProto>,
    pub tensors: Vec<NewTensor>,
    /// New intermediate values, for `value_info`.
    pub values: Vec<(String, DType, Vec<Dim>)>,
    /// Initializers the replaced nodes read (dropped when nothing else reads them).
    pub released: Vec<String>,
    /// Share of the squared singular values kept (factorisations).
    pub energy_kept: Option<f64>,
    /// A remark for the report (a rank that saves nothing, an exactness condition...).
    pub note: Option<String>,
}

/// A finding that could not be rewritten, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    pub rule: String,
    pub node: String,
    pub reason: String,
    /// Set when the rewrite was planned but not applied because it would change the output
    /// (`approximate` or `lossy`) and was not asked for (`--lossy`, `--rank N`, `--energy E`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub safety: Option<Safety>,
}

/// What a rewrite builder sees.
pub struct Cx<'a> {
    pub model: &'a Model,
    /// Facts with the batch left symbolic (for `value_info`).
    pub facts: &'a [Fact],
    /// Every node's typed op.
    pub ops: &'a [Op],
    pub options: &'a Options,
    pub names: &'a mut Names,
}

impl<'a> Cx<'a> {
    pub fn graph(&self) -> &'a Graph {
        &self.model.graph
    }

    /// The stored weight behind an input: an initializer or a `Constant` node's tensor.
    pub fn init(&self, v: ValueId) -> Option<&'a Tensor> {
        self.model.graph.stored(v)
    }

    pub fn shape(&self, v: ValueId) -> Option<&'a [Dim]> {
        self.facts[v].shape.as_deref()
    }

    pub fn name(&self, v: ValueId) -> &'a str {
        self.model.graph.value_name(v)
    }

    /// A layer's activation input, stored weight (input 1) and output.
    pub fn layer(&self, node: &Node) -> Result<Layer<'a>, String> {
        let (Some(x), Some(w), Some(y)) = (node.input(0), node.input(1), node.output(0)) else {
            return Err("the layer has no input, weight or output".into());
        };
        let tensor = self.init(w).ok_or("the weight is computed, not stored")?;
        Ok(Layer {
            x,
            weight: self.name(w).to_string(),
            tensor,
            y,
        })
    }

    /// The name new nodes of a rewrite of `node` start with.
    pub fn base_name(&self, node: &Node, y: ValueId) -> String {
        if node.name.is_empty() {
            self.name(y).to_string()
        } else {
            self.model.graph.name(node.name).to_string()
        }
    }
}

/// The parts of a layer a rewrite reads.
pub struct Layer<'a> {
    /// The activation input.
    pub x: ValueId,
    /// The weight's value name (an initializer's, or a `Constant` node's output).
    pub weight: String,
    pub tensor: &'a Tensor,
    pub y: ValueId,
}

/// What a factorising rewrite (one node into two, at a rank) produced.
pub struct Factored {
    pub kind: RewriteKind,
    pub node: NodeId,
    pub input: ValueId,
    pub output: ValueId,
    pub rank: usize,
    /// The rank at which the factorisation is exact.
    pub full: usize,
    /// The sides `a x b` whose factorisation pays below rank `ab / (a + b)`.
    pub sides: (u64, u64),
    pub weight: String,
    pub tensors: Vec<NewTensor>,
    pub nodes: Vec<pb::NodeProto>,
    pub values: Vec<(String, DType, Vec<Dim>)>,
    pub energy_kept: f64,
}

impl Factored {
    pub fn planned(self, cx: &Cx) -> Planned {
        let (a, b) = self.sides;
        let (r, pays) = (self.rank as u64, (a * b).div_ceil(a + b));
        let note = saves_nothing(r, a, b).then(|| {
            if self.rank == self.full {
                format!("rank {r} is the full rank: exact, but it saves nothing (this factorisation pays below rank {pays})")
            } else {
                format!("rank {r} saves nothing: this factorisation pays below rank {pays}")
            }
        });
        let g = cx.graph();
        Planned {
            record: Applied {
                rule: String::new(),
                kind: self.kind,
                node: g.name(g.nodes[self.node].name).to_string(),
                safety: if self.rank == self.full {
                    Safety::Exact
                } else {
                    Safety::Approximate
                },
                rank: Some(r),
                input: cx.name(self.input).to_string(),
                output: cx.name(self.output).to_string(),
                replaced: Vec::new(),
                added: Vec::new(),
            },
            removed: vec![self.node],
            tensors: self.tensors,
            nodes: self.nodes,
            values: self.values,
            released: vec![self.weight],
            energy_kept: Some(self.energy_kept),
            note,
        }
    }
}

/// Every name in use in a graph (values, nodes, and those of nested graphs), to make new ones unique.
#[derive(Default)]
pub struct Names(HashSet<String>);

impl Names {
    pub fn of(graph: &Graph) -> Names {
        let mut set = HashSet::new();
        fn walk(g: &Graph, set: &mut HashSet<String>) {
            for v in &g.values {
                set.insert(g.name(v.name).to_string());
            }
            for n in &g.nodes {
                set.insert(g.name(n.name).to_string());
            }
            for (_, sub) in g.subgraphs() {
                walk(sub, set);
            }
        }
        walk(graph, &mut set);
        Names(set)
    }

    /// `base`, or `base_2`, `base_3`... whichever is free; reserved on return.
    pub fn fresh(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut i = 2;
        while self.0.contains(&name) {
            name = format!("{base}_{i}");
            i += 1;
        }
        self.0.insert(name.clone());
        name
    }
}

/// A rewrite builder's failure: the finding is reported as skipped with this reason.
pub type BuildResult = std::result::Result<Planned, String>;

/// Plans the rewrite a finding carries.
pub fn plan(cx: &mut Cx, rule: &str, fix: &Fix) -> BuildResult {
    let mut p = match &fix.plan {
        Plan::DepthwiseSeparable { conv, rank, .. } => depthwise::plan(cx, *conv, *rank)?,
        Plan::GapHead {
            layer,
            flatten,
            through,
        } => gap_head::plan(cx, *layer, *flatten, through)?,
        Plan::LowRank { layer, rank, .. } => low_rank::plan(cx, *layer, *rank)?,
    };
    p.record.rule = rule.to_string();
    let g = cx.graph();
    p.record.replaced = p
        .removed
        .iter()
        .map(|&n| first_output(g, &g.nodes[n]))
        .collect();
    p.record.added = p
        .nodes
        .iter()
        .map(|n| n.output.first().cloned().unwrap_or_default())
        .collect();
    Ok(p)
}

/// Plans the rewrite of every finding that carries one, on the nodes `nodes` selects (globs; all
/// when empty). GAP heads go first, so a head layer that `oversized-linear` also flags is pooled
/// rather than factored; a node is rewritten once.
pub fn plan_all(
    model: &Model,
    facts: &[Fact],
    ops: &[Op],
    findings: &[Finding],
    nodes: &[String],
    options: &Options,
    progress: &dyn crate::util::progress::Progress,
) -> (Vec<Planned>, Vec<Skipped>) {
    let g = &model.graph;
    let mut names = Names::of(g);
    let mut todo: Vec<(&Fix, &Finding)> = findings
        .iter()
        .filter_map(|f| f.rewrite.as_ref().map(|fix| (fix, f)))
        .filter(|(_, f)| nodes.is_empty() || nodes.iter().any(|p| glob_match(p, &f.node)))
        .filter(|(fix, _)| fix.node() < g.nodes.len())
        .collect();
    todo.sort_by_key(|(fix, _)| (fix.kind != RewriteKind::GapHead, fix.node()));
    progress.start("planning", todo.len() as u64);
    let mut plans: Vec<Planned> = Vec::new();
    let mut skipped = Vec::new();
    let mut touched: HashMap<NodeId, RewriteKind> = HashMap::new();
    for (fix, f) in todo {
        progress.message(&f.node);
        let n = fix.node();
        if let Some(by) = touched.get(&n) {
            skipped.push(Skipped {
                rule: f.code.to_string(),
                node: f.node.clone(),
                reason: format!("already rewritten by {by}"),
                safety: None,
            });
            progress.advance(1);
            continue;
        }
        let mut cx = Cx {
            model,
            facts,
            ops,
            options,
            names: &mut names,
        };
        match plan(&mut cx, f.code, fix) {
            Ok(p) if p.removed.iter().any(|r| touched.contains_key(r)) => skipped.push(Skipped {
                rule: f.code.to_string(),
                node: f.node.clone(),
                reason: "it overlaps another rewrite".into(),
                safety: None,
            }),
            Ok(p) => match refused(&p, options.allow) {
                Some(reason) => skipped.push(Skipped {
                    rule: f.code.to_string(),
                    node: f.node.clone(),
                    reason,
                    safety: Some(p.record.safety),
                }),
                None => {
                    for &r in &p.removed {
                        touched.insert(r, fix.kind);
                    }
                    plans.push(p);
                }
            },
            Err(reason) => skipped.push(Skipped {
                rule: f.code.to_string(),
                node: f.node.clone(),
                reason,
                safety: None,
            }),
        }
        progress.advance(1);
    }
    progress.finish();
    (plans, skipped)
}

fn first_output(g: &Graph, n: &Node) -> String {
    n.output(0)
        .map(|v| g.value_name(v).to_string())
        .unwrap_or_default()
}

/// Reads a float weight as f64 values.
pub fn read_f64(t: &Tensor) -> Result<Vec<f64>, String> {
    float_weight(t)?;
    match t.read_values(u64::MAX) {
        Some(Values::Float(v)) => Ok(v),
        _ => Err(format!("the data of weight '{}' could not be read", t.name)),
    }
}

/// Refuses a weight whose element type the rewrites cannot read as numbers.
pub fn float_weight(t: &Tensor) -> Result<(), String> {
    if !matches!(t.dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return Err(format!(
            "weight '{}' is {}, not a float type",
            t.name,
            t.dtype.name()
        ));
    }
    Ok(())
}

/// Encodes f64 values in a float element type, little-endian.
pub fn encode(dtype: DType, v: &[f64]) -> Result<Vec<u8>, String> {
    Ok(match dtype {
        DType::F32 => v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        DType::F64 => v.iter().flat_map(|&x| x.to_le_bytes()).collect(),
        DType::F16 => v
            .iter()
            .flat_map(|&x| half::f16::from_f64(x).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|&x| half::bf16::from_f64(x).to_le_bytes())
            .collect(),
        other => return Err(format!("cannot write {} weights", other.name())),
    })
}

/// A new tensor from f64 values, encoded like `like`.
pub fn new_tensor(
    name: String,
    like: &Tensor,
    dims: Vec<u64>,
    v: &[f64],
) -> Result<NewTensor, String> {
    Ok(NewTensor {
        name,
        dtype: like.dtype,
        dims,
        data: encode(like.dtype, v)?,
    })
}

/// A node in protobuf form.
pub fn node_proto(
    name: String,
    op: &str,
    inputs: Vec<String>,
    output: String,
    attrs: Vec<pb::AttributeProto>,
) -> pb::NodeProto {
    pb::NodeProto {
        input: inputs,
        output: vec![output],
        name: Some(name),
        op_type: Some(op.to_string()),
        attribute: attrs,
        ..Default::default()
    }
}

pub fn attr_int(name: &str, v: i64) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(pb::attribute_proto::AttributeType::Int as i32),
        i: Some(v),
        ..Default::default()
    }
}

pub fn attr_float(name: &str, v: f32) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(pb::attribute_proto::AttributeType::Float as i32),
        f: Some(v),
        ..Default::default()
    }
}

pub fn attr_ints(name: &str, v: Vec<i64>) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(pb::attribute_proto::AttributeType::Ints as i32),
        ints: v,
        ..Default::default()
    }
}

pub fn attr_string(name: &str, v: &str) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(pb::attribute_proto::AttributeType::String as i32),
        s: Some(bytes::Bytes::from(v.as_bytes().to_vec())),
        ..Default::default()
    }
}

/// A conv window's attributes as the node stated them (absent lists stay absent).
pub fn window_attrs(w: &WindowAttrs) -> Vec<pb::AttributeProto> {
    let mut out = Vec::new();
    for (name, v) in [
        ("kernel_shape", &w.kernel_shape),
        ("strides", &w.strides),
        ("dilations", &w.dilations),
        ("pads", &w.pads),
    ] {
        if let Some(v) = v {
            out.push(attr_ints(name, v.clone()));
        }
    }
    if w.auto_pad != AutoPad::NotSet {
        out.push(attr_string("auto_pad", w.auto_pad.name()));
    }
    out
}

/// A `Gemm`'s attributes.
pub fn gemm_attrs(g: &Gemm) -> Vec<pb::AttributeProto> {
    vec![
        attr_float("alpha", g.alpha),
        attr_float("beta", g.beta),
        attr_int("transA", i64::from(g.trans_a)),
        attr_int("transB", i64::from(g.trans_b)),
    ]
}

/// Applies planned rewrites to the compact protobuf of the same model.
///
/// Each plan's nodes take the place of the last node it replaces (its inputs are defined before
/// that point, its output is read only after it), initializers nothing reads any more are dropped
/// (with their graph-input entries in old models), `value_info` loses the removed values and gains
/// the new ones, and the records are stored under [`METADATA_KEY`].
pub fn apply(proto: &mut pb::ModelProto, model: &Model, plans: &[Planned]) -> crate::Result<()> {
    let g = &model.graph;
    let graph = proto
        .graph
        .as_mut()
        .ok_or_else(|| crate::Error::malformed(&model.path, "the model has no graph"))?;
    // first output name -> (plan, is the anchor)
    let mut removed: HashMap<String, (usize, bool)> = HashMap::new();
    let mut removed_values: HashSet<String> = HashSet::new();
    for (i, p) in plans.iter().enumerate() {
        for &n in &p.removed {
            for v in g.nodes[n].outputs().values() {
                removed_values.insert(g.value_name(v).to_string());
            }
        }
        // the anchor is the replaced node that comes last in the file
        for name in &p.record.replaced {
            removed.insert(name.clone(), (i, false));
        }
        let anchor = graph
            .node
            .iter()
            .rposition(|n| {
                n.output
                    .first()
                    .is_some_and(|o| removed.get(o).is_some_and(|r| r.0 == i))
            })
            .ok_or_else(|| {
                crate::Error::malformed(
                    &model.path,
                    format!("node '{}' was not found in the protobuf", p.record.node),
                )
            })?;
        let key = graph.node[anchor].output[0].clone();
        removed.insert(key, (i, true));
    }
    let old = std::mem::take(&mut graph.node);
    let mut nodes = Vec::with_capacity(old.len() + plans.len() * 2);
    for n in old {
        match n.output.first().and_then(|o| removed.get(o)) {
            Some(&(i, true)) => nodes.extend(plans[i].nodes.iter().cloned()),
            Some(_) => {}
            None => nodes.push(n),
        }
    }
    graph.node = nodes;
    for p in plans {
        for v in &p.record.added {
            removed_values.remove(v);
        }
        removed_values.remove(&p.record.output);
    }

    // initializers: add the new ones, drop released ones nothing reads any more
    let mut used: HashSet<&str> = HashSet::new();
    fn reads<'a>(nodes: &'a [pb::NodeProto], used: &mut HashSet<&'a str>) {
        for n in nodes {
            used.extend(n.input.iter().map(String::as_str));
            for a in &n.attribute {
                for sub in a.g.iter().map(|b| &**b).chain(a.graphs.iter()) {
                    reads(&sub.node, used);
                    used.extend(sub.output.iter().filter_map(|o| o.name.as_deref()));
                }
            }
        }
    }
    reads(&graph.node, &mut used);
    used.extend(graph.output.iter().filter_map(|o| o.name.as_deref()));
    let released: HashSet<String> = plans
        .iter()
        .flat_map(|p| p.released.iter())
        .filter(|n| !used.contains(n.as_str()))
        .cloned()
        .collect();
    graph
        .initializer
        .retain(|t| !t.name.as_ref().is_some_and(|n| released.contains(n)));
    // a weight held in a Constant node: the node goes
    graph.node.retain(|n| {
        !(n.op_type.as_deref() == Some("Constant")
            && n.domain
                .as_deref()
                .is_none_or(|d| d.is_empty() || d == "ai.onnx")
            && n.output.first().is_some_and(|o| released.contains(o)))
    });
    graph
        .input
        .retain(|i| !i.name.as_ref().is_some_and(|n| released.contains(n)));
    for p in plans {
        for t in &p.tensors {
            graph.initializer.push(pb::TensorProto {
                dims: t.dims.iter().map(|&d| d as i64).collect(),
                data_type: Some(t.dtype.to_onnx()),
                name: Some(t.name.clone()),
                raw_data: Some(bytes::Bytes::from(t.data.clone())),
                ..Default::default()
            });
        }
    }

    // value_info
    graph
        .value_info
        .retain(|vi| !vi.name.as_ref().is_some_and(|n| removed_values.contains(n)));
    for p in plans {
        for (name, dtype, shape) in &p.values {
            graph.value_info.push(value_info(name, *dtype, shape));
        }
    }

    // the records, merged with those of an earlier rewrite of the same model
    let mut records: Vec<Applied> = proto
        .metadata_props
        .iter()
        .find(|e| e.key.as_deref() == Some(METADATA_KEY))
        .and_then(|e| serde_json::from_str(e.value.as_deref().unwrap_or("")).ok())
        .unwrap_or_default();
    records.extend(plans.iter().map(|p| p.record.clone()));
    let text = serde_json::to_string(&records).expect("records serialise");
    proto
        .metadata_props
        .retain(|e| e.key.as_deref() != Some(METADATA_KEY));
    proto.metadata_props.push(pb::StringStringEntryProto {
        key: Some(METADATA_KEY.into()),
        value: Some(text),
    });
    Ok(())
}

/// A `value_info` entry: a tensor type with the shape where it is known; a symbolic dimension that
/// is a single name becomes a `dim_param`, anything else is left unknown.
pub fn value_info(name: &str, dtype: DType, shape: &[Dim]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value as D, Dimension};
    let dims = shape
        .iter()
        .map(|d| Dimension {
            value: match d.as_i64() {
                Some(v) => Some(D::DimValue(v)),
                None => match d.symbols().as_slice() {
                    [s] if *d == Dim::sym(s) => Some(D::DimParam(s.to_string())),
                    _ => None,
                },
            },
            ..Default::default()
        })
        .collect();
    pb::ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(dtype.to_onnx()),
                shape: Some(pb::TensorShapeProto { dim: dims }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Parameters a rank-`r` factorisation keeps of an `a × b` weight, and whether it saves anything:
/// `r(a + b)` against `ab` (it pays below `r = ab / (a + b)`).
pub fn saves_nothing(r: u64, a: u64, b: u64) -> bool {
    r.saturating_mul(a + b) >= a.saturating_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_do_not_collide() {
        let mut n = Names::default();
        assert_eq!(n.fresh("a"), "a");
        assert_eq!(n.fresh("a"), "a_2");
        assert_eq!(n.fresh("a"), "a_3");
    }

    #[test]
    fn break_even() {
        // 64 x 9: pays below 64*9/73 = 7.9
        assert!(!saves_nothing(7, 64, 9));
        assert!(saves_nothing(8, 64, 9));
    }

    #[test]
    fn encodes_every_float_type() {
        assert_eq!(encode(DType::F32, &[1.0]).unwrap(), 1.0f32.to_le_bytes());
        assert_eq!(encode(DType::F16, &[1.0]).unwrap(), [0x00, 0x3c]);
        assert_eq!(encode(DType::BF16, &[1.0]).unwrap(), [0x80, 0x3f]);
        assert!(encode(DType::I64, &[1.0]).is_err());
    }

    #[test]
    fn value_info_keeps_named_dims() {
        let vi = value_info("x", DType::F32, &[Dim::sym("batch"), Dim::known(8)]);
        let Some(pb::type_proto::Value::TensorType(t)) = vi.r#type.unwrap().value else {
            panic!()
        };
        let dims = t.shape.unwrap().dim;
        use pb::tensor_shape_proto::dimension::Value as D;
        assert_eq!(dims[0].value, Some(D::DimParam("batch".into())));
        assert_eq!(dims[1].value, Some(D::DimValue(8)));
    }
}
