//! Convolution for the checker, in f64 on contiguous NCHW data; the output size and padding come
//! from the analysis' window ([`crate::analysis::ops::conv::Window::plan`]).
//!
//! candle-core 0.11's CPU `conv2d` takes one padding, stride and dilation for both axes, copies
//! strided im2col buffers, and runs a grouped convolution one group at a time (a depthwise
//! convolution with 512 channels is 512 small convolutions plus a concatenation). Verifying a
//! VGG-16 rewrite spent most of its time there. [`conv2d`] lowers a convolution to one im2col buffer
//! and one GEMM (faer, in f64) per image and group, and a depthwise one (one input channel per
//! group) to direct loops; any pads, strides and dilations per axis are supported. A 1-D
//! convolution is a 2-D one of height 1.

use candle_core::Tensor as CTensor;
use faer::{Accum, MatMut, MatRef, Par};
use rayon::prelude::*;

use super::{
    advance, attrs, check_size, checked_product, one, with_values, zeros, At, Cx, OpResult,
};
use crate::analysis::ops::conv::{AutoPad, Window};
use crate::verify::exec::ExecError;

/// One spatial axis of a window over a concrete input: [`crate::analysis::ops::conv::AxisPlan`]
/// in `usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Axis {
    pub len: usize,
    pub out: usize,
    pub begin: usize,
    pub end: usize,
    pub kernel: usize,
    pub stride: usize,
    pub dilation: usize,
}

/// The window's plan on every spatial axis of an input whose spatial dims are `spatial`.
pub(super) fn plan(cx: &Cx, win: &Window, spatial: &[usize]) -> Result<Vec<Axis>, ExecError> {
    let size = |v: u64| usize::try_from(v).map_err(|_| cx.fail("window sizes overflow"));
    let attr = |v: i64| usize::try_from(v).map_err(|_| cx.fail("window sizes overflow"));
    if win.kernel.len() != spatial.len() {
        return Err(cx.fail(format!(
            "the window has {} axes for {} spatial axes",
            win.kernel.len(),
            spatial.len()
        )));
    }
    spatial
        .iter()
        .enumerate()
        .map(|(i, &len)| {
            let p = win.plan(i, len as u64).map_err(|e| cx.fail(e))?;
            Ok(Axis {
                len,
                out: size(p.out)?,
                begin: size(p.begin)?,
                end: size(p.end)?,
                kernel: attr(win.kernel[i])?,
                stride: attr(win.strides[i])?,
                dilation: attr(win.dilations[i])?,
            })
        })
        .collect()
}

/// Cuts each spatial axis (from axis 2) to the planned output size.
fn narrow_out(cx: &Cx, y: CTensor, axes: &[Axis]) -> Result<CTensor, ExecError> {
    let mut y = y;
    for (i, a) in axes.iter().enumerate() {
        let have = y.dims()[2 + i];
        if have < a.out {
            return Err(cx.fail(format!(
                "spatial axis {i} has {have} outputs, expected {}",
                a.out
            )));
        }
        if have > a.out {
            y = y.narrow(2 + i, 0, a.out).at(cx)?;
        }
    }
    Ok(y)
}

/// The group count and the kernel (the weight's spatial dims, which `kernel_shape` must equal).
fn group_and_kernel(
    cx: &Cx,
    x: &CTensor,
    w: &CTensor,
    group: i64,
    kernel_shape: &Option<Vec<i64>>,
) -> Result<(usize, Vec<i64>), ExecError> {
    if x.rank() < 3 {
        return Err(cx.fail(format!(
            "input has rank {}, expected (N, C, spatial...)",
            x.rank()
        )));
    }
    if w.rank() != x.rank() {
        return Err(cx.fail(format!(
            "input has rank {} but the weight has rank {}",
            x.rank(),
            w.rank()
        )));
    }
    let group = usize::try_from(group)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| cx.fail(format!("attribute 'group' must be positive, found {group}")))?;
    let kernel = &w.dims()[2..];
    let kernel_i64 = kernel
        .iter()
        .map(|&k| i64::try_from(k))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| cx.fail("the kernel is too large"))?;
    if let Some(k) = kernel_shape {
        if *k != kernel_i64 {
            return Err(cx.fail(format!(
                "attribute kernel_shape {k:?} does not match the weight's {kernel:?}"
            )));
        }
    }
    Ok((group, kernel_i64))
}

/// `y + B` with the bias `[m]` on axis 1.
fn add_bias(cx: &Cx, y: CTensor, m: usize) -> Result<CTensor, ExecError> {
    let Some(b) = cx.opt(2) else {
        return Ok(y);
    };
    if b.dims() != [m] {
        return Err(cx.fail(format!("bias has shape {:?}, expected [{m}]", b.dims())));
    }
    let mut shape = vec![1, m];
    shape.resize(y.rank(), 1);
    y.broadcast_add(&b.reshape(shape).at(cx)?).at(cx)
}

fn flat(cx: &Cx, t: &CTensor) -> Result<Vec<f64>, ExecError> {
    t.flatten_all().and_then(|t| t.to_vec1::<f64>()).at(cx)
}

pub fn conv(cx: &Cx) -> OpResult {
    let c = attrs!(cx, Conv);
    let x = cx.input(0)?;
    let w = cx.input(1)?;
    let (group, kernel) = group_and_kernel(cx, x, w, c.group, &c.window.kernel_shape)?;
    let (ch, m, wc) = (x.dims()[1], w.dims()[0], w.dims()[1]);
    if wc.checked_mul(group) != Some(ch) {
        return Err(cx.fail(format!(
            "input has {ch} channels but the weight expects {wc} x group {group}"
        )));
    }
    if m % group != 0 {
        return Err(cx.fail(format!(
            "{m} output channels do not split into {group} groups"
        )));
    }
    let win = c.window.window(kernel).map_err(|e| cx.fail(e))?;
    let axes = plan(cx, &win, &x.dims()[2..])?;
    let mut out_dims = vec![x.dims()[0], m];
    out_dims.extend(axes.iter().map(|a| a.out));
    check_size(cx, &out_dims)?;
    // as 2-D: a 1-D convolution is one of height 1
    let unit = Axis {
        len: 1,
        out: 1,
        begin: 0,
        end: 0,
        kernel: 1,
        stride: 1,
        dilation: 1,
    };
    let (ah, aw) = match axes.as_slice() {
        [a] => (unit, *a),
        [h, w] => (*h, *w),
        _ => {
            let y = conv_direct(
                &flat(cx, x)?,
                &flat(cx, w)?,
                x.dims(),
                w.dims(),
                group,
                &axes,
            )
            .map_err(|e| cx.fail(e))?;
            let mut shape = vec![x.dims()[0], m];
            shape.extend(axes.iter().map(|a| a.out));
            let y = CTensor::from_vec(y, shape, &candle_core::Device::Cpu).at(cx)?;
            return one(add_bias(cx, y, m)?);
        }
    };
    let geometry = Geometry {
        input: [x.dims()[0], ch, ah.len, aw.len],
        kernel: [m, wc, ah.kernel, aw.kernel],
        group,
        strides: [ah.stride, aw.stride],
        dilations: [ah.dilation, aw.dilation],
        pads: [ah.begin, aw.begin, ah.end, aw.end],
    };
    let (out, [b, m_out, ho, wo]) = with_values(x, |x| {
        with_values(w, |w| conv2d(x, w, &geometry)).map(|r| r.map_err(|e| cx.fail(e)))
    })
    .and_then(|r| r)
    .at(cx)??;
    let shape = if axes.len() == 1 {
        vec![b, m_out, wo]
    } else {
        vec![b, m_out, ho, wo]
    };
    let y = CTensor::from_vec(out, shape, &candle_core::Device::Cpu).at(cx)?;
    let y = narrow_out(cx, y, &axes)?;
    one(add_bias(cx, y, m)?)
}

/// Per spatial axis and (output or input position, tap): the position on the other side, if it is
/// inside. `Conv` reads input `o·s + k·d - begin`; `ConvTranspose` writes output `i·s + k·d -
/// begin`.
fn taps(a: &Axis, positions: usize, targets: usize) -> Vec<Option<usize>> {
    (0..positions * a.kernel)
        .map(|j| {
            let (p, k) = (j / a.kernel, j % a.kernel);
            (p * a.stride + k * a.dilation)
                .checked_sub(a.begin)
                .filter(|&t| t < targets)
        })
        .collect()
}

/// Row-major strides of `dims`.
fn strides(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// A convolution over any number of spatial axes, by its definition (for the 3-D and higher ones
/// [`conv2d`] does not lower).
fn conv_direct(
    x: &[f64],
    w: &[f64],
    xd: &[usize],
    wd: &[usize],
    group: usize,
    axes: &[Axis],
) -> Result<Vec<f64>, String> {
    let (n, c, m, cg) = (xd[0], xd[1], wd[0], wd[1]);
    let mg = m / group;
    let in_dims: Vec<usize> = axes.iter().map(|a| a.len).collect();
    let out_dims: Vec<usize> = axes.iter().map(|a| a.out).collect();
    let kernel: Vec<usize> = axes.iter().map(|a| a.kernel).collect();
    let size = |d: &[usize]| checked_product(d).ok_or("the convolution is too large");
    let (in_size, out_size, k_size) = (size(&in_dims)?, size(&out_dims)?, size(&kernel)?);
    let total = size(&[n, m, out_size])?;
    if size(xd)? != x.len() || size(wd)? != w.len() {
        return Err("the data does not match the shapes".into());
    }
    let tables: Vec<Vec<Option<usize>>> = axes.iter().map(|a| taps(a, a.out, a.len)).collect();
    let (row, krow) = (strides(&in_dims), strides(&kernel));
    let mut y = Vec::with_capacity(total);
    let (mut o, mut k) = (vec![0; axes.len()], vec![0; axes.len()]);
    for b in 0..n {
        for oc in 0..m {
            let gi = oc / mg;
            loop {
                let mut acc = 0.0;
                loop {
                    let offset = (0..axes.len()).try_fold(0, |off, i| {
                        tables[i][o[i] * kernel[i] + k[i]].map(|p| off + p * row[i])
                    });
                    if let Some(off) = offset {
                        let kf: usize = k.iter().zip(&krow).map(|(a, b)| a * b).sum();
                        for ci in 0..cg {
                            let xi = (b * c + gi * cg + ci) * in_size + off;
                            let wi = (oc * cg + ci) * k_size + kf;
                            acc += x[xi] * w[wi];
                        }
                    }
                    if !advance(&mut k, &kernel) {
                        break;
                    }
                }
                y.push(acc);
                if !advance(&mut o, &out_dims) {
                    break;
                }
            }
        }
    }
    Ok(y)
}

/// Splits the total padding a transposed convolution's output size implies (from `output_shape`,
/// or SAME's `in · s`) as the spec says and onnxruntime does: an odd cell goes to the end for
/// SAME_UPPER, to the beginning otherwise. (onnxruntime's fixtures decide it: older onnxruntime
/// sources and the ONNX reference implementation split some of these cases the other way.)
fn split_padding(auto_pad: AutoPad, total: usize) -> (usize, usize) {
    if auto_pad == AutoPad::SameUpper {
        (total / 2, total - total / 2)
    } else {
        (total - total / 2, total / 2)
    }
}

/// `ConvTranspose`, by its definition: each input cell scatters `x · w` into the outputs
/// `i·s + k·d - begin`. The output size is `output_shape` (which overrides `pads`), else `in · s`
/// for SAME, else `(in - 1)·s + output_padding + (k - 1)·d + 1 - pads`.
pub fn conv_transpose(cx: &Cx) -> OpResult {
    let t = attrs!(cx, ConvTranspose);
    let x = cx.input(0)?;
    let w = cx.input(1)?;
    let (group, kernel) = group_and_kernel(cx, x, w, t.conv.group, &t.conv.window.kernel_shape)?;
    let (n, c, mg) = (x.dims()[0], x.dims()[1], w.dims()[1]);
    if w.dims()[0] != c || c % group != 0 {
        return Err(cx.fail(format!(
            "input has {c} channels, the weight {} and group is {group}",
            w.dims()[0]
        )));
    }
    let cg = c / group;
    let m = mg
        .checked_mul(group)
        .ok_or_else(|| cx.fail("too many output channels"))?;
    let win = t.conv.window.window(kernel).map_err(|e| cx.fail(e))?;
    let spatial = &x.dims()[2..];
    let r = spatial.len();
    let adj = match &t.output_padding {
        None => vec![0; r],
        Some(v) if v.len() == r => v
            .iter()
            .map(|&p| usize::try_from(p))
            .collect::<Result<_, _>>()
            .map_err(|_| cx.fail(format!("output_padding {v:?} has a negative value")))?,
        Some(v) => {
            return Err(cx.fail(format!(
                "attribute 'output_padding' has {} values, expected {r}",
                v.len()
            )))
        }
    };
    let out_shape: Option<&[i64]> = match t.output_shape.as_deref() {
        None => None,
        Some(v) if v.len() == r => Some(v),
        Some(v) if v.len() == r + 2 => Some(&v[2..]),
        Some(v) => {
            return Err(cx.fail(format!(
                "attribute 'output_shape' has {} values, expected {r}",
                v.len()
            )))
        }
    };
    let ovf = || cx.fail("transposed convolution sizes overflow");
    let usize_of = |v: i64| usize::try_from(v).map_err(|_| ovf());
    let mut axes = Vec::with_capacity(r);
    for i in 0..r {
        let (len, k) = (spatial[i], usize_of(win.kernel[i])?);
        let (s, d) = (usize_of(win.strides[i])?, usize_of(win.dilations[i])?);
        if len == 0 {
            return Err(cx.fail(format!("spatial axis {i} is empty")));
        }
        let full = (len - 1)
            .checked_mul(s)
            .and_then(|v| v.checked_add(adj[i]))
            .and_then(|v| v.checked_add((k - 1).checked_mul(d)? + 1))
            .ok_or_else(ovf)?;
        let same = matches!(win.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
        let target = match out_shape {
            Some(o) => Some(usize_of(o[i])?),
            None if same => Some(len.checked_mul(s).ok_or_else(ovf)?),
            None => None,
        };
        let (begin, end) = match (target, win.auto_pad) {
            (Some(out), _) => split_padding(win.auto_pad, full.saturating_sub(out)),
            (None, AutoPad::Valid) => (0, 0),
            (None, _) => (usize_of(win.pads[i])?, usize_of(win.pads[i + r])?),
        };
        let out = full
            .checked_sub(begin + end)
            .filter(|&o| o > 0)
            .ok_or_else(|| cx.fail(format!("the output of spatial axis {i} is empty")))?;
        axes.push(Axis {
            len,
            out,
            begin,
            end,
            kernel: k,
            stride: s,
            dilation: d,
        });
    }
    let in_dims: Vec<usize> = spatial.to_vec();
    let out_dims: Vec<usize> = axes.iter().map(|a| a.out).collect();
    let kernel: Vec<usize> = axes.iter().map(|a| a.kernel).collect();
    let size = |d: &[usize]| checked_product(d).ok_or_else(ovf);
    let (in_size, out_size, k_size) = (size(&in_dims)?, size(&out_dims)?, size(&kernel)?);
    let total = size(&[n, m, out_size])?;
    check_size(cx, &[total])?;
    let (xv, wv) = (flat(cx, x)?, flat(cx, w)?);
    let tables: Vec<Vec<Option<usize>>> = axes.iter().map(|a| taps(a, a.len, a.out)).collect();
    let (row, krow) = (strides(&out_dims), strides(&kernel));
    let mut y = vec![0.0; total];
    let (mut i, mut k) = (vec![0; r], vec![0; r]);
    for b in 0..n {
        for ic in 0..c {
            let gi = ic / cg;
            let xin = (b * c + ic) * in_size;
            let mut i_flat = 0;
            loop {
                let v = xv[xin + i_flat];
                loop {
                    let offset = (0..r).try_fold(0, |off, a| {
                        tables[a][i[a] * kernel[a] + k[a]].map(|p| off + p * row[a])
                    });
                    if let Some(off) = offset {
                        let kf: usize = k.iter().zip(&krow).map(|(a, b)| a * b).sum();
                        for om in 0..mg {
                            let yo = (b * m + gi * mg + om) * out_size + off;
                            y[yo] += v * wv[(ic * mg + om) * k_size + kf];
                        }
                    }
                    if !advance(&mut k, &kernel) {
                        break;
                    }
                }
                i_flat += 1;
                if !advance(&mut i, &in_dims) {
                    break;
                }
            }
        }
    }
    let mut shape = vec![n, m];
    shape.extend_from_slice(&out_dims);
    let y = CTensor::from_vec(y, shape, &candle_core::Device::Cpu).at(cx)?;
    one(add_bias(cx, y, m)?)
}

/// A 2-D convolution's geometry (a 1-D one has `h = kh = 1`).
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Input: batch, channels, height, width.
    pub input: [usize; 4],
    /// Weight: output channels, input channels per group, kernel height, kernel width.
    pub kernel: [usize; 4],
    pub group: usize,
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    /// Top, left, bottom, right.
    pub pads: [usize; 4],
}

impl Geometry {
    /// Output height and width, `None` when the padded input is smaller than the kernel's extent.
    pub fn output(&self) -> Option<[usize; 2]> {
        let [_, _, h, w] = self.input;
        let [_, _, kh, kw] = self.kernel;
        let axis = |len: usize, b: usize, e: usize, k: usize, s: usize, d: usize| {
            let padded = len.checked_add(b)?.checked_add(e)?;
            let extent = (k.checked_sub(1)?).checked_mul(d)?.checked_add(1)?;
            Some(padded.checked_sub(extent)? / s + 1)
        };
        Some([
            axis(
                h,
                self.pads[0],
                self.pads[2],
                kh,
                self.strides[0],
                self.dilations[0],
            )?,
            axis(
                w,
                self.pads[1],
                self.pads[3],
                kw,
                self.strides[1],
                self.dilations[1],
            )?,
        ])
    }
}

/// `y = conv(x, w)` without bias; `x` and `w` row-major, the result `[n, m, ho, wo]` row-major.
pub fn conv2d(x: &[f64], w: &[f64], g: &Geometry) -> Result<(Vec<f64>, [usize; 4]), String> {
    let [_, cg, kh, kw] = g.kernel;
    let p = g.output().map_or(1, |[ho, wo]| ho.saturating_mul(wo));
    conv2d_tiled(
        x,
        w,
        g,
        tile_len(cg.saturating_mul(kh).saturating_mul(kw), p),
    )
}

/// The im2col buffer of one tile of output positions: 2 MiB of f64 (the product of a tile reads
/// it once, from cache).
const TILE_BYTES: usize = 2 << 20;

/// The most f64 values one tile's im2col buffer may hold (2 GiB).
const MAX_COL: usize = 1 << 28;

/// Output positions per tile: what fits [`TILE_BYTES`] of im2col rows of length `k`, at least 64
/// (for the product's efficiency), and at most an even share of `p` per core, so that every core
/// has work.
fn tile_len(k: usize, p: usize) -> usize {
    let cores = rayon::current_num_threads().max(1);
    let fit = (TILE_BYTES / 8 / k.max(1)).max(64);
    fit.min(p.div_ceil(cores)).max(1)
}

/// The input row or column that output position `o` reads under kernel tap `k` (stride `s`,
/// dilation `d`, leading pad `pad`), if it is inside the input's `len`.
fn src(o: usize, k: usize, s: usize, d: usize, pad: usize, len: usize) -> Option<usize> {
    (o * s + k * d).checked_sub(pad).filter(|&i| i < len)
}

/// The output columns `lo..hi` whose tap at offset `off` (`kx · dilation`) reads inside a row of
/// `wd` inputs: `ox · stride + off - pad` in `0..wd`, for `ox` in `0..wo`.
fn inside(off: usize, pad: usize, stride: usize, wd: usize, wo: usize) -> (usize, usize) {
    let lo = pad.saturating_sub(off).div_ceil(stride).min(wo);
    let hi = (wd + pad)
        .checked_sub(off)
        .map_or(0, |e| e.div_ceil(stride))
        .clamp(lo, wo);
    (lo, hi)
}

/// The im2col rows of the output positions `p0..p0 + len` (`len = col.len() / k`) of one group's
/// input `x` (`cg × h × w`): row `(ci, ky, kx)` holds, for each position, the input it reads under
/// that tap, or 0 in the padding. Column-major `len × k`, as the product reads it.
fn im2col(x: &[f64], g: &Geometry, [_, wo]: [usize; 2], p0: usize, col: &mut [f64]) {
    let [_, _, h, wd] = g.input;
    let [_, cg, kh, kw] = g.kernel;
    let len = col.len() / (cg * kh * kw);
    let [pt, pl, _, _] = g.pads;
    let [sh, sw] = g.strides;
    let [dh, dw] = g.dilations;
    for ci in 0..cg {
        let xin = &x[ci * h * wd..][..h * wd];
        for ky in 0..kh {
            for kx in 0..kw {
                let row = &mut col[((ci * kh + ky) * kw + kx) * len..][..len];
                let off = kx * dw;
                let (lo, hi) = inside(off, pl, sw, wd, wo);
                let mut i = 0;
                while i < len {
                    let pos = p0 + i;
                    let (oy, ox0) = (pos / wo, pos % wo);
                    let run = (wo - ox0).min(len - i);
                    let seg = &mut row[i..i + run];
                    let iy = src(oy, ky, sh, dh, pt, h);
                    match iy {
                        None => seg.fill(0.0),
                        Some(iy) => {
                            let src = &xin[iy * wd..][..wd];
                            // zeros left and right of the columns inside the input
                            let a = lo.clamp(ox0, ox0 + run);
                            let e = hi.clamp(a, ox0 + run);
                            let (left, rest) = seg.split_at_mut(a - ox0);
                            let (mid, right) = rest.split_at_mut(e - a);
                            left.fill(0.0);
                            right.fill(0.0);
                            if sw == 1 {
                                mid.copy_from_slice(&src[a + off - pl..e + off - pl]);
                            } else {
                                for (j, v) in mid.iter_mut().enumerate() {
                                    *v = src[(a + j) * sw + off - pl];
                                }
                            }
                        }
                    }
                    i += run;
                }
            }
        }
    }
}

/// [`conv2d`] with im2col tiles of `tile` output positions.
fn conv2d_tiled(
    x: &[f64],
    w: &[f64],
    g: &Geometry,
    tile: usize,
) -> Result<(Vec<f64>, [usize; 4]), String> {
    let [n, c, h, wd] = g.input;
    let [m, cg, kh, kw] = g.kernel;
    if g.group == 0 || c != cg * g.group || m % g.group != 0 {
        return Err(format!(
            "{c} input channels and {m} outputs do not split into {} groups of {cg}",
            g.group
        ));
    }
    if g.strides.contains(&0) || g.dilations.contains(&0) {
        return Err("strides and dilations must be positive".into());
    }
    let [ho, wo] = g
        .output()
        .ok_or("the padded input is smaller than the kernel")?;
    let size = |dims: &[usize]| dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if size(&g.input) != Some(x.len()) || size(&g.kernel) != Some(w.len()) {
        return Err("the data does not match the shapes".into());
    }
    let p = ho * wo;
    let mg = m / g.group;
    let out_len = size(&[n, m, ho, wo]).ok_or("the output is too large")?;
    let mut out = zeros(out_len);
    let [pt, pl, _, _] = g.pads;
    let [sh, sw] = g.strides;
    let [dh, dw] = g.dilations;
    if cg == 1 {
        // depthwise: each output channel reads one input channel; the channels in parallel, and
        // each tap's row split into the padding (skipped) and the columns inside the input
        let area = kh * kw;
        out.par_chunks_mut(p.max(1))
            .enumerate()
            .with_min_len((4096 / p.max(1)).max(1))
            .for_each(|(bo, dst)| {
                let (b, oc) = (bo / m, bo % m);
                let ic = oc / mg;
                let xin = &x[(b * c + ic) * h * wd..][..h * wd];
                let filt = &w[oc * area..][..area];
                for oy in 0..ho {
                    let drow = &mut dst[oy * wo..][..wo];
                    for ky in 0..kh {
                        let Some(iy) = src(oy, ky, sh, dh, pt, h) else {
                            continue;
                        };
                        let row = &xin[iy * wd..][..wd];
                        for kx in 0..kw {
                            let f = filt[ky * kw + kx];
                            let off = kx * dw;
                            let (lo, hi) = inside(off, pl, sw, wd, wo);
                            if sw == 1 {
                                let xs = &row[lo + off - pl..hi + off - pl];
                                for (d, &v) in drow[lo..hi].iter_mut().zip(xs) {
                                    *d += f * v;
                                }
                            } else {
                                for (ox, d) in drow[lo..hi].iter_mut().enumerate() {
                                    *d += f * row[(lo + ox) * sw + off - pl];
                                }
                            }
                        }
                    }
                }
            });
        return Ok((out, [n, m, ho, wo]));
    }
    let k = cg * kh * kw;
    if k == 0 || p == 0 {
        // no input channel or no tap (a weight with a zero dimension): each output is an empty sum
        return Ok((out, [n, m, ho, wo]));
    }
    let pointwise = kh == 1 && kw == 1 && g.strides == [1, 1] && g.pads == [0; 4];
    let tile = tile.clamp(1, p.max(1));
    if k.checked_mul(tile).is_none_or(|e| e > MAX_COL) {
        return Err("the im2col buffer is too large".into());
    }
    for b in 0..n {
        for gi in 0..g.group {
            let xg = &x[(b * c + gi * cg) * h * wd..][..cg * h * wd];
            // out[b, group block] (mg × p) = W_g (mg × k) · col (k × p); computed transposed so
            // that faer's column-major views are the row-major buffers themselves
            let wg = MatRef::from_column_major_slice(&w[gi * mg * k..][..mg * k], k, mg);
            let dst = MatMut::from_column_major_slice_mut(
                &mut out[(b * m + gi * mg) * p..][..mg * p],
                p,
                mg,
            );
            if pointwise {
                // a 1×1 convolution reads the input as it is: col = x
                let col = MatRef::from_column_major_slice(xg, p, k);
                faer::linalg::matmul::matmul(dst, Accum::Replace, col, wg, 1.0, Par::rayon(0));
                crate::util::simd::settle(Par::rayon(0));
                continue;
            }
            // im2col one tile of output positions at a time, the tiles in parallel: the buffer
            // stays small (no k × p buffer of hundreds of MB) and both the copy and the product
            // use every core
            dst.par_row_chunks_mut(tile).enumerate().for_each_init(
                || vec![0.0; k * tile],
                |col, (t, dtile)| {
                    let (p0, len) = (t * tile, dtile.nrows());
                    let col = &mut col[..k * len];
                    im2col(xg, g, [ho, wo], p0, col);
                    faer::linalg::matmul::matmul(
                        dtile,
                        Accum::Replace,
                        MatRef::from_column_major_slice(col, len, k),
                        wg,
                        1.0,
                        Par::Seq,
                    );
                    crate::util::simd::clear_upper();
                },
            );
        }
    }
    Ok((out, [n, m, ho, wo]))
}

#[cfg(test)]
mod tests {
    use super::super::tensor;
    use super::super::testing::{assert_close, flat, ramp, G};
    use super::super::testing::{ints, OPSET};
    use super::*;
    use crate::ir::Attr;
    use crate::verify::exec::{seeded_normal, Executor};
    use std::collections::HashMap;

    /// The definition, term by term.
    fn reference(x: &[f64], w: &[f64], g: &Geometry) -> Vec<f64> {
        let [n, c, h, wd] = g.input;
        let [m, cg, kh, kw] = g.kernel;
        let [ho, wo] = g.output().unwrap();
        let mg = m / g.group;
        let mut out = vec![0.0; n * m * ho * wo];
        for b in 0..n {
            for oc in 0..m {
                let gi = oc / mg;
                for oy in 0..ho {
                    for ox in 0..wo {
                        let mut acc = 0.0;
                        for ci in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * g.strides[0] + ky * g.dilations[0]) as i64
                                        - g.pads[0] as i64;
                                    let ix = (ox * g.strides[1] + kx * g.dilations[1]) as i64
                                        - g.pads[1] as i64;
                                    if iy < 0 || ix < 0 || iy >= h as i64 || ix >= wd as i64 {
                                        continue;
                                    }
                                    let xi = ((b * c + gi * cg + ci) * h + iy as usize) * wd
                                        + ix as usize;
                                    let wi = ((oc * cg + ci) * kh + ky) * kw + kx;
                                    acc += x[xi] * w[wi];
                                }
                            }
                        }
                        out[((b * m + oc) * ho + oy) * wo + ox] = acc;
                    }
                }
            }
        }
        out
    }

    fn ramp_scaled(n: usize, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 7919) % 23) as f64 * scale - 1.0)
            .collect()
    }

    /// One group, unit strides and dilations, no padding.
    fn plain(input: [usize; 4], kernel: [usize; 4]) -> Geometry {
        Geometry {
            input,
            kernel,
            group: 1,
            strides: [1, 1],
            dilations: [1, 1],
            pads: [0; 4],
        }
    }
    #[test]
    fn a_3x3_kernel_on_a_ramp_by_hand() {
        // 1 channel 3x3 input 1..9, 2x2 kernel of ones, no padding: sums of 2x2 windows
        let x: Vec<f64> = (1..=9).map(f64::from).collect();
        let g = plain([1, 1, 3, 3], [1, 1, 2, 2]);
        let (y, dims) = conv2d(&x, &[1.0; 4], &g).unwrap();
        assert_eq!(dims, [1, 1, 2, 2]);
        assert_eq!(y, vec![12.0, 16.0, 24.0, 28.0]);
    }

    #[test]
    fn matches_the_definition_in_every_geometry_and_tiling() {
        let cases = [
            // input, kernel, group, strides, dilations, pads
            ([2, 6, 7, 9], [4, 6, 3, 3], 1, [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 6, 8, 8], [6, 3, 3, 2], 2, [2, 1], [1, 2], [0, 1, 2, 0]),
            ([2, 4, 9, 7], [8, 1, 3, 3], 4, [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 3, 1, 10], [5, 3, 1, 3], 1, [1, 3], [1, 1], [0, 2, 0, 1]),
            ([1, 4, 6, 6], [4, 1, 2, 3], 4, [1, 2], [2, 1], [1, 0, 0, 1]),
            ([1, 3, 7, 9], [4, 3, 3, 3], 1, [1, 1], [1, 1], [1, 1, 1, 1]),
            ([2, 4, 8, 5], [6, 2, 3, 2], 2, [2, 1], [1, 2], [0, 1, 2, 0]),
            ([1, 2, 9, 11], [3, 2, 2, 3], 1, [1, 3], [2, 1], [2, 0, 1, 3]),
            // pointwise: the product reads the input as it is
            ([1, 5, 4, 4], [2, 5, 1, 1], 1, [1, 1], [1, 1], [0, 0, 0, 0]),
        ];
        for (input, kernel, group, strides, dilations, pads) in cases {
            let g = Geometry {
                input,
                kernel,
                group,
                strides,
                dilations,
                pads,
            };
            let x = ramp_scaled(input.iter().product(), 0.1);
            let w = ramp_scaled(kernel.iter().product(), 0.05);
            let want = reference(&x, &w, &g);
            let (y, _) = conv2d(&x, &w, &g).unwrap();
            assert_close(&y, &want);
            // im2col tiles that end mid-row, span rows, or hold one position
            for tile in [1, 2, 3, 5, 7, 64, usize::MAX] {
                let (y, _) = conv2d_tiled(&x, &w, &g, tile).unwrap();
                assert_close(&y, &want);
            }
        }
    }

    #[test]
    fn inconsistent_shapes_are_errors() {
        let g = plain([1, 3, 2, 2], [1, 3, 3, 3]);
        assert!(conv2d(&[0.0; 12], &[0.0; 27], &g).is_err());
    }

    #[test]
    fn conv_3x3_with_unit_pads_on_a_ramp() {
        let mut g = G::new();
        g.input("x", &[1, 1, 4, 4], ramp(16))
            .init("w", &[1, 1, 3, 3], vec![1.0; 9])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("pads", ints(&[1, 1, 1, 1]))],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 4, 4]);
        #[rustfmt::skip]
        let want = [
            10.0, 18.0, 24.0, 18.0,
            27.0, 45.0, 54.0, 39.0,
            51.0, 81.0, 90.0, 63.0,
            42.0, 66.0, 72.0, 50.0,
        ];
        assert_close(&flat(&y), &want);
    }

    #[test]
    fn conv_is_a_correlation_and_adds_the_bias() {
        // only the top-left tap is set: y[i][j] = x[i-1][j-1] + 0.5
        let mut w = vec![0.0; 9];
        w[0] = 1.0;
        let mut g = G::new();
        g.input("x", &[1, 1, 4, 4], ramp(16))
            .init("w", &[1, 1, 3, 3], w)
            .init("b", &[1], vec![0.5])
            .node(
                "Conv",
                &["x", "w", "b"],
                &["y"],
                vec![("pads", ints(&[1, 1, 1, 1]))],
            );
        #[rustfmt::skip]
        let want = [
            0.5, 0.5, 0.5, 0.5,
            0.5, 0.5, 1.5, 2.5,
            0.5, 4.5, 5.5, 6.5,
            0.5, 8.5, 9.5, 10.5,
        ];
        assert_close(&flat(&g.run1("y")), &want);
    }

    #[test]
    fn conv_with_asymmetric_pads() {
        // pads [h_begin, w_begin, h_end, w_end] = [0, 1, 1, 0]
        let mut g = G::new();
        g.input("x", &[1, 1, 3, 3], ramp(9))
            .init("w", &[1, 1, 2, 2], vec![1.0; 4])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("pads", ints(&[0, 1, 1, 0]))],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 3, 3]);
        assert_close(
            &flat(&y),
            &[3.0, 8.0, 12.0, 9.0, 20.0, 24.0, 6.0, 13.0, 15.0],
        );
    }

    #[test]
    fn conv_same_lower_pads_at_the_beginning() {
        let mut g = G::new();
        g.input("x", &[1, 1, 3, 3], ramp(9))
            .init("w", &[1, 1, 2, 2], vec![1.0; 4])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("auto_pad", Attr::String(b"SAME_LOWER".to_vec()))],
            );
        assert_close(
            &flat(&g.run1("y")),
            &[0.0, 1.0, 3.0, 3.0, 8.0, 12.0, 9.0, 20.0, 24.0],
        );
    }

    #[test]
    fn conv_1d_with_stride() {
        // padded [0,1,2,3,4,5,0], windows at 0, 2, 4 with taps [1, 0, -1]
        let mut g = G::new();
        g.input("x", &[1, 1, 5], vec![1.0, 2.0, 3.0, 4.0, 5.0])
            .init("w", &[1, 1, 3], vec![1.0, 0.0, -1.0])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("pads", ints(&[1, 1])), ("strides", ints(&[2]))],
            );
        assert_close(&flat(&g.run1("y")), &[-2.0, -2.0, 4.0]);
    }

    #[test]
    fn grouped_conv_uses_its_own_channels() {
        // group 2: outputs 0,1 read channels 0,1; outputs 2,3 read channels 2,3
        let mut g = G::new();
        g.input("x", &[1, 4, 1, 1], vec![1.0, 2.0, 3.0, 4.0])
            .init(
                "w",
                &[4, 2, 1, 1],
                vec![1.0, 1.0, 1.0, -1.0, 2.0, 0.0, 0.0, 3.0],
            )
            .node("Conv", &["x", "w"], &["y"], vec![("group", Attr::Int(2))]);
        assert_close(&flat(&g.run1("y")), &[3.0, -1.0, 6.0, 12.0]);
    }

    /// Direct 2-D convolution with loops, for one image.
    #[allow(clippy::too_many_arguments)]
    fn naive_depthwise(
        x: &[f64],
        w: &[f64],
        c: usize,
        h: usize,
        k: usize,
        pad: usize,
        stride: usize,
        dil: usize,
    ) -> Vec<f64> {
        let out = (h + 2 * pad - dil * (k - 1) - 1) / stride + 1;
        let mut y = Vec::new();
        for ch in 0..c {
            for oi in 0..out {
                for oj in 0..out {
                    let mut s = 0.0;
                    for ki in 0..k {
                        for kj in 0..k {
                            let i = (oi * stride + ki * dil) as i64 - pad as i64;
                            let j = (oj * stride + kj * dil) as i64 - pad as i64;
                            if (0..h as i64).contains(&i) && (0..h as i64).contains(&j) {
                                s += x[ch * h * h + i as usize * h + j as usize]
                                    * w[ch * k * k + ki * k + kj];
                            }
                        }
                    }
                    y.push(s);
                }
            }
        }
        y
    }

    #[test]
    fn depthwise_conv_equals_per_channel_convs() {
        let x = flat(&seeded_normal(&[1, 3, 7, 7], 1).unwrap());
        let w = flat(&seeded_normal(&[3, 1, 3, 3], 2).unwrap());
        let mut g = G::new();
        g.input("x", &[1, 3, 7, 7], x.clone())
            .init("w", &[3, 1, 3, 3], w.iter().map(|&v| v as f32).collect())
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![
                    ("group", Attr::Int(3)),
                    ("pads", ints(&[1, 1, 1, 1])),
                    ("strides", ints(&[2, 2])),
                    ("dilations", ints(&[2, 2])),
                ],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 3, 3, 3]);
        let w32: Vec<f64> = w.iter().map(|&v| v as f32 as f64).collect();
        assert_close(&flat(&y), &naive_depthwise(&x, &w32, 3, 7, 3, 1, 2, 2));
    }

    #[test]
    fn anisotropic_strides_run_and_unknown_ops_are_reported() {
        let mut g = G::new();
        g.input("x", &[1, 1, 4, 4], ramp(16))
            .init("w", &[1, 1, 1, 1], vec![1.0])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("strides", ints(&[2, 1]))],
            )
            .init("s", &[], vec![1.0])
            .node("MatMulInteger", &["y", "s"], &["z"], vec![]);
        let graph = g.b.finish().unwrap();
        let exec = Executor::new(&graph, OPSET);
        let found = exec.unsupported(&[0, 1]);
        assert_eq!(found.len(), 1);
        assert!(found[0].1.contains("no implementation"), "{found:?}");
        // a 1x1 identity kernel with strides 2x1 keeps rows 0 and 2
        let x = graph.value_by_name("x").unwrap();
        let feeds = HashMap::from([(x, tensor(ramp(16), &[1, 1, 4, 4]).unwrap())]);
        let y = Executor::new(&graph, OPSET)
            .eval(&[0], &feeds, &[graph.value_by_name("y").unwrap()])
            .unwrap();
        assert_eq!(y[0].dims(), [1, 1, 2, 4]);
        let r = ramp(16);
        let want: Vec<f64> = r[0..4].iter().chain(&r[8..12]).copied().collect();
        assert_close(&flat(&y[0]), &want);
    }

    #[test]
    fn direct_convolution_matches_the_lowered_one() {
        // the 2-D geometries of matches_the_definition_in_every_geometry, through conv_direct
        let cases = [
            ([2, 6, 7, 9], [4, 6, 3, 3], 1, [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 6, 8, 8], [6, 3, 3, 2], 2, [2, 1], [1, 2], [0, 1, 2, 0]),
            ([1, 4, 6, 6], [4, 1, 2, 3], 4, [1, 2], [2, 1], [1, 0, 0, 1]),
        ];
        for (input, kernel, group, strides, dilations, pads) in cases {
            let g = Geometry {
                input,
                kernel,
                group,
                strides,
                dilations,
                pads,
            };
            let [ho, wo] = g.output().unwrap();
            let axis = |i: usize, out: usize| Axis {
                len: input[2 + i],
                out,
                begin: pads[i],
                end: pads[2 + i],
                kernel: kernel[2 + i],
                stride: strides[i],
                dilation: dilations[i],
            };
            let x = ramp_scaled(input.iter().product(), 0.1);
            let w = ramp_scaled(kernel.iter().product(), 0.05);
            let (want, _) = conv2d(&x, &w, &g).unwrap();
            let got =
                conv_direct(&x, &w, &input, &kernel, group, &[axis(0, ho), axis(1, wo)]).unwrap();
            assert_close(&got, &want);
        }
    }

    #[test]
    fn conv_3d() {
        // a 2x2x2 kernel of ones over a 2x2x3 ramp: sums of the two 2x2x2 windows
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2, 3], ramp(12))
            .init("w", &[1, 1, 2, 2, 2], vec![1.0; 8])
            .node("Conv", &["x", "w"], &["y"], vec![]);
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 1, 1, 2]);
        // 0+1+3+4+6+7+9+10 and each + 1
        assert_close(&flat(&y), &[40.0, 48.0]);
    }

    fn conv_transpose_1d(attrs: Vec<(&str, Attr)>) -> CTensor {
        // x = [1, 2], w = [1, 1, 1], stride 2: the full output is [1, 1, 3, 2, 2]
        let mut g = G::new();
        g.input("x", &[1, 1, 2], vec![1.0, 2.0])
            .init("w", &[1, 1, 3], vec![1.0; 3])
            .node("ConvTranspose", &["x", "w"], &["y"], attrs);
        g.run1("y")
    }

    #[test]
    fn conv_transpose_scatters_by_stride() {
        let s2 = || ("strides", ints(&[2]));
        assert_close(
            &flat(&conv_transpose_1d(vec![s2()])),
            &[1.0, 1.0, 3.0, 2.0, 2.0],
        );
        assert_close(
            &flat(&conv_transpose_1d(vec![s2(), ("pads", ints(&[1, 1]))])),
            &[1.0, 3.0, 2.0],
        );
        assert_close(
            &flat(&conv_transpose_1d(vec![
                s2(),
                ("output_padding", ints(&[1])),
            ])),
            &[1.0, 1.0, 3.0, 2.0, 2.0, 0.0],
        );
        // output_shape 3: total padding 2, one cell each side
        assert_close(
            &flat(&conv_transpose_1d(vec![s2(), ("output_shape", ints(&[3]))])),
            &[1.0, 3.0, 2.0],
        );
    }

    #[test]
    fn conv_transpose_with_groups_and_bias() {
        // group 2: channel 0 -> output 0 (w 1), channel 1 -> output 1 (w 2); kernel 1
        let mut g = G::new();
        g.input("x", &[1, 2, 2], vec![1.0, 2.0, 3.0, 4.0])
            .init("w", &[2, 1, 1], vec![1.0, 2.0])
            .init("b", &[2], vec![0.5, -1.0])
            .node(
                "ConvTranspose",
                &["x", "w", "b"],
                &["y"],
                vec![("group", Attr::Int(2))],
            );
        assert_close(&flat(&g.run1("y")), &[1.5, 2.5, 5.0, 7.0]);
    }

    #[test]
    fn odd_paddings_of_a_transposed_convolution_split_as_the_spec_says() {
        // full output [1, 1, 3, 2, 2]; SAME wants 4 cells, output_shape 4 too: one cell of padding,
        // at the end for SAME_UPPER, at the beginning for SAME_LOWER and for output_shape
        let same = |mode: &str| {
            conv_transpose_1d(vec![
                ("strides", ints(&[2])),
                ("auto_pad", Attr::String(mode.as_bytes().to_vec())),
            ])
        };
        assert_close(&flat(&same("SAME_UPPER")), &[1.0, 1.0, 3.0, 2.0]);
        assert_close(&flat(&same("SAME_LOWER")), &[1.0, 3.0, 2.0, 2.0]);
        let shaped = conv_transpose_1d(vec![
            ("strides", ints(&[2])),
            ("output_shape", ints(&[4])),
            ("pads", ints(&[0, 3])),
        ]);
        assert_close(&flat(&shaped), &[1.0, 3.0, 2.0, 2.0]);
    }

    #[test]
    fn a_weight_with_a_zero_dimension_gives_zeros_not_a_division_by_zero() {
        // no input channel: each output is an empty sum (a fuzzer found im2col dividing by 0)
        let g = plain([1, 0, 3, 3], [2, 0, 2, 2]);
        let (out, shape) = conv2d_tiled(&[], &[], &g, 4).unwrap();
        assert_eq!(shape, [1, 2, 2, 2]);
        assert!(out.len() == 8 && out.iter().all(|&v| v == 0.0), "{out:?}");
        // with a batch, the same
        let g = Geometry {
            input: [2, 0, 3, 3],
            ..g
        };
        let (out, _) = conv2d_tiled(&[], &[], &g, 1).unwrap();
        assert!(out.len() == 16 && out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn hostile_pads_are_errors_not_allocations() {
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2], ramp(4))
            .init("w", &[1, 1, 1, 1], vec![1.0])
            .node(
                "Conv",
                &["x", "w"],
                &["y"],
                vec![("pads", ints(&[1 << 30, 1 << 30, 0, 0]))],
            );
        let err = g.run(&["y"]).unwrap_err();
        assert!(err.to_string().contains("too large"), "{err}");
    }
}
