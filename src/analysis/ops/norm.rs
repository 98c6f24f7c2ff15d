//! Normalisation layers. Not counted in MACs (element-wise work).
//!
//! Backward: every norm saves its input and two fp32 statistics per normalised group (mean and
//! inverse standard deviation), never its output; BatchNorm also keeps its running statistics.

use super::{attrs, axis, invalid, same_as_input, AttrReader, FromAttrs, InferResult, Op, OpCx};
use crate::analysis::fact::Fact;
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{Attrs, DType, Dim};

/// `BatchNormalization`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNorm {
    pub epsilon: f32,
    pub training_mode: bool,
    /// The running statistics' decay in training mode.
    pub momentum: f32,
}

impl FromAttrs for BatchNorm {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(BatchNorm {
            epsilon: r.float("epsilon", 1e-5)?,
            training_mode: r.flag("training_mode", false)?,
            momentum: r.float("momentum", 0.9)?,
        })
    }
}

/// `LayerNormalization`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    pub axis: i64,
    pub epsilon: f32,
    pub stash_type: DType,
}

impl FromAttrs for LayerNorm {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(LayerNorm {
            axis: r.int("axis", -1)?,
            epsilon: r.float("epsilon", 1e-5)?,
            stash_type: r.dtype("stash_type")?.unwrap_or(DType::F32),
        })
    }
}

/// `GroupNormalization`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupNorm {
    pub num_groups: i64,
    pub epsilon: f32,
}

impl FromAttrs for GroupNorm {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(GroupNorm {
            num_groups: r
                .int_opt("num_groups")?
                .ok_or("attribute 'num_groups' is required")?,
            epsilon: r.float("epsilon", 1e-5)?,
        })
    }
}

/// `LRN`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Lrn {
    pub size: i64,
    pub alpha: f32,
    pub beta: f32,
    pub bias: f32,
}

impl FromAttrs for Lrn {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let size = r.int_opt("size")?.ok_or("attribute 'size' is required")?;
        if size < 1 {
            return Err(format!("attribute 'size' must be positive, found {size}"));
        }
        Ok(Lrn {
            size,
            alpha: r.float("alpha", 1e-4)?,
            beta: r.float("beta", 0.75)?,
            bias: r.float("bias", 1.0)?,
        })
    }
}

/// `MeanVarianceNormalization`'s axes (`[0, 2, 3]` by default).
#[derive(Clone, Debug, PartialEq)]
pub struct Mvn {
    pub axes: Vec<i64>,
}

impl FromAttrs for Mvn {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Mvn {
            axes: AttrReader(a).ints("axes")?.unwrap_or_else(|| vec![0, 2, 3]),
        })
    }
}

/// `LpNormalization`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct LpNorm {
    pub axis: i64,
    pub p: i64,
}

impl FromAttrs for LpNorm {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let p = r.int("p", 2)?;
        if p != 1 && p != 2 {
            return Err(format!("attribute 'p' must be 1 or 2, found {p}"));
        }
        Ok(LpNorm {
            axis: r.int("axis", -1)?,
            p,
        })
    }
}

/// `InstanceNormalization`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceNorm {
    pub epsilon: f32,
}

impl FromAttrs for InstanceNorm {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(InstanceNorm {
            epsilon: AttrReader(a).float("epsilon", 1e-5)?,
        })
    }
}

/// `BatchNormalization`: `Y` like `X`; in training mode (or before opset 14, when the extra
/// outputs are requested) the running and saved statistics are per-channel vectors.
pub fn batch_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    if x.len() < 2 {
        return invalid(format!("input has rank {}, expected at least 2", x.len()));
    }
    let c = x[1].clone();
    for slot in 1..cx.n_inputs().min(5) {
        if let Some(s) = cx.opt_input(slot).and_then(|f| f.shape.as_deref()) {
            if s.len() != 1 || (s[0].is_known() && c.is_known() && s[0] != c) {
                return invalid(format!(
                    "input {slot} has shape {} but the input has {c} channels",
                    crate::ir::shape_to_string(s)
                ));
            }
        }
    }
    let stat = cx.dtype(3).or(cx.dtype(1)).or(cx.dtype(0));
    let mut out = vec![Fact::new(cx.dtype(0), x.to_vec())];
    for _ in 1..cx.node.outputs().len() {
        out.push(Fact::new(stat, vec![c.clone()]));
    }
    Ok(out)
}

/// `LayerNormalization`: `Y` like `X`; `Mean` and `InvStdDev` keep the leading axes and have size 1
/// on the normalised ones.
pub fn layer_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let ln = attrs!(cx, LayerNormalization);
    let x = cx.shape(0)?;
    let a = axis(ln.axis, x.len())?;
    let mut stat = x[..a].to_vec();
    stat.extend(std::iter::repeat_n(Dim::known(1), x.len() - a));
    Ok(vec![
        Fact::new(cx.dtype(0), x.to_vec()),
        Fact::new(Some(ln.stash_type), stat.clone()),
        Fact::new(Some(ln.stash_type), stat),
    ])
}

/// `InstanceNormalization`, `GroupNormalization`: output like the input.
pub fn same_shape_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    same_as_input(cx)
}

/// The input and the fp32 mean and inverse standard deviation of each normalised group.
pub fn saves(cx: &SaveCx) -> Option<Vec<Save>> {
    if !cx.out_grad() {
        return Some(Vec::new());
    }
    let x = cx.node.input(0)?;
    let shape = cx.fact(x).shape.as_ref()?;
    let mut s = Vec::new();
    // RMS norms keep one statistic (the inverse RMS), the others two (mean, inverse std)
    let per_group = match cx.op {
        Op::SimplifiedLayerNormalization(_) | Op::RmsNormalization(_) => 4,
        _ => 2 * 4,
    };
    let groups = match cx.op {
        Op::LayerNormalization(ln)
        | Op::SimplifiedLayerNormalization(ln)
        | Op::RmsNormalization(ln) => {
            let a = axis(ln.axis, shape.len()).ok()?;
            shape[..a]
                .iter()
                .map(|d| d.as_u64().unwrap_or(0))
                .fold(1u64, u64::saturating_mul)
        }
        op => {
            let n = shape.first()?.as_u64()?;
            let c = shape.get(1).and_then(|d| d.as_u64()).unwrap_or(1);
            match op {
                Op::BatchNormalization(_) => {
                    s.extend(
                        [cx.node.input(3), cx.node.input(4)]
                            .into_iter()
                            .flatten()
                            .map(Save::Buffer),
                    );
                    c
                }
                Op::InstanceNormalization(_) => n.saturating_mul(c),
                Op::GroupNormalization(g) => n.saturating_mul(g.num_groups.max(1) as u64),
                _ => return None,
            }
        }
    };
    s.push(Save::Value(x));
    s.push(Save::Own(groups.saturating_mul(per_group)));
    Some(s)
}

/// `LRN` as PyTorch's `F.local_response_norm` computes it (measured with saved_tensors_hooks,
/// torch 2.15): `x * x` keeps `x`; the squares, padded by `size - 1` channels, are averaged by
/// `avg_pool3d`, which keeps them (N x (C + size - 1) x spatial); `(k + alpha * avg) ^ beta` keeps
/// its base and its result; `x / div` keeps `x` and `div`. So `x`, two tensors of `x`'s size and
/// the padded squares, in `x`'s dtype.
pub fn lrn_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    let x = cx.node.input(0)?;
    if !cx.grad(Some(x)) {
        return Some(Vec::new());
    }
    let Op::Lrn(l) = cx.op else { return None };
    let shape = cx.fact(x).shape.as_ref()?;
    let dims: Vec<u64> = shape.iter().map(|d| d.as_u64()).collect::<Option<_>>()?;
    let (n, c) = (*dims.first()?, *dims.get(1)?);
    let spatial = dims[2..].iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let elem =
        cx.bytes_as(x, cx.dtype(x)) / dims.iter().fold(1u64, |a, &d| a.saturating_mul(d)).max(1);
    let padded = n
        .saturating_mul(c.saturating_add(l.size as u64 - 1))
        .saturating_mul(spatial)
        .saturating_mul(elem);
    let own = cx.bytes_as(x, cx.dtype(x));
    Some(vec![
        Save::Value(x),
        Save::Own(own),
        Save::Own(own),
        Save::Own(padded),
    ])
}

/// `MeanVarianceNormalization` as its definition composes it, `(x - mean) / sqrt(var + eps)`
/// (measured with saved_tensors_hooks, torch 2.15): `xc * xc` and the division keep the centred
/// `xc` (x's size), `sqrt` its result (one value per normalised group), which the division keeps
/// too.
pub fn mvn_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    let x = cx.node.input(0)?;
    if !cx.grad(Some(x)) {
        return Some(Vec::new());
    }
    let Op::MeanVarianceNormalization(m) = cx.op else {
        return None;
    };
    let shape = cx.fact(x).shape.as_ref()?;
    let dims: Vec<u64> = shape.iter().map(|d| d.as_u64()).collect::<Option<_>>()?;
    let numel = dims.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    let own = cx.bytes_as(x, cx.dtype(x));
    let elem = own / numel.max(1);
    let mut groups = 1u64;
    for (i, &d) in dims.iter().enumerate() {
        let reduced = m.axes.iter().any(|&a| axis(a, dims.len()).ok() == Some(i));
        if !reduced {
            groups = groups.saturating_mul(d);
        }
    }
    Some(vec![Save::Own(own), Save::Own(groups.saturating_mul(elem))])
}

/// `SimplifiedLayerNormalization` (onnxruntime's RMSNorm in the default domain) and ONNX's
/// `RMSNormalization`: `Y` like `X`; `inv_std_var` keeps the leading axes, size 1 on the others.
pub fn simplified_layer_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let ln = attrs!(cx, SimplifiedLayerNormalization | RmsNormalization);
    let x = cx.shape(0)?;
    let a = axis(ln.axis, x.len())?;
    let mut stat = x[..a].to_vec();
    stat.extend(std::iter::repeat_n(Dim::known(1), x.len() - a));
    Ok(vec![
        Fact::new(cx.dtype(0), x.to_vec()),
        Fact::new(Some(ln.stash_type), stat),
    ])
}
