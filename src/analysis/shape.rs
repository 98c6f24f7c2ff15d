//! Shape inference over the IR: binds the user's dimensions at the graph inputs, then walks the
//! nodes in topological order computing each output's facts from the op registry. Values the file
//! declares (`value_info`) fill in what inference cannot know and are cross-checked where it can.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::fact::{Fact, Konst};
use super::ops::{self, InferError, Op, OpCx};
use crate::error::{Error, Result};
use crate::ir::{shape_to_string, Dim, Graph, Model, Node, NodeId, TypeDecl, ValueId};

/// The dimensions the user binds.
#[derive(Clone, Debug, Default)]
pub struct Bindings {
    /// `--batch N`: the first axis of the graph inputs.
    pub batch: Option<u64>,
    /// `--dim NAME=V`: any other named dimension.
    pub dims: BTreeMap<String, i64>,
    /// `--input NAME=1x3x224x224`: every axis of one input (whatever its dims are called).
    pub inputs: BTreeMap<String, Vec<u64>>,
    /// `--value NAME=V`: the value of a scalar input (a sample rate, a flag), so that the `If`s
    /// whose condition is computed from it are decided.
    pub values: BTreeMap<String, i64>,
}

/// Why an `If` counts the branch it counts.
#[derive(Clone, Debug, PartialEq)]
pub enum Choice {
    /// The condition folds to `value`. `values`: the graph inputs whose given value (`--value`)
    /// it is computed from; `shapes`: those whose shape it reads (`Shape`, `Size`). Both empty:
    /// a constant.
    Condition {
        value: bool,
        values: Vec<String>,
        shapes: Vec<String>,
    },
    /// The condition is not known, but `branch` is the only one that can run with these shapes:
    /// the other cannot (`why`).
    Consistent { branch: String, why: String },
    /// The condition depends on the values of these graph inputs, or on the shapes of these
    /// (dimensions left unbound); both empty: on values nnlint cannot trace, such as a loop's
    /// state. Both branches are reported and each total takes the larger.
    Undecided {
        values: Vec<String>,
        shapes: Vec<String>,
    },
    /// A `Loop` or `Scan` whose trip count is not known: its body is counted once. `values`: the
    /// graph inputs whose values the count (or the loop's condition) is computed from.
    UnknownTrips { values: Vec<String> },
}

/// The outcome of shape inference on the main graph.
#[derive(Clone, Debug)]
pub struct Inference {
    /// Every node's op with its typed attributes, parsed once (shared by the inferences of one
    /// graph at several bindings: [`Prepared`]).
    pub ops: Arc<[Op]>,
    /// The subgraphs of control-flow nodes (`If`, `Loop`, `Scan`), analysed, by node.
    pub branches: BTreeMap<NodeId, Vec<Branch>>,
    /// Why each `If` counts the branch it counts; the `Loop`s and `Scan`s whose trip count is
    /// not known.
    pub choices: BTreeMap<NodeId, Choice>,
    /// Facts per value of the main graph.
    pub facts: Vec<Fact>,
    /// MACs per node: zero for ops that are not counted, `None` when not computable (unknown
    /// shapes, opaque ops).
    pub macs: Vec<Option<Dim>>,
    /// Nodes whose op nnlint does not know, in node order (sorted: searched by bisection).
    pub opaque: Vec<NodeId>,
    /// Nodes whose outputs could not be inferred because they are inconsistent, with why.
    pub invalid: Vec<(NodeId, String)>,
    /// Nodes whose sizes or MACs overflow 64-bit arithmetic at these bindings (of the main graph).
    pub overflow: Vec<NodeId>,
    /// Declared and inferred shapes that disagree.
    pub mismatches: Vec<String>,
    /// The batch size used (bound by `--batch`, defaulted to 1, or fixed by the model).
    pub batch: Option<u64>,
    /// Every symbol bound, with its value and where the value came from.
    pub bound: BTreeMap<String, i64>,
    /// Notes about binding (defaults taken, fixed batch overridden).
    pub notes: Vec<String>,
    /// The scalar inputs' values given with `--value`.
    pub values: BTreeMap<String, i64>,
}

impl Inference {
    /// Whether every node of the graph and of its subgraphs that run could be inferred
    /// consistently (no node whose inputs contradict its attributes).
    pub fn is_consistent(&self) -> bool {
        self.invalid.is_empty()
            && self.branches.values().all(|bs| {
                bs.iter()
                    .filter(|b| b.runs != Some(false))
                    .all(|b| b.inference.is_consistent())
            })
    }

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
        let Some(&v) = graph.inputs.iter().find(|&&v| graph.value_name(v) == *name) else {
            let names: Vec<&str> = graph.inputs.iter().map(|&v| graph.value_name(v)).collect();
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
                .collect::<Option<Box<[_]>>>()
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
            Some(out.into())
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

/// What shape inference computes once per model whatever the bindings: each node's parsed op and
/// each initializer's fact. `fit` infers one graph at many batch sizes (dozens of times per plan
/// search); parsing the ops and reading the initializers again each time was half its cost.
pub struct Prepared {
    ops: Arc<[Op]>,
    initializers: Vec<(ValueId, Fact)>,
}

impl Prepared {
    pub fn new(model: &Model) -> Prepared {
        let graph = &model.graph;
        Prepared {
            ops: ops::parse_graph(graph, model.opset()),
            initializers: {
                // sized first (collected through a filter, the list doubled its way up)
                let mut list = Vec::with_capacity(graph.initializers().count());
                list.extend(
                    graph
                        .initializers()
                        .map(|(id, t)| (id, ops::initializer_fact(t))),
                );
                list
            },
        }
    }
}

/// [`infer`] with what [`Prepared`] holds of this model computed already.
pub fn infer_prepared(
    model: &Model,
    bindings: &Bindings,
    prepared: &Prepared,
) -> Result<Inference> {
    infer_from(model, bindings, false, Some(prepared))
}

fn infer_with(model: &Model, bindings: &Bindings, keep_batch: bool) -> Result<Inference> {
    // used once: the initializers' facts are made in place, not copied from a `Prepared` (copies
    // held beside the originals were ~150,000 allocations on a graph of 100,000 nodes, and both
    // sets lived through the walk; a list of them moved in after was 3 MB made and freed)
    infer_from(model, bindings, keep_batch, None)
}

fn infer_from(
    model: &Model,
    bindings: &Bindings,
    keep_batch: bool,
    prepared: Option<&Prepared>,
) -> Result<Inference> {
    let graph = &model.graph;
    let Resolved {
        bound,
        shapes,
        batch,
        notes,
        override_fixed,
    } = resolve_bindings(model, bindings, keep_batch)?;
    let opset = model.opset();
    let mut facts: Vec<Fact> = Vec::with_capacity(graph.values.len());
    crate::util::pages::advise_huge(&facts);
    facts.resize(graph.values.len(), Fact::unknown());
    let ops = match prepared {
        Some(p) => {
            for (id, f) in &p.initializers {
                facts[*id] = f.clone();
            }
            Arc::clone(&p.ops)
        }
        None => {
            for (id, t) in graph.initializers() {
                facts[id] = ops::initializer_fact(t);
            }
            ops::parse_graph(graph, opset)
        }
    };
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
    set_values(model, bindings, &mut facts)?;
    let root = Scope {
        graph: None,
        facts: &[],
        names: HashMap::new(),
        parent: None,
    };
    let w = walk(graph, opset, &mut facts, &bound, &root, Some(&ops));
    Ok(Inference {
        ops: w.ops,
        facts,
        macs: w.macs,
        opaque: w.opaque,
        invalid: w.invalid,
        overflow: w.overflow,
        mismatches: w.mismatches,
        branches: w.branches,
        choices: w.choices,
        batch,
        bound,
        notes,
        values: bindings.values.clone(),
    })
}

/// `--value NAME=V`: the scalar input's fact gets its value (its shape must hold one element).
fn set_values(model: &Model, bindings: &Bindings, facts: &mut [Fact]) -> Result<()> {
    let graph = &model.graph;
    let path = model.path.display();
    for (name, &val) in &bindings.values {
        let Some(&v) = graph
            .inputs
            .iter()
            .find(|&&v| graph.value_name(v) == *name && graph.values[v].init.is_none())
        else {
            let names: Vec<&str> = graph
                .inputs
                .iter()
                .filter(|&&v| graph.values[v].init.is_none())
                .map(|&v| graph.value_name(v))
                .collect();
            return Err(Error::Usage(format!(
                "{path}: --value {name}={val}: the model has no input named '{name}' (inputs: {})",
                names.join(", ")
            )));
        };
        let f = &mut facts[v];
        let shape = f.shape.get_or_insert_with(Box::default);
        if Dim::product(shape.iter()).and_then(|d| d.as_i64()) != Some(1) {
            return Err(Error::Usage(format!(
                "{path}: --value {name}={val}: '{name}' has shape {}, not a single element (--value gives a scalar input's value)",
                shape_to_string(shape)
            )));
        }
        f.value = Some(Box::new(match f.dtype {
            Some(d) if d.is_float() => Konst::Float(vec![val as f64]),
            _ => Konst::Int(vec![Dim::known(val)]),
        }));
    }
    Ok(())
}

/// The graph inputs a value is computed from: those whose values it reads, and those it reads
/// only the shape of (through `Shape` and `Size`), sorted. Initializers and constants are not
/// sources; a subgraph's own inputs (a loop's counter and state) cannot be traced.
fn sources(v: ValueId, scope: &Scope) -> (Vec<String>, Vec<String>) {
    let mut values = BTreeSet::new();
    let mut shapes = BTreeSet::new();
    let mut seen = BTreeSet::new();
    trace(scope, v, false, &mut values, &mut shapes, &mut seen);
    shapes.retain(|s| !values.contains(s));
    (values.into_iter().collect(), shapes.into_iter().collect())
}

fn trace(
    scope: &Scope,
    v: ValueId,
    shape_only: bool,
    values: &mut BTreeSet<String>,
    shapes: &mut BTreeSet<String>,
    seen: &mut BTreeSet<(usize, ValueId, bool)>,
) {
    let Some(g) = scope.graph else { return };
    if !seen.insert((std::ptr::from_ref(scope) as usize, v, shape_only)) {
        return;
    }
    let val = &g.values[v];
    if val.init.is_some() {
        return;
    }
    if let Some((n, _)) = val.producer() {
        let node = &g.nodes[n];
        let reads_shape = matches!(
            ops::def_of(node).map(|d| d.outputs),
            Some(ops::Outputs::ShapeOnly)
        );
        for i in node.inputs().values() {
            trace(scope, i, shape_only || reads_shape, values, shapes, seen);
        }
        // what a control-flow node's subgraphs read from this graph
        let mut captured = BTreeSet::new();
        for (_, sub) in node.attrs.subgraphs() {
            captures(sub, &mut captured);
        }
        for name in captured {
            if let Some(&i) = scope.names.get(name.as_str()) {
                trace(scope, i, shape_only, values, shapes, seen);
            }
        }
        return;
    }
    if val.outer() {
        // a value of an enclosing graph: continue there
        let mut up = scope.parent;
        while let Some(s) = up {
            if let Some(&pv) = s.names.get(g.name(val.name)) {
                trace(s, pv, shape_only, values, shapes, seen);
                return;
            }
            up = s.parent;
        }
        return;
    }
    let is_main = scope.parent.is_none_or(|p| p.graph.is_none());
    if is_main && g.inputs.contains(&v) {
        let set = if shape_only { shapes } else { values };
        set.insert(g.name(val.name).to_string());
    }
}

/// The names a subgraph (and the subgraphs in it) reads from the graphs around it.
fn captures(g: &Graph, out: &mut BTreeSet<String>) {
    for v in g.values.iter().filter(|v| v.outer()) {
        out.insert(g.name(v.name).to_string());
    }
    for node in &g.nodes {
        for (_, sub) in node.attrs.subgraphs() {
            captures(sub, out);
        }
    }
}

/// The first node, in a graph or the subgraphs of it that run, whose inputs contradict it: its
/// name and why.
fn first_invalid(g: &Graph, inf: &Inference) -> Option<String> {
    if let Some((n, m)) = inf.invalid.first() {
        return Some(format!("{}: {m}", g.label(&g.nodes[*n])));
    }
    inf.branches.iter().find_map(|(&n, bs)| {
        bs.iter()
            .filter(|b| b.runs != Some(false))
            .find_map(|b| first_invalid(subgraph(&g.nodes[n], &b.attr)?, &b.inference))
    })
}

/// What walking one graph found.
struct Walk {
    ops: Arc<[Op]>,
    macs: Vec<Option<Dim>>,
    opaque: Vec<NodeId>,
    invalid: Vec<(NodeId, String)>,
    overflow: Vec<NodeId>,
    mismatches: Vec<String>,
    branches: BTreeMap<NodeId, Vec<Branch>>,
    choices: BTreeMap<NodeId, Choice>,
}

/// The values visible from a subgraph: its enclosing graphs' facts, by name.
struct Scope<'a> {
    /// The graph these facts are of (`None` above the main graph).
    graph: Option<&'a Graph>,
    facts: &'a [Fact],
    names: HashMap<&'a str, ValueId>,
    parent: Option<&'a Scope<'a>>,
}

impl Scope<'_> {
    /// An outer value's fact, with the values [`ops::initializer_fact`] left out.
    fn get(&self, name: &str) -> Option<Fact> {
        match self.names.get(name) {
            Some(&v) => {
                let stored = self.graph.and_then(|g| g.values.get(v)?.init.as_deref());
                stored
                    .and_then(ops::deferred_value)
                    .or_else(|| self.facts.get(v).cloned())
            }
            None => self.parent?.get(name),
        }
    }
}

/// Infers every node of `graph` in order, `facts` holding what is known of its values already
/// (initializers, inputs).
fn walk(
    graph: &Graph,
    opset: i64,
    facts: &mut [Fact],
    bound: &BTreeMap<String, i64>,
    scope: &Scope,
    parsed: Option<&Arc<[Op]>>,
) -> Walk {
    let op_list: Arc<[Op]> = match parsed {
        Some(ops) => Arc::clone(ops),
        None => ops::parse_graph(graph, opset),
    };
    let mut w = Walk {
        ops: Arc::clone(&op_list),
        macs: vec![None; graph.nodes.len()],
        opaque: Vec::new(),
        invalid: Vec::new(),
        overflow: Vec::new(),
        mismatches: Vec::new(),
        branches: BTreeMap::new(),
        choices: BTreeMap::new(),
    };
    // one list of input facts for every node (a list each was ~100,000 allocations on a graph of
    // 100,000 nodes); emptied of its borrows before the facts change
    let mut spare: Vec<Option<&Fact>> = Vec::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        let op = &op_list[n];
        crate::ir::take_overflow();
        let (outs, cost) = match (op, op.def()) {
            (Op::Malformed(m), _) => {
                w.invalid.push((n, m.clone()));
                (Vec::new(), None)
            }
            (Op::If | Op::Loop | Op::Scan(_), _) => {
                let here = Scope {
                    graph: Some(graph),
                    facts,
                    names: graph
                        .values
                        .iter()
                        .enumerate()
                        .map(|(i, v)| (graph.name(v.name), i))
                        .collect(),
                    parent: Some(scope),
                };
                match control_flow(node, graph.name(node.name), op, opset, bound, &here) {
                    Ok((outs, cost, branches, choice)) => {
                        if let Some(c) = choice {
                            w.choices.insert(n, c);
                        }
                        // an overflow inside a body is this node's (each body's walk consumed
                        // the flag node by node)
                        if branches.iter().any(|b| !b.inference.overflow.is_empty()) {
                            w.overflow.push(n);
                        }
                        w.branches.insert(n, branches);
                        (outs, cost)
                    }
                    Err(m) => {
                        w.invalid.push((n, m));
                        (Vec::new(), None)
                    }
                }
            }
            (_, Some(def)) => {
                // the values of larger float initializers, read for a node that can fold: one
                // whose every input is known (no op reads such a tensor's values otherwise)
                let stored = |v: ValueId| graph.values[v].init.as_deref();
                let foldable = node
                    .inputs()
                    .values()
                    .all(|v| facts[v].value.is_some() || stored(v).is_some_and(ops::is_deferred));
                let deferred: Vec<Option<Fact>> = if foldable {
                    node.inputs()
                        .iter()
                        .map(|v| v.and_then(|v| ops::deferred_value(stored(v)?)))
                        .collect()
                } else {
                    Vec::new()
                };
                let mut inputs = recycle(std::mem::take(&mut spare));
                inputs.extend(node.inputs().iter().enumerate().map(
                    |(i, v)| match deferred.get(i) {
                        Some(Some(d)) => Some(d),
                        _ => v.map(|v| &facts[v]),
                    },
                ));
                let cx = OpCx {
                    node,
                    name: graph.name(node.name),
                    op,
                    inputs,
                    opset,
                };
                let done = match (def.infer)(&cx) {
                    Ok(outs) => {
                        let cost = (def.macs)(&cx, &outs);
                        (outs, cost)
                    }
                    Err(InferError::Unknown) => {
                        (Vec::new(), (!def.counts_macs()).then_some(Dim::ZERO))
                    }
                    Err(InferError::Invalid(m)) => {
                        w.invalid.push((n, m));
                        (Vec::new(), None)
                    }
                };
                spare = recycle(cx.inputs);
                done
            }
            (_, None) => {
                w.opaque.push(n);
                (Vec::new(), None)
            }
        };
        if crate::ir::take_overflow() && w.overflow.last() != Some(&n) {
            w.overflow.push(n);
        }
        w.macs[n] = cost;
        let mut outs = outs.into_iter();
        for v in node.outputs().iter() {
            let inferred = outs.next().unwrap_or_default();
            let Some(v) = v else { continue };
            let declared = graph.values[v]
                .declared
                .as_ref()
                .map(|d| substitute(d, bound));
            facts[v] = merge(inferred, declared, graph.value_name(v), &mut w.mismatches);
        }
    }

    w
}

/// An emptied list, its allocation kept for items of another lifetime (collecting a list's
/// `IntoIter` into a list of a type of the same size and alignment reuses its buffer).
fn recycle<'b>(mut list: Vec<Option<&Fact>>) -> Vec<Option<&'b Fact>> {
    list.clear();
    list.into_iter().map(|_| None).collect()
}

/// One subgraph of a control-flow node, analysed.
#[derive(Clone, Debug)]
pub struct Branch {
    /// The attribute that holds it: `then_branch`, `else_branch` or `body`.
    pub attr: String,
    pub inference: Inference,
    /// Whether it runs: `Some(false)` for the branch an `If` with a known condition skips, `None`
    /// when the condition is not known.
    pub runs: Option<bool>,
    /// How many times it runs each time the node runs (a `Loop`'s trip count, a `Scan`'s sequence
    /// length), when known.
    pub times: Option<u64>,
}

impl Branch {
    /// The subgraph's total MACs for one run of the node: its own total × the times it runs. A
    /// control-flow node inside already carries its own branches' cost in its MACs.
    pub fn macs(&self) -> Option<Dim> {
        let one = Dim::sum(
            &self
                .inference
                .macs
                .iter()
                .cloned()
                .collect::<Option<Vec<_>>>()?,
        )?;
        one.checked_mul(&Dim::known(i64::try_from(self.times.unwrap_or(1)).ok()?))
    }
}

/// The cost the branches of one node add: the branch that runs, or the larger when undecided.
fn nested_cost(bs: &[Branch]) -> Vec<Option<Dim>> {
    let running: Vec<&Branch> = bs.iter().filter(|b| b.runs != Some(false)).collect();
    let costs: Vec<Option<Dim>> = running.iter().map(|b| b.macs()).collect();
    if bs.iter().any(|b| b.runs.is_none()) && costs.len() > 1 {
        // alternatives: the larger
        let known: Option<Vec<Dim>> = costs.into_iter().collect();
        return vec![
            known.and_then(|k| k.into_iter().max_by_key(|d| d.as_i64().unwrap_or(i64::MAX)))
        ];
    }
    costs
}

/// The cost a control-flow node's branches add to its own row.
pub fn branch_macs(bs: &[Branch]) -> Option<Dim> {
    let parts: Option<Vec<Dim>> = nested_cost(bs).into_iter().collect();
    Dim::sum(&parts?)
}

fn subgraph<'a>(node: &'a Node, attr: &str) -> Option<&'a Graph> {
    node.attrs
        .subgraphs()
        .find(|(name, _)| *name == attr)
        .map(|(_, g)| g)
}

/// Analyses a subgraph whose inputs have the given facts.
fn analyse_subgraph(
    g: &Graph,
    inputs: &[Fact],
    opset: i64,
    bound: &BTreeMap<String, i64>,
    scope: &Scope,
) -> Inference {
    let mut facts = vec![Fact::unknown(); g.values.len()];
    for (id, t) in g.initializers() {
        facts[id] = ops::initializer_fact(t);
    }
    for (i, v) in g.values.iter().enumerate() {
        if v.outer() {
            if let Some(f) = scope.get(g.name(v.name)) {
                facts[i] = f;
            }
        }
    }
    for (k, &v) in g.inputs.iter().enumerate() {
        let declared = g.values[v].declared.as_ref().map(|d| substitute(d, bound));
        facts[v] = match (inputs.get(k), declared) {
            (Some(f), Some(d)) => merge(f.clone(), Some(d), g.value_name(v), &mut Vec::new()),
            (Some(f), None) => f.clone(),
            (None, Some(d)) => d,
            (None, None) => Fact::unknown(),
        };
    }
    let w = walk(g, opset, &mut facts, bound, scope, None);
    Inference {
        ops: w.ops,
        facts,
        macs: w.macs,
        opaque: w.opaque,
        invalid: w.invalid,
        overflow: w.overflow,
        mismatches: w.mismatches,
        branches: w.branches,
        choices: w.choices,
        batch: None,
        bound: BTreeMap::new(),
        notes: Vec::new(),
        values: BTreeMap::new(),
    }
}

fn output_facts(g: &Graph, inf: &Inference) -> Vec<Fact> {
    g.outputs.iter().map(|&v| inf.facts[v].clone()).collect()
}

/// The fact of a value that is one of two alternatives: what both agree on (a dim they disagree
/// on gets a name of its own, `NODE_either_d1`).
fn either(a: &Fact, b: &Fact, node: &str) -> Fact {
    let shape = match (&a.shape, &b.shape) {
        (Some(x), Some(y)) if x.len() == y.len() => Some(
            x.iter()
                .zip(y)
                .enumerate()
                .map(|(i, (p, q))| {
                    if p == q {
                        p.clone()
                    } else {
                        Dim::sym(&format!("{node}_either_d{i}"))
                    }
                })
                .collect(),
        ),
        _ => None,
    };
    Fact {
        dtype: a.dtype.or(b.dtype),
        shape,
        value: if a.value == b.value {
            a.value.clone()
        } else {
            None
        },
    }
}

type FlowResult =
    std::result::Result<(Vec<Fact>, Option<Dim>, Vec<Branch>, Option<Choice>), String>;

/// `If`, `Loop` and `Scan`: their subgraphs analysed with what flows in, their outputs from what
/// flows out, their cost from the subgraphs' (the branch that runs; the body × its trip count).
fn control_flow(
    node: &Node,
    name: &str,
    op: &Op,
    opset: i64,
    bound: &BTreeMap<String, i64>,
    scope: &Scope,
) -> FlowResult {
    let input = |i: usize| -> Fact {
        node.input(i)
            .and_then(|v| scope.facts.get(v).cloned())
            .unwrap_or_default()
    };
    match op {
        Op::If => {
            let mut cond = input(0)
                .value
                .and_then(|v| v.as_i64s())
                .and_then(|v| v.first().map(|&c| c != 0));
            let mut branches = Vec::new();
            let mut outs: Vec<Vec<Fact>> = Vec::new();
            for attr in ["then_branch", "else_branch"] {
                let g =
                    subgraph(node, attr).ok_or_else(|| format!("attribute '{attr}' is missing"))?;
                let inf = analyse_subgraph(g, &[], opset, bound, scope);
                outs.push(output_facts(g, &inf));
                branches.push(Branch {
                    attr: attr.into(),
                    inference: inf,
                    runs: None,
                    times: Some(1),
                });
            }
            let (values, shapes) = node.input(0).map(|v| sources(v, scope)).unwrap_or_default();
            let mut choice = match cond {
                Some(value) => Choice::Condition {
                    value,
                    values,
                    shapes,
                },
                None => Choice::Undecided { values, shapes },
            };
            // a branch that is inconsistent with these input shapes (a node it cannot run) is not
            // the one that runs
            if cond.is_none() {
                let why = |b: &Branch| first_invalid(subgraph(node, &b.attr)?, &b.inference);
                match (why(&branches[0]), why(&branches[1])) {
                    (None, Some(w)) => {
                        cond = Some(true);
                        choice = Choice::Consistent {
                            branch: "then_branch".into(),
                            why: w,
                        };
                    }
                    (Some(w), None) => {
                        cond = Some(false);
                        choice = Choice::Consistent {
                            branch: "else_branch".into(),
                            why: w,
                        };
                    }
                    _ => {}
                }
            }
            for (b, taken) in branches.iter_mut().zip([true, false]) {
                b.runs = cond.map(|c| c == taken);
            }
            let facts = match cond {
                Some(true) => outs[0].clone(),
                Some(false) => outs[1].clone(),
                None => outs[0]
                    .iter()
                    .zip(&outs[1])
                    .map(|(a, b)| either(a, b, name))
                    .collect(),
            };
            let cost = branch_macs(&branches);
            Ok((facts, cost, branches, Some(choice)))
        }
        Op::Loop => {
            let g = subgraph(node, "body").ok_or("attribute 'body' is missing")?;
            let trips = input(0)
                .value
                .and_then(|v| v.as_i64s())
                .and_then(|v| v.first().copied())
                .and_then(|t| u64::try_from(t).ok());
            let carried: Vec<Fact> = (2..node.inputs().len()).map(input).collect();
            let mut body_in = vec![
                Fact::new(Some(crate::ir::DType::I64), vec![]),
                Fact::new(Some(crate::ir::DType::Bool), vec![]),
            ];
            body_in.extend(carried.iter().cloned());
            let inf = analyse_subgraph(g, &body_in, opset, bound, scope);
            let body_out = output_facts(g, &inf);
            let n_carried = carried.len();
            let mut facts: Vec<Fact> = body_out.iter().skip(1).take(n_carried).cloned().collect();
            let trip_dim = match trips {
                Some(t) => Dim::known(t as i64),
                None => Dim::sym(&format!("{}_trips", name)),
            };
            for f in body_out.iter().skip(1 + n_carried) {
                facts.push(Fact {
                    dtype: f.dtype,
                    shape: f.shape.as_ref().map(|s| {
                        let mut v = vec![trip_dim.clone()];
                        v.extend(s.iter().cloned());
                        v.into()
                    }),
                    value: None,
                });
            }
            let choice = trips.is_none().then(|| {
                // the trip count, or the condition that ends the loop
                let mut values = BTreeSet::new();
                for i in [0, 1] {
                    if let Some(v) = node.input(i) {
                        values.extend(sources(v, scope).0);
                    }
                }
                Choice::UnknownTrips {
                    values: values.into_iter().collect(),
                }
            });
            let branches = vec![Branch {
                attr: "body".into(),
                inference: inf,
                runs: Some(true),
                times: trips,
            }];
            let cost = branch_macs(&branches);
            Ok((facts, cost, branches, choice))
        }
        Op::Scan(sc) => {
            let g = subgraph(node, "body").ok_or("attribute 'body' is missing")?;
            let n_scan =
                usize::try_from(sc.num_scan_inputs).map_err(|_| "num_scan_inputs is negative")?;
            let n_in = node.inputs().len();
            let n_state = n_in
                .checked_sub(n_scan)
                .ok_or("fewer inputs than num_scan_inputs")?;
            let mut body_in: Vec<Fact> = (0..n_state).map(input).collect();
            let mut seq: Option<Dim> = None;
            for k in 0..n_scan {
                let f = input(n_state + k);
                let ax = sc.scan_input_axes.get(k).copied().unwrap_or(0);
                let elem = f.shape.as_ref().and_then(|s| {
                    let a = super::ops::axis_of(ax, s.len())?;
                    seq.get_or_insert(s[a].clone());
                    let mut e = s.to_vec();
                    e.remove(a);
                    Some(e.into())
                });
                body_in.push(Fact {
                    dtype: f.dtype,
                    shape: elem,
                    value: None,
                });
            }
            let inf = analyse_subgraph(g, &body_in, opset, bound, scope);
            let body_out = output_facts(g, &inf);
            let mut facts: Vec<Fact> = body_out.iter().take(n_state).cloned().collect();
            let len = seq
                .clone()
                .unwrap_or_else(|| Dim::sym(&format!("{}_len", name)));
            for (k, f) in body_out.iter().skip(n_state).enumerate() {
                let ax = sc.scan_output_axes.get(k).copied().unwrap_or(0);
                facts.push(Fact {
                    dtype: f.dtype,
                    shape: f.shape.as_ref().and_then(|s| {
                        let a = super::ops::axis_of(ax, s.len() + 1)?;
                        let mut v = s.to_vec();
                        v.insert(a, len.clone());
                        Some(v.into())
                    }),
                    value: None,
                });
            }
            let times = seq.and_then(|d| d.as_u64());
            let choice = times
                .is_none()
                .then(|| Choice::UnknownTrips { values: Vec::new() });
            let branches = vec![Branch {
                attr: "body".into(),
                inference: inf,
                runs: Some(true),
                times,
            }];
            let cost = branch_macs(&branches);
            Ok((facts, cost, branches, choice))
        }
        _ => Err("not a control-flow op".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixture of testdata/models/branches/ (testdata/generate.py --branches-only).
    fn fixture(name: &str) -> Model {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/models/branches")
            .join(format!("{name}.onnx"));
        crate::load::onnx::load(&path).unwrap()
    }

    fn if_node(m: &Model) -> NodeId {
        m.graph
            .nodes
            .iter()
            .position(|n| n.op_type == "If")
            .unwrap()
    }

    #[test]
    fn a_condition_on_an_unvalued_scalar_is_undecided_and_traced_to_it() {
        let m = fixture("if_sample_rate");
        let inf = infer(&m, &Bindings::default()).unwrap();
        let n = if_node(&m);
        assert!(inf.branches[&n].iter().all(|b| b.runs.is_none()));
        assert_eq!(
            inf.choices[&n],
            Choice::Undecided {
                values: vec!["sr".into()],
                shapes: vec![],
            }
        );
    }

    #[test]
    fn a_value_decides_the_condition_computed_from_it() {
        let m = fixture("if_sample_rate");
        for (sr, then) in [(16000, true), (8000, false)] {
            let b = Bindings {
                values: BTreeMap::from([("sr".to_string(), sr)]),
                ..Bindings::default()
            };
            let inf = infer(&m, &b).unwrap();
            let n = if_node(&m);
            let runs: Vec<Option<bool>> = inf.branches[&n].iter().map(|b| b.runs).collect();
            assert_eq!(runs, [Some(then), Some(!then)], "sr={sr}");
            assert_eq!(
                inf.choices[&n],
                Choice::Condition {
                    value: then,
                    values: vec!["sr".into()],
                    shapes: vec![],
                }
            );
            assert_eq!(inf.macs[n], Some(Dim::known(if then { 128 } else { 96 })));
        }
    }

    #[test]
    fn a_condition_read_from_a_shape_names_that_input() {
        let m = fixture("if_state_shape");
        let inf = infer(&m, &Bindings::default()).unwrap();
        assert_eq!(
            inf.choices[&if_node(&m)],
            Choice::Condition {
                value: true,
                values: vec![],
                shapes: vec!["state".into()],
            }
        );
    }

    /// Float initializers of 16 elements and fewer keep their values; larger ones are read for
    /// the node that folds them, out of the file (the skim leaves their payload there). Either
    /// way the folded values and the shapes computed from float inputs are the same.
    #[test]
    fn float_initializers_fold_on_both_sides_of_the_eager_limit() {
        use crate::load::onnx_pb as pb;
        use prost::Message;
        let floats = |name: &str, xs: &[f32]| pb::TensorProto {
            name: Some(name.into()),
            dims: vec![xs.len() as i64],
            data_type: Some(1),
            raw_data: Some(
                xs.iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect::<Vec<u8>>()
                    .into(),
            ),
            ..Default::default()
        };
        let node = |op: &str, ins: &[&str], out: &str| pb::NodeProto {
            op_type: Some(op.into()),
            name: Some(out.into()),
            input: ins.iter().map(|s| s.to_string()).collect(),
            output: vec![out.into()],
            ..Default::default()
        };
        let ramp = |n: usize| (0..n).map(|i| i as f32 * 0.5).collect::<Vec<f32>>();
        let x = pb::ValueInfoProto {
            name: Some("x".into()),
            r#type: Some(pb::TypeProto {
                value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                    elem_type: Some(1),
                    shape: Some(pb::TensorShapeProto {
                        dim: [1, 3, 8, 8]
                            .iter()
                            .map(|&d| pb::tensor_shape_proto::Dimension {
                                value: Some(pb::tensor_shape_proto::dimension::Value::DimValue(d)),
                                ..Default::default()
                            })
                            .collect(),
                    }),
                })),
                ..Default::default()
            }),
            ..Default::default()
        };
        let model = pb::ModelProto {
            ir_version: Some(9),
            opset_import: vec![pb::OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(pb::GraphProto {
                input: vec![x],
                initializer: vec![
                    floats("w16", &ramp(16)),
                    floats("w17", &ramp(17)),
                    floats("w64", &ramp(64)),
                    floats("scales", &[1.0, 1.0, 2.0, 3.0]),
                ],
                node: vec![
                    node("Neg", &["w16"], "n16"),
                    node("Neg", &["w17"], "n17"),
                    node("Neg", &["w64"], "n64"),
                    node("Resize", &["x", "", "scales"], "y"),
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, model.encode_to_vec()).unwrap();
        let m = crate::load::onnx::load(&path).unwrap();
        let inf = infer(&m, &Bindings::default()).unwrap();
        let fact = |name: &str| &inf.facts[m.graph.value_by_name(name).unwrap()];
        // the 17- and 64-element weights are deferred: no values in their own facts
        assert!(fact("w16").value.is_some());
        assert!(fact("w17").value.is_none() && fact("w64").value.is_none());
        for (out, n) in [("n16", 16), ("n17", 17), ("n64", 64)] {
            let want: Vec<f64> = ramp(n).iter().map(|&x| -(x as f64)).collect();
            assert_eq!(
                fact(out).value.as_deref(),
                Some(&Konst::Float(want)),
                "{out}"
            );
        }
        let y: Vec<Dim> = [1, 3, 16, 24].into_iter().map(Dim::known).collect();
        assert_eq!(fact("y").shape, Some(y.into()));
    }

    #[test]
    fn a_value_must_name_a_scalar_input() {
        let m = fixture("if_sample_rate");
        for (name, says) in [
            ("rate", "no input named 'rate'"),
            ("x", "not a single element"),
        ] {
            let b = Bindings {
                values: BTreeMap::from([(name.to_string(), 1)]),
                ..Bindings::default()
            };
            let e = infer(&m, &b).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
