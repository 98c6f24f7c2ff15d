//! Global-average-pooling head: `Flatten → Gemm` over a `C x H x W` map becomes
//! `GlobalAveragePool → Flatten → Gemm` (C → N) with `W'[n, c] = Σ_{h,w} W[n, c, h, w]` and the same
//! bias. It computes the original function exactly when the map is spatially constant (then the
//! pooled value times the summed weight equals the full product), and something else otherwise: a
//! lossy rewrite, to fine-tune; the verification measures how far it moves the output.

use super::{
    attr_int, copy_attrs, new_tensor, node_proto, read_f64, BuildResult, Cx, Kind, Planned, Record,
    Safety,
};
use crate::ir::{Dim, NodeId, ValueId};

/// Follows pass-through ops (Identity, Dropout) back to the value that feeds them, with the nodes
/// passed.
fn through_passthrough(cx: &Cx, mut v: ValueId) -> (ValueId, Vec<NodeId>) {
    let g = cx.graph();
    let mut passed = Vec::new();
    while let Some((n, _)) = g.values[v].producer {
        let node = &g.nodes[n];
        match node.op_type.as_str() {
            "Identity" | "Dropout" => match node.input(0) {
                Some(x) => {
                    passed.push(n);
                    v = x;
                }
                None => break,
            },
            _ => break,
        }
    }
    (v, passed)
}

pub fn plan(cx: &mut Cx, n: NodeId) -> BuildResult {
    let g = cx.graph();
    let node = &g.nodes[n];
    let is_gemm = node.op_type == "Gemm";
    if !is_gemm && node.op_type != "MatMul" {
        return Err(format!("{} is not a Gemm or MatMul", node.label()));
    }
    if is_gemm && node.attrs.int_or("transA", 0)? != 0 {
        return Err("the Gemm transposes its input (transA = 1)".into());
    }
    let (a, wt, y) = cx.layer(node)?;
    if wt.dims.len() != 2 {
        return Err(format!("the weight has rank {}, not 2", wt.dims.len()));
    }
    let (flat_v, passed) = through_passthrough(cx, a);
    let Some((f, _)) = g.values[flat_v].producer else {
        return Err("the layer's input is not a flattened feature map".into());
    };
    let flat = &g.nodes[f];
    if !matches!(flat.op_type.as_str(), "Flatten" | "Reshape") {
        return Err(format!(
            "the layer's input comes from {}, not Flatten or Reshape",
            flat.label()
        ));
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
    let trans_b = is_gemm && node.attrs.int_or("transB", 0)? != 0;
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
    let wv = read_f64(wt)?;
    if wv.len() != kw * nout {
        return Err("the weight's data does not match its shape".into());
    }
    // the flattened feature index is c·spatial + s (channel-major)
    let mut summed = vec![0.0; c * nout];
    for o in 0..nout {
        for ch in 0..c {
            let mut acc = 0.0;
            for s in 0..spatial {
                let k = ch * spatial + s;
                acc += if trans_b {
                    wv[o * kw + k]
                } else {
                    wv[k * nout + o]
                };
            }
            if trans_b {
                summed[o * c + ch] = acc;
            } else {
                summed[ch * nout + o] = acc;
            }
        }
    }
    let dims = if trans_b {
        vec![nout as u64, c as u64]
    } else {
        vec![c as u64, nout as u64]
    };

    // the Flatten (and pass-through nodes) go too when nothing else reads them
    let mut removed = vec![n];
    let chain: Vec<NodeId> = passed.iter().copied().chain([f]).collect();
    let mut inside = vec![n];
    for &m in &chain {
        let only_chain = g.nodes[m].outputs.iter().flatten().all(|&v| {
            !g.outputs.contains(&v)
                && g.values[v]
                    .consumers
                    .iter()
                    .all(|(u, _)| inside.contains(u))
        });
        if !only_chain {
            break;
        }
        inside.push(m);
        removed.push(m);
    }
    // a removed Reshape's shape: its initializer is released, its Constant node goes with it
    let mut released = vec![wt.name.clone()];
    for &m in removed.clone().iter().filter(|&&m| m != n) {
        for v in g.nodes[m].inputs.iter().skip(1).flatten() {
            if g.values[*v].init.is_some() {
                released.push(g.values[*v].name.clone());
            } else if let Some((p, _)) = g.values[*v].producer {
                let sole = g.values[*v].consumers.iter().all(|(u, _)| *u == m);
                if g.nodes[p].op_type == "Constant" && sole && !g.outputs.contains(v) {
                    removed.push(p);
                }
            }
        }
    }
    removed.sort_unstable();

    let base = cx.base_name(node, y);
    let w_name = wt.name.clone();
    let new_w = cx.names.fresh(&format!("{w_name}.gap"));
    let pooled = cx.names.fresh(&format!("{}/gap", cx.name(x)));
    let pooled_flat = cx.names.fresh(&format!("{}/gap_flat", cx.name(x)));
    let gap_node = cx.names.fresh(&format!("{base}/GlobalAveragePool"));
    let flat_node = cx.names.fresh(&format!("{base}/Flatten"));
    let fc_node = cx.names.fresh(&format!("{base}/head"));
    let mut fc_inputs = vec![pooled_flat.clone(), new_w.clone()];
    if let Some(b) = node.input(2) {
        fc_inputs.push(cx.name(b).to_string());
    }
    let nodes = vec![
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
        node_proto(
            fc_node,
            &node.op_type,
            fc_inputs,
            cx.name(y).to_string(),
            copy_attrs(node, &[]),
        ),
    ];
    let dtype = cx.facts[x].dtype.unwrap_or(wt.dtype);
    let mut pooled_shape = map[..2].to_vec();
    pooled_shape.extend(std::iter::repeat_n(Dim::known(1), map.len() - 2));
    let values = vec![
        (pooled, dtype, pooled_shape),
        (pooled_flat, dtype, map[..2].to_vec()),
    ];
    Ok(Planned {
        record: Record {
            rule: String::new(),
            kind: Kind::GapHead,
            node: node.name.clone(),
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
