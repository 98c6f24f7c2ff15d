//! Pooling: windowed (`MaxPool`, `AveragePool`, `LpPool`), global, over regions of interest
//! (`RoiAlign`, `MaxRoiPool`), and its inverse (`MaxUnpool`). Not counted in MACs (the bilinear
//! samples of `RoiAlign` are interpolation, like `Resize`).

use super::conv::WindowAttrs;
use super::{attrs, invalid, ovf, AttrReader, FromAttrs, InferError, InferResult, Op, OpCx};
use crate::analysis::fact::Fact;
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{shape_to_string, Attrs, DType, Dim};

/// A windowed pool's attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Pool {
    pub window: WindowAttrs,
    /// `AveragePool`: padding cells count in the divisor.
    pub count_include_pad: bool,
    /// `MaxPool`: the indices output is column-major over the spatial axes.
    pub storage_order: bool,
}

impl FromAttrs for Pool {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let window = WindowAttrs::from_attrs(a, opset)?;
        if window.kernel_shape.is_none() {
            return Err("attribute 'kernel_shape' is required".into());
        }
        let r = AttrReader(a);
        Ok(Pool {
            window,
            count_include_pad: r.flag("count_include_pad", false)?,
            storage_order: r.flag("storage_order", false)?,
        })
    }
}

impl Pool {
    /// The window over `spatial` axes.
    pub fn window(&self, spatial: usize) -> Result<super::conv::Window, String> {
        let k = self.window.kernel_shape.clone().unwrap_or_default();
        if k.len() != spatial {
            return Err(format!(
                "attribute 'kernel_shape' has {} values for {spatial} spatial axes",
                k.len()
            ));
        }
        self.window.window(k)
    }
}

/// The pool attributes of an op, if it is a windowed pool.
pub fn pool_of(op: &Op) -> Option<&Pool> {
    match op {
        Op::MaxPool(p) | Op::AveragePool(p) | Op::LpPool(p) => Some(p),
        _ => None,
    }
}

pub fn pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let p = attrs!(cx, MaxPool | AveragePool | LpPool);
    let x = cx.shape(0)?;
    if x.len() < 3 {
        return invalid(format!("input has rank {}, expected at least 3", x.len()));
    }
    let win = p.window(x.len() - 2)?;
    let mut out = vec![x[0].clone(), x[1].clone()];
    for (i, d) in x[2..].iter().enumerate() {
        out.push(win.out_dim(i, d)?);
    }
    let mut facts = vec![Fact::new(cx.dtype(0), out.clone())];
    if matches!(cx.op, Op::MaxPool(_)) {
        facts.push(Fact::new(Some(DType::I64), out));
    }
    Ok(facts)
}

pub fn global_pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    if x.len() < 2 {
        return invalid(format!("input has rank {}, expected at least 2", x.len()));
    }
    let mut out = x[..2].to_vec();
    out.extend(std::iter::repeat_n(Dim::known(1), x.len() - 2));
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `MaxRoiPool`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct MaxRoiPool {
    pub pooled_shape: [i64; 2],
    pub spatial_scale: f32,
}

impl FromAttrs for MaxRoiPool {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let p = r
            .ints("pooled_shape")?
            .ok_or("attribute 'pooled_shape' is required")?;
        match p.as_slice() {
            &[h, w] if h > 0 && w > 0 => Ok(MaxRoiPool {
                pooled_shape: [h, w],
                spatial_scale: r.float("spatial_scale", 1.0)?,
            }),
            _ => Err(format!(
                "attribute 'pooled_shape' must be two positive sizes, found {p:?}"
            )),
        }
    }
}

/// `RoiAlign`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct RoiAlign {
    pub output_height: i64,
    pub output_width: i64,
    pub sampling_ratio: i64,
    pub spatial_scale: f32,
    /// `max` pooling of the samples (else their average).
    pub max: bool,
    /// `half_pixel` (opset 16's default) shifts the box by half a pixel; `output_half_pixel`
    /// (the only behaviour before opset 16) does not.
    pub half_pixel: bool,
}

impl FromAttrs for RoiAlign {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let max = match r.string("mode")?.as_deref() {
            None | Some("avg") => false,
            Some("max") => true,
            Some(m) => return Err(format!("attribute 'mode': unknown value '{m}'")),
        };
        let half_pixel = match r.string("coordinate_transformation_mode")?.as_deref() {
            None => opset >= 16,
            Some("half_pixel") => true,
            Some("output_half_pixel") => false,
            Some(m) => {
                return Err(format!(
                    "attribute 'coordinate_transformation_mode': unknown value '{m}'"
                ))
            }
        };
        let (h, w) = (r.int("output_height", 1)?, r.int("output_width", 1)?);
        if h < 1 || w < 1 {
            return Err(format!(
                "attributes 'output_height' and 'output_width' must be positive, found {h} and {w}"
            ));
        }
        Ok(RoiAlign {
            output_height: h,
            output_width: w,
            sampling_ratio: r.int("sampling_ratio", 0)?,
            spatial_scale: r.float("spatial_scale", 1.0)?,
            max,
            half_pixel,
        })
    }
}

/// `RoiAlign` (rois `[R, 4]`, batch_indices `[R]`) and `MaxRoiPool` (rois `[R, 5]`): one pooled
/// `[C, h, w]` map per region of interest, `[R, C, h, w]`.
pub fn roi_pool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (h, w, cols) = match cx.op {
        Op::RoiAlign(a) => (a.output_height, a.output_width, 4),
        Op::MaxRoiPool(p) => (p.pooled_shape[0], p.pooled_shape[1], 5),
        _ => return invalid("internal: not a region-of-interest pool"),
    };
    let x = cx.shape(0)?;
    if x.len() != 4 {
        return invalid(format!(
            "input has rank {}, expected 4 (N, C, H, W)",
            x.len()
        ));
    }
    let rois = cx.shape(1)?;
    if rois.len() != 2 || rois[1].as_i64().is_some_and(|c| c != cols) {
        return invalid(format!(
            "rois is {}, expected [num_rois, {cols}]",
            shape_to_string(rois)
        ));
    }
    let mut n = rois[0].clone();
    if let Some(b) = cx.opt_input(2).and_then(|f| f.shape.as_deref()) {
        match b {
            [k] if k.as_i64().zip(n.as_i64()).is_some_and(|(p, q)| p != q) => {
                return invalid(format!("{k} batch indices for {n} rois"))
            }
            [k] if !n.is_known() => n = k.clone(),
            [_] => {}
            _ => return invalid(format!("batch_indices has rank {}, expected 1", b.len())),
        }
    }
    Ok(vec![Fact::new(
        cx.dtype(0),
        vec![n, x[1].clone(), Dim::known(h), Dim::known(w)],
    )])
}

/// torchvision's `roi_align` keeps the rois; `roi_pool` the rois and an int32 argmax per output
/// element.
pub fn roi_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    if !cx.grad(cx.node.input(0)) {
        return Some(Vec::new());
    }
    let mut s: Vec<Save> = cx.node.input(1).map(Save::Value).into_iter().collect();
    if matches!(cx.op, Op::MaxRoiPool(_)) {
        let y = cx.fact(cx.node.output(0)?).numel()?.as_u64()?;
        s.push(Save::Own(y.checked_mul(4)?));
    }
    Some(s)
}

/// `MaxUnpool`: X `[N, C, D1..]` scattered to `output_shape` if given, else to
/// `(Di - 1) · stride + kernel - pad_begin - pad_end` per spatial axis.
pub fn max_unpool(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let p = attrs!(cx, MaxUnpool);
    let x = cx.shape(0)?;
    if x.len() < 3 {
        return invalid(format!("input has rank {}, expected at least 3", x.len()));
    }
    if let Some(f) = cx.opt_input(2) {
        let out = f
            .value
            .as_ref()
            .and_then(|v| v.as_dims())
            .ok_or(InferError::Unknown)?;
        if out.len() != x.len() {
            return invalid(format!(
                "output_shape has {} values for a rank-{} input",
                out.len(),
                x.len()
            ));
        }
        return Ok(vec![Fact::new(cx.dtype(0), out)]);
    }
    let n = x.len() - 2;
    let win = p.window(n)?;
    let mut out = vec![x[0].clone(), x[1].clone()];
    for (i, d) in x[2..].iter().enumerate() {
        let tail = ovf(
            win.kernel[i]
                .checked_sub(win.pads[i])
                .and_then(|v| v.checked_sub(win.pads[i + n])),
            "output size",
        )?;
        let dim = ovf(
            d.checked_sub(&Dim::known(1))
                .and_then(|v| v.checked_mul(&Dim::known(win.strides[i])))
                .and_then(|v| v.checked_add(&Dim::known(tail))),
            "output size",
        )?;
        if let Some(v) = dim.as_i64() {
            if v <= 0 {
                return invalid(format!(
                    "output size {v} on spatial axis {i} is not positive"
                ));
            }
        }
        out.push(dim);
    }
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `max_unpool` keeps its indices (`max_pool_double_backward(grad, indices)`).
pub fn max_unpool_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.grad(cx.node.input(0)) {
        cx.node.input(1).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, i64s, run, shapes};
    use crate::ir::Attr;

    #[test]
    fn rois_pool_to_one_map_each() {
        let (out, _) = run(
            "RoiAlign",
            vec![
                ("output_height", Attr::Int(3)),
                ("output_width", Attr::Int(4)),
            ],
            vec![f32s(&[2, 3, 8, 8]), f32s(&[5, 4]), f32s(&[5])],
            16,
        );
        assert_eq!(shapes(&out), ["[5,3,3,4]"]);
        let (out, _) = run(
            "MaxRoiPool",
            vec![("pooled_shape", Attr::Ints(vec![2, 2]))],
            vec![f32s(&[2, 3, 8, 8]), f32s(&[5, 4])],
            16,
        );
        assert!(shapes(&out)[0].contains("[num_rois, 5]"), "{out:?}");
    }

    #[test]
    fn max_unpool_inverts_the_window() {
        let k = || {
            vec![
                ("kernel_shape", Attr::Ints(vec![3, 3])),
                ("strides", Attr::Ints(vec![2, 2])),
                ("pads", Attr::Ints(vec![1, 1, 1, 1])),
            ]
        };
        // (4 - 1)·2 + 3 - 2 = 7
        let (out, _) = run(
            "MaxUnpool",
            k(),
            vec![f32s(&[1, 2, 4, 4]), f32s(&[1, 2, 4, 4])],
            11,
        );
        assert_eq!(shapes(&out), ["[1,2,7,7]"]);
        let (out, _) = run(
            "MaxUnpool",
            k(),
            vec![
                f32s(&[1, 2, 4, 4]),
                f32s(&[1, 2, 4, 4]),
                i64s(&[1, 2, 8, 8]),
            ],
            11,
        );
        assert_eq!(shapes(&out), ["[1,2,8,8]"]);
    }
}
