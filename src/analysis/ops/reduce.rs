//! Reductions, arg-reductions, `TopK`, `NonZero`. Not counted in MACs.

use super::{axis, invalid, InferError, InferResult, OpCx};
use crate::analysis::fact::{Fact, Konst};
use crate::ir::{DType, Dim};

/// `Reduce*`: axes from the attribute (older opsets) or the second input (`ReduceSum` from 13,
/// the others from 18).
pub fn reduce(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let keep = cx.attr_int("keepdims", 1)? != 0;
    let axes = cx.ints_from_input_or_attr(1, "axes")?.unwrap_or_default();
    let axes: Vec<usize> = if axes.is_empty() {
        if cx.attr_int("noop_with_empty_axes", 0)? != 0 {
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
    let value = match (&x.value, s.len(), cx.node.op_type.as_str()) {
        (Some(Konst::Int(v)), 1, op) if axes == [0] => match op {
            "ReduceProd" => Dim::product(v).map(|d| Konst::Int(vec![d])),
            "ReduceSum" => Dim::sum(v).map(|d| Konst::Int(vec![d])),
            "ReduceMax" | "ReduceMin" => {
                let k: Option<Vec<i64>> = v.iter().map(Dim::as_i64).collect();
                k.and_then(|k| {
                    if op == "ReduceMax" {
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
    let s = cx.shape(0)?;
    let a = axis(cx.attr_int("axis", 0)?, s.len())?;
    let keep = cx.attr_int("keepdims", 1)? != 0;
    let mut out = s.to_vec();
    if keep {
        out[a] = Dim::known(1);
    } else {
        out.remove(a);
    }
    Ok(vec![Fact::new(Some(DType::I64), out)])
}

pub fn top_k(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let a = axis(cx.attr_int("axis", -1)?, s.len())?;
    let k = if cx.opset >= 10 {
        cx.value(1)?
            .as_dims()
            .and_then(|v| v.first().cloned())
            .ok_or(InferError::Unknown)?
    } else {
        Dim::known(cx.attr_int("k", -1)?)
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
