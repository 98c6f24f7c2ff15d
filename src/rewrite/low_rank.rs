//! Low-rank factorisation of a linear layer: a Gemm or MatMul with a stored 2-D weight becomes two,
//! from a truncated SVD of the weight as the layer applies it (`B'`, K x N):
//! `B' ≈ (U √S)(√S Vᵀ)`. The first layer maps K → r without bias, the second r → N with the
//! original's bias, `alpha` and `beta`. A Gemm that stores its weight transposed (`transB = 1`, as
//! PyTorch's Linear exports) gets both new weights transposed too.

use super::{
    attr_float, attr_int, new_tensor, node_proto, read_f64, BuildResult, Cx, Factored, RankChoice,
    RewriteKind,
};
use crate::analysis::ops::Op;
use crate::ir::{Dim, NodeId};
use crate::util::svd::{self, Par, Want};

/// Plans the factorisation of linear layer `n`; `proposed` is the finding's rank, used unless the
/// command line chose another.
pub fn plan(cx: &mut Cx, n: NodeId, proposed: u64) -> BuildResult {
    let node = &cx.graph().nodes[n];
    let (is_gemm, trans_a, trans_b, alpha, beta) = match &cx.ops[n] {
        Op::Gemm(g) => (true, g.trans_a, g.trans_b, g.alpha, g.beta),
        Op::MatMul => (false, false, false, 1.0, 1.0),
        _ => {
            return Err(format!(
                "{} is not a Gemm or MatMul",
                cx.graph().label(node)
            ))
        }
    };
    let layer = cx.layer(node)?;
    let (a, wt, y) = (layer.x, layer.tensor, layer.y);
    if wt.dims.len() != 2 {
        return Err(format!("the weight has rank {}, not 2", wt.dims.len()));
    }
    let (rows, cols) = (wt.dims[0] as usize, wt.dims[1] as usize);
    // B' as applied: K x N
    let (kk, nn) = if trans_b { (cols, rows) } else { (rows, cols) };
    let wv = read_f64(wt)?;
    if wv.len() != rows * cols {
        return Err("the weight's data does not match its shape".into());
    }
    let b = faer::Mat::<f64>::from_fn(kk, nn, |i, j| {
        if trans_b {
            wv[j * cols + i]
        } else {
            wv[i * cols + j]
        }
    });
    let full = kk.min(nn);
    let (k64, n64) = (kk as u64, nn as u64);
    let want = match cx.options.rank {
        RankChoice::Fixed(r) => Want::Rank((r as usize).clamp(1, full)),
        RankChoice::Full => Want::Rank(full),
        RankChoice::Energy(e) => Want::Energy(e),
        RankChoice::Default => Want::Rank(usize::try_from(proposed).unwrap_or(full).clamp(1, full)),
    };
    let f = svd::truncated(&b, want, cx.options.seed, Par::rayon(0))?;
    let r = f.rank();
    // B1 = U √S (K x r), B2 = √S Vᵀ (r x N), stored transposed under transB
    let roots: Vec<f64> = f.s.iter().map(|s| s.max(0.0).sqrt()).collect();
    let (b1, b1_dims): (Vec<f64>, Vec<u64>) = if trans_b {
        (
            (0..r)
                .flat_map(|j| (0..kk).map(move |i| (i, j)))
                .map(|(i, j)| f.u[(i, j)] * roots[j])
                .collect(),
            vec![r as u64, k64],
        )
    } else {
        (
            (0..kk)
                .flat_map(|i| (0..r).map(move |j| (i, j)))
                .map(|(i, j)| f.u[(i, j)] * roots[j])
                .collect(),
            vec![k64, r as u64],
        )
    };
    let (b2, b2_dims): (Vec<f64>, Vec<u64>) = if trans_b {
        (
            (0..nn)
                .flat_map(|o| (0..r).map(move |j| (o, j)))
                .map(|(o, j)| f.v[(o, j)] * roots[j])
                .collect(),
            vec![n64, r as u64],
        )
    } else {
        (
            (0..r)
                .flat_map(|j| (0..nn).map(move |o| (j, o)))
                .map(|(j, o)| f.v[(o, j)] * roots[j])
                .collect(),
            vec![r as u64, n64],
        )
    };

    let base = cx.base_name(node, y);
    let w_name = layer.weight.clone();
    let w1 = cx.names.fresh(&format!("{w_name}.low_rank_0"));
    let w2 = cx.names.fresh(&format!("{w_name}.low_rank_1"));
    let mid = cx.names.fresh(&format!("{}/low_rank", cx.name(y)));
    let n1 = cx.names.fresh(&format!("{base}/low_rank_0"));
    let n2 = cx.names.fresh(&format!("{base}/low_rank_1"));
    let op = if is_gemm { "Gemm" } else { "MatMul" };
    let (attrs1, attrs2) = if is_gemm {
        let tb = i64::from(trans_b);
        (
            vec![
                attr_int("transA", i64::from(trans_a)),
                attr_int("transB", tb),
            ],
            vec![
                attr_float("alpha", alpha),
                attr_float("beta", beta),
                attr_int("transB", tb),
            ],
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let mut in2 = vec![mid.clone(), w2.clone()];
    if let Some(c) = node.input(2) {
        in2.push(cx.name(c).to_string());
    }
    let nodes = vec![
        node_proto(
            n1,
            op,
            vec![cx.name(a).to_string(), w1.clone()],
            mid.clone(),
            attrs1,
        ),
        node_proto(n2, op, in2, cx.name(y).to_string(), attrs2),
    ];
    let dtype = cx.facts[y].dtype.unwrap_or(wt.dtype);
    let values = cx
        .shape(y)
        .map(|s| {
            let mut s = s.to_vec();
            if let Some(last) = s.last_mut() {
                *last = Dim::known(r as i64);
            }
            vec![(mid.clone(), dtype, s)]
        })
        .unwrap_or_default();
    let tensors = vec![
        new_tensor(w1, wt, b1_dims, &b1)?,
        new_tensor(w2, wt, b2_dims, &b2)?,
    ];
    Ok(Factored {
        kind: RewriteKind::LowRank,
        node: n,
        input: a,
        output: y,
        rank: r,
        full,
        sides: (k64, n64),
        weight: w_name,
        tensors,
        nodes,
        values,
        energy_kept: f.kept_energy(),
    }
    .planned(cx))
}
