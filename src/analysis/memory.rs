//! Inference peak by tensor liveness along the topological order.
//!
//! A tensor lives from the step its producer runs to the step of its last consumer; graph inputs are
//! live from the start, graph outputs to the end. While node `i` runs, its inputs and its outputs
//! are live together, so the peak is the largest sum, over steps, of the tensors live at that step.
//! Weights (initializers, `Constant` outputs) are stored state and are reported separately; they
//! are not part of this figure. In-place execution and buffer reuse by a runtime's allocator are not
//! modelled: this is the peak of a plain executor that frees each tensor after its last use.

use super::fact::Fact;
use super::ops::{def_of, Outputs};
use crate::ir::{Graph, NodeId, ValueId};

/// The inference peak and where it happens.
#[derive(Clone, Debug, PartialEq)]
pub struct Peak {
    /// Bytes of activations (and graph inputs) live at the peak.
    pub bytes: u64,
    /// The node running at the peak (`None` when the peak is the graph inputs alone).
    pub at: Option<NodeId>,
    /// The tensors live at the peak, largest first.
    pub live: Vec<(ValueId, u64)>,
    /// Bytes live while each node runs (its inputs and outputs included), in topological order:
    /// the liveness curve whose maximum is `bytes` (unless the graph inputs alone are the peak).
    pub curve: Vec<u64>,
}

/// Why a numeric peak could not be computed.
#[derive(Clone, Debug, PartialEq)]
pub enum PeakError {
    /// Some live tensors have symbolic sizes (these symbols need `--dim`).
    Symbolic(Vec<String>),
}

fn outputs_of(node: &crate::ir::Node) -> Outputs {
    def_of(node).map_or(Outputs::Computed, |d| d.outputs)
}

/// Values computed from stored tensors alone (initializers, `Constant`s, and nodes reading only
/// those, such as the weight `Transpose`s some exporters emit). Runtimes fold them when the model
/// loads, so they are weights, not activations.
pub fn static_values(graph: &Graph) -> Vec<bool> {
    foldable(graph, false, &|_| false)
}

/// Values a runtime folds once the input shapes are known: the static ones, and shape arithmetic
/// (values that read the inputs only through `Shape` and `Size`: a YOLO anchor grid, position ids,
/// masks of a fixed size), which onnxruntime folds at load. They are not activations.
pub fn folded_values(graph: &Graph) -> Vec<bool> {
    foldable(graph, true, &|_| false)
}

/// [`folded_values`] of a subgraph: `outer(name)` says whether a value it captures from an
/// enclosing graph is folded there (an initializer of the main graph, the weight slices an LSTM
/// export computes from one), so that what the subgraph computes from it folds too.
pub fn folded_values_within(graph: &Graph, outer: &dyn Fn(&str) -> bool) -> Vec<bool> {
    foldable(graph, true, outer)
}

/// Values computed from the `seeds` (graph inputs by name, or values captured from an enclosing
/// graph for which `seeds` holds), following every node forward (a node holding a subgraph that
/// captures one of them too).
pub fn reached_from(graph: &Graph, seeds: &dyn Fn(&str) -> bool) -> Vec<bool> {
    let mut r: Vec<bool> = graph
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| (v.outer() || graph.inputs.contains(&i)) && seeds(graph.name(v.name)))
        .collect();
    for node in &graph.nodes {
        let mut hit = node.inputs().values().any(|v| r[v]);
        if !hit {
            for (_, sub) in node.attrs.subgraphs() {
                for_each_capture(sub, &mut |name| {
                    hit |= graph
                        .value_by_name(name)
                        .map_or_else(|| seeds(name), |v| r[v]);
                });
            }
        }
        if hit {
            for v in node.outputs().values() {
                r[v] = true;
            }
        }
    }
    r
}

fn foldable(graph: &Graph, shapes_known: bool, outer: &dyn Fn(&str) -> bool) -> Vec<bool> {
    let mut st: Vec<bool> = graph
        .values
        .iter()
        .map(|v| v.init.is_some() || (v.outer() && outer(graph.name(v.name))))
        .collect();
    for node in &graph.nodes {
        let captures = node.attrs.subgraphs().next().is_some();
        let derived = match outputs_of(node) {
            Outputs::Held => true,
            Outputs::Random => false,
            Outputs::ShapeOnly if shapes_known => true,
            Outputs::ShapeOnly | Outputs::Computed => {
                node.inputs().values().next().is_some()
                    && node.inputs().values().all(|v| st[v])
                    && !captures
            }
        };
        if derived {
            for v in node.outputs().values() {
                st[v] = true;
            }
        }
    }
    st
}

/// Which values are runtime tensors: graph inputs and node outputs that are not static.
pub fn is_activation(graph: &Graph, is_static: &[bool], v: ValueId) -> bool {
    let val = &graph.values[v];
    if is_static[v] {
        return false;
    }
    val.producer().is_some() || graph.inputs.contains(&v)
}

/// [`last_use`] of a value no node reads.
const UNUSED: u32 = u32::MAX;

/// Last step at which each value is used (captures by subgraphs count as uses by the holding node),
/// [`UNUSED`] for none; a graph output's is the step after the last. In 32 bits, like a value's
/// producer: a graph decoded from a protobuf of at most 2 GiB has far fewer than 2^32 - 1 nodes.
fn last_use(graph: &Graph) -> Vec<u32> {
    let step = |n: usize| u32::try_from(n).unwrap_or(UNUSED - 1);
    let mut last: Vec<u32> = vec![UNUSED; graph.values.len()];
    for (n, node) in graph.nodes.iter().enumerate() {
        for v in node.inputs().values() {
            last[v] = step(n);
        }
        for (_, sub) in node.attrs.subgraphs() {
            for_each_capture(sub, &mut |name| {
                if let Some(v) = graph.value_by_name(name) {
                    last[v] = if last[v] == UNUSED {
                        step(n)
                    } else {
                        last[v].max(step(n))
                    };
                }
            });
        }
    }
    for &v in &graph.outputs {
        last[v] = step(graph.nodes.len());
    }
    last
}

fn for_each_capture(g: &Graph, f: &mut impl FnMut(&str)) {
    for v in g.values.iter().filter(|v| v.outer()) {
        f(g.name(v.name));
    }
    for node in &g.nodes {
        for (_, sub) in node.attrs.subgraphs() {
            for_each_capture(sub, f);
        }
    }
}

/// Computes the inference peak. Values of unknown size are left out (the caller reports them);
/// symbolic sizes make the peak unknowable until bound.
pub fn inference_peak(graph: &Graph, facts: &[Fact]) -> Result<Peak, PeakError> {
    let is_static = folded_values(graph);
    // each activation's size in 8 bytes, in one pass (a `Dim` a value beside them was 2.7 MiB on a
    // graph of 100,000 nodes); symbolic sizes are collected to refuse the peak
    let mut symbolic = std::collections::BTreeSet::new();
    let size: Vec<u64> = (0..graph.values.len())
        .map(|v| {
            let Some(d) = is_activation(graph, &is_static, v)
                .then(|| facts[v].bytes())
                .flatten()
            else {
                return 0;
            };
            if !d.is_known() {
                symbolic.extend(d.bindable_symbols().iter().map(|s| s.to_string()));
            }
            d.as_u64().unwrap_or(0)
        })
        .collect();
    drop(is_static);
    if !symbolic.is_empty() {
        return Err(PeakError::Symbolic(symbolic.into_iter().collect()));
    }
    let bytes = |v: ValueId| size[v];
    let last = last_use(graph);
    // the values whose last use is step i, in value order
    let n_steps = graph.nodes.len();
    let step_freeing = |v: ValueId| match (graph.values[v].producer(), last[v]) {
        (_, l) if l != UNUSED && (l as usize) < n_steps => Some(l as usize),
        (Some((p, _)), UNUSED) => Some(p),
        _ => None,
    };
    // value ids in 32 bits, like a value's producer
    let frees = crate::util::lists::Lists::build(n_steps, || {
        (0..graph.values.len()).filter_map(|v| step_freeing(v).map(|i| (i, v as u32)))
    });
    drop(last);
    // Replays the schedule up to `stop` (all of it when `None`); returns the peak and its step, and
    // leaves `alive` as it was at step `stop`.
    let replay = |stop: Option<usize>,
                  alive: &mut Vec<bool>,
                  curve: &mut Vec<u64>|
     -> (u128, Option<NodeId>) {
        let mut live: u128 = 0;
        for &v in &graph.inputs {
            if bytes(v) > 0 && !alive[v] {
                alive[v] = true;
                live += bytes(v) as u128;
            }
        }
        let mut best = (live, None);
        for (n, node) in graph.nodes.iter().enumerate() {
            for v in node.outputs().values() {
                if !alive[v] && bytes(v) > 0 {
                    alive[v] = true;
                    live += bytes(v) as u128;
                }
            }
            curve.push(u64::try_from(live).unwrap_or(u64::MAX));
            if live > best.0 {
                best = (live, Some(n));
            }
            if stop == Some(n) {
                break;
            }
            for &v in frees.get(n) {
                let v = v as usize;
                if alive[v] {
                    alive[v] = false;
                    live -= bytes(v) as u128;
                }
            }
        }
        best
    };
    let mut alive = vec![false; graph.values.len()];
    let mut curve = Vec::with_capacity(graph.nodes.len());
    let best = replay(None, &mut alive, &mut curve);
    let mut alive = vec![false; graph.values.len()];
    match best.1 {
        Some(_) => {
            replay(best.1, &mut alive, &mut Vec::new());
        }
        None => graph.inputs.iter().for_each(|&v| alive[v] = bytes(v) > 0),
    }
    let best_live: Vec<ValueId> = (0..graph.values.len()).filter(|&v| alive[v]).collect();
    let mut live_list: Vec<(ValueId, u64)> = best_live.into_iter().map(|v| (v, bytes(v))).collect();
    live_list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(Peak {
        bytes: u64::try_from(best.0).unwrap_or(u64::MAX),
        at: best.1,
        live: live_list,
        curve,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> crate::ir::Model {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/models/branches")
            .join(format!("{name}.onnx"));
        crate::load::onnx::load(&path).unwrap()
    }

    #[test]
    fn a_branch_slicing_an_outer_weight_folds_it() {
        let m = fixture("if_sample_rate");
        let node = m.graph.nodes.iter().find(|n| n.op_type == "If").unwrap();
        let (_, then) = node
            .attrs
            .subgraphs()
            .find(|(a, _)| *a == "then_branch")
            .unwrap();
        let slice = then.value_by_name("W16").unwrap();
        let out = then.value_by_name("y16").unwrap();
        // alone, the captured weight is unknown: the slice looks like a runtime tensor
        assert!(!folded_values(then)[slice]);
        // with the main graph's initializers, it folds; the MatMul on the input does not
        let parent = folded_values(&m.graph);
        let outer = |name: &str| m.graph.value_by_name(name).is_some_and(|v| parent[v]);
        let within = folded_values_within(then, &outer);
        assert!(within[slice]);
        assert!(!within[out]);
    }

    #[test]
    fn values_computed_from_a_seed_are_reached_across_subgraphs() {
        let m = fixture("if_sample_rate");
        let g = &m.graph;
        let r = reached_from(g, &|name| name == "sr");
        assert!(r[g.value_by_name("is16k").unwrap()]);
        // the If's output is computed in branches that capture nothing from sr, but the If reads it
        assert!(r[g.value_by_name("y").unwrap()]);
        let none = reached_from(g, &|_| false);
        assert!(none.iter().all(|&b| !b));
    }
}
