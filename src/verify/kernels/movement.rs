//! Data movement: reshapes, transposes, concatenation, splitting, slicing, gathering, padding,
//! expanding, tiling and resizing. Except for `Resize`'s linear mode the values are never
//! rounded, so they match a runtime exactly.

use candle_core::{Device, Tensor as CTensor};

use super::{
    advance, attrs, broadcast_shape, check_size, checked_product, one, tensor, to_ints, values, At,
    Cx, OpResult,
};
use crate::analysis::ops::movement::{PadMode, Reduction, Resize};
use crate::verify::exec::{ExecError, MAX_ELEMENTS};

/// `x[.., ids, ..]` along `axis` (candle's `index_select` needs a contiguous input: a sliced or
/// padded view is copied first).
fn select(cx: &Cx, x: &CTensor, axis: usize, ids: Vec<i64>) -> Result<CTensor, ExecError> {
    let n = ids.len();
    CTensor::from_vec(ids, n, &Device::Cpu)
        .and_then(|ids| x.contiguous()?.index_select(&ids, axis))
        .at(cx)
}

pub fn flatten(cx: &Cx) -> OpResult {
    let f = attrs!(cx, Flatten);
    let x = cx.input(0)?;
    let r = x.rank();
    // the axis may be the rank itself: everything goes to the outer dimension
    let a = if usize::try_from(f.axis) == Ok(r) {
        r
    } else {
        cx.axis(f.axis, r)?
    };
    let outer = checked_product(&x.dims()[..a]).ok_or_else(|| cx.fail("size overflows"))?;
    let inner = checked_product(&x.dims()[a..]).ok_or_else(|| cx.fail("size overflows"))?;
    one(x.reshape((outer, inner)).at(cx)?)
}

/// The target from input 1 (opset 5 on) or the attribute (before); a 0 copies the input's dim
/// unless `allowzero`, one -1 takes what is left.
pub fn reshape(cx: &Cx) -> OpResult {
    let r = attrs!(cx, Reshape);
    let x = cx.input(0)?;
    let spec = cx
        .ints_from_input_or(1, &r.shape)?
        .ok_or_else(|| cx.fail("input 1 (shape) is missing"))?;
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &s) in spec.iter().enumerate() {
        out.push(match s {
            -1 if infer.is_none() => {
                infer = Some(i);
                1
            }
            -1 => return Err(cx.fail(format!("shape {spec:?} has more than one -1"))),
            0 if !r.allowzero => *x.dims().get(i).ok_or_else(|| {
                cx.fail(format!(
                    "shape {spec:?} copies dimension {i} of a rank-{} input",
                    x.rank()
                ))
            })?,
            s => usize::try_from(s)
                .map_err(|_| cx.fail(format!("shape {spec:?} has a negative entry")))?,
        });
    }
    let numel = x.elem_count();
    let known = checked_product(&out).ok_or_else(|| cx.fail("shape size overflows"))?;
    if let Some(i) = infer {
        if known == 0 || numel % known != 0 {
            return Err(cx.fail(format!(
                "cannot infer the -1 in {spec:?} for {numel} elements"
            )));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(cx.fail(format!(
            "shape {spec:?} holds {known} elements, the input {:?} has {numel}",
            x.dims()
        )));
    }
    one(x.reshape(out).at(cx)?)
}

pub fn transpose(cx: &Cx) -> OpResult {
    let t = attrs!(cx, Transpose);
    let x = cx.input(0)?;
    let r = x.rank();
    let perm = match &t.perm {
        None => (0..r).rev().collect(),
        Some(p) => {
            let perm: Vec<usize> = p
                .iter()
                .filter_map(|&a| usize::try_from(a).ok())
                .filter(|&a| a < r)
                .collect();
            let mut seen = perm.clone();
            seen.sort_unstable();
            seen.dedup();
            if perm.len() != p.len() || seen.len() != r || p.len() != r {
                return Err(cx.fail(format!("perm {p:?} is not a permutation of {r} axes")));
            }
            perm
        }
    };
    one(x.permute(perm).at(cx)?)
}

pub fn squeeze(cx: &Cx) -> OpResult {
    let s = attrs!(cx, Squeeze);
    let x = cx.input(0)?;
    let axes = match cx.ints_from_input_or(1, &s.axes)? {
        Some(a) => cx.axis_set(&a, x.rank())?,
        None => (0..x.rank()).filter(|&a| x.dims()[a] == 1).collect(),
    };
    if let Some(&a) = axes.iter().find(|&&a| x.dims()[a] != 1) {
        return Err(cx.fail(format!("axis {a} has size {}, not 1", x.dims()[a])));
    }
    let dims: Vec<usize> = (0..x.rank())
        .filter(|a| !axes.contains(a))
        .map(|a| x.dims()[a])
        .collect();
    one(x.reshape(dims).at(cx)?)
}

/// Axes index the output, whose rank is the input's plus their number.
pub fn unsqueeze(cx: &Cx) -> OpResult {
    let u = attrs!(cx, Unsqueeze);
    let x = cx.input(0)?;
    let axes = cx
        .ints_from_input_or(1, &u.axes)?
        .ok_or_else(|| cx.fail("axes are missing"))?;
    let axes = cx.axis_set(&axes, x.rank() + axes.len())?;
    let mut y = x.clone();
    for a in axes {
        y = y.unsqueeze(a).at(cx)?;
    }
    one(y)
}

pub fn concat(cx: &Cx) -> OpResult {
    let c = attrs!(cx, Concat);
    let parts: Vec<&CTensor> = cx.inputs.iter().flatten().collect();
    let first = parts
        .first()
        .ok_or_else(|| cx.fail("at least one input is needed"))?;
    let axis = cx.axis(c.axis, first.rank())?;
    if let Some(bad) = parts.iter().find(|t| {
        t.rank() != first.rank()
            || (0..first.rank()).any(|a| a != axis && t.dims()[a] != first.dims()[a])
    }) {
        return Err(cx.fail(format!(
            "shapes {:?} and {:?} cannot be joined on axis {axis}",
            first.dims(),
            bad.dims()
        )));
    }
    one(CTensor::cat(&parts, axis).at(cx)?)
}

/// Sizes from input 1 (opset 13 on) or the attribute; else `num_outputs` chunks of
/// `ceil(len / n)`, the last one smaller (opset 18); else equal parts, one per output.
pub fn split(cx: &Cx) -> OpResult {
    let s = attrs!(cx, Split);
    let x = cx.input(0)?;
    let axis = cx.axis(s.axis, x.rank())?;
    let len = x.dims()[axis];
    let outputs = cx.node.outputs().len();
    let sizes: Vec<usize> = match cx.ints_from_input_or(1, &s.split)? {
        Some(v) => v
            .iter()
            .map(|&n| usize::try_from(n))
            .collect::<Result<_, _>>()
            .map_err(|_| cx.fail(format!("split {v:?} has a negative size")))?,
        None => {
            let n = match s.num_outputs {
                Some(n) => usize::try_from(n)
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| cx.fail(format!("num_outputs {n} is not positive")))?,
                None if outputs > 0 && len % outputs == 0 => outputs,
                None => {
                    return Err(cx.fail(format!(
                        "an axis of {len} does not split into {outputs} equal parts"
                    )))
                }
            };
            let chunk = len.div_ceil(n);
            (0..n)
                .map(|i| len.saturating_sub(i * chunk).min(chunk))
                .collect()
        }
    };
    if sizes.iter().try_fold(0usize, |a, &b| a.checked_add(b)) != Some(len) {
        return Err(cx.fail(format!("sizes {sizes:?} do not add up to the axis' {len}")));
    }
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for n in sizes {
        out.push(x.narrow(axis, start, n).at(cx)?);
        start += n;
    }
    Ok(out)
}

/// Indices of one sliced axis, with ONNX's clamping rules.
fn slice_indices(start: i64, end: i64, step: i64, dim: usize) -> Vec<usize> {
    let d = i64::try_from(dim).unwrap_or(i64::MAX);
    let wrap = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (start, end) = (wrap(start), wrap(end));
    let mut out = Vec::new();
    if d == 0 {
        return out;
    }
    if step > 0 {
        let (mut i, end) = (start.clamp(0, d), end.clamp(0, d));
        while i < end {
            out.push(i as usize);
            i = i.saturating_add(step);
        }
    } else {
        let (mut i, end) = (start.clamp(0, d - 1), end.clamp(-1, d - 1));
        while i > end {
            out.push(i as usize);
            i = i.saturating_add(step);
        }
    }
    out
}

/// Starts, ends, axes and steps from the inputs (opset 10 on) or the attributes (before).
pub fn slice(cx: &Cx) -> OpResult {
    let s = attrs!(cx, Slice);
    let x = cx.input(0)?;
    let (starts, ends, axes, steps) = if cx.opt(1).is_some() {
        (
            cx.input_ints(1)?.unwrap_or_default(),
            cx.input_ints(2)?
                .ok_or_else(|| cx.fail("input 2 (ends) is missing"))?,
            cx.input_ints(3)?,
            cx.input_ints(4)?,
        )
    } else {
        (
            s.starts
                .clone()
                .ok_or_else(|| cx.fail("starts are missing"))?,
            s.ends.clone().ok_or_else(|| cx.fail("ends are missing"))?,
            s.axes.clone(),
            None,
        )
    };
    let n = starts.len();
    let axes = axes.unwrap_or_else(|| (0..n as i64).collect());
    let steps = steps.unwrap_or_else(|| vec![1; n]);
    if ends.len() != n || axes.len() != n || steps.len() != n {
        return Err(cx.fail("starts, ends, axes and steps differ in length"));
    }
    cx.axis_set(&axes, x.rank())?;
    let mut y = x.clone();
    for i in 0..n {
        let axis = cx.axis(axes[i], x.rank())?;
        if steps[i] == 0 {
            return Err(cx.fail("a slice step is 0"));
        }
        let idx = slice_indices(starts[i], ends[i], steps[i], x.dims()[axis]);
        y = if steps[i] == 1 {
            y.narrow(axis, idx.first().copied().unwrap_or(0), idx.len())
                .at(cx)?
        } else {
            select(cx, &y, axis, idx.iter().map(|&v| v as i64).collect())?
        };
    }
    one(y)
}

pub fn expand(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let spec = cx
        .input_ints(1)?
        .ok_or_else(|| cx.fail("input 1 (shape) is missing"))?;
    let spec = spec
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| cx.fail(format!("shape {spec:?} has a negative entry")))?;
    let out = broadcast_shape(x.dims(), &spec).ok_or_else(|| {
        cx.fail(format!(
            "input {:?} does not broadcast with {spec:?}",
            x.dims()
        ))
    })?;
    one(x.broadcast_as(out).at(cx)?)
}

pub fn tile(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let repeats = cx
        .input_ints(1)?
        .ok_or_else(|| cx.fail("input 1 (repeats) is missing"))?;
    if repeats.len() != x.rank() {
        return Err(cx.fail(format!(
            "{} repeats for a rank-{} input",
            repeats.len(),
            x.rank()
        )));
    }
    let mut y = x.clone();
    for (axis, &r) in repeats.iter().enumerate() {
        let r = usize::try_from(r).map_err(|_| cx.fail(format!("repeat {r} is negative")))?;
        let len = x.dims()[axis];
        if r == 1 {
            continue;
        }
        let n = len
            .checked_mul(r)
            .ok_or_else(|| cx.fail("the tiled tensor is too large"))?;
        let mut dims = y.dims().to_vec();
        dims[axis] = n;
        check_size(cx, &dims)?;
        y = select(
            cx,
            &y,
            axis,
            (0..n).map(|j| (j % len.max(1)) as i64).collect(),
        )?;
    }
    one(y)
}

/// Source index of padded position `j` (relative to the unpadded start) along an axis of `len`.
fn pad_source(mode: PadMode, j: i64, len: i64) -> i64 {
    match mode {
        PadMode::Edge => j.clamp(0, len - 1),
        PadMode::Wrap => j.rem_euclid(len),
        // mirrored without the edge: period 2 (len - 1)
        _ if len == 1 => 0,
        _ => {
            let period = 2 * (len - 1);
            let m = j.rem_euclid(period);
            if m < len {
                m
            } else {
                period - m
            }
        }
    }
}

/// Pads from input 1 and the constant from input 2 (opset 11 on; axes from input 3, opset 18),
/// or both from the attributes (before). Negative pads crop.
pub fn pad(cx: &Cx) -> OpResult {
    let p = attrs!(cx, Pad);
    let x = cx.input(0)?;
    let r = x.rank();
    let (pads, value) = match cx.input_ints(1)? {
        Some(v) => (v, cx.input_scalar(2)?.unwrap_or(0.0)),
        None => (
            p.pads.clone().ok_or_else(|| cx.fail("pads are missing"))?,
            f64::from(p.value),
        ),
    };
    let axes = match cx.input_ints(3)? {
        Some(a) => {
            cx.axis_set(&a, r)?;
            a.iter().map(|&v| cx.axis(v, r)).collect::<Result<_, _>>()?
        }
        None => (0..r).collect::<Vec<_>>(),
    };
    if pads.len() != 2 * axes.len() {
        return Err(cx.fail(format!("{} pads for {} axes", pads.len(), axes.len())));
    }
    let k = axes.len();
    let mut y = x.clone();
    for (i, &axis) in axes.iter().enumerate() {
        let (b, e) = (pads[i], pads[i + k]);
        let len = y.dims()[axis] as i64;
        let (cut_b, cut_e) = (b.saturating_neg().max(0), e.saturating_neg().max(0));
        if cut_b.saturating_add(cut_e) > len {
            return Err(cx.fail(format!("pads {pads:?} crop more than axis {axis} holds")));
        }
        let len = len - cut_b - cut_e;
        if cut_b > 0 || cut_e > 0 {
            y = y.narrow(axis, cut_b as usize, len as usize).at(cx)?;
        }
        let (add_b, add_e) = (b.max(0), e.max(0));
        if add_b == 0 && add_e == 0 {
            continue;
        }
        let n = len
            .checked_add(add_b)
            .and_then(|n| n.checked_add(add_e))
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| cx.fail(format!("pads {pads:?} make axis {axis} too large")))?;
        let mut dims = y.dims().to_vec();
        dims[axis] = n;
        check_size(cx, &dims)?;
        y = if p.mode == PadMode::Constant {
            let fill = |count: i64| -> Result<Option<CTensor>, ExecError> {
                if count == 0 {
                    return Ok(None);
                }
                let mut dims = y.dims().to_vec();
                dims[axis] = count as usize;
                CTensor::full(value, dims.as_slice(), &Device::Cpu)
                    .map(Some)
                    .at(cx)
            };
            let parts: Vec<CTensor> = [fill(add_b)?, Some(y.clone()), fill(add_e)?]
                .into_iter()
                .flatten()
                .collect();
            CTensor::cat(&parts, axis).at(cx)?
        } else {
            if len == 0 {
                return Err(cx.fail(format!(
                    "mode '{}' cannot pad the empty axis {axis}",
                    p.mode
                )));
            }
            let ids = (0..n as i64)
                .map(|j| pad_source(p.mode, j - add_b, len))
                .collect();
            select(cx, &y, axis, ids)?
        };
    }
    one(y)
}

/// The input coordinate of output position `j` on an axis resized from `len` to `out` by
/// `scale`, per `coordinate_transformation_mode` (`None` for a mode the checker does not run). In
/// f32, as onnxruntime computes it: a nearest tie decided in f64 could pick the other neighbour.
fn resize_coordinate(mode: &str, j: usize, len: usize, out: usize, scale: f64) -> Option<f32> {
    let (j, len, out, scale) = (j as f32, len as f32, out as f32, scale as f32);
    Some(match mode {
        "half_pixel" => (j + 0.5) / scale - 0.5,
        "half_pixel_symmetric" => {
            let adjustment = out / (scale * len);
            len / 2.0 * (1.0 - adjustment) + (j + 0.5) / scale - 0.5
        }
        "pytorch_half_pixel" if out > 1.0 => (j + 0.5) / scale - 0.5,
        "pytorch_half_pixel" => 0.0,
        "align_corners" if out > 1.0 => j * (len - 1.0) / (out - 1.0),
        "align_corners" => 0.0,
        "asymmetric" => j / scale,
        "tf_half_pixel_for_nn" => (j + 0.5) / scale,
        _ => return None,
    })
}

/// `nearest_mode`'s rounding of a coordinate (`None` for an unknown mode).
fn resize_round(mode: &str, x: f32) -> Option<f32> {
    let tie = x - x.floor() == 0.5;
    Some(match mode {
        "round_prefer_floor" if tie => x.floor(),
        "round_prefer_ceil" if tie => x.ceil(),
        "round_prefer_floor" | "round_prefer_ceil" => x.round(),
        "floor" => x.floor(),
        "ceil" => x.ceil(),
        _ => return None,
    })
}

/// Why a `Resize` is one the checker does not run, statically.
pub(super) fn check_resize(r: &Resize) -> Result<(), String> {
    if r.legacy {
        return Err(
            "Resize before opset 11 rounds the old Upsample way, which the checker does not run"
                .into(),
        );
    }
    if !matches!(r.mode.as_str(), "nearest" | "linear") {
        return Err(format!("mode '{}' is not supported", r.mode));
    }
    if r.antialias {
        return Err("antialias is not supported".into());
    }
    let coord_mode = r.coordinate_transformation_mode.as_str();
    if resize_coordinate(coord_mode, 0, 1, 1, 1.0).is_none() {
        return Err(format!(
            "coordinate_transformation_mode '{coord_mode}' is not supported"
        ));
    }
    if r.mode == "nearest" && resize_round(&r.nearest_mode, 0.0).is_none() {
        return Err(format!(
            "nearest_mode '{}' is not supported",
            r.nearest_mode
        ));
    }
    Ok(())
}

/// `Resize` (opset 11 on), `nearest` and `linear`, axis by axis (both are separable). Output
/// sizes come from `sizes` (with `keep_aspect_ratio_policy`) or `floor(len · scale)`, as the
/// analysis sizes them; coordinates are f32 ([`resize_coordinate`]), linear weights f64.
pub fn resize(cx: &Cx) -> OpResult {
    let r = attrs!(cx, Resize);
    check_resize(r).map_err(|why| cx.unsupported(why))?;
    let linear = r.mode == "linear";
    let coord_mode = r.coordinate_transformation_mode.as_str();
    let x = cx.input(0)?;
    let rank = x.rank();
    let axes: Vec<usize> = match &r.axes {
        Some(a) => {
            cx.axis_set(a, rank)?;
            a.iter()
                .map(|&v| cx.axis(v, rank))
                .collect::<Result<_, _>>()?
        }
        None => (0..rank).collect(),
    };
    let present = |i: usize| cx.opt(i).filter(|t| t.elem_count() > 0);
    let dims = x.dims().to_vec();
    // (axis, output size, scale)
    let plan: Vec<(usize, usize, f64)> = if present(3).is_some() {
        let sizes = cx.input_ints(3)?.unwrap_or_default();
        if sizes.len() != axes.len() {
            return Err(cx.fail(format!("{} sizes for {} axes", sizes.len(), axes.len())));
        }
        let sizes = sizes
            .iter()
            .map(|&v| usize::try_from(v))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| cx.fail(format!("sizes {sizes:?} have a negative entry")))?;
        let ratio = |k: usize| sizes[k] as f64 / dims[axes[k]] as f64;
        match r.keep_aspect_ratio_policy.as_str() {
            "stretch" => (0..axes.len())
                .map(|k| (axes[k], sizes[k], ratio(k)))
                .collect(),
            policy @ ("not_larger" | "not_smaller") => {
                let ratios = (0..axes.len()).map(ratio);
                let s = if policy == "not_larger" {
                    ratios.fold(f64::INFINITY, f64::min)
                } else {
                    ratios.fold(0.0, f64::max)
                };
                axes.iter()
                    .map(|&a| (a, (dims[a] as f64 * s).round() as usize, s))
                    .collect()
            }
            other => {
                return Err(cx.unsupported(format!(
                    "keep_aspect_ratio_policy '{other}' is not supported"
                )))
            }
        }
    } else if let Some(t) = present(2) {
        let scales = super::values(t).at(cx)?;
        if scales.len() != axes.len() {
            return Err(cx.fail(format!("{} scales for {} axes", scales.len(), axes.len())));
        }
        let mut plan = Vec::with_capacity(axes.len());
        for (&a, &sc) in axes.iter().zip(&scales) {
            if !(sc > 0.0 && sc.is_finite()) {
                return Err(cx.fail(format!("scale {sc} is not positive")));
            }
            let out = (dims[a] as f64 * sc + 1e-9).floor();
            if out > MAX_ELEMENTS as f64 {
                return Err(cx.fail("the resized tensor is too large"));
            }
            plan.push((a, out as usize, sc));
        }
        plan
    } else {
        return Err(cx.fail("neither scales nor sizes are given"));
    };
    let mut y = x.clone();
    for (axis, out, scale) in plan {
        let len = dims[axis];
        if out == len && scale == 1.0 {
            continue;
        }
        if len == 0 || out == 0 {
            return Err(cx.fail(format!("axis {axis} cannot be resized from {len} to {out}")));
        }
        let mut new_dims = y.dims().to_vec();
        new_dims[axis] = out;
        check_size(cx, &new_dims)?;
        let last = (len - 1) as f64;
        let coord = |j: usize| resize_coordinate(coord_mode, j, len, out, scale).unwrap_or(0.0);
        y = if linear {
            let (mut lo, mut hi, mut w) = (Vec::new(), Vec::new(), Vec::new());
            for j in 0..out {
                let c = f64::from(coord(j)).clamp(0.0, last);
                let i0 = c.floor();
                lo.push(i0 as i64);
                hi.push((i0 + 1.0).min(last) as i64);
                w.push(c - i0);
            }
            let mut shape = vec![1; rank];
            shape[axis] = out;
            let w = super::tensor(w, &shape).at(cx)?;
            let a = select(cx, &y, axis, lo)?;
            let b = select(cx, &y, axis, hi)?;
            // a + (b - a) · w
            a.broadcast_add(&(b - &a).at(cx)?.broadcast_mul(&w).at(cx)?)
                .at(cx)?
        } else {
            let ids = (0..out)
                .map(|j| {
                    let i = resize_round(&r.nearest_mode, coord(j)).unwrap_or(0.0);
                    f64::from(i).clamp(0.0, last) as i64
                })
                .collect();
            select(cx, &y, axis, ids)?
        };
    }
    one(y)
}

/// Indices in `[-len, len)` along the axis; the output's shape puts the indices' in its place.
pub fn gather(cx: &Cx) -> OpResult {
    let ga = attrs!(cx, Gather);
    let (x, ind) = (cx.input(0)?, cx.input(1)?);
    let axis = cx.axis(ga.axis, x.rank())?;
    let dim = x.dims()[axis];
    let ids = to_ints(ind)
        .map_err(|e| cx.fail(format!("indices: {e}")))?
        .into_iter()
        .map(|i| {
            let j = if i < 0 {
                i.saturating_add(dim as i64)
            } else {
                i
            };
            usize::try_from(j)
                .ok()
                .filter(|&j| j < dim)
                .map(|j| j as i64)
                .ok_or_else(|| cx.fail(format!("index {i} is out of range for axis size {dim}")))
        })
        .collect::<Result<Vec<i64>, _>>()?;
    let y = select(cx, x, axis, ids)?;
    let mut shape = x.dims()[..axis].to_vec();
    shape.extend_from_slice(ind.dims());
    shape.extend_from_slice(&x.dims()[axis + 1..]);
    one(y.reshape(shape).at(cx)?)
}

/// Row-major strides of `dims`.
pub(crate) fn strides_of(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(dims[i + 1]);
    }
    s
}

/// An index in `[-dim, dim)` as a position.
fn index_in(cx: &Cx, i: f64, dim: usize) -> Result<usize, ExecError> {
    let d = dim as i64;
    let v = i as i64;
    let j = if v < 0 { v.saturating_add(d) } else { v };
    if i.fract() != 0.0 || !(0..d).contains(&j) {
        return Err(cx.fail(format!("index {i} is out of range for axis size {dim}")));
    }
    Ok(j as usize)
}

fn combine(r: Reduction, old: f64, new: f64) -> f64 {
    match r {
        Reduction::None => new,
        Reduction::Add => old + new,
        Reduction::Mul => old * new,
        Reduction::Max => old.max(new),
        Reduction::Min => old.min(new),
    }
}

/// `data` with `updates` written at `indices` along `axis` (indices and updates of one shape,
/// of the data's rank), combined by the reduction; later updates of one element apply after
/// earlier ones.
pub fn scatter_elements(cx: &Cx) -> OpResult {
    let s = attrs!(cx, ScatterElements);
    let (data, ind, upd) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    let r = data.rank();
    let axis = cx.axis(s.axis, r)?;
    if ind.dims() != upd.dims() || ind.rank() != r {
        return Err(cx.fail(format!(
            "indices {:?} and updates {:?} must have one shape of the data's rank {r}",
            ind.dims(),
            upd.dims()
        )));
    }
    if ind
        .dims()
        .iter()
        .zip(data.dims())
        .enumerate()
        .any(|(a, (i, d))| a != axis && i > d)
    {
        return Err(cx.fail(format!(
            "indices {:?} are larger than the data {:?}",
            ind.dims(),
            data.dims()
        )));
    }
    let mut out = values(data).at(cx)?;
    let (iv, uv) = (values(ind).at(cx)?, values(upd).at(cx)?);
    let ds = strides_of(data.dims());
    let idims = ind.dims().to_vec();
    let mut pos = vec![0usize; r];
    for (k, (&i, &u)) in iv.iter().zip(&uv).enumerate() {
        if k > 0 {
            advance(&mut pos, &idims);
        }
        let j = index_in(cx, i, data.dims()[axis])?;
        let flat: usize = pos
            .iter()
            .zip(&ds)
            .enumerate()
            .map(|(a, (&p, &st))| if a == axis { j * st } else { p * st })
            .sum();
        out[flat] = combine(s.reduction, out[flat], u);
    }
    one(tensor(out, data.dims()).at(cx)?)
}

/// `data` with slices replaced at the index tuples of `indices` (its last axis), combined by the
/// reduction.
pub fn scatter_nd(cx: &Cx) -> OpResult {
    let s = attrs!(cx, ScatterNd);
    let (data, ind, upd) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    let Some((&k, lead)) = ind.dims().split_last() else {
        return Err(cx.fail("indices must have rank 1 or more"));
    };
    if k > data.rank() {
        return Err(cx.fail(format!(
            "index tuples of {k} for a rank-{} data",
            data.rank()
        )));
    }
    let tail = &data.dims()[k..];
    let want: Vec<usize> = lead.iter().chain(tail).copied().collect();
    if upd.dims() != want.as_slice() {
        return Err(cx.fail(format!(
            "updates have shape {:?}, expected {want:?}",
            upd.dims()
        )));
    }
    let slice = checked_product(tail).unwrap_or(0);
    let ds = strides_of(data.dims());
    let mut out = values(data).at(cx)?;
    let (iv, uv) = (values(ind).at(cx)?, values(upd).at(cx)?);
    for t in 0..checked_product(lead).unwrap_or(0) {
        let tuple = &iv[t * k..(t + 1) * k];
        let mut base = 0;
        for (a, &i) in tuple.iter().take(k).enumerate() {
            base += index_in(cx, i, data.dims()[a])? * ds[a];
        }
        for e in 0..slice {
            let (o, u) = (base + e, uv[t * slice + e]);
            out[o] = combine(s.reduction, out[o], u);
        }
    }
    one(tensor(out, data.dims()).at(cx)?)
}

/// `out[p] = data[p with p[axis] = indices[p]]`: the indices' shape.
pub fn gather_elements(cx: &Cx) -> OpResult {
    let g = attrs!(cx, GatherElements);
    let (data, ind) = (cx.input(0)?, cx.input(1)?);
    let r = data.rank();
    let axis = cx.axis(g.axis, r)?;
    if ind.rank() != r
        || ind
            .dims()
            .iter()
            .zip(data.dims())
            .enumerate()
            .any(|(a, (i, d))| a != axis && i > d)
    {
        return Err(cx.fail(format!(
            "indices {:?} do not fit the data {:?}",
            ind.dims(),
            data.dims()
        )));
    }
    let dv = values(data).at(cx)?;
    let iv = values(ind).at(cx)?;
    let ds = strides_of(data.dims());
    let idims = ind.dims().to_vec();
    let mut pos = vec![0usize; r];
    let mut out = Vec::with_capacity(iv.len());
    for (k, &i) in iv.iter().enumerate() {
        if k > 0 {
            advance(&mut pos, &idims);
        }
        let j = index_in(cx, i, data.dims()[axis])?;
        let flat: usize = pos
            .iter()
            .zip(&ds)
            .enumerate()
            .map(|(a, (&p, &st))| if a == axis { j * st } else { p * st })
            .sum();
        out.push(dv[flat]);
    }
    one(tensor(out, ind.dims()).at(cx)?)
}

/// Slices of `data` at the index tuples of `indices` (its last axis), the first `batch_dims`
/// axes of both walked together.
pub fn gather_nd(cx: &Cx) -> OpResult {
    let g = attrs!(cx, GatherNd);
    let (data, ind) = (cx.input(0)?, cx.input(1)?);
    let b = usize::try_from(g.batch_dims).map_err(|_| cx.fail("batch_dims is negative"))?;
    let Some((&k, lead)) = ind.dims().split_last() else {
        return Err(cx.fail("indices must have rank 1 or more"));
    };
    if b > lead.len() || b + k > data.rank() || ind.dims()[..b] != data.dims()[..b] {
        return Err(cx.fail(format!(
            "indices {:?} do not fit the data {:?} with batch_dims {b}",
            ind.dims(),
            data.dims()
        )));
    }
    let tail = &data.dims()[b + k..];
    let slice = checked_product(tail).unwrap_or(0);
    let batches = checked_product(&data.dims()[..b]).unwrap_or(0);
    let per_batch_data = checked_product(&data.dims()[b..]).unwrap_or(0);
    let tuples = checked_product(&lead[b..]).unwrap_or(0);
    let out_dims: Vec<usize> = lead.iter().chain(tail).copied().collect();
    check_size(cx, &out_dims)?;
    let ds = strides_of(&data.dims()[b..]);
    let dv = values(data).at(cx)?;
    let iv = values(ind).at(cx)?;
    let mut out = Vec::with_capacity(checked_product(&out_dims).unwrap_or(0));
    for batch in 0..batches {
        for t in 0..tuples {
            let tuple = &iv[(batch * tuples + t) * k..(batch * tuples + t + 1) * k];
            let mut base = batch * per_batch_data;
            for (a, &i) in tuple.iter().enumerate() {
                base += index_in(cx, i, data.dims()[b + a])? * ds[a];
            }
            out.extend_from_slice(&dv[base..base + slice]);
        }
    }
    one(tensor(out, &out_dims).at(cx)?)
}

fn blocks_4d(cx: &Cx) -> Result<(usize, [usize; 4]), ExecError> {
    let b = attrs!(cx, DepthToSpace | SpaceToDepth).blocksize;
    let x = cx.input(0)?;
    let &[n, c, h, w] = x.dims() else {
        return Err(cx.fail(format!("input has shape {:?}, expected rank 4", x.dims())));
    };
    Ok((usize::try_from(b).unwrap_or(1), [n, c, h, w]))
}

/// Channels to space: `DCR` takes the block from the outer channels, `CRD` from the inner ones.
pub fn depth_to_space(cx: &Cx) -> OpResult {
    let crd = attrs!(cx, DepthToSpace).crd;
    let (b, [n, c, h, w]) = blocks_4d(cx)?;
    if c % (b * b) != 0 {
        return Err(cx.fail(format!(
            "{c} channels do not divide by blocksize² {}",
            b * b
        )));
    }
    let x = cx.input(0)?;
    let c2 = c / (b * b);
    let y = if crd {
        x.reshape(vec![n, c2, b, b, h, w])
            .and_then(|t| t.permute(vec![0, 1, 4, 2, 5, 3]))
    } else {
        x.reshape(vec![n, b, b, c2, h, w])
            .and_then(|t| t.permute(vec![0, 3, 4, 1, 5, 2]))
    };
    one(y
        .and_then(|t| t.contiguous())
        .and_then(|t| t.reshape(vec![n, c2, h * b, w * b]))
        .at(cx)?)
}

/// Space to channels: each `blocksize × blocksize` block becomes channels, the block's offset
/// outermost.
pub fn space_to_depth(cx: &Cx) -> OpResult {
    let (b, [n, c, h, w]) = blocks_4d(cx)?;
    if h % b != 0 || w % b != 0 {
        return Err(cx.fail(format!(
            "spatial size {h}x{w} does not divide by blocksize {b}"
        )));
    }
    let x = cx.input(0)?;
    one(x
        .reshape(vec![n, c, h / b, b, w / b, b])
        .and_then(|t| t.permute(vec![0, 3, 5, 1, 2, 4]))
        .and_then(|t| t.contiguous())
        .and_then(|t| t.reshape(vec![n, c * b * b, h / b, w / b]))
        .at(cx)?)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, ints, ramp, G};
    use crate::ir::Attr;
    use crate::verify::exec::ExecError;

    #[test]
    fn reshape_with_zero_and_minus_one() {
        let mut g = G::new();
        g.input("x", &[2, 3, 4], ramp(24))
            .init_i64("s1", vec![0, -1])
            .init_i64("s2", vec![-1, 0, 2])
            .node("Reshape", &["x", "s1"], &["a"], vec![])
            .node("Reshape", &["x", "s2"], &["b"], vec![]);
        let out = g.run(&["a", "b"]).unwrap();
        assert_eq!(out[0].dims(), [2, 12]);
        assert_eq!(out[1].dims(), [4, 3, 2]);
        assert_close(&flat(&out[1]), &ramp(24));

        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6))
            .init_i64("s", vec![0, 6])
            .node(
                "Reshape",
                &["x", "s"],
                &["y"],
                vec![("allowzero", Attr::Int(1))],
            );
        let err = g.run(&["y"]).unwrap_err();
        assert!(matches!(err, ExecError::Failed { .. }), "{err}");
        assert!(err.to_string().contains("reshape_y"), "{err}");
    }

    #[test]
    fn movement_ops() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6))
            .init_i64("ax", vec![0, 3])
            .node("Transpose", &["x"], &["t"], vec![])
            .node("Unsqueeze", &["t", "ax"], &["u"], vec![])
            .node("Squeeze", &["u"], &["s"], vec![("axes", ints(&[0]))])
            .node("Flatten", &["u"], &["f"], vec![("axis", Attr::Int(2))])
            .node("Flatten", &["u"], &["f2"], vec![("axis", Attr::Int(-1))])
            .node("Concat", &["x", "x"], &["c"], vec![("axis", Attr::Int(-1))])
            .node("Identity", &["c"], &["i"], vec![])
            .node("Dropout", &["i"], &["d", "mask"], vec![]);
        let out = g.run(&["t", "u", "s", "f", "d", "mask", "f2"]).unwrap();
        assert_eq!(out[0].dims(), [3, 2]);
        assert_close(&flat(&out[0]), &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
        assert_eq!(out[1].dims(), [1, 3, 2, 1]);
        assert_eq!(out[2].dims(), [3, 2, 1]);
        assert_eq!(out[3].dims(), [3, 2]);
        assert_eq!(out[4].dims(), [2, 6]);
        assert_close(
            &flat(&out[4]),
            &[0.0, 1.0, 2.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 3.0, 4.0, 5.0],
        );
        assert_close(&flat(&out[5]), &[1.0; 12]);
        assert_eq!(out[6].dims(), [6, 1]);
    }

    #[test]
    fn squeeze_of_a_non_unit_axis_fails() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6))
            .node("Squeeze", &["x"], &["y"], vec![("axes", ints(&[1]))]);
        let err = g.run(&["y"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 'squeeze_y': axis 1 has size 3, not 1"
        );
    }

    #[test]
    fn gather_with_a_scalar_index_drops_the_axis() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6)).node(
            "Constant",
            &[] as &[&str],
            &["k"],
            vec![("value_int", Attr::Int(2))],
        );
        g.node("Gather", &["x", "k"], &["y"], vec![("axis", Attr::Int(1))]);
        let out = g.run(&["y"]).unwrap();
        assert_eq!(out[0].dims(), [2]);
        assert_close(&flat(&out[0]), &[2.0, 5.0]);
    }

    #[test]
    fn gather_out_of_range_fails() {
        let mut g = G::new();
        g.input("x", &[2, 3], ramp(6)).init_i64("i", vec![2]).node(
            "Gather",
            &["x", "i"],
            &["y"],
            vec![],
        );
        let err = g.run(&["y"]).unwrap_err();
        assert!(err.to_string().contains("index 2 is out of range"), "{err}");
    }

    #[test]
    fn slice_with_negative_steps_and_clamping() {
        let mut g = G::new();
        g.input("x", &[2, 5], ramp(10))
            .init_i64("st", vec![-1, 1])
            .init_i64("en", vec![i64::MIN, i64::MAX])
            .init_i64("ax", vec![1, 0])
            .init_i64("sp", vec![-2, 1])
            .node("Slice", &["x", "st", "en", "ax", "sp"], &["y"], vec![]);
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 3]);
        assert_close(&flat(&y), &[9.0, 7.0, 5.0]);
    }

    #[test]
    fn pad_and_expand() {
        let mut g = G::new();
        g.input("x", &[1, 3], vec![1.0, 2.0, 3.0])
            .init_i64("p", vec![0, 1, 1, -1])
            .init("v", &[], vec![7.0])
            .init_i64("shape", vec![2, 1])
            .node("Pad", &["x", "p", "v"], &["y"], vec![])
            .node(
                "Pad",
                &["x", "p"],
                &["e"],
                vec![("mode", Attr::String(b"edge".to_vec()))],
            )
            .node("Expand", &["x", "shape"], &["z"], vec![]);
        let out = g.run(&["y", "e", "z"]).unwrap();
        assert_eq!(out[0].dims(), [2, 3]);
        assert_close(&flat(&out[0]), &[7.0, 1.0, 2.0, 7.0, 7.0, 7.0]);
        assert_close(&flat(&out[1]), &[1.0, 1.0, 2.0, 1.0, 1.0, 2.0]);
        assert_eq!(out[2].dims(), [2, 3]);
        assert_close(&flat(&out[2]), &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0]);
    }

    #[test]
    fn split_by_sizes_chunks_or_equal_parts() {
        let mut g = G::new();
        g.input("x", &[2, 5], ramp(10))
            .init_i64("s", vec![2, 3])
            .node(
                "Split",
                &["x", "s"],
                &["a", "b"],
                vec![("axis", Attr::Int(1))],
            )
            .node(
                "Split",
                &["x"],
                &["c", "d", "e"],
                vec![("axis", Attr::Int(-1)), ("num_outputs", Attr::Int(3))],
            )
            .node("Split", &["x"], &["f", "h"], vec![]);
        let out = g.run(&["a", "b", "c", "d", "e", "f", "h"]).unwrap();
        assert_close(&flat(&out[0]), &[0.0, 1.0, 5.0, 6.0]);
        assert_close(&flat(&out[1]), &[2.0, 3.0, 4.0, 7.0, 8.0, 9.0]);
        // ceil(5 / 3) = 2: sizes 2, 2, 1
        assert_eq!(out[2].dims(), [2, 2]);
        assert_eq!(out[4].dims(), [2, 1]);
        assert_close(&flat(&out[4]), &[4.0, 9.0]);
        assert_close(&flat(&out[6]), &ramp(10)[5..]);
    }

    #[test]
    fn uneven_split_without_sizes_fails() {
        let mut g = G::new();
        g.input("x", &[5], ramp(5))
            .node("Split", &["x"], &["a", "b"], vec![]);
        let err = g.run(&["a"]).unwrap_err();
        assert!(err.to_string().contains("2 equal parts"), "{err}");
    }

    #[test]
    fn tile_repeats_each_axis() {
        let mut g = G::new();
        g.input("x", &[1, 2], vec![1.0, 2.0])
            .init_i64("r", vec![2, 2])
            .node("Tile", &["x", "r"], &["y"], vec![]);
        let y = g.run1("y");
        assert_eq!(y.dims(), [2, 4]);
        assert_close(&flat(&y), &[1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    }

    #[test]
    fn pad_reflects_and_wraps() {
        let run = |mode: &str| {
            let mut g = G::new();
            g.input("x", &[4], vec![1.0, 2.0, 3.0, 4.0])
                .init_i64("p", vec![2, 3])
                .node(
                    "Pad",
                    &["x", "p"],
                    &["y"],
                    vec![("mode", Attr::String(mode.as_bytes().to_vec()))],
                );
            flat(&g.run1("y"))
        };
        // numpy.pad([1, 2, 3, 4], (2, 3), mode)
        assert_close(
            &run("reflect"),
            &[3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0, 1.0],
        );
        assert_close(&run("wrap"), &[3.0, 4.0, 1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0]);
        assert_close(&run("edge"), &[1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 4.0, 4.0, 4.0]);
    }

    #[test]
    fn reshape_and_pad_take_attributes_in_old_opsets() {
        let mut g = G::new();
        g.opset = 2;
        g.input("x", &[2, 3], ramp(6))
            .node("Reshape", &["x"], &["r"], vec![("shape", ints(&[3, -1]))])
            .node(
                "Pad",
                &["r"],
                &["p"],
                vec![("pads", ints(&[0, 1, 0, 0])), ("value", Attr::Float(9.0))],
            );
        let y = g.run1("p");
        assert_eq!(y.dims(), [3, 3]);
        assert_close(&flat(&y), &[9.0, 0.0, 1.0, 9.0, 2.0, 3.0, 9.0, 4.0, 5.0]);
    }

    fn resize(attrs: Vec<(&str, Attr)>, out: i64) -> Vec<f64> {
        let mut g = G::new();
        g.opset = 18;
        g.input("x", &[1, 2], vec![1.0, 2.0])
            .init_i64("sizes", vec![out])
            .node(
                "Resize",
                &["x", "", "", "sizes"],
                &["y"],
                [vec![("axes", ints(&[1]))], attrs].concat(),
            );
        flat(&g.run1("y"))
    }

    #[test]
    fn resize_nearest_and_linear() {
        let mode = |m: &str| ("mode", Attr::String(m.as_bytes().to_vec()));
        let coords = |m: &str| {
            (
                "coordinate_transformation_mode",
                Attr::String(m.as_bytes().to_vec()),
            )
        };
        // half_pixel: coordinates -0.25, 0.25, 0.75, 1.25
        assert_close(&resize(vec![], 4), &[1.0, 1.0, 2.0, 2.0]);
        assert_close(&resize(vec![mode("linear")], 4), &[1.0, 1.25, 1.75, 2.0]);
        assert_close(
            &resize(vec![mode("linear"), coords("align_corners")], 3),
            &[1.0, 1.5, 2.0],
        );
        // asymmetric: 0, 0.5, 1, 1.5; ties to the floor, or to the ceiling
        assert_close(
            &resize(vec![coords("asymmetric")], 4),
            &[1.0, 1.0, 2.0, 2.0],
        );
        let ceil = ("nearest_mode", Attr::String(b"round_prefer_ceil".to_vec()));
        assert_close(
            &resize(vec![coords("asymmetric"), ceil], 4),
            &[1.0, 2.0, 2.0, 2.0],
        );
    }

    #[test]
    fn resize_by_scales_on_every_axis() {
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0])
            .init("scales", &[4], vec![1.0, 1.0, 1.0, 2.0])
            .node("Resize", &["x", "", "scales"], &["y"], vec![]);
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 2, 4]);
        assert_close(&flat(&y), &[1.0, 1.0, 2.0, 2.0, 3.0, 3.0, 4.0, 4.0]);
    }

    #[test]
    fn slicing_a_sliced_view_with_a_step() {
        // axis 0 narrowed first (a non-contiguous view), then every other column of it
        let mut g = G::new();
        g.input("x", &[2, 4], ramp(8))
            .init_i64("st", vec![1, 0])
            .init_i64("en", vec![2, 4])
            .init_i64("ax", vec![0, 1])
            .init_i64("sp", vec![1, 2])
            .node("Slice", &["x", "st", "en", "ax", "sp"], &["y"], vec![]);
        assert_close(&flat(&g.run1("y")), &[4.0, 6.0]);
    }

    #[test]
    fn hostile_sizes_are_errors_not_allocations() {
        for (op, second) in [("Pad", vec![0, 1 << 40]), ("Tile", vec![1 << 40])] {
            let mut g = G::new();
            g.input("x", &[2], vec![1.0, 2.0])
                .init_i64("p", second)
                .node(op, &["x", "p"], &["y"], vec![]);
            let err = g.run(&["y"]).unwrap_err();
            assert!(err.to_string().contains("too large"), "{op}: {err}");
        }
    }

    #[test]
    fn unsupported_resizes_are_known_before_running() {
        let mut g = G::new();
        g.input("x", &[1, 2], vec![1.0, 2.0])
            .init("scales", &[2], vec![1.0, 2.0])
            .node(
                "Resize",
                &["x", "", "scales"],
                &["y"],
                vec![("mode", Attr::String(b"cubic".to_vec()))],
            );
        let graph = g.b.finish().unwrap();
        let found = crate::verify::exec::Executor::new(&graph, 18).unsupported(&[0]);
        assert_eq!(found.len(), 1);
        assert!(found[0].1.contains("mode 'cubic'"), "{found:?}");
    }
}
