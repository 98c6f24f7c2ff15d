//! Element-wise kernels: arithmetic with broadcasting, activations, `Softmax`, casts, `Identity`
//! and `Dropout` (in inference).

use candle_core::Tensor as CTensor;

use super::{
    attrs, broadcast_checked, broadcast_values, map, one, tensor, values, At, Broadcast, Cx,
    OpResult,
};
use crate::analysis::ops::elementwise::GeluApproximation;
use crate::ir::DType;
use crate::verify::exec::ExecError;

fn binary(cx: &Cx, f: fn(&CTensor, &CTensor) -> candle_core::Result<CTensor>) -> OpResult {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    broadcast_checked(cx, &[a.dims(), b.dims()])?;
    one(f(a, b).at(cx)?)
}

pub fn add(cx: &Cx) -> OpResult {
    binary(cx, CTensor::broadcast_add)
}

pub fn sub(cx: &Cx) -> OpResult {
    binary(cx, CTensor::broadcast_sub)
}

pub fn mul(cx: &Cx) -> OpResult {
    binary(cx, CTensor::broadcast_mul)
}

/// Integers divide truncating toward zero, as onnxruntime's (C++) integer division does: a
/// shape computation's `d / heads` stays an integer.
pub fn div(cx: &Cx) -> OpResult {
    if !(cx.is_int(0) && cx.is_int(1)) {
        return binary(cx, CTensor::broadcast_div);
    }
    let Broadcast { a, b, shape } = broadcast_values(cx, cx.input(0)?, cx.input(1)?)?;
    if b.contains(&0.0) {
        return Err(cx.fail("integer division by zero"));
    }
    let y = a.iter().zip(&b).map(|(x, d)| (x / d).trunc()).collect();
    one(tensor(y, &shape).at(cx)?)
}

/// `f64::powf` element by element: candle's pow goes through `exp(log)` and loses negative bases.
pub fn pow(cx: &Cx) -> OpResult {
    let Broadcast {
        a: av,
        b: bv,
        shape,
    } = broadcast_values(cx, cx.input(0)?, cx.input(1)?)?;
    let y = av.iter().zip(&bv).map(|(x, e)| x.powf(*e)).collect();
    one(tensor(y, &shape).at(cx)?)
}

/// Folds the (one or more) inputs with a broadcasting binary op.
fn variadic(cx: &Cx, f: fn(&CTensor, &CTensor) -> candle_core::Result<CTensor>) -> OpResult {
    let mut inputs = cx.inputs.iter().flatten();
    let first = inputs
        .next()
        .ok_or_else(|| cx.fail("at least one input is needed"))?;
    let shapes: Vec<&[usize]> = cx.inputs.iter().flatten().map(|t| t.dims()).collect();
    broadcast_checked(cx, &shapes)?;
    let mut y = first.clone();
    for t in inputs {
        y = f(&y, t).at(cx)?;
    }
    one(y)
}

pub fn max(cx: &Cx) -> OpResult {
    variadic(cx, CTensor::broadcast_maximum)
}

pub fn min(cx: &Cx) -> OpResult {
    variadic(cx, CTensor::broadcast_minimum)
}

pub fn sum(cx: &Cx) -> OpResult {
    variadic(cx, CTensor::broadcast_add)
}

/// A broadcasting binary op on the values, for comparisons and logic (1.0 is true).
fn binary_values(cx: &Cx, f: impl Fn(f64, f64) -> bool) -> OpResult {
    let Broadcast {
        a: av,
        b: bv,
        shape,
    } = broadcast_values(cx, cx.input(0)?, cx.input(1)?)?;
    let y = av
        .iter()
        .zip(&bv)
        .map(|(&a, &b)| if f(a, b) { 1.0 } else { 0.0 })
        .collect();
    one(tensor(y, &shape).at(cx)?)
}

pub fn equal(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| a == b)
}

pub fn greater(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| a > b)
}

pub fn greater_or_equal(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| a >= b)
}

pub fn less(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| a < b)
}

pub fn less_or_equal(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| a <= b)
}

pub fn and(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| a != 0.0 && b != 0.0)
}

pub fn or(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| a != 0.0 || b != 0.0)
}

pub fn xor(cx: &Cx) -> OpResult {
    binary_values(cx, |a, b| (a != 0.0) != (b != 0.0))
}

pub fn not(cx: &Cx) -> OpResult {
    pointwise(cx, |x| if x == 0.0 { 1.0 } else { 0.0 })
}

/// `cond ? x : y`, the three broadcast together.
pub fn where_(cx: &Cx) -> OpResult {
    let (c, x, y) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    let shape = broadcast_checked(cx, &[c.dims(), x.dims(), y.dims()])?;
    let flat = |t: &CTensor| {
        t.broadcast_as(shape.as_slice())
            .and_then(|t| super::values(&t))
            .at(cx)
    };
    let (cv, xv, yv) = (flat(c)?, flat(x)?, flat(y)?);
    let out = cv
        .iter()
        .zip(xv.iter().zip(&yv))
        .map(|(&c, (&x, &y))| if c != 0.0 { x } else { y })
        .collect();
    one(tensor(out, &shape).at(cx)?)
}

/// `x < 0 ? slope * x : x`, the slope broadcast to `x`.
pub fn prelu(cx: &Cx) -> OpResult {
    let Broadcast {
        a: av,
        b: bv,
        shape,
    } = broadcast_values(cx, cx.input(0)?, cx.input(1)?)?;
    if shape != cx.input(0)?.dims() {
        return Err(cx.fail(format!(
            "the slope {:?} does not broadcast to the input {:?}",
            cx.input(1)?.dims(),
            cx.input(0)?.dims()
        )));
    }
    let y = av
        .iter()
        .zip(&bv)
        .map(|(&x, &s)| if x < 0.0 { s * x } else { x })
        .collect();
    one(tensor(y, &shape).at(cx)?)
}

fn unary(cx: &Cx, f: fn(&CTensor) -> candle_core::Result<CTensor>) -> OpResult {
    one(f(cx.input(0)?).at(cx)?)
}

pub fn neg(cx: &Cx) -> OpResult {
    unary(cx, CTensor::neg)
}

pub fn abs(cx: &Cx) -> OpResult {
    unary(cx, CTensor::abs)
}

pub fn sqrt(cx: &Cx) -> OpResult {
    unary(cx, CTensor::sqrt)
}

pub fn exp(cx: &Cx) -> OpResult {
    unary(cx, CTensor::exp)
}

pub fn log(cx: &Cx) -> OpResult {
    unary(cx, CTensor::log)
}

pub fn reciprocal(cx: &Cx) -> OpResult {
    unary(cx, CTensor::recip)
}

/// candle's f64 erf is libm's.
pub fn erf(cx: &Cx) -> OpResult {
    unary(cx, CTensor::erf)
}

pub fn floor(cx: &Cx) -> OpResult {
    unary(cx, CTensor::floor)
}

pub fn ceil(cx: &Cx) -> OpResult {
    unary(cx, CTensor::ceil)
}

/// Halves round to even, as the spec says.
pub fn round(cx: &Cx) -> OpResult {
    pointwise(cx, f64::round_ties_even)
}

pub fn sign(cx: &Cx) -> OpResult {
    pointwise(cx, |x| {
        if x == 0.0 || x.is_nan() {
            x
        } else {
            x.signum()
        }
    })
}

pub fn relu(cx: &Cx) -> OpResult {
    unary(cx, CTensor::relu)
}

pub fn tanh(cx: &Cx) -> OpResult {
    unary(cx, CTensor::tanh)
}

fn pointwise(cx: &Cx, f: impl Fn(f64) -> f64) -> OpResult {
    one(map(cx.input(0)?, f).at(cx)?)
}

pub fn leaky_relu(cx: &Cx) -> OpResult {
    let alpha = f64::from(attrs!(cx, LeakyRelu).alpha);
    pointwise(cx, |x| if x < 0.0 { alpha * x } else { x })
}

pub fn sigmoid(cx: &Cx) -> OpResult {
    pointwise(cx, |x| 1.0 / (1.0 + (-x).exp()))
}

/// Bounds from the inputs (opset 11 on), else the attributes, else none.
pub fn clip(cx: &Cx) -> OpResult {
    let c = attrs!(cx, Clip);
    let lo = match cx.input_scalar(1)? {
        Some(v) => v,
        None => c.min.map_or(f64::NEG_INFINITY, f64::from),
    };
    let hi = match cx.input_scalar(2)? {
        Some(v) => v,
        None => c.max.map_or(f64::INFINITY, f64::from),
    };
    pointwise(cx, |x| x.max(lo).min(hi))
}

pub fn hard_sigmoid(cx: &Cx) -> OpResult {
    let h = attrs!(cx, HardSigmoid);
    let (alpha, beta) = (f64::from(h.alpha), f64::from(h.beta));
    pointwise(cx, |x| (alpha * x + beta).clamp(0.0, 1.0))
}

pub fn hard_swish(cx: &Cx) -> OpResult {
    pointwise(cx, |x| x * (x / 6.0 + 0.5).clamp(0.0, 1.0))
}

pub fn gelu(cx: &Cx) -> OpResult {
    match attrs!(cx, Gelu).approximate {
        GeluApproximation::None => unary(cx, CTensor::gelu_erf),
        GeluApproximation::Tanh => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            pointwise(cx, |x| {
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            })
        }
    }
}

/// From opset 13, along one axis; before, over the input coerced to 2-D at `axis` (every axis
/// from `axis` on at once).
pub fn softmax(cx: &Cx) -> OpResult {
    let s = attrs!(cx, Softmax);
    let x = cx.input(0)?;
    let axis = cx.axis(s.axis, x.rank())?;
    let (flat, axis) = if s.coerce_2d {
        let outer = super::checked_product(&x.dims()[..axis]);
        let inner = super::checked_product(&x.dims()[axis..]);
        match (outer, inner) {
            (Some(o), Some(i)) => (x.reshape((o, i)).at(cx)?, 1),
            _ => return Err(cx.fail("size overflows")),
        }
    } else {
        (x.clone(), axis)
    };
    let shifted = flat.broadcast_sub(&flat.max_keepdim(axis).at(cx)?).at(cx)?;
    let e = shifted.exp().at(cx)?;
    let y = e.broadcast_div(&e.sum_keepdim(axis).at(cx)?).at(cx)?;
    one(y.reshape(x.dims()).at(cx)?)
}

/// Float casts keep f64, so the checker measures a rewrite's own error, not the model's storage
/// precision; integer casts truncate toward zero, as the spec's (C) conversion does.
pub fn cast(cx: &Cx) -> OpResult {
    let to = attrs!(cx, Cast).to;
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

pub fn identity(cx: &Cx) -> OpResult {
    one(cx.input(0)?.clone())
}

/// Inference: the input, and a mask of ones.
pub fn dropout(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    if cx.input_scalar(2)?.is_some_and(|t| t != 0.0) {
        return Err(cx.unsupported("training_mode=1 makes Dropout random"));
    }
    let mask = x.ones_like().at(cx)?;
    Ok(vec![x.clone(), mask])
}

macro_rules! unary_fns {
    ($($name:ident => $f:expr;)*) => {
        $( pub fn $name(cx: &Cx) -> OpResult {
            pointwise(cx, $f)
        } )*
    };
}

unary_fns! {
    acos => f64::acos;
    acosh => f64::acosh;
    asin => f64::asin;
    asinh => f64::asinh;
    atan => f64::atan;
    atanh => f64::atanh;
    cos => f64::cos;
    cosh => f64::cosh;
    sin => f64::sin;
    sinh => f64::sinh;
    tan => f64::tan;
    softsign => |x| x / (1.0 + x.abs());
    softplus => softplus_of;
    mish => |x| x * softplus_of(x).tanh();
    is_nan => |x| if x.is_nan() { 1.0 } else { 0.0 };
}

/// `ln(1 + eˣ)` without overflow for large `x`.
fn softplus_of(x: f64) -> f64 {
    if x > 30.0 {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

pub fn elu(cx: &Cx) -> OpResult {
    let alpha = f64::from(attrs!(cx, Elu).alpha);
    pointwise(cx, |x| if x < 0.0 { alpha * x.exp_m1() } else { x })
}

/// `max(0, x) + min(0, alpha · (e^(x/alpha) - 1))`.
pub fn celu(cx: &Cx) -> OpResult {
    let alpha = f64::from(attrs!(cx, Celu).alpha);
    pointwise(cx, |x| x.max(0.0) + (alpha * (x / alpha).exp_m1()).min(0.0))
}

pub fn selu(cx: &Cx) -> OpResult {
    let s = attrs!(cx, Selu);
    let (alpha, gamma) = (f64::from(s.alpha), f64::from(s.gamma));
    pointwise(cx, |x| {
        if x > 0.0 {
            gamma * x
        } else {
            gamma * alpha * x.exp_m1()
        }
    })
}

pub fn thresholded_relu(cx: &Cx) -> OpResult {
    let alpha = f64::from(attrs!(cx, ThresholdedRelu).alpha);
    pointwise(cx, |x| if x > alpha { x } else { 0.0 })
}

pub fn shrink(cx: &Cx) -> OpResult {
    let s = attrs!(cx, Shrink);
    let (bias, lambd) = (f64::from(s.bias), f64::from(s.lambd));
    pointwise(cx, |x| {
        if x < -lambd {
            x + bias
        } else if x > lambd {
            x - bias
        } else {
            0.0
        }
    })
}

/// `fmod = 1`: the remainder with the dividend's sign (C's `fmod`); 0: with the divisor's (Python's
/// `%`), integers only. An integer division by zero fails.
pub fn mod_(cx: &Cx) -> OpResult {
    let fmod = attrs!(cx, Mod).fmod;
    let ints = cx.is_int(0) && cx.is_int(1);
    if !fmod && !ints {
        return Err(cx.fail("a float Mod needs fmod = 1"));
    }
    let Broadcast { a, b, shape } = broadcast_values(cx, cx.input(0)?, cx.input(1)?)?;
    if ints && b.contains(&0.0) {
        return Err(cx.fail("integer division by zero"));
    }
    let y = a
        .iter()
        .zip(&b)
        .map(|(&x, &d)| {
            let r = x % d;
            if !fmod && r != 0.0 && (r < 0.0) != (d < 0.0) {
                r + d
            } else {
                r
            }
        })
        .collect();
    one(tensor(y, &shape).at(cx)?)
}

pub fn mean(cx: &Cx) -> OpResult {
    let n = cx.inputs.iter().flatten().count();
    let s = sum(cx)?;
    let y = s.into_iter().next().ok_or_else(|| cx.fail("no sum"))?;
    one(y.affine(1.0 / n as f64, 0.0).at(cx)?)
}

/// To the type of input 1, as `Cast` does.
pub fn cast_like(cx: &Cx) -> OpResult {
    match cx.dtypes.get(1).copied().flatten() {
        Some(DType::Bool) => pointwise(cx, |x| if x != 0.0 { 1.0 } else { 0.0 }),
        Some(t) if t.is_int() => pointwise(cx, f64::trunc),
        Some(t) if t.is_float() => identity(cx),
        Some(t) => Err(cx.unsupported(format!("casting to {t} is not supported"))),
        None => Err(cx.unsupported("the type of input 1 is not known")),
    }
}

/// The input seen as `[outer, axis, inner]` at the softmax family's axis (opset 13 on), or as
/// `[outer, 1, rest]` with every axis from `axis` on (before).
fn softmax_groups(cx: &Cx) -> Result<(usize, usize, usize), ExecError> {
    let s = attrs!(cx, Softmax | LogSoftmax | Hardmax);
    let x = cx.input(0)?;
    let axis = cx.axis(s.axis, x.rank())?;
    let d = x.dims();
    let outer = super::checked_product(&d[..axis]).unwrap_or(0);
    Ok(if s.coerce_2d {
        (outer, super::checked_product(&d[axis..]).unwrap_or(0), 1)
    } else {
        (
            outer,
            d[axis],
            super::checked_product(&d[axis + 1..]).unwrap_or(0),
        )
    })
}

/// Applies `f` to every group of the softmax family's axis (values with stride `inner`).
fn along_groups(cx: &Cx, f: impl Fn(&mut [f64])) -> OpResult {
    let (outer, len, inner) = softmax_groups(cx)?;
    let x = cx.input(0)?;
    let mut v = values(x).at(cx)?;
    let mut group = vec![0.0; len];
    for o in 0..outer {
        for i in 0..inner {
            for (k, g) in group.iter_mut().enumerate() {
                *g = v[(o * len + k) * inner + i];
            }
            f(&mut group);
            for (k, g) in group.iter().enumerate() {
                v[(o * len + k) * inner + i] = *g;
            }
        }
    }
    one(tensor(v, x.dims()).at(cx)?)
}

/// `x - max - ln Σ e^(x - max)` along the axis.
pub fn log_softmax(cx: &Cx) -> OpResult {
    along_groups(cx, |g| {
        let m = g.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = g.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
        for x in g.iter_mut() {
            *x = *x - m - lse;
        }
    })
}

/// 1 at the first largest element along the axis, 0 elsewhere.
pub fn hardmax(cx: &Cx) -> OpResult {
    along_groups(cx, |g| {
        let mut best = 0;
        for (k, &x) in g.iter().enumerate() {
            if x > g[best] {
                best = k;
            }
        }
        for (k, x) in g.iter_mut().enumerate() {
            *x = if k == best { 1.0 } else { 0.0 };
        }
    })
}

/// Running sums along the axis (input 1), optionally exclusive and from the end.
pub fn cum_sum(cx: &Cx) -> OpResult {
    let c = attrs!(cx, CumSum);
    let x = cx.input(0)?;
    let axis = match cx.input_scalar(1)? {
        Some(a) => cx.axis(a as i64, x.rank())?,
        None => return Err(cx.fail("input 1 (axis) is missing")),
    };
    let d = x.dims();
    let (outer, len) = (super::checked_product(&d[..axis]).unwrap_or(0), d[axis]);
    let inner = super::checked_product(&d[axis + 1..]).unwrap_or(0);
    let v = values(x).at(cx)?;
    let mut y = vec![0.0; v.len()];
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = 0.0;
            for step in 0..len {
                let k = if c.reverse { len - 1 - step } else { step };
                let at = (o * len + k) * inner + i;
                if c.exclusive {
                    y[at] = acc;
                    acc += v[at];
                } else {
                    acc += v[at];
                    y[at] = acc;
                }
            }
        }
    }
    one(tensor(y, d).at(cx)?)
}

/// The upper (`j - i >= k`) or lower (`j - i <= k`) triangle of the last two axes, `k` from
/// input 1 (0 when omitted).
pub fn trilu(cx: &Cx) -> OpResult {
    let upper = attrs!(cx, Trilu).upper;
    let x = cx.input(0)?;
    let k = cx.input_scalar(1)?.unwrap_or(0.0) as i64;
    let &[.., rows, cols] = x.dims() else {
        return Err(cx.fail(format!("input has rank {}, expected at least 2", x.rank())));
    };
    let mut v = values(x).at(cx)?;
    for (at, e) in v.iter_mut().enumerate() {
        let (i, j) = ((at / cols.max(1)) % rows.max(1), at % cols.max(1));
        let diff = j as i64 - i as i64;
        let keep = if upper { diff >= k } else { diff <= k };
        if !keep {
            *e = 0.0;
        }
    }
    one(tensor(v, x.dims()).at(cx)?)
}

/// Ones on the diagonal `k` of a matrix of the input's shape.
pub fn eye_like(cx: &Cx) -> OpResult {
    let k = attrs!(cx, EyeLike).k;
    let x = cx.input(0)?;
    let &[rows, cols] = x.dims() else {
        return Err(cx.fail(format!("input has shape {:?}, expected rank 2", x.dims())));
    };
    let v = (0..rows * cols)
        .map(|at| {
            let (i, j) = (at / cols, at % cols);
            if j as i64 - i as i64 == k {
                1.0
            } else {
                0.0
            }
        })
        .collect();
    one(tensor(v, x.dims()).at(cx)?)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, ramp, G};
    use crate::ir::Attr;

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
    fn integers_divide_truncating_and_floats_do_not() {
        let mut g = G::new();
        g.input("x", &[2], vec![7.0, -7.0])
            .init_i64("i", vec![7, -7])
            .init_i64("d", vec![2])
            .init("h", &[1], vec![2.0])
            .node("Div", &["i", "d"], &["q"], vec![])
            .node("Div", &["x", "h"], &["f"], vec![])
            // the type follows through ops: a Shape's dims are int64, so is their Concat
            .node("Shape", &["x"], &["s"], vec![])
            .node("Concat", &["s", "i"], &["c"], vec![("axis", Attr::Int(0))])
            .node("Div", &["c", "d"], &["cq"], vec![]);
        let out = g.run(&["q", "f", "cq"]).unwrap();
        assert_close(&flat(&out[0]), &[3.0, -3.0]);
        assert_close(&flat(&out[1]), &[3.5, -3.5]);
        assert_close(&flat(&out[2]), &[1.0, 3.0, -3.0]);
    }

    #[test]
    fn integer_division_by_zero_fails() {
        let mut g = G::new();
        g.init_i64("i", vec![7])
            .init_i64("z", vec![0])
            .node("Div", &["i", "z"], &["q"], vec![]);
        let err = g.run(&["q"]).unwrap_err();
        assert!(err.to_string().contains("division by zero"), "{err}");
    }

    #[test]
    fn comparisons_logic_and_where() {
        let mut g = G::new();
        g.input("x", &[2, 2], vec![-1.0, 0.0, 2.0, 3.0])
            .init("z", &[], vec![0.0])
            .init("y", &[2], vec![10.0, 20.0])
            .node("Greater", &["x", "z"], &["gt"], vec![])
            .node("LessOrEqual", &["x", "z"], &["le"], vec![])
            .node("Equal", &["x", "z"], &["eq"], vec![])
            .node("Not", &["gt"], &["ng"], vec![])
            .node("Or", &["gt", "eq"], &["ge"], vec![])
            .node("Xor", &["gt", "ge"], &["only_eq"], vec![])
            .node("Where", &["gt", "x", "y"], &["w"], vec![]);
        let out = g.run(&["gt", "le", "ng", "ge", "only_eq", "w"]).unwrap();
        assert_close(&flat(&out[0]), &[0.0, 0.0, 1.0, 1.0]);
        assert_close(&flat(&out[1]), &[1.0, 1.0, 0.0, 0.0]);
        assert_close(&flat(&out[2]), &[1.0, 1.0, 0.0, 0.0]);
        assert_close(&flat(&out[3]), &[0.0, 1.0, 1.0, 1.0]);
        assert_close(&flat(&out[4]), &[0.0, 1.0, 0.0, 0.0]);
        assert_close(&flat(&out[5]), &[10.0, 20.0, 2.0, 3.0]);
    }

    #[test]
    fn prelu_and_rounding() {
        let mut g = G::new();
        g.input("x", &[2, 3], vec![-2.5, -0.5, 0.5, 1.5, 2.5, -1.0])
            .init("s", &[2, 1], vec![0.5, 2.0])
            .node("PRelu", &["x", "s"], &["p"], vec![])
            .node("Round", &["x"], &["r"], vec![])
            .node("Floor", &["x"], &["f"], vec![])
            .node("Ceil", &["x"], &["c"], vec![])
            .node("Sign", &["x"], &["sg"], vec![]);
        let out = g.run(&["p", "r", "f", "c", "sg"]).unwrap();
        assert_close(&flat(&out[0]), &[-1.25, -0.25, 0.5, 1.5, 2.5, -2.0]);
        // halves to even
        assert_close(&flat(&out[1]), &[-2.0, -0.0, 0.0, 2.0, 2.0, -1.0]);
        assert_close(&flat(&out[2]), &[-3.0, -1.0, 0.0, 1.0, 2.0, -1.0]);
        assert_close(&flat(&out[3]), &[-2.0, -0.0, 1.0, 2.0, 3.0, -1.0]);
        assert_close(&flat(&out[4]), &[-1.0, -1.0, 1.0, 1.0, 1.0, -1.0]);
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
    fn softmax_before_opset_13_normalises_every_axis_from_its_own() {
        // [1, 2, 2] at axis 1: one group of 4 (ln 1, ln 3, ln 1, ln 3 -> 1/8, 3/8, 1/8, 3/8)
        let x = vec![0.0, 3f64.ln(), 0.0, 3f64.ln()];
        let mut g = G::new();
        g.opset = 11;
        g.input("x", &[1, 2, 2], x.clone())
            .node("Softmax", &["x"], &["y"], vec![]);
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 2, 2]);
        assert_close(&flat(&y), &[0.125, 0.375, 0.125, 0.375]);
        // from opset 13 the default axis is the last one alone
        let mut g = G::new();
        g.input("x", &[1, 2, 2], x)
            .node("Softmax", &["x"], &["y"], vec![]);
        assert_close(&flat(&g.run1("y")), &[0.25, 0.75, 0.25, 0.75]);
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
    fn casts_truncate_to_integers_and_test_for_bool() {
        let mut g = G::new();
        g.input("x", &[4], vec![-1.7, -0.2, 0.0, 2.9])
            .node("Cast", &["x"], &["i"], vec![("to", Attr::Int(7))])
            .node("Cast", &["x"], &["b"], vec![("to", Attr::Int(9))])
            .node("Cast", &["x"], &["f"], vec![("to", Attr::Int(10))]);
        let out = g.run(&["i", "b", "f"]).unwrap();
        assert_close(&flat(&out[0]), &[-1.0, 0.0, 0.0, 2.0]);
        assert_close(&flat(&out[1]), &[1.0, 1.0, 0.0, 1.0]);
        assert_close(&flat(&out[2]), &[-1.7, -0.2, 0.0, 2.9]);
    }

    #[test]
    fn identity_and_dropout_pass_the_input() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6))
            .node("Identity", &["x"], &["i"], vec![])
            .node("Dropout", &["i"], &["d", "mask"], vec![]);
        let out = g.run(&["d", "mask"]).unwrap();
        assert_close(&flat(&out[0]), &ramp(6));
        assert_close(&flat(&out[1]), &[1.0; 6]);
    }
}
