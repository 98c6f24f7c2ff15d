//! Matrix products: `Gemm` and `MatMul`.

use super::{attrs, one, At, Cx, OpResult};

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
    let mut y = match a.matmul(&b) {
        Ok(y) => y,
        Err(_) => a
            .contiguous()
            .at(cx)?
            .matmul(&b.contiguous().at(cx)?)
            .at(cx)?,
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
}
