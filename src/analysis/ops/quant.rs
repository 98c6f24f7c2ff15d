//! Quantized ops: the default domain's (`DynamicQuantizeLinear`, `ConvInteger`, `MatMulInteger`,
//! `QLinearConv`, `QLinearMatMul`) and onnxruntime's QOperator contrib ops (`QLinearAdd`,
//! `QLinearMul`, `QLinearConcat`, `QLinearGlobalAveragePool`, `QLinearSigmoid`,
//! `QLinearLeakyRelu`, `QLinearSoftmax`, `QGemm`, `DynamicQuantizeLSTM`). Shapes follow the float
//! op each one quantizes; MACs are counted as its float twin's (integer multiply-accumulates). Their
//! stored integer weights are parameters (the registry's slot roles say which inputs), their
//! scales and zero points buffers.
//!
//! Specs: onnx.ai/onnx/operators, and onnxruntime's docs/ContribOperators.md for `com.microsoft`.

use super::conv::{conv_at, conv_macs_at, Conv};
use super::linalg::{gemm_dims_at, matmul_dims_of, Gemm, Rnn};
use super::{
    attrs, broadcast, invalid, AttrReader, FromAttrs, InferError, InferResult, OpCx, SlotRole,
};
use crate::analysis::fact::Fact;
use crate::ir::{Attrs, DType, Dim};

use SlotRole::{Data as D, QuantParam as Q, QuantWeight as W};

/// `QLinearConv`: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B (int32 bias).
pub const QLINEAR_CONV: &[SlotRole] = &[D, Q, Q, W, Q, Q, Q, Q, W];
/// `QLinearMatMul`: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp.
pub const QLINEAR_MATMUL: &[SlotRole] = &[D, Q, Q, W, Q, Q, Q, Q];
/// `ConvInteger` / `MatMulInteger`: x, w, x_zp, w_zp.
pub const INTEGER: &[SlotRole] = &[D, W, Q, Q];
/// `DequantizeLinear`: a stored x is a quantized weight; scale, zero point.
pub const DEQUANTIZE: &[SlotRole] = &[W, Q, Q];
/// `QuantizeLinear`: x, scale, zero point.
pub const QUANTIZE: &[SlotRole] = &[D, Q, Q];
/// Binary QOperator ops: A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp.
pub const QLINEAR_BINARY: &[SlotRole] = &[D, Q, Q, D, Q, Q, Q, Q];
/// Unary QOperator ops: X, X_scale, X_zp, Y_scale, Y_zp.
pub const QLINEAR_UNARY: &[SlotRole] = &[D, Q, Q, Q, Q];
/// `QGemm`: A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp.
pub const QGEMM: &[SlotRole] = &[D, Q, Q, W, Q, Q, W, Q, Q];
/// `DynamicQuantizeLSTM`: X, W, R, B, sequence_lens, initial_h, initial_c, P, W_scale, W_zp,
/// R_scale, R_zp.
pub const DQ_LSTM: &[SlotRole] = &[D, W, W, D, D, D, D, D, Q, Q, Q, Q];

/// The output type of a QOperator op: its output zero point's, else uint8.
fn zp_type(cx: &OpCx, slot: usize) -> Option<DType> {
    cx.dtype(slot).or(Some(DType::U8))
}

/// `DynamicQuantizeLinear`: uint8 y like x, and scalar scale (float) and zero point (uint8).
pub fn dynamic_quantize(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    Ok(vec![
        Fact {
            dtype: Some(DType::U8),
            shape: x.shape.clone(),
            value: None,
        },
        Fact::new(Some(DType::F32), vec![]),
        Fact::new(Some(DType::U8), vec![]),
    ])
}

/// `ConvInteger`: int32, shaped like `Conv` of x (0) and w (1).
pub fn conv_integer(cx: &OpCx) -> InferResult<Vec<Fact>> {
    conv_at(cx, attrs!(cx, ConvInteger), 0, 1, Some(DType::I32))
}

pub fn conv_integer_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    conv_macs_at(cx, out, 1)
}

/// `QLinearConv`: x at 0, w at 3, typed like y's zero point (7).
pub fn qlinear_conv(cx: &OpCx) -> InferResult<Vec<Fact>> {
    conv_at(cx, attrs!(cx, QLinearConv), 0, 3, zp_type(cx, 7))
}

pub fn qlinear_conv_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    conv_macs_at(cx, out, 3)
}

/// `MatMulInteger`: int32, shaped like `MatMul` of a (0) and b (1).
pub fn matmul_integer(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let d = matmul_dims_of(cx.shape(0)?, cx.shape(1)?)?;
    Ok(vec![Fact::new(Some(DType::I32), d.out)])
}

pub fn matmul_integer_macs(cx: &OpCx, _: &[Fact]) -> Option<Dim> {
    matmul_dims_of(cx.shape(0).ok()?, cx.shape(1).ok()?)
        .ok()?
        .macs()
}

/// `QLinearMatMul`: a at 0, b at 3, typed like y's zero point (7).
pub fn qlinear_matmul(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let d = matmul_dims_of(cx.shape(0)?, cx.shape(3)?)?;
    Ok(vec![Fact::new(zp_type(cx, 7), d.out)])
}

pub fn qlinear_matmul_macs(cx: &OpCx, _: &[Fact]) -> Option<Dim> {
    matmul_dims_of(cx.shape(0).ok()?, cx.shape(3).ok()?)
        .ok()?
        .macs()
}

/// `QLinearAdd`, `QLinearMul`: A (0) and B (3) broadcast, typed like A.
pub fn qlinear_binary(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let out = broadcast(&[cx.shape(0)?, cx.shape(3)?])?;
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `QLinearSigmoid`, `QLinearLeakyRelu`, `QLinearSoftmax`: like X.
pub fn qlinear_unary(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: x.shape.clone(),
        value: None,
    }])
}

/// `QLinearGlobalAveragePool`: N, C and ones (channels first), or N, ones, C (`channels_last`).
pub fn qlinear_global_pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let last = attrs!(cx, QLinearGlobalAveragePool).channels_last;
    let x = cx.shape(0)?;
    if x.len() < 3 {
        return invalid(format!("input has rank {}, expected at least 3", x.len()));
    }
    let one = Dim::known(1);
    let out: Vec<Dim> = if last {
        std::iter::once(x[0].clone())
            .chain(std::iter::repeat_n(one, x.len() - 2))
            .chain(std::iter::once(x[x.len() - 1].clone()))
            .collect()
    } else {
        x[..2]
            .iter()
            .cloned()
            .chain(std::iter::repeat_n(one, x.len() - 2))
            .collect()
    };
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `QLinearConcat`: Y_scale, Y_zp, then (tensor, scale, zero point) per input.
pub fn qlinear_concat(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let axis = attrs!(cx, QLinearConcat).axis;
    let shapes: Vec<&[Dim]> = (2..cx.n_inputs())
        .step_by(3)
        .map(|i| cx.shape(i))
        .collect::<InferResult<_>>()?;
    let first = shapes
        .first()
        .ok_or_else(|| InferError::Invalid("no tensors to concatenate".into()))?;
    let a = super::axis(axis, first.len())?;
    let mut out = first.to_vec();
    out[a] = super::ovf(Dim::sum(shapes.iter().map(|s| &s[a])), "concatenated size")?;
    Ok(vec![Fact::new(cx.dtype(2).or(cx.dtype(1)), out)])
}

/// `QGemm`: A (0) and B (3) as `Gemm` with `transA`/`transB`; typed like y's zero point when
/// the output is quantized (`y_scale` given), float otherwise.
pub fn qgemm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let g = attrs!(cx, QGemm);
    let (m, _, n) = gemm_dims_at(cx, g, 0, 3)?;
    let dtype = if cx.opt_input(7).is_some() {
        zp_type(cx, 8)
    } else {
        Some(DType::F32)
    };
    Ok(vec![Fact::new(dtype, vec![m, n])])
}

pub fn qgemm_macs(cx: &OpCx, _: &[Fact]) -> Option<Dim> {
    let super::Op::QGemm(g) = cx.op else {
        return None;
    };
    let (m, k, n) = gemm_dims_at(cx, g, 0, 3).ok()?;
    Dim::product(&[m, k, n])
}

/// `QLinearGlobalAveragePool`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct QGlobalPool {
    pub channels_last: bool,
}

impl FromAttrs for QGlobalPool {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(QGlobalPool {
            channels_last: AttrReader(a).flag("channels_last", false)?,
        })
    }
}

/// `QLinearConcat`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct QConcat {
    pub axis: i64,
}

impl FromAttrs for QConcat {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(QConcat {
            axis: AttrReader(a)
                .int_opt("axis")?
                .ok_or("attribute 'axis' is required")?,
        })
    }
}

/// `DynamicQuantizeLSTM`: an LSTM whose W is `[dirs, input, 4·hidden]` (transposed) int8.
pub fn dq_lstm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let r: &Rnn = attrs!(cx, DynamicQuantizeLstm);
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    if x.len() != 3 || w.len() != 3 {
        return invalid("X and W must have rank 3");
    }
    let (seq, batch) = if r.batch_first {
        (&x[1], &x[0])
    } else {
        (&x[0], &x[1])
    };
    let hidden = match r.hidden_size {
        Some(h) => Dim::known(h),
        None => w[2].floor_div(4).ok_or(InferError::Unknown)?,
    };
    let dirs = w[0].clone();
    let t = cx.dtype(0).or(Some(DType::F32));
    let y = if r.batch_first {
        vec![batch.clone(), seq.clone(), dirs.clone(), hidden.clone()]
    } else {
        vec![seq.clone(), dirs.clone(), batch.clone(), hidden.clone()]
    };
    let h = if r.batch_first {
        vec![batch.clone(), dirs.clone(), hidden.clone()]
    } else {
        vec![dirs.clone(), batch.clone(), hidden.clone()]
    };
    Ok(vec![
        Fact::new(t, y),
        Fact::new(t, h.clone()),
        Fact::new(t, h),
    ])
}

pub fn dq_lstm_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let x = cx.shape(0).ok()?;
    let w = cx.shape(1).ok()?;
    let y = out.first()?.shape.as_ref()?;
    let hidden = y.last()?.clone();
    // per step, direction and sample: 4 gates × hidden × (input + hidden)
    let steps = x.first()?.checked_mul(x.get(1)?)?;
    let width = x.get(2)?.checked_add(&hidden)?;
    Dim::product(&[steps, w[0].clone(), Dim::known(4), hidden, width])
}

/// The conv attributes of a quantized convolution.
pub fn qconv_of(op: &super::Op) -> Option<&Conv> {
    match op {
        super::Op::QLinearConv(c) | super::Op::ConvInteger(c) => Some(c),
        _ => None,
    }
}

/// The gemm attributes of `QGemm`.
pub fn qgemm_of(op: &super::Op) -> Option<&Gemm> {
    match op {
        super::Op::QGemm(g) => Some(g),
        _ => None,
    }
}

/// `QLinearAveragePool`: an `AveragePool` of X, typed like X.
pub fn qlinear_pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let p = attrs!(cx, QLinearAveragePool);
    let x = cx.shape(0)?;
    if x.len() < 3 {
        return invalid(format!("input has rank {}, expected at least 3", x.len()));
    }
    let win = p.window(x.len() - 2)?;
    let mut out = vec![x[0].clone(), x[1].clone()];
    for (i, d) in x[2..].iter().enumerate() {
        out.push(win.out_dim(i, d)?);
    }
    Ok(vec![Fact::new(cx.dtype(0), out)])
}
