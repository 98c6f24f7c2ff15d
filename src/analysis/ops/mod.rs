//! The op registry: for each supported ONNX operator, how its output facts follow from its inputs
//! (shape, type, folded values) and what it costs in multiply-accumulates. Shape and cost of an op
//! live side by side in the file of its family.
//!
//! An op not listed here is *opaque*: its outputs take the types the file declares (`value_info`),
//! or stay unknown, and the report lists it.

pub mod attention;
pub mod contrib;
pub mod conv;
pub mod elementwise;
mod fold;
pub mod linalg;
pub mod movement;
pub mod norm;
pub mod pool;
pub mod quant;
pub mod reduce;
pub mod sequence;
pub mod signal;
pub mod source;

pub use source::{deferred_value, initializer_fact, is_deferred, tensor_fact};

use super::fact::{Fact, Konst};
use super::saved;
use crate::ir::{Attrs, DType, Dim, Node};

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

/// What an op sees: its node, its typed attributes, the facts of its inputs, and the model's opset.
pub struct OpCx<'a> {
    pub node: &'a Node,
    /// The node's name (the text of `node.name` in its graph).
    pub name: &'a str,
    pub op: &'a Op,
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
        self.input(i)?.value.as_deref().ok_or(InferError::Unknown)
    }

    /// The folded value of input `i` as known integers (for axes, pads, repeats...).
    pub fn ints(&self, i: usize) -> InferResult<Vec<i64>> {
        self.value(i)?.as_i64s().ok_or(InferError::Unknown)
    }

    /// An integer-list parameter that moved from an attribute to an input at some opset
    /// (`axes` of Squeeze, `split` of Split, ...): the input if present, else the attribute.
    pub fn ints_from_input_or(
        &self,
        input: usize,
        attr: Option<&[i64]>,
    ) -> InferResult<Option<Vec<i64>>> {
        if self.opt_input(input).is_some() {
            return self.ints(input).map(Some);
        }
        Ok(attr.map(<[i64]>::to_vec))
    }
}

/// The typed attributes of the op a family function was registered for.
macro_rules! attrs {
    ($cx:expr, $($variant:ident)|+) => {
        match $cx.op {
            $( $crate::analysis::ops::Op::$variant(a) => a, )+
            other => {
                return Err($crate::analysis::ops::InferError::Invalid(format!(
                    "internal: {} is registered with the attributes of another op ({:?})",
                    $cx.node.op_type,
                    other.name()
                )))
            }
        }
    };
}
pub(crate) use attrs;

/// A possibly negative axis normalised against a rank, `None` when out of range.
pub(crate) fn axis_of(a: i64, rank: usize) -> Option<usize> {
    axis(a, rank).ok()
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
type ParseFn = fn(&Attrs, i64) -> Result<Op, String>;

/// Typed attributes, parsed once from a node's attributes (with the model's opset, for defaults
/// that changed over the versions). The error names the attribute.
pub trait FromAttrs: Sized {
    fn from_attrs(attrs: &Attrs, opset: i64) -> Result<Self, String>;
}

/// The attributes of the ops whose typed form is large (a convolution's windows, a resize's
/// modes: 64 to 160 bytes) are held boxed, so that every parsed op is 64 bytes, not 160 (a graph
/// of 100,000 nodes holds one per node).
impl<T: FromAttrs> FromAttrs for Box<T> {
    fn from_attrs(attrs: &Attrs, opset: i64) -> Result<Self, String> {
        T::from_attrs(attrs, opset).map(Box::new)
    }
}

/// How an op behaves under `torch.autocast`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Autocast {
    /// Runs in the dtype that arrives.
    Follow,
    /// Lowered to the half type (conv, linear, matmul, RNNs, prelu).
    Lower,
    /// Run in fp32 on CUDA (norms, softmax, reductions, exp/log/pow, interpolation).
    Fp32OnCuda,
    /// Binary ops: the widest operand's type (a Linear's bias add stays half).
    Promote,
    /// `Cast`: the type it casts to.
    CastTo,
    /// `Pad`: fp32 in the reflect and edge modes.
    Pad,
    /// `Gather`: an embedding lookup of a stored fp32 table stays fp32.
    Embedding,
}

/// What an op's input slots hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slots {
    /// Every input is data (and a stored one may be a weight).
    Data,
    /// Inputs from this slot on are configuration (shapes, axes, pads, scales, bounds).
    ConfigFrom(usize),
    /// These slots are configuration (indices, conditions).
    Config(&'static [usize]),
    /// Every input is configuration.
    AllConfig,
    /// Inputs from this slot on are a norm's per-layer scale and bias ([`SlotRole::Affine`]).
    AffineFrom(usize),
    /// BatchNormalization: inputs 1 and 2 are its scale and bias, 3 and 4 the running
    /// statistics (buffers).
    BatchNorm,
    /// One role per slot (quantized ops); slots past the table are data.
    Table(&'static [SlotRole]),
}

/// The role of one input slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotRole {
    Data,
    Config,
    Buffer,
    /// A weight stored quantized (int8, int4, packed): a parameter whatever its type.
    QuantWeight,
    /// A quantization scale or zero point: a buffer.
    QuantParam,
    /// The table an index op reads rows of (`Gather`'s data): a weight, stored quantized when a
    /// `DequantizeLinear` reads the rows (a quantized embedding table).
    Table,
    /// The values a scatter writes (`ScatterND`'s updates): stored ones are constants (the masks
    /// exporters build this way), not weights.
    Updates,
    /// A per-layer scale or bias (a norm's scale and bias, a convolution's or Gemm's bias): data
    /// whose stored tensor is a parameter of each layer that reads it. Exporters store identical
    /// ones (fresh LayerNorm weights, zero biases) once for several layers
    /// (`storage::shared_readers`).
    Affine,
}

impl Slots {
    pub fn role(self, slot: usize) -> SlotRole {
        match self {
            Slots::Data => SlotRole::Data,
            Slots::ConfigFrom(k) if slot >= k => SlotRole::Config,
            Slots::ConfigFrom(_) => SlotRole::Data,
            Slots::Config(s) if s.contains(&slot) => SlotRole::Config,
            Slots::Config(_) => SlotRole::Data,
            Slots::AllConfig => SlotRole::Config,
            Slots::AffineFrom(k) if slot >= k => SlotRole::Affine,
            Slots::AffineFrom(_) => SlotRole::Data,
            Slots::BatchNorm if slot == 3 || slot == 4 => SlotRole::Buffer,
            Slots::BatchNorm if slot == 1 || slot == 2 => SlotRole::Affine,
            Slots::BatchNorm => SlotRole::Data,
            Slots::Table(t) => t.get(slot).copied().unwrap_or(SlotRole::Data),
        }
    }
}

/// Whether output 0 shares the storage of input 0 in PyTorch (a view), and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    /// A new storage.
    No,
    /// A view of a contiguous input; a copy of a non-contiguous one.
    Reshape,
    /// Always a view with the input's layout (squeeze, unsqueeze, identity).
    Alias,
    /// A view when the drop ratio is 0.
    Dropout,
    /// A view; contiguous only when the big axes keep their order.
    Transpose,
    /// A non-contiguous view.
    Expand,
    /// A view; contiguous when only leading axes are sliced.
    Slice,
    /// A view along the split axis.
    Split,
    /// A view for a scalar index into an activation (`select`), a copy otherwise.
    Gather,
}

/// What an op's outputs depend on, for constant folding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outputs {
    /// The input values.
    Computed,
    /// Nothing: the op holds its value (`Constant`).
    Held,
    /// Only the input's shape (`Shape`, `Size`): folded once the shapes are known.
    ShapeOnly,
    /// Random draws: never folded.
    Random,
}

/// One registered operator and every fact nnlint knows about it.
pub struct OpDef {
    pub name: &'static str,
    /// `""` for the default ONNX domain.
    pub domain: &'static str,
    /// Parses the node's attributes into the typed [`Op`].
    pub parse: ParseFn,
    /// Output facts (type, shape, folded values) from the inputs'.
    pub infer: InferFn,
    /// Multiply-accumulates (zero for ops that are not counted).
    pub macs: MacsFn,
    /// Whether its line names a cost function (`macs:`), set by the registry: an op without one
    /// has 0 MACs even where its shapes are unknown ([`OpDef::counts_macs`]).
    has_macs: bool,
    /// Whether its line states what autograd saves (`saves:`), set by the registry.
    has_saves: bool,
    /// What autograd saves for backward.
    pub saves: saved::SaveFn,
    pub autocast: Autocast,
    pub slots: Slots,
    /// Whether gradients flow through it (shapes, comparisons and random sources stop them).
    pub grad: bool,
    pub view: View,
    /// What the outputs depend on (constant folding).
    pub outputs: Outputs,
}

fn not_counted(_: &OpCx, _: &[Fact]) -> Option<Dim> {
    Some(Dim::ZERO)
}

fn no_inference(_: &OpCx) -> InferResult<Vec<Fact>> {
    Err(InferError::Unknown)
}

impl OpDef {
    /// Whether the op can have MACs at all (its line names a cost function): one that cannot has
    /// 0 MACs even where its shapes are unknown.
    pub fn counts_macs(&self) -> bool {
        // not by comparing `macs` with `not_counted`: a function's address is not unique (codegen
        // may copy it), and such a comparison changed with unrelated code
        self.has_macs
    }

    /// Whether its line states what autograd saves for backward (without a `saves:` it gets
    /// `saved::unstated`); read from the line, like [`OpDef::counts_macs`].
    pub fn states_saves(&self) -> bool {
        self.has_saves
    }

    /// The defaults every registry line starts from.
    const BASE: OpDef = OpDef {
        name: "",
        domain: "",
        parse: |_, _| Ok(Op::Opaque),
        infer: no_inference,
        macs: not_counted,
        has_macs: false,
        has_saves: false,
        saves: saved::unstated,
        autocast: Autocast::Follow,
        slots: Slots::Data,
        grad: true,
        view: View::No,
        outputs: Outputs::Computed,
    };
}

/// The registry: one line per op, generating the [`Op`] enum (a variant per op, holding its typed
/// attributes) and the sorted table of [`OpDef`]s.
macro_rules! registry {
    ($( $name:literal $(in $domain:literal)? => $variant:ident $(($attrs:ty))? { $($field:ident: $value:expr),* $(,)? } )*) => {
        /// A node's operator with its typed attributes, parsed once ([`parse`]).
        #[derive(Clone, Debug)]
        pub enum Op {
            $( $variant $(($attrs))?, )*
            /// An op nnlint does not know: its outputs take the declared types, or stay unknown.
            Opaque,
            /// A known op whose attributes are invalid, and why.
            Malformed(String),
        }

        /// Every supported op, sorted by domain and name (a test keeps it sorted).
        static OPS: &[OpDef] = &[ $( OpDef {
            name: $name,
            domain: registry!(@domain $($domain)?),
            parse: registry!(@parse $variant $($attrs)?),
            $($field: $value,)*
            has_macs: registry!(@counts $($field)*),
            has_saves: registry!(@states $($field)*),
            ..OpDef::BASE
        }, )* ];

        /// Each variant's position in [`OPS`] (the lines' order).
        #[derive(Clone, Copy)]
        enum Position {
            $( $variant, )*
        }

        impl Op {
            /// The registry entry of this op (`None` for opaque and malformed ones): found by the
            /// variant, in constant time (by its name, a hash lookup per call, it was a tenth of
            /// `fit`, which infers a graph at many batch sizes).
            pub fn def(&self) -> Option<&'static OpDef> {
                match self {
                    $( registry!(@pat $variant $($attrs)?) => OPS.get(Position::$variant as usize), )*
                    Op::Opaque | Op::Malformed(_) => None,
                }
            }

            /// The op type of a registered op.
            pub fn name(&self) -> Option<&'static str> {
                self.key().map(|(_, n)| n)
            }

            /// The domain and op type of a registered op.
            pub fn key(&self) -> Option<(&'static str, &'static str)> {
                match self {
                    $( registry!(@pat $variant $($attrs)?) => Some((registry!(@domain $($domain)?), $name)), )*
                    Op::Opaque | Op::Malformed(_) => None,
                }
            }
        }
    };
    (@counts) => { false };
    (@counts macs $($rest:ident)*) => { true };
    (@counts $first:ident $($rest:ident)*) => { registry!(@counts $($rest)*) };
    (@states) => { false };
    (@states saves $($rest:ident)*) => { true };
    (@states $first:ident $($rest:ident)*) => { registry!(@states $($rest)*) };
    (@domain $d:literal) => { $d };
    (@domain) => { "" };
    (@parse $v:ident $t:ty) => {
        |a: &Attrs, opset: i64| <$t as FromAttrs>::from_attrs(a, opset).map(Op::$v)
    };
    (@parse $v:ident) => {
        |_: &Attrs, _: i64| Ok(Op::$v)
    };
    (@pat $v:ident $t:ty) => { Op::$v(_) };
    (@pat $v:ident) => { Op::$v };
}

use elementwise as ew;
use saved as sv;

/// A convolution's or Gemm's inputs: data, weight, per-layer bias.
const CONV_SLOTS: &[SlotRole] = &[SlotRole::Data, SlotRole::Data, SlotRole::Affine];
use Autocast::{CastTo, Embedding, Fp32OnCuda, Lower, Promote};

registry! {
    "Abs" => Abs { infer: ew::unary, saves: sv::input_if_grad }
    "Acos" => Acos { infer: ew::unary, saves: sv::input_if_grad }
    "Acosh" => Acosh { infer: ew::unary, saves: sv::input_if_grad }
    "Add" => Add { infer: ew::binary_arith, autocast: Promote }
    "AffineGrid" => AffineGrid(movement::AffineGrid) {
        infer: movement::affine_grid, macs: movement::affine_grid_macs, slots: Slots::ConfigFrom(1),
    }
    "And" => And { infer: ew::logical, grad: false }
    "ArgMax" => ArgMax(reduce::ArgReduce) { infer: reduce::arg, grad: false }
    "ArgMin" => ArgMin(reduce::ArgReduce) { infer: reduce::arg, grad: false }
    "Asin" => Asin { infer: ew::unary, saves: sv::input_if_grad }
    "Asinh" => Asinh { infer: ew::unary, saves: sv::input_if_grad }
    "Atan" => Atan { infer: ew::unary, saves: sv::input_if_grad }
    "Atanh" => Atanh { infer: ew::unary, saves: sv::input_if_grad }
    "Attention" => Attention(Box<attention::Attention>) {
        infer: attention::attention, macs: attention::attention_macs, saves: attention::attention_saves,
        autocast: Lower, slots: Slots::Config(&[3, 6]),
    }
    "AveragePool" => AveragePool(Box<pool::Pool>) { infer: pool::pool, saves: sv::input_if_grad }
    "BatchNormalization" => BatchNormalization(norm::BatchNorm) {
        infer: norm::batch_norm, saves: norm::saves, slots: Slots::BatchNorm,
    }
    "Bernoulli" => Bernoulli(source::RandomLike) { infer: source::random_like, grad: false, outputs: Outputs::Random }
    "BitCast" => BitCast(ew::BitCast) { infer: ew::bit_cast, grad: false }
    "BitShift" => BitShift { infer: ew::binary_arith }
    "BitwiseAnd" => BitwiseAnd { infer: ew::binary_arith, grad: false }
    "BitwiseNot" => BitwiseNot { infer: ew::unary, grad: false }
    "BitwiseOr" => BitwiseOr { infer: ew::binary_arith, grad: false }
    "BitwiseXor" => BitwiseXor { infer: ew::binary_arith, grad: false }
    "BlackmanWindow" => BlackmanWindow(signal::Generated) { infer: signal::window, slots: Slots::AllConfig, grad: false }
    "Cast" => Cast(ew::Cast) { infer: ew::cast, autocast: CastTo }
    "CastLike" => CastLike { infer: ew::cast_like, slots: Slots::ConfigFrom(1) }
    "CausalConvWithState" => CausalConvWithState(conv::CausalConv) {
        infer: conv::causal_conv, macs: conv::causal_conv_macs, saves: conv::causal_conv_saves,
        autocast: Lower,
    }
    "Ceil" => Ceil { infer: ew::unary_fold, grad: false }
    "Celu" => Celu(ew::Alpha) { infer: ew::unary, saves: sv::input_if_grad }
    "CenterCropPad" => CenterCropPad(movement::CenterCropPad) { infer: movement::center_crop_pad, slots: Slots::ConfigFrom(1) }
    "Clip" => Clip(ew::Clip) { infer: ew::unary, saves: sv::input_if_grad, slots: Slots::ConfigFrom(1) }
    "Col2Im" => Col2Im(Box<conv::Col2Im>) { infer: conv::col2im, slots: Slots::ConfigFrom(1) }
    "Compress" => Compress(movement::Compress) {
        infer: movement::compress, saves: movement::compress_saves, slots: Slots::Config(&[1]),
    }
    "Concat" => Concat(movement::Concat) { infer: movement::concat, autocast: Promote }
    "ConcatFromSequence" => ConcatFromSequence {}
    "Constant" => Constant(source::Constant) { infer: source::constant, outputs: Outputs::Held }
    "ConstantOfShape" => ConstantOfShape { infer: source::constant_of_shape, slots: Slots::AllConfig, grad: false }
    "Conv" => Conv(Box<conv::Conv>) {
        infer: conv::conv, macs: conv::conv_macs, saves: conv::saves, autocast: Lower, slots: Slots::Table(CONV_SLOTS),
    }
    "ConvInteger" => ConvInteger(Box<conv::Conv>) {
        infer: quant::conv_integer, macs: quant::conv_integer_macs, slots: Slots::Table(quant::INTEGER),
    }
    "ConvTranspose" => ConvTranspose(Box<conv::ConvTranspose>) {
        infer: conv::conv_transpose, macs: conv::conv_transpose_macs, saves: conv::saves,
        autocast: Lower, slots: Slots::Table(CONV_SLOTS),
    }
    "Cos" => Cos { infer: ew::unary, saves: sv::input_if_grad }
    "Cosh" => Cosh { infer: ew::unary, saves: sv::input_if_grad }
    "CumProd" => CumProd(ew::CumSum) {
        infer: ew::unary, saves: ew::cum_prod_saves, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1),
    }
    "CumSum" => CumSum(ew::CumSum) { infer: ew::cum_sum, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1) }
    "DFT" => Dft(signal::Dft) { infer: signal::dft, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1) }
    "DeformConv" => DeformConv(Box<conv::DeformConv>) {
        infer: conv::deform_conv, macs: conv::deform_conv_macs, saves: conv::deform_conv_saves,
        autocast: Fp32OnCuda,
    }
    "DepthToSpace" => DepthToSpace(movement::Blocks) { infer: movement::depth_to_space }
    "DequantizeLinear" => DequantizeLinear(ew::Dequantize) { infer: ew::dequantize, slots: Slots::Table(quant::DEQUANTIZE) }
    "Det" => Det { infer: linalg::det, macs: linalg::det_macs, saves: linalg::det_saves }
    "Div" => Div { infer: ew::binary_arith, saves: sv::div, autocast: Promote }
    "Dropout" => Dropout(ew::Dropout) {
        infer: ew::dropout, saves: sv::dropout, slots: Slots::ConfigFrom(1), view: View::Dropout,
    }
    "DynamicQuantizeLinear" => DynamicQuantizeLinear { infer: quant::dynamic_quantize }
    "Einsum" => Einsum(linalg::EinsumAttrs) {
        infer: linalg::einsum, macs: linalg::einsum_macs, saves: sv::operands, autocast: Lower,
    }
    "Elu" => Elu(ew::Alpha) { infer: ew::unary, saves: sv::input_if_grad }
    "Equal" => Equal { infer: ew::compare, grad: false }
    "Erf" => Erf { infer: ew::unary, saves: sv::input_if_grad }
    "Exp" => Exp { infer: ew::unary, saves: sv::output_if_grad, autocast: Fp32OnCuda }
    "Expand" => Expand { infer: movement::expand, slots: Slots::ConfigFrom(1), view: View::Expand }
    "EyeLike" => EyeLike(ew::EyeLike) { infer: ew::unary }
    "Flatten" => Flatten(movement::Flatten) { infer: movement::flatten, view: View::Reshape }
    "Floor" => Floor { infer: ew::unary_fold, grad: false }
    "GRU" => Gru(Box<linalg::Rnn>) {
        infer: linalg::rnn, macs: linalg::rnn_macs, saves: linalg::rnn_saves, autocast: Lower,
    }
    "Gather" => Gather(movement::Gather) {
        infer: movement::gather, saves: sv::embedding_indices, autocast: Embedding,
        slots: Slots::Table(&[SlotRole::Table, SlotRole::Config]), view: View::Gather,
    }
    "GatherElements" => GatherElements(movement::Gather) {
        infer: movement::gather_elements, saves: sv::index_if_grad, slots: Slots::Config(&[1]),
    }
    "GatherND" => GatherNd(movement::GatherNd) {
        infer: movement::gather_nd, saves: sv::index_if_grad, slots: Slots::Config(&[1]),
    }
    "Gelu" => Gelu(ew::Gelu) { infer: ew::unary, saves: sv::input_if_grad }
    "Gemm" => Gemm(linalg::Gemm) {
        infer: linalg::gemm, macs: linalg::gemm_macs, saves: sv::operands, autocast: Lower, slots: Slots::Table(CONV_SLOTS),
    }
    "GlobalAveragePool" => GlobalAveragePool { infer: pool::global_pool }
    "GlobalLpPool" => GlobalLpPool { infer: pool::global_pool, saves: sv::input_if_grad }
    "GlobalMaxPool" => GlobalMaxPool { infer: pool::global_pool, saves: sv::input_and_indices }
    "Greater" => Greater { infer: ew::compare, grad: false }
    "GreaterOrEqual" => GreaterOrEqual { infer: ew::compare, grad: false }
    "GridSample" => GridSample(Box<movement::GridSample>) {
        infer: movement::grid_sample, saves: movement::grid_sample_saves, autocast: Promote,
    }
    "GroupNormalization" => GroupNormalization(norm::GroupNorm) {
        infer: norm::same_shape_norm, saves: norm::saves, autocast: Fp32OnCuda, slots: Slots::AffineFrom(1),
    }
    "HammingWindow" => HammingWindow(signal::Generated) { infer: signal::window, slots: Slots::AllConfig, grad: false }
    "HannWindow" => HannWindow(signal::Generated) { infer: signal::window, slots: Slots::AllConfig, grad: false }
    "HardSigmoid" => HardSigmoid(ew::HardSigmoid) { infer: ew::unary, saves: sv::input_if_grad }
    "HardSwish" => HardSwish { infer: ew::unary, saves: sv::input_if_grad }
    "Hardmax" => Hardmax(ew::Softmax) { infer: ew::unary }
    "Identity" => Identity { infer: ew::identity, view: View::Alias }
    "If" => If {}
    "ImageDecoder" => ImageDecoder(sequence::ImageDecoder) { infer: sequence::image_decoder, grad: false }
    "InstanceNormalization" => InstanceNormalization(norm::InstanceNorm) {
        infer: norm::same_shape_norm, saves: norm::saves, slots: Slots::AffineFrom(1),
    }
    "IsInf" => IsInf { infer: ew::is_class, grad: false }
    "IsNaN" => IsNaN { infer: ew::is_class, grad: false }
    "LRN" => Lrn(norm::Lrn) { infer: ew::unary, saves: norm::lrn_saves }
    "LSTM" => Lstm(Box<linalg::Rnn>) {
        infer: linalg::rnn, macs: linalg::rnn_macs, saves: linalg::rnn_saves, autocast: Lower,
    }
    "LayerNormalization" => LayerNormalization(norm::LayerNorm) {
        infer: norm::layer_norm, saves: norm::saves, autocast: Fp32OnCuda, slots: Slots::AffineFrom(1),
    }
    "LeakyRelu" => LeakyRelu(ew::LeakyRelu) { infer: ew::unary, saves: sv::input_if_grad }
    "Less" => Less { infer: ew::compare, grad: false }
    "LessOrEqual" => LessOrEqual { infer: ew::compare, grad: false }
    "LinearAttention" => LinearAttention(attention::LinearAttention) {
        infer: attention::linear_attention, macs: attention::linear_attention_macs, autocast: Lower,
    }
    "Log" => Log { infer: ew::unary, saves: sv::input_if_grad, autocast: Fp32OnCuda }
    "LogSoftmax" => LogSoftmax(ew::Softmax) { infer: ew::unary, saves: sv::output_if_grad, autocast: Fp32OnCuda }
    "Loop" => Loop {}
    "LpNormalization" => LpNormalization(norm::LpNorm) { infer: ew::unary, saves: sv::input_if_grad }
    "LpPool" => LpPool(Box<pool::Pool>) { infer: pool::pool, saves: sv::input_if_grad }
    "MatMul" => MatMul {
        infer: linalg::matmul, macs: linalg::matmul_macs, saves: sv::operands, autocast: Lower,
    }
    "MatMulInteger" => MatMulInteger {
        infer: quant::matmul_integer, macs: quant::matmul_integer_macs, slots: Slots::Table(quant::INTEGER),
    }
    "Max" => Max { infer: ew::variadic, saves: sv::all_inputs, autocast: Promote }
    "MaxPool" => MaxPool(Box<pool::Pool>) { infer: pool::pool, saves: sv::input_and_indices }
    "MaxRoiPool" => MaxRoiPool(pool::MaxRoiPool) {
        infer: pool::roi_pool, saves: pool::roi_saves, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1),
    }
    "MaxUnpool" => MaxUnpool(Box<pool::Pool>) {
        infer: pool::max_unpool, saves: pool::max_unpool_saves, slots: Slots::ConfigFrom(1),
    }
    "Mean" => Mean { infer: ew::variadic, autocast: Promote }
    "MeanVarianceNormalization" => MeanVarianceNormalization(norm::Mvn) { infer: ew::unary, saves: norm::mvn_saves }
    "MelWeightMatrix" => MelWeightMatrix(signal::Generated) {
        infer: signal::mel_weight_matrix, slots: Slots::AllConfig, grad: false,
    }
    "Min" => Min { infer: ew::variadic, saves: sv::all_inputs, autocast: Promote }
    "Mish" => Mish { infer: ew::unary, saves: sv::input_if_grad }
    "Mod" => Mod(ew::Mod) { infer: ew::binary_arith }
    "Mul" => Mul { infer: ew::binary_arith, saves: sv::mul, autocast: Promote }
    "Multinomial" => Multinomial(source::Multinomial) { infer: source::multinomial, grad: false, outputs: Outputs::Random }
    "Neg" => Neg { infer: ew::unary_fold }
    "NegativeLogLikelihoodLoss" => NegativeLogLikelihoodLoss(reduce::Loss) {
        infer: reduce::loss, saves: reduce::loss_saves, autocast: Fp32OnCuda, slots: Slots::Config(&[1, 2]),
    }
    "NonMaxSuppression" => NonMaxSuppression(reduce::Nms) { infer: reduce::non_max_suppression, slots: Slots::AllConfig, grad: false }
    "NonZero" => NonZero { infer: reduce::non_zero, grad: false }
    "Not" => Not { infer: ew::logical_not, grad: false }
    "OneHot" => OneHot(movement::OneHot) { infer: movement::one_hot, slots: Slots::AllConfig, grad: false }
    "Optional" => Optional {}
    "OptionalGetElement" => OptionalGetElement {}
    "OptionalHasElement" => OptionalHasElement { infer: sequence::optional_has_element, grad: false }
    "Or" => Or { infer: ew::logical, grad: false }
    "PRelu" => PRelu { infer: ew::prelu, saves: sv::input_if_grad, autocast: Lower }
    "Pad" => Pad(movement::Pad) {
        infer: movement::pad, saves: movement::pad_saves, autocast: Autocast::Pad,
        slots: Slots::ConfigFrom(1),
    }
    "Pow" => Pow { infer: ew::binary_arith, saves: sv::input_if_grad, autocast: Fp32OnCuda }
    "QLinearConv" => QLinearConv(Box<conv::Conv>) {
        infer: quant::qlinear_conv, macs: quant::qlinear_conv_macs, slots: Slots::Table(quant::QLINEAR_CONV),
    }
    "QLinearMatMul" => QLinearMatMul {
        infer: quant::qlinear_matmul, macs: quant::qlinear_matmul_macs, slots: Slots::Table(quant::QLINEAR_MATMUL),
    }
    "QuantizeLinear" => QuantizeLinear(ew::Quantize) { infer: ew::quantize, slots: Slots::Table(quant::QUANTIZE) }
    "RMSNormalization" => RmsNormalization(norm::LayerNorm) {
        infer: norm::simplified_layer_norm, saves: norm::saves, autocast: Fp32OnCuda, slots: Slots::AffineFrom(1),
    }
    "RNN" => Rnn(Box<linalg::Rnn>) {
        infer: linalg::rnn, macs: linalg::rnn_macs, saves: linalg::rnn_saves, autocast: Lower,
    }
    "RandomNormal" => RandomNormal(source::Random) { infer: source::random, grad: false, outputs: Outputs::Random }
    "RandomNormalLike" => RandomNormalLike(source::RandomLike) { infer: source::random_like, grad: false, outputs: Outputs::Random }
    "RandomUniform" => RandomUniform(source::Random) { infer: source::random, grad: false, outputs: Outputs::Random }
    "RandomUniformLike" => RandomUniformLike(source::RandomLike) { infer: source::random_like, grad: false, outputs: Outputs::Random }
    "Range" => Range { infer: source::range, slots: Slots::AllConfig, grad: false }
    "Reciprocal" => Reciprocal { infer: ew::unary, saves: sv::output_if_grad }
    "ReduceL1" => ReduceL1(reduce::Reduce) {
        infer: reduce::reduce, saves: sv::input_if_grad, slots: Slots::ConfigFrom(1),
    }
    "ReduceL2" => ReduceL2(reduce::Reduce) {
        infer: reduce::reduce, saves: sv::input_and_output_if_grad, slots: Slots::ConfigFrom(1),
    }
    "ReduceLogSum" => ReduceLogSum(reduce::Reduce) { infer: reduce::reduce, slots: Slots::ConfigFrom(1) }
    "ReduceLogSumExp" => ReduceLogSumExp(reduce::Reduce) {
        infer: reduce::reduce, saves: sv::input_and_output_if_grad, slots: Slots::ConfigFrom(1),
    }
    "ReduceMax" => ReduceMax(reduce::Reduce) {
        infer: reduce::reduce, saves: sv::input_and_indices, slots: Slots::ConfigFrom(1),
    }
    "ReduceMean" => ReduceMean(reduce::Reduce) { infer: reduce::reduce, slots: Slots::ConfigFrom(1) }
    "ReduceMin" => ReduceMin(reduce::Reduce) {
        infer: reduce::reduce, saves: sv::input_and_indices, slots: Slots::ConfigFrom(1),
    }
    "ReduceProd" => ReduceProd(reduce::Reduce) {
        infer: reduce::reduce, saves: sv::input_and_output_if_grad, autocast: Fp32OnCuda,
        slots: Slots::ConfigFrom(1),
    }
    "ReduceSum" => ReduceSum(reduce::Reduce) { infer: reduce::reduce, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1) }
    "ReduceSumSquare" => ReduceSumSquare(reduce::Reduce) {
        infer: reduce::reduce, saves: sv::input_if_grad, slots: Slots::ConfigFrom(1),
    }
    "RegexFullMatch" => RegexFullMatch { infer: sequence::regex_full_match, grad: false }
    "Relu" => Relu { infer: ew::unary, saves: sv::output_if_grad }
    "Reshape" => Reshape(movement::Reshape) { infer: movement::reshape, slots: Slots::ConfigFrom(1), view: View::Reshape }
    "Resize" => Resize(Box<movement::Resize>) { infer: movement::resize, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1) }
    "ReverseSequence" => ReverseSequence(movement::ReverseSequence) {
        infer: movement::reverse_sequence, slots: Slots::Config(&[1]),
    }
    "RoiAlign" => RoiAlign(pool::RoiAlign) {
        infer: pool::roi_pool, saves: pool::roi_saves, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1),
    }
    "RotaryEmbedding" => RotaryEmbedding(attention::Rotary) {
        infer: attention::rotary_embedding, saves: attention::rotary_saves,
        slots: Slots::Table(attention::ROTARY),
    }
    "Round" => Round { infer: ew::unary_fold, grad: false }
    "STFT" => Stft(signal::Stft) { infer: signal::stft, autocast: Fp32OnCuda, slots: Slots::Config(&[1, 2, 3]) }
    "Scan" => Scan(Box<source::Scan>) {}
    "Scatter" => Scatter(movement::Scatter) {
        infer: movement::scatter, saves: movement::scatter_saves, slots: Slots::Config(&[1]),
    }
    "ScatterElements" => ScatterElements(movement::Scatter) {
        infer: movement::scatter, saves: movement::scatter_saves,
        slots: Slots::Table(&[SlotRole::Data, SlotRole::Config, SlotRole::Updates]),
    }
    "ScatterND" => ScatterNd(movement::Scatter) {
        infer: movement::scatter, saves: movement::scatter_saves,
        slots: Slots::Table(&[SlotRole::Data, SlotRole::Config, SlotRole::Updates]),
    }
    "Selu" => Selu(ew::Selu) { infer: ew::unary, saves: sv::input_if_grad }
    "SequenceAt" => SequenceAt { slots: Slots::Config(&[1]) }
    "SequenceConstruct" => SequenceConstruct {}
    "SequenceEmpty" => SequenceEmpty {}
    "SequenceErase" => SequenceErase { slots: Slots::Config(&[1]) }
    "SequenceInsert" => SequenceInsert { slots: Slots::Config(&[2]) }
    "SequenceLength" => SequenceLength { infer: sequence::sequence_length, grad: false }
    "SequenceMap" => SequenceMap { macs: sequence::sequence_map_macs }
    "Shape" => Shape(source::Shape) { infer: source::shape, slots: Slots::AllConfig, grad: false, outputs: Outputs::ShapeOnly }
    "Shrink" => Shrink(ew::Shrink) { infer: ew::unary, saves: sv::input_if_grad }
    "Sigmoid" => Sigmoid { infer: ew::unary, saves: sv::output_if_grad }
    "Sign" => Sign { infer: ew::unary_fold, grad: false }
    "SimplifiedLayerNormalization" => SimplifiedLayerNormalization(norm::LayerNorm) {
        infer: norm::simplified_layer_norm, saves: norm::saves, autocast: Fp32OnCuda, slots: Slots::AffineFrom(1),
    }
    "Sin" => Sin { infer: ew::unary, saves: sv::input_if_grad }
    "Sinh" => Sinh { infer: ew::unary, saves: sv::input_if_grad }
    "Size" => Size { infer: source::size, slots: Slots::AllConfig, grad: false, outputs: Outputs::ShapeOnly }
    "Slice" => Slice(Box<movement::Slice>) { infer: movement::slice, slots: Slots::ConfigFrom(1), view: View::Slice }
    "Softmax" => Softmax(ew::Softmax) { infer: ew::unary, saves: sv::output_if_grad, autocast: Fp32OnCuda }
    "SoftmaxCrossEntropyLoss" => SoftmaxCrossEntropyLoss(reduce::Loss) {
        infer: reduce::loss, saves: reduce::loss_saves, autocast: Fp32OnCuda, slots: Slots::Config(&[1, 2]),
    }
    "Softplus" => Softplus { infer: ew::unary, saves: sv::input_if_grad }
    "Softsign" => Softsign { infer: ew::unary, saves: sv::input_if_grad }
    "SpaceToDepth" => SpaceToDepth(movement::Blocks) { infer: movement::space_to_depth }
    "Split" => Split(Box<movement::Split>) { infer: movement::split, slots: Slots::ConfigFrom(1), view: View::Split }
    "SplitToSequence" => SplitToSequence { slots: Slots::ConfigFrom(1) }
    "Sqrt" => Sqrt { infer: ew::unary_fold, saves: sv::output_if_grad }
    "Squeeze" => Squeeze(movement::Axes) { infer: movement::squeeze, slots: Slots::ConfigFrom(1), view: View::Alias }
    "StringConcat" => StringConcat { infer: sequence::string_concat, grad: false }
    "StringNormalizer" => StringNormalizer(sequence::StringNormalizer) { infer: sequence::string_normalizer, grad: false }
    "StringSplit" => StringSplit { infer: sequence::string_split, grad: false }
    "Sub" => Sub { infer: ew::binary_arith, autocast: Promote }
    "Sum" => Sum { infer: ew::variadic, autocast: Promote }
    "SwiGLU" => SwiGlu(ew::Swish) { infer: ew::swiglu, saves: ew::swiglu_saves }
    "Swish" => Swish(ew::Swish) { infer: ew::unary, saves: sv::input_if_grad }
    "Tan" => Tan { infer: ew::unary, saves: sv::input_if_grad }
    "Tanh" => Tanh { infer: ew::unary, saves: sv::output_if_grad }
    "TensorScatter" => TensorScatter(movement::TensorScatter) { infer: movement::tensor_scatter, slots: Slots::Config(&[2]) }
    "TfIdfVectorizer" => TfIdfVectorizer(sequence::TfIdf) { infer: sequence::tf_idf, grad: false }
    "ThresholdedRelu" => ThresholdedRelu(ew::Alpha) { infer: ew::unary, saves: sv::input_if_grad }
    "Tile" => Tile { infer: movement::tile, slots: Slots::ConfigFrom(1) }
    "TopK" => TopK(reduce::TopK) { infer: reduce::top_k, saves: reduce::top_k_saves, slots: Slots::ConfigFrom(1) }
    "Transpose" => Transpose(movement::Transpose) { infer: movement::transpose, view: View::Transpose }
    "Trilu" => Trilu(ew::Trilu) { infer: ew::unary, slots: Slots::ConfigFrom(1) }
    "Unique" => Unique(reduce::Unique) { infer: reduce::unique, grad: false }
    "Unsqueeze" => Unsqueeze(movement::Axes) { infer: movement::unsqueeze, slots: Slots::ConfigFrom(1), view: View::Alias }
    "Upsample" => Upsample(Box<movement::Resize>) { infer: movement::resize, autocast: Fp32OnCuda, slots: Slots::ConfigFrom(1) }
    "Where" => Where { infer: ew::where_, saves: sv::condition, autocast: Promote, slots: Slots::Config(&[0]) }
    "Xor" => Xor { infer: ew::logical, grad: false }
    "Attention" in "com.microsoft" => MsAttention(Box<contrib::Heads>) {
        infer: contrib::attention, macs: contrib::attention_macs, slots: Slots::Table(contrib::ATTENTION),
    }
    "BiasAdd" in "com.microsoft" => BiasAdd { infer: contrib::like_input }
    "BiasGelu" in "com.microsoft" => BiasGelu { infer: contrib::like_input }
    "DynamicQuantizeLSTM" in "com.microsoft" => DynamicQuantizeLstm(Box<linalg::Rnn>) {
        infer: quant::dq_lstm, macs: quant::dq_lstm_macs, slots: Slots::Table(quant::DQ_LSTM),
    }
    "EmbedLayerNormalization" in "com.microsoft" => EmbedLayerNormalization(contrib::FusedNorm) {
        infer: contrib::embed_norm, slots: Slots::Table(contrib::EMBED_LN),
    }
    "FastGelu" in "com.microsoft" => FastGelu { infer: contrib::like_input }
    "FusedMatMul" in "com.microsoft" => FusedMatMul(contrib::FusedMatMul) {
        infer: contrib::fused_matmul, macs: contrib::fused_matmul_macs,
    }
    "GatherBlockQuantized" in "com.microsoft" => GatherBlockQuantized(contrib::BlockGather) {
        infer: contrib::gather_block_quantized, slots: Slots::Table(contrib::BLOCK_GATHER),
    }
    "Gelu" in "com.microsoft" => MsGelu { infer: contrib::like_input }
    "GroupQueryAttention" in "com.microsoft" => GroupQueryAttention(Box<contrib::Heads>) {
        infer: contrib::group_query_attention, macs: contrib::gqa_macs,
        slots: Slots::ConfigFrom(5),
    }
    "MatMulNBits" in "com.microsoft" => MatMulNBits(contrib::NBits) {
        infer: contrib::matmul_nbits, macs: contrib::matmul_nbits_macs, slots: Slots::Table(contrib::NBITS),
    }
    "MultiHeadAttention" in "com.microsoft" => MultiHeadAttention(Box<contrib::Heads>) {
        infer: contrib::multi_head_attention, macs: contrib::mha_macs, slots: Slots::Config(&[4, 8]),
    }
    "QAttention" in "com.microsoft" => QAttention(Box<contrib::Heads>) {
        infer: contrib::attention, macs: contrib::attention_macs, slots: Slots::Table(contrib::QATTENTION),
    }
    "QEmbedLayerNormalization" in "com.microsoft" => QEmbedLayerNormalization {
        infer: contrib::embed_norm, slots: Slots::Table(contrib::QEMBED_LN),
    }
    "QGemm" in "com.microsoft" => QGemm(linalg::Gemm) {
        infer: quant::qgemm, macs: quant::qgemm_macs, slots: Slots::Table(quant::QGEMM),
    }
    "QLinearAdd" in "com.microsoft" => QLinearAdd { infer: quant::qlinear_binary, slots: Slots::Table(quant::QLINEAR_BINARY) }
    "QLinearAveragePool" in "com.microsoft" => QLinearAveragePool(Box<pool::Pool>) { infer: quant::qlinear_pool, slots: Slots::Table(quant::QLINEAR_UNARY) }
    "QLinearConcat" in "com.microsoft" => QLinearConcat(quant::QConcat) { infer: quant::qlinear_concat, slots: Slots::AllConfig }
    "QLinearGlobalAveragePool" in "com.microsoft" => QLinearGlobalAveragePool(quant::QGlobalPool) {
        infer: quant::qlinear_global_pool, slots: Slots::Table(quant::QLINEAR_UNARY),
    }
    "QLinearLeakyRelu" in "com.microsoft" => QLinearLeakyRelu { infer: quant::qlinear_unary, slots: Slots::Table(quant::QLINEAR_UNARY) }
    "QLinearMul" in "com.microsoft" => QLinearMul { infer: quant::qlinear_binary, slots: Slots::Table(quant::QLINEAR_BINARY) }
    "QLinearSigmoid" in "com.microsoft" => QLinearSigmoid { infer: quant::qlinear_unary, slots: Slots::Table(quant::QLINEAR_UNARY) }
    "QLinearSoftmax" in "com.microsoft" => QLinearSoftmax { infer: quant::qlinear_unary, slots: Slots::Table(quant::QLINEAR_UNARY) }
    "QuickGelu" in "com.microsoft" => QuickGelu { infer: contrib::like_input }
    "RotaryEmbedding" in "com.microsoft" => MsRotaryEmbedding(contrib::Rotary) { infer: contrib::like_input, slots: Slots::ConfigFrom(1) }
    "SkipLayerNormalization" in "com.microsoft" => SkipLayerNormalization(contrib::FusedNorm) { infer: contrib::skip_norm, slots: Slots::AffineFrom(2) }
    "SkipSimplifiedLayerNormalization" in "com.microsoft" => SkipSimplifiedLayerNormalization(contrib::FusedNorm) { infer: contrib::skip_norm, slots: Slots::AffineFrom(2) }
}

fn is_default_domain(domain: &str) -> bool {
    domain.is_empty() || domain == "ai.onnx"
}

/// The registered op of a domain and type.
pub fn lookup(domain: &str, op_type: &str) -> Option<&'static OpDef> {
    position(domain, op_type).map(|i| &OPS[usize::from(i)])
}

/// A node's registered op, found by name on the node's first use and by index after
/// ([`Node::resolved`]).
pub fn def_of(node: &Node) -> Option<&'static OpDef> {
    node.resolved
        .get_or_init(|| position(&node.domain, &node.op_type))
        .map(|i| &OPS[usize::from(i)])
}

/// The position in [`OPS`] of a domain and type.
fn position(domain: &str, op_type: &str) -> Option<u16> {
    let domain = if is_default_domain(domain) {
        ""
    } else {
        domain
    };
    // hashed by op type, then the domain among the few that share it: a binary search by
    // string compared names byte by byte, a fifth of the run on graphs of 100,000 nodes
    static BY_TYPE: std::sync::OnceLock<
        std::collections::HashMap<&'static str, Vec<u16>, foldhash::fast::FixedState>,
    > = std::sync::OnceLock::new();
    BY_TYPE
        .get_or_init(|| {
            let mut m: std::collections::HashMap<_, Vec<_>, _> = Default::default();
            for (i, d) in OPS.iter().enumerate() {
                let i = u16::try_from(i).expect("fewer than 65,536 registered ops");
                m.entry(d.name).or_default().push(i);
            }
            m
        })
        .get(op_type)?
        .iter()
        .find(|&&i| OPS[usize::from(i)].domain == domain)
        .copied()
}

/// Parses a node's op once: its registry entry's typed attributes, [`Op::Opaque`] for an op nnlint
/// does not know, [`Op::Malformed`] when its attributes are invalid.
pub fn parse(node: &Node, opset: i64) -> Op {
    match def_of(node) {
        Some(def) => (def.parse)(&node.attrs, opset).unwrap_or_else(Op::Malformed),
        None => Op::Opaque,
    }
}

/// Every node's op, parsed, in node order: collected into what the caller holds them in (an
/// `Arc<[Op]>` is made in place, one allocation: through a `Vec` it was two, and a copy of 4 MB
/// for a graph of 100,000 nodes).
pub fn parse_graph<C: FromIterator<Op>>(graph: &crate::ir::Graph, opset: i64) -> C {
    // a graph repeats a few op types, and a load interns each type's and domain's text once
    // (`Sym`): a node whose type and domain are the very texts of a node before it takes that
    // node's registry position (the lookup by name, a hash and two string compares, was 6% of
    // `mem` on a graph of 10,000 nodes). Texts are told apart by address, so a text interned twice
    // is only looked up twice.
    let mut seen: std::collections::HashMap<
        (usize, usize),
        Option<u16>,
        foldhash::fast::FixedState,
    > = Default::default();
    graph
        .nodes
        .iter()
        .map(|n| {
            n.resolved.get_or_init(|| {
                let key = (
                    n.op_type.as_str().as_ptr() as usize,
                    n.domain.as_str().as_ptr() as usize,
                );
                *seen
                    .entry(key)
                    .or_insert_with(|| position(&n.domain, &n.op_type))
            });
            parse(n, opset)
        })
        .collect()
}

/// Names of every supported op, for documentation.
pub fn supported() -> impl Iterator<Item = &'static str> {
    OPS.iter().map(|d| d.name)
}

/// Reads typed attributes with defaults; every error names the attribute.
pub(crate) struct AttrReader<'a>(pub &'a Attrs);

impl AttrReader<'_> {
    pub fn int(&self, name: &str, default: i64) -> Result<i64, String> {
        self.0.int_or(name, default)
    }

    pub fn int_opt(&self, name: &str) -> Result<Option<i64>, String> {
        self.0.int_opt(name)
    }

    pub fn flag(&self, name: &str, default: bool) -> Result<bool, String> {
        Ok(self.0.int_or(name, i64::from(default))? != 0)
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, String> {
        self.0.float_or(name, default)
    }

    pub fn float_opt(&self, name: &str) -> Result<Option<f32>, String> {
        match self.0.get(name) {
            None => Ok(None),
            Some(_) => self.0.float_or(name, 0.0).map(Some),
        }
    }

    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, String> {
        Ok(self.0.ints_opt(name)?.map(<[i64]>::to_vec))
    }

    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, String> {
        Ok(self.0.floats_opt(name)?.map(<[f32]>::to_vec))
    }

    pub fn string(&self, name: &str) -> Result<Option<String>, String> {
        self.0.string_opt(name)
    }

    pub fn dtype(&self, name: &str) -> Result<Option<DType>, String> {
        self.0.dtype_opt(name)
    }
}

/// Running one node's inference in unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use crate::ir::Attr;

    /// Infers one default-domain node of `op_type` on these input facts (`None` for an omitted
    /// input): its outputs and its MACs.
    pub fn run(
        op_type: &str,
        attrs: Vec<(&str, Attr)>,
        inputs: Vec<Option<Fact>>,
        opset: i64,
    ) -> (InferResult<Vec<Fact>>, Option<Dim>) {
        let ins: Vec<_> = inputs
            .iter()
            .enumerate()
            .map(|(i, f)| f.as_ref().map(|_| i))
            .collect();
        let attrs = Attrs(attrs.into_iter().map(|(k, v)| (k.into(), v)).collect());
        let node = Node::new(
            Default::default(),
            op_type.into(),
            "".into(),
            &ins,
            &[Some(100)],
            attrs,
        );
        let op = parse(&node, opset);
        let def = lookup("", op_type).expect("a registered op");
        let cx = OpCx {
            node: &node,
            name: "n",
            op: &op,
            inputs: inputs.iter().map(Option::as_ref).collect(),
            opset,
        };
        let out = (def.infer)(&cx);
        let macs = out.as_ref().ok().and_then(|o| (def.macs)(&cx, o));
        (out, macs)
    }

    /// A float tensor of known dims.
    pub fn f32s(dims: &[i64]) -> Option<Fact> {
        Some(Fact::new(
            Some(DType::F32),
            dims.iter().map(|&d| Dim::known(d)).collect(),
        ))
    }

    /// An int64 tensor holding these values.
    pub fn i64s(values: &[i64]) -> Option<Fact> {
        Some(
            Fact::new(Some(DType::I64), vec![Dim::known(values.len() as i64)])
                .with_value(Konst::Int(values.iter().map(|&v| Dim::known(v)).collect())),
        )
    }

    /// The outputs' shapes as text.
    pub fn shapes(out: &InferResult<Vec<Fact>>) -> Vec<String> {
        match out {
            Ok(facts) => facts
                .iter()
                .map(|f| {
                    f.shape
                        .as_deref()
                        .map_or("?".into(), crate::ir::shape_to_string)
                })
                .collect(),
            Err(e) => vec![format!("{e:?}")],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ops that can carry a gradient and whose line does not say what they save: most keep
    /// nothing for backward (additions, views, casts, sums, resizing); LRN,
    /// MeanVarianceNormalization and the fused contrib ops (GELUs, skip norms, FusedMatMul,
    /// RotaryEmbedding, attention) do and are a known gap, counted as 0 B. A new op is not added
    /// here: its line states `saves:` (`sv::nothing` when autograd keeps nothing), so that a
    /// forgotten fact fails this test instead of counting 0 B.
    const SAVES_LEFT_UNSTATED: &[&str] = &[
        "Add",
        "AffineGrid",
        "BitShift",
        "Cast",
        "CastLike",
        "CenterCropPad",
        "Col2Im",
        "Concat",
        "ConcatFromSequence",
        "Constant",
        "ConvInteger",
        "CumSum",
        "DFT",
        "DepthToSpace",
        "DequantizeLinear",
        "DynamicQuantizeLinear",
        "Expand",
        "EyeLike",
        "Flatten",
        "GlobalAveragePool",
        "Hardmax",
        "Identity",
        "If",
        "LinearAttention",
        "Loop",
        "MatMulInteger",
        "Mean",
        "Mod",
        "Neg",
        "Optional",
        "OptionalGetElement",
        "QLinearConv",
        "QLinearMatMul",
        "QuantizeLinear",
        "ReduceLogSum",
        "ReduceMean",
        "ReduceSum",
        "Reshape",
        "Resize",
        "ReverseSequence",
        "STFT",
        "Scan",
        "SequenceAt",
        "SequenceConstruct",
        "SequenceEmpty",
        "SequenceErase",
        "SequenceInsert",
        "SequenceMap",
        "Slice",
        "SpaceToDepth",
        "Split",
        "SplitToSequence",
        "Squeeze",
        "Sub",
        "Sum",
        "TensorScatter",
        "Tile",
        "Transpose",
        "Trilu",
        "Unsqueeze",
        "Upsample",
        // onnxruntime's contrib ops (inference graphs; the export check says so for training)
        "Attention",
        "BiasAdd",
        "BiasGelu",
        "DynamicQuantizeLSTM",
        "EmbedLayerNormalization",
        "FastGelu",
        "FusedMatMul",
        "GatherBlockQuantized",
        "Gelu",
        "GroupQueryAttention",
        "MatMulNBits",
        "MultiHeadAttention",
        "QAttention",
        "QEmbedLayerNormalization",
        "QGemm",
        "QLinearAdd",
        "QLinearAveragePool",
        "QLinearConcat",
        "QLinearGlobalAveragePool",
        "QLinearLeakyRelu",
        "QLinearMul",
        "QLinearSigmoid",
        "QLinearSoftmax",
        "QuickGelu",
        "RotaryEmbedding",
        "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization",
    ];

    #[test]
    fn every_new_op_states_what_it_saves() {
        let unstated: Vec<&str> = OPS
            .iter()
            .filter(|d| d.grad && !d.states_saves())
            .map(|d| d.name)
            .filter(|n| !SAVES_LEFT_UNSTATED.contains(n))
            .collect();
        assert!(
            unstated.is_empty(),
            "state what autograd saves for {unstated:?} (`saves: sv::nothing` when it keeps nothing)"
        );
    }

    #[test]
    fn registry_is_sorted_and_unique() {
        for w in OPS.windows(2) {
            assert!(
                (w[0].domain, w[0].name) < (w[1].domain, w[1].name),
                "{} before {}",
                w[0].name,
                w[1].name
            );
        }
    }

    #[test]
    fn every_norm_with_a_scale_says_which_slots_are_per_layer() {
        // a norm whose scale and bias are not marked Affine would have its shared fresh weights
        // (one stored tensor of ones for every layer) counted once: a silent undercount
        let without_scale = ["LpNormalization", "MeanVarianceNormalization"];
        for d in OPS.iter().filter(|d| d.name.ends_with("Normalization")) {
            if without_scale.contains(&d.name) {
                continue;
            }
            assert!(
                // (a quantized norm's scale is a quantized weight, never stored shared)
                (1..20).any(|slot| matches!(
                    d.slots.role(slot),
                    SlotRole::Affine | SlotRole::QuantWeight
                )),
                "{} {}: which inputs are its per-layer scale and bias? (Slots::AffineFrom)",
                d.domain,
                d.name
            );
        }
    }

    /// Whether an op can have MACs comes from its line (a `macs:` cost function), not from
    /// comparing function addresses, which codegen does not keep unique: the same build once
    /// gave an elementwise `Mul` whose input shape is unknown 0 MACs, and after an unrelated
    /// change "unknown".
    #[test]
    fn which_ops_count_macs_is_read_off_their_lines() {
        let counted = ["Conv", "MatMul", "Gemm", "Einsum"];
        let not_counted = ["Mul", "Relu", "Reshape", "Constant"];
        for op in counted {
            assert!(lookup("", op).unwrap().counts_macs(), "{op}");
        }
        for op in not_counted {
            assert!(!lookup("", op).unwrap().counts_macs(), "{op}");
        }
        let fused = lookup("com.microsoft", "FusedMatMul").unwrap();
        assert!(fused.counts_macs());
    }

    #[test]
    fn every_op_names_its_own_entry() {
        for def in OPS {
            let (op, domain) = (def.name.into(), def.domain.into());
            let node = Node::new(Default::default(), op, domain, &[], &[], Attrs::default());
            match parse(&node, 21) {
                // a required attribute is missing: the parse says which
                Op::Malformed(why) => assert!(why.contains("attribute"), "{}: {why}", def.name),
                op => {
                    assert_eq!(op.name(), Some(def.name));
                    // found by position, the same entry as found by name
                    assert!(std::ptr::eq(op.def().unwrap(), def), "{}", def.name);
                }
            }
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
#[cfg(test)]
mod size_tests {
    /// A graph of 100,000 nodes holds a parsed op per node and a `Dim` per dimension of every
    /// value's shape: large attribute sets are boxed (`impl FromAttrs for Box<T>`) and a `Dim` is
    /// one word (a symbolic one behind it).
    #[test]
    fn a_parsed_op_and_a_dim_stay_small() {
        assert!(
            std::mem::size_of::<super::Op>() <= 40,
            "{}",
            std::mem::size_of::<super::Op>()
        );
        assert_eq!(std::mem::size_of::<crate::ir::Dim>(), 8);
        // and so is a value's fact: its folded contents, which most values lack, are boxed, its
        // shape a boxed slice
        assert!(std::mem::size_of::<crate::analysis::fact::Fact>() <= 32);
        // a row per node: its op the node's interned text, its rare branch label boxed
        let row = std::mem::size_of::<crate::analysis::Layer>();
        assert!(row <= 184, "{row}");
    }
}
