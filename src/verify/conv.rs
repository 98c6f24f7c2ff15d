//! Convolution for the checker, in f64 on contiguous NCHW data.
//!
//! candle-core 0.11's CPU `conv2d` takes one padding, stride and dilation for both axes, copies
//! strided im2col buffers, and runs a grouped convolution one group at a time (a depthwise
//! convolution with 512 channels is 512 small convolutions plus a concatenation). Verifying a
//! VGG-16 rewrite spent most of its time there. This lowers a convolution to one im2col buffer and
//! one GEMM (faer, in f64) per image and group, and a depthwise one (one input channel per group)
//! to direct loops; any pads, strides and dilations per axis are supported.

use faer::{Accum, MatMut, MatRef, Par};

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
    let mut out = vec![0.0; out_len];
    let [pt, pl, _, _] = g.pads;
    let [sh, sw] = g.strides;
    let [dh, dw] = g.dilations;
    // input row/column of output position o and kernel tap k, if inside the input
    let src = |o: usize, k: usize, s: usize, d: usize, pad: usize, len: usize| -> Option<usize> {
        (o * s + k * d).checked_sub(pad).filter(|&i| i < len)
    };
    if cg == 1 {
        // depthwise: each output channel reads one input channel
        for b in 0..n {
            for oc in 0..m {
                let ic = oc / mg;
                let xin = &x[(b * c + ic) * h * wd..][..h * wd];
                let filt = &w[oc * kh * kw..][..kh * kw];
                let dst = &mut out[(b * m + oc) * p..][..p];
                for oy in 0..ho {
                    for ky in 0..kh {
                        let Some(iy) = src(oy, ky, sh, dh, pt, h) else {
                            continue;
                        };
                        let row = &xin[iy * wd..][..wd];
                        for kx in 0..kw {
                            let f = filt[ky * kw + kx];
                            for ox in 0..wo {
                                if let Some(ix) = src(ox, kx, sw, dw, pl, wd) {
                                    dst[oy * wo + ox] += f * row[ix];
                                }
                            }
                        }
                    }
                }
            }
        }
        return Ok((out, [n, m, ho, wo]));
    }
    let k = cg * kh * kw;
    let mut col = vec![0.0; k.checked_mul(p).ok_or("the im2col buffer is too large")?];
    for b in 0..n {
        for gi in 0..g.group {
            // im2col: row (ci, ky, kx), column (oy, ox)
            col.iter_mut().for_each(|v| *v = 0.0);
            for ci in 0..cg {
                let xin = &x[(b * c + gi * cg + ci) * h * wd..][..h * wd];
                for ky in 0..kh {
                    for kx in 0..kw {
                        let row = &mut col[((ci * kh + ky) * kw + kx) * p..][..p];
                        for oy in 0..ho {
                            let Some(iy) = src(oy, ky, sh, dh, pt, h) else {
                                continue;
                            };
                            for ox in 0..wo {
                                if let Some(ix) = src(ox, kx, sw, dw, pl, wd) {
                                    row[oy * wo + ox] = xin[iy * wd + ix];
                                }
                            }
                        }
                    }
                }
            }
            // out[b, group block] (mg × p) = W_g (mg × k) · col (k × p); computed transposed so
            // that faer's column-major views are the row-major buffers themselves
            let wg = &w[gi * mg * k..][..mg * k];
            let dst = &mut out[(b * m + gi * mg) * p..][..mg * p];
            faer::linalg::matmul::matmul(
                MatMut::from_column_major_slice_mut(dst, p, mg),
                Accum::Replace,
                MatRef::from_column_major_slice(&col, p, k),
                MatRef::from_column_major_slice(wg, k, mg),
                1.0,
                Par::rayon(0),
            );
        }
    }
    Ok((out, [n, m, ho, wo]))
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn ramp(n: usize, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 7919) % 23) as f64 * scale - 1.0)
            .collect()
    }

    #[test]
    fn a_3x3_kernel_on_a_ramp_by_hand() {
        // 1 channel 3x3 input 1..9, 2x2 kernel of ones, no padding: sums of 2x2 windows
        let x: Vec<f64> = (1..=9).map(f64::from).collect();
        let g = Geometry {
            input: [1, 1, 3, 3],
            kernel: [1, 1, 2, 2],
            group: 1,
            strides: [1, 1],
            dilations: [1, 1],
            pads: [0, 0, 0, 0],
        };
        let (y, dims) = conv2d(&x, &[1.0; 4], &g).unwrap();
        assert_eq!(dims, [1, 1, 2, 2]);
        assert_eq!(y, vec![12.0, 16.0, 24.0, 28.0]);
    }

    #[test]
    fn matches_the_definition_in_every_geometry() {
        let cases = [
            // input, kernel, group, strides, dilations, pads
            ([2, 6, 7, 9], [4, 6, 3, 3], 1, [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 6, 8, 8], [6, 3, 3, 2], 2, [2, 1], [1, 2], [0, 1, 2, 0]),
            ([2, 4, 9, 7], [8, 1, 3, 3], 4, [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 3, 1, 10], [5, 3, 1, 3], 1, [1, 3], [1, 1], [0, 2, 0, 1]),
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
            let x = ramp(input.iter().product(), 0.1);
            let w = ramp(kernel.iter().product(), 0.05);
            let (y, _) = conv2d(&x, &w, &g).unwrap();
            let r = reference(&x, &w, &g);
            let err = y
                .iter()
                .zip(&r)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-12, "{g:?}: {err}");
        }
    }

    #[test]
    fn inconsistent_shapes_are_errors() {
        let g = Geometry {
            input: [1, 3, 2, 2],
            kernel: [1, 3, 3, 3],
            group: 1,
            strides: [1, 1],
            dilations: [1, 1],
            pads: [0, 0, 0, 0],
        };
        assert!(conv2d(&[0.0; 12], &[0.0; 27], &g).is_err());
    }
}
