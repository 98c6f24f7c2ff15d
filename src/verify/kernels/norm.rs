//! Normalisation: `BatchNormalization` (inference), `InstanceNormalization` and
//! `LayerNormalization`.

use candle_core::Tensor as CTensor;

use super::{attrs, one, At, Cx, OpResult};
use crate::verify::exec::ExecError;

/// `(x - mean) / sqrt(var + epsilon) * scale + B` per channel: with the running statistics in
/// inference; in training mode (opset 14 on) with the batch's (the population variance), and the
/// running statistics updated as `running · momentum + batch · (1 - momentum)`.
pub fn batch_norm(cx: &Cx) -> OpResult {
    let b = attrs!(cx, BatchNormalization);
    let x = cx.input(0)?;
    if x.rank() < 2 {
        return Err(cx.fail(format!("input has rank {}, expected at least 2", x.rank())));
    }
    let c = x.dims()[1];
    let mut shape = vec![1, c];
    shape.resize(x.rank(), 1);
    let param = |i: usize, name: &str| -> Result<CTensor, ExecError> {
        let t = cx.input(i)?;
        if t.dims() != [c] {
            return Err(cx.fail(format!("{name} has shape {:?}, expected [{c}]", t.dims())));
        }
        t.reshape(shape.as_slice()).at(cx)
    };
    let (scale, bias) = (param(1, "scale")?, param(2, "B")?);
    let (running_mean, running_var) = (param(3, "mean")?, param(4, "var")?);
    let eps = f64::from(b.epsilon);
    let (mean, var) = if b.training_mode {
        let axes: Vec<usize> = std::iter::once(0).chain(2..x.rank()).collect();
        let mean = x.mean_keepdim(axes.clone()).at(cx)?;
        let var = x
            .broadcast_sub(&mean)
            .at(cx)?
            .sqr()
            .at(cx)?
            .mean_keepdim(axes)
            .at(cx)?;
        (mean, var)
    } else {
        (running_mean.clone(), running_var.clone())
    };
    let factor = scale
        .div(&var.affine(1.0, eps).at(cx)?.sqrt().at(cx)?)
        .at(cx)?;
    let y = x
        .broadcast_sub(&mean)
        .at(cx)?
        .broadcast_mul(&factor)
        .at(cx)?
        .broadcast_add(&bias)
        .at(cx)?;
    if !b.training_mode {
        return one(y);
    }
    let m = f64::from(b.momentum);
    let update = |running: &CTensor, batch: &CTensor| -> Result<CTensor, ExecError> {
        (running.affine(m, 0.0).at(cx)? + batch.affine(1.0 - m, 0.0).at(cx)?)
            .and_then(|t| t.reshape(c))
            .at(cx)
    };
    Ok(vec![
        y,
        update(&running_mean, &mean)?,
        update(&running_var, &var)?,
    ])
}

/// Normalises over the axes from `axis` on; the optional outputs are the mean and the inverse
/// standard deviation, with those axes kept as 1.
pub fn layer_norm(cx: &Cx) -> OpResult {
    let l = attrs!(cx, LayerNormalization);
    let x = cx.input(0)?;
    let axis = cx.axis(l.axis, x.rank())?;
    let eps = f64::from(l.epsilon);
    let axes: Vec<usize> = (axis..x.rank()).collect();
    let mean = x.mean_keepdim(axes.clone()).at(cx)?;
    let centred = x.broadcast_sub(&mean).at(cx)?;
    let var = centred.sqr().at(cx)?.mean_keepdim(axes).at(cx)?;
    let inv_std = var.affine(1.0, eps).at(cx)?.sqrt().at(cx)?.recip().at(cx)?;
    let mut y = centred
        .broadcast_mul(&inv_std)
        .at(cx)?
        .broadcast_mul(cx.input(1)?)
        .at(cx)?;
    if let Some(b) = cx.opt(2) {
        y = y.broadcast_add(b).at(cx)?;
    }
    if y.dims() != x.dims() {
        return Err(cx.fail(format!(
            "scale or bias do not broadcast to the input shape {:?}",
            x.dims()
        )));
    }
    Ok(vec![y, mean, inv_std])
}

/// Per sample and channel over the spatial axes: `(x - mean) / sqrt(var + epsilon) * scale + B`.
pub fn instance_norm(cx: &Cx) -> OpResult {
    let eps = f64::from(attrs!(cx, InstanceNormalization).epsilon);
    let x = cx.input(0)?;
    if x.rank() < 3 {
        return Err(cx.fail(format!("input has rank {}, expected at least 3", x.rank())));
    }
    let c = x.dims()[1];
    let mut shape = vec![1, c];
    shape.resize(x.rank(), 1);
    let param = |i: usize, name: &str| -> Result<CTensor, ExecError> {
        let t = cx.input(i)?;
        if t.dims() != [c] {
            return Err(cx.fail(format!("{name} has shape {:?}, expected [{c}]", t.dims())));
        }
        t.reshape(shape.as_slice()).at(cx)
    };
    let (scale, bias) = (param(1, "scale")?, param(2, "B")?);
    let axes: Vec<usize> = (2..x.rank()).collect();
    let mean = x.mean_keepdim(axes.clone()).at(cx)?;
    let centred = x.broadcast_sub(&mean).at(cx)?;
    let var = centred.sqr().at(cx)?.mean_keepdim(axes).at(cx)?;
    let y = centred
        .broadcast_div(&var.affine(1.0, eps).at(cx)?.sqrt().at(cx)?)
        .at(cx)?
        .broadcast_mul(&scale)
        .at(cx)?
        .broadcast_add(&bias)
        .at(cx)?;
    one(y)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, G};
    use crate::ir::Attr;

    #[test]
    fn batch_normalization_in_inference() {
        // channel 0: (x - 1) / sqrt(3 + 1) * 3 + 1; channel 1: (x - 3) / sqrt(0 + 1) * 0.5 - 1
        let mut g = G::new();
        g.input("x", &[1, 2, 1, 2], vec![1.0, 2.0, 3.0, 4.0])
            .init("s", &[2], vec![3.0, 0.5])
            .init("b", &[2], vec![1.0, -1.0])
            .init("m", &[2], vec![1.0, 3.0])
            .init("v", &[2], vec![3.0, 0.0])
            .node(
                "BatchNormalization",
                &["x", "s", "b", "m", "v"],
                &["y"],
                vec![("epsilon", Attr::Float(1.0))],
            );
        assert_close(&flat(&g.run1("y")), &[1.0, 2.5, -1.0, -0.5]);
    }

    #[test]
    fn layer_normalization_over_the_last_axis() {
        // row [1, 3]: mean 2, var 1 -> [-1, 1]; scaled by [2, 3], shifted by [0, 1]
        let mut g = G::new();
        g.input("x", &[2, 2], vec![1.0, 3.0, 5.0, 5.0])
            .init("s", &[2], vec![2.0, 3.0])
            .init("b", &[2], vec![0.0, 1.0])
            .node(
                "LayerNormalization",
                &["x", "s", "b"],
                &["y"],
                vec![("epsilon", Attr::Float(0.0))],
            );
        let y = flat(&g.run1("y"));
        assert_close(&y[..2], &[-2.0, 4.0]);
        assert!(
            y[2].is_nan(),
            "a constant row divides 0 by 0 without epsilon"
        );
    }

    #[test]
    fn instance_normalization_per_channel() {
        // channel 0 [1, 3]: mean 2, var 1; channel 1 [4, 4]: constant, 0 / sqrt(eps)
        let mut g = G::new();
        g.input("x", &[1, 2, 2], vec![1.0, 3.0, 4.0, 4.0])
            .init("s", &[2], vec![2.0, 1.0])
            .init("b", &[2], vec![0.5, -1.0])
            .node(
                "InstanceNormalization",
                &["x", "s", "b"],
                &["y"],
                vec![("epsilon", Attr::Float(0.0))],
            );
        let y = flat(&g.run1("y"));
        assert_close(&y[..2], &[-1.5, 2.5]);
        assert!(y[2].is_nan());
    }

    #[test]
    fn batch_normalization_in_training_mode() {
        // one channel [1, 3]: batch mean 2, variance 1; running [0, 1] -> 0.9 · r + 0.1 · batch
        let mut g = G::new();
        g.input("x", &[2, 1], vec![1.0, 3.0])
            .init("s", &[1], vec![1.0])
            .init("b", &[1], vec![0.0])
            .init("m", &[1], vec![0.0])
            .init("v", &[1], vec![1.0])
            .node(
                "BatchNormalization",
                &["x", "s", "b", "m", "v"],
                &["y", "rm", "rv"],
                vec![
                    ("epsilon", Attr::Float(0.0)),
                    ("training_mode", Attr::Int(1)),
                ],
            );
        let out = g.run(&["y", "rm", "rv"]).unwrap();
        assert_close(&flat(&out[0]), &[-1.0, 1.0]);
        // the default momentum is the float32 0.9
        let m = f64::from(0.9f32);
        assert_close(&flat(&out[1]), &[(1.0 - m) * 2.0]);
        assert_close(&flat(&out[2]), &[m + (1.0 - m)]);
    }
}
