//! Data movement: reshapes, transposes, concatenation, slicing, gathering, padding, resizing.
//! None of them costs MACs. Where the data is a small folded tensor (a shape vector), the values
//! move too, which is what makes `Shape → Gather → Concat → Reshape` chains resolve.

use super::{
    attrs, axis, broadcast, fold, invalid, known_usize, ovf, AttrReader, FromAttrs, InferError,
    InferResult, Op, OpCx,
};
use crate::analysis::fact::{Fact, Konst, MAX_FOLD_ELEMS};
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{shape_to_string, Attrs, Dim};

/// `Reshape`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Reshape {
    /// The target as an attribute (opset 1–4).
    pub shape: Option<Vec<i64>>,
    /// A 0 in the target means 0, not "copy the input's dim".
    pub allowzero: bool,
}

impl FromAttrs for Reshape {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Reshape {
            shape: r.ints("shape")?,
            allowzero: r.flag("allowzero", false)?,
        })
    }
}

/// `Flatten`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Flatten {
    pub axis: i64,
}

impl FromAttrs for Flatten {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Flatten {
            axis: AttrReader(a).int("axis", 1)?,
        })
    }
}

/// `Transpose`'s permutation (reversed axes when absent).
#[derive(Clone, Debug, PartialEq)]
pub struct Transpose {
    pub perm: Option<Vec<i64>>,
}

impl FromAttrs for Transpose {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Transpose {
            perm: AttrReader(a).ints("perm")?,
        })
    }
}

/// `Concat`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Concat {
    pub axis: i64,
}

impl FromAttrs for Concat {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Concat {
            axis: AttrReader(a).int("axis", 0)?,
        })
    }
}

/// `Split`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Split {
    pub axis: i64,
    /// The sizes as an attribute (before opset 13 made them an input).
    pub split: Option<Vec<i64>>,
    pub num_outputs: Option<i64>,
}

impl FromAttrs for Split {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Split {
            axis: r.int("axis", 0)?,
            split: r.ints("split")?,
            num_outputs: r.int_opt("num_outputs")?,
        })
    }
}

/// `Slice`'s attributes (before opset 10 made them inputs).
#[derive(Clone, Debug, PartialEq)]
pub struct Slice {
    pub starts: Option<Vec<i64>>,
    pub ends: Option<Vec<i64>>,
    pub axes: Option<Vec<i64>>,
}

impl FromAttrs for Slice {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Slice {
            starts: r.ints("starts")?,
            ends: r.ints("ends")?,
            axes: r.ints("axes")?,
        })
    }
}

/// The axis of `Gather` and `GatherElements`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gather {
    pub axis: i64,
}

impl FromAttrs for Gather {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Gather {
            axis: AttrReader(a).int("axis", 0)?,
        })
    }
}

/// `GatherND`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct GatherNd {
    pub batch_dims: i64,
}

impl FromAttrs for GatherNd {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(GatherNd {
            batch_dims: AttrReader(a).int("batch_dims", 0)?,
        })
    }
}

/// The axes of `Squeeze` and `Unsqueeze` as an attribute (before opset 13 made them an input).
#[derive(Clone, Debug, PartialEq)]
pub struct Axes {
    pub axes: Option<Vec<i64>>,
}

impl FromAttrs for Axes {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Axes {
            axes: AttrReader(a).ints("axes")?,
        })
    }
}

crate::named_enum! {
    /// How `Pad` fills.
    pub enum PadMode {
        /// A constant value.
        Constant = "constant",
        /// Mirrored, without the edge.
        Reflect = "reflect",
        /// The edge value repeated.
        Edge = "edge",
        /// Wrapped around.
        Wrap = "wrap",
    }
}

/// `Pad`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Pad {
    pub mode: PadMode,
    /// The pads as an attribute (before opset 11 made them an input; `paddings` in opset 1).
    pub pads: Option<Vec<i64>>,
    /// The constant as an attribute (before opset 11).
    pub value: f32,
}

impl FromAttrs for Pad {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let mode = match r.string("mode")? {
            None => PadMode::Constant,
            Some(m) => m.parse().map_err(|e| format!("attribute 'mode': {e}"))?,
        };
        Ok(Pad {
            mode,
            pads: r.ints("pads")?.or(r.ints("paddings")?),
            value: r.float("value", 0.0)?,
        })
    }
}

/// The attributes of `Resize` and `Upsample`.
#[derive(Clone, Debug, PartialEq)]
pub struct Resize {
    pub mode: String,
    pub axes: Option<Vec<i64>>,
    pub keep_aspect_ratio_policy: String,
    /// `Upsample`'s scales as an attribute (opset 7–8).
    pub scales: Option<Vec<f32>>,
    /// How an output coordinate maps to the input (opset 11 on).
    pub coordinate_transformation_mode: String,
    /// How `nearest` rounds that coordinate (opset 11 on).
    pub nearest_mode: String,
    /// Downsampling filters with an antialiasing kernel (opset 18).
    pub antialias: bool,
    /// Before opset 11: scales are input 1 and the rounding is the old `Upsample` one.
    pub legacy: bool,
}

impl FromAttrs for Resize {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Resize {
            coordinate_transformation_mode: r
                .string("coordinate_transformation_mode")?
                .unwrap_or_else(|| "half_pixel".into()),
            nearest_mode: r
                .string("nearest_mode")?
                .unwrap_or_else(|| "round_prefer_floor".into()),
            antialias: r.flag("antialias", false)?,
            legacy: opset < 11,
            mode: r.string("mode")?.unwrap_or_else(|| "nearest".into()),
            axes: r.ints("axes")?,
            keep_aspect_ratio_policy: r
                .string("keep_aspect_ratio_policy")?
                .unwrap_or_else(|| "stretch".into()),
            scales: r.floats("scales")?,
        })
    }
}

/// `DepthToSpace` and `SpaceToDepth`'s block size.
#[derive(Clone, Debug, PartialEq)]
pub struct Blocks {
    pub blocksize: i64,
    /// `DepthToSpace`'s `mode = "CRD"` (column, row, depth); the default `"DCR"` is false.
    pub crd: bool,
}

impl FromAttrs for Blocks {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let b = AttrReader(a)
            .int_opt("blocksize")?
            .ok_or("attribute 'blocksize' is required")?;
        if b < 1 {
            return Err(format!("attribute 'blocksize' must be positive, found {b}"));
        }
        let crd = match AttrReader(a).string("mode")?.as_deref() {
            None | Some("DCR") => false,
            Some("CRD") => true,
            Some(m) => return Err(format!("attribute 'mode' must be DCR or CRD, found '{m}'")),
        };
        Ok(Blocks { blocksize: b, crd })
    }
}

/// The value, kept only when the shape stays fully known (same elements, same order).
fn keep_value(input: &Fact, shape: &[Dim]) -> Option<Konst> {
    let v = input.value.as_deref()?;
    let n = Dim::product(shape)?.as_u64()?;
    (n == v.len() as u64).then(|| v.clone())
}

pub fn reshape(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let in_shape = cx.shape(0)?;
    let target: Vec<Dim> = if cx.opt_input(1).is_some() {
        cx.value(1)?.as_dims().ok_or(InferError::Unknown)?
    } else {
        match &attrs!(cx, Reshape).shape {
            Some(s) => s.iter().map(|&v| Dim::known(v)).collect(),
            None => return invalid("no target shape (input 'shape' or attribute 'shape')"),
        }
    };
    let allowzero = attrs!(cx, Reshape).allowzero;
    let mut out = Vec::with_capacity(target.len());
    let mut infer_at = None;
    for (i, t) in target.iter().enumerate() {
        match t.as_i64() {
            Some(0) if !allowzero => match in_shape.get(i) {
                Some(d) => out.push(d.clone()),
                None => {
                    return invalid(format!(
                        "target dim {i} is 0 (copy) but the input has rank {}",
                        in_shape.len()
                    ))
                }
            },
            Some(-1) => {
                if infer_at.replace(i).is_some() {
                    return invalid("more than one -1 in the target shape");
                }
                out.push(Dim::ZERO);
            }
            Some(v) if v < -1 => return invalid(format!("target dim {i} is {v}")),
            _ => out.push(t.clone()),
        }
    }
    let total = ovf(Dim::product(in_shape), "input element count")?;
    if let Some(i) = infer_at {
        let others = ovf(
            Dim::product(
                out.iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, d)| d),
            ),
            "target element count",
        )?;
        out[i] = match (total.as_i64(), others.as_i64()) {
            (Some(t), Some(o)) if o != 0 && t % o != 0 => {
                return invalid(format!(
                    "cannot reshape {} ({t} elements) to {}",
                    shape_to_string(in_shape),
                    shape_to_string(&target)
                ))
            }
            (Some(_), Some(0)) => Dim::ZERO,
            _ => total.div_exact(&others).unwrap_or_else(|| {
                Dim::derived(&format!("({total})/({others})"), &[&total, &others])
            }),
        };
    } else {
        let got = ovf(Dim::product(&out), "target element count")?;
        if let (Some(a), Some(b)) = (total.as_i64(), got.as_i64()) {
            if a != b {
                return invalid(format!(
                    "cannot reshape {} ({a} elements) to {} ({b} elements)",
                    shape_to_string(in_shape),
                    shape_to_string(&out)
                ));
            }
        }
    }
    let value = keep_value(x, &out);
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn flatten(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let r = s.len() as i64;
    let a = attrs!(cx, Flatten).axis;
    let a = if a < 0 { a + r } else { a };
    if !(0..=r).contains(&a) {
        return invalid(format!("axis out of range for rank {r}"));
    }
    let a = a as usize;
    let out = vec![
        ovf(Dim::product(&s[..a]), "flattened size")?,
        ovf(Dim::product(&s[a..]), "flattened size")?,
    ];
    let value = keep_value(x, &out);
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn transpose(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let perm: Vec<usize> = match &attrs!(cx, Transpose).perm {
        Some(p) => p
            .iter()
            .map(|&a| axis(a, s.len()))
            .collect::<InferResult<_>>()?,
        None => (0..s.len()).rev().collect(),
    };
    let mut seen = vec![false; s.len()];
    if perm.len() != s.len() || perm.iter().any(|&p| std::mem::replace(&mut seen[p], true)) {
        return invalid(format!(
            "perm {perm:?} is not a permutation of rank {}",
            s.len()
        ));
    }
    let out: Vec<Dim> = perm.iter().map(|&p| s[p].clone()).collect();
    let value = fold::moved(x, &out, |o, src| {
        for (i, &p) in perm.iter().enumerate() {
            src[p] = o[i];
        }
        true
    });
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn concat(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let facts: Vec<&Fact> = (0..cx.n_inputs()).filter_map(|i| cx.opt_input(i)).collect();
    let first = facts
        .first()
        .ok_or_else(|| InferError::Invalid("no inputs".into()))?;
    let shapes: Vec<&[Dim]> = facts
        .iter()
        .map(|f| f.shape.as_deref().ok_or(InferError::Unknown))
        .collect::<InferResult<_>>()?;
    let rank = shapes[0].len();
    if shapes.iter().any(|s| s.len() != rank) {
        return invalid("inputs have different ranks");
    }
    let a = axis(attrs!(cx, Concat).axis, rank)?;
    let mut out = shapes[0].to_vec();
    out[a] = ovf(Dim::sum(shapes.iter().map(|s| &s[a])), "concatenated size")?;
    for s in &shapes[1..] {
        for (i, d) in s.iter().enumerate() {
            if i == a {
                continue;
            }
            match (out[i].as_i64(), d.as_i64()) {
                (Some(x), Some(y)) if x != y => {
                    return invalid(format!("inputs differ on axis {i}: {x} against {y}"))
                }
                (None, Some(_)) => out[i] = d.clone(),
                _ => {}
            }
        }
    }
    let value = concat_values(&facts, a);
    Ok(vec![Fact {
        dtype: facts.iter().find_map(|f| f.dtype).or(first.dtype),
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

/// The concatenation of known values along `a`: for each block of the outer axes, every input's
/// slab in turn.
fn concat_values(facts: &[&Fact], a: usize) -> Option<Konst> {
    let shapes: Vec<Vec<u64>> = facts
        .iter()
        .map(|f| f.known_shape())
        .collect::<Option<_>>()?;
    let values: Vec<&Konst> = facts
        .iter()
        .map(|f| f.value.as_deref())
        .collect::<Option<_>>()?;
    let outer: u64 = shapes[0][..a].iter().product();
    let mut parts: Vec<Konst> = Vec::new();
    for o in 0..outer {
        for (s, v) in shapes.iter().zip(&values) {
            let slab: u64 = s[a..].iter().product();
            let start = (o * slab) as usize;
            let idx: Vec<usize> = (start..start + slab as usize).collect();
            parts.push(v.gather(&idx)?);
        }
    }
    let total: usize = parts.iter().map(Konst::len).sum();
    if total as u64 > MAX_FOLD_ELEMS {
        return None;
    }
    let mut ints = Vec::new();
    let mut floats = Vec::new();
    for p in parts {
        match p {
            Konst::Int(v) => ints.extend(v),
            Konst::Float(v) => floats.extend(v),
        }
    }
    match (ints.is_empty(), floats.is_empty()) {
        (_, true) => Some(Konst::Int(ints)),
        (true, false) => Some(Konst::Float(floats)),
        _ => None,
    }
}

pub fn split(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let sp = attrs!(cx, Split);
    let a = axis(sp.axis, s.len())?;
    let n_out = cx.node.outputs().len();
    let dim = &s[a];
    let sizes: Vec<Dim> = match cx.ints_from_input_or(1, sp.split.as_deref())? {
        Some(split) if !split.is_empty() => {
            if split.len() != n_out {
                return invalid(format!("{} split sizes for {n_out} outputs", split.len()));
            }
            if let Some(d) = dim.as_i64() {
                if split.iter().try_fold(0i64, |t, &v| t.checked_add(v)) != Some(d) {
                    return invalid(format!("split sizes {split:?} do not add up to {d}"));
                }
            }
            split.into_iter().map(Dim::known).collect()
        }
        _ => {
            let n = sp.num_outputs.unwrap_or(n_out as i64);
            if n < 1 || n as u64 != n_out as u64 {
                return invalid(format!("num_outputs is {n} for {n_out} outputs"));
            }
            let chunk = ovf(dim.ceil_div(n), "split size")?;
            let last = ovf(
                chunk
                    .checked_mul(&Dim::known(n - 1))
                    .and_then(|c| dim.checked_sub(&c)),
                "split size",
            )?;
            let mut v = vec![chunk; (n - 1) as usize];
            v.push(last);
            v
        }
    };
    let mut offset = 0u64;
    Ok(sizes
        .into_iter()
        .map(|d| {
            let mut o = s.to_vec();
            let start = offset;
            offset = offset.saturating_add(d.as_u64().unwrap_or(0));
            o[a] = d;
            let value = fold::moved(x, &o, |c, src| {
                src.copy_from_slice(c);
                src[a] += start;
                true
            });
            Fact {
                dtype: x.dtype,
                shape: Some(o.into()),
                value: value.map(Box::new),
            }
        })
        .collect())
}

/// Length of a slice of an axis of size `dim`, following the ONNX clamping rules when everything is
/// known, and the usual readings of symbolic cases (`x[1:]`, `x[:-1]`, `x[:seq]`, `x[::-1]`).
fn slice_len(dim: &Dim, start: &Dim, end: &Dim, step: i64) -> InferResult<Dim> {
    const BIG: i64 = 1 << 40;
    if let (Some(d), Some(s), Some(e)) = (dim.as_i64(), start.as_i64(), end.as_i64()) {
        let len = if step > 0 {
            let s = (if s < 0 { s.saturating_add(d) } else { s }).clamp(0, d);
            let e = (if e < 0 { e.saturating_add(d) } else { e }).clamp(0, d);
            if e > s {
                (e - s + step - 1) / step
            } else {
                0
            }
        } else {
            let s = (if s < 0 { s.saturating_add(d) } else { s }).clamp(0, d - 1);
            let e = (if e < 0 { e.saturating_add(d) } else { e }).clamp(-1, d - 1);
            if s > e {
                (s - e + (-step) - 1) / (-step)
            } else {
                0
            }
        };
        return Ok(Dim::known(len));
    }
    let opaque = || Ok(Dim::sym(&format!("slice({dim},{start},{end},{step})")));
    let (s, e) = (start.as_i64(), end.as_i64());
    let span = if step > 0 {
        match (s, e) {
            // x[s:] and x[-k:]
            (Some(s), Some(e)) if e >= BIG => {
                if s >= 0 {
                    dim.checked_sub(&Dim::known(s))
                } else {
                    Some(Dim::known(-s))
                }
            }
            (Some(s), Some(e)) if s >= 0 && e >= 0 => Some(Dim::known(e - s)),
            (Some(s), Some(e)) if s >= 0 && e < 0 => dim.checked_add(&Dim::known(e - s)),
            (Some(s), Some(e)) if s < 0 && e < 0 => Some(Dim::known(e - s)),
            (Some(s), None) if s >= 0 => end.checked_sub(&Dim::known(s)),
            _ => return opaque(),
        }
    } else {
        match (s, e) {
            (Some(s), Some(e)) if s == -1 && e <= -BIG => Some(dim.clone()),
            _ => return opaque(),
        }
    };
    let span = ovf(span, "slice length")?;
    let step = step.unsigned_abs() as i64;
    Ok(if step == 1 {
        span
    } else {
        ovf(span.ceil_div(step), "slice length")?
    })
}

pub fn slice(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let sl = attrs!(cx, Slice);
    let dims_of = |i: usize, attr: &Option<Vec<i64>>| -> InferResult<Option<Vec<Dim>>> {
        if cx.opset >= 10 {
            match cx.opt_input(i) {
                Some(_) => Ok(Some(cx.value(i)?.as_dims().ok_or(InferError::Unknown)?)),
                None => Ok(None),
            }
        } else {
            Ok(attr
                .as_ref()
                .map(|v| v.iter().map(|&x| Dim::known(x)).collect()))
        }
    };
    let starts =
        dims_of(1, &sl.starts)?.ok_or_else(|| InferError::Invalid("starts are required".into()))?;
    let ends =
        dims_of(2, &sl.ends)?.ok_or_else(|| InferError::Invalid("ends are required".into()))?;
    let axes: Vec<usize> = match dims_of(3, &sl.axes)? {
        Some(a) => a
            .iter()
            .map(|d| axis(d.as_i64().ok_or(InferError::Unknown)?, s.len()))
            .collect::<InferResult<_>>()?,
        None => {
            if starts.len() > s.len() {
                return invalid(format!("{} starts for rank {}", starts.len(), s.len()));
            }
            (0..starts.len()).collect()
        }
    };
    let steps: Vec<i64> = match dims_of(4, &None)? {
        Some(v) => v
            .iter()
            .map(|d| d.as_i64().ok_or(InferError::Unknown))
            .collect::<InferResult<_>>()?,
        None => vec![1; starts.len()],
    };
    if starts.len() != ends.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return invalid("starts, ends, axes and steps differ in length");
    }
    if steps.contains(&0) {
        return invalid("a step is 0");
    }
    let mut out = s.to_vec();
    for k in 0..axes.len() {
        out[axes[k]] = slice_len(&s[axes[k]], &starts[k], &ends[k], steps[k])?;
    }
    if starts.is_empty() {
        return Ok(vec![x.clone()]);
    }
    // every axis of a known value: the first index taken on each sliced axis, and the step
    let value = (|| {
        let inp = x.known_shape()?;
        let mut first = vec![0i64; inp.len()];
        let mut step = vec![1i64; inp.len()];
        for k in 0..axes.len() {
            let d = inp[axes[k]] as i64;
            let st = starts[k].as_i64()?;
            first[axes[k]] = if steps[k] > 0 {
                (if st < 0 { st.saturating_add(d) } else { st }).clamp(0, d)
            } else {
                (if st < 0 { st.saturating_add(d) } else { st }).clamp(0, d - 1)
            };
            step[axes[k]] = steps[k];
        }
        fold::moved(x, &out, |o, src| {
            for i in 0..src.len() {
                let c = first[i] + o[i] as i64 * step[i];
                if c < 0 {
                    return false;
                }
                src[i] = c as u64;
            }
            true
        })
    })();
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn gather(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let data = cx.input(0)?;
    let ds = cx.shape(0)?;
    let is = cx.shape(1)?;
    if ds.is_empty() {
        return invalid("data must have rank 1 or more");
    }
    let a = axis(attrs!(cx, Gather).axis, ds.len())?;
    let mut out = ds[..a].to_vec();
    out.extend_from_slice(is);
    out.extend_from_slice(&ds[a + 1..]);
    let value = (|| {
        let v = data.value.as_deref()?;
        let idx = cx.ints(1).ok()?;
        let dshape = data.known_shape()?;
        let outer: u64 = dshape[..a].iter().product();
        let inner: u64 = dshape[a + 1..].iter().product();
        let n = dshape[a] as i64;
        let mut flat = Vec::new();
        for o in 0..outer {
            for &i in &idx {
                let i = if i < 0 { i + n } else { i };
                if !(0..n).contains(&i) {
                    return None;
                }
                for j in 0..inner {
                    flat.push(((o * n as u64 + i as u64) * inner + j) as usize);
                }
            }
        }
        v.gather(&flat)
    })();
    Ok(vec![Fact {
        dtype: data.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn gather_elements(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let g = attrs!(cx, GatherElements);
    let data = cx.input(0)?;
    let out = cx.shape(1)?.to_vec();
    let rank = cx.shape(0)?.len();
    let a = axis(g.axis, rank.max(1))?;
    let value = (|| {
        let idx = cx.ints(1).ok()?;
        let n = *data.known_shape()?.get(a)? as i64;
        let mut k = 0;
        fold::moved(data, &out, |o, src| {
            src.copy_from_slice(o);
            let i = idx[k];
            k += 1;
            let i = if i < 0 { i + n } else { i };
            if !(0..n).contains(&i) {
                return false;
            }
            src[a] = i as u64;
            true
        })
    })();
    Ok(vec![Fact {
        dtype: data.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn gather_nd(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let ds = cx.shape(0)?;
    let is = cx.shape(1)?;
    let b = usize::try_from(attrs!(cx, GatherNd).batch_dims)
        .map_err(|_| InferError::Invalid("batch_dims is negative".into()))?;
    let last = is
        .last()
        .ok_or_else(|| InferError::Invalid("indices must have rank 1 or more".into()))?;
    let k = known_usize(last, "index depth")?;
    if b + k > ds.len() {
        return invalid("index depth exceeds the data rank");
    }
    let mut out = is[..is.len() - 1].to_vec();
    out.extend_from_slice(&ds[b + k..]);
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

pub fn squeeze(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let axes = cx.ints_from_input_or(1, attrs!(cx, Squeeze).axes.as_deref())?;
    let out: Vec<Dim> = match axes {
        Some(axes) if !axes.is_empty() => {
            let axes: Vec<usize> = axes
                .iter()
                .map(|&a| axis(a, s.len()))
                .collect::<InferResult<_>>()?;
            for &a in &axes {
                if let Some(v) = s[a].as_i64() {
                    if v != 1 {
                        return invalid(format!("cannot squeeze axis {a} of size {v}"));
                    }
                }
            }
            s.iter()
                .enumerate()
                .filter(|(i, _)| !axes.contains(i))
                .map(|(_, d)| d.clone())
                .collect()
        }
        _ => s
            .iter()
            .filter(|d| d.as_i64() != Some(1))
            .cloned()
            .collect(),
    };
    let value = keep_value(x, &out);
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn unsqueeze(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let axes = cx
        .ints_from_input_or(1, attrs!(cx, Unsqueeze).axes.as_deref())?
        .ok_or_else(|| InferError::Invalid("axes are required".into()))?;
    let rank = s.len() + axes.len();
    let mut axes: Vec<usize> = axes
        .iter()
        .map(|&a| axis(a, rank))
        .collect::<InferResult<_>>()?;
    axes.sort_unstable();
    if axes.windows(2).any(|w| w[0] == w[1]) {
        return invalid("repeated axis");
    }
    let mut it = s.iter();
    let out: Vec<Dim> = (0..rank)
        .map(|i| {
            if axes.binary_search(&i).is_ok() {
                Dim::known(1)
            } else {
                it.next().cloned().unwrap_or(Dim::known(1))
            }
        })
        .collect();
    let value = keep_value(x, &out);
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn expand(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let target = cx.value(1)?.as_dims().ok_or(InferError::Unknown)?;
    let out = broadcast(&[s, &target])?;
    let value = x
        .known_shape()
        .and_then(|inp| fold::moved(x, &out, fold::broadcast_from(&inp, out.len())));
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn tile(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let reps = cx.ints(1)?;
    if reps.len() != s.len() {
        return invalid(format!("{} repeats for rank {}", reps.len(), s.len()));
    }
    let out: Vec<Dim> = s
        .iter()
        .zip(&reps)
        .map(|(d, &r)| ovf(d.checked_mul(&Dim::known(r)), "tiled size"))
        .collect::<InferResult<_>>()?;
    let value = x.known_shape().and_then(|inp| {
        fold::moved(x, &out, |o, src| {
            for i in 0..src.len() {
                src[i] = o[i] % inp[i].max(1);
            }
            true
        })
    });
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

pub fn pad(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let pads = if cx.opset >= 11 {
        cx.ints(1)?
    } else {
        attrs!(cx, Pad)
            .pads
            .clone()
            .ok_or_else(|| InferError::Invalid("pads are required".into()))?
    };
    let axes: Vec<usize> = match cx.opt_input(3) {
        Some(_) => cx
            .ints(3)?
            .iter()
            .map(|&a| axis(a, s.len()))
            .collect::<InferResult<_>>()?,
        None => (0..s.len()).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return invalid(format!("{} pads for {} axes", pads.len(), axes.len()));
    }
    let mut out = s.to_vec();
    let n = axes.len();
    for (k, &a) in axes.iter().enumerate() {
        let both = pads[k]
            .checked_add(pads[k + n])
            .ok_or_else(|| InferError::Invalid(format!("pads of axis {a} overflow")))?;
        out[a] = ovf(s[a].checked_add(&Dim::known(both)), "padded size")?;
        if let Some(v) = out[a].as_i64() {
            if v < 0 {
                return invalid(format!("padding makes axis {a} negative ({v})"));
            }
        }
    }
    let x = cx.input(0)?;
    let p = attrs!(cx, Pad);
    let value = (|| {
        let inp = x.known_shape()?;
        let mut begin = vec![0i64; inp.len()];
        for (k, &a) in axes.iter().enumerate() {
            begin[a] = pads[k];
        }
        let fill = match cx.opt_input(2) {
            Some(f) if cx.opset >= 11 => f.value.as_deref()?.clone(),
            _ => Konst::Float(vec![p.value as f64]),
        };
        let v = x.value.as_deref()?;
        let idx = fold::index_map(&fold::known(&out)?, &inp, |o, src| {
            for i in 0..src.len() {
                let d = inp[i] as i64;
                let mut c = o[i] as i64 - begin[i];
                if !(0..d).contains(&c) {
                    match p.mode {
                        PadMode::Constant => return false,
                        PadMode::Edge => c = c.clamp(0, d - 1),
                        PadMode::Reflect if d > 1 => {
                            let period = 2 * (d - 1);
                            c = c.rem_euclid(period);
                            if c >= d {
                                c = period - c;
                            }
                        }
                        PadMode::Wrap => c = c.rem_euclid(d),
                        PadMode::Reflect => c = 0,
                    }
                }
                src[i] = c as u64;
            }
            true
        })?;
        fold::pick(v, &idx, Some(&fill))
    })();
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: Some(out.into()),
        value: value.map(Box::new),
    }])
}

/// `Resize` (opsets 10, 11+, 18+) and `Upsample`.
pub fn resize(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let present = |i: usize| {
        cx.opt_input(i)
            .filter(|f| f.numel().and_then(|d| d.as_i64()) != Some(0))
    };
    let r = attrs!(cx, Resize | Upsample);
    let (scales_in, sizes_in) = if matches!(cx.op, Op::Upsample(_)) || cx.opset < 11 {
        (Some(1), None)
    } else {
        (Some(2), Some(3))
    };
    let axes: Vec<usize> = match &r.axes {
        Some(a) => a
            .iter()
            .map(|&x| axis(x, s.len()))
            .collect::<InferResult<_>>()?,
        None => (0..s.len()).collect(),
    };
    let mut out = s.to_vec();
    if let Some(i) = sizes_in.filter(|&i| present(i).is_some()) {
        let sizes = cx.value(i)?.as_dims().ok_or(InferError::Unknown)?;
        if sizes.len() != axes.len() {
            return invalid(format!("{} sizes for {} axes", sizes.len(), axes.len()));
        }
        let policy = r.keep_aspect_ratio_policy.as_str();
        if policy == "stretch" {
            for (k, &a) in axes.iter().enumerate() {
                out[a] = sizes[k].clone();
            }
        } else {
            let ratios: Vec<f64> = axes
                .iter()
                .zip(&sizes)
                .map(|(&a, sz)| Some(sz.as_i64()? as f64 / s[a].as_i64()? as f64))
                .collect::<Option<_>>()
                .ok_or(InferError::Unknown)?;
            let r = if policy == "not_larger" {
                ratios.iter().copied().fold(f64::INFINITY, f64::min)
            } else {
                ratios.iter().copied().fold(0.0, f64::max)
            };
            for &a in &axes {
                let d = s[a].as_i64().ok_or(InferError::Unknown)?;
                out[a] = Dim::known((d as f64 * r).round() as i64);
            }
        }
        return Ok(vec![Fact::new(cx.dtype(0), out)]);
    }
    let scales: Vec<f64> = match scales_in.filter(|&i| present(i).is_some()) {
        Some(i) => cx.value(i)?.as_f64s().ok_or(InferError::Unknown)?,
        None => match &r.scales {
            Some(f) => f.iter().map(|&x| x as f64).collect(),
            None => return invalid("neither scales nor sizes are given"),
        },
    };
    if scales.len() != axes.len() {
        return invalid(format!("{} scales for {} axes", scales.len(), axes.len()));
    }
    for (k, &a) in axes.iter().enumerate() {
        let sc = scales[k];
        if !(sc > 0.0 && sc.is_finite()) {
            return invalid(format!("scale {sc} is not positive"));
        }
        out[a] = match s[a].as_i64() {
            Some(d) => Dim::known((d as f64 * sc + 1e-9).floor() as i64),
            None if sc.fract() == 0.0 => {
                ovf(s[a].checked_mul(&Dim::known(sc as i64)), "resized size")?
            }
            None if (1.0 / sc).fract() == 0.0 => {
                ovf(s[a].floor_div((1.0 / sc) as i64), "resized size")?
            }
            None => Dim::sym(&format!("floor({}*{sc})", s[a])),
        };
    }
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

pub fn depth_to_space(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    if s.len() != 4 {
        return invalid("input must have rank 4");
    }
    let b = attrs!(cx, DepthToSpace | SpaceToDepth).blocksize;
    let bb = ovf(b.checked_mul(b), "blocksize squared")?;
    let c = s[1].div_exact(&Dim::known(bb)).ok_or_else(|| {
        InferError::Invalid(format!(
            "{} channels do not divide by blocksize² = {}",
            s[1], bb
        ))
    })?;
    let k = Dim::known(b);
    Ok(vec![Fact::new(
        cx.dtype(0),
        vec![
            s[0].clone(),
            c,
            ovf(s[2].checked_mul(&k), "size")?,
            ovf(s[3].checked_mul(&k), "size")?,
        ],
    )])
}

pub fn space_to_depth(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    if s.len() != 4 {
        return invalid("input must have rank 4");
    }
    let b = attrs!(cx, DepthToSpace | SpaceToDepth).blocksize;
    let k = Dim::known(b);
    let div = |d: &Dim| {
        d.div_exact(&k)
            .ok_or_else(|| InferError::Invalid(format!("{d} does not divide by blocksize {b}")))
    };
    Ok(vec![Fact::new(
        cx.dtype(0),
        vec![
            s[0].clone(),
            ovf(
                b.checked_mul(b)
                    .and_then(|bb| s[1].checked_mul(&Dim::known(bb))),
                "channels x blocksize squared",
            )?,
            div(&s[2])?,
            div(&s[3])?,
        ],
    )])
}

crate::named_enum! {
    /// How `ScatterND` and `ScatterElements` combine an update with the data (opset 16+).
    pub enum Reduction {
        /// The update replaces the data.
        None = "none",
        /// Added.
        Add = "add",
        /// Multiplied.
        Mul = "mul",
        /// The larger.
        Max = "max",
        /// The smaller.
        Min = "min",
    }
}

/// `ScatterND` and `ScatterElements`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Scatter {
    /// `ScatterElements` only.
    pub axis: i64,
    pub reduction: Reduction,
}

impl FromAttrs for Scatter {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let reduction = match r.string("reduction")? {
            None => Reduction::None,
            Some(s) => s
                .parse()
                .map_err(|e| format!("attribute 'reduction': {e}"))?,
        };
        Ok(Scatter {
            axis: r.int("axis", 0)?,
            reduction,
        })
    }
}

/// `ScatterND`, `ScatterElements` (and `Scatter`, its deprecated name before opset 11): the data
/// with some elements updated (same type and shape).
pub fn scatter(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = attrs!(cx, ScatterNd | ScatterElements | Scatter);
    let data = cx.shape(0)?;
    let indices = cx.shape(1)?;
    let updates = cx.shape(2)?;
    if matches!(cx.op, Op::ScatterElements(_) | Op::Scatter(_)) {
        axis(s.axis, data.len())?;
        if indices.len() != data.len() || updates.len() != data.len() {
            return invalid("data, indices and updates must have the same rank");
        }
    } else if let Some(k) = indices.last().and_then(Dim::as_u64) {
        // updates: indices[:-1] + data[k:]
        let k = usize::try_from(k).map_err(|_| InferError::Unknown)?;
        if k > data.len() || updates.len() + 1 != indices.len() + data.len() - k {
            return invalid(format!(
                "updates of rank {} do not fit indices of rank {} into data of rank {}",
                updates.len(),
                indices.len(),
                data.len()
            ));
        }
    }
    Ok(vec![Fact::new(cx.dtype(0), data.to_vec())])
}

/// An indexed write (`x[idx] = v`, index_put) keeps its indices for backward.
pub fn scatter_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.out_grad() {
        cx.node.input(1).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

/// Reflect and edge padding save their input (to route gradients back); constant padding nothing.
pub fn pad_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    let Op::Pad(p) = cx.op else { return None };
    Some(
        if cx.grad(cx.node.input(0)) && p.mode != PadMode::Constant {
            cx.node.input(0).map(Save::Value).into_iter().collect()
        } else {
            Vec::new()
        },
    )
}

/// `OneHot`'s axis (where the depth axis is inserted).
#[derive(Clone, Debug, PartialEq)]
pub struct OneHot {
    pub axis: i64,
}

impl FromAttrs for OneHot {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(OneHot {
            axis: AttrReader(a).int("axis", -1)?,
        })
    }
}

/// A size only the data decides (how many elements a mask keeps, how many boxes survive): a
/// symbol named after the op and its node, never a guessed number.
pub(crate) fn data_dependent(what: &str, cx: &OpCx) -> Dim {
    Dim::sym(&format!("{what}({})", cx.name))
}

/// `OneHot`: the indices' shape with `depth` inserted at `axis`, in the type of `values`. A depth
/// that does not fold is a data-dependent size.
pub fn one_hot(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let a = attrs!(cx, OneHot).axis;
    let r = s.len() as i64 + 1;
    let at = if a < 0 { a + r } else { a };
    if !(0..r).contains(&at) {
        return invalid(format!("axis {a} is out of range for rank {r}"));
    }
    let depth = match cx.opt_input(1).and_then(|f| f.value.as_deref()) {
        Some(v) => match v.as_dims().as_deref() {
            Some([d]) => {
                if let Some(k) = d.as_i64() {
                    if k < 1 {
                        return invalid(format!("depth {k} is not positive"));
                    }
                }
                d.clone()
            }
            _ => return invalid(format!("depth has {} values, expected 1", v.len())),
        },
        None => data_dependent("onehot", cx),
    };
    let mut out = s.to_vec();
    out.insert(at as usize, depth);
    Ok(vec![Fact::new(cx.dtype(2), out)])
}

/// `Compress`'s axis; `None` flattens the input first.
#[derive(Clone, Debug, PartialEq)]
pub struct Compress {
    pub axis: Option<i64>,
}

impl FromAttrs for Compress {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Compress {
            axis: AttrReader(a).int_opt("axis")?,
        })
    }
}

/// `Compress`: the slices of `axis` (of the flattened input without one) where the condition is
/// true. The count is known when the condition folds, a data-dependent size otherwise.
pub fn compress(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let c = cx.shape(1)?;
    if c.len() != 1 {
        return invalid(format!("condition has rank {}, expected 1", c.len()));
    }
    let kept = match cx.opt_input(1).and_then(|f| f.value.as_deref()) {
        Some(v) => match v.as_f64s() {
            Some(bits) => Dim::known(bits.iter().filter(|&&b| b != 0.0).count() as i64),
            None => data_dependent("compress", cx),
        },
        None => data_dependent("compress", cx),
    };
    let out = match attrs!(cx, Compress).axis {
        None => vec![kept],
        Some(a) => {
            let a = axis(a, s.len())?;
            if let (Some(n), Some(len)) = (s[a].as_i64(), c[0].as_i64()) {
                if len > n {
                    return invalid(format!(
                        "condition has {len} values for an axis of size {n}"
                    ));
                }
            }
            let mut out = s.to_vec();
            out[a] = kept;
            out
        }
    };
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `Compress` is an indexed read (`index_select`, `masked_select`): it keeps its condition.
pub fn compress_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.out_grad() {
        cx.node.input(1).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

/// `ReverseSequence`'s axes.
#[derive(Clone, Debug, PartialEq)]
pub struct ReverseSequence {
    pub batch_axis: i64,
    pub time_axis: i64,
}

impl FromAttrs for ReverseSequence {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let (batch_axis, time_axis) = (r.int("batch_axis", 1)?, r.int("time_axis", 0)?);
        if !matches!((batch_axis, time_axis), (0, 1) | (1, 0)) {
            return Err(format!(
                "attributes 'batch_axis' and 'time_axis' must be 0 and 1 in some order, found {batch_axis} and {time_axis}"
            ));
        }
        Ok(ReverseSequence {
            batch_axis,
            time_axis,
        })
    }
}

/// `ReverseSequence`: the input's shape; `sequence_lens` has one length per batch entry.
pub fn reverse_sequence(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let r = attrs!(cx, ReverseSequence);
    let s = cx.shape(0)?;
    if s.len() < 2 {
        return invalid(format!("input has rank {}, expected at least 2", s.len()));
    }
    if let Some(l) = cx.opt_input(1).and_then(|f| f.shape.as_deref()) {
        let b = &s[r.batch_axis as usize];
        match l {
            [n] if n.as_i64().zip(b.as_i64()).is_some_and(|(x, y)| x != y) => {
                return invalid(format!("{n} sequence lengths for a batch of {b}"))
            }
            [_] => {}
            _ => return invalid(format!("sequence_lens has rank {}, expected 1", l.len())),
        }
    }
    Ok(vec![Fact::new(cx.dtype(0), s.to_vec())])
}

/// `CenterCropPad`'s axes (all when absent).
#[derive(Clone, Debug, PartialEq)]
pub struct CenterCropPad {
    pub axes: Option<Vec<i64>>,
}

impl FromAttrs for CenterCropPad {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(CenterCropPad {
            axes: AttrReader(a).ints("axes")?,
        })
    }
}

/// `CenterCropPad`: the input with each listed axis cropped or padded to the size in `shape`.
pub fn center_crop_pad(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let target = cx.value(1)?.as_dims().ok_or(InferError::Unknown)?;
    let axes: Vec<usize> = match &attrs!(cx, CenterCropPad).axes {
        Some(a) => a
            .iter()
            .map(|&x| axis(x, s.len()))
            .collect::<InferResult<_>>()?,
        None => (0..s.len()).collect(),
    };
    if target.len() != axes.len() {
        return invalid(format!("{} sizes for {} axes", target.len(), axes.len()));
    }
    let mut out = s.to_vec();
    for (&a, d) in axes.iter().zip(&target) {
        if let Some(v) = d.as_i64() {
            if v < 0 {
                return invalid(format!("target size {v} on axis {a} is negative"));
            }
        }
        out[a] = d.clone();
    }
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `GridSample`'s attributes (`bilinear`/`bicubic` before opset 20, `linear`/`cubic` after).
#[derive(Clone, Debug, PartialEq)]
pub struct GridSample {
    pub mode: String,
    pub padding_mode: String,
    pub align_corners: bool,
}

impl FromAttrs for GridSample {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let mode = r
            .string("mode")?
            .unwrap_or_else(|| if opset < 20 { "bilinear" } else { "linear" }.into());
        if !matches!(
            mode.as_str(),
            "bilinear" | "linear" | "nearest" | "bicubic" | "cubic"
        ) {
            return Err(format!("attribute 'mode': unknown value '{mode}'"));
        }
        let padding_mode = r.string("padding_mode")?.unwrap_or_else(|| "zeros".into());
        if !matches!(padding_mode.as_str(), "zeros" | "border" | "reflection") {
            return Err(format!(
                "attribute 'padding_mode': unknown value '{padding_mode}'"
            ));
        }
        Ok(GridSample {
            mode,
            padding_mode,
            align_corners: r.flag("align_corners", false)?,
        })
    }
}

/// `GridSample`: X `[N, C, D1..Dr]` sampled at grid `[N, H1..Hr, r]`: `[N, C, H1..Hr]`.
pub fn grid_sample(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    let g = cx.shape(1)?;
    if x.len() < 3 {
        return invalid(format!("input has rank {}, expected at least 3", x.len()));
    }
    let r = x.len() - 2;
    if g.len() != x.len() {
        return invalid(format!(
            "grid has rank {} for a rank-{} input",
            g.len(),
            x.len()
        ));
    }
    if let Some(last) = g[r + 1].as_i64() {
        if last != r as i64 {
            return invalid(format!(
                "grid's last axis is {last}, expected {r} (one coordinate per spatial axis)"
            ));
        }
    }
    let n = match (x[0].as_i64(), g[0].as_i64()) {
        (Some(a), Some(b)) if a != b => {
            return invalid(format!("input batch {a} but grid batch {b}"))
        }
        (None, Some(_)) => g[0].clone(),
        _ => x[0].clone(),
    };
    let mut out = vec![n, x[1].clone()];
    out.extend_from_slice(&g[1..=r]);
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `grid_sampler` keeps its input and its grid.
pub fn grid_sample_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.out_grad() {
        cx.node
            .inputs()
            .iter()
            .take(2)
            .flatten()
            .map(Save::Value)
            .collect()
    } else {
        Vec::new()
    })
}

/// `AffineGrid`'s attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct AffineGrid {
    pub align_corners: bool,
}

impl FromAttrs for AffineGrid {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(AffineGrid {
            align_corners: AttrReader(a).flag("align_corners", false)?,
        })
    }
}

/// `AffineGrid`: theta `[N, 2, 3]` (or `[N, 3, 4]`) and size `[N, C, H, W]` (or `[N, C, D, H, W]`)
/// give the grid `[N, H, W, 2]` (or `[N, D, H, W, 3]`).
pub fn affine_grid(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let t = cx.shape(0)?;
    if t.len() != 3 {
        return invalid(format!("theta has rank {}, expected 3", t.len()));
    }
    let size = cx.value(1)?.as_dims().ok_or(InferError::Unknown)?;
    let r = match size.len() {
        4 => 2,
        5 => 3,
        l => return invalid(format!("size has {l} values, expected 4 or 5")),
    };
    let want = [r as i64, r as i64 + 1];
    for (i, w) in want.iter().enumerate() {
        if let Some(v) = t[i + 1].as_i64() {
            if v != *w {
                return invalid(format!(
                    "theta is {} for a {r}-D grid, expected [N, {}, {}]",
                    shape_to_string(t),
                    want[0],
                    want[1]
                ));
            }
        }
    }
    let mut out = vec![size[0].clone()];
    out.extend_from_slice(&size[2..]);
    out.push(Dim::known(r as i64));
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// MACs of `AffineGrid`: each grid point is theta `[r, r+1]` times the homogeneous position
/// `[r+1]` (PyTorch's `base_grid @ thetaᵀ`): `N · prod(spatial) · r · (r+1)`, which is
/// `numel(grid) · (r+1)`.
pub fn affine_grid_macs(_cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let g = out.first()?;
    let r = g.shape.as_ref()?.last()?.clone();
    g.numel()?.checked_mul(&r.checked_add(&Dim::known(1))?)
}

/// `TensorScatter`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorScatter {
    pub axis: i64,
    pub circular: bool,
}

impl FromAttrs for TensorScatter {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let circular = match r.string("mode")?.as_deref() {
            None | Some("linear") => false,
            Some("circular") => true,
            Some(m) => return Err(format!("attribute 'mode': unknown value '{m}'")),
        };
        Ok(TensorScatter {
            axis: r.int("axis", -2)?,
            circular,
        })
    }
}

/// `TensorScatter`: the cache with the update written along `axis`; the present cache has the
/// past cache's shape.
pub fn tensor_scatter(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let t = attrs!(cx, TensorScatter);
    let past = cx.shape(0)?;
    let a = axis(t.axis, past.len())?;
    if a == 0 {
        return invalid("axis 0 is the batch axis; the sequence axis must be another");
    }
    if let Some(u) = cx.opt_input(1).and_then(|f| f.shape.as_deref()) {
        if u.len() != past.len() {
            return invalid(format!(
                "update has rank {} for a rank-{} cache",
                u.len(),
                past.len()
            ));
        }
        for (i, (p, q)) in past.iter().zip(u).enumerate() {
            if let (Some(x), Some(y)) = (p.as_i64(), q.as_i64()) {
                if (i != a && x != y) || (i == a && y > x) {
                    return invalid(format!(
                        "update {} does not fit the cache {} along axis {a}",
                        shape_to_string(u),
                        shape_to_string(past)
                    ));
                }
            }
        }
    }
    Ok(vec![Fact::new(cx.dtype(0), past.to_vec())])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(v: i64) -> Dim {
        Dim::known(v)
    }

    #[test]
    fn known_slices_follow_the_spec() {
        assert_eq!(slice_len(&k(10), &k(2), &k(i64::MAX), 1).unwrap(), k(8));
        assert_eq!(slice_len(&k(10), &k(-3), &k(i64::MAX), 1).unwrap(), k(3));
        assert_eq!(slice_len(&k(10), &k(0), &k(-1), 2).unwrap(), k(5));
        assert_eq!(slice_len(&k(10), &k(-1), &k(i64::MIN), -1).unwrap(), k(10));
        assert_eq!(slice_len(&k(10), &k(8), &k(2), -3).unwrap(), k(2));
        assert_eq!(slice_len(&k(10), &k(20), &k(30), 1).unwrap(), k(0));
    }

    #[test]
    fn symbolic_slices() {
        let s = Dim::sym("seq");
        assert_eq!(
            slice_len(&s, &k(1), &k(i64::MAX), 1).unwrap().to_string(),
            "seq - 1"
        );
        assert_eq!(
            slice_len(&s, &k(0), &k(-1), 1).unwrap().to_string(),
            "seq - 1"
        );
        assert_eq!(slice_len(&k(512), &k(0), &s, 1).unwrap(), s);
        assert_eq!(slice_len(&s, &k(-1), &k(-(1 << 62)), -1).unwrap(), s);
    }

    #[test]
    fn compress_counts_a_known_condition() {
        use super::super::testing::{f32s, run, shapes};
        use crate::ir::{Attr, DType};
        let cond = |v: &[i64]| {
            Some(
                Fact::new(Some(DType::Bool), vec![k(v.len() as i64)])
                    .with_value(Konst::Int(v.iter().map(|&x| k(x)).collect())),
            )
        };
        let (out, _) = run(
            "Compress",
            vec![("axis", Attr::Int(1))],
            vec![f32s(&[2, 3, 4]), cond(&[1, 0, 1])],
            11,
        );
        assert_eq!(shapes(&out), ["[2,2,4]"]);
        let (out, _) = run(
            "Compress",
            vec![],
            vec![f32s(&[2, 3]), cond(&[1, 1, 0, 1])],
            11,
        );
        assert_eq!(shapes(&out), ["[3]"]);
        // a condition computed at run time: the count is the data's
        let unknown = Some(Fact::new(Some(DType::Bool), vec![k(3)]));
        let (out, _) = run(
            "Compress",
            vec![("axis", Attr::Int(1))],
            vec![f32s(&[2, 3, 4]), unknown],
            11,
        );
        assert_eq!(shapes(&out), ["[2,compress(n),4]"]);
    }

    #[test]
    fn one_hot_affine_grid_and_crops() {
        use super::super::testing::{f32s, i64s, run, shapes};
        use crate::ir::Attr;
        let scalar5 = Some(
            Fact::new(Some(crate::ir::DType::I64), Vec::new()).with_value(Konst::Int(vec![k(5)])),
        );
        let (out, _) = run(
            "OneHot",
            vec![("axis", Attr::Int(1))],
            vec![f32s(&[2, 3]), scalar5, f32s(&[2])],
            11,
        );
        assert_eq!(shapes(&out), ["[2,5,3]"]);
        // N·H·W points, each a [2, 3] theta times [x, y, 1]: 2·5·6·2·3 = 360
        let (out, macs) = run(
            "AffineGrid",
            vec![],
            vec![f32s(&[2, 2, 3]), i64s(&[2, 3, 5, 6])],
            20,
        );
        assert_eq!(shapes(&out), ["[2,5,6,2]"]);
        assert_eq!(macs, Some(k(360)));
        let (out, _) = run(
            "AffineGrid",
            vec![],
            vec![f32s(&[2, 3, 4]), i64s(&[2, 3, 5, 6])],
            20,
        );
        assert!(shapes(&out)[0].contains("expected [N, 2, 3]"), "{out:?}");
        let (out, _) = run(
            "CenterCropPad",
            vec![("axes", Attr::Ints(vec![-2, -1]))],
            vec![f32s(&[2, 3, 8, 8]), i64s(&[5, 11])],
            18,
        );
        assert_eq!(shapes(&out), ["[2,3,5,11]"]);
        let (out, _) = run(
            "GridSample",
            vec![],
            vec![f32s(&[2, 3, 8, 8]), f32s(&[2, 5, 6, 2])],
            16,
        );
        assert_eq!(shapes(&out), ["[2,3,5,6]"]);
        let (out, _) = run(
            "GridSample",
            vec![],
            vec![f32s(&[2, 3, 8, 8]), f32s(&[2, 5, 6, 3])],
            16,
        );
        assert!(shapes(&out)[0].contains("expected 2"), "{out:?}");
    }
}
