//! Reductions, arg-reductions, `TopK`, `NonZero`. Not counted in MACs.

use super::{attrs, axis, invalid, AttrReader, FromAttrs, InferError, InferResult, Op, OpCx};
use crate::analysis::fact::{Fact, Konst};
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{Attrs, DType, Dim};

/// A `Reduce*` op's attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Reduce {
    pub keepdims: bool,
    /// The attribute form of the axes (before they became an input).
    pub axes: Option<Vec<i64>>,
    pub noop_with_empty_axes: bool,
}

impl FromAttrs for Reduce {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Reduce {
            keepdims: r.flag("keepdims", true)?,
            axes: r.ints("axes")?,
            noop_with_empty_axes: r.flag("noop_with_empty_axes", false)?,
        })
    }
}

/// The reduce attributes of an op, if it is a `Reduce*`.
pub fn reduce_of(op: &Op) -> Option<&Reduce> {
    match op {
        Op::ReduceL1(r)
        | Op::ReduceL2(r)
        | Op::ReduceLogSum(r)
        | Op::ReduceLogSumExp(r)
        | Op::ReduceMax(r)
        | Op::ReduceMean(r)
        | Op::ReduceMin(r)
        | Op::ReduceProd(r)
        | Op::ReduceSum(r)
        | Op::ReduceSumSquare(r) => Some(r),
        _ => None,
    }
}

/// `ArgMax` / `ArgMin`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgReduce {
    pub axis: i64,
    pub keepdims: bool,
    pub select_last_index: bool,
}

impl FromAttrs for ArgReduce {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(ArgReduce {
            axis: r.int("axis", 0)?,
            keepdims: r.flag("keepdims", true)?,
            select_last_index: r.flag("select_last_index", false)?,
        })
    }
}

/// `TopK`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    pub axis: i64,
    /// Before opset 10, `k` is an attribute.
    pub k: Option<i64>,
    pub largest: bool,
}

impl FromAttrs for TopK {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(TopK {
            axis: r.int("axis", -1)?,
            k: r.int_opt("k")?,
            largest: r.flag("largest", true)?,
        })
    }
}

/// `Reduce*`: axes from the attribute (older opsets) or the second input (`ReduceSum` from 13,
/// the others from 18).
pub fn reduce(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let r = reduce_of(cx.op).ok_or_else(|| InferError::Invalid("not a reduction".into()))?;
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let keep = r.keepdims;
    let axes = cx
        .ints_from_input_or(1, r.axes.as_deref())?
        .unwrap_or_default();
    let axes: Vec<usize> = if axes.is_empty() {
        if r.noop_with_empty_axes {
            return Ok(vec![x.clone()]);
        }
        (0..s.len()).collect()
    } else {
        axes.iter()
            .map(|&a| axis(a, s.len()))
            .collect::<InferResult<_>>()?
    };
    let mut out = Vec::new();
    for (i, d) in s.iter().enumerate() {
        if axes.contains(&i) {
            if keep {
                out.push(Dim::known(1));
            }
        } else {
            out.push(d.clone());
        }
    }
    let value = reduce_value(cx.op, x, &axes);
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out),
        value,
    }])
}

/// The reduction of a known value over `axes` (sums, products, extremes and means of shape
/// vectors, masks, small tables).
fn reduce_value(op: &Op, x: &Fact, axes: &[usize]) -> Option<Konst> {
    let v = x.value.as_ref()?;
    let shape = x.known_shape()?;
    if shape.iter().product::<u64>() != v.len() as u64 {
        return None;
    }
    // the output element each input element falls in
    let out_len: u64 = shape
        .iter()
        .enumerate()
        .filter(|(i, _)| !axes.contains(i))
        .map(|(_, &d)| d)
        .product();
    let mut target = Vec::with_capacity(v.len());
    for flat in 0..v.len() as u64 {
        let mut rest = flat;
        let mut o = 0u64;
        let mut scale = 1u64;
        for ax in (0..shape.len()).rev() {
            let c = rest % shape[ax].max(1);
            rest /= shape[ax].max(1);
            if !axes.contains(&ax) {
                o += c * scale;
                scale *= shape[ax];
            }
        }
        target.push(o as usize);
    }
    let n = out_len as usize;
    match (op, v) {
        (Op::ReduceSum(_) | Op::ReduceProd(_), Konst::Int(d)) => {
            let prod = matches!(op, Op::ReduceProd(_));
            let mut acc = vec![Dim::known(i64::from(prod)); n];
            for (e, &t) in d.iter().zip(&target) {
                acc[t] = if prod {
                    acc[t].checked_mul(e)?
                } else {
                    acc[t].checked_add(e)?
                };
            }
            Some(Konst::Int(acc))
        }
        (Op::ReduceMax(_) | Op::ReduceMin(_), Konst::Int(d)) => {
            let max = matches!(op, Op::ReduceMax(_));
            let mut acc: Vec<Option<i64>> = vec![None; n];
            for (e, &t) in d.iter().zip(&target) {
                let e = e.as_i64()?;
                acc[t] = Some(match acc[t] {
                    None => e,
                    Some(a) if max => a.max(e),
                    Some(a) => a.min(e),
                });
            }
            Some(Konst::Int(
                acc.into_iter()
                    .map(|a| a.map(Dim::known))
                    .collect::<Option<_>>()?,
            ))
        }
        (
            Op::ReduceSum(_)
            | Op::ReduceProd(_)
            | Op::ReduceMax(_)
            | Op::ReduceMin(_)
            | Op::ReduceMean(_),
            _,
        ) => {
            let f = v.as_f64s()?;
            let mut acc: Vec<Option<f64>> = vec![None; n];
            let mut count = vec![0u64; n];
            for (&e, &t) in f.iter().zip(&target) {
                count[t] += 1;
                acc[t] = Some(match (acc[t], op) {
                    (None, _) => e,
                    (Some(a), Op::ReduceProd(_)) => a * e,
                    (Some(a), Op::ReduceMax(_)) => a.max(e),
                    (Some(a), Op::ReduceMin(_)) => a.min(e),
                    (Some(a), _) => a + e,
                });
            }
            let mut out: Vec<f64> = acc
                .into_iter()
                .map(|a| a.or(matches!(op, Op::ReduceSum(_) | Op::ReduceMean(_)).then_some(0.0)))
                .collect::<Option<_>>()?;
            if matches!(op, Op::ReduceMean(_)) {
                for (o, &c) in out.iter_mut().zip(&count) {
                    *o /= c.max(1) as f64;
                }
            }
            Some(Konst::Float(out))
        }
        _ => None,
    }
}

/// `ArgMax`, `ArgMin`: int64 indices with the axis reduced.
pub fn arg(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let r = attrs!(cx, ArgMax | ArgMin);
    let s = cx.shape(0)?;
    let a = axis(r.axis, s.len())?;
    let keep = r.keepdims;
    let mut out = s.to_vec();
    if keep {
        out[a] = Dim::known(1);
    } else {
        out.remove(a);
    }
    Ok(vec![Fact::new(Some(DType::I64), out)])
}

pub fn top_k(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let t = attrs!(cx, TopK);
    let s = cx.shape(0)?;
    let a = axis(t.axis, s.len())?;
    let k = if cx.opset >= 10 {
        cx.value(1)?
            .as_dims()
            .and_then(|v| v.first().cloned())
            .ok_or(InferError::Unknown)?
    } else {
        Dim::known(t.k.unwrap_or(-1))
    };
    if let (Some(kv), Some(d)) = (k.as_i64(), s[a].as_i64()) {
        if kv < 0 || kv > d {
            return invalid(format!("k = {kv} for an axis of size {d}"));
        }
    }
    let mut out = s.to_vec();
    out[a] = k;
    Ok(vec![
        Fact::new(cx.dtype(0), out.clone()),
        Fact::new(Some(DType::I64), out),
    ])
}

/// `NonZero`: `[rank, count]`, the count known only at run time; on a known value, the
/// coordinates themselves.
pub fn non_zero(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let x = cx.input(0)?;
    if let (Some(v), Some(shape)) = (x.value.as_ref().and_then(Konst::as_f64s), x.known_shape()) {
        let rank = shape.len();
        let hits: Vec<usize> = (0..v.len()).filter(|&i| v[i] != 0.0).collect();
        // row-major coordinates of each hit, axis by axis
        let mut coords = vec![Vec::with_capacity(hits.len()); rank];
        for &h in &hits {
            let mut rest = h as u64;
            for ax in (0..rank).rev() {
                coords[ax].push(Dim::known((rest % shape[ax].max(1)) as i64));
                rest /= shape[ax].max(1);
            }
        }
        return Ok(vec![Fact::new(
            Some(DType::I64),
            vec![Dim::known(rank as i64), Dim::known(hits.len() as i64)],
        )
        .with_value(Konst::Int(coords.into_iter().flatten().collect()))]);
    }
    Ok(vec![Fact::new(
        Some(DType::I64),
        vec![
            Dim::known(s.len() as i64),
            Dim::sym(&format!("nonzero({})", cx.node.name)),
        ],
    )])
}

/// `TopK` saves its int64 indices.
pub fn top_k_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.grad(cx.node.input(0)) {
        cx.node.output(1).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}
