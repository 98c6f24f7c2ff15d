//! The executor of the checker, an f64 interpreter for a subset of ONNX on candle's CPU backend
//! for numeric verification of rewrites: the original and the rewritten graph run on the same
//! seeded inputs and their outputs are compared.
//!
//! The executor parses every node's op once ([`crate::analysis::ops::parse_graph`]), orders and
//! frees values (liveness), reads feeds and initializers (cached as f64) and hands each node to its
//! kernel ([`super::kernels`]). Every value is an f64 candle tensor, integer ones included; float
//! `Cast`s keep f64, so the checker measures a rewrite's own error, not the model's storage
//! precision.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::rc::Rc;

use candle_core::{Device, Tensor as CTensor};

use super::kernels::{self, first_line, to_ints, Cx};
use crate::analysis::fact::{Fact, Konst, MAX_FOLD_ELEMS};
use crate::analysis::ops::{parse_graph, Op, OpCx};
use crate::ir::{DType, Dim, Graph, NodeId, Tensor, ValueId, Values};

/// The most elements one tensor a kernel makes may have (tiles, pads, ranges, constants): 2^28
/// f64 values are 2 GiB.
pub const MAX_ELEMENTS: usize = 1 << 28;

/// The most dimensions a tensor of the checker may have: candle's CPU kernels index at most 8 (and
/// panic past them).
pub const MAX_RANK: usize = 8;

/// The most subgraph runs (`If` branches, `Loop` and `Scan` iterations, nested ones included) one
/// evaluation may make: a hostile trip count cannot keep the checker running.
pub const MAX_SUBGRAPH_RUNS: usize = 1 << 16;

/// What a subgraph sees of the graphs around it: the values it captures, by name, with their
/// element types, and the budget of subgraph runs shared by the whole evaluation.
#[derive(Clone, Default)]
pub(crate) struct Scope {
    pub values: HashMap<String, (CTensor, Option<DType>)>,
    pub runs: Rc<Cell<usize>>,
}

impl Scope {
    /// Counts one subgraph run against [`MAX_SUBGRAPH_RUNS`].
    pub fn spend_run(&self) -> Result<(), String> {
        let n = self.runs.get() + 1;
        if n > MAX_SUBGRAPH_RUNS {
            return Err(format!(
                "more than {MAX_SUBGRAPH_RUNS} subgraph runs (If branches, Loop and Scan iterations)"
            ));
        }
        self.runs.set(n);
        Ok(())
    }
}

/// The names a graph reads that it does not define (its captures of enclosing graphs), its nested
/// subgraphs' included.
pub(crate) fn free_names(g: &Graph) -> BTreeSet<String> {
    let defined = |v: ValueId| {
        let value = &g.values[v];
        value.producer().is_some() || value.init.is_some() || g.inputs.contains(&v)
    };
    let mut out = BTreeSet::new();
    let read = g
        .nodes
        .iter()
        .flat_map(|n| n.inputs().values())
        .chain(g.outputs.iter().copied());
    for v in read {
        if v < g.values.len() && !defined(v) {
            out.insert(g.value_name(v).to_string());
        }
    }
    for node in &g.nodes {
        for (_, sub) in node.attrs.subgraphs() {
            for name in free_names(sub) {
                if !g.value_by_name(&name).is_some_and(defined) {
                    out.insert(name);
                }
            }
        }
    }
    out
}

/// Why a node could not be evaluated.
#[derive(Debug, Clone)]
pub enum ExecError {
    /// The op, or one of its attribute values, is outside what this interpreter (or candle) can run.
    Unsupported {
        node: String,
        op: String,
        reason: String,
    },
    /// A supported op failed (shape mismatch, unreadable weights...). `node` is empty when the
    /// error is about a wanted value that nothing provides.
    Failed { node: String, message: String },
}

impl fmt::Display for ExecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExecError::Unsupported { node, op, reason } => {
                write!(f, "node '{node}' ({op}): {reason}")
            }
            ExecError::Failed { node, message } if node.is_empty() => f.write_str(message),
            ExecError::Failed { node, message } => write!(f, "node '{node}': {message}"),
        }
    }
}

impl std::error::Error for ExecError {}

/// Reads a stored tensor (any float or integer dtype, raw, typed or external data) into an f64
/// candle tensor of its shape.
pub fn to_candle(t: &Tensor) -> Result<CTensor, String> {
    use DType::*;
    if !matches!(
        t.dtype,
        F64 | F32 | F16 | BF16 | I64 | I32 | I16 | I8 | U64 | U32 | U16 | U8 | Bool
    ) {
        return Err(format!(
            "tensor '{}': {} values cannot be read as numbers",
            t.name, t.dtype
        ));
    }
    let shape = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| format!("tensor '{}': a dimension does not fit in memory", t.name))?;
    let numel = t
        .numel()
        .ok_or_else(|| format!("tensor '{}': the element count overflows", t.name))?;
    let data: Vec<f64> = match t.read_values(numel) {
        Some(Values::Float(v)) => v,
        Some(Values::Int(v)) => v.into_iter().map(|x| x as f64).collect(),
        None => {
            let why = match &t.data {
                crate::ir::TensorData::External(ext) => format!(
                    "its external data could not be read from {}",
                    ext.path.display()
                ),
                _ => format!("its stored data does not hold {numel} {} values", t.dtype),
            };
            return Err(format!("tensor '{}': {why}", t.name));
        }
    };
    CTensor::from_vec(data, shape, &Device::Cpu).map_err(|e| format!("tensor '{}': {e}", t.name))
}

/// Caches initializers converted to f64 across calls on one graph (for the executor's life: about
/// 1.1 GB for VGG-16's weights).
pub struct Executor<'g> {
    graph: &'g Graph,
    /// Every node's typed op, parsed once.
    ops: Vec<Op>,
    opset: i64,
    cache: HashMap<ValueId, CTensor>,
    /// Most intermediate values held at once during the last `eval`.
    peak_live: usize,
}

impl<'g> Executor<'g> {
    /// An executor for `graph`, whose ops are parsed with the model's `opset` (the default domain's
    /// version, [`crate::ir::Model::opset`]).
    pub fn new(graph: &'g Graph, opset: i64) -> Self {
        Executor {
            graph,
            ops: parse_graph(graph, opset),
            opset,
            cache: HashMap::new(),
            peak_live: 0,
        }
    }

    /// The nodes among `nodes` the checker cannot run, with the reason (op unknown, attributes
    /// invalid or unsupported). Checks only what it can know statically.
    pub fn unsupported(&self, nodes: &[NodeId]) -> Vec<(NodeId, String)> {
        nodes
            .iter()
            .filter_map(|&id| match (self.graph.nodes.get(id), self.ops.get(id)) {
                (Some(node), Some(op)) => kernels::static_check(node, op)
                    .err()
                    .or_else(|| self.unsupported_inside(node))
                    .map(|why| (id, why)),
                _ => Some((id, format!("there is no node #{id}"))),
            })
            .collect()
    }

    /// The first node of a control-flow node's subgraphs (nested ones included) the checker
    /// cannot run, in words.
    fn unsupported_inside(&self, node: &crate::ir::Node) -> Option<String> {
        node.attrs.subgraphs().find_map(|(attr, sub)| {
            let inner = Executor::new(sub, self.opset);
            let all: Vec<NodeId> = (0..sub.nodes.len()).collect();
            inner.unsupported(&all).into_iter().next().map(|(id, why)| {
                let n = &sub.nodes[id];
                format!(
                    "in '{attr}', node '{}' ({}): {why}",
                    sub.name(n.name),
                    n.op_type
                )
            })
        })
    }

    /// Evaluates `nodes` (ids into graph.nodes, in the given order, which is topological) and
    /// returns the tensors of `wanted`, in order. Values that are not produced by `nodes` come from
    /// `feeds`, else from initializers (graph.values[v].init), else it is an error naming the value.
    /// Intermediates no longer needed by later nodes or `wanted` are dropped as evaluation goes.
    pub fn eval(
        &mut self,
        nodes: &[NodeId],
        feeds: &HashMap<ValueId, CTensor>,
        wanted: &[ValueId],
    ) -> Result<Vec<CTensor>, ExecError> {
        let scope = Scope::default();
        self.eval_in(nodes, feeds, HashMap::new(), wanted, &scope)
            .map(|outs| outs.into_iter().map(|(t, _)| t).collect())
    }

    /// Evaluates every node of the graph (a subgraph) with its inputs fed, in order (with their
    /// element types where known: an input the body does not type takes the one that flows in),
    /// and its captures read from `scope`; returns its outputs with their element types where
    /// known.
    pub(crate) fn run_graph(
        &mut self,
        inputs: Vec<(CTensor, Option<DType>)>,
        scope: &Scope,
    ) -> Result<Vec<(CTensor, Option<DType>)>, ExecError> {
        let graph = self.graph;
        if inputs.len() != graph.inputs.len() {
            return Err(ExecError::Failed {
                node: String::new(),
                message: format!(
                    "subgraph '{}' has {} inputs, {} given",
                    graph.name,
                    graph.inputs.len(),
                    inputs.len()
                ),
            });
        }
        let mut feeds = HashMap::new();
        let mut dtypes = HashMap::new();
        for (&v, (t, d)) in graph.inputs.iter().zip(inputs) {
            let declared = graph.values.get(v).and_then(|v| v.declared.as_ref()?.dtype);
            if let Some(d) = declared.or(d) {
                dtypes.insert(v, d);
            }
            feeds.insert(v, t);
        }
        let nodes: Vec<NodeId> = (0..graph.nodes.len()).collect();
        let wanted = graph.outputs.clone();
        self.eval_in(&nodes, &feeds, dtypes, &wanted, scope)
    }

    fn eval_in(
        &mut self,
        nodes: &[NodeId],
        feeds: &HashMap<ValueId, CTensor>,
        feed_dtypes: HashMap<ValueId, DType>,
        wanted: &[ValueId],
        scope: &Scope,
    ) -> Result<Vec<(CTensor, Option<DType>)>, ExecError> {
        let (graph, ops, cache, opset) = (self.graph, &self.ops, &mut self.cache, self.opset);
        let names: HashMap<&str, ValueId> = graph
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| (graph.name(v.name), i))
            .collect();
        // what each control-flow node's subgraphs read of this graph (or of the ones around it)
        let mut captures: HashMap<usize, BTreeSet<String>> = HashMap::new();
        let mut producer_pos: HashMap<ValueId, usize> = HashMap::new();
        let mut last_use: HashMap<ValueId, usize> = HashMap::new();
        let mut steps = Vec::with_capacity(nodes.len());
        for (pos, &id) in nodes.iter().enumerate() {
            let (Some(node), Some(op)) = (graph.nodes.get(id), ops.get(id)) else {
                return Err(ExecError::Failed {
                    node: format!("#{id}"),
                    message: format!("there is no node #{id}"),
                });
            };
            for v in node.inputs().values() {
                last_use.insert(v, pos);
            }
            if node.attrs.subgraphs().next().is_some() {
                let mut free = BTreeSet::new();
                for (_, sub) in node.attrs.subgraphs() {
                    free.extend(free_names(sub));
                }
                for name in &free {
                    if let Some(&v) = names.get(name.as_str()) {
                        last_use.insert(v, pos);
                    }
                }
                captures.insert(pos, free);
            }
            for v in node.outputs().values() {
                producer_pos.insert(v, pos);
            }
            steps.push((node, op));
        }
        let wanted_set: HashSet<ValueId> = wanted.iter().copied().collect();
        let mut env: HashMap<ValueId, CTensor> = HashMap::new();
        // element types, where known: what a value holds beyond its f64 numbers
        let mut dtypes: HashMap<ValueId, DType> = feed_dtypes;
        self.peak_live = 0;
        for (pos, &(node, op)) in steps.iter().enumerate() {
            kernels::static_check(node, op).map_err(|reason| match op {
                Op::Malformed(_) => ExecError::Failed {
                    node: graph.name(node.name).to_string(),
                    message: reason,
                },
                _ => ExecError::Unsupported {
                    node: graph.name(node.name).to_string(),
                    op: node.op_type.to_string(),
                    reason,
                },
            })?;
            let failed = |message| ExecError::Failed {
                node: graph.name(node.name).to_string(),
                message,
            };
            let mut inputs = Vec::with_capacity(node.inputs().len());
            for v in node.inputs() {
                inputs.push(match v {
                    None => None,
                    Some(v) => Some(
                        lookup(graph, cache, v, &env, feeds, &producer_pos, scope)
                            .map_err(failed)?,
                    ),
                });
            }
            let dtype_of = |v: ValueId| {
                dtypes
                    .get(&v)
                    .copied()
                    .or_else(|| source_dtype(graph, v, scope))
            };
            let in_dtypes: Vec<Option<DType>> =
                node.inputs().iter().map(|v| v.and_then(dtype_of)).collect();
            let inner = match captures.get(&pos) {
                None => None,
                Some(free) => {
                    let mut values = HashMap::new();
                    for name in free {
                        let found = match names.get(name.as_str()) {
                            Some(&v) => Some((
                                lookup(graph, cache, v, &env, feeds, &producer_pos, scope)
                                    .map_err(failed)?,
                                dtype_of(v),
                            )),
                            None => scope.values.get(name).cloned(),
                        };
                        // a name nothing defines fails where the subgraph reads it
                        if let Some(found) = found {
                            values.insert(name.clone(), found);
                        }
                    }
                    Some(Scope {
                        values,
                        runs: scope.runs.clone(),
                    })
                }
            };
            if let Some(t) = inputs.iter().flatten().find(|t| t.rank() > MAX_RANK) {
                return Err(ExecError::Unsupported {
                    node: graph.name(node.name).to_string(),
                    op: node.op_type.to_string(),
                    reason: format!(
                        "an input has {} dimensions: the checker handles at most {MAX_RANK}",
                        t.rank()
                    ),
                });
            }
            let cx = Cx {
                node,
                name: graph.name(node.name),
                op,
                inputs,
                dtypes: in_dtypes,
                opset,
                scope: inner.as_ref().unwrap_or(scope),
                out_dtypes: RefCell::new(None),
            };
            let outs = kernels::run(&cx)?;
            let out_dtypes = match cx.out_dtypes.take() {
                Some(d) => d,
                None => output_dtypes(&cx, opset, outs.len()),
            };
            drop(cx);
            for (v, d) in node.outputs().iter().zip(out_dtypes) {
                if let (Some(v), Some(d)) = (v, d) {
                    dtypes.insert(v, d);
                }
            }
            for (slot, v) in node.outputs().iter().enumerate() {
                let Some(v) = v else { continue };
                let Some(t) = outs.get(slot) else {
                    return Err(ExecError::Unsupported {
                        node: graph.name(node.name).to_string(),
                        op: node.op_type.to_string(),
                        reason: format!(
                            "output {slot} ('{}') is not computed by the interpreter",
                            graph.values.get(v).map_or("?", |v| graph.name(v.name))
                        ),
                    });
                };
                // a view (Expand) costs nothing until the next kernel materialises it
                // (candle's own count would overflow on a hostile Expand)
                let size = kernels::checked_product(t.dims());
                if t.rank() > MAX_RANK || size.is_none_or(|n| n > MAX_ELEMENTS) {
                    return Err(ExecError::Unsupported {
                        node: graph.name(node.name).to_string(),
                        op: node.op_type.to_string(),
                        reason: format!(
                            "output {slot} has shape {:?}: the checker handles at most {MAX_RANK} dimensions and {MAX_ELEMENTS} elements",
                            t.dims()
                        ),
                    });
                }
                let used_later = last_use.get(&v).is_some_and(|&p| p > pos);
                if used_later || wanted_set.contains(&v) {
                    env.insert(v, t.clone());
                }
            }
            for v in node.inputs().values() {
                if last_use.get(&v) == Some(&pos) && !wanted_set.contains(&v) {
                    env.remove(&v);
                }
            }
            self.peak_live = self.peak_live.max(env.len());
        }
        wanted
            .iter()
            .map(|&v| {
                let t = lookup(graph, cache, v, &env, feeds, &producer_pos, scope).map_err(
                    |message| ExecError::Failed {
                        node: String::new(),
                        message,
                    },
                )?;
                let d = dtypes
                    .get(&v)
                    .copied()
                    .or_else(|| source_dtype(graph, v, scope));
                Ok((t, d))
            })
            .collect()
    }
}

/// The element type a graph input declares, an initializer stores or a capture has.
fn source_dtype(graph: &Graph, v: ValueId, scope: &Scope) -> Option<DType> {
    let value = graph.values.get(v)?;
    match &value.init {
        Some(t) => Some(t.dtype),
        None => value.declared.as_ref().and_then(|d| d.dtype).or_else(|| {
            scope
                .values
                .get(graph.name(value.name))
                .and_then(|(_, d)| *d)
        }),
    }
}

/// The element types of a node's `n` outputs, from the analysis' inference on the concrete shapes
/// (and the values of small integer inputs: `ConstantOfShape`'s shape, `TopK`'s k): the one
/// description of each op. An output it cannot type takes input 0's type.
fn output_dtypes(cx: &Cx, opset: i64, n: usize) -> Vec<Option<DType>> {
    let facts: Vec<Option<Fact>> = cx
        .inputs
        .iter()
        .zip(&cx.dtypes)
        .map(|(t, &dtype)| {
            let t = t.as_ref()?;
            let shape = t
                .dims()
                .iter()
                .map(|&d| i64::try_from(d).map(Dim::known))
                .collect::<Result<Vec<_>, _>>()
                .ok()?;
            let mut fact = Fact::new(dtype, shape);
            if dtype.is_some_and(DType::is_int) && (t.elem_count() as u64) <= MAX_FOLD_ELEMS {
                fact.value = to_ints(t)
                    .ok()
                    .map(|v| Box::new(Konst::Int(v.into_iter().map(Dim::known).collect())));
            }
            Some(fact)
        })
        .collect();
    let inferred = cx.op.def().and_then(|def| {
        (def.infer)(&OpCx {
            node: cx.node,
            name: cx.name,
            op: cx.op,
            inputs: facts.iter().map(Option::as_ref).collect(),
            opset,
        })
        .ok()
    });
    let first = cx.dtypes.first().copied().flatten();
    (0..n)
        .map(|i| {
            inferred
                .as_ref()
                .and_then(|f| f.get(i))
                .and_then(|f| f.dtype)
                .or(first)
        })
        .collect()
}

/// A value evaluation reads: computed by an earlier node, fed, or an initializer (converted
/// once, then cached).
fn lookup(
    graph: &Graph,
    cache: &mut HashMap<ValueId, CTensor>,
    v: ValueId,
    env: &HashMap<ValueId, CTensor>,
    feeds: &HashMap<ValueId, CTensor>,
    producer_pos: &HashMap<ValueId, usize>,
    scope: &Scope,
) -> Result<CTensor, String> {
    let value = graph
        .values
        .get(v)
        .ok_or_else(|| format!("there is no value #{v}"))?;
    if producer_pos.contains_key(&v) {
        return env.get(&v).cloned().ok_or_else(|| {
            format!(
                "value '{}' is read before it is computed",
                graph.name(value.name)
            )
        });
    }
    if let Some(t) = feeds.get(&v) {
        return if t.dtype() == candle_core::DType::F64 {
            Ok(t.clone())
        } else {
            t.to_dtype(candle_core::DType::F64)
                .map_err(|e| format!("feed '{}': {}", graph.name(value.name), first_line(&e)))
        };
    }
    if let Some(t) = cache.get(&v) {
        return Ok(t.clone());
    }
    if let Some(init) = &value.init {
        let t = to_candle(init)?;
        cache.insert(v, t.clone());
        return Ok(t);
    }
    if let Some((t, _)) = scope.values.get(graph.name(value.name)) {
        return Ok(t.clone());
    }
    Err(format!(
        "value '{}' is not computed by the evaluated nodes, not fed and not an initializer",
        graph.name(value.name)
    ))
}

/// Deterministic random normal f64 tensor: splitmix64 and Box-Muller, so that the numbers do not
/// depend on candle's generator. A shape of more than [`MAX_ELEMENTS`] elements is an error.
pub fn seeded_normal(shape: &[usize], seed: u64) -> Result<CTensor, String> {
    let data = seeded_normal_values(shape, seed)?;
    CTensor::from_vec(data, shape, &Device::Cpu).map_err(|e| first_line(&e))
}

/// The values of [`seeded_normal`], row-major.
pub fn seeded_normal_values(shape: &[usize], seed: u64) -> Result<Vec<f64>, String> {
    let n = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| format!("a random input of shape {shape:?} is too large"))?;
    Ok(crate::util::rng::normals(seed, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::TensorData;
    use crate::verify::kernels::testing::{assert_close, flat, G, OPSET};

    fn tensor(data: Vec<f64>, shape: &[usize]) -> CTensor {
        CTensor::from_vec(data, shape, &Device::Cpu).unwrap()
    }

    #[test]
    fn a_value_nobody_defines_is_named() {
        let mut g = G::new();
        g.input("x", &[1], vec![1.0])
            .node("Relu", &["x"], &["y"], vec![]);
        let graph = g.b.finish().unwrap();
        let y = graph.value_by_name("y").unwrap();
        let err = Executor::new(&graph, OPSET)
            .eval(&[0], &HashMap::new(), &[y])
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "node 'relu_y': value 'x' is not computed by the evaluated nodes, not fed and not an initializer"
        );
    }

    #[test]
    fn tensors_past_candles_limits_are_refused_not_run() {
        // found by the graph_struct fuzz target: a rank-105 tensor (whose shape the analysis
        // could not know) reached candle's Mul, which panics past 8 dimensions
        let mut g = G::new();
        g.input("x", &[1; 9], vec![1.0])
            .node("Relu", &["x"], &["y"], vec![]);
        let err = g.run(&["y"]).unwrap_err().to_string();
        assert!(
            err.contains("9 dimensions") && err.contains("at most 8"),
            "{err}"
        );
        // an Expand is a view: refused as it is made, before a kernel materialises it
        let mut g = G::new();
        g.input("x", &[1], vec![1.0])
            .init_i64("s", vec![1 << 20, 1 << 20])
            .node("Expand", &["x", "s"], &["y"], vec![])
            .node("Relu", &["y"], &["z"], vec![]);
        let err = g.run(&["z"]).unwrap_err().to_string();
        assert!(err.contains("[1048576, 1048576]"), "{err}");
        // ... and one whose element count overflows usize
        let mut g = G::new();
        g.input("x", &[1], vec![1.0])
            .init_i64("s", vec![1 << 40, 1 << 40])
            .node("Expand", &["x", "s"], &["y"], vec![]);
        let err = g.run(&["y"]).unwrap_err().to_string();
        assert!(err.contains("at most"), "{err}");
        // broadcasting [2^20, 1] with [1, 2^20] would allocate 8 TiB
        for op in ["Add", "Mul", "Sum", "Max", "Pow", "Equal"] {
            let mut g = G::new();
            g.input("a", &[1 << 20, 1], vec![0.0; 1 << 20])
                .input("b", &[1, 1 << 20], vec![0.0; 1 << 20])
                .node(op, &["a", "b"], &["y"], vec![]);
            let err = g.run(&["y"]).unwrap_err().to_string();
            assert!(err.contains("too large"), "{op}: {err}");
        }
        let mut g = G::new();
        g.input("c", &[1, 1], vec![1.0])
            .input("a", &[1 << 20, 1], vec![0.0; 1 << 20])
            .input("b", &[1, 1 << 20], vec![0.0; 1 << 20])
            .node("Where", &["c", "a", "b"], &["y"], vec![]);
        let err = g.run(&["y"]).unwrap_err().to_string();
        assert!(err.contains("too large"), "Where: {err}");
    }

    #[test]
    fn intermediates_are_dropped_and_initializers_cached() {
        // a chain of 6 Relus holds at most one intermediate (plus the wanted output)
        let mut g = G::new();
        g.input("x", &[2], vec![-1.0, 1.0])
            .init("w", &[2], vec![2.0, 3.0]);
        let names: Vec<String> = (0..7).map(|i| format!("v{i}")).collect();
        g.node("Mul", &["x", "w"], &[names[0].as_str()], vec![]);
        for i in 0..6 {
            g.node(
                "Relu",
                &[names[i].as_str()],
                &[names[i + 1].as_str()],
                vec![],
            );
        }
        let graph = g.b.finish().unwrap();
        let x = graph.value_by_name("x").unwrap();
        let feeds = HashMap::from([(x, tensor(vec![-1.0, 1.0], &[2]))]);
        let out = graph.value_by_name("v6").unwrap();
        let nodes: Vec<NodeId> = (0..graph.nodes.len()).collect();
        let mut exec = Executor::new(&graph, OPSET);
        let y = exec.eval(&nodes, &feeds, &[out]).unwrap();
        assert_close(&flat(&y[0]), &[0.0, 3.0]);
        assert!(exec.peak_live <= 2, "peak {}", exec.peak_live);
        assert_eq!(exec.cache.len(), 1);
        // a second call evaluates a prefix and reads an intermediate as output
        let v0 = graph.value_by_name("v0").unwrap();
        let y = exec.eval(&[0], &feeds, &[v0]).unwrap();
        assert_close(&flat(&y[0]), &[-2.0, 3.0]);
    }

    #[test]
    fn to_candle_reads_raw_and_typed_data() {
        let raw = |dtype, dims: Vec<u64>, bytes: Vec<u8>| Tensor {
            name: "t".into(),
            dtype,
            dims: dims.into(),
            data: TensorData::Raw(bytes.into()),
        };
        let f32s: Vec<u8> = [1.5f32, -2.0, 0.25, 8.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = to_candle(&raw(DType::F32, vec![2, 2], f32s)).unwrap();
        assert_eq!(t.dims(), [2, 2]);
        assert_eq!(t.dtype(), candle_core::DType::F64);
        assert_eq!(flat(&t), [1.5, -2.0, 0.25, 8.0]);
        // IEEE half 1.0 and -2.0; bfloat16 0.5
        let halves: Vec<u8> = [0x3c00u16, 0xc000]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            flat(&to_candle(&raw(DType::F16, vec![2], halves)).unwrap()),
            [1.0, -2.0]
        );
        let bf: Vec<u8> = 0x3f00u16.to_le_bytes().to_vec();
        assert_eq!(
            flat(&to_candle(&raw(DType::BF16, vec![], bf)).unwrap()),
            [0.5]
        );
        let i8s = raw(DType::I8, vec![3], vec![0xff, 0x7f, 0x80]);
        assert_eq!(flat(&to_candle(&i8s).unwrap()), [-1.0, 127.0, -128.0]);
        let short = raw(DType::I64, vec![2], vec![0; 12]);
        assert!(to_candle(&short)
            .unwrap_err()
            .contains("does not hold 2 int64 values"));
        let fp8 = raw(DType::F8E4M3FN, vec![1], vec![0]);
        assert!(to_candle(&fp8).unwrap_err().contains("float8e4m3fn"));
    }

    #[test]
    fn to_candle_reads_external_data() {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[0u8; 4]).unwrap();
        for v in [3.0f64, -1.0] {
            f.write_all(&v.to_le_bytes()).unwrap();
        }
        f.flush().unwrap();
        let t = Tensor {
            name: "t".into(),
            dtype: DType::F64,
            dims: vec![2].into(),
            data: TensorData::External(crate::ir::ExternalData {
                path: f.path().into(),
                offset: 4,
                length: 16,
            }),
        };
        assert_eq!(flat(&to_candle(&t).unwrap()), [3.0, -1.0]);
    }

    #[test]
    fn seeded_normal_is_reproducible_and_standard() {
        let a = flat(&seeded_normal(&[3, 2], 42).unwrap());
        // the first pair, from an independent Python implementation of splitmix64 + Box-Muller
        assert_close(&a[..2], &[0.414_719_750_431_530_5, 0.652_681_222_151_942_7]);
        assert_eq!(a, flat(&seeded_normal(&[3, 2], 42).unwrap()));
        assert_ne!(a, flat(&seeded_normal(&[3, 2], 43).unwrap()));
        assert_eq!(seeded_normal(&[3], 1).unwrap().dims(), [3]);
        let big = flat(&seeded_normal(&[100_000], 7).unwrap());
        let mean = big.iter().sum::<f64>() / big.len() as f64;
        let var = big.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / big.len() as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }
}
