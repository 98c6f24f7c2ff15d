//! Ops that make tensors from attributes or shapes: `Constant`, `Shape`, `Size`,
//! `ConstantOfShape`, `Range`. Their values are folded when small.

use super::{attrs, invalid, ovf, AttrReader, FromAttrs, InferError, InferResult, OpCx};
use crate::analysis::fact::{Fact, Konst, MAX_FOLD_ELEMS};
use crate::ir::{Attr, Attrs, DType, Dim, Tensor};

/// Where a `Constant` holds its value. The value itself (possibly a large tensor) stays in the
/// node's attributes, read where it is needed, never copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConstantForm {
    /// `value`: a tensor.
    Tensor,
    /// `sparse_value`.
    Sparse,
    /// `value_float`, `value_floats`, `value_int`, `value_ints`, `value_string`, `value_strings`.
    Scalars(String),
}

/// `Constant`'s attributes: which one holds the value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constant {
    pub form: ConstantForm,
}

impl FromAttrs for Constant {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let (name, attr) = a.0.first().ok_or("no value attribute")?;
        let form = match (name.as_str(), attr) {
            ("value", Attr::Tensor(_)) => ConstantForm::Tensor,
            ("sparse_value", Attr::SparseTensor(_)) => ConstantForm::Sparse,
            ("value_float", Attr::Float(_))
            | ("value_floats", Attr::Floats(_))
            | ("value_int", Attr::Int(_))
            | ("value_ints", Attr::Ints(_))
            | ("value_string", Attr::String(_))
            | ("value_strings", Attr::Strings(_)) => ConstantForm::Scalars(name.to_string()),
            (other, a) => {
                return Err(format!(
                    "unsupported value attribute '{other}' ({})",
                    a.kind()
                ))
            }
        };
        Ok(Constant { form })
    }
}

/// `Scan`'s attributes (its body stays in the node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    pub num_scan_inputs: i64,
    pub scan_input_axes: Vec<i64>,
    pub scan_output_axes: Vec<i64>,
    /// 1 for a scan input read from its last element to its first.
    pub scan_input_directions: Vec<i64>,
    /// 1 for a scan output stacked from its last element to its first.
    pub scan_output_directions: Vec<i64>,
}

impl FromAttrs for Scan {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Scan {
            num_scan_inputs: r
                .int_opt("num_scan_inputs")?
                .ok_or("attribute 'num_scan_inputs' is required")?,
            scan_input_axes: r.ints("scan_input_axes")?.unwrap_or_default(),
            scan_output_axes: r.ints("scan_output_axes")?.unwrap_or_default(),
            scan_input_directions: r.ints("scan_input_directions")?.unwrap_or_default(),
            scan_output_directions: r.ints("scan_output_directions")?.unwrap_or_default(),
        })
    }
}

/// `Shape`'s slice of the dims (opset 15).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub start: i64,
    pub end: Option<i64>,
}

impl FromAttrs for Shape {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Shape {
            start: r.int("start", 0)?,
            end: r.int_opt("end")?,
        })
    }
}

/// `RandomNormal` and `RandomUniform`'s attributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Random {
    pub shape: Vec<i64>,
    pub dtype: DType,
}

impl FromAttrs for Random {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Random {
            shape: r.ints("shape")?.ok_or("attribute 'shape' is required")?,
            dtype: r.dtype("dtype")?.unwrap_or(DType::F32),
        })
    }
}

/// The output type of `RandomNormalLike`, `RandomUniformLike` and `Bernoulli` (the input's by
/// default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RandomLike {
    pub dtype: Option<DType>,
}

impl FromAttrs for RandomLike {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(RandomLike {
            dtype: AttrReader(a).dtype("dtype")?,
        })
    }
}

/// The fact of a stored tensor, with its values when it is small.
pub fn tensor_fact(t: &Tensor) -> Fact {
    let value = t.read_values(MAX_FOLD_ELEMS).map(Konst::from_values);
    Fact {
        value: value.map(Box::new),
        ..stored_fact_shape(t)
    }
}

/// Float initializers above this many elements (weights, mostly) keep no values in their fact;
/// [`deferred_value`] reads them for the node that reads them. Held for the whole analysis, the
/// values of 100,000 small weights took 45 MiB at the peak (as `f64`s); only a few are ever folded.
/// An op that cannot fold reads a float input's values only where the input is shape-like: a
/// scalar (`Range`, `Clip`, `Dropout`'s ratio, `OneHot`'s depth) or one entry per axis (`Resize`'s
/// scales), so 16 covers tensors of rank 16. (At 64, the 12,502 biases of 64 elements of the
/// 100,016-node benchmark graph held 6 MiB of `f64`s at the peak of `mem`.)
const EAGER_FLOAT_ELEMS: u64 = 16;

fn stored_fact_shape(t: &Tensor) -> Fact {
    Fact {
        dtype: Some(t.dtype),
        shape: Some(t.dims.iter().map(|&d| Dim::known(d as i64)).collect()),
        value: None,
    }
}

/// Whether [`initializer_fact`] leaves this tensor's values out.
pub fn is_deferred(t: &Tensor) -> bool {
    t.dtype.is_float() && t.numel().is_some_and(|n| n > EAGER_FLOAT_ELEMS)
}

/// The fact of an initializer: [`tensor_fact`], without the values of a larger float tensor.
pub fn initializer_fact(t: &Tensor) -> Fact {
    if is_deferred(t) {
        stored_fact_shape(t)
    } else {
        tensor_fact(t)
    }
}

/// The fact with values of an initializer whose [`initializer_fact`] left them out; `None` for
/// any other tensor (its fact is complete already).
pub fn deferred_value(t: &Tensor) -> Option<Fact> {
    is_deferred(t).then(|| tensor_fact(t))
}

pub fn constant(cx: &OpCx) -> InferResult<Vec<Fact>> {
    attrs!(cx, Constant);
    let (name, attr) = cx
        .node
        .attrs
        .0
        .first()
        .ok_or_else(|| InferError::Invalid("no value attribute".into()))?;
    let fact = match (name.as_str(), attr) {
        ("value", Attr::Tensor(t)) => tensor_fact(t),
        ("sparse_value", Attr::SparseTensor(s)) => Fact::new(
            Some(s.0.dtype),
            s.1.iter().map(|&d| Dim::known(d as i64)).collect(),
        ),
        ("value_float", Attr::Float(f)) => {
            Fact::new(Some(DType::F32), vec![]).with_value(Konst::Float(vec![*f as f64]))
        }
        ("value_floats", Attr::Floats(f)) => {
            Fact::new(Some(DType::F32), vec![Dim::known(f.len() as i64)])
                .with_value(Konst::Float(f.iter().map(|&x| x as f64).collect()))
        }
        ("value_int", Attr::Int(i)) => {
            Fact::new(Some(DType::I64), vec![]).with_value(Konst::Int(vec![Dim::known(*i)]))
        }
        ("value_ints", Attr::Ints(v)) => {
            Fact::new(Some(DType::I64), vec![Dim::known(v.len() as i64)])
                .with_value(Konst::Int(v.iter().map(|&x| Dim::known(x)).collect()))
        }
        ("value_string", Attr::String(_)) => Fact::new(Some(DType::String), vec![]),
        ("value_strings", Attr::Strings(v)) => {
            Fact::new(Some(DType::String), vec![Dim::known(v.len() as i64)])
        }
        (other, a) => {
            return invalid(format!(
                "unsupported value attribute '{other}' ({})",
                a.kind()
            ))
        }
    };
    Ok(vec![fact])
}

/// `Shape`, with `start`/`end` (opset 15). Its value is the (possibly symbolic) dims themselves.
pub fn shape(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let r = s.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let sh = attrs!(cx, Shape);
    let start = clamp(sh.start);
    let end = clamp(sh.end.unwrap_or(r));
    let dims: Vec<Dim> = if start < end {
        s[start..end].to_vec()
    } else {
        Vec::new()
    };
    Ok(vec![Fact::new(
        Some(DType::I64),
        vec![Dim::known(dims.len() as i64)],
    )
    .with_value(Konst::Int(dims))])
}

pub fn size(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let n = ovf(cx.input(0)?.numel(), "element count")?;
    Ok(vec![
        Fact::new(Some(DType::I64), vec![]).with_value(Konst::Int(vec![n]))
    ])
}

pub fn constant_of_shape(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let shape = cx.value(0)?.as_dims().ok_or(InferError::Unknown)?;
    if let Some(bad) = shape.iter().find_map(|d| d.as_i64().filter(|v| *v < 0)) {
        return invalid(format!("negative dimension {bad} in the requested shape"));
    }
    let (dtype, fill) = match cx.node.attrs.tensor_opt("value")? {
        Some(t) => (t.dtype, t.read_values(1).map(Konst::from_values)),
        None => (DType::F32, Some(Konst::Float(vec![0.0]))),
    };
    let n = Dim::product(&shape).and_then(|d| d.as_u64());
    let value = match (fill, n) {
        (Some(Konst::Int(v)), Some(n)) if n <= MAX_FOLD_ELEMS && v.len() == 1 => {
            Some(Konst::Int(vec![v[0].clone(); n as usize]))
        }
        (Some(Konst::Float(v)), Some(n)) if n <= MAX_FOLD_ELEMS && v.len() == 1 => {
            Some(Konst::Float(vec![v[0]; n as usize]))
        }
        _ => None,
    };
    Ok(vec![Fact {
        dtype: Some(dtype),
        shape: Some(shape.into()),
        value: value.map(Box::new),
    }])
}

/// `Range`: `max(ceil((limit - start) / delta), 0)` elements.
pub fn range(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let dtype = cx.dtype(0);
    let start = cx.value(0)?;
    let limit = cx.value(1)?;
    let delta = cx.value(2)?;
    if let (Some(s), Some(l), Some(d)) = (start.as_f64s(), limit.as_f64s(), delta.as_f64s()) {
        let (s, l, d) = (
            *s.first().ok_or(InferError::Unknown)?,
            *l.first().ok_or(InferError::Unknown)?,
            *d.first().ok_or(InferError::Unknown)?,
        );
        if d == 0.0 {
            return invalid("delta is 0");
        }
        let n = ((l - s) / d).ceil().max(0.0);
        if n > i64::MAX as f64 {
            return invalid("range length overflows");
        }
        let n = n as i64;
        let value = (n as u64 <= MAX_FOLD_ELEMS).then(|| match start {
            Konst::Int(_) => Konst::Int(
                (0..n)
                    .map(|i| Dim::known((s + d * i as f64) as i64))
                    .collect(),
            ),
            Konst::Float(_) => Konst::Float((0..n).map(|i| s + d * i as f64).collect()),
        });
        return Ok(vec![Fact {
            dtype,
            shape: Some(vec![Dim::known(n)].into()),
            value: value.map(Box::new),
        }]);
    }
    // symbolic: range(start, limit, delta) with known start and delta
    let s = start
        .as_dims()
        .and_then(|v| v.first().cloned())
        .ok_or(InferError::Unknown)?;
    let l = limit
        .as_dims()
        .and_then(|v| v.first().cloned())
        .ok_or(InferError::Unknown)?;
    let d = delta
        .as_i64s()
        .and_then(|v| v.first().copied())
        .ok_or(InferError::Unknown)?;
    if d <= 0 {
        return Err(InferError::Unknown);
    }
    let len = ovf(
        l.checked_sub(&s).and_then(|x| x.ceil_div(d)),
        "range length",
    )?;
    Ok(vec![Fact::new(dtype, vec![len])])
}

/// `RandomNormal`, `RandomUniform`: the `shape` attribute, `dtype` (float32 by default).
pub fn random(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let r = attrs!(cx, RandomNormal | RandomUniform);
    let (shape, dtype) = (&r.shape, r.dtype);
    Ok(vec![Fact::new(
        Some(dtype),
        shape.iter().map(|&d| Dim::known(d)).collect(),
    )])
}

/// `RandomNormalLike`, `RandomUniformLike`, `Bernoulli`: the input's shape, `dtype` or the input's.
pub fn random_like(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let r = attrs!(cx, RandomNormalLike | RandomUniformLike | Bernoulli);
    let x = cx.input(0)?;
    let dtype = r.dtype.or(x.dtype);
    Ok(vec![Fact {
        dtype,
        shape: x.shape.clone(),
        value: None,
    }])
}

/// `Multinomial`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Multinomial {
    pub sample_size: i64,
    pub dtype: DType,
}

impl FromAttrs for Multinomial {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let sample_size = r.int("sample_size", 1)?;
        if sample_size < 1 {
            return Err(format!(
                "attribute 'sample_size' must be positive, found {sample_size}"
            ));
        }
        Ok(Multinomial {
            sample_size,
            dtype: r.dtype("dtype")?.unwrap_or(DType::I32),
        })
    }
}

/// `Multinomial`: `sample_size` class draws per row of `[batch, classes]`, `[batch, sample_size]`.
pub fn multinomial(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let m = attrs!(cx, Multinomial);
    let s = cx.shape(0)?;
    if s.len() != 2 {
        return invalid(format!(
            "input has rank {}, expected 2 (batch, classes)",
            s.len()
        ));
    }
    Ok(vec![Fact::new(
        Some(m.dtype),
        vec![s[0].clone(), Dim::known(m.sample_size)],
    )])
}
