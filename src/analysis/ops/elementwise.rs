//! Element-wise ops: activations, arithmetic with broadcasting, comparisons, casts. They cost no
//! multiply-accumulates in nnlint's count (they are bandwidth-bound); arithmetic on small integer
//! tensors is folded so that shape computations resolve.

use super::{
    attrs, broadcast, invalid, same_as_input, AttrReader, FromAttrs, InferError, InferResult, Op,
    OpCx,
};
use crate::analysis::fact::{Fact, Konst, MAX_FOLD_ELEMS};
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{Attrs, DType, Dim};

/// `Cast`'s target type.
#[derive(Clone, Debug, PartialEq)]
pub struct Cast {
    pub to: DType,
}

impl FromAttrs for Cast {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Cast {
            to: AttrReader(a)
                .dtype("to")?
                .ok_or("attribute 'to' is required")?,
        })
    }
}

/// `Clip`'s bounds as attributes (before opset 11 made them inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct Clip {
    pub min: Option<f32>,
    pub max: Option<f32>,
}

impl FromAttrs for Clip {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Clip {
            min: r.float_opt("min")?,
            max: r.float_opt("max")?,
        })
    }
}

/// `Dropout`'s ratio as an attribute (before opset 12 made it an input).
#[derive(Clone, Debug, PartialEq)]
pub struct Dropout {
    pub ratio: Option<f32>,
}

impl FromAttrs for Dropout {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Dropout {
            ratio: AttrReader(a).float_opt("ratio")?,
        })
    }
}

crate::named_enum! {
    /// `Gelu`'s approximation.
    pub enum GeluApproximation {
        /// The exact form with `erf`.
        None = "none",
        /// The tanh approximation.
        Tanh = "tanh",
    }
}

/// `Gelu`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Gelu {
    pub approximate: GeluApproximation,
}

impl FromAttrs for Gelu {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let approximate = match AttrReader(a).string("approximate")? {
            None => GeluApproximation::None,
            Some(s) => s
                .parse()
                .map_err(|e| format!("attribute 'approximate': {e}"))?,
        };
        Ok(Gelu { approximate })
    }
}

/// `HardSigmoid`'s `max(0, min(1, alpha·x + beta))`.
#[derive(Clone, Debug, PartialEq)]
pub struct HardSigmoid {
    pub alpha: f32,
    pub beta: f32,
}

impl FromAttrs for HardSigmoid {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(HardSigmoid {
            alpha: r.float("alpha", 0.2)?,
            beta: r.float("beta", 0.5)?,
        })
    }
}

/// `LeakyRelu`'s slope.
#[derive(Clone, Debug, PartialEq)]
pub struct LeakyRelu {
    pub alpha: f32,
}

impl FromAttrs for LeakyRelu {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(LeakyRelu {
            alpha: AttrReader(a).float("alpha", 0.01)?,
        })
    }
}

/// The axis of `Softmax`, `LogSoftmax` and `Hardmax`: -1 from opset 13, 1 before (when the op
/// flattened the input from that axis on).
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    pub axis: i64,
    /// Before opset 13 the op coerces the input to 2-D at `axis`.
    pub coerce_2d: bool,
}

impl FromAttrs for Softmax {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let legacy = opset < 13;
        Ok(Softmax {
            axis: AttrReader(a).int("axis", if legacy { 1 } else { -1 })?,
            coerce_2d: legacy,
        })
    }
}

/// `QuantizeLinear`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantize {
    pub output_dtype: Option<DType>,
    /// The axis of a per-axis or blocked scale (opset 13 on).
    pub axis: i64,
    /// The block length along `axis` of a blocked scale (opset 21 on); 0 when not blocked.
    pub block_size: i64,
    /// Float 8 outputs: saturate to the largest finite value (opset 19 on).
    pub saturate: bool,
}

impl FromAttrs for Quantize {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Quantize {
            output_dtype: r.dtype("output_dtype")?,
            axis: r.int("axis", 1)?,
            block_size: r.int("block_size", 0)?,
            saturate: r.flag("saturate", true)?,
        })
    }
}

/// `DequantizeLinear`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Dequantize {
    /// The axis of a per-axis or blocked scale (opset 13 on).
    pub axis: i64,
    /// The block length along `axis` of a blocked scale (opset 21 on); 0 when not blocked.
    pub block_size: i64,
}

impl FromAttrs for Dequantize {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Dequantize {
            axis: r.int("axis", 1)?,
            block_size: r.int("block_size", 0)?,
        })
    }
}

/// The `alpha` of `Elu`, `Celu` and `ThresholdedRelu` (1.0 for each).
#[derive(Clone, Debug, PartialEq)]
pub struct Alpha {
    pub alpha: f32,
}

impl FromAttrs for Alpha {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Alpha {
            alpha: AttrReader(a).float("alpha", 1.0)?,
        })
    }
}

/// `Selu`'s attributes: `gamma · (x > 0 ? x : alpha · (eˣ - 1))`.
#[derive(Clone, Debug, PartialEq)]
pub struct Selu {
    pub alpha: f32,
    pub gamma: f32,
}

impl FromAttrs for Selu {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Selu {
            alpha: r.float("alpha", 1.673_263_2)?,
            gamma: r.float("gamma", 1.050_701)?,
        })
    }
}

/// `Shrink`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Shrink {
    pub bias: f32,
    pub lambd: f32,
}

impl FromAttrs for Shrink {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Shrink {
            bias: r.float("bias", 0.0)?,
            lambd: r.float("lambd", 0.5)?,
        })
    }
}

/// `Mod`'s attribute: `fmod = 1` takes the dividend's sign (C's `fmod`), 0 the divisor's.
#[derive(Clone, Debug, PartialEq)]
pub struct Mod {
    pub fmod: bool,
}

impl FromAttrs for Mod {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Mod {
            fmod: AttrReader(a).flag("fmod", false)?,
        })
    }
}

/// `Trilu`'s attribute: keep the upper triangle (the default) or the lower one.
#[derive(Clone, Debug, PartialEq)]
pub struct Trilu {
    pub upper: bool,
}

impl FromAttrs for Trilu {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Trilu {
            upper: AttrReader(a).flag("upper", true)?,
        })
    }
}

/// `EyeLike`'s attributes: the diagonal `k` and the output type (the input's by default).
#[derive(Clone, Debug, PartialEq)]
pub struct EyeLike {
    pub k: i64,
    pub dtype: Option<DType>,
}

impl FromAttrs for EyeLike {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(EyeLike {
            k: r.int("k", 0)?,
            dtype: r.dtype("dtype")?,
        })
    }
}

/// Element-wise arithmetic that folds on small integer and float tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Pow,
    Max,
    Min,
    Sum,
}

fn arith_of(op: &Op) -> Option<Arith> {
    Some(match op {
        Op::Add => Arith::Add,
        Op::Sub => Arith::Sub,
        Op::Mul => Arith::Mul,
        Op::Div => Arith::Div,
        Op::Mod(_) => Arith::Mod,
        Op::Pow => Arith::Pow,
        Op::Max => Arith::Max,
        Op::Min => Arith::Min,
        Op::Sum => Arith::Sum,
        _ => return None,
    })
}

pub fn unary(cx: &OpCx) -> InferResult<Vec<Fact>> {
    same_as_input(cx)
}

pub fn identity(cx: &OpCx) -> InferResult<Vec<Fact>> {
    Ok(vec![cx.input(0)?.clone()])
}

/// Unary ops that matter in shape arithmetic (`Neg`, `Floor`, `Ceil`, `Round`, `Sqrt`, `Sign`).
pub fn unary_fold(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let mut out = same_as_input(cx)?;
    if let Some(v) = &cx.input(0)?.value {
        out[0].value = fold_unary(cx.op, v).map(Box::new);
    }
    Ok(out)
}

fn fold_unary(op: &Op, v: &Konst) -> Option<Konst> {
    match v {
        Konst::Int(d) => Some(Konst::Int(match op {
            Op::Neg => d.iter().map(Dim::checked_neg).collect::<Option<_>>()?,
            Op::Floor | Op::Ceil | Op::Round => d.clone(),
            Op::Sign => d
                .iter()
                .map(|x| x.as_i64().map(|x| Dim::known(x.signum())))
                .collect::<Option<_>>()?,
            _ => return None,
        })),
        Konst::Float(f) => {
            let g: fn(f64) -> f64 = match op {
                Op::Neg => |x| -x,
                Op::Floor => f64::floor,
                Op::Ceil => f64::ceil,
                Op::Round => f64::round_ties_even,
                Op::Sqrt => f64::sqrt,
                Op::Sign => |x: f64| if x == 0.0 { 0.0 } else { x.signum() },
                _ => return None,
            };
            Some(Konst::Float(f.iter().map(|&x| g(x)).collect()))
        }
    }
}

/// Flat input index for each output element under broadcasting (shapes fully known and small).
fn broadcast_indices(out: &[u64], inp: &[u64]) -> Option<Vec<usize>> {
    let n: u64 = out.iter().product();
    if n > MAX_FOLD_ELEMS {
        return None;
    }
    let rank = out.len();
    let off = rank.checked_sub(inp.len())?;
    let mut strides = vec![0usize; rank];
    let mut s = 1usize;
    for i in (0..inp.len()).rev() {
        strides[i + off] = if inp[i] == 1 { 0 } else { s };
        s = s.checked_mul(usize::try_from(inp[i]).ok()?)?;
    }
    let mut idx = Vec::with_capacity(n as usize);
    let mut coord = vec![0u64; rank];
    for _ in 0..n {
        idx.push(
            coord
                .iter()
                .zip(&strides)
                .map(|(&c, &st)| c as usize * st)
                .sum(),
        );
        for ax in (0..rank).rev() {
            coord[ax] += 1;
            if coord[ax] < out[ax] {
                break;
            }
            coord[ax] = 0;
        }
    }
    Some(idx)
}

/// Folds an element-wise op over broadcast inputs, when every input's value and shape is known.
fn fold_broadcast(
    inputs: &[&Fact],
    out_shape: &[Dim],
    f: impl Fn(&[&Konst], &[usize]) -> Option<Konst>,
) -> Option<Konst> {
    let out: Vec<u64> = out_shape.iter().map(Dim::as_u64).collect::<Option<_>>()?;
    let values: Vec<&Konst> = inputs
        .iter()
        .map(|f| f.value.as_deref())
        .collect::<Option<_>>()?;
    let maps: Vec<Vec<usize>> = inputs
        .iter()
        .map(|f| broadcast_indices(&out, &f.known_shape()?))
        .collect::<Option<_>>()?;
    let n = maps.first()?.len();
    let mut results: Vec<Konst> = Vec::with_capacity(n);
    for e in 0..n {
        let picked: Vec<usize> = maps.iter().map(|m| m[e]).collect();
        results.push(f(&values, &picked)?);
    }
    concat_scalars(results)
}

fn concat_scalars(parts: Vec<Konst>) -> Option<Konst> {
    let mut ints = Vec::new();
    let mut floats = Vec::new();
    for p in parts {
        match p {
            Konst::Int(mut v) => ints.append(&mut v),
            Konst::Float(mut v) => floats.append(&mut v),
        }
    }
    match (ints.is_empty(), floats.is_empty()) {
        (_, true) => Some(Konst::Int(ints)),
        (true, false) => Some(Konst::Float(floats)),
        _ => None,
    }
}

fn int_at(k: &Konst, i: usize) -> Option<Dim> {
    match k {
        Konst::Int(v) => v.get(i).cloned(),
        Konst::Float(_) => None,
    }
}

fn float_at(k: &Konst, i: usize) -> Option<f64> {
    match k {
        Konst::Int(v) => v.get(i)?.as_i64().map(|x| x as f64),
        Konst::Float(v) => v.get(i).copied(),
    }
}

fn arith_int(op: Arith, a: &Dim, b: &Dim) -> Option<Dim> {
    match op {
        Arith::Add | Arith::Sum => a.checked_add(b),
        Arith::Sub => a.checked_sub(b),
        Arith::Mul => a.checked_mul(b),
        Arith::Div => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) if y != 0 => Some(Dim::known(x.checked_div(y)?)),
            (None, Some(y)) if y > 0 => a.div_exact(b).or_else(|| a.floor_div(y)),
            _ => a.div_exact(b),
        },
        Arith::Mod => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) if y != 0 => Some(Dim::known(x.checked_rem(y)?)),
            _ => None,
        },
        Arith::Pow => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) if (0..64).contains(&y) => {
                Some(Dim::known(x.checked_pow(y as u32)?))
            }
            _ => None,
        },
        Arith::Max | Arith::Min => {
            let (x, y) = (a.as_i64()?, b.as_i64()?);
            Some(Dim::known(if op == Arith::Max {
                x.max(y)
            } else {
                x.min(y)
            }))
        }
    }
}

fn arith_float(op: Arith, x: f64, y: f64) -> f64 {
    match op {
        Arith::Add | Arith::Sum => x + y,
        Arith::Sub => x - y,
        Arith::Mul => x * y,
        Arith::Div => x / y,
        Arith::Pow => x.powf(y),
        Arith::Max => x.max(y),
        Arith::Min => x.min(y),
        Arith::Mod => x % y,
    }
}

fn fold_arith(op: Arith, vals: &[&Konst], idx: &[usize]) -> Option<Konst> {
    let all_int = vals.iter().all(|v| matches!(v, Konst::Int(_)));
    if all_int {
        let mut acc = int_at(vals[0], idx[0])?;
        for (v, &i) in vals.iter().zip(idx).skip(1) {
            acc = arith_int(op, &acc, &int_at(v, i)?)?;
        }
        Some(Konst::Int(vec![acc]))
    } else {
        let mut acc = float_at(vals[0], idx[0])?;
        for (v, &i) in vals.iter().zip(idx).skip(1) {
            acc = arith_float(op, acc, float_at(v, i)?);
        }
        Some(Konst::Float(vec![acc]))
    }
}

/// The inputs (at least `min`, all present) and their broadcast shape.
fn broadcast_inputs<'a>(cx: &'a OpCx, min: usize) -> InferResult<(Vec<&'a Fact>, Vec<Dim>)> {
    if cx.n_inputs() < min {
        return invalid(format!(
            "expects at least {min} inputs, has {}",
            cx.n_inputs()
        ));
    }
    let facts: Vec<&Fact> = (0..cx.n_inputs())
        .map(|i| cx.input(i))
        .collect::<InferResult<_>>()?;
    let shapes: Vec<&[Dim]> = facts
        .iter()
        .map(|f| f.shape.as_deref().ok_or(InferError::Unknown))
        .collect::<InferResult<_>>()?;
    let out = broadcast(&shapes)?;
    Ok((facts, out))
}

/// `Add`, `Sub`, `Mul`, `Div`, `Pow`, `Mod`, `BitShift`: broadcast, type of the first input.
pub fn binary_arith(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (facts, shape) = broadcast_inputs(cx, 2)?;
    let dtype = facts[0].dtype.or(facts.get(1).and_then(|f| f.dtype));
    let value =
        arith_of(cx.op).and_then(|op| fold_broadcast(&facts, &shape, |v, i| fold_arith(op, v, i)));
    Ok(vec![Fact {
        dtype,
        shape: Some(shape.into()),
        value: value.map(Box::new),
    }])
}

/// `Max`, `Min`, `Sum`, `Mean` over any number of inputs.
pub fn variadic(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (facts, shape) = broadcast_inputs(cx, 1)?;
    let dtype = facts.iter().find_map(|f| f.dtype);
    let value =
        arith_of(cx.op).and_then(|op| fold_broadcast(&facts, &shape, |v, i| fold_arith(op, v, i)));
    Ok(vec![Fact {
        dtype,
        shape: Some(shape.into()),
        value: value.map(Box::new),
    }])
}

pub fn compare(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (facts, shape) = broadcast_inputs(cx, 2)?;
    let op = cx.op;
    let value = fold_broadcast(&facts, &shape, |v, i| {
        let r = match (int_at(v[0], i[0]), int_at(v[1], i[1])) {
            (Some(a), Some(b)) if matches!(op, Op::Equal) && a == b => true,
            (Some(a), Some(b)) => {
                let (x, y) = (a.as_i64()?, b.as_i64()?);
                cmp(op, x as f64, y as f64)?
            }
            _ => cmp(op, float_at(v[0], i[0])?, float_at(v[1], i[1])?)?,
        };
        Some(Konst::Int(vec![Dim::known(r as i64)]))
    });
    Ok(vec![Fact {
        dtype: Some(DType::Bool),
        shape: Some(shape.into()),
        value: value.map(Box::new),
    }])
}

fn cmp(op: &Op, x: f64, y: f64) -> Option<bool> {
    Some(match op {
        Op::Equal => x == y,
        Op::Less => x < y,
        Op::LessOrEqual => x <= y,
        Op::Greater => x > y,
        Op::GreaterOrEqual => x >= y,
        _ => return None,
    })
}

pub fn logical(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (facts, shape) = broadcast_inputs(cx, 2)?;
    let op = cx.op;
    let value = fold_broadcast(&facts, &shape, |v, i| {
        let a = int_at(v[0], i[0])?.as_i64()? != 0;
        let b = int_at(v[1], i[1])?.as_i64()? != 0;
        let r = match op {
            Op::And => a && b,
            Op::Or => a || b,
            Op::Xor => a != b,
            _ => return None,
        };
        Some(Konst::Int(vec![Dim::known(r as i64)]))
    });
    Ok(vec![Fact {
        dtype: Some(DType::Bool),
        shape: Some(shape.into()),
        value: value.map(Box::new),
    }])
}

/// `CumSum`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct CumSum {
    pub exclusive: bool,
    pub reverse: bool,
}

impl FromAttrs for CumSum {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(CumSum {
            exclusive: r.flag("exclusive", false)?,
            reverse: r.flag("reverse", false)?,
        })
    }
}

/// `CumSum`: the input's shape; a known value is summed along the axis (position ids are
/// `CumSum` of a mask in some exports).
pub fn cum_sum(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let c = attrs!(cx, CumSum);
    let mut out = same_as_input(cx)?;
    let x = cx.input(0)?;
    out[0].value = (|| {
        let shape = x.known_shape()?;
        let a = super::axis(*cx.ints(1).ok()?.first()?, shape.len()).ok()?;
        let v = x.value.as_deref()?;
        let inner: u64 = shape[a + 1..].iter().product();
        let n = shape[a];
        let outer: u64 = shape[..a].iter().product();
        let at = |o: u64, k: u64, j: u64| ((o * n + k) * inner + j) as usize;
        match v {
            Konst::Int(d) => {
                let mut r = d.clone();
                for o in 0..outer {
                    for j in 0..inner {
                        let mut acc = Dim::ZERO;
                        for step in 0..n {
                            let k = if c.reverse { n - 1 - step } else { step };
                            let here = d.get(at(o, k, j))?.clone();
                            if c.exclusive {
                                r[at(o, k, j)] = acc.clone();
                                acc = acc.checked_add(&here)?;
                            } else {
                                acc = acc.checked_add(&here)?;
                                r[at(o, k, j)] = acc.clone();
                            }
                        }
                    }
                }
                Some(Konst::Int(r))
            }
            Konst::Float(d) => {
                let mut r = d.clone();
                for o in 0..outer {
                    for j in 0..inner {
                        let mut acc = 0.0;
                        for step in 0..n {
                            let k = if c.reverse { n - 1 - step } else { step };
                            let here = *d.get(at(o, k, j))?;
                            if c.exclusive {
                                r[at(o, k, j)] = acc;
                                acc += here;
                            } else {
                                acc += here;
                                r[at(o, k, j)] = acc;
                            }
                        }
                    }
                }
                Some(Konst::Float(r))
            }
        }
    })()
    .map(Box::new);
    Ok(out)
}

pub fn logical_not(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let f = cx.input(0)?;
    let value = match f.value.as_deref() {
        Some(Konst::Int(v)) => v
            .iter()
            .map(|d| d.as_i64().map(|x| Dim::known((x == 0) as i64)))
            .collect::<Option<_>>()
            .map(Konst::Int),
        _ => None,
    };
    Ok(vec![Fact {
        dtype: Some(DType::Bool),
        shape: f.shape.clone(),
        value: value.map(Box::new),
    }])
}

pub fn is_class(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let f = cx.input(0)?;
    Ok(vec![Fact {
        dtype: Some(DType::Bool),
        shape: f.shape.clone(),
        value: None,
    }])
}

pub fn cast(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let to = attrs!(cx, Cast).to;
    let f = cx.input(0)?;
    Ok(vec![Fact {
        dtype: Some(to),
        shape: f.shape.clone(),
        value: f
            .value
            .as_deref()
            .and_then(|v| cast_value(v, to))
            .map(Box::new),
    }])
}

pub fn cast_like(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let f = cx.input(0)?;
    let to = cx.dtype(1);
    Ok(vec![Fact {
        dtype: to.or(f.dtype),
        shape: f.shape.clone(),
        value: match (f.value.as_deref(), to) {
            (Some(v), Some(t)) => cast_value(v, t).map(Box::new),
            _ => None,
        },
    }])
}

fn cast_value(v: &Konst, to: DType) -> Option<Konst> {
    if to == DType::Bool {
        return Some(Konst::Int(
            v.as_f64s()?
                .into_iter()
                .map(|x| Dim::known((x != 0.0) as i64))
                .collect(),
        ));
    }
    if to.is_int() {
        return match v {
            Konst::Int(d) => Some(Konst::Int(d.clone())),
            Konst::Float(_) => Some(Konst::Int(
                v.as_i64s()?.into_iter().map(Dim::known).collect(),
            )),
        };
    }
    if to.is_float() {
        return Some(Konst::Float(v.as_f64s()?));
    }
    None
}

/// `Dropout`: the output keeps the input; the optional mask has the same shape, boolean from
/// opset 10 on and of the input's type before (Dropout-7).
pub fn dropout(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let f = cx.input(0)?;
    let mask = if cx.opset < 10 {
        f.dtype
    } else {
        Some(DType::Bool)
    };
    Ok(vec![
        Fact {
            dtype: f.dtype,
            shape: f.shape.clone(),
            value: None,
        },
        Fact {
            dtype: mask,
            shape: f.shape.clone(),
            value: None,
        },
    ])
}

pub fn where_(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (facts, shape) = broadcast_inputs(cx, 3)?;
    let value = fold_broadcast(&facts, &shape, |v, i| {
        let c = int_at(v[0], i[0])?.as_i64()?;
        let pick = if c != 0 { 1 } else { 2 };
        match v[pick] {
            Konst::Int(x) => Some(Konst::Int(vec![x.get(i[pick])?.clone()])),
            Konst::Float(x) => Some(Konst::Float(vec![*x.get(i[pick])?])),
        }
    });
    Ok(vec![Fact {
        dtype: facts[1].dtype.or(facts[2].dtype),
        shape: Some(shape.into()),
        value: value.map(Box::new),
    }])
}

pub fn prelu(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (facts, shape) = broadcast_inputs(cx, 2)?;
    Ok(vec![Fact::new(facts[0].dtype, shape)])
}

pub fn quantize(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let q = attrs!(cx, QuantizeLinear);
    let f = cx.input(0)?;
    let dtype = q.output_dtype.or(cx.dtype(2)).unwrap_or(DType::U8);
    Ok(vec![Fact {
        dtype: Some(dtype),
        shape: f.shape.clone(),
        value: None,
    }])
}

pub fn dequantize(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let f = cx.input(0)?;
    Ok(vec![Fact {
        dtype: cx.dtype(1).or(Some(DType::F32)),
        shape: f.shape.clone(),
        value: None,
    }])
}

/// `Swish`'s and `SwiGLU`'s `alpha`: `x · sigmoid(alpha · x)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Swish {
    pub alpha: f32,
}

impl FromAttrs for Swish {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Swish {
            alpha: AttrReader(a).float("alpha", 1.0)?,
        })
    }
}

/// `SwiGLU`: `Swish(A) · B`, A and B of one shape (no broadcasting).
pub fn swiglu(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let a = cx.shape(0)?;
    let b = cx.shape(1)?;
    if a.len() != b.len() {
        return invalid(format!(
            "gate has rank {} but the value input has rank {}",
            a.len(),
            b.len()
        ));
    }
    let mut out = a.to_vec();
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        match (x.as_i64(), y.as_i64()) {
            (Some(p), Some(q)) if p != q => {
                return invalid(format!(
                    "gate and value differ on axis {i}: {p} against {q} (SwiGLU does not broadcast)"
                ))
            }
            (None, Some(_)) => out[i] = y.clone(),
            _ => {}
        }
    }
    Ok(vec![Fact::new(cx.dtype(0).or(cx.dtype(1)), out)])
}

/// `SwiGLU` as PyTorch runs it, `silu(a) * b`: SiLU keeps the gate, the product keeps both of its
/// operands (the SiLU output is a new tensor the size of the gate).
pub fn swiglu_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    if !cx.out_grad() {
        return Some(Vec::new());
    }
    let (a, b) = (cx.node.input(0)?, cx.node.input(1)?);
    Some(vec![
        Save::Value(a),
        Save::Value(b),
        Save::Own(cx.bytes_as(a, cx.dtype(a))),
    ])
}

/// `CumProd` keeps its input and its output (`cumprod_backward(grad, self, dim, result)`).
pub fn cum_prod_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    let x = cx.node.input(0);
    Some(if cx.grad(x) {
        x.into_iter()
            .chain(cx.node.output(0))
            .map(Save::Value)
            .collect()
    } else {
        Vec::new()
    })
}

/// `BitCast`'s target type.
#[derive(Clone, Debug, PartialEq)]
pub struct BitCast {
    pub to: DType,
}

impl FromAttrs for BitCast {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(BitCast {
            to: AttrReader(a)
                .dtype("to")?
                .ok_or("attribute 'to' is required")?,
        })
    }
}

/// `BitCast`: the input's shape in the target type, which must have the input type's bit width.
pub fn bit_cast(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let to = attrs!(cx, BitCast).to;
    let f = cx.input(0)?;
    if let Some(from) = f.dtype {
        if let (Some(a), Some(b)) = (from.bits(), to.bits()) {
            if a != b {
                return invalid(format!(
                    "cannot reinterpret {} ({a} bits) as {} ({b} bits)",
                    from.name(),
                    to.name()
                ));
            }
        }
    }
    Ok(vec![Fact {
        dtype: Some(to),
        shape: f.shape.clone(),
        value: None,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_index_maps() {
        assert_eq!(
            broadcast_indices(&[2, 3], &[3]).unwrap(),
            vec![0, 1, 2, 0, 1, 2]
        );
        assert_eq!(
            broadcast_indices(&[2, 3], &[2, 1]).unwrap(),
            vec![0, 0, 0, 1, 1, 1]
        );
        assert_eq!(broadcast_indices(&[2], &[]).unwrap(), vec![0, 0]);
    }

    #[test]
    fn symbolic_integer_division() {
        let n = Dim::sym("N");
        let a = n.checked_mul(&Dim::known(6)).unwrap();
        assert_eq!(
            arith_int(Arith::Div, &a, &Dim::known(3))
                .unwrap()
                .to_string(),
            "2*N"
        );
        assert_eq!(
            arith_int(Arith::Div, &Dim::known(-7), &Dim::known(2))
                .unwrap()
                .as_i64(),
            Some(-3)
        );
        assert_eq!(arith_int(Arith::Div, &Dim::known(1), &Dim::known(0)), None);
    }

    #[test]
    fn swiglu_and_bitcast() {
        use super::super::testing::{f32s, run, shapes};
        use crate::ir::Attr;
        let (out, macs) = run("SwiGLU", vec![], vec![f32s(&[2, 8]), f32s(&[2, 8])], 28);
        assert_eq!(shapes(&out), ["[2,8]"]);
        assert_eq!(macs, Some(Dim::ZERO));
        let (out, _) = run("SwiGLU", vec![], vec![f32s(&[2, 8]), f32s(&[1, 8])], 28);
        assert!(shapes(&out)[0].contains("does not broadcast"), "{out:?}");
        let to = |t: i64| vec![("to", Attr::Int(t))];
        // float -> int32 (6): same width
        let (out, _) = run("BitCast", to(6), vec![f32s(&[3])], 26);
        assert_eq!(out.unwrap()[0].dtype, Some(DType::I32));
        // float -> int64 (7): 32 bits against 64
        let (out, _) = run("BitCast", to(7), vec![f32s(&[3])], 26);
        assert!(shapes(&out)[0].contains("32 bits"), "{out:?}");
    }
}
