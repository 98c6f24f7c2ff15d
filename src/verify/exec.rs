//! An f64 interpreter for a subset of ONNX on candle's CPU backend, for numeric verification of
//! rewrites: the original and the rewritten graph run on the same seeded inputs and their outputs
//! are compared.
//!
//! Every value is an f64 candle tensor, integer ones included; ops that need integers (Reshape's
//! shape, axes, pads, Gather's indices, ...) convert them back to i64. Float `Cast`s keep f64, so
//! the interpreter measures a rewrite's own error, not the model's storage precision.

use std::collections::{HashMap, HashSet};
use std::fmt;

use candle_core::{Device, Tensor as CTensor};

use crate::ir::{DType, Graph, Node, NodeId, Tensor, ValueId, Values};

/// Why a node could not be evaluated.
#[derive(Debug, Clone)]
pub enum ExecError {
    /// The op, or one of its attribute values, is outside what this interpreter (or candle) can run.
    Unsupported {
        node: String,
        op: String,
        reason: String,
    },
    /// A supported op failed (shape mismatch, unreadable weights...). `node` is empty when the
    /// error is about a wanted value that nothing provides.
    Failed { node: String, message: String },
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Unsupported { node, op, reason } => {
                write!(f, "node '{node}' ({op}): {reason}")
            }
            ExecError::Failed { node, message } if node.is_empty() => f.write_str(message),
            ExecError::Failed { node, message } => write!(f, "node '{node}': {message}"),
        }
    }
}

impl std::error::Error for ExecError {}

/// Reads a stored tensor (any float or integer dtype, raw, typed or external data) into an f64
/// candle tensor of its shape.
pub fn to_candle(t: &Tensor) -> Result<CTensor, String> {
    use DType::*;
    if !matches!(
        t.dtype,
        F64 | F32 | F16 | BF16 | I64 | I32 | I16 | I8 | U64 | U32 | U16 | U8 | Bool
    ) {
        return Err(format!(
            "tensor '{}': {} values cannot be read as numbers",
            t.name, t.dtype
        ));
    }
    let shape = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| format!("tensor '{}': a dimension does not fit in memory", t.name))?;
    let numel = t
        .numel()
        .ok_or_else(|| format!("tensor '{}': the element count overflows", t.name))?;
    let data: Vec<f64> = match t.read_values(numel) {
        Some(Values::Float(v)) => v,
        Some(Values::Int(v)) => v.into_iter().map(|x| x as f64).collect(),
        None => {
            let why = match &t.data {
                crate::ir::TensorData::External(ext) => format!(
                    "its external data could not be read from {}",
                    ext.path.display()
                ),
                _ => format!("its stored data does not hold {numel} {} values", t.dtype),
            };
            return Err(format!("tensor '{}': {why}", t.name));
        }
    };
    CTensor::from_vec(data, shape, &Device::Cpu).map_err(|e| format!("tensor '{}': {e}", t.name))
}

/// The nodes of `graph` this interpreter cannot run, with the reason (op unknown, attribute value
/// unsupported). Checks only what it can know statically.
pub fn unsupported(graph: &Graph, nodes: &[NodeId]) -> Vec<(NodeId, String)> {
    nodes
        .iter()
        .filter_map(|&id| match graph.nodes.get(id) {
            None => Some((id, format!("there is no node #{id}"))),
            Some(node) => static_check(graph, node).err().map(|why| (id, why)),
        })
        .collect()
}

/// Caches initializers converted to f64 across calls on one graph (for the executor's life: about
/// 1.1 GB for VGG-16's weights).
pub struct Executor<'g> {
    graph: &'g Graph,
    cache: HashMap<ValueId, CTensor>,
    /// Most intermediate values held at once during the last `eval`.
    peak_live: usize,
}

impl<'g> Executor<'g> {
    pub fn new(graph: &'g Graph) -> Self {
        Executor {
            graph,
            cache: HashMap::new(),
            peak_live: 0,
        }
    }

    /// Evaluates `nodes` (ids into graph.nodes, in the given order, which is topological) and
    /// returns the tensors of `wanted`, in order. Values that are not produced by `nodes` come from
    /// `feeds`, else from initializers (graph.values[v].init), else it is an error naming the value.
    /// Intermediates no longer needed by later nodes or `wanted` are dropped as evaluation goes.
    pub fn eval(
        &mut self,
        nodes: &[NodeId],
        feeds: &HashMap<ValueId, CTensor>,
        wanted: &[ValueId],
    ) -> Result<Vec<CTensor>, ExecError> {
        let graph = self.graph;
        let mut producer_pos: HashMap<ValueId, usize> = HashMap::new();
        let mut last_use: HashMap<ValueId, usize> = HashMap::new();
        for (pos, &id) in nodes.iter().enumerate() {
            let node = graph.nodes.get(id).ok_or_else(|| ExecError::Failed {
                node: format!("#{id}"),
                message: format!("there is no node #{id}"),
            })?;
            for v in node.inputs.iter().flatten() {
                last_use.insert(*v, pos);
            }
            for v in node.outputs.iter().flatten() {
                producer_pos.insert(*v, pos);
            }
        }
        let wanted_set: HashSet<ValueId> = wanted.iter().copied().collect();
        let mut env: HashMap<ValueId, CTensor> = HashMap::new();
        self.peak_live = 0;
        for (pos, &id) in nodes.iter().enumerate() {
            let node = &graph.nodes[id];
            static_check(graph, node).map_err(|reason| ExecError::Unsupported {
                node: node.name.clone(),
                op: node.op_type.clone(),
                reason,
            })?;
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for v in &node.inputs {
                inputs.push(match v {
                    None => None,
                    Some(v) => Some(self.lookup(*v, &env, feeds, &producer_pos).map_err(
                        |message| ExecError::Failed {
                            node: node.name.clone(),
                            message,
                        },
                    )?),
                });
            }
            let cx = Cx { node, inputs };
            let outs = run_op(&cx)?;
            drop(cx);
            for (slot, v) in node.outputs.iter().enumerate() {
                let Some(v) = *v else { continue };
                let Some(t) = outs.get(slot) else {
                    return Err(ExecError::Unsupported {
                        node: node.name.clone(),
                        op: node.op_type.clone(),
                        reason: format!(
                            "output {slot} ('{}') is not computed by the interpreter",
                            graph.values[v].name
                        ),
                    });
                };
                let used_later = last_use.get(&v).is_some_and(|&p| p > pos);
                if used_later || wanted_set.contains(&v) {
                    env.insert(v, t.clone());
                }
            }
            for v in node.inputs.iter().flatten() {
                if last_use.get(v) == Some(&pos) && !wanted_set.contains(v) {
                    env.remove(v);
                }
            }
            self.peak_live = self.peak_live.max(env.len());
        }
        wanted
            .iter()
            .map(|&v| {
                self.lookup(v, &env, feeds, &producer_pos)
                    .map_err(|message| ExecError::Failed {
                        node: String::new(),
                        message,
                    })
            })
            .collect()
    }

    fn lookup(
        &mut self,
        v: ValueId,
        env: &HashMap<ValueId, CTensor>,
        feeds: &HashMap<ValueId, CTensor>,
        producer_pos: &HashMap<ValueId, usize>,
    ) -> Result<CTensor, String> {
        let value = self
            .graph
            .values
            .get(v)
            .ok_or_else(|| format!("there is no value #{v}"))?;
        if producer_pos.contains_key(&v) {
            return env
                .get(&v)
                .cloned()
                .ok_or_else(|| format!("value '{}' is read before it is computed", value.name));
        }
        if let Some(t) = feeds.get(&v) {
            return if t.dtype() == candle_core::DType::F64 {
                Ok(t.clone())
            } else {
                t.to_dtype(candle_core::DType::F64)
                    .map_err(|e| format!("feed '{}': {}", value.name, first_line(&e)))
            };
        }
        if let Some(t) = self.cache.get(&v) {
            return Ok(t.clone());
        }
        if let Some(init) = &value.init {
            let t = to_candle(init)?;
            self.cache.insert(v, t.clone());
            return Ok(t);
        }
        Err(format!(
            "value '{}' is not computed by the evaluated nodes, not fed and not an initializer",
            value.name
        ))
    }
}

/// Deterministic random normal f64 tensor: splitmix64 and Box-Muller, so that the numbers do not
/// depend on candle's generator.
///
/// # Panics
/// When the element count of `shape` overflows `usize`.
pub fn seeded_normal(shape: &[usize], seed: u64) -> CTensor {
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .expect("the element count of the shape overflows usize");
    let data = crate::util::rng::normals(seed, n);
    CTensor::from_vec(data, shape, &Device::Cpu).expect("the data has the shape's element count")
}

// ---------------------------------------------------------------------------------------------
// Static checks

/// What can be known without running: the op is implemented, and its attributes are in range.
fn static_check(graph: &Graph, node: &Node) -> Result<(), String> {
    if !(node.domain.is_empty() || node.domain == "ai.onnx") {
        return Err(format!(
            "ops of domain '{}' are not supported by the interpreter",
            node.domain
        ));
    }
    if op_fn(&node.op_type).is_none() {
        return Err("the interpreter has no implementation of this op".into());
    }
    let attrs = &node.attrs;
    let ints = |name: &str| attrs.ints_opt(name).ok().flatten().unwrap_or(&[]);
    let extra_output = |from: usize, what: &str| -> Result<(), String> {
        match node.outputs.iter().skip(from).flatten().next() {
            Some(_) => Err(format!(
                "the {what} output is not computed by the interpreter"
            )),
            None => Ok(()),
        }
    };
    match node.op_type.as_str() {
        "Conv" => {
            let w_rank = node
                .input(1)
                .and_then(|w| graph.values.get(w))
                .and_then(|w| w.init.as_ref())
                .map(|t| t.dims.len());
            let spatial = match attrs.ints_opt("kernel_shape").ok().flatten() {
                Some(k) => Some(k.len()),
                None => w_rank.map(|r| r.saturating_sub(2)),
            };
            if let Some(n) = spatial.filter(|&n| n > 2) {
                return Err(format!(
                    "{n}-D convolution cannot be checked with candle (1-D and 2-D only)"
                ));
            }
        }
        "MaxPool" | "AveragePool" => {
            let n = ints("kernel_shape").len();
            if n > 2 {
                return Err(format!(
                    "{n}-D pooling cannot be checked with candle (1-D and 2-D only)"
                ));
            }
            if ints("dilations").iter().any(|&d| d != 1) {
                return Err("dilated pooling cannot be checked with candle".into());
            }
            extra_output(1, "Indices")?;
        }
        "BatchNormalization" => {
            if attrs.int_or("training_mode", 0).unwrap_or(0) != 0 {
                return Err("training_mode=1 is not supported (inference only)".into());
            }
            extra_output(1, "running statistics")?;
        }
        "Gelu" => {
            let approx = attrs.string_opt("approximate").ok().flatten();
            if !matches!(approx.as_deref(), None | Some("none") | Some("tanh")) {
                return Err(format!(
                    "approximate='{}' is not supported",
                    approx.unwrap_or_default()
                ));
            }
        }
        "Cast" => {
            if let Ok(Some(to)) = attrs.dtype_opt("to") {
                if !(to.is_float() || to.is_int() || to == DType::Bool) {
                    return Err(format!("casting to {to} is not supported"));
                }
            }
        }
        "Constant" => {
            for name in ["sparse_value", "value_string", "value_strings"] {
                if attrs.get(name).is_some() {
                    return Err(format!("a constant given as '{name}' is not supported"));
                }
            }
        }
        "Pad" => {
            let mode = attrs.string_opt("mode").ok().flatten();
            if !matches!(mode.as_deref(), None | Some("constant") | Some("edge")) {
                return Err(format!(
                    "mode='{}' is not supported (constant and edge only)",
                    mode.unwrap_or_default()
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Op context

type OpResult = Result<Vec<CTensor>, ExecError>;
type OpFn = fn(&Cx) -> OpResult;

/// One node being evaluated, with its input tensors (`None` for omitted optional inputs).
struct Cx<'a> {
    node: &'a Node,
    inputs: Vec<Option<CTensor>>,
}

/// Turns any error into [`ExecError::Failed`] naming the node.
trait At<T> {
    fn at(self, cx: &Cx) -> Result<T, ExecError>;
}

impl<T, E: fmt::Display> At<T> for Result<T, E> {
    fn at(self, cx: &Cx) -> Result<T, ExecError> {
        self.map_err(|e| cx.fail(first_line(&e)))
    }
}

fn first_line(e: &impl fmt::Display) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or_default().trim().to_string()
}

impl Cx<'_> {
    fn fail(&self, message: impl Into<String>) -> ExecError {
        ExecError::Failed {
            node: self.node.name.clone(),
            message: message.into(),
        }
    }

    fn unsupported(&self, reason: impl Into<String>) -> ExecError {
        ExecError::Unsupported {
            node: self.node.name.clone(),
            op: self.node.op_type.clone(),
            reason: reason.into(),
        }
    }

    fn opt(&self, i: usize) -> Option<&CTensor> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    fn input(&self, i: usize) -> Result<&CTensor, ExecError> {
        self.opt(i)
            .ok_or_else(|| self.fail(format!("input {i} is missing")))
    }

    fn input_ints(&self, i: usize) -> Result<Option<Vec<i64>>, ExecError> {
        self.opt(i)
            .map(|t| to_ints(t).map_err(|e| self.fail(format!("input {i}: {e}"))))
            .transpose()
    }

    /// A scalar input (one element, any rank).
    fn input_scalar(&self, i: usize) -> Result<Option<f64>, ExecError> {
        let Some(t) = self.opt(i) else {
            return Ok(None);
        };
        let v = values(t).at(self)?;
        match v.as_slice() {
            [x] => Ok(Some(*x)),
            _ => Err(self.fail(format!(
                "input {i} must hold one value, found shape {:?}",
                t.dims()
            ))),
        }
    }

    fn int(&self, name: &str, default: i64) -> Result<i64, ExecError> {
        self.node.attrs.int_or(name, default).at(self)
    }

    fn float(&self, name: &str, default: f32) -> Result<f64, ExecError> {
        self.node
            .attrs
            .float_or(name, default)
            .map(f64::from)
            .at(self)
    }

    fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, ExecError> {
        Ok(self
            .node
            .attrs
            .ints_opt(name)
            .at(self)?
            .map(<[i64]>::to_vec))
    }

    fn string(&self, name: &str) -> Result<Option<String>, ExecError> {
        self.node.attrs.string_opt(name).at(self)
    }

    /// Axes given as input `i` (newer opsets) or attribute `name` (older ones).
    fn axes(&self, i: usize, name: &str) -> Result<Option<Vec<i64>>, ExecError> {
        match self.input_ints(i)? {
            Some(a) => Ok(Some(a)),
            None => self.ints(name),
        }
    }

    /// `axis` in `[-rank, rank)` as an index.
    fn axis(&self, axis: i64, rank: usize) -> Result<usize, ExecError> {
        norm_axis(axis, rank)
            .ok_or_else(|| self.fail(format!("axis {axis} is out of range for rank {rank}")))
    }

    /// Distinct axes, normalised and sorted.
    fn axis_set(&self, axes: &[i64], rank: usize) -> Result<Vec<usize>, ExecError> {
        let mut out = axes
            .iter()
            .map(|&a| self.axis(a, rank))
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_unstable();
        if out.windows(2).any(|w| w[0] == w[1]) {
            return Err(self.fail(format!("axes {axes:?} repeat an axis")));
        }
        Ok(out)
    }
}

fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if axis < 0 { axis.checked_add(r)? } else { axis };
    (0..r).contains(&a).then_some(a as usize)
}

fn values(t: &CTensor) -> candle_core::Result<Vec<f64>> {
    t.flatten_all()?.to_vec1::<f64>()
}

/// The values of an integer-valued tensor (shapes, axes, indices) as i64.
fn to_ints(t: &CTensor) -> Result<Vec<i64>, String> {
    values(t)
        .map_err(|e| first_line(&e))?
        .into_iter()
        .map(|x| {
            if x.is_finite() && x.fract() == 0.0 {
                // i64::MAX read from an int64 tensor is 2^63 in f64; `as` saturates it back
                Ok(x as i64)
            } else {
                Err(format!("expected integers, found {x}"))
            }
        })
        .collect()
}

fn tensor(data: Vec<f64>, shape: &[usize]) -> candle_core::Result<CTensor> {
    CTensor::from_vec(data, shape, &Device::Cpu)
}

fn map(t: &CTensor, f: impl Fn(f64) -> f64) -> candle_core::Result<CTensor> {
    tensor(values(t)?.into_iter().map(f).collect(), t.dims())
}

fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Numpy (bidirectional) broadcasting of two shapes.
fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    (0..n)
        .map(|i| {
            let x = if i + a.len() >= n {
                a[i + a.len() - n]
            } else {
                1
            };
            let y = if i + b.len() >= n {
                b[i + b.len() - n]
            } else {
                1
            };
            match (x, y) {
                (x, y) if x == y => Some(x),
                (1, y) => Some(y),
                (x, 1) => Some(x),
                _ => None,
            }
        })
        .collect()
}

/// Pads `axis` with `left` and `right` copies of `value`.
fn pad_const(
    t: &CTensor,
    axis: usize,
    left: usize,
    right: usize,
    value: f64,
) -> candle_core::Result<CTensor> {
    if left == 0 && right == 0 {
        return Ok(t.clone());
    }
    let mut dims = t.dims().to_vec();
    let mut parts = Vec::with_capacity(3);
    if left > 0 {
        dims[axis] = left;
        parts.push(CTensor::full(value, dims.as_slice(), t.device())?);
    }
    parts.push(t.clone());
    if right > 0 {
        dims[axis] = right;
        parts.push(CTensor::full(value, dims.as_slice(), t.device())?);
    }
    CTensor::cat(&parts, axis)
}

// ---------------------------------------------------------------------------------------------
// Op table

const OPS: &[(&str, OpFn)] = &[
    ("Conv", conv),
    ("Gemm", gemm),
    ("MatMul", matmul),
    ("Add", add),
    ("Sub", sub),
    ("Mul", mul),
    ("Div", div),
    ("Pow", pow),
    ("Max", max),
    ("Min", min),
    ("Sum", sum),
    ("Neg", neg),
    ("Abs", abs),
    ("Sqrt", sqrt),
    ("Exp", exp),
    ("Log", log),
    ("Reciprocal", reciprocal),
    ("Erf", erf),
    ("Relu", relu),
    ("LeakyRelu", leaky_relu),
    ("Sigmoid", sigmoid),
    ("Tanh", tanh),
    ("Clip", clip),
    ("HardSigmoid", hard_sigmoid),
    ("HardSwish", hard_swish),
    ("Gelu", gelu),
    ("Softmax", softmax),
    ("MaxPool", max_pool),
    ("AveragePool", average_pool),
    ("GlobalAveragePool", global_average_pool),
    ("GlobalMaxPool", global_max_pool),
    ("ReduceMean", reduce_mean),
    ("ReduceSum", reduce_sum),
    ("ReduceMax", reduce_max),
    ("ReduceMin", reduce_min),
    ("BatchNormalization", batch_norm),
    ("LayerNormalization", layer_norm),
    ("Flatten", flatten),
    ("Reshape", reshape),
    ("Transpose", transpose),
    ("Squeeze", squeeze),
    ("Unsqueeze", unsqueeze),
    ("Concat", concat),
    ("Slice", slice),
    ("Expand", expand),
    ("Pad", pad),
    ("Identity", identity),
    ("Dropout", dropout),
    ("Shape", shape),
    ("Gather", gather),
    ("Cast", cast),
    ("Constant", constant),
];

fn op_fn(op_type: &str) -> Option<OpFn> {
    OPS.iter()
        .find(|(name, _)| *name == op_type)
        .map(|(_, f)| *f)
}

fn run_op(cx: &Cx) -> OpResult {
    match op_fn(&cx.node.op_type) {
        Some(f) => f(cx),
        None => Err(cx.unsupported("the interpreter has no implementation of this op")),
    }
}

fn one(t: CTensor) -> OpResult {
    Ok(vec![t])
}

// ---------------------------------------------------------------------------------------------
// Convolution and pooling

/// A conv or pool window over `n` spatial axes, with the padding resolved.
#[derive(Debug)]
struct Window {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    begin: Vec<usize>,
    end: Vec<usize>,
    /// Extra end padding so that `ceil_mode`'s last window fits; it is never counted as input.
    overhang: Vec<usize>,
    out: Vec<usize>,
}

fn window(
    cx: &Cx,
    kernel: &[usize],
    input: &[usize],
    ceil_mode: bool,
) -> Result<Window, ExecError> {
    let n = kernel.len();
    let list = |name: &str, default: usize, len: usize| -> Result<Vec<usize>, ExecError> {
        match cx.ints(name)? {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => v
                .iter()
                .map(|&x| {
                    usize::try_from(x).map_err(|_| {
                        cx.fail(format!("attribute '{name}' has a negative value {x}"))
                    })
                })
                .collect(),
            Some(v) => Err(cx.fail(format!(
                "attribute '{name}' has {} values, expected {len}",
                v.len()
            ))),
        }
    };
    let strides = list("strides", 1, n)?;
    let dilations = list("dilations", 1, n)?;
    let pads = list("pads", 0, 2 * n)?;
    if strides
        .iter()
        .chain(&dilations)
        .chain(kernel)
        .any(|&v| v == 0)
    {
        return Err(cx.fail("kernel sizes, strides and dilations must be positive"));
    }
    let auto_pad = cx.string("auto_pad")?.unwrap_or_default();
    let ovf = || cx.fail("window arithmetic overflows");
    let mut w = Window {
        kernel: kernel.to_vec(),
        strides,
        dilations,
        begin: Vec::with_capacity(n),
        end: Vec::with_capacity(n),
        overhang: Vec::with_capacity(n),
        out: Vec::with_capacity(n),
    };
    for i in 0..n {
        let (k, s, d, len) = (kernel[i], w.strides[i], w.dilations[i], input[i]);
        if len == 0 {
            return Err(cx.fail(format!("spatial axis {i} is empty")));
        }
        let extent = (k - 1)
            .checked_mul(d)
            .and_then(|v| v.checked_add(1))
            .ok_or_else(ovf)?;
        let same = matches!(auto_pad.as_str(), "SAME_UPPER" | "SAME_LOWER");
        let (b, e) = match auto_pad.as_str() {
            "" | "NOTSET" => (pads[i], pads[i + n]),
            "VALID" => (0, 0),
            "SAME_UPPER" | "SAME_LOWER" => {
                let out = len.div_ceil(s);
                let total = ((out - 1) * s)
                    .checked_add(extent)
                    .ok_or_else(ovf)?
                    .saturating_sub(len);
                if auto_pad == "SAME_UPPER" {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                }
            }
            other => return Err(cx.fail(format!("unknown auto_pad '{other}'"))),
        };
        let padded = len
            .checked_add(b)
            .and_then(|v| v.checked_add(e))
            .ok_or_else(ovf)?;
        if padded < extent {
            return Err(cx.fail(format!(
                "the window (extent {extent}) is larger than the padded input ({len} + {}) on spatial axis {i}",
                b + e
            )));
        }
        let span = padded - extent;
        let out = if same {
            len.div_ceil(s)
        } else if ceil_mode {
            let out = span.div_ceil(s) + 1;
            // the last window must start inside the input or the begin padding
            if (out - 1).checked_mul(s).ok_or_else(ovf)? >= len + b {
                out - 1
            } else {
                out
            }
        } else {
            span / s + 1
        };
        let needed = (out - 1)
            .checked_mul(s)
            .and_then(|v| v.checked_add(extent))
            .ok_or_else(ovf)?;
        w.begin.push(b);
        w.end.push(e);
        w.overhang.push(needed.saturating_sub(padded));
        w.out.push(out);
    }
    Ok(w)
}

/// Cuts each spatial axis (from axis 2) to the window's output size.
fn narrow_out(cx: &Cx, y: CTensor, out: &[usize]) -> Result<CTensor, ExecError> {
    let mut y = y;
    for (i, &o) in out.iter().enumerate() {
        let have = y.dims()[2 + i];
        if have < o {
            return Err(cx.fail(format!("spatial axis {i} has {have} outputs, expected {o}")));
        }
        if have > o {
            y = y.narrow(2 + i, 0, o).at(cx)?;
        }
    }
    Ok(y)
}

fn spatial_rank(cx: &Cx, x: &CTensor) -> Result<usize, ExecError> {
    match x.rank() {
        r @ (3 | 4) => Ok(r - 2),
        r if r > 4 => Err(cx.unsupported(format!(
            "{}-D spatial input cannot be checked with candle (1-D and 2-D only)",
            r - 2
        ))),
        r => Err(cx.fail(format!("input has rank {r}, expected (N, C, spatial...)"))),
    }
}

fn conv(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let w = cx.input(1)?;
    let n = spatial_rank(cx, x)?;
    if w.rank() != x.rank() {
        return Err(cx.fail(format!(
            "input has rank {} but the weight has rank {}",
            x.rank(),
            w.rank()
        )));
    }
    let group = cx.int("group", 1)?;
    let group = usize::try_from(group)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| cx.fail(format!("attribute 'group' must be positive, found {group}")))?;
    let (c, m, wc) = (x.dims()[1], w.dims()[0], w.dims()[1]);
    if wc.checked_mul(group) != Some(c) {
        return Err(cx.fail(format!(
            "input has {c} channels but the weight expects {wc} x group {group}"
        )));
    }
    if m % group != 0 {
        return Err(cx.fail(format!(
            "{m} output channels do not split into {group} groups"
        )));
    }
    let kernel = &w.dims()[2..];
    if let Some(k) = cx.ints("kernel_shape")? {
        if k.len() != n || k.iter().zip(kernel).any(|(&a, &b)| a != b as i64) {
            return Err(cx.fail(format!(
                "attribute kernel_shape {k:?} does not match the weight's {kernel:?}"
            )));
        }
    }
    let win = window(cx, kernel, &x.dims()[2..], false)?;
    // as 2-D: a 1-D convolution is one of height 1 (see verify/conv.rs for why not candle's conv2d)
    let two = |v: &[usize], one: usize| if n == 1 { [one, v[0]] } else { [v[0], v[1]] };
    let [h, wd] = two(&x.dims()[2..], 1);
    let [kh, kw] = two(kernel, 1);
    let [pt, pl] = two(&win.begin, 0);
    let [pb, pr] = two(&win.end, 0);
    let geometry = super::conv::Geometry {
        input: [x.dims()[0], c, h, wd],
        kernel: [m, wc, kh, kw],
        group,
        strides: two(&win.strides, 1),
        dilations: two(&win.dilations, 1),
        pads: [pt, pl, pb, pr],
    };
    let data = |t: &CTensor| t.flatten_all().and_then(|t| t.to_vec1::<f64>()).at(cx);
    let (out, [b, m_out, ho, wo]) =
        super::conv::conv2d(&data(x)?, &data(w)?, &geometry).map_err(|e| cx.fail(e))?;
    let shape = if n == 1 {
        vec![b, m_out, wo]
    } else {
        vec![b, m_out, ho, wo]
    };
    let y = CTensor::from_vec(out, shape, &candle_core::Device::Cpu).at(cx)?;
    let mut y = narrow_out(cx, y, &win.out)?;
    if let Some(b) = cx.opt(2) {
        if b.dims() != [m] {
            return Err(cx.fail(format!("bias has shape {:?}, expected [{m}]", b.dims())));
        }
        let mut shape = vec![1, m];
        shape.resize(n + 2, 1);
        y = y.broadcast_add(&b.reshape(shape).at(cx)?).at(cx)?;
    }
    one(y)
}

/// Pads, pools with candle (as 2-D) and cuts to the window's output.
fn pool2d(
    cx: &Cx,
    x: &CTensor,
    win: &Window,
    pad_value: f64,
    max: bool,
) -> Result<CTensor, ExecError> {
    let n = win.kernel.len();
    let mut xp = x.clone();
    for i in 0..n {
        xp = pad_const(&xp, 2 + i, win.begin[i], win.end[i], pad_value).at(cx)?;
        let overhang_value = if max { f64::NEG_INFINITY } else { 0.0 };
        xp = pad_const(&xp, 2 + i, 0, win.overhang[i], overhang_value).at(cx)?;
    }
    let (k, s) = if n == 1 {
        xp = xp.unsqueeze(2).at(cx)?;
        ((1, win.kernel[0]), (1, win.strides[0]))
    } else {
        (
            (win.kernel[0], win.kernel[1]),
            (win.strides[0], win.strides[1]),
        )
    };
    let y = if max {
        xp.max_pool2d_with_stride(k, s)
    } else {
        xp.avg_pool2d_with_stride(k, s)
    }
    .at(cx)?;
    let y = if n == 1 { y.squeeze(2).at(cx)? } else { y };
    narrow_out(cx, y, &win.out)
}

fn pool_window(cx: &Cx, x: &CTensor) -> Result<Window, ExecError> {
    let n = spatial_rank(cx, x)?;
    let kernel = cx
        .ints("kernel_shape")?
        .ok_or_else(|| cx.fail("attribute 'kernel_shape' is missing"))?;
    if kernel.len() != n {
        return Err(cx.fail(format!(
            "kernel_shape has {} values for {n} spatial axes",
            kernel.len()
        )));
    }
    let kernel = kernel
        .iter()
        .map(|&k| usize::try_from(k))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| cx.fail("kernel sizes must be positive"))?;
    let win = window(cx, &kernel, &x.dims()[2..], cx.int("ceil_mode", 0)? != 0)?;
    if win.dilations.iter().any(|&d| d != 1) {
        return Err(cx.unsupported("dilated pooling cannot be checked with candle"));
    }
    Ok(win)
}

fn max_pool(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let win = pool_window(cx, x)?;
    one(pool2d(cx, x, &win, f64::NEG_INFINITY, true)?)
}

fn average_pool(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let win = pool_window(cx, x)?;
    let include_pad = cx.int("count_include_pad", 0)? != 0;
    let sums = pool2d(cx, x, &win, 0.0, false)?;
    let padded = win.begin.iter().chain(&win.end).any(|&p| p > 0);
    if !win.overhang.iter().any(|&o| o > 0) && (include_pad || !padded) {
        return one(sums);
    }
    // the divisor counts the cells of each window that are input (or padding, with count_include_pad)
    let mut ones_shape = vec![1, 1];
    ones_shape.extend_from_slice(&x.dims()[2..]);
    let ones = CTensor::ones(ones_shape, candle_core::DType::F64, x.device()).at(cx)?;
    let counts = pool2d(cx, &ones, &win, if include_pad { 1.0 } else { 0.0 }, false)?;
    one(sums.broadcast_div(&counts).at(cx)?)
}

fn global_average_pool(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    if x.rank() < 3 {
        return Err(cx.fail(format!("input has rank {}, expected at least 3", x.rank())));
    }
    one(x.mean_keepdim((2..x.rank()).collect::<Vec<_>>()).at(cx)?)
}

fn global_max_pool(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    if x.rank() < 3 {
        return Err(cx.fail(format!("input has rank {}, expected at least 3", x.rank())));
    }
    let mut y = x.clone();
    for axis in 2..x.rank() {
        if y.dims()[axis] == 0 {
            return Err(cx.fail("the maximum of an empty axis is undefined"));
        }
        y = y.max_keepdim(axis).at(cx)?;
    }
    one(y)
}

// ---------------------------------------------------------------------------------------------
// Linear algebra

fn gemm(cx: &Cx) -> OpResult {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(cx.fail(format!(
            "A and B must be matrices, found shapes {:?} and {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let a = if cx.int("transA", 0)? != 0 {
        a.t().at(cx)?
    } else {
        a.clone()
    };
    let b = if cx.int("transB", 0)? != 0 {
        b.t().at(cx)?
    } else {
        b.clone()
    };
    let (m, k) = (a.dims()[0], a.dims()[1]);
    let (k2, n) = (b.dims()[0], b.dims()[1]);
    if k != k2 {
        return Err(cx.fail(format!(
            "inner dimensions differ: A' is {m}x{k}, B' is {k2}x{n}"
        )));
    }
    // candle multiplies a transposed view in place: copying a transposed 4096 x 25088 weight
    // first (strided, cache-hostile) cost more than the product itself
    let mut y = match a.matmul(&b) {
        Ok(y) => y,
        Err(_) => a
            .contiguous()
            .at(cx)?
            .matmul(&b.contiguous().at(cx)?)
            .at(cx)?,
    };
    let alpha = cx.float("alpha", 1.0)?;
    if alpha != 1.0 {
        y = y.affine(alpha, 0.0).at(cx)?;
    }
    if let Some(c) = cx.opt(2) {
        let beta = cx.float("beta", 1.0)?;
        let c = if beta != 1.0 {
            c.affine(beta, 0.0).at(cx)?
        } else {
            c.clone()
        };
        y = y.broadcast_add(&c).at(cx)?;
        if y.dims() != [m, n] {
            return Err(cx.fail(format!(
                "C of shape {:?} does not broadcast to {m}x{n}",
                c.dims()
            )));
        }
    }
    one(y)
}

fn matmul(cx: &Cx) -> OpResult {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    if a.rank() == 0 || b.rank() == 0 {
        return Err(cx.fail("MatMul operands must have rank 1 or more"));
    }
    let a2 = if a.rank() == 1 {
        a.unsqueeze(0).at(cx)?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.unsqueeze(1).at(cx)?
    } else {
        b.clone()
    };
    let k = a2.dims()[a2.rank() - 1];
    let k2 = b2.dims()[b2.rank() - 2];
    if k != k2 {
        return Err(cx.fail(format!(
            "inner dimensions differ: {:?} x {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let mut y = a2
        .contiguous()
        .at(cx)?
        .broadcast_matmul(&b2.contiguous().at(cx)?)
        .at(cx)?;
    if a.rank() == 1 {
        y = y.squeeze(y.rank() - 2).at(cx)?;
    }
    if b.rank() == 1 {
        y = y.squeeze(y.rank() - 1).at(cx)?;
    }
    one(y)
}

// ---------------------------------------------------------------------------------------------
// Element-wise

fn binary(cx: &Cx, f: fn(&CTensor, &CTensor) -> candle_core::Result<CTensor>) -> OpResult {
    one(f(cx.input(0)?, cx.input(1)?).at(cx)?)
}

fn add(cx: &Cx) -> OpResult {
    binary(cx, CTensor::broadcast_add)
}

fn sub(cx: &Cx) -> OpResult {
    binary(cx, CTensor::broadcast_sub)
}

fn mul(cx: &Cx) -> OpResult {
    binary(cx, CTensor::broadcast_mul)
}

fn div(cx: &Cx) -> OpResult {
    binary(cx, CTensor::broadcast_div)
}

/// `f64::powf` element by element: candle's pow goes through `exp(log)` and loses negative bases.
fn pow(cx: &Cx) -> OpResult {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    let shape = broadcast_shape(a.dims(), b.dims()).ok_or_else(|| {
        cx.fail(format!(
            "shapes {:?} and {:?} do not broadcast",
            a.dims(),
            b.dims()
        ))
    })?;
    let av = values(&a.broadcast_as(shape.as_slice()).at(cx)?).at(cx)?;
    let bv = values(&b.broadcast_as(shape.as_slice()).at(cx)?).at(cx)?;
    let y = av.iter().zip(&bv).map(|(x, e)| x.powf(*e)).collect();
    one(tensor(y, &shape).at(cx)?)
}

/// Folds the (one or more) inputs with a broadcasting binary op.
fn variadic(cx: &Cx, f: fn(&CTensor, &CTensor) -> candle_core::Result<CTensor>) -> OpResult {
    let mut inputs = cx.inputs.iter().flatten();
    let first = inputs
        .next()
        .ok_or_else(|| cx.fail("at least one input is needed"))?;
    let mut y = first.clone();
    for t in inputs {
        y = f(&y, t).at(cx)?;
    }
    one(y)
}

fn max(cx: &Cx) -> OpResult {
    variadic(cx, CTensor::broadcast_maximum)
}

fn min(cx: &Cx) -> OpResult {
    variadic(cx, CTensor::broadcast_minimum)
}

fn sum(cx: &Cx) -> OpResult {
    variadic(cx, CTensor::broadcast_add)
}

fn unary(cx: &Cx, f: fn(&CTensor) -> candle_core::Result<CTensor>) -> OpResult {
    one(f(cx.input(0)?).at(cx)?)
}

fn neg(cx: &Cx) -> OpResult {
    unary(cx, CTensor::neg)
}

fn abs(cx: &Cx) -> OpResult {
    unary(cx, CTensor::abs)
}

fn sqrt(cx: &Cx) -> OpResult {
    unary(cx, CTensor::sqrt)
}

fn exp(cx: &Cx) -> OpResult {
    unary(cx, CTensor::exp)
}

fn log(cx: &Cx) -> OpResult {
    unary(cx, CTensor::log)
}

fn reciprocal(cx: &Cx) -> OpResult {
    unary(cx, CTensor::recip)
}

/// candle's f64 erf is libm's.
fn erf(cx: &Cx) -> OpResult {
    unary(cx, CTensor::erf)
}

fn relu(cx: &Cx) -> OpResult {
    unary(cx, CTensor::relu)
}

fn tanh(cx: &Cx) -> OpResult {
    unary(cx, CTensor::tanh)
}

fn pointwise(cx: &Cx, f: impl Fn(f64) -> f64) -> OpResult {
    one(map(cx.input(0)?, f).at(cx)?)
}

fn leaky_relu(cx: &Cx) -> OpResult {
    let alpha = cx.float("alpha", 0.01)?;
    pointwise(cx, |x| if x < 0.0 { alpha * x } else { x })
}

fn sigmoid(cx: &Cx) -> OpResult {
    pointwise(cx, |x| 1.0 / (1.0 + (-x).exp()))
}

fn clip(cx: &Cx) -> OpResult {
    let lo = match cx.input_scalar(1)? {
        Some(v) => v,
        None => cx.float("min", f32::NEG_INFINITY)?,
    };
    let hi = match cx.input_scalar(2)? {
        Some(v) => v,
        None => cx.float("max", f32::INFINITY)?,
    };
    pointwise(cx, |x| x.max(lo).min(hi))
}

fn hard_sigmoid(cx: &Cx) -> OpResult {
    let alpha = cx.float("alpha", 0.2)?;
    let beta = cx.float("beta", 0.5)?;
    pointwise(cx, |x| (alpha * x + beta).clamp(0.0, 1.0))
}

fn hard_swish(cx: &Cx) -> OpResult {
    pointwise(cx, |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0))
}

fn gelu(cx: &Cx) -> OpResult {
    match cx.string("approximate")?.as_deref() {
        None | Some("none") => unary(cx, CTensor::gelu_erf),
        Some("tanh") => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            pointwise(cx, |x| {
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            })
        }
        Some(other) => Err(cx.unsupported(format!("approximate='{other}' is not supported"))),
    }
}

/// Opset-13 semantics: normalises along one axis (default the last).
fn softmax(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let axis = cx.axis(cx.int("axis", -1)?, x.rank())?;
    let shifted = x.broadcast_sub(&x.max_keepdim(axis).at(cx)?).at(cx)?;
    let e = shifted.exp().at(cx)?;
    one(e.broadcast_div(&e.sum_keepdim(axis).at(cx)?).at(cx)?)
}

// ---------------------------------------------------------------------------------------------
// Reductions and normalisation

#[derive(Clone, Copy, PartialEq)]
enum Reduce {
    Mean,
    Sum,
    Max,
    Min,
}

fn reduce(cx: &Cx, kind: Reduce) -> OpResult {
    let x = cx.input(0)?;
    let keep = cx.int("keepdims", 1)? != 0;
    let axes = match cx.axes(1, "axes")? {
        Some(a) if !a.is_empty() => cx.axis_set(&a, x.rank())?,
        _ if cx.int("noop_with_empty_axes", 0)? != 0 => return one(x.clone()),
        _ => (0..x.rank()).collect(),
    };
    let mut y = match kind {
        Reduce::Mean => x.mean_keepdim(axes.clone()).at(cx)?,
        Reduce::Sum => x.sum_keepdim(axes.clone()).at(cx)?,
        Reduce::Max | Reduce::Min => {
            let mut y = x.clone();
            for &a in &axes {
                if y.dims()[a] == 0 {
                    return Err(cx.fail("the maximum or minimum of an empty axis is undefined"));
                }
                y = if kind == Reduce::Max {
                    y.max_keepdim(a)
                } else {
                    y.min_keepdim(a)
                }
                .at(cx)?;
            }
            y
        }
    };
    if !keep {
        let dims: Vec<usize> = (0..x.rank())
            .filter(|a| !axes.contains(a))
            .map(|a| x.dims()[a])
            .collect();
        y = y.reshape(dims).at(cx)?;
    }
    one(y)
}

fn reduce_mean(cx: &Cx) -> OpResult {
    reduce(cx, Reduce::Mean)
}

fn reduce_sum(cx: &Cx) -> OpResult {
    reduce(cx, Reduce::Sum)
}

fn reduce_max(cx: &Cx) -> OpResult {
    reduce(cx, Reduce::Max)
}

fn reduce_min(cx: &Cx) -> OpResult {
    reduce(cx, Reduce::Min)
}

fn batch_norm(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    if x.rank() < 2 {
        return Err(cx.fail(format!("input has rank {}, expected at least 2", x.rank())));
    }
    let c = x.dims()[1];
    let mut shape = vec![1, c];
    shape.resize(x.rank(), 1);
    let param = |i: usize, name: &str| -> Result<CTensor, ExecError> {
        let t = cx.input(i)?;
        if t.dims() != [c] {
            return Err(cx.fail(format!("{name} has shape {:?}, expected [{c}]", t.dims())));
        }
        t.reshape(shape.as_slice()).at(cx)
    };
    let (scale, bias) = (param(1, "scale")?, param(2, "B")?);
    let (mean, var) = (param(3, "mean")?, param(4, "var")?);
    let eps = cx.float("epsilon", 1e-5)?;
    let factor = scale
        .div(&var.affine(1.0, eps).at(cx)?.sqrt().at(cx)?)
        .at(cx)?;
    let y = x
        .broadcast_sub(&mean)
        .at(cx)?
        .broadcast_mul(&factor)
        .at(cx)?
        .broadcast_add(&bias)
        .at(cx)?;
    one(y)
}

fn layer_norm(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let axis = cx.axis(cx.int("axis", -1)?, x.rank())?;
    let eps = cx.float("epsilon", 1e-5)?;
    let axes: Vec<usize> = (axis..x.rank()).collect();
    let mean = x.mean_keepdim(axes.clone()).at(cx)?;
    let centred = x.broadcast_sub(&mean).at(cx)?;
    let var = centred.sqr().at(cx)?.mean_keepdim(axes).at(cx)?;
    let inv_std = var.affine(1.0, eps).at(cx)?.sqrt().at(cx)?.recip().at(cx)?;
    let mut y = centred
        .broadcast_mul(&inv_std)
        .at(cx)?
        .broadcast_mul(cx.input(1)?)
        .at(cx)?;
    if let Some(b) = cx.opt(2) {
        y = y.broadcast_add(b).at(cx)?;
    }
    if y.dims() != x.dims() {
        return Err(cx.fail(format!(
            "scale or bias do not broadcast to the input shape {:?}",
            x.dims()
        )));
    }
    Ok(vec![y, mean, inv_std])
}

// ---------------------------------------------------------------------------------------------
// Shape and movement

fn flatten(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let r = x.rank();
    let axis = cx.int("axis", 1)?;
    // the axis may be the rank itself: everything goes to the outer dimension
    let a = if axis < 0 {
        axis.checked_add(r as i64)
    } else {
        Some(axis)
    }
    .and_then(|a| usize::try_from(a).ok())
    .filter(|&a| a <= r)
    .ok_or_else(|| cx.fail(format!("axis {axis} is out of range for rank {r}")))?;
    let outer = checked_product(&x.dims()[..a]).ok_or_else(|| cx.fail("size overflows"))?;
    let inner = checked_product(&x.dims()[a..]).ok_or_else(|| cx.fail("size overflows"))?;
    one(x.reshape((outer, inner)).at(cx)?)
}

fn reshape(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let spec = cx
        .input_ints(1)?
        .ok_or_else(|| cx.fail("input 1 (shape) is missing"))?;
    let allow_zero = cx.int("allowzero", 0)? != 0;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        out.push(match s {
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            -1 => return Err(cx.fail(format!("shape {spec:?} has more than one -1"))),
            0 if !allow_zero => *x.dims().get(i).ok_or_else(|| {
                cx.fail(format!(
                    "shape {spec:?} copies dimension {i} of a rank-{} input",
                    x.rank()
                ))
            })?,
            s => usize::try_from(s)
                .map_err(|_| cx.fail(format!("shape {spec:?} has a negative entry")))?,
        });
    }
    let numel = x.elem_count();
    let known = checked_product(&out).ok_or_else(|| cx.fail("shape size overflows"))?;
    if let Some(i) = infer {
        if known == 0 || numel % known != 0 {
            return Err(cx.fail(format!(
                "cannot infer the -1 in {spec:?} for {numel} elements"
            )));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(cx.fail(format!(
            "shape {spec:?} holds {known} elements, the input {:?} has {numel}",
            x.dims()
        )));
    }
    one(x.reshape(out).at(cx)?)
}

fn transpose(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let r = x.rank();
    let perm = match cx.ints("perm")? {
        None => (0..r).rev().collect(),
        Some(p) => {
            let perm: Vec<usize> = p
                .iter()
                .filter_map(|&a| usize::try_from(a).ok())
                .filter(|&a| a < r)
                .collect();
            let mut seen = perm.clone();
            seen.sort_unstable();
            seen.dedup();
            if perm.len() != p.len() || seen.len() != r || p.len() != r {
                return Err(cx.fail(format!("perm {p:?} is not a permutation of {r} axes")));
            }
            perm
        }
    };
    one(x.permute(perm).at(cx)?)
}

fn squeeze(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let axes = match cx.axes(1, "axes")? {
        Some(a) => cx.axis_set(&a, x.rank())?,
        None => (0..x.rank()).filter(|&a| x.dims()[a] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| x.dims()[a] != 1) {
        return Err(cx.fail(format!("axis {a} has size {}, not 1", x.dims()[a])));
    }
    let dims: Vec<usize> = (0..x.rank())
        .filter(|a| !axes.contains(a))
        .map(|a| x.dims()[a])
        .collect();
    one(x.reshape(dims).at(cx)?)
}

fn unsqueeze(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let axes = cx
        .axes(1, "axes")?
        .ok_or_else(|| cx.fail("axes are missing"))?;
    let axes = cx.axis_set(&axes, x.rank() + axes.len())?;
    let mut y = x.clone();
    for a in axes {
        y = y.unsqueeze(a).at(cx)?;
    }
    one(y)
}

fn concat(cx: &Cx) -> OpResult {
    let parts: Vec<&CTensor> = cx.inputs.iter().flatten().collect();
    let first = parts
        .first()
        .ok_or_else(|| cx.fail("at least one input is needed"))?;
    let axis = cx.axis(cx.int("axis", 0)?, first.rank())?;
    if let Some(bad) = parts.iter().find(|t| {
        t.rank() != first.rank()
            || (0..first.rank()).any(|a| a != axis && t.dims()[a] != first.dims()[a])
    }) {
        return Err(cx.fail(format!(
            "shapes {:?} and {:?} cannot be joined on axis {axis}",
            first.dims(),
            bad.dims()
        )));
    }
    one(CTensor::cat(&parts, axis).at(cx)?)
}

/// Indices of one sliced axis, with ONNX's clamping rules.
fn slice_indices(start: i64, end: i64, step: i64, dim: usize) -> Vec<usize> {
    let d = i64::try_from(dim).unwrap_or(i64::MAX);
    let wrap = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (start, end) = (wrap(start), wrap(end));
    let mut out = Vec::new();
    if d == 0 {
        return out;
    }
    if step > 0 {
        let (mut i, end) = (start.clamp(0, d), end.clamp(0, d));
        while i < end {
            out.push(i as usize);
            i = i.saturating_add(step);
        }
    } else {
        let (mut i, end) = (start.clamp(0, d - 1), end.clamp(-1, d - 1));
        while i > end {
            out.push(i as usize);
            i = i.saturating_add(step);
        }
    }
    out
}

fn slice(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let (starts, ends, axes, steps) = if cx.opt(1).is_some() {
        (
            cx.input_ints(1)?.unwrap_or_default(),
            cx.input_ints(2)?
                .ok_or_else(|| cx.fail("input 2 (ends) is missing"))?,
            cx.input_ints(3)?,
            cx.input_ints(4)?,
        )
    } else {
        (
            cx.ints("starts")?
                .ok_or_else(|| cx.fail("starts are missing"))?,
            cx.ints("ends")?
                .ok_or_else(|| cx.fail("ends are missing"))?,
            cx.ints("axes")?,
            None,
        )
    };
    let n = starts.len();
    let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return Err(cx.fail("starts, ends, axes and steps differ in length"));
    }
    cx.axis_set(&axes, x.rank())?;
    let mut y = x.clone();
    for i in 0..n {
        let axis = cx.axis(axes[i], x.rank())?;
        if steps[i] == 0 {
            return Err(cx.fail("a slice step is 0"));
        }
        let idx = slice_indices(starts[i], ends[i], steps[i], x.dims()[axis]);
        y = if steps[i] == 1 {
            y.narrow(axis, idx.first().copied().unwrap_or(0), idx.len())
        } else {
            let ids: Vec<i64> = idx.iter().map(|&v| v as i64).collect();
            let n_ids = ids.len();
            CTensor::from_vec(ids, n_ids, &Device::Cpu).and_then(|ids| y.index_select(&ids, axis))
        }
        .at(cx)?;
    }
    one(y)
}

fn expand(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let spec = cx
        .input_ints(1)?
        .ok_or_else(|| cx.fail("input 1 (shape) is missing"))?;
    let spec = spec
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| cx.fail(format!("shape {spec:?} has a negative entry")))?;
    let out = broadcast_shape(x.dims(), &spec).ok_or_else(|| {
        cx.fail(format!(
            "input {:?} does not broadcast with {spec:?}",
            x.dims()
        ))
    })?;
    one(x.broadcast_as(out).at(cx)?)
}

fn pad(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let r = x.rank();
    let (pads, value) = match cx.input_ints(1)? {
        Some(p) => (p, cx.input_scalar(2)?.unwrap_or(0.0)),
        None => (
            cx.ints("pads")?
                .ok_or_else(|| cx.fail("pads are missing"))?,
            cx.float("value", 0.0)?,
        ),
    };
    let axes = match cx.input_ints(3)? {
        Some(a) => cx
            .axis_set(&a, r)
            .and_then(|_| a.iter().map(|&v| cx.axis(v, r)).collect())?,
        None => (0..r).collect::<Vec<_>>(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(cx.fail(format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let edge = cx.string("mode")?.as_deref() == Some("edge");
    let k = axes.len();
    let mut y = x.clone();
    for (i, &axis) in axes.iter().enumerate() {
        let (b, e) = (pads[i], pads[i + k]);
        let len = y.dims()[axis] as i64;
        let (cut_b, cut_e) = (b.saturating_neg().max(0), e.saturating_neg().max(0));
        if cut_b.saturating_add(cut_e) > len {
            return Err(cx.fail(format!("pads {pads:?} crop more than axis {axis} holds")));
        }
        if cut_b > 0 || cut_e > 0 {
            y = y
                .narrow(axis, cut_b as usize, (len - cut_b - cut_e) as usize)
                .at(cx)?;
        }
        let (add_b, add_e) = (
            usize::try_from(b.max(0)).unwrap_or(0),
            usize::try_from(e.max(0)).unwrap_or(0),
        );
        y = if edge {
            y.pad_with_same(axis, add_b, add_e)
        } else {
            pad_const(&y, axis, add_b, add_e, value)
        }
        .at(cx)?;
    }
    one(y)
}

fn identity(cx: &Cx) -> OpResult {
    one(cx.input(0)?.clone())
}

fn dropout(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    if cx.input_scalar(2)?.is_some_and(|t| t != 0.0) {
        return Err(cx.unsupported("training_mode=1 makes Dropout random"));
    }
    let mask = x.ones_like().at(cx)?;
    Ok(vec![x.clone(), mask])
}

fn shape(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let r = x.rank() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let start = clamp(cx.int("start", 0)?);
    let end = clamp(cx.int("end", r)?);
    let dims: Vec<f64> = x.dims()[start..end.max(start)]
        .iter()
        .map(|&d| d as f64)
        .collect();
    let n = dims.len();
    one(tensor(dims, &[n]).at(cx)?)
}

fn gather(cx: &Cx) -> OpResult {
    let (x, ind) = (cx.input(0)?, cx.input(1)?);
    let axis = cx.axis(cx.int("axis", 0)?, x.rank())?;
    let dim = x.dims()[axis];
    let ids = to_ints(ind)
        .map_err(|e| cx.fail(format!("indices: {e}")))?
        .into_iter()
        .map(|i| {
            let j = if i < 0 {
                i.saturating_add(dim as i64)
            } else {
                i
            };
            usize::try_from(j)
                .ok()
                .filter(|&j| j < dim)
                .map(|j| j as i64)
                .ok_or_else(|| cx.fail(format!("index {i} is out of range for axis size {dim}")))
        })
        .collect::<Result<Vec<i64>, _>>()?;
    let n = ids.len();
    let ids = CTensor::from_vec(ids, n, &Device::Cpu).at(cx)?;
    let y = x.index_select(&ids, axis).at(cx)?;
    let mut shape = x.dims()[..axis].to_vec();
    shape.extend_from_slice(ind.dims());
    shape.extend_from_slice(&x.dims()[axis + 1..]);
    one(y.reshape(shape).at(cx)?)
}

fn cast(cx: &Cx) -> OpResult {
    let to = cx
        .node
        .attrs
        .dtype_opt("to")
        .at(cx)?
        .ok_or_else(|| cx.fail("attribute 'to' is missing"))?;
    if to == DType::Bool {
        pointwise(cx, |x| if x != 0.0 { 1.0 } else { 0.0 })
    } else if to.is_int() {
        pointwise(cx, f64::trunc)
    } else if to.is_float() {
        identity(cx)
    } else {
        Err(cx.unsupported(format!("casting to {to} is not supported")))
    }
}

fn constant(cx: &Cx) -> OpResult {
    let attrs = &cx.node.attrs;
    if let Some(t) = attrs.tensor_opt("value").at(cx)? {
        return one(to_candle(t).at(cx)?);
    }
    let (data, shape): (Vec<f64>, Vec<usize>) = if attrs.get("value_float").is_some() {
        (vec![cx.float("value_float", 0.0)?], vec![])
    } else if let Some(v) = attrs.floats_opt("value_floats").at(cx)? {
        (v.iter().map(|&x| f64::from(x)).collect(), vec![v.len()])
    } else if let Some(v) = attrs.int_opt("value_int").at(cx)? {
        (vec![v as f64], vec![])
    } else if let Some(v) = cx.ints("value_ints")? {
        let n = v.len();
        (v.into_iter().map(|x| x as f64).collect(), vec![n])
    } else {
        return Err(cx.unsupported("the constant's value attribute is missing or unsupported"));
    };
    one(tensor(data, &shape).at(cx)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attr, Attrs, GraphBuilder, TensorData, TypedData};

    /// A graph under construction: `x`-like inputs are fed, initializers are f32 typed data.
    struct G {
        b: GraphBuilder,
        feeds: Vec<(String, CTensor)>,
    }

    impl G {
        fn new() -> Self {
            G {
                b: GraphBuilder::new("g", false),
                feeds: Vec::new(),
            }
        }

        fn input(&mut self, name: &str, shape: &[usize], data: Vec<f64>) -> &mut Self {
            let id = self.b.value(name);
            self.b.add_input(id);
            self.feeds.push((name.into(), tensor(data, shape).unwrap()));
            self
        }

        fn init(&mut self, name: &str, dims: &[u64], data: Vec<f32>) -> &mut Self {
            let id = self.b.value(name);
            self.b.value_mut(id).init = Some(Tensor {
                name: name.into(),
                dtype: DType::F32,
                dims: dims.to_vec(),
                data: TensorData::Typed(TypedData::F32(data)),
            });
            self
        }

        fn init_i64(&mut self, name: &str, data: Vec<i64>) -> &mut Self {
            let id = self.b.value(name);
            self.b.value_mut(id).init = Some(Tensor {
                name: name.into(),
                dtype: DType::I64,
                dims: vec![data.len() as u64],
                data: TensorData::Typed(TypedData::I64(data)),
            });
            self
        }

        fn node(
            &mut self,
            op: &str,
            ins: &[&str],
            outs: &[&str],
            attrs: Vec<(&str, Attr)>,
        ) -> &mut Self {
            let attrs = Attrs(attrs.into_iter().map(|(n, a)| (n.to_string(), a)).collect());
            let name = format!("{}_{}", op.to_lowercase(), outs[0]);
            self.b
                .add_node(name, op.into(), String::new(), ins, outs, attrs);
            self
        }

        /// Runs every node and returns `wanted`.
        fn run(self, wanted: &[&str]) -> Result<Vec<CTensor>, ExecError> {
            let g = self.b.finish().unwrap();
            let feeds = self
                .feeds
                .into_iter()
                .map(|(n, t)| (g.value_by_name(&n).unwrap(), t))
                .collect();
            let wanted: Vec<ValueId> = wanted.iter().map(|n| g.value_by_name(n).unwrap()).collect();
            let nodes: Vec<NodeId> = (0..g.nodes.len()).collect();
            Executor::new(&g).eval(&nodes, &feeds, &wanted)
        }

        fn run1(self, wanted: &str) -> CTensor {
            self.run(&[wanted]).unwrap().remove(0)
        }
    }

    fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    fn flat(t: &CTensor) -> Vec<f64> {
        values(t).unwrap()
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "got {got:?}, want {want:?}"
            );
        }
    }

    fn ramp(n: usize) -> Vec<f64> {
        (0..n).map(|i| i as f64).collect()
    }

    #[test]
    fn conv_3x3_with_unit_pads_on_a_ramp() {
        let mut g = G::new();
        g.input("x", &[1, 1, 4, 4], ramp(16))
            .init("w", &[1, 1, 3, 3], vec![1.0; 9])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("pads", ints(&[1, 1, 1, 1]))],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 4, 4]);
        #[rustfmt::skip]
        let want = [
            10.0, 18.0, 24.0, 18.0,
            27.0, 45.0, 54.0, 39.0,
            51.0, 81.0, 90.0, 63.0,
            42.0, 66.0, 72.0, 50.0,
        ];
        assert_close(&flat(&y), &want);
    }

    #[test]
    fn conv_is_a_correlation_and_adds_the_bias() {
        // only the top-left tap is set: y[i][j] = x[i-1][j-1] + 0.5
        let mut w = vec![0.0; 9];
        w[0] = 1.0;
        let mut g = G::new();
        g.input("x", &[1, 1, 4, 4], ramp(16))
            .init("w", &[1, 1, 3, 3], w)
            .init("b", &[1], vec![0.5])
            .node(
                "Conv",
                &["x", "w", "b"],
                &["y"],
                vec![("pads", ints(&[1, 1, 1, 1]))],
            );
        #[rustfmt::skip]
        let want = [
            0.5, 0.5, 0.5, 0.5,
            0.5, 0.5, 1.5, 2.5,
            0.5, 4.5, 5.5, 6.5,
            0.5, 8.5, 9.5, 10.5,
        ];
        assert_close(&flat(&g.run1("y")), &want);
    }

    #[test]
    fn conv_with_asymmetric_pads() {
        // pads [h_begin, w_begin, h_end, w_end] = [0, 1, 1, 0]
        let mut g = G::new();
        g.input("x", &[1, 1, 3, 3], ramp(9))
            .init("w", &[1, 1, 2, 2], vec![1.0; 4])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("pads", ints(&[0, 1, 1, 0]))],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 3, 3]);
        assert_close(
            &flat(&y),
            &[3.0, 8.0, 12.0, 9.0, 20.0, 24.0, 6.0, 13.0, 15.0],
        );
    }

    #[test]
    fn conv_same_lower_pads_at_the_beginning() {
        let mut g = G::new();
        g.input("x", &[1, 1, 3, 3], ramp(9))
            .init("w", &[1, 1, 2, 2], vec![1.0; 4])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("auto_pad", Attr::String(b"SAME_LOWER".to_vec()))],
            );
        assert_close(
            &flat(&g.run1("y")),
            &[0.0, 1.0, 3.0, 3.0, 8.0, 12.0, 9.0, 20.0, 24.0],
        );
    }

    #[test]
    fn conv_1d_with_stride() {
        // padded [0,1,2,3,4,5,0], windows at 0, 2, 4 with taps [1, 0, -1]
        let mut g = G::new();
        g.input("x", &[1, 1, 5], vec![1.0, 2.0, 3.0, 4.0, 5.0])
            .init("w", &[1, 1, 3], vec![1.0, 0.0, -1.0])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("pads", ints(&[1, 1])), ("strides", ints(&[2]))],
            );
        assert_close(&flat(&g.run1("y")), &[-2.0, -2.0, 4.0]);
    }

    #[test]
    fn grouped_conv_uses_its_own_channels() {
        // group 2: outputs 0,1 read channels 0,1; outputs 2,3 read channels 2,3
        let mut g = G::new();
        g.input("x", &[1, 4, 1, 1], vec![1.0, 2.0, 3.0, 4.0])
            .init(
                "w",
                &[4, 2, 1, 1],
                vec![1.0, 1.0, 1.0, -1.0, 2.0, 0.0, 0.0, 3.0],
            )
            .node("Conv", &["x", "w"], &["y"], vec![("group", Attr::Int(2))]);
        assert_close(&flat(&g.run1("y")), &[3.0, -1.0, 6.0, 12.0]);
    }

    /// Direct 2-D convolution with loops, for one image.
    #[allow(clippy::too_many_arguments)]
    fn naive_depthwise(
        x: &[f64],
        w: &[f64],
        c: usize,
        h: usize,
        k: usize,
        pad: usize,
        stride: usize,
        dil: usize,
    ) -> Vec<f64> {
        let out = (h + 2 * pad - dil * (k - 1) - 1) / stride + 1;
        let mut y = Vec::new();
        for ch in 0..c {
            for oi in 0..out {
                for oj in 0..out {
                    let mut s = 0.0;
                    for ki in 0..k {
                        for kj in 0..k {
                            let i = (oi * stride + ki * dil) as i64 - pad as i64;
                            let j = (oj * stride + kj * dil) as i64 - pad as i64;
                            if (0..h as i64).contains(&i) && (0..h as i64).contains(&j) {
                                s += x[ch * h * h + i as usize * h + j as usize]
                                    * w[ch * k * k + ki * k + kj];
                            }
                        }
                    }
                    y.push(s);
                }
            }
        }
        y
    }

    #[test]
    fn depthwise_conv_equals_per_channel_convs() {
        let x = flat(&seeded_normal(&[1, 3, 7, 7], 1));
        let w = flat(&seeded_normal(&[3, 1, 3, 3], 2));
        let mut g = G::new();
        g.input("x", &[1, 3, 7, 7], x.clone())
            .init("w", &[3, 1, 3, 3], w.iter().map(|&v| v as f32).collect())
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![
                    ("group", Attr::Int(3)),
                    ("pads", ints(&[1, 1, 1, 1])),
                    ("strides", ints(&[2, 2])),
                    ("dilations", ints(&[2, 2])),
                ],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 3, 3, 3]);
        let w32: Vec<f64> = w.iter().map(|&v| v as f32 as f64).collect();
        assert_close(&flat(&y), &naive_depthwise(&x, &w32, 3, 7, 3, 1, 2, 2));
    }

    #[test]
    fn anisotropic_strides_run_and_unknown_ops_are_reported() {
        let mut g = G::new();
        g.input("x", &[1, 1, 4, 4], ramp(16))
            .init("w", &[1, 1, 1, 1], vec![1.0])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("strides", ints(&[2, 1]))],
            )
            .node("Resize", &["y"], &["z"], vec![]);
        let graph = g.b.finish().unwrap();
        let found = unsupported(&graph, &[0, 1]);
        assert_eq!(found.len(), 1);
        assert!(found[0].1.contains("no implementation"), "{found:?}");
        // a 1x1 identity kernel with strides 2x1 keeps rows 0 and 2
        let x = graph.value_by_name("x").unwrap();
        let feeds = HashMap::from([(x, tensor(ramp(16), &[1, 1, 4, 4]).unwrap())]);
        let y = Executor::new(&graph)
            .eval(&[0], &feeds, &[graph.value_by_name("y").unwrap()])
            .unwrap();
        assert_eq!(y[0].dims(), [1, 1, 2, 4]);
        let r = ramp(16);
        let want: Vec<f64> = r[0..4].iter().chain(&r[8..12]).copied().collect();
        assert_close(&flat(&y[0]), &want);
    }

    #[test]
    fn gemm_with_trans_b_alpha_and_beta() {
        let mut g = G::new();
        g.input("a", &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
            .init("b", &[2, 3], vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
            .init("c", &[2], vec![1.0, 2.0])
            .node(
                "Gemm",
                &["a", "b", "c"],
                &["y"],
                vec![
                    ("transB", Attr::Int(1)),
                    ("alpha", Attr::Float(2.0)),
                    ("beta", Attr::Float(0.5)),
                ],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [2, 2]);
        assert_close(&flat(&y), &[8.5, 5.0, 20.5, 11.0]);
    }

    #[test]
    fn matmul_broadcasts_batches_and_vectors() {
        // [2, 1, 2] x [2, 2] (broadcast) and [2] x [2, 2, 1] (vector lhs)
        let mut g = G::new();
        g.input("a", &[2, 1, 2], vec![1.0, 2.0, 3.0, 4.0])
            .init("b", &[2, 2], vec![1.0, 10.0, 100.0, 1000.0])
            .init("v", &[2], vec![1.0, -1.0])
            .init("m", &[2, 2, 1], vec![1.0, 2.0, 5.0, 3.0])
            .node("MatMul", &["a", "b"], &["y"], vec![])
            .node("MatMul", &["v", "m"], &["z"], vec![]);
        let out = g.run(&["y", "z"]).unwrap();
        assert_eq!(out[0].dims(), [2, 1, 2]);
        assert_close(&flat(&out[0]), &[201.0, 2010.0, 403.0, 4030.0]);
        assert_eq!(out[1].dims(), [2, 1]);
        assert_close(&flat(&out[1]), &[-1.0, 2.0]);
    }

    #[test]
    fn max_pool_pads_with_minus_infinity() {
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2], vec![-1.0, -2.0, -3.0, -4.0])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![
                    ("kernel_shape", ints(&[2, 2])),
                    ("pads", ints(&[1, 1, 1, 1])),
                ],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 3, 3]);
        assert_close(
            &flat(&y),
            &[-1.0, -1.0, -2.0, -1.0, -1.0, -2.0, -3.0, -3.0, -4.0],
        );
    }

    #[test]
    fn max_pool_ceil_mode_adds_a_partial_window() {
        // 5 wide, kernel 2, stride 2: floor gives 2 windows, ceil 3 (the last one holds x[4] only)
        let mut g = G::new();
        g.input("x", &[1, 1, 5], vec![-5.0, -4.0, -3.0, -2.0, -1.0])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![
                    ("kernel_shape", ints(&[2])),
                    ("strides", ints(&[2])),
                    ("ceil_mode", Attr::Int(1)),
                ],
            );
        assert_close(&flat(&g.run1("y")), &[-4.0, -2.0, -1.0]);
    }

    fn avg_pool(include_pad: i64) -> Vec<f64> {
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]).node(
            "AveragePool",
            &["x"],
            &["y"],
            vec![
                ("kernel_shape", ints(&[2, 2])),
                ("pads", ints(&[1, 1, 1, 1])),
                ("count_include_pad", Attr::Int(include_pad)),
            ],
        );
        flat(&g.run1("y"))
    }

    #[test]
    fn average_pool_count_include_pad() {
        assert_close(&avg_pool(0), &[1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]);
        assert_close(
            &avg_pool(1),
            &[0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0],
        );
    }

    #[test]
    fn global_pools() {
        let mut g = G::new();
        g.input(
            "x",
            &[1, 2, 2, 2],
            vec![1.0, 2.0, 3.0, 6.0, -1.0, -2.0, -3.0, -4.0],
        )
        .node("GlobalAveragePool", &["x"], &["a"], vec![])
        .node("GlobalMaxPool", &["x"], &["m"], vec![]);
        let out = g.run(&["a", "m"]).unwrap();
        assert_eq!(out[0].dims(), [1, 2, 1, 1]);
        assert_close(&flat(&out[0]), &[3.0, -2.5]);
        assert_close(&flat(&out[1]), &[6.0, -1.0]);
    }

    #[test]
    fn batch_normalization_in_inference() {
        // channel 0: (x - 1) / sqrt(3 + 1) * 3 + 1; channel 1: (x - 3) / sqrt(0 + 1) * 0.5 - 1
        let mut g = G::new();
        g.input("x", &[1, 2, 1, 2], vec![1.0, 2.0, 3.0, 4.0])
            .init("s", &[2], vec![3.0, 0.5])
            .init("b", &[2], vec![1.0, -1.0])
            .init("m", &[2], vec![1.0, 3.0])
            .init("v", &[2], vec![3.0, 0.0])
            .node(
                "BatchNormalization",
                &["x", "s", "b", "m", "v"],
                &["y"],
                vec![("epsilon", Attr::Float(1.0))],
            );
        assert_close(&flat(&g.run1("y")), &[1.0, 2.5, -1.0, -0.5]);
    }

    #[test]
    fn layer_normalization_over_the_last_axis() {
        // row [1, 3]: mean 2, var 1 -> [-1, 1]; scaled by [2, 3], shifted by [0, 1]
        let mut g = G::new();
        g.input("x", &[2, 2], vec![1.0, 3.0, 5.0, 5.0])
            .init("s", &[2], vec![2.0, 3.0])
            .init("b", &[2], vec![0.0, 1.0])
            .node(
                "LayerNormalization",
                &["x", "s", "b"],
                &["y"],
                vec![("epsilon", Attr::Float(0.0))],
            );
        let y = flat(&g.run1("y"));
        assert_close(&y[..2], &[-2.0, 4.0]);
        assert!(
            y[2].is_nan(),
            "a constant row divides 0 by 0 without epsilon"
        );
    }

    #[test]
    fn reshape_with_zero_and_minus_one() {
        let mut g = G::new();
        g.input("x", &[2, 3, 4], ramp(24))
            .init_i64("s1", vec![0, -1])
            .init_i64("s2", vec![-1, 0, 2])
            .node("Reshape", &["x", "s1"], &["a"], vec![])
            .node("Reshape", &["x", "s2"], &["b"], vec![]);
        let out = g.run(&["a", "b"]).unwrap();
        assert_eq!(out[0].dims(), [2, 12]);
        assert_eq!(out[1].dims(), [4, 3, 2]);
        assert_close(&flat(&out[1]), &ramp(24));

        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6))
            .init_i64("s", vec![0, 6])
            .node(
                "Reshape",
                &["x", "s"],
                &["y"],
                vec![("allowzero", Attr::Int(1))],
            );
        let err = g.run(&["y"]).unwrap_err();
        assert!(matches!(err, ExecError::Failed { .. }), "{err}");
        assert!(err.to_string().contains("reshape_y"), "{err}");
    }

    #[test]
    fn softmax_rows_sum_to_one() {
        let mut g = G::new();
        g.input(
            "x",
            &[3, 2],
            vec![0.0, 3f64.ln(), 1000.0, 1000.0, -1.0, 2.0],
        )
        .node("Softmax", &["x"], &["y"], vec![]);
        let y = flat(&g.run1("y"));
        assert_close(&y[..4], &[0.25, 0.75, 0.5, 0.5]);
        for row in y.chunks(2) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-15);
        }
    }

    #[test]
    fn activations() {
        let x = vec![-4.0, -1.0, 0.0, 1.0, 4.0];
        let run = |op: &str, attrs: Vec<(&str, Attr)>| {
            let mut g = G::new();
            g.input("x", &[5], x.clone())
                .node(op, &["x"], &["y"], attrs);
            flat(&g.run1("y"))
        };
        assert_close(&run("Relu", vec![]), &[0.0, 0.0, 0.0, 1.0, 4.0]);
        assert_close(
            &run("LeakyRelu", vec![("alpha", Attr::Float(0.5))]),
            &[-2.0, -0.5, 0.0, 1.0, 4.0],
        );
        // x * clamp(x / 6 + 1/2, 0, 1)
        assert_close(
            &run("HardSwish", vec![]),
            &[0.0, -1.0 / 3.0, 0.0, 2.0 / 3.0, 4.0],
        );
        // the default alpha is the float32 0.2, as runtimes use it
        let alpha = f64::from(0.2f32);
        assert_close(
            &run("HardSigmoid", vec![]),
            &[0.0, 0.5 - alpha, 0.5, 0.5 + alpha, 1.0],
        );
        let e = std::f64::consts::E;
        let s = run("Sigmoid", vec![]);
        assert_close(&s[1..4], &[1.0 / (1.0 + e), 0.5, e / (1.0 + e)]);
        // erf(1) and Gelu(1) = 0.5 (1 + erf(1/sqrt 2)) from tables
        let erf = run("Erf", vec![]);
        assert!((erf[3] - 0.842_700_792_949_714_9).abs() < 1e-15, "{erf:?}");
        let gelu = run("Gelu", vec![]);
        assert!(
            (gelu[3] - 0.841_344_746_068_542_9).abs() < 1e-15,
            "{gelu:?}"
        );
        let tanh_gelu = run(
            "Gelu",
            vec![("approximate", Attr::String(b"tanh".to_vec()))],
        );
        assert!(
            (tanh_gelu[3] - 0.841_191_990_608_276_8).abs() < 1e-12,
            "{tanh_gelu:?}"
        );
    }

    #[test]
    fn clip_takes_bounds_from_inputs_or_attributes() {
        let mut g = G::new();
        g.input("x", &[4], vec![-3.0, -1.0, 2.0, 9.0])
            .init("lo", &[], vec![-2.0])
            .init("hi", &[], vec![6.0])
            .node("Clip", &["x", "lo", "hi"], &["a"], vec![])
            .node("Clip", &["x", "", "hi"], &["b"], vec![])
            .node("Clip", &["x"], &["c"], vec![("min", Attr::Float(0.0))]);
        let out = g.run(&["a", "b", "c"]).unwrap();
        assert_close(&flat(&out[0]), &[-2.0, -1.0, 2.0, 6.0]);
        assert_close(&flat(&out[1]), &[-3.0, -1.0, 2.0, 6.0]);
        assert_close(&flat(&out[2]), &[0.0, 0.0, 2.0, 9.0]);
    }

    #[test]
    fn pow_keeps_negative_bases() {
        let mut g = G::new();
        g.input("x", &[3], vec![-2.0, 3.0, 4.0])
            .init("e", &[1], vec![2.0])
            .init("h", &[], vec![0.5])
            .node("Pow", &["x", "e"], &["y"], vec![])
            .node("Pow", &["y", "h"], &["z"], vec![]);
        let out = g.run(&["y", "z"]).unwrap();
        assert_close(&flat(&out[0]), &[4.0, 9.0, 16.0]);
        assert_close(&flat(&out[1]), &[2.0, 3.0, 4.0]);
    }

    #[test]
    fn broadcasting_arithmetic() {
        let mut g = G::new();
        g.input("x", &[2, 2], vec![1.0, 2.0, 3.0, 4.0])
            .init("r", &[2], vec![10.0, 20.0])
            .init("c", &[2, 1], vec![2.0, 4.0])
            .node("Add", &["x", "r"], &["a"], vec![])
            .node("Div", &["a", "c"], &["d"], vec![])
            .node("Sub", &["d", "x"], &["s"], vec![])
            .node("Mul", &["s", "c"], &["m"], vec![])
            .node("Neg", &["m"], &["n"], vec![])
            .node("Max", &["x", "r", "c"], &["mx"], vec![]);
        let out = g.run(&["d", "n", "mx"]).unwrap();
        assert_close(&flat(&out[0]), &[5.5, 11.0, 3.25, 6.0]);
        // (d - x) * c, negated
        assert_close(&flat(&out[1]), &[-9.0, -18.0, -1.0, -8.0]);
        assert_close(&flat(&out[2]), &[10.0, 20.0, 10.0, 20.0]);
    }

    #[test]
    fn reduce_mean_with_axes_as_input_or_attribute() {
        let mut g = G::new();
        g.input("x", &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 9.0])
            .init_i64("ax", vec![-1])
            .node(
                "ReduceMean",
                &["x", "ax"],
                &["a"],
                vec![("keepdims", Attr::Int(0))],
            )
            .node("ReduceMean", &["x"], &["b"], vec![("axes", ints(&[0]))])
            .node("ReduceMean", &["x"], &["c"], vec![])
            .node("ReduceMax", &["x"], &["d"], vec![("axes", ints(&[1]))]);
        let out = g.run(&["a", "b", "c", "d"]).unwrap();
        assert_eq!(out[0].dims(), [2]);
        assert_close(&flat(&out[0]), &[2.0, 6.0]);
        assert_eq!(out[1].dims(), [1, 3]);
        assert_close(&flat(&out[1]), &[2.5, 3.5, 6.0]);
        assert_eq!(out[2].dims(), [1, 1]);
        assert_close(&flat(&out[2]), &[4.0]);
        assert_close(&flat(&out[3]), &[3.0, 9.0]);
    }

    #[test]
    fn movement_ops() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6))
            .init_i64("ax", vec![0, 3])
            .node("Transpose", &["x"], &["t"], vec![])
            .node("Unsqueeze", &["t", "ax"], &["u"], vec![])
            .node("Squeeze", &["u"], &["s"], vec![("axes", ints(&[0]))])
            .node("Flatten", &["u"], &["f"], vec![("axis", Attr::Int(2))])
            .node("Flatten", &["u"], &["f2"], vec![("axis", Attr::Int(-1))])
            .node("Concat", &["x", "x"], &["c"], vec![("axis", Attr::Int(-1))])
            .node("Identity", &["c"], &["i"], vec![])
            .node("Dropout", &["i"], &["d", "mask"], vec![]);
        let out = g.run(&["t", "u", "s", "f", "d", "mask", "f2"]).unwrap();
        assert_eq!(out[0].dims(), [3, 2]);
        assert_close(&flat(&out[0]), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(out[1].dims(), [1, 3, 2, 1]);
        assert_eq!(out[2].dims(), [3, 2, 1]);
        assert_eq!(out[3].dims(), [3, 2]);
        assert_eq!(out[4].dims(), [2, 6]);
        assert_close(
            &flat(&out[4]),
            &[0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 4.0, 5.0],
        );
        assert_close(&flat(&out[5]), &[1.0; 12]);
        assert_eq!(out[6].dims(), [6, 1]);
    }

    #[test]
    fn squeeze_of_a_non_unit_axis_fails() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6))
            .node("Squeeze", &["x"], &["y"], vec![("axes", ints(&[1]))]);
        let err = g.run(&["y"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 'squeeze_y': axis 1 has size 3, not 1"
        );
    }

    #[test]
    fn shape_gather_and_cast() {
        let mut g = G::new();
        g.input("x", &[2, 3, 4], ramp(24))
            .init_i64("i", vec![-1, 0])
            .node("Shape", &["x"], &["s"], vec![])
            .node("Gather", &["s", "i"], &["g"], vec![])
            .node(
                "Gather",
                &["x", "i"],
                &["rows"],
                vec![("axis", Attr::Int(1))],
            )
            .node("Cast", &["x"], &["c"], vec![("to", Attr::Int(1))]);
        let out = g.run(&["s", "g", "rows"]).unwrap();
        assert_close(&flat(&out[0]), &[2.0, 3.0, 4.0]);
        assert_close(&flat(&out[1]), &[4.0, 2.0]);
        assert_eq!(out[2].dims(), [2, 2, 4]);
        // rows 2 then 0 of each batch
        assert_close(
            &flat(&out[2])[..8],
            &[8.0, 9.0, 10.0, 11.0, 0.0, 1.0, 2.0, 3.0],
        );

        let mut g = G::new();
        g.input("x", &[4], vec![-1.7, -0.2, 0.0, 2.9])
            .node("Cast", &["x"], &["i"], vec![("to", Attr::Int(7))])
            .node("Cast", &["x"], &["b"], vec![("to", Attr::Int(9))]);
        let out = g.run(&["i", "b"]).unwrap();
        assert_close(&flat(&out[0]), &[-1.0, 0.0, 0.0, 2.0]);
        assert_close(&flat(&out[1]), &[1.0, 1.0, 0.0, 1.0]);
    }

    #[test]
    fn gather_with_a_scalar_index_drops_the_axis() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6)).node(
            "Constant",
            &[] as &[&str],
            &["k"],
            vec![("value_int", Attr::Int(2))],
        );
        g.node("Gather", &["x", "k"], &["y"], vec![("axis", Attr::Int(1))]);
        let out = g.run(&["y"]).unwrap();
        assert_eq!(out[0].dims(), [2]);
        assert_close(&flat(&out[0]), &[2.0, 5.0]);
    }

    #[test]
    fn gather_out_of_range_fails() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6)).init_i64("i", vec![2]).node(
            "Gather",
            &["x", "i"],
            &["y"],
            vec![],
        );
        let err = g.run(&["y"]).unwrap_err();
        assert!(err.to_string().contains("index 2 is out of range"), "{err}");
    }

    #[test]
    fn slice_with_negative_steps_and_clamping() {
        let mut g = G::new();
        g.input("x", &[2, 5], ramp(10))
            .init_i64("st", vec![-1, 1])
            .init_i64("en", vec![i64::MIN, i64::MAX])
            .init_i64("ax", vec![1, 0])
            .init_i64("sp", vec![-2, 1])
            .node("Slice", &["x", "st", "en", "ax", "sp"], &["y"], vec![]);
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 3]);
        assert_close(&flat(&y), &[9.0, 7.0, 5.0]);
    }

    #[test]
    fn pad_and_expand() {
        let mut g = G::new();
        g.input("x", &[1, 3], vec![1.0, 2.0, 3.0])
            .init_i64("p", vec![0, 1, 1, -1])
            .init("v", &[], vec![7.0])
            .init_i64("shape", vec![2, 1])
            .node("Pad", &["x", "p", "v"], &["y"], vec![])
            .node(
                "Pad",
                &["x", "p"],
                &["e"],
                vec![("mode", Attr::String(b"edge".to_vec()))],
            )
            .node("Expand", &["x", "shape"], &["z"], vec![]);
        let out = g.run(&["y", "e", "z"]).unwrap();
        assert_eq!(out[0].dims(), [2, 3]);
        assert_close(&flat(&out[0]), &[7.0, 1.0, 2.0, 7.0, 7.0, 7.0]);
        assert_close(&flat(&out[1]), &[1.0, 1.0, 2.0, 1.0, 1.0, 2.0]);
        assert_eq!(out[2].dims(), [2, 3]);
        assert_close(&flat(&out[2]), &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn constants_of_every_form() {
        let t = Tensor {
            name: "t".into(),
            dtype: DType::I64,
            dims: vec![2],
            data: TensorData::Typed(TypedData::I64(vec![3, -4])),
        };
        let mut g = G::new();
        g.node(
            "Constant",
            &[] as &[&str],
            &["a"],
            vec![("value", Attr::Tensor(Box::new(t)))],
        )
        .node(
            "Constant",
            &[] as &[&str],
            &["b"],
            vec![("value_float", Attr::Float(1.5))],
        )
        .node(
            "Constant",
            &[] as &[&str],
            &["c"],
            vec![("value_floats", Attr::Floats(vec![1.0, 2.0]))],
        )
        .node(
            "Constant",
            &[] as &[&str],
            &["d"],
            vec![("value_ints", ints(&[5]))],
        );
        let out = g.run(&["a", "b", "c", "d"]).unwrap();
        assert_close(&flat(&out[0]), &[3.0, -4.0]);
        assert_eq!(out[1].rank(), 0);
        assert_close(&flat(&out[1]), &[1.5]);
        assert_close(&flat(&out[2]), &[1.0, 2.0]);
        assert_close(&flat(&out[3]), &[5.0]);
    }

    #[test]
    fn a_value_nobody_defines_is_named() {
        let mut g = G::new();
        g.input("x", &[1], vec![1.0])
            .node("Relu", &["x"], &["y"], vec![]);
        let graph = g.b.finish().unwrap();
        let y = graph.value_by_name("y").unwrap();
        let err = Executor::new(&graph)
            .eval(&[0], &HashMap::new(), &[y])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 'relu_y': value 'x' is not computed by the evaluated nodes, not fed and not an initializer"
        );
    }

    #[test]
    fn intermediates_are_dropped_and_initializers_cached() {
        // a chain of 6 Relus holds at most one intermediate (plus the wanted output)
        let mut g = G::new();
        g.input("x", &[2], vec![-1.0, 1.0])
            .init("w", &[2], vec![2.0, 3.0]);
        let names: Vec<String> = (0..7).map(|i| format!("v{i}")).collect();
        g.node("Mul", &["x", "w"], &[names[0].as_str()], vec![]);
        for i in 0..6 {
            g.node(
                "Relu",
                &[names[i].as_str()],
                &[names[i + 1].as_str()],
                vec![],
            );
        }
        let graph = g.b.finish().unwrap();
        let x = graph.value_by_name("x").unwrap();
        let feeds = HashMap::from([(x, tensor(vec![-1.0, 1.0], &[2]).unwrap())]);
        let out = graph.value_by_name("v6").unwrap();
        let nodes: Vec<NodeId> = (0..graph.nodes.len()).collect();
        let mut exec = Executor::new(&graph);
        let y = exec.eval(&nodes, &feeds, &[out]).unwrap();
        assert_close(&flat(&y[0]), &[0.0, 3.0]);
        assert!(exec.peak_live <= 2, "peak {}", exec.peak_live);
        assert_eq!(exec.cache.len(), 1);
        // a second call evaluates a prefix and reads an intermediate as output
        let v0 = graph.value_by_name("v0").unwrap();
        let y = exec.eval(&[0], &feeds, &[v0]).unwrap();
        assert_close(&flat(&y[0]), &[-2.0, 3.0]);
    }

    #[test]
    fn to_candle_reads_raw_and_typed_data() {
        let raw = |dtype, dims: Vec<u64>, bytes: Vec<u8>| Tensor {
            name: "t".into(),
            dtype,
            dims,
            data: TensorData::Raw(bytes.into()),
        };
        let f32s: Vec<u8> = [1.5f32, -2.0, 0.25, 8.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = to_candle(&raw(DType::F32, vec![2, 2], f32s)).unwrap();
        assert_eq!(t.dims(), [2, 2]);
        assert_eq!(t.dtype(), candle_core::DType::F64);
        assert_eq!(flat(&t), [1.5, -2.0, 0.25, 8.0]);
        // IEEE half 1.0 and -2.0; bfloat16 0.5
        let halves: Vec<u8> = [0x3c00u16, 0xc000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            flat(&to_candle(&raw(DType::F16, vec![2], halves)).unwrap()),
            [1.0, -2.0]
        );
        let bf: Vec<u8> = 0x3f00u16.to_le_bytes().to_vec();
        assert_eq!(
            flat(&to_candle(&raw(DType::BF16, vec![], bf)).unwrap()),
            [0.5]
        );
        let i8s = raw(DType::I8, vec![3], vec![0xff, 0x7f, 0x80]);
        assert_eq!(flat(&to_candle(&i8s).unwrap()), [-1.0, 127.0, -128.0]);
        let short = raw(DType::I64, vec![2], vec![0; 12]);
        assert!(to_candle(&short)
            .unwrap_err()
            .contains("does not hold 2 int64 values"));
        let fp8 = raw(DType::F8E4M3FN, vec![1], vec![0]);
        assert!(to_candle(&fp8).unwrap_err().contains("float8e4m3fn"));
    }

    #[test]
    fn to_candle_reads_external_data() {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[0u8; 4]).unwrap();
        for v in [3.0f64, -1.0] {
            f.write_all(&v.to_le_bytes()).unwrap();
        }
        f.flush().unwrap();
        let t = Tensor {
            name: "t".into(),
            dtype: DType::F64,
            dims: vec![2],
            data: TensorData::External(crate::ir::ExternalData {
                path: f.path().to_path_buf(),
                offset: 4,
                length: 16,
            }),
        };
        assert_eq!(flat(&to_candle(&t).unwrap()), [3.0, -1.0]);
    }

    #[test]
    fn seeded_normal_is_reproducible_and_standard() {
        let a = flat(&seeded_normal(&[3, 2], 42));
        // the first pair, from an independent Python implementation of splitmix64 + Box-Muller
        assert_close(&a[..2], &[0.414_719_750_431_530_5, 0.652_681_222_151_942_7]);
        assert_eq!(a, flat(&seeded_normal(&[3, 2], 42)));
        assert_ne!(a, flat(&seeded_normal(&[3, 2], 43)));
        assert_eq!(seeded_normal(&[3], 1).dims(), [3]);
        let big = flat(&seeded_normal(&[100_000], 7));
        let mean = big.iter().sum::<f64>() / big.len() as f64;
        let var = big.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / big.len() as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }
}
