//! Shape inference over the IR: binds the user's dimensions at the graph inputs, then walks the
//! nodes in topological order computing each output's facts from the op registry. Values the file
//! declares (`value_info`) fill in what inference cannot know and are cross-checked where it can.

use std::collections::{BTreeMap, BTreeSet};

use super::fact::Fact;
use super::ops::{self, InferError, Op, OpCx};
use crate::error::{Error, Result};
use crate::ir::{shape_to_string, Dim, Graph, Model, NodeId, TypeDecl, ValueId};

/// The dimensions the user binds.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    /// `--batch N`: the first axis of the graph inputs.
    pub batch: Option<u64>,
    /// `--dim NAME=V`: any other named dimension.
    pub dims: BTreeMap<String, i64>,
    /// `--input NAME=1x3x224x224`: every axis of one input (whatever its dims are called).
    pub inputs: BTreeMap<String, Vec<u64>>,
}

/// The outcome of shape inference on the main graph.
#[derive(Clone, Debug)]
pub struct Inference {
    /// Every node's op with its typed attributes, parsed once.
    pub ops: Vec<Op>,
    /// Facts per value of the main graph.
    pub facts: Vec<Fact>,
    /// MACs per node: zero for ops that are not counted, `None` when not computable (unknown
    /// shapes, opaque ops).
    pub macs: Vec<Option<Dim>>,
    /// Nodes whose op nnlint does not know.
    pub opaque: Vec<NodeId>,
    /// Nodes whose outputs could not be inferred because they are inconsistent, with why.
    pub invalid: Vec<(NodeId, String)>,
    /// Declared and inferred shapes that disagree.
    pub mismatches: Vec<String>,
    /// The batch size used (bound by `--batch`, defaulted to 1, or fixed by the model).
    pub batch: Option<u64>,
    /// Every symbol bound, with its value and where the value came from.
    pub bound: BTreeMap<String, i64>,
    /// Notes about binding (defaults taken, fixed batch overridden).
    pub notes: Vec<String>,
}

impl Inference {
    /// Symbols left unbound in the shapes of values (sorted, without repeats).
    pub fn unbound_symbols(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .facts
            .iter()
            .filter_map(|f| f.shape.as_ref())
            .flatten()
            .flat_map(|d| d.symbols())
            .map(|s| s.to_string())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// An error when sizes still depend on input dimensions left unbound (training and fit need
    /// numbers). Data-dependent sizes (a `NonZero` count) cannot be bound and do not count.
    pub fn require_bound(&self, model: &Model, what: &str) -> Result<()> {
        let (inputs, _) = input_symbols(&model.graph);
        let unbound: Vec<String> = self
            .unbound_symbols()
            .into_iter()
            .filter(|s| inputs.contains(s))
            .collect();
        if unbound.is_empty() {
            return Ok(());
        }
        Err(Error::Usage(format!(
            "{}: {what} needs every dimension bound; pass {}",
            model.path.display(),
            unbound
                .iter()
                .map(|s| format!("--dim {s}=V"))
                .collect::<Vec<_>>()
                .join(" ")
        )))
    }
}

/// Symbols of the graph inputs, and which of them sit on the batch axis.
fn input_symbols(graph: &Graph) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut all = BTreeSet::new();
    let mut batch = BTreeSet::new();
    for &v in &graph.inputs {
        let Some(shape) = graph.values[v]
            .declared
            .as_ref()
            .and_then(|d| d.shape.as_ref())
        else {
            continue;
        };
        for (axis, d) in shape.iter().enumerate() {
            for s in d.symbols() {
                if axis == 0 {
                    batch.insert(s.to_string());
                }
                all.insert(s.to_string());
            }
        }
    }
    (all, batch)
}

/// What the inputs' symbols are bound to, and how.
struct Resolved {
    bound: BTreeMap<String, i64>,
    /// Per input: the shape `--input` gives it.
    shapes: BTreeMap<ValueId, Vec<Dim>>,
    batch: Option<u64>,
    notes: Vec<String>,
    /// The inputs have a fixed batch that `--batch` overrides.
    override_fixed: bool,
}

/// Where a symbol's value came from, for conflict messages.
struct Source(BTreeMap<String, (i64, String)>);

impl Source {
    /// Binds `name` to `v` (said by `by`); two different values for one symbol is an error naming
    /// both.
    fn bind(&mut self, name: &str, v: i64, by: String) -> Result<()> {
        match self.0.get(name) {
            Some((old, prev)) if *old != v => Err(Error::Usage(format!(
                "{by} conflicts with {prev}: dimension '{name}' cannot be both {old} and {v}"
            ))),
            Some(_) => Ok(()),
            None => {
                self.0.insert(name.to_string(), (v, by));
                Ok(())
            }
        }
    }
}

/// Decides what every input symbol is bound to.
fn resolve_bindings(model: &Model, b: &Bindings, keep_batch: bool) -> Result<Resolved> {
    let graph = &model.graph;
    let path = model.path.display();
    let (all, batch_syms) = input_symbols(graph);
    let mut src = Source(BTreeMap::new());
    let mut shapes = BTreeMap::new();
    // --input: every axis of one input
    for (name, given) in &b.inputs {
        let Some(&v) = graph
            .inputs
            .iter()
            .find(|&&v| graph.values[v].name == *name)
        else {
            let names: Vec<&str> = graph
                .inputs
                .iter()
                .map(|&v| graph.values[v].name.as_str())
                .collect();
            return Err(Error::Usage(format!(
                "{path}: --input {name}: the model has no input named '{name}' (inputs: {})",
                names.join(", ")
            )));
        };
        let spelled = given
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join("x");
        let by = format!("--input {name}={spelled}");
        let declared = graph.values[v]
            .declared
            .as_ref()
            .and_then(|d| d.shape.as_ref());
        if let Some(decl) = declared {
            if decl.len() != given.len() {
                return Err(Error::Usage(format!(
                    "{path}: {by}: the input has rank {} ({}), not {}",
                    decl.len(),
                    shape_to_string(decl),
                    given.len()
                )));
            }
            for (axis, (d, &g)) in decl.iter().zip(given).enumerate() {
                let g = i64::try_from(g)
                    .map_err(|_| Error::Usage(format!("{by}: {g} is too large")))?;
                match (d.as_i64(), d.symbols().as_slice()) {
                    (Some(k), _) if k != g => {
                        return Err(Error::Usage(format!(
                            "{path}: {by}: axis {axis} of '{name}' is fixed at {k}, not {g}"
                        )))
                    }
                    (None, [sym]) if *d == Dim::sym(sym) => {
                        src.bind(sym, g, by.clone())?;
                    }
                    _ => {}
                }
            }
        }
        let dims = given
            .iter()
            .map(|&g| i64::try_from(g).map(Dim::known))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|_| Error::Usage(format!("{by}: a dimension is too large")))?;
        shapes.insert(v, dims);
    }
    for (name, &v) in &b.dims {
        if !all.contains(name) {
            let known: Vec<&str> = all.iter().map(String::as_str).collect();
            return Err(Error::Usage(format!(
                "{path}: --dim {name}={v}: the model's inputs have no dimension named '{name}' (symbolic dimensions: {})",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            )));
        }
        if v < 0 {
            return Err(Error::Usage(format!(
                "--dim {name}={v}: a dimension cannot be negative"
            )));
        }
        src.bind(name, v, format!("--dim {name}={v}"))?;
    }
    let mut notes = Vec::new();
    let mut override_fixed = false;
    let batch = match b.batch {
        Some(n) => {
            let n_i =
                i64::try_from(n).map_err(|_| Error::Usage(format!("--batch {n} is too large")))?;
            for s in &batch_syms {
                src.bind(s, n_i, format!("--batch {n}"))?;
            }
            if batch_syms.is_empty() {
                // every input has a fixed first axis: rebind it if it is the same everywhere
                let fixed: BTreeSet<i64> = graph
                    .inputs
                    .iter()
                    .filter_map(|&v| {
                        graph.values[v]
                            .declared
                            .as_ref()?
                            .shape
                            .as_ref()?
                            .first()?
                            .as_i64()
                    })
                    .collect();
                match fixed.iter().next() {
                    Some(&f) if fixed.len() == 1 && f as u64 != n => {
                        notes.push(format!(
                            "the model's inputs have a fixed batch of {f}; analysed at batch {n} as asked (reshapes with a hard-coded batch may not follow)"
                        ));
                        override_fixed = true;
                    }
                    _ => {}
                }
            }
            Some(n)
        }
        None if keep_batch => None,
        None => {
            let unbound: Vec<&String> = batch_syms
                .iter()
                .filter(|s| !src.0.contains_key(*s))
                .collect();
            for s in &unbound {
                src.bind(s, 1, "the default batch".into())?;
            }
            if !unbound.is_empty() {
                notes.push(format!(
                    "batch dimension {} bound to 1 (use --batch N)",
                    unbound
                        .iter()
                        .map(|s| format!("'{s}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            // the batch the first axis is bound to (by --dim or --input), else a fixed one
            let first: BTreeSet<u64> = graph
                .inputs
                .iter()
                .filter_map(|&v| {
                    if let Some(s) = shapes.get(&v) {
                        return s.first()?.as_u64();
                    }
                    let d = graph.values[v]
                        .declared
                        .as_ref()?
                        .shape
                        .as_ref()?
                        .first()?
                        .clone();
                    match d.as_u64() {
                        Some(k) => Some(k),
                        None => {
                            let s = d.symbols();
                            let sym = s.first()?;
                            src.0.get(&**sym).and_then(|(v, _)| u64::try_from(*v).ok())
                        }
                    }
                })
                .collect();
            match first.len() {
                1 => first.into_iter().next(),
                _ => None,
            }
        }
    };
    let bound = src.0.into_iter().map(|(k, (v, _))| (k, v)).collect();
    Ok(Resolved {
        bound,
        shapes,
        batch,
        notes,
        override_fixed,
    })
}

fn substitute(decl: &TypeDecl, bound: &BTreeMap<String, i64>) -> Fact {
    Fact {
        dtype: decl.dtype,
        shape: decl.shape.as_ref().and_then(|s| {
            s.iter()
                .map(|d| d.substitute(bound))
                .collect::<Option<Vec<_>>>()
        }),
        value: None,
    }
}

/// Merges an inferred fact with what the file declares: known dims win, a disagreement between two
/// known dims is reported.
fn merge(inferred: Fact, declared: Option<Fact>, name: &str, mismatches: &mut Vec<String>) -> Fact {
    let Some(decl) = declared else {
        return inferred;
    };
    let dtype = inferred.dtype.or(decl.dtype);
    let shape = match (inferred.shape, decl.shape) {
        (None, d) => d,
        (Some(i), None) => Some(i),
        (Some(i), Some(d)) if i.len() != d.len() => {
            mismatches.push(format!(
                "value '{name}': the file declares {} but inference gives {}",
                shape_to_string(&d),
                shape_to_string(&i)
            ));
            Some(i)
        }
        (Some(i), Some(d)) => {
            let mut out = Vec::with_capacity(i.len());
            let mut differs = false;
            for (a, b) in i.iter().zip(&d) {
                match (a.as_i64(), b.as_i64()) {
                    (Some(x), Some(y)) if x != y => {
                        differs = true;
                        out.push(a.clone());
                    }
                    (None, Some(_)) => out.push(b.clone()),
                    _ => out.push(a.clone()),
                }
            }
            if differs {
                mismatches.push(format!(
                    "value '{name}': the file declares {} but inference gives {}",
                    shape_to_string(&d),
                    shape_to_string(&i)
                ));
            }
            Some(out)
        }
    };
    Fact {
        dtype,
        shape,
        value: inferred.value,
    }
}

/// Runs shape inference on the model's main graph.
pub fn infer(model: &Model, bindings: &Bindings) -> Result<Inference> {
    infer_with(model, bindings, false)
}

/// Like [`infer`], but a symbolic batch dimension stays symbolic when `--batch` is not given (the
/// shapes a rewrite declares for its new values keep the model's `batch`).
pub fn infer_symbolic(model: &Model, bindings: &Bindings) -> Result<Inference> {
    infer_with(model, bindings, true)
}

fn infer_with(model: &Model, bindings: &Bindings, keep_batch: bool) -> Result<Inference> {
    let graph = &model.graph;
    let Resolved {
        bound,
        shapes,
        batch,
        notes,
        override_fixed,
    } = resolve_bindings(model, bindings, keep_batch)?;
    let opset = model.opset();
    let mut facts: Vec<Fact> = vec![Fact::unknown(); graph.values.len()];
    for (id, t) in graph.initializers() {
        facts[id] = ops::tensor_fact(t);
    }
    for &v in &graph.inputs {
        if let Some(given) = shapes.get(&v) {
            let dtype = graph.values[v].declared.as_ref().and_then(|d| d.dtype);
            facts[v] = Fact::new(dtype, given.clone());
            continue;
        }
        if let Some(decl) = &graph.values[v].declared {
            let mut f = substitute(decl, &bound);
            if override_fixed {
                if let (Some(shape), Some(n)) = (f.shape.as_mut(), batch) {
                    if let Some(first) = shape.first_mut() {
                        *first = Dim::known(n as i64);
                    }
                }
            }
            facts[v] = f;
        }
    }
    let op_list = ops::parse_graph(graph, opset);
    let mut macs = vec![None; graph.nodes.len()];
    let mut opaque = Vec::new();
    let mut invalid = Vec::new();
    let mut mismatches = Vec::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        let inputs: Vec<Option<&Fact>> = node.inputs.iter().map(|v| v.map(|v| &facts[v])).collect();
        let op = &op_list[n];
        let cx = OpCx {
            node,
            op,
            inputs,
            opset,
        };
        let (outs, cost) = match (op, op.def()) {
            (Op::Malformed(m), _) => {
                invalid.push((n, m.clone()));
                (Vec::new(), None)
            }
            (_, Some(def)) => match (def.infer)(&cx) {
                Ok(outs) => {
                    let cost = (def.macs)(&cx, &outs);
                    (outs, cost)
                }
                Err(InferError::Unknown) => (Vec::new(), None),
                Err(InferError::Invalid(m)) => {
                    invalid.push((n, m));
                    (Vec::new(), None)
                }
            },
            (_, None) => {
                opaque.push(n);
                (Vec::new(), None)
            }
        };
        drop(cx);
        macs[n] = cost;
        let mut outs = outs.into_iter();
        for v in node.outputs.iter() {
            let inferred = outs.next().unwrap_or_default();
            let Some(v) = *v else { continue };
            let declared = graph.values[v]
                .declared
                .as_ref()
                .map(|d| substitute(d, &bound));
            facts[v] = merge(inferred, declared, &graph.values[v].name, &mut mismatches);
        }
    }
    Ok(Inference {
        ops: op_list,
        facts,
        macs,
        opaque,
        invalid,
        mismatches,
        batch,
        bound,
        notes,
    })
}
