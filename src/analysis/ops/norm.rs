//! Normalisation layers. Not counted in MACs (element-wise work).

use super::{axis, invalid, same_as_input, InferResult, OpCx};
use crate::analysis::fact::Fact;
use crate::ir::{DType, Dim};

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
    for _ in 1..cx.node.outputs.len() {
        out.push(Fact::new(stat, vec![c.clone()]));
    }
    Ok(out)
}

/// `LayerNormalization`: `Y` like `X`; `Mean` and `InvStdDev` keep the leading axes and have size 1
/// on the normalised ones.
pub fn layer_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    let a = axis(cx.attr_int("axis", -1)?, x.len())?;
    let mut stat = x[..a].to_vec();
    stat.extend(std::iter::repeat_n(Dim::known(1), x.len() - a));
    let stash = cx.node.attrs.dtype_opt("stash_type")?.unwrap_or(DType::F32);
    Ok(vec![
        Fact::new(cx.dtype(0), x.to_vec()),
        Fact::new(Some(stash), stat.clone()),
        Fact::new(Some(stash), stat),
    ])
}

/// `InstanceNormalization`, `GroupNormalization`: output like the input.
pub fn same_shape_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    same_as_input(cx)
}
