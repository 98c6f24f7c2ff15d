//! Depthwise-separable decomposition of a standard convolution.
//!
//! For each input channel `c`, the kernel slice `M_c = W[:, c, :]` (C_out x k, k the kernel area) is
//! factored by SVD, `M_c = U S Vᵀ`, keeping rank `r`. The depthwise convolution (group C_in, C_in·r
//! outputs; output `c·r + j` reads input channel `c`) gets the filters `√s_j V[:, j]`, the pointwise
//! 1x1 convolution the weights `P[o, c·r + j] = √s_j U[o, j]` and the original bias. Summing over
//! `j` and `c` gives back `Σ_c M_c ⋆ x_c`, the original convolution, exactly when
//! `r = min(C_out, k)` (Guo et al., "Network Decoupling", 2018); `r = 1` is the MobileNet block.

use super::{
    attr_int, attr_ints, new_tensor, node_proto, read_f64, window_attrs, BuildResult, Cx, Factored,
    RankChoice, RewriteKind,
};
use crate::analysis::ops::Op;
use crate::ir::{Dim, NodeId};
use crate::util::svd::{self, Par, Want};
use rayon::prelude::*;

/// Plans the decomposition of convolution `n`; `proposed` is the finding's rank, used unless the
/// command line chose another.
pub fn plan(cx: &mut Cx, n: NodeId, proposed: u64) -> BuildResult {
    let node = &cx.graph().nodes[n];
    let Op::Conv(conv) = &cx.ops[n] else {
        return Err(format!("{} is not a Conv", cx.graph().label(node)));
    };
    if conv.group != 1 {
        return Err("the convolution is already grouped".into());
    }
    let layer = cx.layer(node)?;
    let (x, wt, y) = (layer.x, layer.tensor, layer.y);
    if wt.dims.len() < 3 {
        return Err(format!("the weight has rank {}", wt.dims.len()));
    }
    let co = usize::try_from(wt.dims[0]).map_err(|_| "weight too large")?;
    let ci = usize::try_from(wt.dims[1]).map_err(|_| "weight too large")?;
    let k: usize = wt.dims[2..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(usize::try_from(d).ok()?))
        .ok_or("weight too large")?;
    if co == 0 || ci == 0 || k == 0 {
        return Err("the weight is empty".into());
    }
    let w_vals = read_f64(wt)?;
    if w_vals.len() != co * ci * k {
        return Err("the weight's data does not match its shape".into());
    }
    let full = co.min(k);

    // one SVD per input channel (small: C_out x k), all singular values kept for the rank choice;
    // the channels in parallel, each decomposition on one thread
    let factors: Vec<svd::Factors> = (0..ci)
        .into_par_iter()
        .map(|c| {
            let m = faer::Mat::<f64>::from_fn(co, k, |o, t| w_vals[(o * ci + c) * k + t]);
            svd::truncated(&m, Want::Rank(full), 0, Par::Seq)
        })
        .collect::<Result<_, _>>()?;
    let total: f64 = factors.iter().map(|f| f.total_energy).sum();
    let energy_at = |r: usize| -> f64 {
        if total <= 0.0 {
            return 1.0;
        }
        factors
            .iter()
            .map(|f| f.s.iter().take(r).map(|s| s * s).sum::<f64>())
            .sum::<f64>()
            / total
    };
    let r = match cx.options.rank {
        RankChoice::Fixed(r) => (r as usize).clamp(1, full),
        RankChoice::Full => full,
        RankChoice::Energy(e) => (1..=full)
            .find(|&r| energy_at(r) >= e * (1.0 - 1e-12))
            .unwrap_or(full),
        RankChoice::Default => usize::try_from(proposed).unwrap_or(full).clamp(1, full),
    };
    let kept = energy_at(r);

    // depthwise filters [ci·r, 1, kernel...] and pointwise weights [co, ci·r, 1...]
    let cr = ci * r;
    let mut dw = vec![0.0; cr * k];
    let mut pw = vec![0.0; co * cr];
    for (c, f) in factors.iter().enumerate() {
        for j in 0..r.min(f.rank()) {
            let root = f.s[j].max(0.0).sqrt();
            for t in 0..k {
                dw[(c * r + j) * k + t] = root * f.v[(t, j)];
            }
            for o in 0..co {
                pw[o * cr + c * r + j] = root * f.u[(o, j)];
            }
        }
    }

    let base = cx.base_name(node, y);
    let w_name = layer.weight.clone();
    let dw_w = cx.names.fresh(&format!("{w_name}.depthwise"));
    let pw_w = cx.names.fresh(&format!("{w_name}.pointwise"));
    let dw_out = cx.names.fresh(&format!("{}/depthwise", cx.name(y)));
    let dw_node = cx.names.fresh(&format!("{base}/depthwise"));
    let pw_node = cx.names.fresh(&format!("{base}/pointwise"));
    let spatial = wt.dims.len() - 2;
    let mut dw_dims = vec![cr as u64, 1];
    dw_dims.extend_from_slice(&wt.dims[2..]);
    let mut pw_dims = vec![co as u64, cr as u64];
    pw_dims.extend(std::iter::repeat_n(1, spatial));

    let mut dw_attrs = window_attrs(&conv.window);
    dw_attrs.push(attr_int("group", ci as i64));
    let pw_attrs = vec![
        attr_ints("kernel_shape", vec![1; spatial]),
        attr_ints("strides", vec![1; spatial]),
    ];
    let mut pw_inputs = vec![dw_out.clone(), pw_w.clone()];
    if let Some(b) = node.input(2) {
        pw_inputs.push(cx.name(b).to_string());
    }
    let nodes = vec![
        node_proto(
            dw_node,
            "Conv",
            vec![cx.name(x).to_string(), dw_w.clone()],
            dw_out.clone(),
            dw_attrs,
        ),
        node_proto(pw_node, "Conv", pw_inputs, cx.name(y).to_string(), pw_attrs),
    ];
    // the depthwise output: the conv output's shape with C_in·r channels
    let dtype = cx.facts[y].dtype.unwrap_or(wt.dtype);
    let values = cx
        .shape(y)
        .map(|s| {
            let mut s = s.to_vec();
            if s.len() > 1 {
                s[1] = Dim::known(cr as i64);
            }
            vec![(dw_out.clone(), dtype, s)]
        })
        .unwrap_or_default();

    let tensors = vec![
        new_tensor(dw_w, wt, dw_dims, &dw)?,
        new_tensor(pw_w, wt, pw_dims, &pw)?,
    ];
    Ok(Factored {
        kind: RewriteKind::DepthwiseSeparable,
        node: n,
        input: x,
        output: y,
        rank: r,
        full,
        sides: (co as u64, k as u64),
        weight: w_name,
        tensors,
        nodes,
        values,
        energy_kept: kept,
    }
    .planned(cx))
}
