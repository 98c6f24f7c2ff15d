//! The graph: values in an arena, nodes in topological order.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use super::attr::Attrs;
use super::sym::Sym;
use super::tensor::Tensor;
use super::TypeDecl;
use crate::util::lists::Lists;

/// Index of a value in [`Graph::values`].
pub type ValueId = usize;
/// Index of a node in [`Graph::nodes`] (which are in topological order).
pub type NodeId = usize;

/// A computation graph, independent of the file format it came from.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub values: Vec<Value>,
    /// Topologically sorted; among independent nodes the file's order is kept.
    pub nodes: Vec<Node>,
    /// Runtime inputs (initializers listed as inputs are not here).
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// The first outputs of nodes whose exporter metadata says an inference-mode BatchNorm was
    /// fused into them (PyTorch's dynamo exporter: `FuseBatchNormIntoConv`,
    /// `_native_batch_norm_legit_no_training`); see `analysis::export_mode`.
    pub fused_eval_norms: Vec<String>,
    /// The first outputs of `Gemm`/`Conv` nodes whose zero bias the exporter's optimizer removed
    /// (`RemoveOptionalBiasFrom*` in their metadata, no BatchNorm fused): a parameter of the
    /// model the file does not store.
    pub removed_biases: Vec<String>,
    /// Each value's readers (node, input slot), in node order: [`Graph::consumers`]. One array for
    /// the graph (a list per value was ~170,000 allocations on a graph of 100,000 nodes).
    readers: Lists<(u32, u32)>,
    /// The text of every node's and value's [`Name`], one after the other: one buffer, not an
    /// allocation per name (a graph of 100,000 nodes names ~270,000 things); read with
    /// [`Graph::name`]. Shared: a report's rows read their names from it ([`Graph::names`]).
    names: Arc<String>,
}

/// The readers of a value ([`Graph::consumers`]): (node, input slot) pairs in node order.
#[derive(Clone, Copy, Debug)]
pub struct Readers<'g>(&'g [(u32, u32)]);

impl<'g> Readers<'g> {
    pub fn len(self) -> usize {
        self.0.len()
    }

    pub fn is_empty(self) -> bool {
        self.0.is_empty()
    }

    /// Reader `i`, in node order.
    pub fn get(self, i: usize) -> Option<(NodeId, usize)> {
        self.0.get(i).map(|&(n, slot)| (n as NodeId, slot as usize))
    }

    /// The value's one reader; `None` for none or several.
    pub fn only(self) -> Option<(NodeId, usize)> {
        match self.0 {
            [_] => self.get(0),
            _ => None,
        }
    }

    pub fn iter(self) -> impl ExactSizeIterator<Item = (NodeId, usize)> + Clone + 'g {
        self.0.iter().map(|&(n, slot)| (n as NodeId, slot as usize))
    }
}

impl<'g> IntoIterator for Readers<'g> {
    type Item = (NodeId, usize);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'g, (u32, u32)>, fn(&(u32, u32)) -> (NodeId, usize)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|&(n, slot)| (n as NodeId, slot as usize))
    }
}

/// A node's or a value's name: where its text lies in its graph's names ([`Graph::name`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Name {
    start: u32,
    len: u32,
}

impl Name {
    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    /// Its text in `names`, the names of the graph that made it ([`Graph::names`]).
    #[inline]
    pub fn read(self, names: &str) -> &str {
        let start = self.start as usize;
        // a `Name` is made by the builder of its graph, on a char boundary of its names
        names
            .get(start..start + self.len as usize)
            .unwrap_or_default()
    }
}

/// A named tensor flowing through the graph. 32 bytes (a graph of 100,000 nodes holds ~170,000).
#[derive(Clone, Debug)]
pub struct Value {
    /// Its text: [`Graph::name`].
    pub name: Name,
    /// Type and shape the file declares (graph input/output or `value_info`), if any (boxed:
    /// most values of a large graph declare none, and a value is held per output of every node).
    pub declared: Option<Box<TypeDecl>>,
    /// The node that produces it ([`Value::producer`]), [`NONE`] for none: 32 bits, like its slot
    /// (a graph is decoded from a protobuf of at most 2 GiB, so neither reaches 2^31).
    node: u32,
    /// The output slot of `node`, and in the top bit ([`OUTER`]) whether the value is captured
    /// from an enclosing graph (only in subgraphs): with `node`, 8 bytes (an `Option` of both and
    /// a `bool` made a value 40 bytes, not 32).
    slot: u32,
    /// Stored data, for initializers (boxed: most values are not, and a value is held per
    /// output of every node).
    pub init: Option<Box<Tensor>>,
}

/// [`Value::node`] of a value no node produces.
const NONE: u32 = u32::MAX;

/// [`Value::slot`]'s bit for a value captured from an enclosing graph.
const OUTER: u32 = 1 << 31;

impl Default for Value {
    fn default() -> Value {
        Value {
            name: Name::default(),
            declared: None,
            node: NONE,
            slot: 0,
            init: None,
        }
    }
}

/// A port of a node ([`Node::ports`]) that reads or writes no value (an omitted optional input or
/// output). Value ids fit 32 bits below it: a graph is decoded from a protobuf of at most 2 GiB,
/// and the builder refuses more values ([`GraphBuilder::finish`]).
const NO_VALUE: u32 = u32::MAX;

/// A node's inputs or outputs ([`Node::inputs`], [`Node::outputs`]): `None` for an omitted
/// optional one, by value.
#[derive(Clone, Copy)]
pub struct Ports<'n>(&'n [u32]);

/// The iterator of [`Ports::iter`].
pub type PortIter<'n> =
    std::iter::Map<std::iter::Copied<std::slice::Iter<'n, u32>>, fn(u32) -> Option<ValueId>>;

fn port_value(p: u32) -> Option<ValueId> {
    (p != NO_VALUE).then_some(p as ValueId)
}

impl<'n> Ports<'n> {
    pub fn len(self) -> usize {
        self.0.len()
    }

    pub fn is_empty(self) -> bool {
        self.0.is_empty()
    }

    /// Port `i`: `None` past the last, `Some(None)` for an omitted optional one.
    pub fn get(self, i: usize) -> Option<Option<ValueId>> {
        self.0.get(i).map(|&p| port_value(p))
    }

    /// In order, `None` for an omitted optional one.
    pub fn iter(self) -> PortIter<'n> {
        self.0
            .iter()
            .copied()
            .map(port_value as fn(u32) -> Option<ValueId>)
    }

    /// The values, in order, omitted ones skipped.
    pub fn values(self) -> impl DoubleEndedIterator<Item = ValueId> + Clone + 'n {
        self.0
            .iter()
            .filter(|&&p| p != NO_VALUE)
            .map(|&p| p as ValueId)
    }

    /// As a list, for callers that keep them.
    pub fn to_vec(self) -> Vec<Option<ValueId>> {
        self.iter().collect()
    }
}

impl<'n> IntoIterator for Ports<'n> {
    type Item = Option<ValueId>;
    type IntoIter = PortIter<'n>;

    fn into_iter(self) -> PortIter<'n> {
        self.iter()
    }
}

impl std::fmt::Debug for Ports<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One operator application.
#[derive(Clone, Debug)]
pub struct Node {
    /// Its text: [`Graph::name`].
    pub name: Name,
    /// Interned, like the domain and the attributes' names: a graph repeats a few of each.
    pub op_type: Sym,
    /// Operator domain; `""` is the default ONNX domain (`ai.onnx`).
    pub domain: Sym,
    /// Its inputs, then its outputs ([`Node::inputs`], [`Node::outputs`]), as 32-bit value ids
    /// ([`NO_VALUE`] for an omitted optional one): one allocation per node, not two, a boxed
    /// slice, not a `Vec` (they do not change once it is built), and 4 bytes a port, not the 16
    /// of an `Option<usize>` (a graph of 100,000 nodes held 4.7 MB of ports, now ~1.6).
    ports: Box<[u32]>,
    /// How many of `ports` are inputs.
    n_inputs: u32,
    pub attrs: Attrs,
    /// The op registry's entry for this node, found by name once, on first use
    /// (`analysis::ops::def_of`; the IR does not know the registry). Every later stage reads it by
    /// index: no op is looked up by its name again.
    pub resolved: Resolved,
}

/// A node's registry position, resolved once (see [`Node::resolved`]). A node's op type and domain
/// are not changed after it is built, so the resolution cannot go stale. In one 32-bit word: 0 not
/// resolved yet, 1 no entry, `2 + p` position `p` (a `OnceLock` took 8 bytes a node).
#[derive(Debug, Default)]
pub struct Resolved(std::sync::atomic::AtomicU32);

impl Clone for Resolved {
    fn clone(&self) -> Resolved {
        Resolved(self.0.load(std::sync::atomic::Ordering::Relaxed).into())
    }
}

impl Resolved {
    /// The position, resolved by `find` on first use (two threads that meet an unresolved node at
    /// once may both call `find`: it gives both the same answer).
    pub fn get_or_init(&self, find: impl FnOnce() -> Option<u16>) -> Option<u16> {
        use std::sync::atomic::Ordering::Relaxed;
        match self.0.load(Relaxed) {
            0 => {
                let found = find();
                self.0.store(found.map_or(1, |p| u32::from(p) + 2), Relaxed);
                found
            }
            1 => None,
            v => Some((v - 2) as u16),
        }
    }
}

impl Value {
    /// The node and output slot that produce it; `None` for an input, an initializer or a value
    /// captured from an outer graph (and before [`GraphBuilder::finish`]).
    pub fn producer(&self) -> Option<(NodeId, usize)> {
        (self.node != NONE).then_some((self.node as NodeId, (self.slot & !OUTER) as usize))
    }

    /// Whether it is captured from an enclosing graph (only in subgraphs).
    pub fn outer(&self) -> bool {
        self.slot & OUTER != 0
    }

    pub fn set_outer(&mut self, outer: bool) {
        self.slot = (self.slot & !OUTER) | if outer { OUTER } else { 0 };
    }
}

impl Node {
    /// A node reading `inputs` and writing `outputs` (`None` for an omitted optional one).
    ///
    /// # Panics
    /// On a value id of 2^32 - 1 or more, which no graph holds (see [`NO_VALUE`]).
    pub fn new(
        name: Name,
        op_type: Sym,
        domain: Sym,
        inputs: &[Option<ValueId>],
        outputs: &[Option<ValueId>],
        attrs: Attrs,
    ) -> Node {
        let ports = inputs
            .iter()
            .chain(outputs)
            .map(|v| match *v {
                None => NO_VALUE,
                Some(v) => u32::try_from(v)
                    .ok()
                    .filter(|&p| p != NO_VALUE)
                    .expect("a value id fits 32 bits"),
            })
            .collect();
        Node::with_ports(name, op_type, domain, ports, inputs.len(), attrs)
    }

    /// A node whose first `n_inputs` ports are inputs, the rest outputs.
    fn with_ports(
        name: Name,
        op_type: Sym,
        domain: Sym,
        ports: Vec<u32>,
        n_inputs: usize,
        attrs: Attrs,
    ) -> Node {
        Node {
            name,
            op_type,
            domain,
            ports: ports.into_boxed_slice(),
            // a node has fewer inputs than its protobuf (at most 2 GiB) has bytes
            n_inputs: u32::try_from(n_inputs).unwrap_or(u32::MAX),
            attrs,
            resolved: Resolved::default(),
        }
    }

    /// `None` for an omitted optional input (an empty name in ONNX).
    pub fn inputs(&self) -> Ports<'_> {
        Ports(self.ports.get(..self.n_inputs as usize).unwrap_or_default())
    }

    /// `None` for an omitted optional output.
    pub fn outputs(&self) -> Ports<'_> {
        Ports(self.ports.get(self.n_inputs as usize..).unwrap_or_default())
    }

    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs().get(i).flatten()
    }

    pub fn output(&self, i: usize) -> Option<ValueId> {
        self.outputs().get(i).flatten()
    }
}

impl Graph {
    /// The nodes (and input slots) that read value `v`, in node order; none before the graph is
    /// finished ([`GraphBuilder::finish`]).
    pub fn consumers(&self, v: ValueId) -> Readers<'_> {
        Readers(self.readers.get_checked(v).unwrap_or(&[]))
    }

    /// The text of a node's or a value's name.
    pub fn name(&self, name: Name) -> &str {
        name.read(&self.names)
    }

    /// The text every [`Name`] of this graph lies in, shared ([`Name::read`]).
    pub fn names(&self) -> Arc<String> {
        Arc::clone(&self.names)
    }

    /// The name of value `v`.
    pub fn value_name(&self, v: ValueId) -> &str {
        self.name(self.values[v].name)
    }

    /// `name (OpType)`, the way errors and reports refer to a node.
    pub fn label(&self, node: &Node) -> String {
        format!("{} ({})", self.name(node.name), node.op_type)
    }

    /// Adds `text` to the names; `None` past 4 GiB of names.
    fn add_name(&mut self, text: &str) -> Option<Name> {
        let start = u32::try_from(self.names.len()).ok()?;
        let len = u32::try_from(text.len()).ok()?;
        start.checked_add(len)?;
        Arc::make_mut(&mut self.names).push_str(text);
        Some(Name { start, len })
    }

    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        (0..self.values.len()).find(|&v| self.value_name(v) == name)
    }

    /// Initializers (in value order).
    pub fn initializers(&self) -> impl Iterator<Item = (ValueId, &Tensor)> {
        self.values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.init.as_deref().map(|t| (i, t)))
    }

    /// The stored tensor behind a value: its initializer, or the `value` tensor of the `Constant`
    /// node that makes it (Paddle2ONNX and some tf2onnx exports hold their weights that way).
    pub fn stored(&self, v: ValueId) -> Option<&Tensor> {
        let value = &self.values[v];
        value.init.as_deref().or_else(|| {
            let node = &self.nodes[value.producer()?.0];
            if node.op_type != "Constant" || !(node.domain.is_empty() || node.domain == "ai.onnx") {
                return None;
            }
            match node.attrs.get("value") {
                Some(super::attr::Attr::Tensor(t)) => Some(t),
                _ => None,
            }
        })
    }

    /// Every stored tensor of this graph: initializers (in value order), then the tensors of
    /// `Constant` nodes (in node order).
    pub fn stored_tensors(&self) -> impl Iterator<Item = (ValueId, &Tensor)> {
        self.initializers().chain(
            self.nodes
                .iter()
                .filter(|n| n.op_type == "Constant")
                .filter_map(|n| n.output(0))
                .filter(|&v| self.values[v].init.is_none())
                .filter_map(|v| self.stored(v).map(|t| (v, t))),
        )
    }

    /// Every graph nested in node attributes, recursively, with the label of the node that holds it.
    pub fn subgraphs(&self) -> Vec<(String, &Graph)> {
        let mut out = Vec::new();
        for node in &self.nodes {
            for (attr, g) in node.attrs.subgraphs() {
                out.push((format!("{}.{attr}", self.name(node.name)), g));
                for (label, inner) in g.subgraphs() {
                    out.push((format!("{}.{attr}/{label}", self.name(node.name)), inner));
                }
            }
        }
        out
    }
}

/// Builds a [`Graph`] from nodes given by value names, then sorts it.
#[derive(Default)]
pub struct GraphBuilder {
    graph: Graph,
    /// Value names to ids: each id once, hashed by its value's name with a fast fixed-seed hasher
    /// (SipHash was a tenth of loading a graph of 100,000 nodes) and compared against
    /// `graph.values` (a map keyed by `String` held every name twice).
    by_name: hashbrown::HashTable<ValueId>,
    hasher: foldhash::fast::FixedState,
    is_subgraph: bool,
    /// The names passed 4 GiB: [`GraphBuilder::finish`] refuses the graph.
    names_overflow: bool,
    /// A node's port named a value whose id does not fit 32 bits: refused too.
    values_overflow: bool,
}

impl GraphBuilder {
    pub fn new(name: impl Into<String>, is_subgraph: bool) -> Self {
        GraphBuilder {
            graph: Graph {
                name: name.into(),
                ..Graph::default()
            },
            by_name: hashbrown::HashTable::new(),
            hasher: foldhash::fast::FixedState::default(),
            is_subgraph,
            names_overflow: false,
            values_overflow: false,
        }
    }

    /// Adds `text` to the graph's names.
    fn name(&mut self, text: &str) -> Name {
        self.graph.add_name(text).unwrap_or_else(|| {
            self.names_overflow = true;
            Name::default()
        })
    }

    /// Room for `values` values and `nodes` nodes, so that the arrays and the name index do not
    /// grow step by step (a graph of 100,000 nodes copied its value array ~18 times while it grew).
    pub fn reserve(&mut self, values: usize, nodes: usize) {
        self.graph.values.reserve(values);
        self.graph.nodes.reserve(nodes);
        crate::util::pages::advise_huge(&self.graph.values);
        crate::util::pages::advise_huge(&self.graph.nodes);
        // names of ~32 bytes on average (exporters' paths, `/blocks.0/attn/MatMul_output_0`):
        // fewer copies while the buffer grows, and `finish` gives back what is left
        Arc::make_mut(&mut self.graph.names)
            .reserve(values.saturating_add(nodes).saturating_mul(32));
        crate::util::pages::advise_huge_text(&self.graph.names);
        let (g, hasher) = (&self.graph, &self.hasher);
        self.by_name
            .reserve(g.values.capacity() - g.values.len(), |&id| {
                use std::hash::BuildHasher;
                hasher.hash_one(g.value_name(id))
            });
    }

    /// The value with this name, created on first use.
    pub fn value(&mut self, name: &str) -> ValueId {
        use std::hash::BuildHasher;
        let hash = self.hasher.hash_one(name);
        let g = &self.graph;
        if let Some(&id) = self.by_name.find(hash, |&id| g.value_name(id) == name) {
            return id;
        }
        let id = self.graph.values.len();
        let name = self.name(name);
        self.graph.values.push(Value {
            name,
            ..Value::default()
        });
        let (g, hasher) = (&self.graph, &self.hasher);
        self.by_name
            .insert_unique(hash, id, |&id| hasher.hash_one(g.value_name(id)));
        id
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.graph.values[id]
    }

    pub fn contains(&self, name: &str) -> bool {
        use std::hash::BuildHasher;
        let g = &self.graph;
        self.by_name
            .find(self.hasher.hash_one(name), |&id| g.value_name(id) == name)
            .is_some()
    }

    pub fn add_input(&mut self, id: ValueId) {
        self.graph.inputs.push(id);
    }

    pub fn add_output(&mut self, id: ValueId) {
        self.graph.outputs.push(id);
    }

    /// Appends the ids of `names` to `ports` ([`NO_VALUE`] for an empty name).
    fn ids(&mut self, names: &[impl AsRef<str>], ports: &mut Vec<u32>) {
        for n in names {
            let n = n.as_ref();
            ports.push(if n.is_empty() {
                NO_VALUE
            } else {
                let id = self.value(n);
                match u32::try_from(id).ok().filter(|&p| p != NO_VALUE) {
                    Some(p) => p,
                    None => {
                        self.values_overflow = true;
                        NO_VALUE
                    }
                }
            });
        }
    }

    /// Adds a node; empty names stand for omitted optional inputs and outputs.
    pub fn add_node(
        &mut self,
        name: &str,
        op_type: impl Into<Sym>,
        domain: impl Into<Sym>,
        inputs: &[impl AsRef<str>],
        outputs: &[impl AsRef<str>],
        attrs: Attrs,
    ) {
        let mut ports = Vec::with_capacity(inputs.len() + outputs.len());
        self.ids(inputs, &mut ports);
        self.ids(outputs, &mut ports);
        // exporters name a node's outputs after it (`/blocks.0/conv/Conv` writes
        // `/blocks.0/conv/Conv_output_0`; tf2onnx's `model/conv/Conv2D:0`): its name is then the
        // start of an output's text, not a copy (a quarter of the names of a graph of 100,000 nodes)
        let g = &self.graph;
        let shared = Ports(&ports[inputs.len()..]).values().find_map(|v| {
            let out = g.values[v].name;
            (!name.is_empty() && g.name(out).starts_with(name)).then_some(Name {
                start: out.start,
                len: name.len() as u32,
            })
        });
        let name = match shared {
            Some(n) => n,
            None => self.name(name),
        };
        let node = Node::with_ports(
            name,
            op_type.into(),
            domain.into(),
            ports,
            inputs.len(),
            attrs,
        );
        self.graph.nodes.push(node);
    }

    /// Links producers and consumers and sorts the nodes topologically.
    ///
    /// Errors (as a message; the caller names the file): a value with two producers, a node input
    /// that nothing defines (in the main graph), a cycle.
    /// Records that the node making `output` holds an inference-mode BatchNorm its exporter
    /// fused into it.
    pub fn mark_fused_norm(&mut self, output: &str) {
        self.graph.fused_eval_norms.push(output.to_string());
    }

    /// Records that the exporter removed the zero bias of the node making `output`.
    pub fn mark_removed_bias(&mut self, output: &str) {
        self.graph.removed_biases.push(output.to_string());
    }

    pub fn finish(mut self) -> Result<Graph, String> {
        // Unnamed nodes get a name from their position, so that every row and error can refer to one.
        for i in 0..self.graph.nodes.len() {
            if self.graph.nodes[i].name.is_empty() {
                let name = format!("{}_{i}", self.graph.nodes[i].op_type);
                self.graph.nodes[i].name = self.name(&name);
            }
        }
        if self.names_overflow {
            return Err("its node and value names take more than 4 GiB".into());
        }
        if self.values_overflow {
            return Err("it has more than 2^32 - 1 values".into());
        }
        let g = &mut self.graph;
        // the buffer doubled as it grew: up to half of it is empty
        Arc::make_mut(&mut g.names).shrink_to_fit();
        // each value's producer, written into the value as it is found (an array of them beside
        // the values was 4 MiB of a graph of 100,000 nodes, freed again at once)
        for n in 0..g.nodes.len() {
            let node = &g.nodes[n];
            for (slot, out) in node.outputs().iter().enumerate() {
                let Some(v) = out else { continue };
                let val = &g.values[v];
                if val.producer().is_some() || val.init.is_some() || g.inputs.contains(&v) {
                    return Err(format!(
                        "value '{}' is defined twice (second time as output of node {})",
                        g.value_name(v),
                        g.label(node)
                    ));
                }
                let node = u32::try_from(n)
                    .ok()
                    .filter(|&n| n != NONE)
                    .ok_or("the graph has more than 2^32 nodes")?;
                let slot = u32::try_from(slot)
                    .ok()
                    .filter(|&s| s & OUTER == 0)
                    .ok_or("a node has more than 2^31 outputs")?;
                let val = &mut g.values[v];
                val.node = node;
                val.slot = (val.slot & OUTER) | slot;
            }
        }
        for node in &g.nodes {
            for v in node.inputs().values() {
                let val = &g.values[v];
                let defined =
                    val.producer().is_some() || val.init.is_some() || g.inputs.contains(&v);
                if !defined {
                    if self.is_subgraph {
                        g.values[v].set_outer(true);
                    } else {
                        return Err(format!(
                            "node {} reads '{}', which no node, graph input or initializer defines",
                            g.label(node),
                            g.name(val.name)
                        ));
                    }
                }
            }
        }
        // a file whose nodes are already in order (the common case) keeps its array as it is, and
        // needs no sort to say so: every node reads only what earlier nodes make (Kahn's order,
        // which takes ready nodes in file order, is then the file's own)
        if !in_file_order(g) {
            let order = topo_order(g)?;
            let mut new_index = vec![0u32; g.nodes.len()];
            for (new, &old) in order.iter().enumerate() {
                // below 2^32: checked with the producers above
                new_index[old] = new as u32;
            }
            let mut old_nodes: Vec<Option<Node>> =
                std::mem::take(&mut g.nodes).into_iter().map(Some).collect();
            g.nodes = order
                .iter()
                .map(|&i| old_nodes[i].take().expect("each node is placed once"))
                .collect();
            for val in &mut g.values {
                if val.node != NONE {
                    val.node = new_index[val.node as usize];
                }
            }
        }
        let nodes = &g.nodes;
        g.readers = Lists::build(g.values.len(), || {
            nodes.iter().enumerate().flat_map(|(n, node)| {
                node.inputs()
                    .iter()
                    .enumerate()
                    // in 32 bits each, like a value's producer: 8 bytes a read, not 16
                    .filter_map(move |(slot, v)| v.map(|v| (v, (n as u32, slot as u32))))
            })
        });
        for v in g.outputs.clone() {
            let val = &g.values[v];
            if val.producer().is_none()
                && val.init.is_none()
                && !g.inputs.contains(&v)
                && !self.is_subgraph
            {
                return Err(format!(
                    "graph output '{}' is never defined",
                    g.name(val.name)
                ));
            }
        }
        // a graph is built once and read many times: give back what doubling left over
        g.values.shrink_to_fit();
        g.nodes.shrink_to_fit();
        Ok(self.graph)
    }
}

/// Whether every node reads only values that earlier nodes make (or that no node makes), and no
/// node holds a subgraph (whose captures [`topo_order`] follows).
fn in_file_order(g: &Graph) -> bool {
    g.nodes.iter().enumerate().all(|(i, node)| {
        node.attrs.subgraphs().next().is_none()
            && node
                .inputs()
                .iter()
                .flatten()
                .all(|v| g.values[v].producer().is_none_or(|(p, _)| p < i))
    })
}

/// Kahn's algorithm, taking ready nodes in file order so that an already sorted file keeps its order.
fn topo_order(g: &Graph) -> Result<Vec<NodeId>, String> {
    let producer = |v: ValueId| g.values[v].producer();
    let n = g.nodes.len();
    let mut indegree = vec![0usize; n];
    // each node's distinct predecessors, one after another (`starts[i]..starts[i + 1]`): one
    // array, not a list per node
    let mut preds_of: Vec<NodeId> = Vec::with_capacity(n);
    let mut starts: Vec<usize> = Vec::with_capacity(n + 1);
    starts.push(0);
    for (i, node) in g.nodes.iter().enumerate() {
        let first = preds_of.len();
        preds_of.extend(
            node.inputs()
                .iter()
                .flatten()
                .filter_map(|v| producer(v).map(|(p, _)| p)),
        );
        // a node reading a value captured by a subgraph also depends on the value's producer
        for (_, sub) in node.attrs.subgraphs() {
            collect_captures(sub, &mut |name| {
                if let Some(v) = g.value_by_name(name) {
                    if let Some((p, _)) = producer(v) {
                        preds_of.push(p);
                    }
                }
            });
        }
        let preds = &mut preds_of[first..];
        preds.sort_unstable();
        let mut kept = 0;
        for k in 0..preds.len() {
            if k == 0 || preds[k] != preds[kept - 1] {
                preds[kept] = preds[k];
                kept += 1;
            }
        }
        preds_of.truncate(first + kept);
        if preds_of[first..].contains(&i) {
            return Err(format!(
                "node {} reads its own output (a cycle)",
                g.label(node)
            ));
        }
        indegree[i] = kept;
        starts.push(preds_of.len());
    }
    // successors from the predecessors
    let succ = crate::util::lists::Lists::build(n, || {
        (0..n).flat_map(|i| {
            preds_of[starts[i]..starts[i + 1]]
                .iter()
                .map(move |&p| (p, i))
        })
    });
    drop((preds_of, starts));
    let mut ready: BinaryHeap<Reverse<NodeId>> =
        (0..n).filter(|&i| indegree[i] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(i)) = ready.pop() {
        order.push(i);
        for &s in succ.get(i) {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.push(Reverse(s));
            }
        }
    }
    if order.len() < n {
        let stuck = (0..n)
            .find(|&i| indegree[i] > 0)
            .expect("a node is left when the order is short");
        return Err(format!(
            "the graph has a cycle through node {}",
            g.label(&g.nodes[stuck])
        ));
    }
    Ok(order)
}

fn collect_captures(g: &Graph, f: &mut dyn FnMut(&str)) {
    for v in &g.values {
        if v.outer() {
            f(g.name(v.name));
        }
    }
    for node in &g.nodes {
        for (_, sub) in node.attrs.subgraphs() {
            // a nested subgraph's capture of a value this graph defines is not this graph's
            collect_captures(sub, &mut |name: &str| {
                let defined = g.value_by_name(name).is_some_and(|v| !g.values[v].outer());
                if !defined {
                    f(name);
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value is held per output of every node: its declared type, which most values of a large
    /// graph lack, is boxed and its producer is two `u32`s (120 → 56 bytes); a node's inputs and
    /// outputs are boxed slices (152 → 136 bytes), its op type and domain shared text (→ 120
    /// bytes), its inputs and outputs one slice (→ 112 bytes). Names are spans of the graph's
    /// one names buffer (value 56 → 40 bytes, node 112 → 96 bytes, and no allocation each). An attribute boxes its rare large variants (an attribute and its interned name:
    /// 64 → 48 bytes). A value's producer and its outer flag share two 32-bit words (40 → 32
    /// bytes).
    #[test]
    fn a_value_and_a_node_stay_small() {
        assert!(size_of::<Value>() <= 32, "{}", size_of::<Value>());
        // a node: its attributes a boxed slice, its registry position one 32-bit word, its op type
        // and domain thin pointers
        assert!(size_of::<Node>() <= 64, "{}", size_of::<Node>());
        let attr = size_of::<(super::super::Sym, super::super::Attr)>();
        assert!(attr <= 48, "{attr}");
        // an initializer (boxed in its value): its name and dimensions boxed slices
        let tensor = size_of::<Tensor>();
        assert!(tensor <= 80, "{tensor}");
    }

    fn node(b: &mut GraphBuilder, name: &str, ins: &[&str], outs: &[&str]) {
        b.add_node(name, "Relu", String::new(), ins, outs, Attrs::default());
    }

    /// A node's ports are 32-bit ids with a mark for an omitted one: read back, each is the value
    /// it was given, in order, and an omitted one is `None` (not value 0, nor the mark as an id).
    #[test]
    fn omitted_ports_read_as_none_between_values() {
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        b.add_node(
            "n",
            "Dropout",
            String::new(),
            &["x", "", "ratio"],
            &["", "y"],
            Attrs::default(),
        );
        let g = {
            let r = b.value("ratio");
            b.add_input(r);
            let y = b.value("y");
            b.add_output(y);
            b.finish().unwrap()
        };
        let n = &g.nodes[0];
        let (x, ratio, y) = (0, 1, 2);
        assert_eq!(n.inputs().to_vec(), [Some(x), None, Some(ratio)]);
        assert_eq!(n.outputs().to_vec(), [None, Some(y)]);
        assert_eq!(n.inputs().values().collect::<Vec<_>>(), [x, ratio]);
        assert_eq!(n.inputs().values().next_back(), Some(ratio));
        assert_eq!((n.inputs().len(), n.outputs().len()), (3, 2));
        assert_eq!(n.inputs().get(1), Some(None));
        assert_eq!(n.inputs().get(3), None);
        assert_eq!(
            (n.input(1), n.input(2), n.output(0), n.output(1)),
            (None, Some(ratio), None, Some(y))
        );
        assert_eq!(format!("{:?}", n.outputs()), "[None, Some(2)]");
        assert_eq!(g.values[y].producer(), Some((0, 1)));
        // a node made by hand keeps its ports the same way
        let m = Node::new(
            Name::default(),
            "Add".into(),
            "".into(),
            &[Some(y), None],
            &[Some(x)],
            Attrs::default(),
        );
        assert_eq!(m.inputs().to_vec(), [Some(y), None]);
        assert_eq!(m.outputs().to_vec(), [Some(x)]);
    }

    /// Every name is read from the buffer of the graph that holds it: a subgraph's names from
    /// its own, unnamed nodes under a name made from their op and position.
    #[test]
    fn names_are_read_from_their_own_graph() {
        let mut sub = GraphBuilder::new("body", true);
        node(&mut sub, "inner_relu", &["captured"], &["inner_out"]);
        let out = sub.value("inner_out");
        sub.add_output(out);
        let sub = sub.finish().unwrap();
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("input.1");
        b.add_input(x);
        node(&mut b, "", &["input.1"], &["captured"]);
        b.add_node(
            "/If_0",
            "If",
            String::new(),
            &["captured"],
            &["y"],
            Attrs(std::sync::Arc::new([(
                "then_branch".into(),
                crate::ir::Attr::Graph(Box::new(sub)),
            )])),
        );
        let y = b.value("y");
        b.add_output(y);
        let g = b.finish().unwrap();
        let names: Vec<&str> = g.nodes.iter().map(|n| g.name(n.name)).collect();
        assert_eq!(names, ["Relu_0", "/If_0"]);
        assert_eq!(g.label(&g.nodes[1]), "/If_0 (If)");
        let values: Vec<&str> = (0..g.values.len()).map(|v| g.value_name(v)).collect();
        assert_eq!(values, ["input.1", "captured", "y"]);
        assert_eq!(g.value_by_name("y"), Some(2));
        let subs = g.subgraphs();
        assert_eq!(subs.len(), 1);
        let (label, inner) = &subs[0];
        assert_eq!(label, "/If_0.then_branch");
        assert_eq!(inner.name(inner.nodes[0].name), "inner_relu");
        assert_eq!(
            inner.value_name(inner.nodes[0].input(0).unwrap()),
            "captured"
        );
        assert!(Name::default().is_empty());
    }

    #[test]
    fn sorts_out_of_order_nodes() {
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        node(&mut b, "second", &["y"], &["z"]);
        node(&mut b, "first", &["x"], &["y"]);
        let z = b.value("z");
        b.add_output(z);
        let g = b.finish().unwrap();
        let names: Vec<&str> = g.nodes.iter().map(|n| g.name(n.name)).collect();
        assert_eq!(names, ["first", "second"]);
        assert_eq!(g.values[z].producer(), Some((1, 0)));
        assert_eq!(g.consumers(x).iter().collect::<Vec<_>>(), vec![(0, 0)]);
    }

    #[test]
    fn a_node_follows_what_its_subgraph_captures() {
        // `If` comes first in the file; its branch reads `late`, which the next node makes
        let mut sub = GraphBuilder::new("then", true);
        node(&mut sub, "inner", &["late"], &["out"]);
        let out = sub.value("out");
        sub.add_output(out);
        let sub = sub.finish().unwrap();
        assert!(sub.values[sub.value_by_name("late").unwrap()].outer());
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        b.add_node(
            "if",
            "If",
            String::new(),
            &["x"],
            &["y"],
            Attrs(std::sync::Arc::new([(
                "then_branch".into(),
                crate::ir::Attr::Graph(Box::new(sub)),
            )])),
        );
        node(&mut b, "producer", &["x"], &["late"]);
        let g = b.finish().unwrap();
        let names: Vec<&str> = g.nodes.iter().map(|n| g.name(n.name)).collect();
        assert_eq!(names, ["producer", "if"]);
    }

    #[test]
    fn a_graph_in_file_order_is_what_the_sort_would_give() {
        // a diamond and a side chain, each node after what it reads: the shortcut `finish`
        // takes must agree with Kahn's order
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        node(&mut b, "a", &["x"], &["a1"]);
        node(&mut b, "side", &["x"], &["s1"]);
        node(&mut b, "b", &["a1"], &["b1"]);
        node(&mut b, "c", &["a1", "s1"], &["c1"]);
        node(&mut b, "d", &["b1", "c1"], &["d1"]);
        let g = b.finish().unwrap();
        assert!(in_file_order(&g));
        assert_eq!(
            topo_order(&g).unwrap(),
            (0..g.nodes.len()).collect::<Vec<_>>()
        );
        // one node moved before what it reads is not in order
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        node(&mut b, "b", &["a1"], &["b1"]);
        node(&mut b, "a", &["x"], &["a1"]);
        let mut g = b.finish().unwrap();
        assert!(in_file_order(&g));
        g.nodes.swap(0, 1);
        assert!(!in_file_order(&g));
    }

    #[test]
    fn keeps_file_order_for_independent_nodes() {
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        node(&mut b, "b", &["x"], &["y1"]);
        node(&mut b, "a", &["x"], &["y2"]);
        let g = b.finish().unwrap();
        assert_eq!(g.name(g.nodes[0].name), "b");
    }

    #[test]
    fn a_cycle_is_an_error() {
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        node(&mut b, "n1", &["x", "b"], &["a"]);
        node(&mut b, "n2", &["a"], &["b"]);
        let err = b.finish().unwrap_err();
        assert!(err.contains("cycle"), "{err}");
    }

    #[test]
    fn self_loop_is_an_error() {
        let mut b = GraphBuilder::new("g", false);
        node(&mut b, "n1", &["a"], &["a"]);
        assert!(b.finish().unwrap_err().contains("cycle"));
    }

    #[test]
    fn two_producers_are_an_error() {
        let mut b = GraphBuilder::new("g", false);
        let x = b.value("x");
        b.add_input(x);
        node(&mut b, "n1", &["x"], &["y"]);
        node(&mut b, "n2", &["x"], &["y"]);
        assert!(b.finish().unwrap_err().contains("defined twice"));
    }

    #[test]
    fn undefined_input_is_an_error_only_in_the_main_graph() {
        let mut b = GraphBuilder::new("g", false);
        node(&mut b, "n1", &["ghost"], &["y"]);
        assert!(b.finish().unwrap_err().contains("ghost"));
        let mut b = GraphBuilder::new("body", true);
        node(&mut b, "n1", &["outer_x"], &["y"]);
        let g = b.finish().unwrap();
        assert!(g.values[g.value_by_name("outer_x").unwrap()].outer());
    }
}
