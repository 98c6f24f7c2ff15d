//! Global-average-pooling head: `Flatten → Gemm` over a `C x H x W` map becomes
//! `GlobalAveragePool → Flatten → Gemm` (C → N) with `W'[n, c] = Σ_{h,w} W[n, c, h, w]` and the same
//! bias. It computes the original function exactly when the map is spatially constant (then the
//! pooled value times the summed weight equals the full product), and something else otherwise: a
//! lossy rewrite, to fine-tune; the verification measures how far it moves the output.

use super::{
    attr_int, float_weight, gemm_attrs, new_tensor, node_proto, Applied, BuildResult, Cx, Planned,
    RewriteKind, Safety,
};
use crate::analysis::ops::Op;
use crate::ir::{Dim, NodeId};

/// Plans the GAP head of the finding: `layer` reads `flatten`'s output through `through` (nearest
/// the layer first).
pub fn plan(cx: &mut Cx, n: NodeId, f: NodeId, through: &[NodeId]) -> BuildResult {
    let g = cx.graph();
    let node = &g.nodes[n];
    let gemm = match &cx.ops[n] {
        Op::Gemm(gm) if gm.trans_a => {
            return Err("the Gemm transposes its input (transA = 1)".into())
        }
        Op::Gemm(gm) => Some(gm),
        Op::MatMul => None,
        _ => return Err(format!("{} is not a Gemm or MatMul", g.label(node))),
    };
    let layer = cx.layer(node)?;
    let (a, wt, y) = (layer.x, layer.tensor, layer.y);
    if wt.dims.len() != 2 {
        return Err(format!("the weight has rank {}, not 2", wt.dims.len()));
    }
    // the chain the finding saw: flatten -> through (reversed) -> layer
    let flat = &g.nodes[f];
    if !matches!(cx.ops[f], Op::Flatten(_) | Op::Reshape(_)) {
        return Err(format!("{} is not a Flatten or Reshape", g.label(flat)));
    }
    let flat_v = flat.output(0).ok_or("the Flatten has no output")?;
    let mut v = a;
    for &t in through {
        let tn = &g.nodes[t];
        if tn.output(0) != Some(v) || tn.input(0).is_none() {
            return Err(format!("{} does not feed the layer", g.label(tn)));
        }
        v = tn.input(0).ok_or("a pass-through node has no input")?;
    }
    if v != flat_v {
        return Err("the Flatten does not feed the layer".into());
    }
    let x = flat.input(0).ok_or("the Flatten has no input")?;
    let map = cx
        .shape(x)
        .ok_or("the shape of the feature map is unknown")?
        .to_vec();
    let flat_shape = cx.shape(flat_v).ok_or("the flattened shape is unknown")?;
    if map.len() < 3 || flat_shape.len() != 2 {
        return Err("the flatten does not turn an N x C x spatial map into N x (C·spatial)".into());
    }
    if flat_shape[0] != map[0] {
        return Err("the flatten does not keep the batch axis".into());
    }
    let c = map[1].as_u64().ok_or("the channel count is not a number")? as usize;
    let spatial = Dim::product(&map[2..])
        .and_then(|d| d.as_u64())
        .ok_or("the spatial size is not a number")? as usize;
    let trans_b = gemm.is_some_and(|gm| gm.trans_b);
    let (kw, nout) = if trans_b {
        (wt.dims[1] as usize, wt.dims[0] as usize)
    } else {
        (wt.dims[0] as usize, wt.dims[1] as usize)
    };
    if Some(kw) != c.checked_mul(spatial) {
        return Err(format!(
            "the weight reads {kw} features, not C·H·W = {c}·{spatial}"
        ));
    }
    float_weight(wt)?;
    let summed = spatial_sums(wt, trans_b, c, spatial, nout)
        .ok_or_else(|| format!("the data of weight '{}' could not be read", wt.name))?;
    let dims = if trans_b {
        vec![nout as u64, c as u64]
    } else {
        vec![c as u64, nout as u64]
    };

    // the Flatten (and pass-through nodes) go too when nothing else reads them
    let mut removed = vec![n];
    let chain: Vec<NodeId> = through.iter().copied().chain([f]).collect();
    let mut inside = vec![n];
    for &m in &chain {
        let only_chain = g.nodes[m].outputs().values().all(|v| {
            !g.outputs.contains(&v) && g.consumers(v).iter().all(|(u, _)| inside.contains(&u))
        });
        if !only_chain {
            break;
        }
        inside.push(m);
        removed.push(m);
    }
    // a removed Reshape's shape: its initializer is released, its Constant node goes with it
    let mut released = vec![layer.weight.clone()];
    for &m in removed.clone().iter().filter(|&&m| m != n) {
        for v in g.nodes[m].inputs().iter().skip(1).flatten() {
            if g.values[v].init.is_some() {
                released.push(g.value_name(v).to_string());
            } else if let Some((p, _)) = g.values[v].producer() {
                let sole = g.consumers(v).iter().all(|(u, _)| u == m);
                if matches!(cx.ops[p], Op::Constant(_)) && sole && !g.outputs.contains(&v) {
                    removed.push(p);
                }
            }
        }
    }
    removed.sort_unstable();

    let base = cx.base_name(node, y);
    let w_name = layer.weight.clone();
    let new_w = cx.names.fresh(&format!("{w_name}.gap"));
    let pooled = cx.names.fresh(&format!("{}/gap", cx.name(x)));
    let pooled_flat = cx.names.fresh(&format!("{}/gap_flat", cx.name(x)));
    let gap_node = cx.names.fresh(&format!("{base}/GlobalAveragePool"));
    let flat_node = cx.names.fresh(&format!("{base}/Flatten"));
    let fc_node = cx.names.fresh(&format!("{base}/head"));
    // Casts on the way keep their place, after the new Flatten (Identity and Dropout are no-ops)
    let casts: Vec<(String, crate::ir::DType)> = through
        .iter()
        .rev()
        .filter_map(|&t| match &cx.ops[t] {
            Op::Cast(c) => Some((g.name(g.nodes[t].name).to_string(), c.to)),
            _ => None,
        })
        .collect();
    let mut fc_in = pooled_flat.clone();
    let mut cast_nodes = Vec::new();
    let mut cast_values = Vec::new();
    for (name, to) in &casts {
        let out = cx.names.fresh(&format!("{}/gap_cast", cx.name(x)));
        let node_name = cx.names.fresh(&format!("{name}/gap"));
        cast_nodes.push(node_proto(
            node_name,
            "Cast",
            vec![fc_in.clone()],
            out.clone(),
            vec![attr_int("to", i64::from(to.to_onnx()))],
        ));
        cast_values.push((out.clone(), *to, map[..2].to_vec()));
        fc_in = out;
    }
    let mut fc_inputs = vec![fc_in, new_w.clone()];
    if let Some(b) = node.input(2) {
        fc_inputs.push(cx.name(b).to_string());
    }
    let mut nodes = vec![
        node_proto(
            gap_node,
            "GlobalAveragePool",
            vec![cx.name(x).to_string()],
            pooled.clone(),
            Vec::new(),
        ),
        node_proto(
            flat_node,
            "Flatten",
            vec![pooled.clone()],
            pooled_flat.clone(),
            vec![attr_int("axis", 1)],
        ),
    ];
    nodes.extend(cast_nodes);
    nodes.push(node_proto(
        fc_node,
        if gemm.is_some() { "Gemm" } else { "MatMul" },
        fc_inputs,
        cx.name(y).to_string(),
        gemm.map(gemm_attrs).unwrap_or_default(),
    ));
    let dtype = cx.facts[x].dtype.unwrap_or(wt.dtype);
    let mut pooled_shape = map[..2].to_vec();
    pooled_shape.extend(std::iter::repeat_n(Dim::known(1), map.len() - 2));
    let mut values = vec![
        (pooled, dtype, pooled_shape),
        (pooled_flat, dtype, map[..2].to_vec()),
    ];
    values.extend(cast_values);
    Ok(Planned {
        record: Applied {
            rule: String::new(),
            kind: RewriteKind::GapHead,
            node: g.name(node.name).to_string(),
            safety: Safety::Lossy,
            rank: None,
            input: cx.name(x).to_string(),
            output: cx.name(y).to_string(),
            replaced: Vec::new(),
            added: Vec::new(),
        },
        removed,
        tensors: vec![new_tensor(new_w, wt, dims, &summed)?],
        nodes,
        values,
        released,
        energy_kept: None,
        note: Some(format!(
            "exact only when the {} feature map is spatially constant; fine-tune after rewriting",
            crate::ir::shape_to_string(&map[1..])
        )),
    })
}

/// The head's weight summed over each channel's spatial positions: `[nout, c]` from a `[nout,
/// c·spatial]` weight (`trans_b`), `[c, nout]` from a `[c·spatial, nout]` one. The flattened
/// feature index is `c·spatial + s` (channel-major); each sum adds its terms in order of `s`, from
/// 0. The weight is read a chunk at a time (a VGG-16 head's is 411 MB); `None` when it cannot be.
fn spatial_sums(
    wt: &crate::ir::Tensor,
    trans_b: bool,
    c: usize,
    spatial: usize,
    nout: usize,
) -> Option<Vec<f64>> {
    if Some(wt.numel()?)
        != (c as u64)
            .checked_mul(spatial as u64)?
            .checked_mul(nout as u64)
    {
        return None;
    }
    let mut summed = vec![0.0; c * nout];
    wt.for_each_float_chunk(|start, vals| {
        let (mut idx, mut rest) = (start, vals);
        while !rest.is_empty() {
            let take = if trans_b {
                // a run of one (o, ch) is one sum, at o·c + ch = idx / spatial
                let take = (spatial - idx % spatial).min(rest.len());
                let acc = &mut summed[idx / spatial];
                rest[..take].iter().for_each(|&v| *acc += v);
                take
            } else {
                // a run of one row k adds to row k / spatial of the sums
                let (k, o) = (idx / nout, idx % nout);
                let take = (nout - o).min(rest.len());
                let row = &mut summed[(k / spatial) * nout + o..][..take];
                row.iter_mut()
                    .zip(&rest[..take])
                    .for_each(|(a, &v)| *a += v);
                take
            };
            idx += take;
            rest = &rest[take..];
        }
    })?;
    Some(summed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{DType, Tensor, TensorData};

    #[test]
    fn spatial_sums_match_the_definition_across_read_chunks() {
        // 3 outputs x (5 channels x 20,000 positions) f32: 1.2 MB, more than one read chunk, and
        // chunks that end inside a sum
        let (nout, c, spatial) = (3usize, 5usize, 20_000usize);
        let w: Vec<f32> = (0..nout * c * spatial)
            .map(|i| ((i * 7919) % 1013) as f32 * 0.001 - 0.5)
            .collect();
        let tensor = |dims: Vec<u64>| Tensor {
            name: "w".into(),
            dtype: DType::F32,
            dims: dims.into(),
            data: TensorData::Raw(
                w.iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>()
                    .into(),
            ),
        };
        let k = c * spatial;
        // [nout, c·spatial]
        let got =
            spatial_sums(&tensor(vec![nout as u64, k as u64]), true, c, spatial, nout).unwrap();
        for o in 0..nout {
            for ch in 0..c {
                let want = (0..spatial).fold(0.0, |a, s| a + w[o * k + ch * spatial + s] as f64);
                assert_eq!(got[o * c + ch].to_bits(), want.to_bits(), "[{o}, {ch}]");
            }
        }
        // [c·spatial, nout]: the same values read as the transposed layout
        let got = spatial_sums(
            &tensor(vec![k as u64, nout as u64]),
            false,
            c,
            spatial,
            nout,
        )
        .unwrap();
        for ch in 0..c {
            for o in 0..nout {
                let want =
                    (0..spatial).fold(0.0, |a, s| a + w[(ch * spatial + s) * nout + o] as f64);
                assert_eq!(got[ch * nout + o].to_bits(), want.to_bits(), "[{ch}, {o}]");
            }
        }
        // a weight whose size is not c·spatial·nout is refused
        assert!(spatial_sums(
            &tensor(vec![nout as u64, k as u64]),
            true,
            c + 1,
            spatial,
            nout
        )
        .is_none());
    }
}
