//! Matrix products: `Gemm`, `MatMul` and `Einsum`.

use candle_core::Tensor as CTensor;

use super::{advance, attrs, checked_product, one, tensor, values, At, Cx, OpResult};
use crate::analysis::ops::linalg::parse_einsum;
use crate::analysis::ops::InferError;
use crate::verify::exec::MAX_ELEMENTS;
use rayon::prelude::*;

/// At most this many rows of A, and at least this many weight elements (8 MiB of f64), make a
/// Gemm a split product: memory-bound, so worth both cores.
const FEW_ROWS: usize = 8;
const SPLIT_WEIGHT: usize = 1 << 20;

pub fn gemm(cx: &Cx) -> OpResult {
    let g = attrs!(cx, Gemm);
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    if a.rank() != 2 || b.rank() != 2 {
        return Err(cx.fail(format!(
            "A and B must be matrices, found shapes {:?} and {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let a = if g.trans_a { a.t().at(cx)? } else { a.clone() };
    let b = if g.trans_b { b.t().at(cx)? } else { b.clone() };
    let (m, k) = (a.dims()[0], a.dims()[1]);
    let (k2, n) = (b.dims()[0], b.dims()[1]);
    if k != k2 {
        return Err(cx.fail(format!(
            "inner dimensions differ: A' is {m}x{k}, B' is {k2}x{n}"
        )));
    }
    // candle multiplies a transposed view in place: copying a transposed 4096 x 25088 weight
    // first (strided, cache-hostile) cost more than the product itself
    let product = |b: &CTensor| match a.matmul(b) {
        Ok(y) => Ok(y),
        Err(_) => a.contiguous()?.matmul(&b.contiguous()?),
    };
    let mut y = if m <= FEW_ROWS && k.saturating_mul(n) >= SPLIT_WEIGHT {
        // a few rows times a large weight reads the weight once, on one core: the output's
        // columns are split among the cores instead (each column's sum is the same computation)
        let parts = rayon::current_num_threads().clamp(1, n);
        let share = n.div_ceil(parts);
        let cols: Vec<CTensor> = (0..n)
            .step_by(share)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|start| product(&b.narrow(1, start, share.min(n - start))?))
            .collect::<candle_core::Result<_>>()
            .at(cx)?;
        CTensor::cat(&cols, 1).at(cx)?
    } else {
        product(&b).at(cx)?
    };
    let alpha = f64::from(g.alpha);
    if alpha != 1.0 {
        y = y.affine(alpha, 0.0).at(cx)?;
    }
    if let Some(c) = cx.opt(2) {
        let beta = f64::from(g.beta);
        let c = if beta != 1.0 {
            c.affine(beta, 0.0).at(cx)?
        } else {
            c.clone()
        };
        y = y.broadcast_add(&c).at(cx)?;
        if y.dims() != [m, n] {
            return Err(cx.fail(format!(
                "C of shape {:?} does not broadcast to {m}x{n}",
                c.dims()
            )));
        }
    }
    one(y)
}

/// Numpy's matmul: batch dims broadcast, a 1-D operand is a row (left) or a column (right) that
/// the result drops again.
pub fn matmul(cx: &Cx) -> OpResult {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    if a.rank() == 0 || b.rank() == 0 {
        return Err(cx.fail("MatMul operands must have rank 1 or more"));
    }
    let a2 = if a.rank() == 1 {
        a.unsqueeze(0).at(cx)?
    } else {
        a.clone()
    };
    let b2 = if b.rank() == 1 {
        b.unsqueeze(1).at(cx)?
    } else {
        b.clone()
    };
    let k = a2.dims()[a2.rank() - 1];
    let k2 = b2.dims()[b2.rank() - 2];
    if k != k2 {
        return Err(cx.fail(format!(
            "inner dimensions differ: {:?} x {:?}",
            a.dims(),
            b.dims()
        )));
    }
    let mut y = a2
        .contiguous()
        .at(cx)?
        .broadcast_matmul(&b2.contiguous().at(cx)?)
        .at(cx)?;
    if a.rank() == 1 {
        y = y.squeeze(y.rank() - 2).at(cx)?;
    }
    if b.rank() == 1 {
        y = y.squeeze(y.rank() - 1).at(cx)?;
    }
    one(y)
}

/// The most products an `Einsum` may sum (about a minute of this loop).
const MAX_WORK: usize = 1 << 34;

/// `Einsum` by its definition: each output element sums, over the letters only the operands
/// name, the product of the operands at their indices (a letter of size 1 broadcasts, a letter
/// repeated in one operand takes its diagonal). The equation is parsed as the analysis parses it.
pub fn einsum(cx: &Cx) -> OpResult {
    let attrs = attrs!(cx, Einsum);
    let operands: Vec<&CTensor> = (0..cx.inputs.len())
        .map(|i| cx.input(i))
        .collect::<Result<_, _>>()?;
    let ranks: Vec<usize> = operands.iter().map(|t| t.rank()).collect();
    let eq = parse_einsum(&attrs.equation, &ranks).map_err(|e| match e {
        InferError::Invalid(m) => cx.fail(m),
        InferError::Unknown => cx.fail("the equation cannot be read"),
    })?;
    // the output's letters first, then the summed ones
    let mut letters = eq.output.clone();
    for (i, c) in eq.output.iter().enumerate() {
        if eq.output[..i].contains(c) {
            return Err(cx.fail(format!("output index '{c}' is repeated")));
        }
        if !eq.inputs.iter().flatten().any(|x| x == c) {
            return Err(cx.fail(format!("output index '{c}' appears in no operand")));
        }
    }
    for c in eq.inputs.iter().flatten() {
        if !letters.contains(c) {
            letters.push(*c);
        }
    }
    let at = |c: &char| letters.iter().position(|l| l == c).unwrap_or(0);
    let mut sizes = vec![1usize; letters.len()];
    for (t, names) in operands.iter().zip(&eq.inputs) {
        for (&d, c) in t.dims().iter().zip(names) {
            let s = &mut sizes[at(c)];
            match (*s, d) {
                (s, d) if s == d => {}
                (1, d) => *s = d,
                (_, 1) => {}
                (s, d) => {
                    return Err(cx.fail(format!("index '{c}' has sizes {s} and {d}")));
                }
            }
        }
    }
    // per operand, the step of each letter in its row-major data (0 where it broadcasts)
    let steps: Vec<Vec<usize>> = operands
        .iter()
        .zip(&eq.inputs)
        .map(|(t, names)| {
            let mut step = vec![0usize; letters.len()];
            let mut stride = 1;
            for (&d, c) in t.dims().iter().zip(names).rev() {
                if d != 1 {
                    step[at(c)] += stride;
                }
                stride *= d;
            }
            step
        })
        .collect();
    let data: Vec<Vec<f64>> = operands
        .iter()
        .map(|t| values(t).at(cx))
        .collect::<Result<_, _>>()?;
    let n_out = eq.output.len();
    let out_dims = sizes[..n_out].to_vec();
    let out_size = checked_product(&out_dims).filter(|&n| n <= MAX_ELEMENTS);
    let inner = checked_product(&sizes[n_out..]);
    // every (output, summed) index combination is one step: bound the work as well as the output
    let work = out_size.zip(inner).and_then(|(o, i)| o.checked_mul(i));
    let (Some(out_size), Some(inner), Some(_)) = (out_size, inner, work.filter(|&w| w <= MAX_WORK))
    else {
        return Err(cx.fail("the einsum is too large to evaluate"));
    };
    let mut y = vec![0.0; out_size];
    if out_size > 0 && inner > 0 {
        let mut idx = vec![0usize; letters.len()];
        let mut flat = 0usize;
        loop {
            let mut p = 1.0;
            for (d, step) in data.iter().zip(&steps) {
                let off: usize = idx.iter().zip(step).map(|(i, s)| i * s).sum();
                p *= d.get(off).copied().unwrap_or(f64::NAN);
            }
            if let Some(v) = y.get_mut(flat / inner) {
                *v += p;
            }
            flat += 1;
            if !advance(&mut idx, &sizes) {
                break;
            }
        }
    }
    one(tensor(y, &out_dims).at(cx)?)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, G};
    use crate::ir::Attr;

    #[test]
    fn gemm_with_trans_b_alpha_and_beta() {
        let mut g = G::new();
        g.input("a", &[2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
            .init("b", &[2, 3], vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
            .init("c", &[2], vec![1.0, 2.0])
            .node(
                "Gemm",
                &["a", "b", "c"],
                &["y"],
                vec![
                    ("transB", Attr::Int(1)),
                    ("alpha", Attr::Float(2.0)),
                    ("beta", Attr::Float(0.5)),
                ],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [2, 2]);
        assert_close(&flat(&y), &[8.5, 5.0, 20.5, 11.0]);
    }

    #[test]
    fn gemm_of_few_rows_by_a_large_weight_splits_its_columns() {
        // 2 x 1024 times a weight of 1024 x 1025 (stored transposed, transB, or as it is): over
        // the split threshold, with an odd column count so that the shares differ
        let (m, k, n) = (2usize, 1024usize, 1025usize);
        let a: Vec<f64> = (0..m * k).map(|i| (i % 17) as f64 * 0.25 - 2.0).collect();
        // B[t, j], the weight as the product reads it
        let b = |t: usize, j: usize| ((t * n + j) % 13) as f32 * 0.5 - 3.0;
        let c: Vec<f32> = (0..n).map(|j| j as f32).collect();
        let want: Vec<f64> = (0..m * n)
            .map(|i| {
                let (r, j) = (i / n, i % n);
                (0..k).map(|t| a[r * k + t] * b(t, j) as f64).sum::<f64>() + c[j] as f64
            })
            .collect();
        for trans_b in [true, false] {
            let (dims, w): (Vec<u64>, Vec<f32>) = if trans_b {
                (
                    vec![n as u64, k as u64],
                    (0..n * k).map(|i| b(i % k, i / k)).collect(),
                )
            } else {
                (
                    vec![k as u64, n as u64],
                    (0..k * n).map(|i| b(i / n, i % n)).collect(),
                )
            };
            let mut g = G::new();
            g.input("a", &[m, k], a.clone())
                .init("w", &dims, w)
                .init("c", &[n as u64], c.clone())
                .node(
                    "Gemm",
                    &["a", "w", "c"],
                    &["y"],
                    vec![("transB", Attr::Int(i64::from(trans_b)))],
                );
            let y = g.run1("y");
            assert_eq!(y.dims(), [m, n]);
            assert_close(&flat(&y), &want);
        }
    }

    #[test]
    fn matmul_broadcasts_batches_and_vectors() {
        // [2, 1, 2] x [2, 2] (broadcast) and [2] x [2, 2, 1] (vector lhs)
        let mut g = G::new();
        g.input("a", &[2, 1, 2], vec![1.0, 2.0, 3.0, 4.0])
            .init("b", &[2, 2], vec![1.0, 10.0, 100.0, 1000.0])
            .init("v", &[2], vec![1.0, -1.0])
            .init("m", &[2, 2, 1], vec![1.0, 2.0, 5.0, 3.0])
            .node("MatMul", &["a", "b"], &["y"], vec![])
            .node("MatMul", &["v", "m"], &["z"], vec![]);
        let out = g.run(&["y", "z"]).unwrap();
        assert_eq!(out[0].dims(), [2, 1, 2]);
        assert_close(&flat(&out[0]), &[201.0, 2010.0, 403.0, 4030.0]);
        assert_eq!(out[1].dims(), [2, 1]);
        assert_close(&flat(&out[1]), &[-1.0, 2.0]);
    }

    fn einsum(eq: &str, a: (&[u64], Vec<f32>), b: Option<(&[u64], Vec<f32>)>) -> Vec<f64> {
        let mut g = G::new();
        g.init("a", a.0, a.1);
        let mut ins = vec!["a"];
        if let Some((dims, v)) = b {
            g.init("b", dims, v);
            ins.push("b");
        }
        g.node(
            "Einsum",
            &ins,
            &["y"],
            vec![("equation", Attr::String(eq.as_bytes().to_vec()))],
        );
        flat(&g.run1("y"))
    }

    #[test]
    fn einsum_products_sums_and_diagonals() {
        let a = || (&[2u64, 2][..], vec![1.0, 2.0, 3.0, 4.0]);
        let b = || Some((&[2u64, 2][..], vec![0.0, 1.0, 1.0, 0.0]));
        // a matmul, explicit and implicit; a transposed one
        assert_close(&einsum("ij,jk->ik", a(), b()), &[2.0, 1.0, 4.0, 3.0]);
        assert_close(&einsum("ij,jk", a(), b()), &[2.0, 1.0, 4.0, 3.0]);
        assert_close(&einsum("ij,kj->ik", a(), b()), &[2.0, 1.0, 4.0, 3.0]);
        // diagonal, trace, transpose, full sum
        assert_close(&einsum("ii->i", a(), None), &[1.0, 4.0]);
        assert_close(&einsum("ii", a(), None), &[5.0]);
        assert_close(&einsum("ij->ji", a(), None), &[1.0, 3.0, 2.0, 4.0]);
        assert_close(&einsum("ij->", a(), None), &[10.0]);
        // batched with an ellipsis
        let x = (&[2u64, 1, 2][..], vec![1.0, 2.0, 3.0, 4.0]);
        assert_close(&einsum("...ij,jk->...ik", x, b()), &[2.0, 1.0, 4.0, 3.0]);
    }
}
