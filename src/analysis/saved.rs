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
//!    forms), scaled-dot-product attention (fused, or its math path on CPU when it has dropout),
//!    GroupNorm's ONNX decomposition.
//! 4. **Per-op rules**: Conv/Linear/MatMul save their inputs, ReLU/Sigmoid/Tanh/Softmax their output,
//!    ReLU6/Hardswish/GELU/LeakyReLU their input, norms their input plus fp32 statistics, max pooling
//!    its input plus int64 indices, dropout a mask (a bool per element on CUDA, the scaled noise in
//!    the input dtype on CPU), element-wise products the operand the other one needs.
//! 5. **Precision**: under autocast, conv/linear/matmul run in half precision and save their own half
//!    copy of an fp32 input; other ops run in the dtype that arrives, binary ops promote to their
//!    widest operand (a Linear's bias add excepted); statistics stay fp32. On CUDA, autocast also runs
//!    layer/group norm, softmax, log-softmax, interpolation, sums, exp, log and pow in fp32.

// keyed by value and node ids, looked up per node at each of `fit`'s planner steps: a fixed-seed
// fast hasher (SipHash was 9% of `report` on a graph of 10,000 nodes)
use foldhash::{HashMap, HashSet};

use super::fact::Fact;
use super::ops::{movement::PadMode, Autocast, Op, OpDef, Outputs, SlotRole, View};
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
    /// Nodes that save a tensor whose size is unknown (a symbolic or unknown shape): not counted,
    /// so the total is a lower bound.
    pub size_unknown: Vec<NodeId>,
    /// Sum over `storages`.
    pub total: u64,
}

/// What an op's rule asks to keep.
#[derive(Clone, Debug)]
pub enum Save {
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
pub struct Flow<'a> {
    graph: &'a Graph,
    facts: &'a [Fact],
    ops: &'a [Op],
    /// Storage each value lives in (itself for non-views).
    base: Vec<ValueId>,
    contiguous: Vec<bool>,
    grad: Vec<bool>,
    /// Element type in training (autocast changes it).
    dtype: Vec<Option<DType>>,
    /// Values computed from a random draw without a gradient (stochastic-depth and dropout noise):
    /// PyTorch makes them in the dtype of the tensor they scale (`torch.empty(..., dtype=x.dtype)
    /// .bernoulli_()`, `rand_like(x)`), where the export types them fp32.
    noise: Vec<bool>,
    stored: Vec<bool>,
    /// Outputs of attention kernels, laid out so that the head transpose after them is contiguous.
    head_major: HashSet<ValueId>,
    /// Whether the graph runs dropout in training mode (a `Dropout` with ratio > 0 and
    /// `training_mode` set, on a tensor that requires grad): the model was exported with its
    /// dropout active.
    trains_dropout: bool,
    precision: Precision,
    device: Device,
}

fn numel(f: &Fact) -> u64 {
    f.numel().and_then(|d| d.as_u64()).unwrap_or(0)
}

impl<'a> Flow<'a> {
    fn new(
        graph: &'a Graph,
        facts: &'a [Fact],
        ops: &'a [Op],
        precision: Precision,
        device: Device,
        head_major: HashSet<ValueId>,
    ) -> Flow<'a> {
        let n = graph.values.len();
        let stored: Vec<bool> = (0..n).map(|v| graph.stored(v).is_some()).collect();
        let mut f = Flow {
            graph,
            facts,
            ops,
            base: (0..n).collect(),
            contiguous: vec![true; n],
            grad: vec![false; n],
            dtype: facts.iter().map(|f| f.dtype).collect(),
            noise: vec![false; n],
            stored,
            head_major,
            trains_dropout: false,
            precision,
            device,
        };
        for (id, t) in graph.stored_tensors() {
            f.grad[id] =
                storage::classify(graph, id, t.dtype, t.numel().unwrap_or(0)) == Role::Param;
            if precision == Precision::Bf16 && t.dtype.is_float() {
                f.dtype[id] = Some(DType::BF16);
            }
        }
        for (n, node) in graph.nodes.iter().enumerate() {
            f.visit(node, &ops[n]);
        }
        f.trains_dropout = graph.nodes.iter().enumerate().any(|(n, node)| {
            let training = node.input(2).is_some_and(|t| {
                facts[t]
                    .value
                    .as_ref()
                    .and_then(|k| k.as_i64s())
                    .is_none_or(|v| v.iter().any(|&b| b != 0))
            });
            matches!(ops[n], Op::Dropout(_))
                && training
                && node.input(0).is_some_and(|x| f.grad[x])
                && f.dropout_ratio(node, &ops[n]).is_some_and(|r| r > 0.0)
        });
        f
    }

    fn is_scalar(&self, v: ValueId) -> bool {
        numel(&self.facts[v]) <= 1
    }

    /// Whether a value is a stored tensor or derived from stored tensors only.
    fn is_stored(&self, v: ValueId) -> bool {
        self.stored[v]
    }

    fn visit(&mut self, node: &Node, op: &Op) {
        if matches!(op, Op::Constant(_)) {
            // a stored tensor: its requires_grad and dtype were set with the initializers'
            for o in node.outputs().values() {
                self.stored[o] = true;
            }
            return;
        }
        let def = op.def();
        let data_inputs: Vec<ValueId> = node
            .inputs()
            .iter()
            .enumerate()
            .filter(|(slot, _)| def.is_none_or(|d| d.slots.role(*slot) != SlotRole::Config))
            .filter_map(|(_, v)| v)
            .collect();
        let passes = def.is_none_or(|d| d.grad);
        let grad = passes && data_inputs.iter().any(|&v| self.grad[v]);
        let noise = !grad
            && (def.is_some_and(|d| d.outputs == Outputs::Random)
                || data_inputs.iter().any(|&v| self.noise[v]));
        let all_stored = node.inputs().values().next().is_some()
            && node.inputs().values().all(|v| self.stored[v]);
        let x = node.input(0);
        let in_dtype = x.and_then(|v| self.dtype[v]);
        let out_dtype = self.out_dtype(node, op, def, in_dtype);
        if grad && out_dtype.is_some_and(DType::is_float) {
            // noise scaling a tensor is made in that tensor's dtype
            for &v in &data_inputs {
                if self.noise[v] && self.facts[v].dtype.is_some_and(DType::is_float) {
                    self.dtype[v] = out_dtype;
                }
            }
        }
        for (slot, out) in node.outputs().iter().enumerate() {
            let Some(o) = out else { continue };
            self.noise[o] = noise;
            // an output of unknown type (a tensor sequence: SplitToSequence) carries its input's
            let kind = self.facts[o]
                .dtype
                .or_else(|| x.and_then(|x| self.facts[x].dtype));
            self.grad[o] = grad && kind.is_some_and(DType::is_float);
            self.stored[o] = all_stored;
            let indices = matches!(op, Op::MaxPool(_)) && slot == 1;
            // a float output never takes a non-float type from what arrives (the int64 shape of a
            // ConstantOfShape, a Where's condition)
            if self.facts[o].dtype.is_some_and(DType::is_float) && !indices {
                self.dtype[o] = out_dtype.filter(|d| d.is_float()).or(self.facts[o].dtype);
            }
            let Some(x) = x else { continue };
            let view = def.map_or(View::No, |d| d.view);
            let (alias, contiguous) = self.view(node, op, view, x);
            if alias {
                self.base[o] = self.base[x];
                self.contiguous[o] = contiguous;
                self.dtype[o] = self.dtype[x];
            } else if view == View::Reshape {
                // a reshape that cannot be a view copies into a new, contiguous storage
                self.contiguous[o] = true;
            }
        }
    }

    /// The dtype an op produces in training.
    fn out_dtype(
        &self,
        node: &Node,
        op: &Op,
        def: Option<&OpDef>,
        arriving: Option<DType>,
    ) -> Option<DType> {
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
        match def.map_or(Autocast::Follow, |d| d.autocast) {
            Autocast::Follow => arriving,
            Autocast::CastTo => match op {
                Op::Cast(c) => Some(c.to),
                _ => arriving,
            },
            Autocast::Lower => Some(p.half()),
            Autocast::Fp32OnCuda if self.device == Device::Cuda => Some(DType::F32),
            Autocast::Fp32OnCuda => arriving,
            Autocast::Pad => match op {
                Op::Pad(pad) if pad.mode != PadMode::Constant => Some(DType::F32),
                _ => arriving,
            },
            Autocast::Embedding if node.input(0).is_some_and(|v| self.is_stored(v)) => {
                Some(DType::F32)
            }
            Autocast::Embedding => arriving,
            Autocast::Promote => self.promoted(node, op, arriving),
        }
    }

    /// A binary op's type under autocast: its widest non-scalar float operand.
    fn promoted(&self, node: &Node, op: &Op, arriving: Option<DType>) -> Option<DType> {
        {
            let p = self.precision;
            // a Linear's bias add stays in the half type
            if matches!(op, Op::Add) && self.is_bias_add(node) {
                return Some(p.half());
            }
            let widest = |scalars: bool| {
                node.inputs()
                    .iter()
                    .flatten()
                    .filter(|&v| {
                        (scalars || !self.is_scalar(v))
                            && !self.noise[v]
                            && self.facts[v].dtype.is_some_and(DType::is_float)
                    })
                    .filter_map(|v| self.dtype[v])
                    .max_by_key(|d| d.bits())
            };
            // scalars decide only among themselves (`where(mask, 0.0, min)` builds an fp32 mask);
            // a non-float operand (Where's condition) never gives the type
            widest(false)
                .or_else(|| widest(true))
                .or(arriving.filter(|d| d.is_float()))
        }
    }

    /// `MatMul → Add(1-D weight)`: the bias inside `addmm`.
    fn is_bias_add(&self, node: &Node) -> bool {
        let (Some(a), Some(b)) = (node.input(0), node.input(1)) else {
            return false;
        };
        let from_matmul = |v: ValueId| {
            self.graph.values[v]
                .producer()
                .is_some_and(|(p, _)| matches!(self.ops[p], Op::MatMul | Op::Gemm(_)))
        };
        let is_bias =
            |v: ValueId| self.graph.stored(v).is_some() && self.facts[v].rank() == Some(1);
        (from_matmul(a) && is_bias(b)) || (from_matmul(b) && is_bias(a))
    }

    /// Whether the outputs of `node` are views of input `x`, and whether they are contiguous.
    fn view(&self, node: &Node, op: &Op, view: View, x: ValueId) -> (bool, bool) {
        let c = self.contiguous[x];
        // `.to(dtype)` of a tensor already of that dtype returns the tensor itself
        if let Op::Cast(cast) = op {
            if self.dtype[x] == Some(cast.to) && self.facts[x].dtype == Some(cast.to) {
                return (true, c);
            }
        }
        let shape = self.facts[x].shape.as_deref().unwrap_or(&[]);
        let first_big = shape
            .iter()
            .position(|d| d.as_i64() != Some(1))
            .unwrap_or(0);
        match view {
            View::Reshape => (c, true),
            View::Alias => (true, c),
            View::Dropout if self.dropout_ratio(node, op) == Some(0.0) => (true, c),
            View::Dropout => (false, true),
            // the attention kernel writes [B,L,h,D] and returns it as [B,h,L,D]: undoing that is free
            View::Transpose if self.head_major.contains(&x) => (true, true),
            // ... also after a reshape to the same shape (the dynamo and legacy exports emit one)
            View::Transpose
                if c && self.head_major.contains(&self.base[x])
                    && self.facts[x].shape.is_some()
                    && self.facts[x].shape == self.facts[self.base[x]].shape =>
            {
                (true, true)
            }
            View::Transpose => {
                let perm_attr = match op {
                    Op::Transpose(t) => t.perm.as_deref(),
                    _ => None,
                };
                let perm: Vec<usize> = match perm_attr {
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
            View::Expand => (true, false),
            View::Slice => {
                let axes = self.slice_axes(node, op, shape.len());
                (true, c && axes.iter().all(|&a| a <= first_big))
            }
            View::Split => (true, c && axis_of(op, shape.len()) <= first_big),
            View::Gather => {
                let scalar_index = node
                    .input(1)
                    .is_some_and(|i| self.facts[i].rank() == Some(0));
                if scalar_index && !self.is_stored(x) {
                    (true, c && axis_of(op, shape.len()) <= first_big)
                } else {
                    (false, true)
                }
            }
            View::No => (false, true),
        }
    }

    fn slice_axes(&self, node: &Node, op: &Op, rank: usize) -> Vec<usize> {
        let attr = match op {
            Op::Slice(s) => s.axes.clone(),
            _ => None,
        };
        let axes = node
            .input(3)
            .and_then(|a| self.facts[a].value.as_deref()?.as_i64s())
            .or(attr);
        match axes {
            Some(a) => a
                .iter()
                .map(|&x| x.rem_euclid(rank.max(1) as i64) as usize)
                .collect(),
            None => {
                let n = node
                    .input(1)
                    .and_then(|s| self.facts[s].value.as_deref().map(|v| v.len()))
                    .unwrap_or(1);
                (0..n).collect()
            }
        }
    }

    fn dropout_ratio(&self, node: &Node, op: &Op) -> Option<f64> {
        if let Some(r) = node.input(1) {
            return self.facts[r].value.as_deref()?.as_f64s()?.first().copied();
        }
        match op {
            Op::Dropout(d) => Some(d.ratio.unwrap_or(0.5) as f64),
            _ => None,
        }
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

/// The `axis` of a Split or Gather, normalised against a rank.
fn axis_of(op: &Op, rank: usize) -> usize {
    let a = match op {
        Op::Split(s) => s.axis,
        Op::Gather(g) => g.axis,
        _ => 0,
    };
    a.rem_euclid(rank.max(1) as i64) as usize
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
    g.values[v].producer().map(|(n, _)| (n, &g.nodes[n]))
}

fn single_consumer(g: &Graph, v: ValueId) -> Option<(NodeId, &Node)> {
    let (n, _) = g.consumers(v).only()?;
    Some((n, &g.nodes[n]))
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
        replace: HashMap::default(),
        absorbed: HashSet::default(),
        attention_outputs: HashSet::default(),
    };
    for (n, node) in g.nodes.iter().enumerate() {
        match &flow.ops[n] {
            // SiLU: y = x * sigmoid(x)
            Op::Sigmoid => {
                let (Some(x), Some(s)) = (node.input(0), node.output(0)) else {
                    continue;
                };
                if let Some((m, mul)) = single_consumer(g, s) {
                    if matches!(flow.ops[m], Op::Mul) && other_input(mul, s) == Some(x) {
                        p.absorbed.insert(n);
                        p.replace.insert(m, vec![Save::Value(x)]);
                    }
                }
            }
            Op::Erf | Op::Tanh => {
                if let Some((region, last, x)) = gelu_region(flow, n) {
                    p.absorbed.extend(region.iter().copied());
                    p.absorbed.remove(&last);
                    p.replace.insert(last, vec![Save::Value(x)]);
                }
            }
            Op::Softmax(_) => {
                if let Some(a) = sdpa(flow, n) {
                    if a.fused {
                        p.attention_outputs.extend(g.nodes[a.last].output(0));
                    }
                    p.absorbed.extend(a.region.iter().copied());
                    p.absorbed.remove(&a.last);
                    p.replace.insert(a.last, a.saves);
                }
            }
            Op::InstanceNormalization(_) => {
                // GroupNorm: Reshape → InstanceNormalization → Reshape → Mul(γ) → Add(β)
                let Some(out) = node.output(0) else { continue };
                let Some((r, reshape)) = single_consumer(g, out) else {
                    continue;
                };
                if !matches!(flow.ops[r], Op::Reshape(_)) {
                    continue;
                }
                let Some((m, mul)) = reshape.output(0).and_then(|v| single_consumer(g, v)) else {
                    continue;
                };
                if !matches!(flow.ops[m], Op::Mul) {
                    continue;
                }
                p.absorbed.insert(r);
                p.absorbed.insert(m);
                if let Some((a, _)) = mul.output(0).and_then(|v| single_consumer(g, v)) {
                    if matches!(flow.ops[a], Op::Add) {
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
    let elementwise = |n: NodeId| {
        matches!(
            flow.ops[n],
            Op::Mul | Op::Div | Op::Add | Op::Pow | Op::Erf | Op::Tanh
        )
    };
    let is_const = |v: ValueId| flow.is_stored(v) && flow.is_scalar(v);
    // walk back from the center to x
    let mut region = vec![center];
    let mut v = g.nodes[center].input(0)?;
    let x = loop {
        let (p, node) = producer(g, v)?;
        if !elementwise(p) || region.len() > 8 {
            break v;
        }
        let ins: Vec<ValueId> = node.inputs().values().filter(|&i| !is_const(i)).collect();
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
                        if na.inputs().iter().flatten().all(|i| i == *b || is_const(i))
                            && elementwise(ia) =>
                    {
                        region.push(p);
                        region.push(ia);
                        v = *b;
                    }
                    (_, Some((ib, nb)))
                        if nb.inputs().iter().flatten().all(|i| i == *a || is_const(i))
                            && elementwise(ib) =>
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
        if !elementwise(c) {
            return None;
        }
        region.push(c);
        let ins: Vec<ValueId> = node
            .inputs()
            .values()
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
                let only_const = matches!(flow.ops[c2], Op::Mul)
                    && n2
                        .inputs()
                        .iter()
                        .flatten()
                        .all(|i| i == cur || is_const(i));
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

/// A matched scaled-dot-product attention.
struct Sdpa {
    /// The pattern's nodes.
    region: Vec<NodeId>,
    /// Its last node (the product with v), charged with the saves.
    last: NodeId,
    saves: Vec<Save>,
    /// Whether PyTorch runs it as one fused kernel (its output laid out `[B,L,h,D]`), rather than
    /// its math decomposition.
    fused: bool,
}

/// Scaled-dot-product attention: `Mul(q, s)`, `Mul(kᵀ, s)` → `MatMul` → [`Add` mask] → `Softmax` →
/// [NaN guard] → [`Dropout`] → `MatMul(·, v)`, with both scalings present (how PyTorch exports
/// SDPA). The fused kernels (flash on CPU without dropout; flash, memory-efficient and cuDNN on
/// CUDA) save q, k, v, the output and an fp32 logsumexp per query row, and no L×L matrix.
///
/// With dropout, PyTorch's CPU SDPA falls back to its math path, which saves `q·s`, `k·s`, the
/// probabilities, the dropout noise, the dropped probabilities and v, upcast to fp32. The dynamo
/// exporter writes SDPA's dropout as an inference-mode `Dropout` that its optimizer deletes, so a
/// pattern without one is taken to have dropout when the graph runs dropout in training elsewhere
/// (GPT-2, BERT and T5 configurations use one rate for both).
fn sdpa(flow: &Flow, softmax: NodeId) -> Option<Sdpa> {
    let g = flow.graph;
    let mut region = vec![softmax];
    let mut v = g.nodes[softmax].input(0)?;
    let (mut p, mut node) = producer(g, v)?;
    if matches!(flow.ops[p], Op::Add) {
        region.push(p);
        let scores = node
            .inputs()
            .values()
            .find(|&i| producer(g, i).is_some_and(|(pi, _)| matches!(flow.ops[pi], Op::MatMul)))?;
        v = scores;
        (p, node) = producer(g, v)?;
    }
    if !matches!(flow.ops[p], Op::MatMul) {
        return None;
    }
    region.push(p);
    let mut qk = Vec::new();
    for i in [node.input(0)?, node.input(1)?] {
        let (pm, mul) = producer(g, i)?;
        if !matches!(flow.ops[pm], Op::Mul) {
            return None;
        }
        let ins: Vec<ValueId> = mul.inputs().values().collect();
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
    let mut probs = g.nodes[softmax].output(0)?;
    if let Some((guard, w)) = nan_guard(flow, probs) {
        region.extend(guard);
        probs = w;
    }
    let mut dropout = flow.trains_dropout;
    if let Some((d, dnode)) = single_consumer(g, probs) {
        if matches!(flow.ops[d], Op::Dropout(_)) && dnode.input(0) == Some(probs) {
            region.push(d);
            dropout = flow.dropout_ratio(dnode, &flow.ops[d]) != Some(0.0);
            probs = dnode.output(0)?;
        }
    }
    let (m2, mm2) = single_consumer(g, probs)?;
    if !matches!(flow.ops[m2], Op::MatMul) || mm2.input(0) != Some(probs) {
        return None;
    }
    let value = mm2.input(1)?;
    let out = mm2.output(0)?;
    let p_elems = numel(&flow.facts[probs]);
    if dropout && flow.device == Device::Cpu {
        // the math path, in fp32: q·s and k·s (new), probabilities, noise, dropped probabilities,
        // and v (as it is in fp32: a copy when its batch axes cannot fold; an fp32 copy otherwise)
        let mut saves: Vec<Save> = qk
            .iter()
            .map(|&t| Save::Own(numel(&flow.facts[t]).saturating_mul(4)))
            .collect();
        saves.extend((0..3).map(|_| Save::Own(p_elems.saturating_mul(4))));
        saves.push(if flow.precision == Precision::Fp32 {
            operand(flow, value)
        } else {
            Save::Own(numel(&flow.facts[value]).saturating_mul(4))
        });
        return Some(Sdpa {
            region,
            last: m2,
            saves,
            fused: false,
        });
    }
    // logsumexp: one fp32 per query row (the softmax output without its last axis)
    let rows = p_elems / flow.facts[probs].shape.as_ref()?.last()?.as_u64()?.max(1);
    let mut saves: Vec<Save> = qk.into_iter().map(Save::Value).collect();
    saves.push(Save::Value(value));
    saves.push(Save::Value(out));
    saves.push(Save::Own(4 * rows));
    Some(Sdpa {
        region,
        last: m2,
        saves,
        fused: true,
    })
}

/// `Where(IsNaN(p), 0, p)`: the dynamo exporter's guard for fully masked rows after an attention
/// softmax (part of the SDPA kernel in PyTorch). Returns the guard's nodes and its output.
fn nan_guard(flow: &Flow, p: ValueId) -> Option<([NodeId; 2], ValueId)> {
    let g = flow.graph;
    let consumers = g.consumers(p);
    if consumers.len() != 2 {
        return None;
    }
    let (isnan, node) = consumers
        .iter()
        .map(|(c, _)| (c, &g.nodes[c]))
        .find(|(c, _)| matches!(flow.ops[*c], Op::IsNaN))?;
    let (w, wnode) = single_consumer(g, node.output(0)?)?;
    let guarded = matches!(flow.ops[w], Op::Where)
        && wnode.input(0) == node.output(0)
        && wnode.input(2) == Some(p)
        && wnode
            .input(1)
            .is_some_and(|v| flow.is_stored(v) && flow.is_scalar(v))
        && consumers.iter().any(|(c, _)| c == w);
    guarded.then_some(([isnan, w], wnode.output(0)?))
}

/// What an op's save rule sees: the forward flow, the node and its typed op.
pub struct SaveCx<'a> {
    flow: &'a Flow<'a>,
    pub node: &'a Node,
    pub op: &'a Op,
}

impl SaveCx<'_> {
    /// Whether value `v` requires grad.
    pub fn grad(&self, v: Option<ValueId>) -> bool {
        v.is_some_and(|v| self.flow.grad[v])
    }

    /// Whether some output requires grad.
    pub fn out_grad(&self) -> bool {
        self.node
            .outputs()
            .iter()
            .flatten()
            .any(|o| self.flow.grad[o])
    }

    pub fn fact(&self, v: ValueId) -> &Fact {
        &self.flow.facts[v]
    }

    /// The element type of `v` in training (autocast changes it).
    pub fn dtype(&self, v: ValueId) -> Option<DType> {
        self.flow.dtype[v]
    }

    /// Bytes of `v`'s elements in `dtype`.
    pub fn bytes_as(&self, v: ValueId, dtype: Option<DType>) -> u64 {
        self.flow.bytes_as(v, dtype)
    }

    pub fn device(&self) -> Device {
        self.flow.device
    }

    /// Whether `v` is a stored tensor or computed from stored tensors only.
    pub fn stored(&self, v: ValueId) -> bool {
        self.flow.is_stored(v)
    }

    /// Whether `v` is a stored tensor itself (an initializer or a `Constant` node's tensor).
    pub fn is_initializer(&self, v: ValueId) -> bool {
        self.flow.graph.stored(v).is_some()
    }
}

/// The signature of an op's save rule; `None` means "cannot say" (a shape is unknown).
pub type SaveFn = fn(&SaveCx) -> Option<Vec<Save>>;

/// Saves nothing (views, concatenation, additions, constant padding...).
pub fn nothing(_: &SaveCx) -> Option<Vec<Save>> {
    Some(Vec::new())
}

/// The registry's default for a line that does not say what its op saves: nothing, as
/// [`nothing`], but told apart from it (a test lists the ops left at this default, so that a
/// new op must state what autograd keeps for it).
pub fn unstated(_: &SaveCx) -> Option<Vec<Save>> {
    // a body of its own, so that codegen does not merge it with `nothing`
    std::hint::black_box(());
    Some(Vec::new())
}

/// Activations whose backward needs their input (ReLU6, Hardswish, GELU, LeakyReLU, log, sin...).
pub fn input_if_grad(cx: &SaveCx) -> Option<Vec<Save>> {
    let x = cx.node.input(0);
    Some(if cx.grad(x) {
        x.map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

/// Reductions whose backward needs their input and their result (`prod`, the L2 norm,
/// `logsumexp`: derivatives.yaml's `prod_backward`, `norm_backward`, `logsumexp_backward`).
pub fn input_and_output_if_grad(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.grad(cx.node.input(0)) {
        [cx.node.input(0), cx.node.output(0)]
            .into_iter()
            .flatten()
            .map(Save::Value)
            .collect()
    } else {
        Vec::new()
    })
}

/// Gathers by an index tensor (`torch.gather`, advanced indexing: GatherElements, GatherND):
/// the backward scatters into the data's shape by the index, which it keeps.
pub fn index_if_grad(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.grad(cx.node.input(0)) {
        cx.node.input(1).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

/// Activations whose backward needs their output (ReLU, sigmoid, tanh, softmax, exp, sqrt).
pub fn output_if_grad(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.grad(cx.node.input(0)) {
        cx.node.output(0).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

/// Matrix products save each operand the other one needs for its gradient.
pub fn operands(cx: &SaveCx) -> Option<Vec<Save>> {
    let (a, b) = (cx.node.input(0)?, cx.node.input(1)?);
    let mut s = Vec::new();
    if cx.flow.grad[b] {
        s.push(operand(cx.flow, a));
    }
    if cx.flow.grad[a] {
        s.push(operand(cx.flow, b));
    }
    Some(s)
}

/// `a * b` saves the operand the other's gradient needs.
pub fn mul(cx: &SaveCx) -> Option<Vec<Save>> {
    let (a, b) = (cx.node.input(0)?, cx.node.input(1)?);
    let mut s = Vec::new();
    if cx.flow.grad[b] {
        s.push(Save::Value(a));
    }
    if cx.flow.grad[a] {
        s.push(Save::Value(b));
    }
    Some(s)
}

/// `a / b` saves the divisor, and the dividend too when the divisor needs a gradient.
pub fn div(cx: &SaveCx) -> Option<Vec<Save>> {
    let (a, b) = (cx.node.input(0)?, cx.node.input(1)?);
    Some(if cx.flow.grad[b] {
        vec![Save::Value(a), Save::Value(b)]
    } else if cx.flow.grad[a] {
        vec![Save::Value(b)]
    } else {
        Vec::new()
    })
}

/// `Max` and `Min` keep every input to route the gradient.
pub fn all_inputs(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.out_grad() {
        cx.node.inputs().iter().flatten().map(Save::Value).collect()
    } else {
        Vec::new()
    })
}

/// `Where` keeps its condition.
pub fn condition(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.out_grad() {
        cx.node.input(0).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

/// Max pooling and max/min reductions keep their input and int64 indices of the output's size.
pub fn input_and_indices(cx: &SaveCx) -> Option<Vec<Save>> {
    let x = cx.node.input(0);
    if !cx.grad(x) {
        return Some(Vec::new());
    }
    let y = cx.node.output(0)?;
    let mut s: Vec<Save> = x.map(Save::Value).into_iter().collect();
    s.push(Save::Own(numel(cx.fact(y)).saturating_mul(8)));
    Some(s)
}

/// Dropout with p > 0 keeps a full-size tensor: a bool mask on CUDA, the scaled noise in the
/// input's dtype on CPU.
pub fn dropout(cx: &SaveCx) -> Option<Vec<Save>> {
    let ratio = cx.flow.dropout_ratio(cx.node, cx.op).unwrap_or(0.5);
    let x = cx.node.input(0);
    if !cx.grad(x) || ratio <= 0.0 {
        return Some(Vec::new());
    }
    let x = x?;
    Some(vec![match cx.device() {
        Device::Cuda => Save::Own(numel(cx.fact(x))),
        Device::Cpu => Save::Own(cx.bytes_as(x, cx.dtype(x))),
    }])
}

/// An embedding lookup (a `Gather` from a trainable table) keeps its int64 indices.
pub fn embedding_indices(cx: &SaveCx) -> Option<Vec<Save>> {
    let table = cx.node.input(0);
    Some(
        if table.is_some_and(|v| cx.flow.grad[v] && cx.is_initializer(v)) {
            let Some(i) = cx.node.input(1) else {
                return Some(Vec::new());
            };
            let base = cx.flow.base[i];
            // position ids are made in the forward (`arange`) although an export holds them as a
            // constant (legacy: a traced Constant; dynamo: Range on constants): a tensor autograd
            // keeps all the same. Only the model input is not an activation.
            let computed = cx.stored(base) && !cx.flow.graph.inputs.contains(&base);
            match cx.fact(i).dtype {
                Some(d) if computed => vec![Save::CopyOf(i, d)],
                _ => vec![Save::Value(i)],
            }
        } else {
            Vec::new()
        },
    )
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
pub fn saved_tensors(
    graph: &Graph,
    facts: &[Fact],
    ops: &[Op],
    precision: Precision,
    device: Device,
) -> Saved {
    let mut flow = Flow::new(graph, facts, ops, precision, device, HashSet::default());
    let mut patterns = match_patterns(&flow);
    if !patterns.attention_outputs.is_empty() {
        // the layout of attention outputs changes which later reshapes are views: flow again
        flow = Flow::new(
            graph,
            facts,
            ops,
            precision,
            device,
            patterns.attention_outputs.clone(),
        );
        patterns = match_patterns(&flow);
    }
    let mut seen: HashMap<StorageKey, usize> = HashMap::default();
    let mut out = Saved {
        per_node: vec![0; graph.nodes.len()],
        ..Saved::default()
    };
    let mut weight_copies: HashSet<ValueId> = HashSet::default();
    for (n, node) in graph.nodes.iter().enumerate() {
        if patterns.absorbed.contains(&n) {
            continue;
        }
        let op = &ops[n];
        let Some(def) = op.def() else {
            out.unmodelled.push(n);
            continue;
        };
        let saves = match patterns.replace.get(&n) {
            Some(s) => Some(s.clone()),
            None => (def.saves)(&SaveCx {
                flow: &flow,
                node,
                op,
            }),
        };
        let Some(saves) = saves else {
            out.size_unknown.push(n);
            continue;
        };
        let lowered = precision.is_autocast() && def.autocast == Autocast::Lower;
        let fp32_on_cuda = precision.is_autocast()
            && device == Device::Cuda
            && def.autocast == Autocast::Fp32OnCuda;
        let mut own = 0u8;
        let sized = |v: ValueId| facts[v].numel().and_then(|d| d.as_u64()).is_some();
        if saves.iter().any(|s| match *s {
            Save::Value(v) => {
                let b = flow.base[v];
                !sized(v) && !flow.is_stored(b) && !graph.inputs.contains(&b)
            }
            Save::CopyOf(v, _) | Save::Buffer(v) => !sized(v),
            Save::Own(_) => false,
        }) {
            out.size_unknown.push(n);
        }
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
                    // a view of a trainable weight (the Transpose(W) of a legacy Linear export):
                    // autocast casts the weight itself, once per region: a weight copy
                    let root = flow.base[v];
                    let weight_view = flow.is_stored(v)
                        && root != v
                        && flow.grad[root]
                        && graph.stored(root).is_some();
                    match cast_to {
                        Some(d) if weight_view => {
                            if !weight_copies.insert(root) {
                                continue;
                            }
                            let bytes = flow.bytes_as(root, Some(d));
                            out.weight_copy_bytes = out.weight_copy_bytes.saturating_add(bytes);
                            (StorageKey::WeightCopy(root), bytes)
                        }
                        Some(d) if !flow.is_stored(v) || graph.stored(v).is_none() => {
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
                    if graph.stored(v).is_none() {
                        continue;
                    }
                    let bytes = flow.bytes_as(v, facts[v].dtype);
                    if !seen.contains_key(&StorageKey::Value(v)) {
                        out.buffer_bytes = out.buffer_bytes.saturating_add(bytes);
                    }
                    (StorageKey::Value(v), bytes)
                }
            };
            if bytes == 0 || seen.contains_key(&key) {
                continue;
            }
            seen.insert(key, out.storages.len());
            out.storages.push((key, bytes, n));
            // saturating: a hostile shape's sum is refused by training::check_range
            out.per_node[n] = out.per_node[n].saturating_add(bytes);
            out.total = out.total.saturating_add(bytes);
        }
        // autocast's half copies of conv/linear weights, cached once per weight
        if lowered {
            for (slot, w) in node.inputs().iter().enumerate() {
                let Some(w) = w else { continue };
                let is_weight = graph.stored(w).is_some()
                    && flow.grad[w]
                    && flow.facts[w].rank().unwrap_or(0) >= 2;
                let needed = match op {
                    Op::Conv(_) | Op::ConvTranspose(_) => slot == 1,
                    _ => node
                        .inputs()
                        .iter()
                        .flatten()
                        .any(|o| o != w && flow.grad[o]),
                };
                if is_weight && needed && weight_copies.insert(w) {
                    let bytes = flow.bytes_as(w, Some(precision.half()));
                    out.storages.push((StorageKey::WeightCopy(w), bytes, n));
                    out.per_node[n] = out.per_node[n].saturating_add(bytes);
                    out.total = out.total.saturating_add(bytes);
                    out.weight_copy_bytes = out.weight_copy_bytes.saturating_add(bytes);
                }
            }
        }
    }
    out
}
