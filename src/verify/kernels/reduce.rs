//! Reductions (`Reduce*`), arg-reductions (`ArgMax`, `ArgMin`), `TopK` and `NonZero`.

use candle_core::Tensor as CTensor;

use super::{attrs, checked_product, one, tensor, values, At, Cx, OpResult};
use crate::analysis::ops::reduce::reduce_of;
use crate::analysis::ops::Op;
use crate::verify::exec::ExecError;

/// `x` with `axes` moved last, contiguous, as `(values, outer dims, inner size)`: each
/// consecutive run of `inner` values is one reduced group.
fn groups(
    cx: &Cx,
    x: &CTensor,
    axes: &[usize],
) -> Result<(Vec<f64>, Vec<usize>, usize), ExecError> {
    let kept: Vec<usize> = (0..x.rank()).filter(|a| !axes.contains(a)).collect();
    let perm: Vec<usize> = kept.iter().chain(axes).copied().collect();
    let moved = x.permute(perm).at(cx)?.contiguous().at(cx)?;
    let outer: Vec<usize> = kept.iter().map(|&a| x.dims()[a]).collect();
    let reduced: Vec<usize> = axes.iter().map(|&a| x.dims()[a]).collect();
    let inner = checked_product(&reduced).ok_or_else(|| cx.fail("size overflows"))?;
    Ok((values(&moved).at(cx)?, outer, inner))
}

/// The reduced shape: `axes` dropped, or kept as 1.
fn reduced_shape(dims: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    (0..dims.len())
        .filter_map(|a| match (axes.contains(&a), keep) {
            (false, _) => Some(dims[a]),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect()
}

/// `Reduce*`: axes from the input (`ReduceSum` from opset 13, the others from 18) or the
/// attribute; none means all, or nothing with `noop_with_empty_axes`.
pub fn reduce(cx: &Cx) -> OpResult {
    let r = reduce_of(cx.op).ok_or_else(|| cx.wrong_op(cx.op))?;
    let x = cx.input(0)?;
    let axes = match cx.ints_from_input_or(1, &r.axes)? {
        Some(a) if !a.is_empty() => cx.axis_set(&a, x.rank())?,
        _ if r.noop_with_empty_axes => return one(x.clone()),
        _ => (0..x.rank()).collect(),
    };
    let empty = axes.iter().any(|&a| x.dims()[a] == 0);
    let y = match cx.op {
        Op::ReduceMean(_) => x.mean_keepdim(axes.clone()).at(cx)?,
        Op::ReduceSum(_) => x.sum_keepdim(axes.clone()).at(cx)?,
        Op::ReduceSumSquare(_) => x.sqr().at(cx)?.sum_keepdim(axes.clone()).at(cx)?,
        Op::ReduceL1(_) => x.abs().at(cx)?.sum_keepdim(axes.clone()).at(cx)?,
        Op::ReduceL2(_) => x
            .sqr()
            .at(cx)?
            .sum_keepdim(axes.clone())
            .at(cx)?
            .sqrt()
            .at(cx)?,
        Op::ReduceLogSum(_) => x.sum_keepdim(axes.clone()).at(cx)?.log().at(cx)?,
        Op::ReduceMax(_) | Op::ReduceMin(_) | Op::ReduceProd(_) | Op::ReduceLogSumExp(_) => {
            if empty && !matches!(cx.op, Op::ReduceProd(_)) {
                return Err(cx.fail("the maximum or minimum of an empty axis is undefined"));
            }
            let (v, outer, inner) = groups(cx, x, &axes)?;
            let fold = |g: &[f64]| -> f64 {
                match cx.op {
                    Op::ReduceMax(_) => g.iter().copied().fold(f64::NEG_INFINITY, nan_max),
                    Op::ReduceMin(_) => g.iter().copied().fold(f64::INFINITY, nan_min),
                    Op::ReduceProd(_) => g.iter().product(),
                    _ => {
                        let m = g.iter().copied().fold(f64::NEG_INFINITY, nan_max);
                        if m.is_finite() {
                            m + g.iter().map(|v| (v - m).exp()).sum::<f64>().ln()
                        } else {
                            m
                        }
                    }
                }
            };
            let out: Vec<f64> = if inner == 0 {
                vec![1.0; checked_product(&outer).unwrap_or(0)]
            } else {
                v.chunks(inner).map(fold).collect()
            };
            tensor(out, &reduced_shape(x.dims(), &axes, true)).at(cx)?
        }
        other => return Err(cx.wrong_op(other)),
    };
    one(y
        .reshape(reduced_shape(x.dims(), &axes, r.keepdims))
        .at(cx)?)
}

/// The maximum that propagates NaN, as numpy's and onnxruntime's reductions do.
fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// `ArgMax` / `ArgMin`: the index of the first extreme along the axis (the last with
/// `select_last_index`).
pub fn arg_reduce(cx: &Cx) -> OpResult {
    let a = attrs!(cx, ArgMax | ArgMin);
    let max = matches!(cx.op, Op::ArgMax(_));
    let x = cx.input(0)?;
    let axis = cx.axis(a.axis, x.rank())?;
    if x.dims()[axis] == 0 {
        return Err(cx.fail("the extreme of an empty axis is undefined"));
    }
    let (v, _, inner) = groups(cx, x, &[axis])?;
    let better = |v: f64, best: f64| {
        if a.select_last_index {
            if max {
                v >= best
            } else {
                v <= best
            }
        } else if max {
            v > best
        } else {
            v < best
        }
    };
    let out: Vec<f64> = v
        .chunks(inner)
        .map(|g| {
            let mut at = 0;
            for (i, &v) in g.iter().enumerate().skip(1) {
                if better(v, g[at]) {
                    at = i;
                }
            }
            at as f64
        })
        .collect();
    one(tensor(out, &reduced_shape(x.dims(), &[axis], a.keepdims)).at(cx)?)
}

/// `TopK`: the `k` largest (or smallest) along the axis, sorted, with their indices; equal values
/// keep their order (the lower index first), as onnxruntime's sort does.
pub fn top_k(cx: &Cx) -> OpResult {
    let t = attrs!(cx, TopK);
    let x = cx.input(0)?;
    let axis = cx.axis(t.axis, x.rank())?;
    let k = match cx.input_ints(1)? {
        Some(v) => match v.as_slice() {
            [k] => *k,
            _ => return Err(cx.fail(format!("K must hold one value, found {v:?}"))),
        },
        None => t.k.ok_or_else(|| cx.fail("K is missing"))?,
    };
    let len = x.dims()[axis];
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= len)
        .ok_or_else(|| cx.fail(format!("K = {k} is out of range for an axis of {len}")))?;
    let (v, outer, _) = groups(cx, x, &[axis])?;
    let mut vals = Vec::new();
    let mut idx = Vec::new();
    let mut order: Vec<usize> = Vec::with_capacity(len);
    for g in v
        .chunks(len.max(1))
        .take(checked_product(&outer).unwrap_or(0))
    {
        order.clear();
        order.extend(0..g.len());
        order.sort_by(|&i, &j| {
            let o = g[i].total_cmp(&g[j]);
            if t.largest {
                o.reverse()
            } else {
                o
            }
        });
        for &i in order.iter().take(k) {
            vals.push(g[i]);
            idx.push(i as f64);
        }
    }
    // back from [outer..., k] to the axis' place
    let mut moved = outer.clone();
    moved.push(k);
    let rank = x.rank();
    let perm: Vec<usize> = (0..rank)
        .map(|a| match a.cmp(&axis) {
            std::cmp::Ordering::Less => a,
            std::cmp::Ordering::Equal => rank - 1,
            std::cmp::Ordering::Greater => a - 1,
        })
        .collect();
    let back = |data: Vec<f64>| -> Result<CTensor, ExecError> {
        tensor(data, &moved)
            .and_then(|t| t.permute(perm.clone()))
            .and_then(|t| t.contiguous())
            .at(cx)
    };
    Ok(vec![back(vals)?, back(idx)?])
}

/// The indices of the non-zero elements, `[rank, count]`, in row-major order.
pub fn non_zero(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let v = values(x).at(cx)?;
    let dims = x.dims().to_vec();
    let mut pos = vec![0usize; dims.len()];
    let mut hits: Vec<Vec<usize>> = Vec::new();
    for (k, &e) in v.iter().enumerate() {
        if k > 0 {
            super::advance(&mut pos, &dims);
        }
        if e != 0.0 {
            hits.push(pos.clone());
        }
    }
    let n = hits.len();
    let mut out = vec![0.0; dims.len() * n];
    for (j, p) in hits.iter().enumerate() {
        for (a, &i) in p.iter().enumerate() {
            out[a * n + j] = i as f64;
        }
    }
    one(tensor(out, &[dims.len(), n]).at(cx)?)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, ints, G};
    use crate::ir::Attr;

    #[test]
    fn reduce_mean_with_axes_as_input_or_attribute() {
        let mut g = G::new();
        g.input("x", &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 9.0])
            .init_i64("ax", vec![-1])
            .node(
                "ReduceMean",
                &["x", "ax"],
                &["a"],
                vec![("keepdims", Attr::Int(0))],
            )
            .node("ReduceMean", &["x"], &["b"], vec![("axes", ints(&[0]))])
            .node("ReduceMean", &["x"], &["c"], vec![])
            .node("ReduceMax", &["x"], &["d"], vec![("axes", ints(&[1]))]);
        let out = g.run(&["a", "b", "c", "d"]).unwrap();
        assert_eq!(out[0].dims(), [2]);
        assert_close(&flat(&out[0]), &[2.0, 6.0]);
        assert_eq!(out[1].dims(), [1, 3]);
        assert_close(&flat(&out[1]), &[2.5, 3.5, 6.0]);
        assert_eq!(out[2].dims(), [1, 1]);
        assert_close(&flat(&out[2]), &[4.0]);
        assert_close(&flat(&out[3]), &[3.0, 9.0]);
    }

    #[test]
    fn other_reductions() {
        let x = vec![1.0, -2.0, 3.0, 4.0, 0.5, -1.0];
        let run = |op: &str| {
            let mut g = G::new();
            g.input("x", &[2, 3], x.clone()).node(
                op,
                &["x"],
                &["y"],
                vec![("axes", ints(&[1])), ("keepdims", Attr::Int(0))],
            );
            flat(&g.run1("y"))
        };
        assert_close(&run("ReduceProd"), &[-6.0, -2.0]);
        assert_close(&run("ReduceMin"), &[-2.0, -1.0]);
        assert_close(&run("ReduceL1"), &[6.0, 5.5]);
        assert_close(&run("ReduceSumSquare"), &[14.0, 17.25]);
        assert_close(&run("ReduceL2"), &[14f64.sqrt(), 17.25f64.sqrt()]);
        let lse = |v: &[f64]| v.iter().map(|x| x.exp()).sum::<f64>().ln();
        assert_close(&run("ReduceLogSumExp"), &[lse(&x[..3]), lse(&x[3..])]);
    }

    #[test]
    fn arg_max_first_or_last_index() {
        let mut g = G::new();
        g.input("x", &[2, 3], vec![1.0, 5.0, 5.0, 7.0, 0.0, 7.0])
            .node("ArgMax", &["x"], &["a"], vec![("axis", Attr::Int(1))])
            .node(
                "ArgMax",
                &["x"],
                &["b"],
                vec![
                    ("axis", Attr::Int(-1)),
                    ("keepdims", Attr::Int(0)),
                    ("select_last_index", Attr::Int(1)),
                ],
            )
            .node("ArgMin", &["x"], &["c"], vec![]);
        let out = g.run(&["a", "b", "c"]).unwrap();
        assert_eq!(out[0].dims(), [2, 1]);
        assert_close(&flat(&out[0]), &[1.0, 0.0]);
        assert_eq!(out[1].dims(), [2]);
        assert_close(&flat(&out[1]), &[2.0, 2.0]);
        assert_close(&flat(&out[2]), &[0.0, 1.0, 0.0]);
    }

    #[test]
    fn top_k_along_an_inner_axis() {
        // [2, 3, 1]: along axis 1, the 2 smallest of [3, 1, 2] and [0, 0, 9]
        let mut g = G::new();
        g.input("x", &[2, 3, 1], vec![3.0, 1.0, 2.0, 0.0, 0.0, 9.0])
            .init_i64("k", vec![2])
            .node(
                "TopK",
                &["x", "k"],
                &["v", "i"],
                vec![("axis", Attr::Int(1)), ("largest", Attr::Int(0))],
            );
        let out = g.run(&["v", "i"]).unwrap();
        assert_eq!(out[0].dims(), [2, 2, 1]);
        assert_close(&flat(&out[0]), &[1.0, 2.0, 0.0, 0.0]);
        assert_close(&flat(&out[1]), &[1.0, 2.0, 0.0, 1.0]);
    }
}
