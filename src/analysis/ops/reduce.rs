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
    // a full reduction of a folded 1-D vector (numel computations)
    let value = match (&x.value, s.len()) {
        (Some(Konst::Int(v)), 1) if axes == [0] => match cx.op {
            Op::ReduceProd(_) => Dim::product(v).map(|d| Konst::Int(vec![d])),
            Op::ReduceSum(_) => Dim::sum(v).map(|d| Konst::Int(vec![d])),
            Op::ReduceMax(_) | Op::ReduceMin(_) => {
                let k: Option<Vec<i64>> = v.iter().map(Dim::as_i64).collect();
                k.and_then(|k| {
                    if matches!(cx.op, Op::ReduceMax(_)) {
                        k.into_iter().max()
                    } else {
                        k.into_iter().min()
                    }
                })
                .map(|m| Konst::Int(vec![Dim::known(m)]))
            }
            _ => None,
        },
        _ => None,
    };
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out),
        value,
    }])
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

/// `NonZero`: `[rank, count]`, the count known only at run time.
pub fn non_zero(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
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
