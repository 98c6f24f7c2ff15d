//! Normalisation: `BatchNormalization`, `InstanceNormalization`, `LayerNormalization`, its RMS
//! variants, `GroupNormalization`, `LRN`, `MeanVarianceNormalization` and `LpNormalization`.

use candle_core::Tensor as CTensor;

use super::{attrs, one, values, At, Cx, OpResult};
use crate::verify::exec::ExecError;

/// `(x - mean) / sqrt(var + epsilon) * scale + B` per channel: with the running statistics in
/// inference; in training mode (opset 14 on) with the batch's (the population variance), and the
/// running statistics updated as `running · momentum + batch · (1 - momentum)`.
/// Input `i`, a per-channel `[C]` vector of `x`'s channel axis 1, shaped `[1, C, 1, ...]` to
/// broadcast against `x`.
fn channel_param(cx: &Cx, i: usize, name: &str, x: &CTensor) -> Result<CTensor, ExecError> {
    let c = x.dims()[1];
    let mut shape = vec![1, c];
    shape.resize(x.rank(), 1);
    let t = cx.input(i)?;
    if t.dims() != [c] {
        return Err(cx.fail(format!("{name} has shape {:?}, expected [{c}]", t.dims())));
    }
    t.reshape(shape.as_slice()).at(cx)
}

pub fn batch_norm(cx: &Cx) -> OpResult {
    let b = attrs!(cx, BatchNormalization);
    let x = cx.input(0)?;
    if x.rank() < 2 {
        return Err(cx.fail(format!("input has rank {}, expected at least 2", x.rank())));
    }
    let c = x.dims()[1];
    let param = |i: usize, name: &str| channel_param(cx, i, name, x);
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
    let param = |i: usize, name: &str| channel_param(cx, i, name, x);
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

/// `x / sqrt(mean(x²) + epsilon) · scale` over the axes from `axis` on (`RMSNormalization`,
/// `SimplifiedLayerNormalization`); the second output is the inverse root mean square.
pub fn rms_norm(cx: &Cx) -> OpResult {
    let l = attrs!(cx, RmsNormalization | SimplifiedLayerNormalization);
    let x = cx.input(0)?;
    let axis = cx.axis(l.axis, x.rank())?;
    let axes: Vec<usize> = (axis..x.rank()).collect();
    let ms = x.sqr().at(cx)?.mean_keepdim(axes).at(cx)?;
    let inv = ms
        .affine(1.0, f64::from(l.epsilon))
        .at(cx)?
        .sqrt()
        .at(cx)?
        .recip()
        .at(cx)?;
    let y = x
        .broadcast_mul(&inv)
        .at(cx)?
        .broadcast_mul(cx.input(1)?)
        .at(cx)?;
    if y.dims() != x.dims() {
        return Err(cx.fail(format!(
            "the scale does not broadcast to the input shape {:?}",
            x.dims()
        )));
    }
    Ok(vec![y, inv])
}

/// Per sample and group of channels over the group's channels and spatial axes; the scale and
/// bias are per channel (opset 21) or per group (opset 18), told apart by their length.
pub fn group_norm(cx: &Cx) -> OpResult {
    let gn = attrs!(cx, GroupNormalization);
    let x = cx.input(0)?;
    if x.rank() < 2 {
        return Err(cx.fail(format!("input has rank {}, expected at least 2", x.rank())));
    }
    let (n, c) = (x.dims()[0], x.dims()[1]);
    let groups = usize::try_from(gn.num_groups)
        .ok()
        .filter(|&g| g > 0 && c % g == 0)
        .ok_or_else(|| {
            cx.fail(format!(
                "{c} channels do not split into {} groups",
                gn.num_groups
            ))
        })?;
    let spatial = super::checked_product(&x.dims()[2..]).unwrap_or(0);
    let per = (c / groups) * spatial;
    let v = values(x).at(cx)?;
    let scale = values(cx.input(1)?).at(cx)?;
    let bias = values(cx.input(2)?).at(cx)?;
    let param = |p: &[f64], ch: usize| -> Result<f64, ExecError> {
        if p.len() == c {
            Ok(p[ch])
        } else if p.len() == groups {
            Ok(p[ch / (c / groups)])
        } else {
            Err(cx.fail(format!(
                "scale and bias have {} values, expected {c} or {groups}",
                p.len()
            )))
        }
    };
    let eps = f64::from(gn.epsilon);
    let mut y = vec![0.0; v.len()];
    for g in 0..n * groups {
        let part = &v[g * per..(g + 1) * per];
        let mean = part.iter().sum::<f64>() / per as f64;
        let var = part.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / per as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for (k, &t) in part.iter().enumerate() {
            let ch = (g % groups) * (c / groups) + k / spatial.max(1);
            y[g * per + k] = (t - mean) * inv * param(&scale, ch)? + param(&bias, ch)?;
        }
    }
    one(super::tensor(y, x.dims()).at(cx)?)
}

/// Local response normalisation across channels:
/// `x / (bias + alpha / size · Σ x²)^beta` over the `size` channels around each.
pub fn lrn(cx: &Cx) -> OpResult {
    let l = attrs!(cx, Lrn);
    let x = cx.input(0)?;
    if x.rank() < 3 {
        return Err(cx.fail(format!("input has rank {}, expected at least 3", x.rank())));
    }
    let (n, c) = (x.dims()[0], x.dims()[1]);
    let spatial = super::checked_product(&x.dims()[2..]).unwrap_or(0);
    let size = usize::try_from(l.size).unwrap_or(1);
    // floor((size - 1) / 2) channels before, ceil((size - 1) / 2) after
    let (before, after) = (size.saturating_sub(1) / 2, size / 2);
    let v = values(x).at(cx)?;
    let (alpha, beta, bias) = (f64::from(l.alpha), f64::from(l.beta), f64::from(l.bias));
    let mut y = vec![0.0; v.len()];
    for b in 0..n {
        for ch in 0..c {
            let lo = ch.saturating_sub(before);
            let hi = (ch + after).min(c - 1);
            for s in 0..spatial {
                let sq: f64 = (lo..=hi)
                    .map(|k| v[(b * c + k) * spatial + s].powi(2))
                    .sum();
                let at = (b * c + ch) * spatial + s;
                y[at] = v[at] / (bias + alpha / size as f64 * sq).powf(beta);
            }
        }
    }
    one(super::tensor(y, x.dims()).at(cx)?)
}

/// `(x - mean) / (sqrt(var) + 1e-9)` over the axes, as onnxruntime computes it (the ONNX
/// function body adds the same 1e-9).
pub fn mean_variance_norm(cx: &Cx) -> OpResult {
    let m = attrs!(cx, MeanVarianceNormalization);
    let x = cx.input(0)?;
    let axes = cx.axis_set(&m.axes, x.rank())?;
    let mean = x.mean_keepdim(axes.clone()).at(cx)?;
    let centred = x.broadcast_sub(&mean).at(cx)?;
    let var = centred.sqr().at(cx)?.mean_keepdim(axes).at(cx)?;
    let std = var.sqrt().at(cx)?.affine(1.0, 1e-9).at(cx)?;
    one(centred.broadcast_div(&std).at(cx)?)
}

/// `x / ‖x‖ₚ` along the axis (p = 1 or 2).
pub fn lp_norm(cx: &Cx) -> OpResult {
    let l = attrs!(cx, LpNormalization);
    let x = cx.input(0)?;
    let axis = cx.axis(l.axis, x.rank())?;
    let norm = if l.p == 1 {
        x.abs().and_then(|a| a.sum_keepdim(axis))
    } else {
        x.sqr()
            .and_then(|a| a.sum_keepdim(axis))
            .and_then(|a| a.sqrt())
    }
    .at(cx)?;
    one(x.broadcast_div(&norm).at(cx)?)
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
