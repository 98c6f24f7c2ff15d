//! The op registry: for each supported ONNX operator, how its output facts follow from its inputs
//! (shape, type, folded values) and what it costs in multiply-accumulates. Shape and cost of an op
//! live side by side in the file of its family.
//!
//! An op not listed here is *opaque*: its outputs take the types the file declares (`value_info`),
//! or stay unknown, and the report lists it.

mod conv;
mod elementwise;
mod linalg;
mod movement;
mod norm;
mod pool;
mod reduce;
mod source;

pub use source::tensor_fact;

use super::fact::{Fact, Konst};
use crate::ir::{DType, Dim, Node};

/// Why an op's outputs could not be inferred.
#[derive(Debug, Clone, PartialEq)]
pub enum InferError {
    /// An input fact the op needs is unknown; the cause is upstream, nothing to report here.
    Unknown,
    /// The node is inconsistent (wrong ranks, mismatched channels, bad attribute): reported.
    Invalid(String),
}

pub type InferResult<T> = Result<T, InferError>;

pub(crate) fn invalid<T>(msg: impl Into<String>) -> InferResult<T> {
    Err(InferError::Invalid(msg.into()))
}

impl From<String> for InferError {
    fn from(s: String) -> Self {
        InferError::Invalid(s)
    }
}

/// What an op sees: its node, the facts of its inputs, and the model's opset.
pub struct OpCx<'a> {
    pub node: &'a Node,
    /// `None` for an omitted optional input.
    pub inputs: Vec<Option<&'a Fact>>,
    pub opset: i64,
}

impl<'a> OpCx<'a> {
    /// Number of input slots, omitted ones included.
    pub fn n_inputs(&self) -> usize {
        self.inputs.len()
    }

    /// The fact of input `i`, or an error if the input is absent.
    pub fn input(&self, i: usize) -> InferResult<&'a Fact> {
        match self.inputs.get(i) {
            Some(Some(f)) => Ok(f),
            _ => invalid(format!("input {i} is required but missing")),
        }
    }

    pub fn opt_input(&self, i: usize) -> Option<&'a Fact> {
        self.inputs.get(i).copied().flatten()
    }

    /// The shape of input `i`; unknown is [`InferError::Unknown`].
    pub fn shape(&self, i: usize) -> InferResult<&'a [Dim]> {
        self.input(i)?.shape.as_deref().ok_or(InferError::Unknown)
    }

    pub fn dtype(&self, i: usize) -> Option<DType> {
        self.opt_input(i).and_then(|f| f.dtype)
    }

    /// The folded value of input `i`; unknown is [`InferError::Unknown`].
    pub fn value(&self, i: usize) -> InferResult<&'a Konst> {
        self.input(i)?.value.as_ref().ok_or(InferError::Unknown)
    }

    /// The folded value of input `i` as known integers (for axes, pads, repeats...).
    pub fn ints(&self, i: usize) -> InferResult<Vec<i64>> {
        self.value(i)?.as_i64s().ok_or(InferError::Unknown)
    }

    /// An integer-list parameter that moved from an attribute to an input at some opset
    /// (`axes` of Squeeze, `split` of Split, ...): the input if present, else the attribute.
    pub fn ints_from_input_or_attr(
        &self,
        input: usize,
        attr: &str,
    ) -> InferResult<Option<Vec<i64>>> {
        if self.opt_input(input).is_some() {
            return self.ints(input).map(Some);
        }
        Ok(self.attr_ints(attr)?.map(<[i64]>::to_vec))
    }

    pub fn attr_int(&self, name: &str, default: i64) -> InferResult<i64> {
        Ok(self.node.attrs.int_or(name, default)?)
    }

    pub fn attr_ints(&self, name: &str) -> InferResult<Option<&'a [i64]>> {
        Ok(self.node.attrs.ints_opt(name)?)
    }

    pub fn attr_string(&self, name: &str) -> InferResult<Option<String>> {
        Ok(self.node.attrs.string_opt(name)?)
    }
}

/// Normalises a possibly negative axis against a rank.
pub(crate) fn axis(a: i64, rank: usize) -> InferResult<usize> {
    let r = rank as i64;
    let n = if a < 0 { a + r } else { a };
    if (0..r).contains(&n) {
        Ok(n as usize)
    } else {
        invalid(format!("axis {a} is out of range for rank {rank}"))
    }
}

/// Numpy-style broadcasting of several shapes.
pub(crate) fn broadcast(shapes: &[&[Dim]]) -> InferResult<Vec<Dim>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let one = Dim::known(1);
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let mut acc: Option<Dim> = None;
        for s in shapes {
            let Some(d) = (i + s.len()).checked_sub(rank).map(|j| &s[j]) else {
                continue;
            };
            acc = Some(match acc {
                None => d.clone(),
                Some(a) if a == *d || *d == one => a,
                Some(a) if a == one => d.clone(),
                Some(a) => match (a.as_i64(), d.as_i64()) {
                    (Some(x), Some(y)) => {
                        return invalid(format!(
                            "shapes cannot broadcast: {x} against {y} on axis {i} of the output"
                        ))
                    }
                    // a symbolic dim against a known one: the known one (≠ 1) is what it must be
                    (None, Some(_)) => d.clone(),
                    _ => a,
                },
            });
        }
        out.push(acc.unwrap_or(one.clone()));
    }
    Ok(out)
}

/// The output fact is the input's (unary element-wise ops, activations).
pub(crate) fn same_as_input(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let f = cx.input(0)?;
    Ok(vec![Fact {
        dtype: f.dtype,
        shape: f.shape.clone(),
        value: None,
    }])
}

pub(crate) fn known_usize(d: &Dim, what: &str) -> InferResult<usize> {
    match d.as_i64() {
        Some(v) if v >= 0 => usize::try_from(v).map_err(|_| InferError::Unknown),
        Some(v) => invalid(format!("{what} is negative ({v})")),
        None => Err(InferError::Unknown),
    }
}

/// Converts an overflow (`None`) into an error that names what overflowed.
pub(crate) fn ovf<T>(v: Option<T>, what: &str) -> InferResult<T> {
    v.ok_or_else(|| InferError::Invalid(format!("{what} overflows")))
}

type InferFn = fn(&OpCx) -> InferResult<Vec<Fact>>;
type MacsFn = fn(&OpCx, &[Fact]) -> Option<Dim>;

/// One registered operator.
pub struct OpDef {
    pub name: &'static str,
    pub infer: InferFn,
    /// Multiply-accumulates; `None` for ops that are not counted (element-wise, data movement).
    pub macs: Option<MacsFn>,
}

macro_rules! ops {
    ($($name:literal => $infer:expr $(, macs = $macs:expr)?;)*) => {
        &[$(OpDef { name: $name, infer: $infer, macs: ops!(@m $($macs)?) },)*]
    };
    (@m) => { None };
    (@m $m:expr) => { Some($m) };
}

/// Every supported op of the default ONNX domain, sorted by name (a test keeps it sorted).
static OPS: &[OpDef] = ops! {
    "Abs" => elementwise::unary;
    "Acos" => elementwise::unary;
    "Acosh" => elementwise::unary;
    "Add" => elementwise::binary_arith;
    "And" => elementwise::logical;
    "ArgMax" => reduce::arg;
    "ArgMin" => reduce::arg;
    "Asin" => elementwise::unary;
    "Asinh" => elementwise::unary;
    "Atan" => elementwise::unary;
    "Atanh" => elementwise::unary;
    "AveragePool" => pool::pool;
    "BatchNormalization" => norm::batch_norm;
    "Bernoulli" => source::random_like;
    "BitShift" => elementwise::binary_arith;
    "Cast" => elementwise::cast;
    "CastLike" => elementwise::cast_like;
    "Ceil" => elementwise::unary_fold;
    "Celu" => elementwise::unary;
    "Clip" => elementwise::unary;
    "Concat" => movement::concat;
    "Constant" => source::constant;
    "ConstantOfShape" => source::constant_of_shape;
    "Conv" => conv::conv, macs = conv::conv_macs;
    "ConvTranspose" => conv::conv_transpose, macs = conv::conv_transpose_macs;
    "Cos" => elementwise::unary;
    "Cosh" => elementwise::unary;
    "CumSum" => elementwise::unary;
    "DepthToSpace" => movement::depth_to_space;
    "DequantizeLinear" => elementwise::dequantize;
    "Div" => elementwise::binary_arith;
    "Dropout" => elementwise::dropout;
    "Einsum" => linalg::einsum, macs = linalg::einsum_macs;
    "Elu" => elementwise::unary;
    "Equal" => elementwise::compare;
    "Erf" => elementwise::unary;
    "Exp" => elementwise::unary;
    "Expand" => movement::expand;
    "EyeLike" => elementwise::unary;
    "Flatten" => movement::flatten;
    "Floor" => elementwise::unary_fold;
    "GRU" => linalg::rnn, macs = linalg::rnn_macs;
    "Gather" => movement::gather;
    "GatherElements" => movement::gather_elements;
    "GatherND" => movement::gather_nd;
    "Gelu" => elementwise::unary;
    "Gemm" => linalg::gemm, macs = linalg::gemm_macs;
    "GlobalAveragePool" => pool::global_pool;
    "GlobalLpPool" => pool::global_pool;
    "GlobalMaxPool" => pool::global_pool;
    "Greater" => elementwise::compare;
    "GreaterOrEqual" => elementwise::compare;
    "GroupNormalization" => norm::same_shape_norm;
    "HardSigmoid" => elementwise::unary;
    "HardSwish" => elementwise::unary;
    "Hardmax" => elementwise::unary;
    "Identity" => elementwise::identity;
    "InstanceNormalization" => norm::same_shape_norm;
    "IsInf" => elementwise::is_class;
    "IsNaN" => elementwise::is_class;
    "LRN" => elementwise::unary;
    "LSTM" => linalg::rnn, macs = linalg::rnn_macs;
    "LayerNormalization" => norm::layer_norm;
    "LeakyRelu" => elementwise::unary;
    "Less" => elementwise::compare;
    "LessOrEqual" => elementwise::compare;
    "Log" => elementwise::unary;
    "LogSoftmax" => elementwise::unary;
    "LpNormalization" => elementwise::unary;
    "LpPool" => pool::pool;
    "MatMul" => linalg::matmul, macs = linalg::matmul_macs;
    "Max" => elementwise::variadic;
    "MaxPool" => pool::pool;
    "Mean" => elementwise::variadic;
    "MeanVarianceNormalization" => elementwise::unary;
    "Min" => elementwise::variadic;
    "Mish" => elementwise::unary;
    "Mod" => elementwise::binary_arith;
    "Mul" => elementwise::binary_arith;
    "Neg" => elementwise::unary_fold;
    "NonZero" => reduce::non_zero;
    "Not" => elementwise::logical_not;
    "Or" => elementwise::logical;
    "PRelu" => elementwise::prelu;
    "Pad" => movement::pad;
    "Pow" => elementwise::binary_arith;
    "QuantizeLinear" => elementwise::quantize;
    "RNN" => linalg::rnn, macs = linalg::rnn_macs;
    "RandomNormal" => source::random;
    "RandomNormalLike" => source::random_like;
    "RandomUniform" => source::random;
    "RandomUniformLike" => source::random_like;
    "Range" => source::range;
    "Reciprocal" => elementwise::unary;
    "ReduceL1" => reduce::reduce;
    "ReduceL2" => reduce::reduce;
    "ReduceLogSum" => reduce::reduce;
    "ReduceLogSumExp" => reduce::reduce;
    "ReduceMax" => reduce::reduce;
    "ReduceMean" => reduce::reduce;
    "ReduceMin" => reduce::reduce;
    "ReduceProd" => reduce::reduce;
    "ReduceSum" => reduce::reduce;
    "ReduceSumSquare" => reduce::reduce;
    "Relu" => elementwise::unary;
    "Reshape" => movement::reshape;
    "Resize" => movement::resize;
    "Round" => elementwise::unary_fold;
    "Selu" => elementwise::unary;
    "Shape" => source::shape;
    "Shrink" => elementwise::unary;
    "Sigmoid" => elementwise::unary;
    "Sign" => elementwise::unary_fold;
    "Sin" => elementwise::unary;
    "Sinh" => elementwise::unary;
    "Size" => source::size;
    "Slice" => movement::slice;
    "Softmax" => elementwise::unary;
    "Softplus" => elementwise::unary;
    "Softsign" => elementwise::unary;
    "SpaceToDepth" => movement::space_to_depth;
    "Split" => movement::split;
    "Sqrt" => elementwise::unary_fold;
    "Squeeze" => movement::squeeze;
    "Sub" => elementwise::binary_arith;
    "Sum" => elementwise::variadic;
    "Tan" => elementwise::unary;
    "Tanh" => elementwise::unary;
    "ThresholdedRelu" => elementwise::unary;
    "Tile" => movement::tile;
    "TopK" => reduce::top_k;
    "Transpose" => movement::transpose;
    "Trilu" => elementwise::unary;
    "Unsqueeze" => movement::unsqueeze;
    "Upsample" => movement::resize;
    "Where" => elementwise::where_;
    "Xor" => elementwise::logical;
};

/// The registered op for a node, if its domain is the default ONNX domain and its type is known.
pub fn lookup(node: &Node) -> Option<&'static OpDef> {
    if !(node.domain.is_empty() || node.domain == "ai.onnx") {
        return None;
    }
    OPS.binary_search_by(|d| d.name.cmp(node.op_type.as_str()))
        .ok()
        .map(|i| &OPS[i])
}

/// Names of every supported op, for documentation.
pub fn supported() -> impl Iterator<Item = &'static str> {
    OPS.iter().map(|d| d.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_is_sorted_and_unique() {
        for w in OPS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
    }

    #[test]
    fn broadcasting() {
        let n = Dim::sym("N");
        let a = [n.clone(), Dim::known(1), Dim::known(5)];
        let b = [Dim::known(4), Dim::known(1)];
        assert_eq!(
            broadcast(&[&a, &b]).unwrap(),
            vec![n.clone(), Dim::known(4), Dim::known(5)]
        );
        let c = [Dim::known(3)];
        assert!(matches!(broadcast(&[&a, &c]), Err(InferError::Invalid(_))));
        // a symbolic dim against a known one takes the known one
        assert_eq!(
            broadcast(&[std::slice::from_ref(&n), &[Dim::known(7)]]).unwrap(),
            vec![Dim::known(7)]
        );
    }

    #[test]
    fn axes() {
        assert_eq!(axis(-1, 4).unwrap(), 3);
        assert_eq!(axis(0, 1).unwrap(), 0);
        assert!(axis(4, 4).is_err());
        assert!(axis(-5, 4).is_err());
    }
}
