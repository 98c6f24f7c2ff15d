//! The checker's kernels, by op family as in [`crate::analysis::ops`]. A kernel gets a node's typed
//! op ([`Op`], parsed once by the executor) and its input tensors, and returns its outputs. Every
//! value is an f64 candle tensor, integer ones included; ops that need integers (Reshape's shape,
//! axes, pads, Gather's indices, ...) convert them back to i64.
//!
//! [`kernel_of`] maps the parsed op's variant to its kernel: the op's name and domain are written
//! once, in the analysis registry, and a kernel for an op the analysis does not know cannot be
//! written. [`static_check`] says what can be known without running.

mod contrib;
mod control;
mod conv;
mod elementwise;
mod linalg;
mod movement;
mod norm;
mod pool;
mod quant;
mod reduce;
mod rnn;
mod source;

use std::cell::RefCell;
use std::fmt;

use candle_core::{Device, Tensor as CTensor};

use super::exec::{ExecError, Scope, MAX_ELEMENTS};
use crate::analysis::ops::source::ConstantForm;
use crate::analysis::ops::Op;
use crate::ir::{DType, Node};

pub(crate) type OpResult = Result<Vec<CTensor>, ExecError>;
pub(crate) type KernelFn = fn(&Cx) -> OpResult;

use elementwise as ew;
use movement as mv;

/// The kernel of a parsed op, by its variant (none for the ops the checker does not run, opaque
/// and malformed ones). The op's name lives in the analysis registry only.
fn kernel_of(op: &Op) -> Option<KernelFn> {
    Some(match op {
        Op::Abs => ew::abs,
        Op::Acos => ew::acos,
        Op::Acosh => ew::acosh,
        Op::Add => ew::add,
        Op::And => ew::and,
        Op::ArgMax(_) | Op::ArgMin(_) => reduce::arg_reduce,
        Op::Asin => ew::asin,
        Op::Asinh => ew::asinh,
        Op::Atan => ew::atan,
        Op::Atanh => ew::atanh,
        Op::AveragePool(_) => pool::average_pool,
        Op::BatchNormalization(_) => norm::batch_norm,
        Op::Cast(_) => ew::cast,
        Op::CastLike => ew::cast_like,
        Op::Ceil => ew::ceil,
        Op::Celu(_) => ew::celu,
        Op::Clip(_) => ew::clip,
        Op::Concat(_) => mv::concat,
        Op::Constant(_) => source::constant,
        Op::ConstantOfShape => source::constant_of_shape,
        Op::Conv(_) => conv::conv,
        Op::ConvTranspose(_) => conv::conv_transpose,
        Op::Cos => ew::cos,
        Op::Cosh => ew::cosh,
        Op::CumSum(_) => ew::cum_sum,
        Op::DepthToSpace(_) => mv::depth_to_space,
        Op::DequantizeLinear(_) => quant::dequantize_linear,
        Op::Div => ew::div,
        Op::Dropout(_) => ew::dropout,
        Op::DynamicQuantizeLinear => quant::dynamic_quantize_linear,
        Op::Einsum(_) => linalg::einsum,
        Op::Elu(_) => ew::elu,
        Op::Equal => ew::equal,
        Op::Erf => ew::erf,
        Op::Exp => ew::exp,
        Op::Expand => mv::expand,
        Op::EyeLike(_) => ew::eye_like,
        Op::Flatten(_) => mv::flatten,
        Op::Floor => ew::floor,
        Op::Gru(_) => rnn::gru,
        Op::Gather(_) => mv::gather,
        Op::GatherElements(_) => mv::gather_elements,
        Op::GatherNd(_) => mv::gather_nd,
        Op::Gelu(_) => ew::gelu,
        Op::Gemm(_) => linalg::gemm,
        Op::GlobalAveragePool => pool::global_average_pool,
        Op::GlobalMaxPool => pool::global_max_pool,
        Op::Greater => ew::greater,
        Op::GreaterOrEqual => ew::greater_or_equal,
        Op::GroupNormalization(_) => norm::group_norm,
        Op::HardSigmoid(_) => ew::hard_sigmoid,
        Op::HardSwish => ew::hard_swish,
        Op::Hardmax(_) => ew::hardmax,
        Op::Identity => ew::identity,
        Op::If => control::if_,
        Op::InstanceNormalization(_) => norm::instance_norm,
        Op::IsNaN => ew::is_nan,
        Op::Lrn(_) => norm::lrn,
        Op::Lstm(_) => rnn::lstm,
        Op::LayerNormalization(_) => norm::layer_norm,
        Op::LeakyRelu(_) => ew::leaky_relu,
        Op::Less => ew::less,
        Op::LessOrEqual => ew::less_or_equal,
        Op::Log => ew::log,
        Op::LogSoftmax(_) => ew::log_softmax,
        Op::Loop => control::loop_,
        Op::LpNormalization(_) => norm::lp_norm,
        Op::MatMul => linalg::matmul,
        Op::Max => ew::max,
        Op::MaxPool(_) => pool::max_pool,
        Op::Mean => ew::mean,
        Op::MeanVarianceNormalization(_) => norm::mean_variance_norm,
        Op::Min => ew::min,
        Op::Mish => ew::mish,
        Op::Mod(_) => ew::mod_,
        Op::Mul => ew::mul,
        Op::Neg => ew::neg,
        Op::NonZero => reduce::non_zero,
        Op::Not => ew::not,
        Op::Or => ew::or,
        Op::PRelu => ew::prelu,
        Op::Pad(_) => mv::pad,
        Op::Pow => ew::pow,
        Op::QuantizeLinear(_) => quant::quantize_linear,
        Op::RmsNormalization(_) | Op::SimplifiedLayerNormalization(_) => norm::rms_norm,
        Op::Rnn(_) => rnn::rnn,
        Op::Range => source::range,
        Op::Reciprocal => ew::reciprocal,
        // every Reduce* op, as the analysis lists them
        op if crate::analysis::ops::reduce::reduce_of(op).is_some() => reduce::reduce,
        Op::Relu => ew::relu,
        Op::Reshape(_) => mv::reshape,
        Op::Resize(_) => mv::resize,
        Op::Round => ew::round,
        Op::Scan(_) => control::scan,
        Op::ScatterElements(_) => mv::scatter_elements,
        Op::ScatterNd(_) => mv::scatter_nd,
        Op::Selu(_) => ew::selu,
        Op::Shape(_) => source::shape,
        Op::Shrink(_) => ew::shrink,
        Op::Sigmoid => ew::sigmoid,
        Op::Sign => ew::sign,
        Op::Sin => ew::sin,
        Op::Sinh => ew::sinh,
        Op::Size => source::size,
        Op::Slice(_) => mv::slice,
        Op::Softmax(_) => ew::softmax,
        Op::Softplus => ew::softplus,
        Op::Softsign => ew::softsign,
        Op::SpaceToDepth(_) => mv::space_to_depth,
        Op::Split(_) => mv::split,
        Op::Sqrt => ew::sqrt,
        Op::Squeeze(_) => mv::squeeze,
        Op::Sub => ew::sub,
        Op::Sum => ew::sum,
        Op::Tan => ew::tan,
        Op::Tanh => ew::tanh,
        Op::ThresholdedRelu(_) => ew::thresholded_relu,
        Op::Tile => mv::tile,
        Op::TopK(_) => reduce::top_k,
        Op::Transpose(_) => mv::transpose,
        Op::Trilu(_) => ew::trilu,
        Op::Unsqueeze(_) => mv::unsqueeze,
        Op::Where => ew::where_,
        Op::Xor => ew::xor,
        Op::MsAttention(_) => contrib::attention,
        Op::BiasAdd => contrib::bias_add,
        Op::BiasGelu => contrib::bias_gelu,
        Op::FastGelu => contrib::fast_gelu,
        Op::MsGelu => contrib::gelu,
        Op::QuickGelu => contrib::quick_gelu,
        Op::SkipLayerNormalization(_) | Op::SkipSimplifiedLayerNormalization(_) => {
            contrib::skip_layer_norm
        }
        _ => return None,
    })
}

/// Runs the node's kernel.
pub(crate) fn run(cx: &Cx) -> OpResult {
    match kernel_of(cx.op) {
        Some(f) => f(cx),
        None => Err(cx.unsupported("the interpreter has no implementation of this op")),
    }
}

/// What can be known without running: the op is implemented, its attributes parsed, and the
/// forms it takes are ones the kernels compute.
pub(crate) fn static_check(node: &Node, op: &Op) -> Result<(), String> {
    match op {
        Op::Opaque if !(node.domain.is_empty() || node.domain == "ai.onnx") => {
            return Err(format!(
                "ops of domain '{}' are not supported by the interpreter",
                node.domain
            ))
        }
        Op::Malformed(why) => return Err(format!("invalid attributes: {why}")),
        _ => {}
    }
    if kernel_of(op).is_none() {
        return Err("the interpreter has no implementation of this op".into());
    }
    let extra_output = |from: usize, what: &str| -> Result<(), String> {
        match node.outputs().iter().skip(from).flatten().next() {
            Some(_) => Err(format!(
                "the {what} output is not computed by the interpreter"
            )),
            None => Ok(()),
        }
    };
    match op {
        Op::BatchNormalization(b) if !b.training_mode => {
            extra_output(1, "running statistics")?;
        }
        Op::Cast(c) if !(c.to.is_float() || c.to.is_int() || c.to == DType::Bool) => {
            return Err(format!("casting to {} is not supported", c.to));
        }
        Op::Resize(r) => movement::check_resize(r)?,
        Op::Constant(c) => match &c.form {
            ConstantForm::Tensor => {}
            ConstantForm::Scalars(name) if !name.starts_with("value_string") => {}
            ConstantForm::Sparse => {
                return Err("a constant given as 'sparse_value' is not supported".into())
            }
            ConstantForm::Scalars(name) => {
                return Err(format!("a constant given as '{name}' is not supported"))
            }
        },
        _ => {}
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Op context

/// One node being evaluated: its typed op, its input tensors (`None` for omitted optional
/// inputs) and their element types where known (every tensor is f64: the types say which hold
/// integers).
pub(crate) struct Cx<'a> {
    pub node: &'a Node,
    /// The node's name (the text of `node.name` in its graph).
    pub name: &'a str,
    pub op: &'a Op,
    pub inputs: Vec<Option<CTensor>>,
    pub dtypes: Vec<Option<DType>>,
    /// The model's opset (a subgraph's ops are parsed with it).
    pub opset: i64,
    /// What the node's subgraphs capture of the graphs around it.
    pub scope: &'a Scope,
    /// The output types, when the kernel knows them better than the analysis' inference (the
    /// outputs of a subgraph).
    pub out_dtypes: RefCell<Option<Vec<Option<DType>>>>,
}

/// The typed attributes of the op a kernel is registered for; another variant is an error naming
/// the node, never a panic.
macro_rules! attrs {
    ($cx:expr, $($variant:ident)|+) => {
        match $cx.op {
            $( $crate::analysis::ops::Op::$variant(a) => a, )+
            other => return Err($cx.wrong_op(other)),
        }
    };
}
pub(crate) use attrs;

/// Turns any error into [`ExecError::Failed`] naming the node.
pub(crate) trait At<T> {
    fn at(self, cx: &Cx) -> Result<T, ExecError>;
}

impl<T, E: fmt::Display> At<T> for Result<T, E> {
    fn at(self, cx: &Cx) -> Result<T, ExecError> {
        self.map_err(|e| cx.fail(first_line(&e)))
    }
}

pub(crate) fn first_line(e: &impl fmt::Display) -> String {
    let s = e.to_string();
    s.lines().next().unwrap_or_default().trim().to_string()
}

impl Cx<'_> {
    pub fn fail(&self, message: impl Into<String>) -> ExecError {
        ExecError::Failed {
            node: self.name.to_string(),
            message: message.into(),
        }
    }

    pub fn unsupported(&self, reason: impl Into<String>) -> ExecError {
        ExecError::Unsupported {
            node: self.name.to_string(),
            op: self.node.op_type.to_string(),
            reason: reason.into(),
        }
    }

    /// The error of a kernel handed another op's attributes (a registry mistake).
    pub fn wrong_op(&self, op: &Op) -> ExecError {
        self.fail(format!(
            "internal: the {} kernel got the attributes of {}",
            self.node.op_type,
            op.name().unwrap_or("an unknown op")
        ))
    }

    /// Whether input `i` is known to hold integers.
    pub fn is_int(&self, i: usize) -> bool {
        self.dtypes
            .get(i)
            .copied()
            .flatten()
            .is_some_and(DType::is_int)
    }

    pub fn opt(&self, i: usize) -> Option<&CTensor> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    pub fn input(&self, i: usize) -> Result<&CTensor, ExecError> {
        self.opt(i)
            .ok_or_else(|| self.fail(format!("input {i} is missing")))
    }

    pub fn input_ints(&self, i: usize) -> Result<Option<Vec<i64>>, ExecError> {
        self.opt(i)
            .map(|t| to_ints(t).map_err(|e| self.fail(format!("input {i}: {e}"))))
            .transpose()
    }

    /// An integer list given as input `i` (newer opsets) or as the attribute `attr` (older
    /// ones, parsed into the typed op).
    pub fn ints_from_input_or(
        &self,
        i: usize,
        attr: &Option<Vec<i64>>,
    ) -> Result<Option<Vec<i64>>, ExecError> {
        match self.input_ints(i)? {
            Some(v) => Ok(Some(v)),
            None => Ok(attr.clone()),
        }
    }

    /// A scalar input (one element, any rank).
    pub fn input_scalar(&self, i: usize) -> Result<Option<f64>, ExecError> {
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

    /// `axis` in `[-rank, rank)` as an index, with the analysis' normalisation.
    pub fn axis(&self, axis: i64, rank: usize) -> Result<usize, ExecError> {
        crate::analysis::ops::axis(axis, rank).map_err(|e| match e {
            crate::analysis::ops::InferError::Invalid(m) => self.fail(m),
            crate::analysis::ops::InferError::Unknown => {
                self.fail(format!("axis {axis} is out of range for rank {rank}"))
            }
        })
    }

    /// Distinct axes, normalised and sorted.
    pub fn axis_set(&self, axes: &[i64], rank: usize) -> Result<Vec<usize>, ExecError> {
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

// ---------------------------------------------------------------------------------------------
// Tensor helpers shared by the families

pub(crate) fn values(t: &CTensor) -> candle_core::Result<Vec<f64>> {
    t.flatten_all()?.to_vec1::<f64>()
}

/// `n` zeros written into fresh memory, on every core, page by page. `vec![0.0; n]` gets pages
/// that are still unmapped; a kernel that adds into its output then reads the shared zero page
/// first and takes a second, write-protect fault per page, each of which interrupts every other
/// core to flush its TLB (measured: a third of the time of a depthwise convolution's check on
/// VGG-16). Writing first maps each page once.
pub(crate) fn zeros(n: usize) -> Vec<f64> {
    use rayon::prelude::*;
    let mut v: Vec<f64> = Vec::with_capacity(n);
    v.spare_capacity_mut()
        .par_chunks_mut(1 << 16)
        .for_each(|c| c.iter_mut().for_each(|x| _ = x.write(0.0)));
    // SAFETY: the loop above initialised all `n` elements of the capacity
    unsafe { v.set_len(n) };
    v
}

/// Runs `f` on a tensor's values, row-major, as one slice: borrowed from the tensor's storage when
/// it is a contiguous f64 tensor (no copy of a large activation), copied otherwise.
pub(crate) fn with_values<R>(t: &CTensor, f: impl FnOnce(&[f64]) -> R) -> candle_core::Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (candle_core::Storage::Cpu(candle_core::CpuStorage::F64(v)), Some((a, b))) =
            (&*storage, layout.contiguous_offsets())
        {
            if let Some(v) = v.get(a..b) {
                return Ok(f(v));
            }
        }
    }
    Ok(f(&values(t)?))
}

/// The values of an integer-valued tensor (shapes, axes, indices) as i64.
pub(crate) fn to_ints(t: &CTensor) -> Result<Vec<i64>, String> {
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

pub(crate) fn tensor(data: Vec<f64>, shape: &[usize]) -> candle_core::Result<CTensor> {
    CTensor::from_vec(data, shape, &Device::Cpu)
}

pub(crate) fn map(t: &CTensor, f: impl Fn(f64) -> f64) -> candle_core::Result<CTensor> {
    tensor(values(t)?.into_iter().map(f).collect(), t.dims())
}

/// Advances a row-major multi-index over `limits`; false when it wraps to zero.
pub(crate) fn advance(index: &mut [usize], limits: &[usize]) -> bool {
    for (i, l) in index.iter_mut().zip(limits).rev() {
        *i += 1;
        if *i < *l {
            return true;
        }
        *i = 0;
    }
    false
}

pub(crate) fn checked_product(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Refuses to make a tensor of `dims` with more than [`MAX_ELEMENTS`] elements: attributes and
/// shape inputs (pads, repeats, sizes) of a hostile file would otherwise allocate without bound.
pub(crate) fn check_size(cx: &Cx, dims: &[usize]) -> Result<(), ExecError> {
    match checked_product(dims) {
        Some(n) if n <= MAX_ELEMENTS => Ok(()),
        _ => Err(cx.fail(format!(
            "a tensor of shape {dims:?} is too large to evaluate (at most {MAX_ELEMENTS} elements)"
        ))),
    }
}

/// Numpy (bidirectional) broadcasting of two concrete shapes: the checker's one broadcasting rule
/// (the analysis' [`crate::analysis::ops::broadcast`] is its symbolic twin).
pub(crate) fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let n = a.len().max(b.len());
    let at = |s: &[usize], i: usize| (i + s.len()).checked_sub(n).map_or(1, |j| s[j]);
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// The shape `shapes` broadcast to, refused when they do not broadcast or when it has more than
/// [`MAX_ELEMENTS`] elements (`[2^20, 1] + [1, 2^20]` would otherwise allocate 8 TiB).
pub(crate) fn broadcast_checked(cx: &Cx, shapes: &[&[usize]]) -> Result<Vec<usize>, ExecError> {
    let shape = shapes
        .iter()
        .try_fold(Vec::new(), |acc, s| broadcast_shape(&acc, s))
        .ok_or_else(|| cx.fail(format!("shapes {shapes:?} do not broadcast")))?;
    check_size(cx, &shape)?;
    Ok(shape)
}

/// Two operands broadcast to one shape, as flat row-major values.
pub(crate) struct Broadcast {
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub shape: Vec<usize>,
}

/// `a` and `b` broadcast to one shape.
pub(crate) fn broadcast_values(cx: &Cx, a: &CTensor, b: &CTensor) -> Result<Broadcast, ExecError> {
    let shape = broadcast_checked(cx, &[a.dims(), b.dims()])?;
    let av = values(&a.broadcast_as(shape.as_slice()).at(cx)?).at(cx)?;
    let bv = values(&b.broadcast_as(shape.as_slice()).at(cx)?).at(cx)?;
    Ok(Broadcast {
        a: av,
        b: bv,
        shape,
    })
}

pub(crate) fn one(t: CTensor) -> OpResult {
    Ok(vec![t])
}

#[cfg(test)]
pub(crate) mod testing {
    //! A small graph builder for kernel tests: `x`-like inputs are fed, initializers are f32.

    use std::collections::HashMap;

    use candle_core::Tensor as CTensor;

    use super::{tensor, values};
    use crate::ir::{Attr, Attrs, DType, GraphBuilder, NodeId, Tensor, TensorData, TypedData};
    use crate::verify::exec::{ExecError, Executor};

    /// The opset the test graphs declare.
    pub const OPSET: i64 = 17;

    pub struct G {
        pub b: GraphBuilder,
        pub feeds: Vec<(String, CTensor)>,
        pub opset: i64,
    }

    impl G {
        pub fn new() -> Self {
            G {
                b: GraphBuilder::new("g", false),
                feeds: Vec::new(),
                opset: OPSET,
            }
        }

        /// A subgraph (If branch, Loop or Scan body) under construction: names nothing defines
        /// are captures.
        pub fn sub() -> Self {
            G {
                b: GraphBuilder::new("body", true),
                feeds: Vec::new(),
                opset: OPSET,
            }
        }

        /// A graph input that is not fed (a subgraph's).
        pub fn formal(&mut self, name: &str) -> &mut Self {
            let id = self.b.value(name);
            self.b.add_input(id);
            self
        }

        pub fn output(&mut self, name: &str) -> &mut Self {
            let id = self.b.value(name);
            self.b.add_output(id);
            self
        }

        /// The finished subgraph, as an attribute.
        pub fn graph(self) -> Attr {
            Attr::Graph(Box::new(self.b.finish().unwrap()))
        }

        pub fn input(&mut self, name: &str, shape: &[usize], data: Vec<f64>) -> &mut Self {
            let id = self.b.value(name);
            self.b.add_input(id);
            self.feeds.push((name.into(), tensor(data, shape).unwrap()));
            self
        }

        pub fn init(&mut self, name: &str, dims: &[u64], data: Vec<f32>) -> &mut Self {
            let id = self.b.value(name);
            self.b.value_mut(id).init = Some(Box::new(Tensor {
                name: name.into(),
                dtype: DType::F32,
                dims: dims.into(),
                data: TensorData::Typed(TypedData::F32(data)),
            }));
            self
        }

        pub fn init_i64(&mut self, name: &str, data: Vec<i64>) -> &mut Self {
            let id = self.b.value(name);
            self.b.value_mut(id).init = Some(Box::new(Tensor {
                name: name.into(),
                dtype: DType::I64,
                dims: vec![data.len() as u64].into(),
                data: TensorData::Typed(TypedData::I64(data)),
            }));
            self
        }

        pub fn node(
            &mut self,
            op: &str,
            ins: &[&str],
            outs: &[&str],
            attrs: Vec<(&str, Attr)>,
        ) -> &mut Self {
            let attrs = Attrs(attrs.into_iter().map(|(n, a)| (n.into(), a)).collect());
            let name = format!("{}_{}", op.to_lowercase(), outs[0]);
            self.b.add_node(&name, op, String::new(), ins, outs, attrs);
            self
        }

        /// Runs every node and returns `wanted`.
        pub fn run(self, wanted: &[&str]) -> Result<Vec<CTensor>, ExecError> {
            let g = self.b.finish().unwrap();
            let feeds: HashMap<_, _> = self
                .feeds
                .into_iter()
                .map(|(n, t)| (g.value_by_name(&n).unwrap(), t))
                .collect();
            let wanted: Vec<_> = wanted.iter().map(|n| g.value_by_name(n).unwrap()).collect();
            let nodes: Vec<NodeId> = (0..g.nodes.len()).collect();
            Executor::new(&g, self.opset).eval(&nodes, &feeds, &wanted)
        }

        pub fn run1(self, wanted: &str) -> CTensor {
            self.run(&[wanted]).unwrap().remove(0)
        }
    }

    pub fn ints(v: &[i64]) -> Attr {
        Attr::Ints(v.to_vec())
    }

    pub fn flat(t: &CTensor) -> Vec<f64> {
        values(t).unwrap()
    }

    pub fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "got {got:?}, want {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-12 * w.abs().max(1.0),
                "got {got:?}, want {want:?}"
            );
        }
    }

    pub fn ramp(n: usize) -> Vec<f64> {
        (0..n).map(|i| i as f64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_of_any_length() {
        for n in [0, 1, (1 << 16) - 1, 1 << 16, 3 * (1 << 16) + 5] {
            let v = zeros(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x.to_bits() == 0));
        }
    }

    #[test]
    fn with_values_borrows_contiguous_data_and_copies_views() {
        let t = CTensor::from_vec(
            (0..6).map(f64::from).collect::<Vec<_>>(),
            (2, 3),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        assert_eq!(
            with_values(&t, |v| v.to_vec()).unwrap(),
            [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        );
        // a transposed view is read in its own row-major order
        let tt = t.t().unwrap();
        assert_eq!(
            with_values(&tt, |v| v.to_vec()).unwrap(),
            [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
        );
        // a narrowed view starts at its offset
        let n = t.narrow(0, 1, 1).unwrap();
        assert_eq!(with_values(&n, |v| v.to_vec()).unwrap(), [3.0, 4.0, 5.0]);
    }

    #[test]
    fn kernels_are_found_by_the_parsed_op() {
        let parse = |domain: &str, name: &str| {
            let def = crate::analysis::ops::lookup(domain, name).expect("a registered op");
            (def.parse)(&Default::default(), 17).expect("parses without attributes")
        };
        assert!(kernel_of(&parse("", "Relu")).is_some());
        assert!(kernel_of(&parse("com.microsoft", "FastGelu")).is_some());
        assert!(kernel_of(&parse("", "BitwiseNot")).is_none());
        assert!(kernel_of(&Op::Opaque).is_none());
    }

    #[test]
    fn concrete_broadcasting() {
        assert_eq!(broadcast_shape(&[2, 1, 5], &[4, 1]), Some(vec![2, 4, 5]));
        assert_eq!(broadcast_shape(&[], &[3]), Some(vec![3]));
        assert_eq!(broadcast_shape(&[2, 3], &[4]), None);
    }
}
