//! Activations saved for backward: what PyTorch autograd keeps from the forward pass, read off the
//! ONNX graph (../shared/reference/autograd-saved-tensors.md is the measured reference).
//!
//! The recipe:
//! 1. **Storages, not tensors.** View ops (reshape of a contiguous tensor, transpose, slice, split,
//!    squeeze, select, expand, identity) alias their input's storage; a saved alias costs the whole
//!    base. A storage saved by several ops counts once. Copies (a reshape of a non-contiguous tensor,
//!    autocast casts) are new storages.
//! 2. **requires_grad** flows from trainable parameters; shape, comparison and random ops stop it.
//!    Nothing upstream of the first trainable parameter is saved, and graph inputs and weights are
//!    never counted (the input is not an activation; parameters are counted as weights).
//! 3. **Patterns** that PyTorch runs as one autograd op are matched first: SiLU, GELU (erf and tanh
//!    forms), scaled-dot-product attention, GroupNorm's ONNX decomposition.
//! 4. **Per-op rules**: Conv/Linear/MatMul save their inputs, ReLU/Sigmoid/Tanh/Softmax their output,
//!    ReLU6/Hardswish/GELU/LeakyReLU their input, norms their input plus fp32 statistics, max pooling
//!    its input plus int64 indices, dropout a mask (a bool per element on CUDA, the scaled noise in
//!    the input dtype on CPU), element-wise products the operand the other one needs.
//! 5. **Precision**: under autocast, conv/linear/matmul run in half precision and save their own half
//!    copy of an fp32 input; other ops run in the dtype that arrives, binary ops promote to their
//!    widest operand (a Linear's bias add excepted); statistics stay fp32. On CUDA, autocast also runs
//!    layer/group norm, softmax, log-softmax, interpolation, sums, exp, log and pow in fp32.

use std::collections::{HashMap, HashSet};

use super::fact::Fact;
use super::storage::{self, Role};
use crate::ir::{DType, Graph, Node, NodeId, ValueId};

crate::named_enum! {
    /// Numeric precision of training.
    pub enum Precision {
        /// Everything in fp32.
        Fp32 = "fp32",
        /// `torch.autocast(dtype=float16)` with fp32 weights (and a GradScaler).
        AmpFp16 = "amp-fp16",
        /// `torch.autocast(dtype=bfloat16)` with fp32 weights.
        AmpBf16 = "amp-bf16",
        /// The model cast to bfloat16 (weights, gradients, optimizer state and activations).
        Bf16 = "bf16",
    }
}

impl Precision {
    pub fn is_autocast(self) -> bool {
        matches!(self, Precision::AmpFp16 | Precision::AmpBf16)
    }

    /// The half type autocast or pure training uses.
    pub fn half(self) -> DType {
        match self {
            Precision::AmpFp16 => DType::F16,
            _ => DType::BF16,
        }
    }
}

crate::named_enum! {
    /// Which device's autograd behaviour to model.
    pub enum Device {
        /// CUDA: dropout saves a bool mask; autocast runs norms, softmax and reductions in fp32.
        Cuda = "cuda",
        /// CPU: dropout saves its scaled noise; autocast lowers only conv/linear/matmul.
        Cpu = "cpu",
    }
}

/// A storage held for backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorageKey {
    /// The storage of a value (after resolving views to their base).
    Value(ValueId),
    /// A copy of a value made for one consumer (autocast casts, contiguous copies).
    Copy(ValueId, NodeId),
    /// A tensor the op makes for itself (statistics, indices, masks, logsumexp), by position.
    Own(NodeId, u8),
    /// An autocast half copy of a weight (cached once per weight).
    WeightCopy(ValueId),
}

/// The saved-tensor model of one forward pass.
#[derive(Clone, Debug, Default)]
pub struct Saved {
    /// Every saved storage with its bytes and the node charged for it (its first saver).
    pub storages: Vec<(StorageKey, u64, NodeId)>,
    /// Saved bytes charged to each node.
    pub per_node: Vec<u64>,
    /// Bytes of autocast weight copies (part of the total).
    pub weight_copy_bytes: u64,
    /// Bytes of buffers autograd holds (BatchNorm running statistics; part of the total, and already
    /// counted with the weights).
    pub buffer_bytes: u64,
    /// Nodes whose op has no rule (unknown ops): their saved tensors are not counted.
    pub unmodelled: Vec<NodeId>,
    /// Sum over `storages`.
    pub total: u64,
}

/// What a rule asks to keep.
enum Save {
    /// The storage behind a value (alias resolution applies).
    Value(ValueId),
    /// A new storage with this value's elements, in the given dtype (casts, contiguous copies).
    CopyOf(ValueId, DType),
    /// A new storage of the op's own, of this many bytes.
    Own(u64),
    /// A stored buffer autograd keeps a reference to (BatchNorm running statistics).
    Buffer(ValueId),
}

/// Per-value facts the rules need.
struct Flow<'a> {
    graph: &'a Graph,
    facts: &'a [Fact],
    /// Storage each value lives in (itself for non-views).
    base: Vec<ValueId>,
    contiguous: Vec<bool>,
    grad: Vec<bool>,
    /// Element type in training (autocast changes it).
    dtype: Vec<Option<DType>>,
    stored: Vec<bool>,
    /// Outputs of attention kernels, laid out so that the head transpose after them is contiguous.
    head_major: HashSet<ValueId>,
    precision: Precision,
    device: Device,
}

fn numel(f: &Fact) -> u64 {
    f.numel().and_then(|d| d.as_u64()).unwrap_or(0)
}

const LOWERED: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "PRelu",
    "Einsum",
    "LSTM",
    "GRU",
    "RNN",
];
const CUDA_FP32: &[&str] = &[
    "LayerNormalization",
    "GroupNormalization",
    "Softmax",
    "LogSoftmax",
    "Resize",
    "Upsample",
    "ReduceSum",
    "CumSum",
    "ReduceProd",
    "Exp",
    "Log",
    "Pow",
];
const GRAD_STOPPERS: &[&str] = &[
    "Shape",
    "Size",
    "Equal",
    "Less",
    "LessOrEqual",
    "Greater",
    "GreaterOrEqual",
    "Not",
    "And",
    "Or",
    "Xor",
    "ArgMax",
    "ArgMin",
    "NonZero",
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Bernoulli",
    "Multinomial",
    "ConstantOfShape",
    "Range",
    "IsNaN",
    "IsInf",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
];

impl<'a> Flow<'a> {
    fn new(
        graph: &'a Graph,
        facts: &'a [Fact],
        precision: Precision,
        device: Device,
        head_major: HashSet<ValueId>,
    ) -> Flow<'a> {
        let n = graph.values.len();
        let stored: Vec<bool> = graph.values.iter().map(|v| v.init.is_some()).collect();
        let mut f = Flow {
            graph,
            facts,
            base: (0..n).collect(),
            contiguous: vec![true; n],
            grad: vec![false; n],
            dtype: facts.iter().map(|f| f.dtype).collect(),
            stored,
            head_major,
            precision,
            device,
        };
        for (id, t) in graph.initializers() {
            f.grad[id] =
                storage::classify(graph, id, t.dtype, t.numel().unwrap_or(0)) == Role::Param;
            if precision == Precision::Bf16 && t.dtype.is_float() {
                f.dtype[id] = Some(DType::BF16);
            }
        }
        for node in &graph.nodes {
            f.visit(node);
        }
        f
    }

    fn is_scalar(&self, v: ValueId) -> bool {
        numel(&self.facts[v]) <= 1
    }

    /// Whether a value is a stored tensor or derived from stored tensors only.
    fn is_stored(&self, v: ValueId) -> bool {
        self.stored[v]
    }

    fn visit(&mut self, node: &Node) {
        let op = node.op_type.as_str();
        let data_inputs: Vec<ValueId> = node
            .inputs
            .iter()
            .enumerate()
            .filter(|(slot, _)| !storage_is_config(op, *slot))
            .filter_map(|(_, v)| *v)
            .collect();
        let grad = !GRAD_STOPPERS.contains(&op) && data_inputs.iter().any(|&v| self.grad[v]);
        let all_stored = node.inputs.iter().flatten().next().is_some()
            && node.inputs.iter().flatten().all(|&v| self.stored[v]);
        let x = node.input(0);
        let in_dtype = x.and_then(|v| self.dtype[v]);
        let out_dtype = self.out_dtype(node, in_dtype);
        for (slot, out) in node.outputs.iter().enumerate() {
            let Some(o) = *out else { continue };
            self.grad[o] = grad && self.facts[o].dtype.is_some_and(DType::is_float);
            self.stored[o] = all_stored || op == "Constant";
            if self.facts[o].dtype.is_some_and(DType::is_float) && !(op == "MaxPool" && slot == 1) {
                self.dtype[o] = out_dtype.or(self.facts[o].dtype);
            }
            let Some(x) = x else { continue };
            let (alias, contiguous) = self.view(node, x);
            if alias {
                self.base[o] = self.base[x];
                self.contiguous[o] = contiguous;
                self.dtype[o] = self.dtype[x];
            } else if matches!(op, "Reshape" | "Flatten") {
                // a reshape that cannot be a view copies into a new, contiguous storage
                self.contiguous[o] = true;
            }
        }
    }

    /// The dtype an op produces in training.
    fn out_dtype(&self, node: &Node, arriving: Option<DType>) -> Option<DType> {
        let op = node.op_type.as_str();
        let p = self.precision;
        if p == Precision::Fp32 {
            return None;
        }
        if p == Precision::Bf16 {
            return arriving
                .filter(|d| d.is_float())
                .map(|_| DType::BF16)
                .or(arriving);
        }
        if op == "Cast" {
            return node.attrs.dtype_opt("to").ok().flatten();
        }
        if LOWERED.contains(&op) {
            return Some(p.half());
        }
        if self.device == Device::Cuda && CUDA_FP32.contains(&op) {
            return Some(DType::F32);
        }
        if op == "Pad" && self.pad_mode(node) != "constant" {
            return Some(DType::F32);
        }
        if op == "Gather" && node.input(0).is_some_and(|v| self.is_stored(v)) {
            return Some(DType::F32);
        }
        if is_promoting(op) {
            // a Linear's bias add stays in the half type
            if op == "Add" && self.is_bias_add(node) {
                return Some(p.half());
            }
            let widest = node
                .inputs
                .iter()
                .flatten()
                .filter(|&&v| {
                    !self.is_scalar(v) && self.facts[v].dtype.is_some_and(DType::is_float)
                })
                .filter_map(|&v| self.dtype[v])
                .max_by_key(|d| d.bits());
            return widest.or(arriving);
        }
        arriving
    }

    /// `MatMul → Add(1-D weight)`: the bias inside `addmm`.
    fn is_bias_add(&self, node: &Node) -> bool {
        let (Some(a), Some(b)) = (node.input(0), node.input(1)) else {
            return false;
        };
        let from_matmul = |v: ValueId| {
            self.graph.values[v].producer.is_some_and(|(p, _)| {
                matches!(self.graph.nodes[p].op_type.as_str(), "MatMul" | "Gemm")
            })
        };
        let is_bias =
            |v: ValueId| self.graph.values[v].init.is_some() && self.facts[v].rank() == Some(1);
        (from_matmul(a) && is_bias(b)) || (from_matmul(b) && is_bias(a))
    }

    fn pad_mode(&self, node: &Node) -> String {
        node.attrs
            .string_opt("mode")
            .ok()
            .flatten()
            .unwrap_or_else(|| "constant".into())
    }

    /// Whether output `slot` of `node` is a view of input `x`, and whether that view is contiguous.
    fn view(&self, node: &Node, x: ValueId) -> (bool, bool) {
        let c = self.contiguous[x];
        let shape = self.facts[x].shape.as_deref().unwrap_or(&[]);
        let first_big = shape
            .iter()
            .position(|d| d.as_i64() != Some(1))
            .unwrap_or(0);
        match node.op_type.as_str() {
            "Reshape" | "Flatten" => (c, true),
            "Squeeze" | "Unsqueeze" | "Identity" => (true, c),
            "Dropout" if self.dropout_ratio(node) == Some(0.0) => (true, c),
            // the attention kernel writes [B,L,h,D] and returns it as [B,h,L,D]: undoing that is free
            "Transpose" if self.head_major.contains(&x) => (true, true),
            "Transpose" => {
                let perm: Vec<usize> = match node.attrs.ints_opt("perm").ok().flatten() {
                    Some(p) => p
                        .iter()
                        .map(|&a| a.rem_euclid(shape.len().max(1) as i64) as usize)
                        .collect(),
                    None => (0..shape.len()).rev().collect(),
                };
                // moving only size-1 axes keeps the layout
                let big: Vec<usize> = perm
                    .iter()
                    .copied()
                    .filter(|&a| shape.get(a).and_then(|d| d.as_i64()) != Some(1))
                    .collect();
                (true, c && big.windows(2).all(|w| w[0] < w[1]))
            }
            "Expand" => (true, false),
            "Slice" => {
                let axes = self.slice_axes(node, shape.len());
                (true, c && axes.iter().all(|&a| a <= first_big))
            }
            "Split" => (true, c && axis_attr(node, shape.len()) <= first_big),
            "Gather" => {
                let scalar_index = node
                    .input(1)
                    .is_some_and(|i| self.facts[i].rank() == Some(0));
                if scalar_index && !self.is_stored(x) {
                    (true, c && axis_attr(node, shape.len()) <= first_big)
                } else {
                    (false, true)
                }
            }
            _ => (false, true),
        }
    }

    fn slice_axes(&self, node: &Node, rank: usize) -> Vec<usize> {
        let axes = node
            .input(3)
            .and_then(|a| self.facts[a].value.as_ref()?.as_i64s())
            .or_else(|| {
                node.attrs
                    .ints_opt("axes")
                    .ok()
                    .flatten()
                    .map(<[i64]>::to_vec)
            });
        match axes {
            Some(a) => a
                .iter()
                .map(|&x| x.rem_euclid(rank.max(1) as i64) as usize)
                .collect(),
            None => {
                let n = node
                    .input(1)
                    .and_then(|s| self.facts[s].value.as_ref().map(|v| v.len()))
                    .unwrap_or(1);
                (0..n).collect()
            }
        }
    }

    fn dropout_ratio(&self, node: &Node) -> Option<f64> {
        if let Some(r) = node.input(1) {
            return self.facts[r].value.as_ref()?.as_f64s()?.first().copied();
        }
        Some(node.attrs.float_or("ratio", 0.5).ok()? as f64)
    }

    /// Bytes of a value's storage (its base), in its training dtype.
    fn storage_bytes(&self, v: ValueId) -> u64 {
        let b = self.base[v];
        self.bytes_as(b, self.dtype[b])
    }

    fn bytes_as(&self, v: ValueId, dtype: Option<DType>) -> u64 {
        let n = numel(&self.facts[v]);
        dtype.and_then(|d| d.bytes_for(n)).unwrap_or(0)
    }
}

/// A node's `axis` attribute (default 0), normalised against a rank.
fn axis_attr(node: &Node, rank: usize) -> usize {
    node.attrs
        .int_or("axis", 0)
        .unwrap_or(0)
        .rem_euclid(rank.max(1) as i64) as usize
}

fn storage_is_config(op: &str, slot: usize) -> bool {
    // Gather's indices and Where's condition carry no gradient
    super::storage::is_config_slot(op, slot) || (op == "Where" && slot == 0)
}

fn is_promoting(op: &str) -> bool {
    matches!(
        op,
        "Add" | "Sub" | "Mul" | "Div" | "Concat" | "Where" | "Max" | "Min" | "Sum" | "Mean"
    )
}

/// Nodes that matched a multi-node pattern: the node that carries the pattern's saved tensors, and
/// the nodes whose own rules no longer apply.
struct Patterns {
    /// node → what it saves instead of its own rule
    replace: HashMap<NodeId, Vec<Save>>,
    absorbed: HashSet<NodeId>,
    attention_outputs: HashSet<ValueId>,
}

fn producer(g: &Graph, v: ValueId) -> Option<(NodeId, &Node)> {
    g.values[v].producer.map(|(n, _)| (n, &g.nodes[n]))
}

fn single_consumer(g: &Graph, v: ValueId) -> Option<(NodeId, &Node)> {
    match g.values[v].consumers.as_slice() {
        [(n, _)] => Some((*n, &g.nodes[*n])),
        _ => None,
    }
}

fn other_input(node: &Node, v: ValueId) -> Option<ValueId> {
    match (node.input(0), node.input(1)) {
        (Some(a), Some(b)) if a == v => Some(b),
        (Some(a), Some(b)) if b == v => Some(a),
        _ => None,
    }
}

fn match_patterns(flow: &Flow) -> Patterns {
    let g = flow.graph;
    let mut p = Patterns {
        replace: HashMap::new(),
        absorbed: HashSet::new(),
        attention_outputs: HashSet::new(),
    };
    for (n, node) in g.nodes.iter().enumerate() {
        match node.op_type.as_str() {
            // SiLU: y = x * sigmoid(x)
            "Sigmoid" => {
                let (Some(x), Some(s)) = (node.input(0), node.output(0)) else {
                    continue;
                };
                if let Some((m, mul)) = single_consumer(g, s) {
                    if mul.op_type == "Mul" && other_input(mul, s) == Some(x) {
                        p.absorbed.insert(n);
                        p.replace.insert(m, vec![Save::Value(x)]);
                    }
                }
            }
            "Erf" | "Tanh" => {
                if let Some((region, last, x)) = gelu_region(flow, n) {
                    p.absorbed.extend(region.iter().copied());
                    p.absorbed.remove(&last);
                    p.replace.insert(last, vec![Save::Value(x)]);
                }
            }
            "Softmax" => {
                if let Some((region, last, saves)) = sdpa(flow, n) {
                    p.attention_outputs.extend(g.nodes[last].output(0));
                    p.absorbed.extend(region.iter().copied());
                    p.absorbed.remove(&last);
                    p.replace.insert(last, saves);
                }
            }
            "InstanceNormalization" => {
                // GroupNorm: Reshape → InstanceNormalization → Reshape → Mul(γ) → Add(β)
                let Some(out) = node.output(0) else { continue };
                let Some((r, reshape)) = single_consumer(g, out) else {
                    continue;
                };
                if reshape.op_type != "Reshape" {
                    continue;
                }
                let Some((m, mul)) = reshape.output(0).and_then(|v| single_consumer(g, v)) else {
                    continue;
                };
                if mul.op_type != "Mul" {
                    continue;
                }
                p.absorbed.insert(r);
                p.absorbed.insert(m);
                if let Some((a, add)) = mul.output(0).and_then(|v| single_consumer(g, v)) {
                    if add.op_type == "Add" {
                        p.absorbed.insert(a);
                    }
                }
            }
            _ => {}
        }
    }
    p
}

/// A GELU written out with `Erf` or `Tanh` (nn.GELU as the exporters decompose it): a chain of
/// element-wise nodes from one input `x` to one output, whose only non-constant input is `x`.
/// A hand-written GELU (`x * 0.5` computed first) is left to the per-op rules, as PyTorch saves more.
fn gelu_region(flow: &Flow, center: NodeId) -> Option<(Vec<NodeId>, NodeId, ValueId)> {
    let g = flow.graph;
    let elementwise = |op: &str| matches!(op, "Mul" | "Div" | "Add" | "Pow" | "Erf" | "Tanh");
    let is_const = |v: ValueId| flow.is_stored(v) && flow.is_scalar(v);
    // walk back from the center to x
    let mut region = vec![center];
    let mut v = g.nodes[center].input(0)?;
    let x = loop {
        let (p, node) = producer(g, v)?;
        if !elementwise(&node.op_type) || region.len() > 8 {
            break v;
        }
        let ins: Vec<ValueId> = node
            .inputs
            .iter()
            .flatten()
            .copied()
            .filter(|&i| !is_const(i))
            .collect();
        match ins.as_slice() {
            [only] => {
                region.push(p);
                v = *only;
            }
            // x*x*x or x*x (tanh form): both operands are x
            [a, b] if a == b => {
                region.push(p);
                v = *a;
            }
            // Pow/Mul chains that reuse x: the cube x*x*x written as (x*x)*x
            [a, b] => {
                let (pa, pb) = (producer(g, *a), producer(g, *b));
                match (pa, pb) {
                    (Some((ia, na)), _)
                        if na.inputs.iter().flatten().all(|&i| i == *b || is_const(i))
                            && elementwise(&na.op_type) =>
                    {
                        region.push(p);
                        region.push(ia);
                        v = *b;
                    }
                    (_, Some((ib, nb)))
                        if nb.inputs.iter().flatten().all(|&i| i == *a || is_const(i))
                            && elementwise(&nb.op_type) =>
                    {
                        region.push(p);
                        region.push(ib);
                        v = *a;
                    }
                    _ => break v,
                }
            }
            _ => return None,
        }
    };
    // walk forward from the center to the node that multiplies by x
    let mut cur = g.nodes[center].output(0)?;
    let mut last = None;
    for _ in 0..4 {
        let (c, node) = single_consumer(g, cur)?;
        if !elementwise(&node.op_type) {
            return None;
        }
        region.push(c);
        let ins: Vec<ValueId> = node
            .inputs
            .iter()
            .flatten()
            .copied()
            .filter(|&i| i != cur && !is_const(i))
            .collect();
        match ins.as_slice() {
            [] => {}
            [other] if *other == x => last = Some(c),
            // x*0.5 computed apart from the erf branch: a hand-written GELU, which saves more
            [_] => return None,
            _ => return None,
        }
        cur = node.output(0)?;
        if last.is_some() {
            // a final constant scaling (legacy nn.GELU: (x * (1 + erf)) * 0.5)
            if let Some((c2, n2)) = single_consumer(g, cur) {
                let only_const = n2.op_type == "Mul"
                    && n2.inputs.iter().flatten().all(|&i| i == cur || is_const(i));
                if only_const {
                    region.push(c2);
                    last = Some(c2);
                }
            }
            break;
        }
    }
    let last = last?;
    region.sort_unstable();
    region.dedup();
    Some((region, last, x))
}

/// Scaled-dot-product attention: `Mul(q, s)`, `Mul(kᵀ, s)` → `MatMul` → [`Add` mask] → `Softmax` →
/// `MatMul(·, v)`, with both scalings present (how PyTorch exports SDPA). PyTorch saves q, k, v, the
/// output and an fp32 logsumexp per query row, and no L×L matrix.
fn sdpa(flow: &Flow, softmax: NodeId) -> Option<(Vec<NodeId>, NodeId, Vec<Save>)> {
    let g = flow.graph;
    let mut region = vec![softmax];
    let mut v = g.nodes[softmax].input(0)?;
    let (mut p, mut node) = producer(g, v)?;
    if node.op_type == "Add" {
        region.push(p);
        let scores = node
            .inputs
            .iter()
            .flatten()
            .copied()
            .find(|&i| producer(g, i).is_some_and(|(_, n)| n.op_type == "MatMul"))?;
        v = scores;
        (p, node) = producer(g, v)?;
    }
    if node.op_type != "MatMul" {
        return None;
    }
    region.push(p);
    let mut qk = Vec::new();
    for i in [node.input(0)?, node.input(1)?] {
        let (pm, mul) = producer(g, i)?;
        if mul.op_type != "Mul" {
            return None;
        }
        let ins: Vec<ValueId> = mul.inputs.iter().flatten().copied().collect();
        let (t, s) = match ins.as_slice() {
            [a, b] if flow.is_scalar(*b) => (*a, *b),
            [a, b] if flow.is_scalar(*a) => (*b, *a),
            _ => return None,
        };
        if flow.grad[s] {
            return None;
        }
        region.push(pm);
        qk.push(t);
    }
    let probs = g.nodes[softmax].output(0)?;
    let (m2, mm2) = single_consumer(g, probs)?;
    if mm2.op_type != "MatMul" || mm2.input(0) != Some(probs) {
        return None;
    }
    let value = mm2.input(1)?;
    let out = mm2.output(0)?;
    // logsumexp: one fp32 per query row (the softmax output without its last axis)
    let rows =
        numel(&flow.facts[probs]) / flow.facts[probs].shape.as_ref()?.last()?.as_u64()?.max(1);
    let mut saves: Vec<Save> = qk.into_iter().map(Save::Value).collect();
    saves.push(Save::Value(value));
    saves.push(Save::Value(out));
    saves.push(Save::Own(4 * rows));
    Some((region, m2, saves))
}

/// The tensors node `n` saves under its own rule.
fn rule(flow: &Flow, node: &Node) -> Option<Vec<Save>> {
    let g = flow.graph;
    let grad = |v: Option<ValueId>| v.is_some_and(|v| flow.grad[v]);
    let out_grad = node.outputs.iter().flatten().any(|&o| flow.grad[o]);
    let x = node.input(0);
    let y = node.output(0);
    let val = |v: Option<ValueId>| v.map(Save::Value);
    let mut s: Vec<Save> = Vec::new();
    let op = node.op_type.as_str();
    let stat_bytes = |count: u64| Save::Own(2 * count * 4);
    match op {
        "Conv" | "ConvTranspose" => {
            if out_grad {
                s.extend(val(x));
            }
        }
        "Gemm" | "MatMul" | "Einsum" => {
            let (a, b) = (node.input(0)?, node.input(1)?);
            if flow.grad[b] {
                s.push(operand(flow, a));
            }
            if flow.grad[a] {
                s.push(operand(flow, b));
            }
        }
        "BatchNormalization" | "InstanceNormalization" | "GroupNormalization" => {
            if out_grad {
                let shape = flow.facts[x?].shape.as_ref()?;
                let n0 = shape.first()?.as_u64()?;
                let c = shape.get(1).and_then(|d| d.as_u64()).unwrap_or(1);
                if op == "BatchNormalization" {
                    s.extend(
                        [node.input(3), node.input(4)]
                            .into_iter()
                            .flatten()
                            .map(Save::Buffer),
                    );
                }
                let stats = match op {
                    "BatchNormalization" => c,
                    "InstanceNormalization" => n0 * c,
                    _ => n0 * node.attrs.int_or("num_groups", 1).ok()?.max(1) as u64,
                };
                s.extend(val(x));
                s.push(stat_bytes(stats));
            }
        }
        "LayerNormalization" => {
            if out_grad {
                let f = &flow.facts[x?];
                let shape = f.shape.as_ref()?;
                let axis = node
                    .attrs
                    .int_or("axis", -1)
                    .ok()?
                    .rem_euclid(shape.len().max(1) as i64) as usize;
                let rows: u64 = shape[..axis]
                    .iter()
                    .map(|d| d.as_u64().unwrap_or(0))
                    .product();
                s.extend(val(x));
                s.push(stat_bytes(rows));
            }
        }
        "Relu" | "Sigmoid" | "Tanh" | "Softmax" | "LogSoftmax" | "Exp" | "Sqrt" | "Reciprocal" => {
            if grad(x) {
                s.extend(val(y));
            }
        }
        "Clip" | "HardSwish" | "HardSigmoid" | "LeakyRelu" | "Elu" | "Selu" | "Celu" | "Gelu"
        | "Erf" | "Softplus" | "Mish" | "Log" | "Sin" | "Cos" | "Abs" | "Softsign"
        | "ThresholdedRelu" | "Shrink" | "PRelu" | "Pow" | "Atan" | "Asin" | "Acos" | "Tan"
        | "Sinh" | "Cosh" | "LpNormalization" => {
            if grad(x) {
                s.extend(val(x));
            }
        }
        "Mul" => {
            let (a, b) = (node.input(0)?, node.input(1)?);
            if flow.grad[b] {
                s.push(Save::Value(a));
            }
            if flow.grad[a] {
                s.push(Save::Value(b));
            }
        }
        "Div" => {
            let (a, b) = (node.input(0)?, node.input(1)?);
            if flow.grad[b] {
                s.push(Save::Value(a));
                s.push(Save::Value(b));
            } else if flow.grad[a] {
                s.push(Save::Value(b));
            }
        }
        "Max" | "Min" => {
            if out_grad {
                s.extend(node.inputs.iter().flatten().map(|&v| Save::Value(v)));
            }
        }
        "Where" => {
            if out_grad {
                s.extend(val(x));
            }
        }
        "MaxPool" | "GlobalMaxPool" | "ReduceMax" | "ReduceMin" => {
            if grad(x) {
                s.extend(val(x));
                s.push(Save::Own(8 * numel(&flow.facts[y?])));
            }
        }
        "AveragePool" | "LpPool" | "GlobalLpPool" => {
            if grad(x) {
                s.extend(val(x));
            }
        }
        "Dropout" => {
            let ratio = flow.dropout_ratio(node).unwrap_or(0.5);
            if grad(x) && ratio > 0.0 {
                let n = numel(&flow.facts[x?]);
                s.push(match flow.device {
                    Device::Cuda => Save::Own(n),
                    Device::Cpu => Save::Own(flow.bytes_as(x?, flow.dtype[x?])),
                });
            }
        }
        "Gather" => {
            // an embedding lookup keeps its int64 indices
            if x.is_some_and(|v| flow.grad[v] && g.values[v].init.is_some()) {
                s.extend(val(node.input(1)));
            }
        }
        "Pad" => {
            if grad(x) && flow.pad_mode(node) != "constant" {
                s.extend(val(x));
            }
        }
        "LSTM" | "GRU" | "RNN" => {
            // input plus every gate activation of every step (approximate: gates × output size)
            if out_grad {
                s.extend(val(x));
                let gates = match op {
                    "LSTM" => 5,
                    "GRU" => 4,
                    _ => 1,
                };
                let yb = flow.bytes_as(y?, flow.dtype[y?]);
                s.push(Save::Own(gates * yb));
            }
        }
        "TopK" => {
            if grad(x) {
                s.extend(val(node.output(1)));
            }
        }
        _ => return None,
    }
    Some(s)
}

/// What a matrix product keeps of operand `v`: the operand itself (a strided 2-D view is used as
/// it is, and pins its base), or a contiguous copy when PyTorch must fold the batch axes of a
/// non-contiguous operand of rank 3 or more.
fn operand(flow: &Flow, v: ValueId) -> Save {
    let rank = flow.facts[v].rank().unwrap_or(2);
    if !flow.contiguous[v] && rank >= 3 && flow.base[v] != v {
        Save::CopyOf(v, flow.dtype[v].unwrap_or(DType::F32))
    } else {
        Save::Value(v)
    }
}

/// Computes the saved tensors of one training forward pass.
pub fn saved_tensors(graph: &Graph, facts: &[Fact], precision: Precision, device: Device) -> Saved {
    let mut flow = Flow::new(graph, facts, precision, device, HashSet::new());
    let mut patterns = match_patterns(&flow);
    if !patterns.attention_outputs.is_empty() {
        // the layout of attention outputs changes which later reshapes are views: flow again
        flow = Flow::new(
            graph,
            facts,
            precision,
            device,
            patterns.attention_outputs.clone(),
        );
        patterns = match_patterns(&flow);
    }
    let mut seen: HashMap<StorageKey, usize> = HashMap::new();
    let mut out = Saved {
        per_node: vec![0; graph.nodes.len()],
        ..Saved::default()
    };
    let mut weight_copies: HashSet<ValueId> = HashSet::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        if patterns.absorbed.contains(&n) {
            continue;
        }
        let saves = match patterns.replace.get(&n) {
            Some(s) => Some(s.iter().map(clone_save).collect()),
            None => rule(&flow, node),
        };
        let Some(saves) = saves else {
            if super::ops::lookup(node).is_none() && node.op_type != "Constant" {
                out.unmodelled.push(n);
            }
            continue;
        };
        let lowered = precision.is_autocast() && LOWERED.contains(&node.op_type.as_str());
        let fp32_on_cuda = precision.is_autocast()
            && device == Device::Cuda
            && CUDA_FP32.contains(&node.op_type.as_str());
        let mut own = 0u8;
        for save in saves {
            let (key, bytes) = match save {
                Save::Value(v) => {
                    // an op that runs in another dtype than what arrives saves its own cast copy
                    let arriving = flow.dtype[v];
                    let cast_to = if lowered && arriving == Some(DType::F32) {
                        Some(precision.half())
                    } else if fp32_on_cuda && arriving.is_some_and(|d| d.bits() == Some(16)) {
                        Some(DType::F32)
                    } else {
                        None
                    };
                    match cast_to {
                        Some(d) if !flow.is_stored(v) || graph.values[v].init.is_none() => {
                            (StorageKey::Copy(v, n), flow.bytes_as(v, Some(d)))
                        }
                        _ => {
                            let b = flow.base[v];
                            if flow.is_stored(b) || graph.inputs.contains(&b) {
                                continue;
                            }
                            (StorageKey::Value(b), flow.storage_bytes(v))
                        }
                    }
                }
                Save::CopyOf(v, d) => {
                    let d = if lowered && d == DType::F32 {
                        precision.half()
                    } else {
                        d
                    };
                    (StorageKey::Copy(v, n), flow.bytes_as(v, Some(d)))
                }
                Save::Own(bytes) => {
                    own += 1;
                    (StorageKey::Own(n, own), bytes)
                }
                Save::Buffer(v) => {
                    if graph.values[v].init.is_none() {
                        continue;
                    }
                    let bytes = flow.bytes_as(v, facts[v].dtype);
                    if !seen.contains_key(&StorageKey::Value(v)) {
                        out.buffer_bytes += bytes;
                    }
                    (StorageKey::Value(v), bytes)
                }
            };
            if bytes == 0 || seen.contains_key(&key) {
                continue;
            }
            seen.insert(key, out.storages.len());
            out.storages.push((key, bytes, n));
            out.per_node[n] += bytes;
            out.total += bytes;
        }
        // autocast's half copies of conv/linear weights, cached once per weight
        if precision.is_autocast() && LOWERED.contains(&node.op_type.as_str()) {
            for (slot, w) in node.inputs.iter().enumerate() {
                let Some(w) = *w else { continue };
                let is_weight = graph.values[w].init.is_some()
                    && flow.grad[w]
                    && flow.facts[w].rank().unwrap_or(0) >= 2;
                let needed = match node.op_type.as_str() {
                    "Conv" | "ConvTranspose" => slot == 1,
                    _ => node
                        .inputs
                        .iter()
                        .flatten()
                        .any(|&o| o != w && flow.grad[o]),
                };
                if is_weight && needed && weight_copies.insert(w) {
                    let bytes = flow.bytes_as(w, Some(precision.half()));
                    out.storages.push((StorageKey::WeightCopy(w), bytes, n));
                    out.per_node[n] += bytes;
                    out.total += bytes;
                    out.weight_copy_bytes += bytes;
                }
            }
        }
    }
    out
}

fn clone_save(s: &Save) -> Save {
    match s {
        Save::Value(v) => Save::Value(*v),
        Save::CopyOf(v, d) => Save::CopyOf(*v, *d),
        Save::Own(b) => Save::Own(*b),
        Save::Buffer(v) => Save::Buffer(*v),
    }
}
