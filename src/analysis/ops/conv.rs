//! Convolutions: `Conv` and `ConvTranspose`, and the window arithmetic pooling shares. The window
//! ([`Window`]) is the one description of kernel, strides, dilations and padding: shape inference,
//! the checker's kernels and the rewrites all size outputs and pads with it.
//!
//! MACs: a `Conv` output element costs `C_in/group × k₁×…×kₙ` multiply-accumulates, so the total is
//! `numel(Y) × W[1] × prod(kernel)`. A `ConvTranspose` input element scatters into
//! `C_out/group × prod(kernel)` outputs: `numel(X) × W[1] × prod(kernel)`.
//!
//! Backward: a convolution saves its input (and its weight, a parameter) when its output needs a
//! gradient, whether or not the input does.

use super::{attrs, invalid, ovf, AttrReader, FromAttrs, InferError, InferResult, Op, OpCx};
use crate::analysis::fact::Fact;
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{Attrs, Dim};

crate::named_enum! {
    /// How spatial padding is chosen (`auto_pad`).
    pub enum AutoPad {
        /// Explicit `pads`.
        NotSet = "NOTSET",
        /// Pad so that the output is `ceil(input / stride)`, the extra cell at the end.
        SameUpper = "SAME_UPPER",
        /// The same, the extra cell at the beginning.
        SameLower = "SAME_LOWER",
        /// No padding.
        Valid = "VALID",
    }
}

/// The window attributes of a conv or pool as the node states them (lists may be absent).
#[derive(Clone, Debug, PartialEq)]
pub struct WindowAttrs {
    pub kernel_shape: Option<Vec<i64>>,
    pub strides: Option<Vec<i64>>,
    pub dilations: Option<Vec<i64>>,
    /// Begin pads then end pads.
    pub pads: Option<Vec<i64>>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
}

impl FromAttrs for WindowAttrs {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let auto_pad = match r.string("auto_pad")?.as_deref() {
            None | Some("") => AutoPad::NotSet,
            Some(s) => s
                .parse()
                .map_err(|_| format!("attribute 'auto_pad': unknown value '{s}'"))?,
        };
        Ok(WindowAttrs {
            kernel_shape: r.ints("kernel_shape")?,
            strides: r.ints("strides")?,
            dilations: r.ints("dilations")?,
            pads: r.ints("pads")?,
            auto_pad,
            ceil_mode: r.flag("ceil_mode", false)?,
        })
    }
}

impl WindowAttrs {
    /// The window over `kernel.len()` spatial axes, with defaults filled in and values checked.
    pub fn window(&self, kernel: Vec<i64>) -> Result<Window, String> {
        let n = kernel.len();
        let list = |name: &str, v: &Option<Vec<i64>>, default: i64, len: usize| match v {
            None => Ok(vec![default; len]),
            Some(v) if v.len() == len => Ok(v.clone()),
            Some(v) => Err(format!(
                "attribute '{name}' has {} values, expected {len}",
                v.len()
            )),
        };
        let strides = list("strides", &self.strides, 1, n)?;
        let dilations = list("dilations", &self.dilations, 1, n)?;
        let pads = list("pads", &self.pads, 0, 2 * n)?;
        if let Some(bad) = strides.iter().chain(&dilations).find(|&&v| v < 1) {
            return Err(format!(
                "strides and dilations must be positive, found {bad}"
            ));
        }
        if let Some(bad) = pads.iter().find(|&&v| v < 0) {
            return Err(format!("pads must not be negative, found {bad}"));
        }
        if let Some(bad) = kernel.iter().find(|&&v| v < 1) {
            return Err(format!("kernel sizes must be positive, found {bad}"));
        }
        Ok(Window {
            kernel,
            strides,
            dilations,
            pads,
            auto_pad: self.auto_pad,
            ceil_mode: self.ceil_mode,
        })
    }
}

/// A resolved window over `n` spatial axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub kernel: Vec<i64>,
    pub strides: Vec<i64>,
    pub dilations: Vec<i64>,
    /// Begin pads then end pads, `2n` values.
    pub pads: Vec<i64>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
}

/// One spatial axis of a window applied to an input of known size: the output size and the
/// padding actually used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisPlan {
    pub out: u64,
    pub begin: u64,
    pub end: u64,
    /// Extra end padding `ceil_mode`'s last window reaches into; never counted as input.
    pub overhang: u64,
}

impl Window {
    /// The extent `(k - 1)·d + 1` of the kernel on axis `i`.
    fn extent(&self, i: usize) -> Option<i64> {
        (self.kernel[i] - 1)
            .checked_mul(self.dilations[i])?
            .checked_add(1)
    }

    /// Output size along spatial axis `i` for an input of size `input`, symbolic or known.
    pub fn out_dim(&self, i: usize, input: &Dim) -> InferResult<Dim> {
        let n = self.kernel.len();
        let s = self.strides[i];
        let extent = ovf(self.extent(i), "kernel extent")?;
        let out = match self.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => ovf(input.ceil_div(s), "output size")?,
            AutoPad::Valid | AutoPad::NotSet => {
                let pads = if self.auto_pad == AutoPad::Valid {
                    0
                } else {
                    ovf(self.pads[i].checked_add(self.pads[i + n]), "pads")?
                };
                let span = ovf(
                    input
                        .checked_add(&Dim::known(pads))
                        .and_then(|v| v.checked_sub(&Dim::known(extent))),
                    "output size",
                )?;
                if let Some(v) = span.as_i64() {
                    if v < 0 {
                        return invalid(format!(
                            "the window (extent {extent}) is larger than the padded input ({input} + {pads}) on spatial axis {i}"
                        ));
                    }
                }
                let q = if self.ceil_mode {
                    ovf(span.ceil_div(s), "output size")?
                } else {
                    ovf(span.floor_div(s), "output size")?
                };
                let mut out = ovf(q.checked_add(&Dim::known(1)), "output size")?;
                // ceil_mode: the last window must start inside the input or the begin padding
                if self.ceil_mode {
                    if let (Some(o), Some(inp)) = (out.as_i64(), input.as_i64()) {
                        if (o - 1).saturating_mul(s) >= inp.saturating_add(self.pads[i]) {
                            out = Dim::known(o - 1);
                        }
                    }
                }
                out
            }
        };
        Ok(out)
    }

    /// The output size and the padding of spatial axis `i` for an input of known size: what a
    /// kernel computing the window needs (SAME padding is resolved here).
    pub fn plan(&self, i: usize, input: u64) -> Result<AxisPlan, String> {
        let n = self.kernel.len();
        if input == 0 {
            return Err(format!("spatial axis {i} is empty"));
        }
        let out = self
            .out_dim(
                i,
                &Dim::known(i64::try_from(input).map_err(|_| "input too large")?),
            )
            .map_err(|e| match e {
                InferError::Invalid(m) => m,
                InferError::Unknown => "the output size is unknown".into(),
            })?
            .as_u64()
            .ok_or("the output size is unknown")?;
        let ovf = || format!("window arithmetic overflows on spatial axis {i}");
        let s = self.strides[i] as u64;
        let extent = self.extent(i).ok_or_else(ovf)? as u64;
        let (begin, end) = match self.auto_pad {
            AutoPad::NotSet => (self.pads[i] as u64, self.pads[i + n] as u64),
            AutoPad::Valid => (0, 0),
            AutoPad::SameUpper | AutoPad::SameLower => {
                let total = out
                    .saturating_sub(1)
                    .checked_mul(s)
                    .and_then(|v| v.checked_add(extent))
                    .ok_or_else(ovf)?
                    .saturating_sub(input);
                if self.auto_pad == AutoPad::SameUpper {
                    (total / 2, total - total / 2)
                } else {
                    (total - total / 2, total / 2)
                }
            }
        };
        let padded = input
            .checked_add(begin)
            .and_then(|v| v.checked_add(end))
            .ok_or_else(ovf)?;
        let needed = out
            .saturating_sub(1)
            .checked_mul(s)
            .and_then(|v| v.checked_add(extent))
            .ok_or_else(ovf)?;
        Ok(AxisPlan {
            out,
            begin,
            end,
            overhang: needed.saturating_sub(padded),
        })
    }
}

/// `Conv`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Conv {
    pub window: WindowAttrs,
    pub group: i64,
}

impl FromAttrs for Conv {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let group = AttrReader(a).int("group", 1)?;
        if group < 1 {
            return Err(format!("attribute 'group' must be positive, found {group}"));
        }
        Ok(Conv {
            window: WindowAttrs::from_attrs(a, opset)?,
            group,
        })
    }
}

impl Conv {
    /// The kernel: `kernel_shape`, else the weight's spatial dims.
    pub fn kernel(&self, w: &[Dim]) -> InferResult<Vec<i64>> {
        if let Some(k) = &self.window.kernel_shape {
            if k.len() + 2 != w.len() {
                return invalid(format!(
                    "attribute 'kernel_shape' has {} values for a rank-{} weight",
                    k.len(),
                    w.len()
                ));
            }
            return Ok(k.clone());
        }
        w.get(2..)
            .unwrap_or_default()
            .iter()
            .map(|d| d.as_i64().ok_or(InferError::Unknown))
            .collect()
    }

    /// The window for a weight of this shape.
    pub fn window(&self, w: &[Dim]) -> InferResult<Window> {
        Ok(self.window.window(self.kernel(w)?)?)
    }
}

/// `ConvTranspose`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvTranspose {
    pub conv: Conv,
    pub output_padding: Option<Vec<i64>>,
    pub output_shape: Option<Vec<i64>>,
}

impl FromAttrs for ConvTranspose {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(ConvTranspose {
            conv: Conv::from_attrs(a, opset)?,
            output_padding: r.ints("output_padding")?,
            output_shape: r.ints("output_shape")?,
        })
    }
}

fn rank_check(x: &[Dim], w_rank: usize) -> InferResult<()> {
    if x.len() < 3 {
        return invalid(format!(
            "input has rank {}, expected at least 3 (N, C, spatial...)",
            x.len()
        ));
    }
    if x.len() != w_rank {
        return invalid(format!(
            "input has rank {} but the weight has rank {w_rank}",
            x.len()
        ));
    }
    Ok(())
}

pub fn conv(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let c = attrs!(cx, Conv);
    conv_at(cx, c, 0, 1, cx.dtype(0))
}

/// A convolution's output reading its input at slot `x` and its weight at slot `w` (the quantized
/// convolutions put them elsewhere), of type `dtype`.
pub fn conv_at(
    cx: &OpCx,
    c: &Conv,
    x: usize,
    w: usize,
    dtype: Option<crate::ir::DType>,
) -> InferResult<Vec<Fact>> {
    let x = cx.shape(x)?;
    let w = cx.shape(w)?;
    rank_check(x, w.len())?;
    let group = c.group;
    if let (Some(ch), Some(wc)) = (x[1].as_i64(), w[1].as_i64()) {
        if wc.checked_mul(group) != Some(ch) {
            return invalid(format!(
                "input has {ch} channels but the weight expects {wc} x group {group}"
            ));
        }
    }
    if let Some(m) = w[0].as_i64() {
        if m % group != 0 {
            return invalid(format!(
                "{m} output channels do not split into {group} groups"
            ));
        }
    }
    let win = c.window(w)?;
    let mut out = vec![x[0].clone(), w[0].clone()];
    for (i, d) in x[2..].iter().enumerate() {
        out.push(win.out_dim(i, d)?);
    }
    Ok(vec![Fact::new(dtype, out)])
}

pub fn conv_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    conv_macs_at(cx, out, 1)
}

/// A convolution's MACs with its weight at slot `w`.
pub fn conv_macs_at(cx: &OpCx, out: &[Fact], w: usize) -> Option<Dim> {
    let w = cx.shape(w).ok()?;
    let y = out.first()?.numel()?;
    y.checked_mul(&Dim::product(w.get(1..)?)?)
}

pub fn conv_transpose(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let ct = attrs!(cx, ConvTranspose);
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    rank_check(x, w.len())?;
    let group = ct.conv.group;
    if let (Some(c), Some(wc)) = (x[1].as_i64(), w[0].as_i64()) {
        if c != wc {
            return invalid(format!(
                "input has {c} channels but the weight expects {wc}"
            ));
        }
    }
    let n = x.len() - 2;
    let win = ct.conv.window(w)?;
    let out_pad = match &ct.output_padding {
        Some(v) if v.len() == n => v.clone(),
        Some(v) => {
            return invalid(format!(
                "attribute 'output_padding' has {} values, expected {n}",
                v.len()
            ))
        }
        None => vec![0; n],
    };
    let m = ovf(w[1].checked_mul(&Dim::known(group)), "output channels")?;
    let mut out = vec![x[0].clone(), m];
    if let Some(shape) = &ct.output_shape {
        let spatial = match shape.len() {
            l if l == n => &shape[..],
            l if l == n + 2 => &shape[2..],
            l => {
                return invalid(format!(
                    "attribute 'output_shape' has {l} values, expected {n}"
                ))
            }
        };
        out.extend(spatial.iter().map(|&v| Dim::known(v)));
        return Ok(vec![Fact::new(cx.dtype(0), out)]);
    }
    for (i, d) in x[2..].iter().enumerate() {
        let s = win.strides[i];
        let dim = match win.auto_pad {
            AutoPad::SameUpper | AutoPad::SameLower => {
                ovf(d.checked_mul(&Dim::known(s)), "output size")?
            }
            _ => {
                let extent = ovf(win.extent(i), "kernel extent")?;
                let pads = if win.auto_pad == AutoPad::Valid {
                    0
                } else {
                    ovf(win.pads[i].checked_add(win.pads[i + n]), "pads")?
                };
                let tail = ovf(
                    out_pad[i]
                        .checked_add(extent)
                        .and_then(|v| v.checked_sub(pads)),
                    "output size",
                )?;
                ovf(
                    d.checked_sub(&Dim::known(1))
                        .and_then(|v| v.checked_mul(&Dim::known(s)))
                        .and_then(|v| v.checked_add(&Dim::known(tail))),
                    "output size",
                )?
            }
        };
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

pub fn conv_transpose_macs(cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    let x = cx.input(0).ok()?.numel()?;
    let w = cx.shape(1).ok()?;
    x.checked_mul(&Dim::product(w.get(1..)?)?)
}

pub fn saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.out_grad() {
        cx.node.input(0).map(Save::Value).into_iter().collect()
    } else {
        Vec::new()
    })
}

/// The conv attributes of an op, if it is a convolution.
pub fn conv_of(op: &Op) -> Option<&Conv> {
    match op {
        Op::Conv(c) => Some(c),
        Op::ConvTranspose(t) => Some(&t.conv),
        _ => None,
    }
}

/// `DeformConv`'s attributes: a convolution's, and the groups of the offsets.
#[derive(Clone, Debug, PartialEq)]
pub struct DeformConv {
    pub conv: Conv,
    pub offset_group: i64,
}

impl FromAttrs for DeformConv {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let offset_group = AttrReader(a).int("offset_group", 1)?;
        if offset_group < 1 {
            return Err(format!(
                "attribute 'offset_group' must be positive, found {offset_group}"
            ));
        }
        Ok(DeformConv {
            conv: Conv::from_attrs(a, opset)?,
            offset_group,
        })
    }
}

/// `DeformConv`: a convolution's output; offset `[N, offset_group · 2 · prod(kernel), out...]` and
/// mask `[N, offset_group · prod(kernel), out...]` must match it.
pub fn deform_conv(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let d = attrs!(cx, DeformConv);
    let out = conv_at(cx, &d.conv, 0, 1, cx.dtype(0))?;
    let y = out[0].shape.as_deref().unwrap_or_default();
    let kernel = d.conv.kernel(cx.shape(1)?)?;
    let points = ovf(
        kernel
            .iter()
            .try_fold(d.offset_group, |acc, &k| acc.checked_mul(k)),
        "offset channels",
    )?;
    for (slot, what, per_point) in [(2, "offset", 2), (4, "mask", 1)] {
        let Some(s) = cx.opt_input(slot).and_then(|f| f.shape.as_deref()) else {
            continue;
        };
        if s.len() != y.len() {
            return invalid(format!(
                "{what} has rank {} for a rank-{} output",
                s.len(),
                y.len()
            ));
        }
        let want = ovf(points.checked_mul(per_point), "offset channels")?;
        if s[1].as_i64().is_some_and(|c| c != want) {
            return invalid(format!(
                "{what} has {} channels, expected {want} (offset_group x {per_point} x kernel points)",
                s[1]
            ));
        }
        for (i, (a, b)) in s[2..].iter().zip(&y[2..]).enumerate() {
            if let (Some(p), Some(q)) = (a.as_i64(), b.as_i64()) {
                if p != q {
                    return invalid(format!(
                        "{what} has size {p} on spatial axis {i}, the output {q}"
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// MACs of `DeformConv`: the convolution's `numel(Y) × prod(W.shape[1:])`, plus the bilinear
/// sampling of its columns: every input channel is sampled at every kernel point for every output
/// position, `N × C × prod(kernel) × prod(out spatial)` samples of 4 weighted taps each, and one
/// more multiply per sample by the mask when there is one.
pub fn deform_conv_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let conv = conv_macs_at(cx, out, 1)?;
    let x = cx.shape(0).ok()?;
    let w = cx.shape(1).ok()?;
    let y = out.first()?.shape.as_ref()?;
    let samples = Dim::product(
        [&x[0], &x[1]]
            .into_iter()
            .chain(w.get(2..)?)
            .chain(y.get(2..)?),
    )?;
    let taps = if cx.opt_input(4).is_some() { 5 } else { 4 };
    conv.checked_add(&samples.checked_mul(&Dim::known(taps))?)
}

/// torchvision's `deform_conv2d` keeps its input, offset and mask (and the weight, a parameter).
pub fn deform_conv_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.out_grad() {
        [0, 2, 4]
            .into_iter()
            .filter_map(|i| cx.node.input(i))
            .map(Save::Value)
            .collect()
    } else {
        Vec::new()
    })
}

/// `CausalConvWithState`'s fused activation.
#[derive(Clone, Debug, PartialEq)]
pub struct CausalConv {
    /// SiLU (`silu` or `swish`) after the convolution.
    pub silu: bool,
}

impl FromAttrs for CausalConv {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let silu = match AttrReader(a).string("activation")?.as_deref() {
            None | Some("none") => false,
            Some("silu") | Some("swish") => true,
            Some(m) => return Err(format!("attribute 'activation': unknown value '{m}'")),
        };
        Ok(CausalConv { silu })
    }
}

/// The kernel size `k` of a `CausalConvWithState`'s weight `[C, 1, k]`.
fn causal_kernel(cx: &OpCx) -> InferResult<Dim> {
    let w = cx.shape(1)?;
    match w {
        [_, one, k] if one.as_i64().is_none_or(|v| v == 1) => Ok(k.clone()),
        _ => invalid(format!(
            "weight is {}, expected [channels, 1, k]",
            crate::ir::shape_to_string(w)
        )),
    }
}

/// `CausalConvWithState`: a depthwise causal 1-D convolution of `[B, C, L]` (the input's shape) and
/// the carried state, the last `k - 1` positions, `[B, C, k - 1]`.
pub fn causal_conv(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    if x.len() != 3 {
        return invalid(format!(
            "input has rank {}, expected 3 (batch, channels, length)",
            x.len()
        ));
    }
    let k = causal_kernel(cx)?;
    let state = ovf(k.checked_sub(&Dim::known(1)), "state length")?;
    let dtype = cx.dtype(0);
    Ok(vec![
        Fact::new(dtype, x.to_vec()),
        Fact::new(dtype, vec![x[0].clone(), x[1].clone(), state]),
    ])
}

/// MACs of `CausalConvWithState`: depthwise, `k` per output element, `numel(Y) × k`.
pub fn causal_conv_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    out.first()?.numel()?.checked_mul(&causal_kernel(cx).ok()?)
}

/// What the `Concat + Conv1d(groups = C)` it fuses keeps: the concatenated input
/// `[B, C, (k - 1) + L]`, a new storage.
pub fn causal_conv_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    if !cx.out_grad() {
        return Some(Vec::new());
    }
    let x = cx.node.input(0)?;
    let y = cx.fact(x).numel()?.as_u64()?;
    let state = cx.fact(cx.node.output(1)?).numel()?.as_u64()?;
    let n = y.checked_add(state)?;
    Some(vec![Save::Own(cx.dtype(x).and_then(|d| d.bytes_for(n))?)])
}

/// `Col2Im`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Col2Im {
    pub strides: Option<Vec<i64>>,
    pub dilations: Option<Vec<i64>>,
    pub pads: Option<Vec<i64>>,
}

impl FromAttrs for Col2Im {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Col2Im {
            strides: r.ints("strides")?,
            dilations: r.ints("dilations")?,
            pads: r.ints("pads")?,
        })
    }
}

/// `Col2Im` (`F.fold`): columns `[N, C · prod(block), L]` summed back into `[N, C, image...]`;
/// `L` must be the number of block positions.
pub fn col2im(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let c = attrs!(cx, Col2Im);
    let x = cx.shape(0)?;
    if x.len() != 3 {
        return invalid(format!(
            "input has rank {}, expected 3 (N, C x block, L)",
            x.len()
        ));
    }
    let image = cx.value(1)?.as_dims().ok_or(InferError::Unknown)?;
    let block = cx.ints(2)?;
    if block.len() != image.len() || block.is_empty() {
        return invalid(format!(
            "{} block sizes for {} image axes",
            block.len(),
            image.len()
        ));
    }
    let win = WindowAttrs {
        kernel_shape: None,
        strides: c.strides.clone(),
        dilations: c.dilations.clone(),
        pads: c.pads.clone(),
        auto_pad: AutoPad::NotSet,
        ceil_mode: false,
    }
    .window(block.clone())?;
    let positions = ovf(
        image
            .iter()
            .enumerate()
            .map(|(i, d)| win.out_dim(i, d))
            .collect::<InferResult<Vec<_>>>()
            .map(|v| Dim::product(&v))?,
        "block positions",
    )?;
    if let (Some(l), Some(p)) = (x[2].as_i64(), positions.as_i64()) {
        if l != p {
            return invalid(format!(
                "input has {l} columns, the image and block give {p} block positions"
            ));
        }
    }
    let per = ovf(
        block.iter().try_fold(1i64, |a, &b| a.checked_mul(b)),
        "block size",
    )?;
    let ch = x[1].div_exact(&Dim::known(per)).ok_or_else(|| {
        InferError::Invalid(format!(
            "{} input channels do not divide by the block size {per}",
            x[1]
        ))
    })?;
    let mut out = vec![x[0].clone(), ch];
    out.extend(image);
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(auto_pad: AutoPad, pads: Vec<i64>, ceil_mode: bool) -> Window {
        WindowAttrs {
            kernel_shape: None,
            strides: Some(vec![2]),
            dilations: None,
            pads: Some(pads),
            auto_pad,
            ceil_mode,
        }
        .window(vec![3])
        .unwrap()
    }

    #[test]
    fn one_geometry_for_symbolic_and_known_sizes() {
        let w = window(AutoPad::NotSet, vec![1, 1], false);
        // floor((7 + 2 - 3) / 2) + 1 = 4
        assert_eq!(w.out_dim(0, &Dim::known(7)).unwrap(), Dim::known(4));
        assert_eq!(
            w.plan(0, 7).unwrap(),
            AxisPlan {
                out: 4,
                begin: 1,
                end: 1,
                overhang: 0
            }
        );
        // a symbolic input stays symbolic: floor((H + 2 - 3) / 2) + 1
        let sym = w.out_dim(0, &Dim::sym("H")).unwrap();
        assert_eq!(sym.to_string(), "floor((H - 1)/2) + 1");
    }

    #[test]
    fn same_padding_is_resolved_for_the_kernels() {
        // ceil(8 / 2) = 4 outputs need (4 - 1) * 2 + 3 = 9 cells: one pad, at the end (upper)
        let up = window(AutoPad::SameUpper, vec![0, 0], false);
        assert_eq!(
            up.plan(0, 8).unwrap(),
            AxisPlan {
                out: 4,
                begin: 0,
                end: 1,
                overhang: 0
            }
        );
        let low = window(AutoPad::SameLower, vec![0, 0], false);
        assert_eq!(low.plan(0, 8).unwrap().begin, 1);
    }

    #[test]
    fn ceil_mode_overhangs() {
        // 6 cells, no pads: ceil((6 - 3) / 2) + 1 = 3 windows, the last one reaching cell 7
        let w = window(AutoPad::NotSet, vec![0, 0], true);
        let p = w.plan(0, 6).unwrap();
        assert_eq!((p.out, p.overhang), (3, 1));
    }

    #[test]
    fn deform_conv_macs_are_conv_plus_bilinear_taps() {
        use super::super::testing::{f32s, run, shapes};
        use crate::ir::Attr;
        let pads = || vec![("pads", Attr::Ints(vec![1, 1, 1, 1]))];
        // conv: 1·4·8·8 outputs × 3·3·3 = 6912; samples 1·3·9·64 = 1728, 4 taps each
        let (out, macs) = run(
            "DeformConv",
            pads(),
            vec![
                f32s(&[1, 3, 8, 8]),
                f32s(&[4, 3, 3, 3]),
                f32s(&[1, 18, 8, 8]),
            ],
            22,
        );
        assert_eq!(shapes(&out), ["[1,4,8,8]"]);
        assert_eq!(macs, Some(Dim::known(6912 + 4 * 1728)));
        // a mask: one more multiply per sample
        let (_, macs) = run(
            "DeformConv",
            pads(),
            vec![
                f32s(&[1, 3, 8, 8]),
                f32s(&[4, 3, 3, 3]),
                f32s(&[1, 18, 8, 8]),
                None,
                f32s(&[1, 9, 8, 8]),
            ],
            22,
        );
        assert_eq!(macs, Some(Dim::known(6912 + 5 * 1728)));
        // offsets for another kernel
        let (out, _) = run(
            "DeformConv",
            pads(),
            vec![
                f32s(&[1, 3, 8, 8]),
                f32s(&[4, 3, 3, 3]),
                f32s(&[1, 8, 8, 8]),
            ],
            22,
        );
        assert!(shapes(&out)[0].contains("expected 18"), "{out:?}");
    }

    #[test]
    fn col2im_counts_block_positions() {
        use super::super::testing::{f32s, i64s, run, shapes};
        use crate::ir::Attr;
        // 5x5 image, 3x3 blocks, pads 1, stride 2: 3 positions per axis
        let attrs = || {
            vec![
                ("pads", Attr::Ints(vec![1, 1, 1, 1])),
                ("strides", Attr::Ints(vec![2, 2])),
            ]
        };
        let (out, macs) = run(
            "Col2Im",
            attrs(),
            vec![f32s(&[2, 18, 9]), i64s(&[5, 5]), i64s(&[3, 3])],
            18,
        );
        assert_eq!(shapes(&out), ["[2,2,5,5]"]);
        assert_eq!(macs, Some(Dim::ZERO));
        let (out, _) = run(
            "Col2Im",
            attrs(),
            vec![f32s(&[2, 18, 10]), i64s(&[5, 5]), i64s(&[3, 3])],
            18,
        );
        assert!(shapes(&out)[0].contains("9 block positions"), "{out:?}");
    }

    #[test]
    fn causal_conv_with_state() {
        use super::super::testing::{f32s, run, shapes};
        // depthwise, k = 3 per output: 2·4·7·3 = 168
        let (out, macs) = run(
            "CausalConvWithState",
            vec![],
            vec![f32s(&[2, 4, 7]), f32s(&[4, 1, 3])],
            27,
        );
        assert_eq!(shapes(&out), ["[2,4,7]", "[2,4,2]"]);
        assert_eq!(macs, Some(Dim::known(168)));
        let (out, _) = run(
            "CausalConvWithState",
            vec![],
            vec![f32s(&[2, 4, 7]), f32s(&[4, 2, 3])],
            27,
        );
        assert!(shapes(&out)[0].contains("[channels, 1, k]"), "{out:?}");
    }
}
