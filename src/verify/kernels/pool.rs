//! Pooling: windowed (`MaxPool` with its indices, `AveragePool`) over any number of spatial axes,
//! computed directly in f64, and the global pools. Output sizes and padding come from the
//! analysis' window ([`crate::analysis::ops::conv::Window::plan`]), as for convolutions.
//!
//! A window cell is input, padding (the `pads`, or SAME's), or past the padded end (where
//! `ceil_mode`'s last window reaches): padding counts in an average's divisor only with
//! `count_include_pad`, cells past the end never do, and neither is ever a maximum.

use candle_core::Tensor as CTensor;

use super::conv::{plan, Axis};
use super::{
    advance, attrs, check_size, checked_product, one, tensor, with_values, At, Cx, OpResult,
};
use crate::analysis::ops::pool::Pool;
use crate::verify::exec::ExecError;
use rayon::prelude::*;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cell {
    /// An input cell at this index along its axis.
    Input(usize),
    Pad,
    PastEnd,
}

/// Where tap `k` of output `o` falls on one axis.
fn cell(a: &Axis, o: usize, k: usize) -> Cell {
    // `plan` bounds `o * stride + k * dilation` by the padded extent, which fits in usize
    let pos = o * a.stride + k * a.dilation;
    match pos.checked_sub(a.begin) {
        None => Cell::Pad,
        Some(i) if i < a.len => Cell::Input(i),
        Some(i) if i - a.len < a.end => Cell::Pad,
        Some(_) => Cell::PastEnd,
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Max,
    Average { include_pad: bool },
}

/// Pools `x` (`[N, C, spatial...]`); for `Max` with `indices`, also the flat index of each
/// maximum over the whole input (row-major, or column-major over the spatial axes with
/// `storage_order`), as onnxruntime and the spec define it.
fn pool_nd(
    cx: &Cx,
    x: &CTensor,
    p: &Pool,
    kind: Kind,
    indices: bool,
) -> Result<(CTensor, Option<CTensor>), ExecError> {
    let dims = x.dims();
    if dims.len() < 3 {
        return Err(cx.fail(format!(
            "input has rank {}, expected (N, C, spatial...)",
            dims.len()
        )));
    }
    let spatial = &dims[2..];
    let win = p.window(spatial.len()).map_err(|e| cx.fail(e))?;
    let axes = plan(cx, &win, spatial)?;
    let ovf = || cx.fail("the pooled tensor is too large");
    let channels = dims[0].checked_mul(dims[1]).ok_or_else(ovf)?;
    let in_size = checked_product(spatial).ok_or_else(ovf)?;
    let out_dims: Vec<usize> = axes.iter().map(|a| a.out).collect();
    let out_size = checked_product(&out_dims).ok_or_else(ovf)?;
    let total = channels.checked_mul(out_size).ok_or_else(ovf)?;
    check_size(cx, &[total])?;
    // strides of the input's spatial axes, row-major and column-major
    let n = spatial.len();
    let mut row = vec![1usize; n];
    let mut col = vec![1usize; n];
    for i in (0..n.saturating_sub(1)).rev() {
        row[i] = row[i + 1] * spatial[i + 1];
    }
    for i in 1..n {
        col[i] = col[i - 1] * spatial[i - 1];
    }
    let index_strides = if p.storage_order { &col } else { &row };
    // per axis and output position: its input taps (data offset, index offset) and padding cells
    let mut taps: Vec<Vec<Vec<(usize, usize)>>> = Vec::with_capacity(n);
    let mut pads: Vec<Vec<usize>> = Vec::with_capacity(n);
    for (i, a) in axes.iter().enumerate() {
        let (mut t, mut pd) = (Vec::with_capacity(a.out), Vec::with_capacity(a.out));
        for o in 0..a.out {
            let (mut inputs, mut padding) = (Vec::new(), 0);
            for k in 0..a.kernel {
                match cell(a, o, k) {
                    Cell::Input(j) => inputs.push((j * row[i], j * index_strides[i])),
                    Cell::Pad => padding += 1,
                    Cell::PastEnd => {}
                }
            }
            t.push(inputs);
            pd.push(padding);
        }
        taps.push(t);
        pads.push(pd);
    }
    let mut out = vec![0.0; total];
    let mut found = vec![0.0; if indices { total } else { 0 }];
    let last = n - 1;
    // one channel's outputs (and argmax indices, when asked)
    let pool_channel = |data: &[f64], c: usize, out: &mut [f64], found: &mut [f64]| {
        let (mut o, mut k, mut lens) = (vec![0usize; n], vec![0usize; n], vec![0usize; n]);
        let base = c * in_size;
        for (j, y) in out.iter_mut().enumerate() {
            let (mut best, mut best_at) = (f64::NEG_INFINITY, None::<usize>);
            let (mut sum, mut with_pads) = (0.0, 1usize);
            for i in 0..n {
                lens[i] = taps[i][o[i]].len();
                with_pads *= lens[i] + pads[i][o[i]];
            }
            let inputs: usize = lens.iter().product();
            if inputs > 0 {
                k.fill(0);
                // the outer axes by odometer, the last one as a tight loop
                loop {
                    let (mut offset, mut index) = (base, base);
                    for i in 0..last {
                        let (r, ix) = taps[i][o[i]][k[i]];
                        offset += r;
                        index += ix;
                    }
                    for &(r, ix) in &taps[last][o[last]] {
                        let v = data.get(offset + r).copied().unwrap_or(f64::NAN);
                        match kind {
                            // the first maximum wins; NaN propagates
                            Kind::Max => {
                                if best_at.is_none() || v > best || (v.is_nan() && !best.is_nan()) {
                                    best = v;
                                    best_at = Some(index + ix);
                                }
                            }
                            Kind::Average { .. } => sum += v,
                        }
                    }
                    if !advance(&mut k[..last], &lens[..last]) {
                        break;
                    }
                }
            }
            match kind {
                Kind::Max => {
                    *y = best;
                    if let Some(f) = found.get_mut(j) {
                        *f = best_at.map_or(-1.0, |i| i as f64);
                    }
                }
                Kind::Average { include_pad } => {
                    let count = if include_pad { with_pads } else { inputs };
                    *y = sum / count as f64;
                }
            }
            advance(&mut o, &out_dims);
        }
    };
    if total > 0 {
        // the channels in parallel
        let min_len = (4096 / out_size).max(1);
        with_values(x, |data| {
            if indices {
                out.par_chunks_mut(out_size)
                    .zip(found.par_chunks_mut(out_size))
                    .enumerate()
                    .with_min_len(min_len)
                    .for_each(|(c, (y, f))| pool_channel(data, c, y, f));
            } else {
                out.par_chunks_mut(out_size)
                    .enumerate()
                    .with_min_len(min_len)
                    .for_each(|(c, y)| pool_channel(data, c, y, &mut []));
            }
        })
        .at(cx)?;
    }
    let mut shape = dims[..2].to_vec();
    shape.extend_from_slice(&out_dims);
    let y = tensor(out, &shape).at(cx)?;
    let i = if indices {
        Some(tensor(found, &shape).at(cx)?)
    } else {
        None
    };
    Ok((y, i))
}

pub fn max_pool(cx: &Cx) -> OpResult {
    let p = attrs!(cx, MaxPool);
    let indices = cx.node.output(1).is_some();
    let (y, i) = pool_nd(cx, cx.input(0)?, p, Kind::Max, indices)?;
    Ok(std::iter::once(y).chain(i).collect())
}

pub fn average_pool(cx: &Cx) -> OpResult {
    let p = attrs!(cx, AveragePool);
    let kind = Kind::Average {
        include_pad: p.count_include_pad,
    };
    one(pool_nd(cx, cx.input(0)?, p, kind, false)?.0)
}

pub fn global_average_pool(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    if x.rank() < 3 {
        return Err(cx.fail(format!("input has rank {}, expected at least 3", x.rank())));
    }
    one(x.mean_keepdim((2..x.rank()).collect::<Vec<_>>()).at(cx)?)
}

pub fn global_max_pool(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    if x.rank() < 3 {
        return Err(cx.fail(format!("input has rank {}, expected at least 3", x.rank())));
    }
    let mut y = x.clone();
    for axis in 2..x.rank() {
        if y.dims()[axis] == 0 {
            return Err(cx.fail("the maximum of an empty axis is undefined"));
        }
        y = y.max_keepdim(axis).at(cx)?;
    }
    one(y)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, ints, ramp, G};
    use crate::ir::Attr;

    #[test]
    fn max_pool_pads_with_minus_infinity() {
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2], vec![-1.0, -2.0, -3.0, -4.0])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![
                    ("kernel_shape", ints(&[2, 2])),
                    ("pads", ints(&[1, 1, 1, 1])),
                ],
            );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 3, 3]);
        assert_close(
            &flat(&y),
            &[-1.0, -1.0, -2.0, -1.0, -1.0, -2.0, -3.0, -3.0, -4.0],
        );
    }

    #[test]
    fn max_pool_ceil_mode_adds_a_partial_window() {
        // 5 wide, kernel 2, stride 2: floor gives 2 windows, ceil 3 (the last one holds x[4] only)
        let mut g = G::new();
        g.input("x", &[1, 1, 5], vec![-5.0, -4.0, -3.0, -2.0, -1.0])
            .node(
                "MaxPool",
                &["x"],
                &["y"],
                vec![
                    ("kernel_shape", ints(&[2])),
                    ("strides", ints(&[2])),
                    ("ceil_mode", Attr::Int(1)),
                ],
            );
        assert_close(&flat(&g.run1("y")), &[-4.0, -2.0, -1.0]);
    }

    #[test]
    fn max_pool_dilated_with_indices() {
        // 1-D, 6 cells, kernel 2 dilated by 2: windows {0,2}, {1,3}, {2,4}, {3,5}
        let x = vec![3.0, 1.0, 2.0, 5.0, 4.0, 0.0];
        let mut g = G::new();
        g.input("x", &[1, 2, 6], [x.clone(), x].concat()).node(
            "MaxPool",
            &["x"],
            &["y", "i"],
            vec![("kernel_shape", ints(&[2])), ("dilations", ints(&[2]))],
        );
        let out = g.run(&["y", "i"]).unwrap();
        assert_close(&flat(&out[0]), &[3.0, 5.0, 4.0, 5.0, 3.0, 5.0, 4.0, 5.0]);
        // flat over the whole input: the second channel starts at 6
        assert_close(&flat(&out[1]), &[0.0, 3.0, 4.0, 3.0, 6.0, 9.0, 10.0, 9.0]);
    }

    #[test]
    fn max_pool_indices_in_column_major_order() {
        // a 2x3 map, one 2x2 window at the top left: the max 4 at (1, 1)
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 0.0])
            .node(
                "MaxPool",
                &["x"],
                &["y", "i"],
                vec![
                    ("kernel_shape", ints(&[2, 2])),
                    ("strides", ints(&[2, 2])),
                    ("storage_order", Attr::Int(1)),
                ],
            );
        let out = g.run(&["y", "i"]).unwrap();
        assert_close(&flat(&out[0]), &[4.0]);
        // row-major 1 * 3 + 1 = 4, column-major 1 + 1 * 2 = 3
        assert_close(&flat(&out[1]), &[3.0]);
    }

    fn avg_pool(include_pad: i64) -> Vec<f64> {
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2], vec![1.0, 2.0, 3.0, 4.0]).node(
            "AveragePool",
            &["x"],
            &["y"],
            vec![
                ("kernel_shape", ints(&[2, 2])),
                ("pads", ints(&[1, 1, 1, 1])),
                ("count_include_pad", Attr::Int(include_pad)),
            ],
        );
        flat(&g.run1("y"))
    }

    #[test]
    fn average_pool_count_include_pad() {
        assert_close(&avg_pool(0), &[1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]);
        assert_close(
            &avg_pool(1),
            &[0.25, 0.75, 0.5, 1.0, 2.5, 1.5, 0.75, 1.75, 1.0],
        );
    }

    #[test]
    fn average_pool_ceil_mode_never_counts_past_the_end() {
        // 5 cells, kernel 2, stride 2, ceil: the last window holds x[4] and one cell past the end
        for include_pad in [0, 1] {
            let mut g = G::new();
            g.input("x", &[1, 1, 5], ramp(5)).node(
                "AveragePool",
                &["x"],
                &["y"],
                vec![
                    ("kernel_shape", ints(&[2])),
                    ("strides", ints(&[2])),
                    ("ceil_mode", Attr::Int(1)),
                    ("count_include_pad", Attr::Int(include_pad)),
                ],
            );
            assert_close(&flat(&g.run1("y")), &[0.5, 2.5, 4.0]);
        }
    }

    #[test]
    fn three_dimensional_pooling() {
        let mut g = G::new();
        g.input("x", &[1, 1, 2, 2, 2], ramp(8)).node(
            "AveragePool",
            &["x"],
            &["y"],
            vec![("kernel_shape", ints(&[2, 2, 2]))],
        );
        let y = g.run1("y");
        assert_eq!(y.dims(), [1, 1, 1, 1, 1]);
        assert_close(&flat(&y), &[3.5]);
    }

    #[test]
    fn global_pools() {
        let mut g = G::new();
        g.input(
            "x",
            &[1, 2, 2, 2],
            vec![1.0, 2.0, 3.0, 6.0, -1.0, -2.0, -3.0, -4.0],
        )
        .node("GlobalAveragePool", &["x"], &["a"], vec![])
        .node("GlobalMaxPool", &["x"], &["m"], vec![]);
        let out = g.run(&["a", "m"]).unwrap();
        assert_eq!(out[0].dims(), [1, 2, 1, 1]);
        assert_close(&flat(&out[0]), &[3.0, -2.5]);
        assert_close(&flat(&out[1]), &[6.0, -1.0]);
    }
}
