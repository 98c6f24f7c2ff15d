//! Reductions, arg-reductions, `TopK`, `NonZero`, `Unique`, `NonMaxSuppression`, and the losses
//! (`NegativeLogLikelihoodLoss`, `SoftmaxCrossEntropyLoss`). Not counted in MACs.

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
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

/// The reduction of a known value over `axes` (sums, products, extremes and means of shape
/// vectors, masks, small tables).
fn reduce_value(op: &Op, x: &Fact, axes: &[usize]) -> Option<Konst> {
    let v = x.value.as_deref()?;
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
    if let (Some(v), Some(shape)) = (x.value.as_deref().and_then(Konst::as_f64s), x.known_shape()) {
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
            Dim::sym(&format!("nonzero({})", cx.name)),
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

/// `NonMaxSuppression`'s box format.
#[derive(Clone, Debug, PartialEq)]
pub struct Nms {
    /// `[x_center, y_center, width, height]` boxes (else `[y1, x1, y2, x2]`).
    pub center_point_box: bool,
}

impl FromAttrs for Nms {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let c = AttrReader(a).int("center_point_box", 0)?;
        if !matches!(c, 0 | 1) {
            return Err(format!(
                "attribute 'center_point_box' must be 0 or 1, found {c}"
            ));
        }
        Ok(Nms {
            center_point_box: c == 1,
        })
    }
}

/// `NonMaxSuppression`: boxes `[B, S, 4]`, scores `[B, classes, S]`; the selected
/// `[batch, class, box]` triples `[num_selected, 3]` (int64), how many only the data decides.
pub fn non_max_suppression(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let b = cx.shape(0)?;
    let s = cx.shape(1)?;
    if b.len() != 3 || b[2].as_i64().is_some_and(|c| c != 4) {
        return invalid(format!(
            "boxes is {}, expected [batch, spatial, 4]",
            crate::ir::shape_to_string(b)
        ));
    }
    if s.len() != 3 {
        return invalid(format!("scores has rank {}, expected 3", s.len()));
    }
    for (what, x, y) in [("batch", &b[0], &s[0]), ("box count", &b[1], &s[2])] {
        if let (Some(p), Some(q)) = (x.as_i64(), y.as_i64()) {
            if p != q {
                return invalid(format!(
                    "boxes and scores differ in {what}: {p} against {q}"
                ));
            }
        }
    }
    // no box selected at all: a known empty result
    let none = cx
        .opt_input(2)
        .and_then(|f| f.value.as_deref())
        .and_then(|v| v.as_i64s())
        .is_some_and(|v| v.first().is_some_and(|&m| m <= 0));
    let n = if none {
        Dim::ZERO
    } else {
        super::movement::data_dependent("nms", cx)
    };
    Ok(vec![Fact::new(Some(DType::I64), vec![n, Dim::known(3)])])
}

/// `Unique`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Unique {
    /// The slices along this axis are compared (else the flattened elements).
    pub axis: Option<i64>,
    pub sorted: bool,
}

impl FromAttrs for Unique {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Unique {
            axis: r.int_opt("axis")?,
            sorted: r.flag("sorted", true)?,
        })
    }
}

/// `Unique`: Y (the distinct elements, or slices along `axis`), indices and counts `[U]`,
/// inverse_indices `[numel(X)]` (or `[X.shape[axis]]`); `U` only the data decides.
pub fn unique(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let u = attrs!(cx, Unique);
    let s = cx.shape(0)?;
    let n = super::movement::data_dependent("unique", cx);
    let (y, inverse) = match u.axis {
        None => (
            vec![n.clone()],
            super::ovf(Dim::product(s), "element count")?,
        ),
        Some(a) => {
            let a = axis(a, s.len())?;
            let mut y = s.to_vec();
            y[a] = n.clone();
            (y, s[a].clone())
        }
    };
    let i64s = |shape: Vec<Dim>| Fact::new(Some(DType::I64), shape);
    Ok(vec![
        Fact::new(cx.dtype(0), y),
        i64s(vec![n.clone()]),
        i64s(vec![inverse]),
        i64s(vec![n]),
    ])
}

crate::named_enum! {
    /// How a loss reduces over its elements.
    pub enum LossReduction {
        /// One loss per element.
        None = "none",
        /// Their sum.
        Sum = "sum",
        /// Their (weighted) mean.
        Mean = "mean",
    }
}

/// The attributes of `NegativeLogLikelihoodLoss` and `SoftmaxCrossEntropyLoss`.
#[derive(Clone, Debug, PartialEq)]
pub struct Loss {
    pub reduction: LossReduction,
    pub ignore_index: Option<i64>,
}

impl FromAttrs for Loss {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let reduction = match r.string("reduction")? {
            None => LossReduction::Mean,
            Some(s) => s
                .parse()
                .map_err(|e| format!("attribute 'reduction': {e}"))?,
        };
        Ok(Loss {
            reduction,
            ignore_index: r.int_opt("ignore_index")?,
        })
    }
}

/// `NegativeLogLikelihoodLoss` (input `[N, C, d...]`, target `[N, d...]`): the loss `[N, d...]`
/// with `reduction = none`, a scalar otherwise. `SoftmaxCrossEntropyLoss` also returns the
/// log-probabilities, the scores' shape.
pub fn loss(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let l = attrs!(cx, NegativeLogLikelihoodLoss | SoftmaxCrossEntropyLoss);
    let x = cx.shape(0)?;
    if x.len() < 2 {
        return invalid(format!(
            "input has rank {}, expected at least 2 (N, C, ...)",
            x.len()
        ));
    }
    let mut per: Vec<Dim> = x.to_vec();
    per.remove(1);
    if let Some(t) = cx.opt_input(1).and_then(|f| f.shape.as_deref()) {
        if t.len() != per.len()
            || t.iter()
                .zip(&per)
                .any(|(a, b)| a.as_i64().zip(b.as_i64()).is_some_and(|(p, q)| p != q))
        {
            return invalid(format!(
                "target is {}, expected {} (the input without its class axis)",
                crate::ir::shape_to_string(t),
                crate::ir::shape_to_string(&per)
            ));
        }
    }
    let out = match l.reduction {
        LossReduction::None => per,
        _ => Vec::new(),
    };
    let mut facts = vec![Fact::new(cx.dtype(0), out)];
    if matches!(cx.op, Op::SoftmaxCrossEntropyLoss(_)) {
        facts.push(Fact::new(cx.dtype(0), x.to_vec()));
    }
    Ok(facts)
}

/// `nll_loss` keeps its input (the log-probabilities) and the target; `cross_entropy` is
/// `log_softmax` (which keeps its output, the log-probabilities) then `nll_loss`, so it keeps
/// the log-probabilities once and the target.
pub fn loss_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    let x = cx.node.input(0);
    if !cx.grad(x) {
        return Some(Vec::new());
    }
    let x = x?;
    let mut s = Vec::new();
    match (cx.op, cx.node.output(1)) {
        (Op::SoftmaxCrossEntropyLoss(_), Some(lp)) => s.push(Save::Value(lp)),
        (Op::SoftmaxCrossEntropyLoss(_), None) => s.push(Save::Own(cx.bytes_as(x, cx.dtype(x)))),
        _ => s.push(Save::Value(x)),
    }
    s.extend(cx.node.input(1).map(Save::Value));
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, i64s, run, shapes};
    use super::*;
    use crate::ir::Attr;

    #[test]
    fn selected_boxes_are_a_data_dependent_count() {
        let (out, _) = run(
            "NonMaxSuppression",
            vec![],
            vec![f32s(&[1, 6, 4]), f32s(&[1, 2, 6])],
            11,
        );
        let f = &out.as_ref().unwrap()[0];
        assert_eq!(f.dtype, Some(DType::I64));
        let s = f.shape.as_ref().unwrap();
        assert!(!s[0].is_known(), "never a made-up count: {s:?}");
        assert_eq!(s[1], Dim::known(3));
        // max_output_boxes_per_class = 0 selects nothing
        let (out, _) = run(
            "NonMaxSuppression",
            vec![],
            vec![f32s(&[1, 6, 4]), f32s(&[1, 2, 6]), i64s(&[0])],
            11,
        );
        assert_eq!(shapes(&out), ["[0,3]"]);
        let (out, _) = run(
            "NonMaxSuppression",
            vec![],
            vec![f32s(&[1, 6, 4]), f32s(&[1, 2, 5])],
            11,
        );
        assert!(shapes(&out)[0].contains("box count"), "{out:?}");
    }

    #[test]
    fn unique_sizes() {
        let (out, _) = run("Unique", vec![], vec![f32s(&[2, 3])], 11);
        assert_eq!(
            shapes(&out),
            ["[unique(n)]", "[unique(n)]", "[6]", "[unique(n)]"]
        );
        let (out, _) = run(
            "Unique",
            vec![("axis", Attr::Int(1))],
            vec![f32s(&[2, 3])],
            11,
        );
        assert_eq!(shapes(&out)[..3], ["[2,unique(n)]", "[unique(n)]", "[3]"]);
    }

    #[test]
    fn losses() {
        let none = || vec![("reduction", Attr::String(b"none".to_vec()))];
        let (out, _) = run(
            "NegativeLogLikelihoodLoss",
            none(),
            vec![f32s(&[2, 5, 3]), i64s(&[0, 1, 2])],
            22,
        );
        // a [3] target for a [2, 5, 3] input
        assert!(shapes(&out)[0].contains("class axis"), "{out:?}");
        let t = Some(Fact::new(
            Some(DType::I64),
            vec![Dim::known(2), Dim::known(3)],
        ));
        let (out, _) = run(
            "NegativeLogLikelihoodLoss",
            none(),
            vec![f32s(&[2, 5, 3]), t.clone()],
            22,
        );
        assert_eq!(shapes(&out), ["[2,3]"]);
        let (out, _) = run(
            "SoftmaxCrossEntropyLoss",
            vec![],
            vec![f32s(&[2, 5, 3]), t],
            13,
        );
        assert_eq!(shapes(&out), ["[]", "[2,5,3]"]);
    }
}
