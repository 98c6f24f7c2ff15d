//! Convolutions: `Conv` and `ConvTranspose`, and the spatial arithmetic pooling shares.
//!
//! MACs: a `Conv` output element costs `C_in/group × k₁×…×kₙ` multiply-accumulates, so the total is
//! `numel(Y) × W[1] × prod(kernel)`. A `ConvTranspose` input element scatters into
//! `C_out/group × prod(kernel)` outputs: `numel(X) × W[1] × prod(kernel)`.

use super::{invalid, ovf, InferError, InferResult, OpCx};
use crate::analysis::fact::Fact;
use crate::ir::Dim;

/// How spatial padding is chosen (`auto_pad`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// Window parameters of a conv or pool over `n` spatial axes.
pub(crate) struct Window {
    pub kernel: Vec<i64>,
    pub strides: Vec<i64>,
    pub dilations: Vec<i64>,
    /// Begin pads then end pads, `2n` values.
    pub pads: Vec<i64>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
}

impl Window {
    /// Reads `strides`, `dilations`, `pads`, `auto_pad`, `ceil_mode` for a given kernel.
    pub fn from_attrs(cx: &OpCx, kernel: Vec<i64>) -> InferResult<Window> {
        let n = kernel.len();
        let list = |name: &str, default: i64, len: usize| -> InferResult<Vec<i64>> {
            match cx.attr_ints(name)? {
                None => Ok(vec![default; len]),
                Some(v) if v.len() == len => Ok(v.to_vec()),
                Some(v) => invalid(format!(
                    "attribute '{name}' has {} values, expected {len}",
                    v.len()
                )),
            }
        };
        let strides = list("strides", 1, n)?;
        let dilations = list("dilations", 1, n)?;
        let pads = list("pads", 0, 2 * n)?;
        if let Some(bad) = strides.iter().chain(&dilations).find(|&&v| v < 1) {
            return invalid(format!(
                "strides and dilations must be positive, found {bad}"
            ));
        }
        if let Some(bad) = pads.iter().find(|&&v| v < 0) {
            return invalid(format!("pads must not be negative, found {bad}"));
        }
        if let Some(bad) = kernel.iter().find(|&&v| v < 1) {
            return invalid(format!("kernel sizes must be positive, found {bad}"));
        }
        let auto_pad = match cx.attr_string("auto_pad")?.as_deref() {
            None | Some("NOTSET") | Some("") => AutoPad::NotSet,
            Some("SAME_UPPER") => AutoPad::SameUpper,
            Some("SAME_LOWER") => AutoPad::SameLower,
            Some("VALID") => AutoPad::Valid,
            Some(other) => return invalid(format!("unknown auto_pad '{other}'")),
        };
        Ok(Window {
            kernel,
            strides,
            dilations,
            pads,
            auto_pad,
            ceil_mode: cx.attr_int("ceil_mode", 0)? != 0,
        })
    }

    /// Output size along spatial axis `i` for an input of size `input`.
    pub fn out_dim(&self, i: usize, input: &Dim) -> InferResult<Dim> {
        let n = self.kernel.len();
        let (k, s, d) = (self.kernel[i], self.strides[i], self.dilations[i]);
        let extent = ovf(
            (k - 1).checked_mul(d).and_then(|v| v.checked_add(1)),
            "kernel extent",
        )?;
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
                        if (o - 1) * s >= inp + self.pads[i] {
                            out = Dim::known(o - 1);
                        }
                    }
                }
                out
            }
        };
        Ok(out)
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

fn kernel_of(cx: &OpCx, w: &[Dim]) -> InferResult<Vec<i64>> {
    if let Some(k) = cx.attr_ints("kernel_shape")? {
        if k.len() + 2 != w.len() {
            return invalid(format!(
                "attribute 'kernel_shape' has {} values for a rank-{} weight",
                k.len(),
                w.len()
            ));
        }
        return Ok(k.to_vec());
    }
    w[2..]
        .iter()
        .map(|d| d.as_i64().ok_or(InferError::Unknown))
        .collect()
}

pub fn conv(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    rank_check(x, w.len())?;
    let group = cx.attr_int("group", 1)?;
    if group < 1 {
        return invalid(format!("attribute 'group' must be positive, found {group}"));
    }
    if let (Some(c), Some(wc)) = (x[1].as_i64(), w[1].as_i64()) {
        if wc.checked_mul(group) != Some(c) {
            return invalid(format!(
                "input has {c} channels but the weight expects {wc} x group {group}"
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
    let win = Window::from_attrs(cx, kernel_of(cx, w)?)?;
    let mut out = vec![x[0].clone(), w[0].clone()];
    for (i, d) in x[2..].iter().enumerate() {
        out.push(win.out_dim(i, d)?);
    }
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

pub fn conv_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let w = cx.shape(1).ok()?;
    let y = out.first()?.numel()?;
    y.checked_mul(&Dim::product(&w[1..])?)
}

pub fn conv_transpose(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    rank_check(x, w.len())?;
    let group = cx.attr_int("group", 1)?;
    if group < 1 {
        return invalid(format!("attribute 'group' must be positive, found {group}"));
    }
    if let (Some(c), Some(wc)) = (x[1].as_i64(), w[0].as_i64()) {
        if c != wc {
            return invalid(format!(
                "input has {c} channels but the weight expects {wc}"
            ));
        }
    }
    let n = x.len() - 2;
    let kernel = kernel_of(cx, w)?;
    let win = Window::from_attrs(cx, kernel)?;
    let out_pad = match cx.attr_ints("output_padding")? {
        Some(v) if v.len() == n => v.to_vec(),
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
    if let Some(shape) = cx.attr_ints("output_shape")? {
        let spatial = match shape.len() {
            l if l == n => shape,
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
            super::conv::AutoPad::SameUpper | super::conv::AutoPad::SameLower => {
                ovf(d.checked_mul(&Dim::known(s)), "output size")?
            }
            _ => {
                let extent = (win.kernel[i] - 1) * win.dilations[i] + 1;
                let pads = if win.auto_pad == AutoPad::Valid {
                    0
                } else {
                    win.pads[i] + win.pads[i + n]
                };
                ovf(
                    d.checked_sub(&Dim::known(1))
                        .and_then(|v| v.checked_mul(&Dim::known(s)))
                        .and_then(|v| v.checked_add(&Dim::known(out_pad[i] + extent - pads))),
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
    x.checked_mul(&Dim::product(&w[1..])?)
}
