//! ONNX loading: skim the file (load/skim.rs: the weights are skipped, never read), decode the
//! compact protobuf with prost (bytes fields are `bytes::Bytes` slices of it, not copies; the main
//! graph's nodes, initializers and value infos one message at a time, load/onnx_shell.rs), and build
//! the IR. External data is only checked (the file exists inside the model's directory and holds the
//! declared range), never read; so are the weights left in the model file itself.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use prost::Message;

use super::onnx_pb as pb;
use super::onnx_shell::{AttrView, Lazy, LazyError, NodeLists, NodeView, Shell, TensorView};
use crate::error::{Error, Result};
use crate::ir::{
    shape_to_string, Attr, Attrs, DType, Dim, ExternalData, Graph, GraphBuilder, Model, Sym,
    Symbols, Tensor, TensorData, TypeDecl, TypedData,
};
use crate::util::pages::Spent;

/// How errors and reports name standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// Loads an ONNX model from a path, or from standard input when the path is `-`.
pub fn load(path: &Path) -> Result<Model> {
    if path == Path::new("-") {
        let stdin = Path::new(STDIN_NAME);
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(stdin, e))?;
        if buf.is_empty() {
            return Err(Error::malformed(stdin, "standard input is empty"));
        }
        return decode_owned(stdin, Bytes::from(buf), None, true);
    }
    let compact = skim_file(path)?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let freed = compact.len();
    let model = decode_owned(path, compact, Some(dir), true);
    crate::util::pages::give_back_freed(freed);
    model
}

/// Maps a file read-only into a `Bytes`, advised for random access (GGUF headers).
pub(crate) fn map_file(path: &Path) -> Result<Bytes> {
    map_advised(path, false)
}

/// Maps a file that is read from start to end (a sharded checkpoint's index).
pub(crate) fn map_whole(path: &Path) -> Result<Bytes> {
    map_advised(path, true)
}

fn map_advised(path: &Path, sequential: bool) -> Result<Bytes> {
    let (file, len) = super::open_file(path)?;
    if len == 0 {
        return Err(Error::malformed(path, "the file is empty"));
    }
    // SAFETY: the mapping is read-only; nnlint never writes to a model it reads, and a model changed
    // by another process while nnlint runs is outside what any reader can guard against.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
    #[cfg(unix)]
    {
        // Random: without it, a cold page cache reads the whole file through readahead.
        let _ = map.advise(if sequential {
            memmap2::Advice::Sequential
        } else {
            memmap2::Advice::Random
        });
    }
    #[cfg(not(unix))]
    let _ = sequential;
    Ok(Bytes::from_owner(map))
}

/// Why an external-data location was not resolved.
pub(crate) enum Located {
    /// It leads out of the model's directory (the text says how).
    Escapes(&'static str),
    NotFound(PathBuf),
    Io(PathBuf, std::io::Error),
}

/// Resolves an external-data location against the model's directory: absolute paths, `..` and
/// links that lead out of the directory are refused.
pub(crate) fn resolve_location(
    dir: &Path,
    location: &str,
) -> std::result::Result<PathBuf, Located> {
    let rel = Path::new(location);
    let escapes = rel.is_absolute()
        || location.starts_with('/')
        || location.starts_with('\\')
        || location.contains(":\\")
        || rel.components().any(|c| {
            matches!(
                c,
                Component::ParentDir | Component::RootDir | Component::Prefix(_)
            )
        });
    if escapes {
        return Err(Located::Escapes("is outside the model's directory"));
    }
    let joined = dir.join(rel);
    let canonical = match joined.canonicalize() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Located::NotFound(joined))
        }
        Err(e) => return Err(Located::Io(joined, e)),
    };
    let root = dir
        .canonicalize()
        .map_err(|e| Located::Io(dir.to_path_buf(), e))?;
    if !canonical.starts_with(&root) {
        return Err(Located::Escapes(
            "resolves outside the model's directory (through a link)",
        ));
    }
    Ok(canonical)
}

/// Skims and decodes a model file into its compact protobuf: the large `raw_data` payloads stay in
/// the file, referenced under [`SELF_LOCATION`](super::skim::SELF_LOCATION) (see load/skim.rs).
pub fn load_proto(path: &Path) -> Result<pb::ModelProto> {
    pb::ModelProto::decode(skim_file(path)?).map_err(|e| decode_error(path, &e, &[]))
}

/// The compact protobuf of a model file (load/skim.rs).
fn skim_file(path: &Path) -> Result<Bytes> {
    let (file, len) = super::open_file(path)?;
    if len == 0 {
        return Err(Error::malformed(path, "the file is empty"));
    }
    super::skim::skim(&file, len).map(Bytes::from).map_err(|m| {
        Error::malformed(
            path,
            format!("not a valid ONNX model (protobuf decoding failed: {m})"),
        )
    })
}

/// Decodes a model from bytes. `dir` is the model's directory (for external data); `None` for stdin.
///
/// The main graph's nodes, initializers and value infos are decoded one message at a time as the
/// IR takes them (load/onnx_shell.rs), so the decoded protobuf of a large graph is never held whole.
pub fn decode(path: &Path, bytes: Bytes, dir: Option<&Path>) -> Result<Model> {
    decode_owned(path, bytes, dir, false)
}

/// [`decode`]; `owned` when the caller gives up the buffer (no other handle to it): the pages of
/// the nodes read are then given back as the IR is built ([`Spent`]).
fn decode_owned(path: &Path, bytes: Bytes, dir: Option<&Path>, owned: bool) -> Result<Model> {
    let input_len = bytes.len();
    // SAFETY: the buffer is the caller's own heap memory, kept alive by `proto` below until the
    // graph is built; the nodes the loader marks spent are read once (`Context::graph_view`), and
    // `Shell::validate` skips them
    let spent = owned.then(|| unsafe { Spent::new(&bytes) });
    let proto = Shell::decode(bytes).map_err(|e| decode_error(path, &e, &[]))?;
    if !proto.has_graph() {
        return Err(Error::malformed(
            path,
            "not an ONNX model: the protobuf has no graph",
        ));
    }
    let model = &proto.model;
    if model.ir_version.is_none() && model.opset_import.is_empty() {
        return Err(Error::malformed(
            path,
            "not an ONNX model: no IR version and no opset imports",
        ));
    }
    let mut cx = Context {
        path,
        dir,
        external_sizes: HashMap::new(),
        unavailable: Default::default(),
        warnings: Vec::new(),
        symbols: Symbols::default(),
        attr_lists: AttrLists::default(),
        spent,
        nodes_read: 0,
        inits_read: 0,
    };
    let g = &proto.graph;
    let view = GraphView {
        name: g.name.as_deref(),
        initializer: proto.initializers(),
        sparse_initializer: &g.sparse_initializer,
        input: &g.input,
        output: &g.output,
        value_info: proto.value_infos(),
        node: proto.nodes(),
    };
    let graph = match cx.graph_view(view, false) {
        Ok(graph) => graph,
        Err(e) => {
            // a corrupt message anywhere is reported before what a readable one means
            proto
                .validate(cx.nodes_read, cx.inits_read)
                .map_err(|l| cx.lazy_error(l))?;
            return Err(e);
        }
    };
    let mut warnings = Vec::new();
    let encoded = proto.encoded_len();
    if encoded != input_len {
        warnings.push(format!(
            "{} of {input_len} bytes belong to fields this ONNX schema (IR version 14) does not know; they were ignored",
            input_len.saturating_sub(encoded)
        ));
    }
    warnings.append(&mut cx.warnings);
    let opset_imports: Vec<(String, i64)> = model
        .opset_import
        .iter()
        .map(|o| (o.domain.clone().unwrap_or_default(), o.version.unwrap_or(0)))
        .collect();
    Ok(Model {
        path: path.to_path_buf(),
        ir_version: model.ir_version.unwrap_or(0),
        producer: format!(
            "{} {}",
            model.producer_name.as_deref().unwrap_or(""),
            model.producer_version.as_deref().unwrap_or("")
        )
        .trim()
        .to_string(),
        opset_imports,
        graph,
        metadata: model
            .metadata_props
            .iter()
            .map(|e| {
                (
                    e.key.clone().unwrap_or_default(),
                    e.value.clone().unwrap_or_default(),
                )
            })
            .collect(),
        warnings,
    })
}

/// A tensor's fields, from a [`TensorView`] or prost's `TensorProto`.
struct TensorParts<'t> {
    name: &'t str,
    data_type: Option<i32>,
    dims: &'t [i64],
    raw_data: Option<&'t Bytes>,
    external_data: Entries<'t>,
    data_location: Option<i32>,
    /// prost's message, for the fields a view never holds (typed values, strings).
    proto: Option<&'t pb::TensorProto>,
}

/// A tensor's `external_data` entries.
enum Entries<'t> {
    Proto(&'t [pb::StringStringEntryProto]),
    View(&'t [(&'t str, &'t str)]),
}

impl Entries<'_> {
    /// Each entry's key and value (`""` for an absent one).
    fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let (proto, view): (&[pb::StringStringEntryProto], &[(&str, &str)]) = match self {
            Entries::Proto(e) => (e, &[]),
            Entries::View(e) => (&[], e),
        };
        let proto = proto.iter().map(|kv| {
            (
                kv.key.as_deref().unwrap_or(""),
                kv.value.as_deref().unwrap_or(""),
            )
        });
        proto.chain(view.iter().copied())
    }
}

/// A node's fields, from a [`NodeView`] or prost's `NodeProto`.
struct Node<'n, 'a, I, O> {
    name: Option<&'n str>,
    op_type: Option<&'n str>,
    domain: Option<&'n str>,
    inputs: &'n [I],
    outputs: &'n [O],
    attribute: Attributes<'n, 'a>,
    metadata_props: &'n [pb::StringStringEntryProto],
}

/// A node's attributes: read in place (taken, their lists moved into the IR), or prost's.
enum Attributes<'n, 'a> {
    View(&'n mut Vec<AttrView<'a>>),
    Proto(&'n [pb::AttributeProto]),
}

/// A graph's fields, whether decoded already (a subgraph) or read one message at a time (the main
/// graph; see [`Lazy`]).
struct GraphView<'a> {
    name: Option<&'a str>,
    initializer: Lazy<'a, pb::TensorProto>,
    sparse_initializer: &'a [pb::SparseTensorProto],
    input: &'a [pb::ValueInfoProto],
    output: &'a [pb::ValueInfoProto],
    value_info: Lazy<'a, pb::ValueInfoProto>,
    node: Lazy<'a, pb::NodeProto>,
}

/// The protobuf decoder's error in one readable line. prost reports the field path innermost first,
/// one entry per level; a long path is cut to its outer and inner ends. Hitting prost's nesting limit
/// (100 levels of messages) is an unsupported model, not a corrupt one.
fn decode_error(path: &Path, e: &prost::DecodeError, outer: &[&str]) -> Error {
    let text = e.to_string();
    let mut rest = text
        .strip_prefix("failed to decode Protobuf message: ")
        .unwrap_or(&text);
    let mut stack = Vec::new();
    while let Some((head, tail)) = rest.split_once(": ") {
        if head.contains(' ') || !head.contains('.') {
            break;
        }
        stack.push(head);
        rest = tail;
    }
    stack.extend_from_slice(outer);
    if rest == "recursion limit reached" {
        return Error::refused(
            path,
            "the model is nested too deeply (subgraphs in subgraphs, or types in types): like other protobuf readers, nnlint stops at 100 levels of nested messages, about 30 levels of If/Loop/Scan bodies",
        );
    }
    if rest == "buffer underflow" {
        rest = "a field runs past the end of the data (a truncated file?)";
    }
    stack.reverse();
    let at = if stack.is_empty() {
        String::new()
    } else if stack.len() <= 4 {
        format!(" at {}", stack.join(" > "))
    } else {
        format!(
            " at {} > ... ({} levels) > {}",
            stack[0],
            stack.len() - 3,
            stack[stack.len() - 2..].join(" > ")
        )
    };
    Error::malformed(
        path,
        format!("not a valid ONNX model (protobuf decoding failed{at}: {rest})"),
    )
}

struct Context<'a> {
    path: &'a Path,
    dir: Option<&'a Path>,
    /// Canonical path and length of each external-data file already checked.
    external_sizes: HashMap<String, (Arc<Path>, u64)>,
    /// External files found missing or short (warned about once each).
    unavailable: std::collections::HashSet<String>,
    warnings: Vec<String>,
    /// The op types, domains and attribute names of every graph in the file, one copy each.
    symbols: Symbols,
    /// Attribute lists already decoded, by their encoding.
    attr_lists: AttrLists,
    /// The buffer of the main graph's initializers and nodes, where the loader owns it: their
    /// pages are given back as they are read.
    spent: Option<Spent>,
    /// How many of the main graph's nodes were read and added to the IR.
    nodes_read: usize,
    /// How many of the main graph's initializers were read and added to the IR.
    inits_read: usize,
}

/// The attribute lists of the nodes decoded so far, each under its encoding: nodes whose
/// attributes are encoded alike (every convolution of a network with the same kernel, strides and
/// pads) share one decoded list. Only lists read in place (text and numbers, see
/// [`AttrView::encoded`]) are kept: what they decode to depends on their bytes alone. The keys are
/// freed with the loader.
#[derive(Default)]
struct AttrLists {
    table: hashbrown::HashTable<(Box<[u8]>, Attrs)>,
    hasher: foldhash::fast::FixedState,
    /// The encoding of the node at hand, refilled for each.
    key: Vec<u8>,
}

impl AttrLists {
    /// Writes the encoding of `list` into `self.key` (each attribute's length, then its bytes);
    /// `false` for an empty list or one with an attribute prost decoded.
    fn encode(&mut self, list: &[AttrView<'_>]) -> bool {
        self.key.clear();
        for a in list {
            let Some(bytes) = a.encoded else {
                return false;
            };
            self.key
                .extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            self.key.extend_from_slice(bytes);
        }
        !list.is_empty()
    }

    fn hash(&self, key: &[u8]) -> u64 {
        std::hash::BuildHasher::hash_one(&self.hasher, key)
    }

    /// The list decoded before for attributes encoded as `list` is; else the key under which to
    /// keep `list` once decoded (`None`: it is not kept).
    fn find(&mut self, list: &[AttrView<'_>]) -> std::result::Result<Attrs, Option<Box<[u8]>>> {
        if !self.encode(list) {
            return Err(None);
        }
        let h = self.hash(&self.key);
        match self.table.find(h, |(k, _)| **k == *self.key) {
            Some((_, a)) => Ok(a.clone()),
            None => Err(Some(self.key.as_slice().into())),
        }
    }

    fn insert(&mut self, key: Box<[u8]>, attrs: &Attrs) {
        let h = self.hash(&key);
        let hasher = &self.hasher;
        self.table.insert_unique(h, (key, attrs.clone()), |(k, _)| {
            std::hash::BuildHasher::hash_one(hasher, &**k)
        });
    }
}

impl Context<'_> {
    fn malformed(&self, message: impl Into<String>) -> Error {
        Error::malformed(self.path, message)
    }

    fn lazy_error(&self, l: LazyError) -> Error {
        decode_error(self.path, &l.error, &l.outer)
    }

    /// A subgraph, decoded with the attribute that holds it.
    fn graph(&mut self, g: &pb::GraphProto, is_subgraph: bool) -> Result<Graph> {
        self.graph_view(
            GraphView {
                name: g.name.as_deref(),
                initializer: Lazy::Decoded(&g.initializer),
                sparse_initializer: &g.sparse_initializer,
                input: &g.input,
                output: &g.output,
                value_info: Lazy::Decoded(&g.value_info),
                node: Lazy::Decoded(&g.node),
            },
            is_subgraph,
        )
    }

    fn graph_view(&mut self, g: GraphView<'_>, is_subgraph: bool) -> Result<Graph> {
        let name = g.name.unwrap_or_default().to_string();
        let mut b = GraphBuilder::new(name, is_subgraph);
        // a value per initializer and graph input, and about one per node output
        b.reserve(
            g.initializer.len() + g.sparse_initializer.len() + g.input.len() + g.node.len(),
            g.node.len(),
        );
        // the main graph's initializers and nodes are read once, in order: each is spent once in
        // the IR, unless the IR keeps some of its bytes (a payload left a slice of the buffer)
        let mut spent = if is_subgraph { None } else { self.spent.take() };
        for i in 0..g.initializer.len() {
            let raw = g.initializer.raw(i);
            let view = raw.and_then(TensorView::read);
            let t = match view {
                Some(v) => self.tensor_of(
                    TensorParts {
                        name: v.name,
                        data_type: v.data_type,
                        dims: &v.dims,
                        raw_data: v.raw_data.as_ref(),
                        external_data: Entries::View(&v.external_data),
                        data_location: v.data_location,
                        proto: None,
                    },
                    "initializer",
                )?,
                // one the view does not take: as prost decodes it
                None => {
                    let tp = g.initializer.get(i).map_err(|l| self.lazy_error(l))?;
                    self.tensor(&tp, "initializer")?
                }
            };
            if b.contains(&t.name) {
                return Err(self.malformed(format!("initializer '{}' is defined twice", t.name)));
            }
            let keeps = spent
                .as_ref()
                .is_some_and(|s| matches!(&t.data, TensorData::Raw(raw) if s.holds(raw)));
            let id = b.value(&t.name);
            b.value_mut(id).init = Some(Box::new(t));
            spend(spent.as_mut(), raw, keeps);
            if !is_subgraph {
                self.inits_read = i + 1;
            }
        }
        // a file written in field order holds its nodes before its initializers: their runs are
        // another repeated field's
        if let Some(spent) = spent.as_mut() {
            spent.restart();
        }
        for sp in g.sparse_initializer {
            let t = self.sparse(sp)?;
            if b.contains(&t.name) {
                return Err(self.malformed(format!("initializer '{}' is defined twice", t.name)));
            }
            let id = b.value(&t.name);
            b.value_mut(id).init = Some(Box::new(t));
        }
        for vi in g.input {
            let name = vi.name.clone().unwrap_or_default();
            let decl = self.value_info(vi)?;
            let id = b.value(&name);
            let v = b.value_mut(id);
            v.declared = decl.map(Box::new);
            if v.init.is_none() {
                b.add_input(id);
            }
        }
        let outputs = g.output.iter().map(|vi| Ok(std::borrow::Cow::Borrowed(vi)));
        for vi in outputs.chain(g.value_info.iter()) {
            let vi = vi.map_err(|l| self.lazy_error(l))?;
            let decl = self.value_info(&vi)?;
            let id = b.value(vi.name.as_deref().unwrap_or_default());
            if decl.is_some() {
                b.value_mut(id).declared = decl.map(Box::new);
            }
        }
        for vi in g.output {
            let id = b.value(vi.name.as_deref().unwrap_or_default());
            b.add_output(id);
        }
        // names borrowed from the buffer, lists reused from node to node
        let mut lists = NodeLists::default();
        for i in 0..g.node.len() {
            let raw = g.node.raw(i);
            let view = raw.and_then(|raw| NodeView::read(raw, &mut lists));
            let keeps = if let Some(v) = view {
                let keeps = self.node(
                    &mut b,
                    spent.as_ref(),
                    Node {
                        name: v.name,
                        op_type: v.op_type,
                        domain: v.domain,
                        inputs: &lists.inputs,
                        outputs: &lists.outputs,
                        attribute: Attributes::View(&mut lists.attributes),
                        metadata_props: &v.metadata_props,
                    },
                )?;
                // nothing borrowed from the node is kept past it (`node` empties the attributes)
                lists.inputs.clear();
                lists.outputs.clear();
                keeps
            } else {
                // a subgraph's node, or one the view does not take: as prost decodes it
                let n = g.node.get(i).map_err(|l| self.lazy_error(l))?;
                self.node(
                    &mut b,
                    spent.as_ref(),
                    Node {
                        name: n.name.as_deref(),
                        op_type: n.op_type.as_deref(),
                        domain: n.domain.as_deref(),
                        inputs: &n.input,
                        outputs: &n.output,
                        attribute: Attributes::Proto(&n.attribute),
                        metadata_props: &n.metadata_props,
                    },
                )?
            };
            spend(spent.as_mut(), raw, keeps);
            if !is_subgraph {
                self.nodes_read = i + 1;
            }
        }
        b.finish().map_err(|m| Error::graph(self.path, m))
    }

    /// Adds a node to the IR; returns whether its attributes keep bytes of the buffer `spent`
    /// tracks ([`keeps_bytes`]; `false` without one).
    fn node<I: AsRef<str>, O: AsRef<str>>(
        &mut self,
        b: &mut GraphBuilder,
        spent: Option<&Spent>,
        n: Node<'_, '_, I, O>,
    ) -> Result<bool> {
        let op_type = n.op_type.unwrap_or_default();
        if op_type.is_empty() {
            return Err(self.malformed(format!("node '{}' has no op_type", n.name.unwrap_or(""))));
        }
        // exactly as many as there are (a `collect` through `Result` starts at four and
        // doubles: ~8 MiB of empty slots on a graph of 100,000 nodes)
        let attrs = match n.attribute {
            Attributes::View(list) => match self.attr_lists.find(list) {
                Ok(shared) => {
                    list.clear();
                    shared
                }
                Err(key) => {
                    let mut attrs = Vec::with_capacity(list.len());
                    for a in list.drain(..) {
                        let name = a.name;
                        let mut a = std::borrow::Cow::Owned(a.proto);
                        attrs.push(self.attribute(name, &mut a, op_type)?);
                    }
                    let attrs = Attrs(attrs.into());
                    if let Some(key) = key {
                        self.attr_lists.insert(key, &attrs);
                    }
                    attrs
                }
            },
            Attributes::Proto(list) => {
                let mut attrs = Vec::with_capacity(list.len());
                for a in list {
                    let mut a = std::borrow::Cow::Borrowed(a);
                    attrs.push(self.attribute(None, &mut a, op_type)?);
                }
                Attrs(attrs.into())
            }
        };
        if let Some(out) = n.outputs.first() {
            let out = out.as_ref();
            if op_type != "BatchNormalization" && fused_eval_norm(n.metadata_props) {
                b.mark_fused_norm(out);
            } else if removed_bias(n.metadata_props) {
                b.mark_removed_bias(out);
            }
        }
        let keeps = spent.is_some_and(|s| keeps_bytes(&attrs, s));
        b.add_node(
            n.name.unwrap_or_default(),
            self.symbols.get(op_type),
            self.symbols.get(n.domain.unwrap_or_default()),
            n.inputs,
            n.outputs,
            attrs,
        );
        Ok(keeps)
    }

    fn value_info(&self, vi: &pb::ValueInfoProto) -> Result<Option<TypeDecl>> {
        let name = vi.name.as_deref().unwrap_or("");
        match &vi.r#type {
            Some(tp) => self.type_decl(tp, name).map(Some),
            None => Ok(None),
        }
    }

    fn type_decl(&self, tp: &pb::TypeProto, name: &str) -> Result<TypeDecl> {
        use pb::type_proto::Value;
        let (elem, shape) = match &tp.value {
            Some(Value::TensorType(t)) => (t.elem_type, t.shape.as_ref()),
            Some(Value::SparseTensorType(t)) => (t.elem_type, t.shape.as_ref()),
            _ => return Ok(TypeDecl::default()),
        };
        let dtype = elem.and_then(DType::from_onnx);
        let shape = match shape {
            None => None,
            Some(s) => Some(
                s.dim
                    .iter()
                    .enumerate()
                    .map(|(axis, d)| {
                        use pb::tensor_shape_proto::dimension::Value as D;
                        // dynamic axes as exporters write them: -1 (Paddle2ONNX), an empty or
                        // missing dim_param, and '?' (which names no size: two '?' axes are two
                        // sizes) each get a name of their own, bindable with --dim or --input
                        match &d.value {
                            Some(D::DimValue(v)) if *v >= 0 => Ok(Dim::known(*v)),
                            Some(D::DimParam(p)) if !p.is_empty() && p != "?" => Ok(Dim::sym(p)),
                            _ => Ok(Dim::sym(&format!("{name}_d{axis}"))),
                        }
                    })
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        // sizes are computed in i64: a declared shape whose known part cannot be sized is refused here
        // rather than silently left unknown
        if let Some(dims) = &shape {
            let bytes = dtype.and_then(|d| d.bits()).unwrap_or(8).div_ceil(8) as i64;
            let size = dims
                .iter()
                .filter_map(Dim::as_i64)
                .try_fold(bytes, |acc, d| acc.checked_mul(d));
            if size.is_none() && !dims.iter().any(|d| d.as_i64() == Some(0)) {
                return Err(self.malformed(format!(
                    "value '{name}' declares a shape {} whose size overflows",
                    shape_to_string(dims)
                )));
            }
        }
        Ok(TypeDecl { dtype, shape })
    }

    fn tensor(&mut self, tp: &pb::TensorProto, what: &str) -> Result<Tensor> {
        self.tensor_of(
            TensorParts {
                name: tp.name.as_deref().unwrap_or_default(),
                data_type: tp.data_type,
                dims: &tp.dims,
                raw_data: tp.raw_data.as_ref(),
                external_data: Entries::Proto(&tp.external_data),
                data_location: tp.data_location,
                proto: Some(tp),
            },
            what,
        )
    }

    fn tensor_of(&mut self, tp: TensorParts<'_>, what: &str) -> Result<Tensor> {
        let name = tp.name.to_string();
        let code = tp.data_type.unwrap_or(0);
        let dtype = DType::from_onnx(code).ok_or_else(|| {
            self.malformed(format!("{what} '{name}' has an unknown data type ({code})"))
        })?;
        let mut dims = Vec::with_capacity(tp.dims.len());
        for &d in tp.dims {
            dims.push(u64::try_from(d).map_err(|_| {
                self.malformed(format!("{what} '{name}' has a negative dimension ({d})"))
            })?);
        }
        let mut t = Tensor {
            name: name.into(),
            dtype,
            dims: dims.into(),
            data: TensorData::Empty,
        };
        let numel = t.numel().ok_or_else(|| {
            self.malformed(format!(
                "{what} '{}' has dimensions {:?} whose product overflows",
                t.name, t.dims
            ))
        })?;
        let expected = dtype.bytes_for(numel);
        if expected.is_none() && dtype != DType::String {
            return Err(self.malformed(format!(
                "{what} '{}' has dimensions {:?} whose size in bytes overflows",
                t.name, t.dims
            )));
        }
        let external = tp.data_location == Some(pb::tensor_proto::DataLocation::External as i32);
        if external {
            t.data = match self.external(&tp.external_data, &t.name, expected)? {
                Ok(ext) => TensorData::External(ext),
                Err(why) => TensorData::Unavailable(why),
            };
        } else if let Some(raw) = tp.raw_data {
            if let Some(expected) = expected {
                if raw.len() as u64 != expected {
                    return Err(self.malformed(format!(
                        "{what} '{}': raw_data holds {} bytes, but {} {dtype} elements need {expected}",
                        t.name,
                        raw.len(),
                        numel
                    )));
                }
            }
            t.data = TensorData::Raw(detach(raw));
        } else if let Some((typed, len)) = tp.proto.and_then(|tp| typed_data(tp, dtype)) {
            let want = if matches!(dtype, DType::C64 | DType::C128) {
                numel.checked_mul(2)
            } else {
                Some(numel)
            };
            if Some(len as u64) != want && !(len == 0 && numel == 0) {
                return Err(self.malformed(format!(
                    "{what} '{}': typed data holds {len} values, but its shape {:?} has {numel} elements",
                    t.name, t.dims
                )));
            }
            t.data = TensorData::Typed(typed);
        } else if dtype == DType::String {
            let strings = tp.proto.map_or(0, |tp| tp.string_data.len());
            if strings as u64 != numel {
                return Err(self.malformed(format!(
                    "{what} '{}': {strings} strings for {numel} elements",
                    t.name
                )));
            }
        } else if numel > 0 {
            return Err(self.malformed(format!(
                "{what} '{}' has {numel} elements but no data",
                t.name
            )));
        }
        Ok(t)
    }

    fn sparse(&mut self, sp: &pb::SparseTensorProto) -> Result<Tensor> {
        let values = sp
            .values
            .as_ref()
            .ok_or_else(|| self.malformed("a sparse initializer has no values"))?;
        let mut t = self.tensor(values, "sparse initializer")?;
        t.dims = sp
            .dims
            .iter()
            .map(|&d| {
                u64::try_from(d).map_err(|_| {
                    self.malformed(format!(
                        "sparse initializer '{}' has a negative dimension ({d})",
                        t.name
                    ))
                })
            })
            .collect::<Result<Box<[u64]>>>()?;
        if t.numel().is_none() || (t.byte_size().is_none() && t.dtype != DType::String) {
            return Err(self.malformed(format!(
                "sparse initializer '{}' has dimensions {:?} whose size overflows",
                t.name, t.dims
            )));
        }
        t.data = TensorData::Empty;
        Ok(t)
    }

    /// Checks an external-data reference: a relative location inside the model's directory, an
    /// existing file, and a range within it. Nothing is read. A missing file or a range past its
    /// end is not an error: the analysis needs no weight bytes, so the tensor is marked
    /// unavailable (the inner `Err`, with the reason) and the model gets a warning, once per file.
    fn external(
        &mut self,
        entries: &Entries<'_>,
        name: &str,
        expected: Option<u64>,
    ) -> Result<std::result::Result<ExternalData, String>> {
        let mut location = None;
        let mut offset = 0u64;
        let mut length = None;
        for (key, value) in entries.iter() {
            let parse = |v: &str| {
                v.parse::<u64>().map_err(|_| {
                    self.malformed(format!(
                        "initializer '{name}': external data {key} '{v}' is not a non-negative integer"
                    ))
                })
            };
            match key {
                "location" => location = Some(value),
                "offset" => offset = parse(value)?,
                "length" => length = Some(parse(value)?),
                _ => {}
            }
        }
        let location = location.ok_or_else(|| {
            self.malformed(format!(
                "initializer '{name}' is stored externally but names no location"
            ))
        })?;
        let Some(dir) = self.dir else {
            return Err(Error::refused(
                self.path,
                format!("initializer '{name}' has external data, which needs the model's directory: pass the model as a file, not on standard input"),
            ));
        };
        let Some((file, size)) = self.external_file(dir, location, name)? else {
            let why = format!("external data file '{location}' not found");
            self.unavailable(location, &why);
            return Ok(Err(why));
        };
        let length = match (length, expected) {
            (Some(l), Some(e)) if l != e => {
                return Err(self.malformed(format!(
                    "initializer '{name}': external data length {l} does not match the {e} bytes its shape and type need"
                )))
            }
            (Some(l), _) => l,
            (None, Some(e)) => e,
            (None, None) => size.saturating_sub(offset),
        };
        let end = offset.checked_add(length).ok_or_else(|| {
            self.malformed(format!(
                "initializer '{name}': external data offset + length overflows"
            ))
        })?;
        if end > size {
            let why = format!(
                "external data range {offset}..{end} lies beyond the end of '{location}' ({size} bytes)"
            );
            self.unavailable(location, &why);
            return Ok(Err(why));
        }
        Ok(Ok(ExternalData {
            path: file,
            offset,
            length,
        }))
    }

    /// Records, once per external file, that some of its tensors cannot be read.
    fn unavailable(&mut self, location: &str, why: &str) {
        if self.unavailable.insert(location.to_string()) {
            self.warnings.push(format!(
                "{why}: analysed from the graph alone (shapes, parameters, activations and MACs need no weight bytes); rewrite, verify and duplicate-initializer need them"
            ));
        }
    }

    /// The canonical path and size of an external data file; `None` when it does not exist.
    fn external_file(
        &mut self,
        dir: &Path,
        location: &str,
        name: &str,
    ) -> Result<Option<(Arc<Path>, u64)>> {
        if let Some(hit) = self.external_sizes.get(location) {
            return Ok(Some(hit.clone()));
        }
        if self.unavailable.contains(location) {
            return Ok(None);
        }
        if location == super::skim::SELF_LOCATION {
            // raw_data the loader left in the model file (load/skim.rs)
            let meta = std::fs::metadata(self.path).map_err(|e| Error::io(self.path, e))?;
            let hit = (Arc::from(self.path), meta.len());
            self.external_sizes
                .insert(location.to_string(), hit.clone());
            return Ok(Some(hit));
        }
        let canonical = match resolve_location(dir, location) {
            Ok(c) => c,
            Err(Located::Escapes(how)) => {
                return Err(Error::refused(
                    self.path,
                    format!("initializer '{name}': external data location '{location}' {how}"),
                ))
            }
            Err(Located::NotFound(_)) => return Ok(None),
            Err(Located::Io(path, e)) => return Err(Error::io(path, e)),
        };
        let meta = std::fs::metadata(&canonical).map_err(|e| Error::io(&canonical, e))?;
        if !meta.is_file() {
            return Err(self.malformed(format!(
                "initializer '{name}': external data location '{location}' is not a file"
            )));
        }
        let hit = (Arc::from(canonical), meta.len());
        self.external_sizes
            .insert(location.to_string(), hit.clone());
        Ok(Some(hit))
    }

    /// An attribute for the IR; `name` where it was read apart from the message. Lists are moved
    /// out of an owned message, not copied.
    fn attribute(
        &mut self,
        name: Option<&str>,
        a: &mut std::borrow::Cow<'_, pb::AttributeProto>,
        op_type: &str,
    ) -> Result<(Sym, Attr)> {
        use pb::attribute_proto::AttributeType as T;
        let name = self
            .symbols
            .get(name.or(a.name.as_deref()).unwrap_or_default());
        if let Some(r) = &a.ref_attr_name {
            return Ok((name, Attr::Ref(r.clone())));
        }
        let ty = match a.r#type.and_then(|t| T::try_from(t).ok()) {
            Some(t) if t != T::Undefined => t,
            // IR version < 2 files have no type: take whichever field is set.
            _ => {
                if a.f.is_some() {
                    T::Float
                } else if a.i.is_some() {
                    T::Int
                } else if a.s.is_some() {
                    T::String
                } else if a.t.is_some() {
                    T::Tensor
                } else if a.g.is_some() {
                    T::Graph
                } else if !a.floats.is_empty() {
                    T::Floats
                } else if !a.ints.is_empty() {
                    T::Ints
                } else if !a.strings.is_empty() {
                    T::Strings
                } else if !a.tensors.is_empty() {
                    T::Tensors
                } else if !a.graphs.is_empty() {
                    T::Graphs
                } else {
                    T::Ints
                }
            }
        };
        let missing = || {
            self.malformed(format!(
                "a {op_type} node's attribute '{name}' is declared {} but holds no value",
                ty.as_str_name()
            ))
        };
        let attr = match ty {
            T::Float => Attr::Float(a.f.ok_or_else(missing)?),
            T::Int => Attr::Int(a.i.ok_or_else(missing)?),
            T::String => Attr::String(a.s.as_ref().ok_or_else(missing)?.to_vec()),
            T::Tensor => {
                let t = a.t.as_ref().ok_or_else(missing)?;
                Attr::Tensor(Box::new(self.tensor(t, "constant")?))
            }
            T::Graph => {
                let g = a.g.as_ref().ok_or_else(missing)?;
                Attr::Graph(Box::new(self.graph(g, true)?))
            }
            T::SparseTensor => {
                let s = a.sparse_tensor.as_ref().ok_or_else(missing)?;
                let t = self.sparse(s)?;
                let dims = t.dims.to_vec();
                Attr::SparseTensor(Box::new((t, dims)))
            }
            T::TypeProto => Attr::Type(Box::new(
                self.type_decl(a.tp.as_ref().ok_or_else(missing)?, &name)?,
            )),
            T::Floats => Attr::Floats(match a {
                std::borrow::Cow::Owned(a) => std::mem::take(&mut a.floats),
                std::borrow::Cow::Borrowed(a) => a.floats.clone(),
            }),
            T::Ints => Attr::Ints(match a {
                std::borrow::Cow::Owned(a) => std::mem::take(&mut a.ints),
                std::borrow::Cow::Borrowed(a) => a.ints.clone(),
            }),
            T::Strings => Attr::Strings(a.strings.iter().map(|s| s.to_vec()).collect()),
            T::Tensors => Attr::Tensors(
                a.tensors
                    .iter()
                    .map(|t| self.tensor(t, "constant"))
                    .collect::<Result<_>>()?,
            ),
            T::Graphs => Attr::Graphs(
                a.graphs
                    .iter()
                    .map(|g| self.graph(g, true))
                    .collect::<Result<_>>()?,
            ),
            T::SparseTensors => Attr::SparseTensors(
                a.sparse_tensors
                    .iter()
                    .map(|s| {
                        let t = self.sparse(s)?;
                        let dims = t.dims.to_vec();
                        Ok((t, dims))
                    })
                    .collect::<Result<_>>()?,
            ),
            T::TypeProtos => Attr::Types(
                a.type_protos
                    .iter()
                    .map(|t| self.type_decl(t, &name))
                    .collect::<Result<_>>()?,
            ),
            T::Undefined => unreachable!("replaced above"),
        };
        Ok((name, attr))
    }
}

/// Records the next message of a repeated field read into the IR (`raw`, where it was read from the
/// buffer `spent` tracks): spent unless the IR `keeps` some of its bytes.
fn spend(spent: Option<&mut Spent>, raw: Option<&Bytes>, keeps: bool) {
    if let (Some(spent), Some(raw)) = (spent, raw) {
        spent.next(raw, !keeps);
        #[cfg(test)]
        tests::GIVEN_BACK.set(spent.released());
    }
}

/// Whether a node's attributes keep bytes of the buffer `spent` tracks (a tensor whose payload
/// [`detach`] left a slice of it), or hold a graph (whose own tensors are not looked into).
fn keeps_bytes(attrs: &Attrs, spent: &Spent) -> bool {
    let keeps = |t: &Tensor| matches!(&t.data, TensorData::Raw(raw) if spent.holds(raw));
    attrs.0.iter().any(|(_, a)| match a {
        Attr::Tensor(t) => keeps(t),
        Attr::Tensors(ts) => ts.iter().any(keeps),
        Attr::Graph(_) | Attr::Graphs(_) | Attr::SparseTensor(_) | Attr::SparseTensors(_) => true,
        _ => false,
    })
}

/// A stored payload for the IR. Payloads up to 64 KiB are copied out of the decoded buffer, so
/// that the buffer (names and message structure, 17 MiB for a graph of 100,000 nodes) is freed
/// once the IR is built: a file's larger payloads are left in it by the skim (load/skim.rs), and
/// only a model read from standard input, which is not skimmed, keeps slices of its buffer.
fn detach(raw: &Bytes) -> Bytes {
    if raw.len() <= 64 << 10 {
        Bytes::copy_from_slice(raw)
    } else {
        raw.clone()
    }
}

/// The typed repeated field that holds a tensor's values, with its length.
fn typed_data(tp: &pb::TensorProto, dtype: DType) -> Option<(TypedData, usize)> {
    use DType::*;
    let nonempty = |len: usize| len > 0;
    match dtype {
        F32 | C64 if nonempty(tp.float_data.len()) => {
            Some((TypedData::F32(tp.float_data.clone()), tp.float_data.len()))
        }
        F64 | C128 if nonempty(tp.double_data.len()) => {
            Some((TypedData::F64(tp.double_data.clone()), tp.double_data.len()))
        }
        I64 if nonempty(tp.int64_data.len()) => {
            Some((TypedData::I64(tp.int64_data.clone()), tp.int64_data.len()))
        }
        U32 | U64 if nonempty(tp.uint64_data.len()) => {
            Some((TypedData::U64(tp.uint64_data.clone()), tp.uint64_data.len()))
        }
        I32 | I16 | I8 | U16 | U8 | Bool | F16 | BF16 | F8E4M3FN | F8E4M3FNUZ | F8E5M2
        | F8E5M2FNUZ | F8E8M0 | I4 | U4 | I2 | U2 | F4E2M1 | F6E2M3 | F6E3M2
            if nonempty(tp.int32_data.len()) =>
        {
            Some((TypedData::I32(tp.int32_data.clone()), tp.int32_data.len()))
        }
        _ => None,
    }
}

/// Whether the onnxscript optimizer removed a node's zero bias (`RemoveOptionalBiasFromGemm`,
/// `...FromConv`): the model has that parameter, the file does not.
fn removed_bias(props: &[pb::StringStringEntryProto]) -> bool {
    props.iter().any(|p| {
        p.key.as_deref() == Some("pkg.onnxscript.rewriter.rule_name")
            && p.value
                .as_deref()
                .is_some_and(|v| v.contains("RemoveOptionalBiasFrom"))
    })
}

/// Whether a node's metadata (PyTorch's dynamo exporter and the onnxscript optimizer write it)
/// says an inference-mode BatchNorm was fused into it.
fn fused_eval_norm(props: &[pb::StringStringEntryProto]) -> bool {
    props.iter().any(|p| {
        let (k, v) = (
            p.key.as_deref().unwrap_or(""),
            p.value.as_deref().unwrap_or(""),
        );
        (k == "pkg.onnxscript.rewriter.rule_name" && v.contains("FuseBatchNorm"))
            || ((k == "namespace" || k == "pkg.torch.onnx.class_hierarchy")
                && v.contains("_native_batch_norm_legit_no_training"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Bytes of the main graph's initializers and nodes the last decoding on this thread gave
        /// back.
        pub(super) static GIVEN_BACK: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    fn node(op: &str, name: String, input: String, output: String) -> pb::NodeProto {
        pb::NodeProto {
            op_type: Some(op.into()),
            name: Some(name),
            input: vec![input],
            output: vec![output],
            ..Default::default()
        }
    }

    /// A model of the encoded graph `graph` (its last field).
    fn model(graph: &[u8]) -> Vec<u8> {
        let mut m = pb::ModelProto {
            ir_version: Some(8),
            opset_import: vec![pb::OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            ..Default::default()
        }
        .encode_to_vec();
        prost::encoding::bytes::encode(7, &graph.to_vec(), &mut m);
        m
    }

    /// The encoded graph of a chain of `n` nodes (with an attribute read in place) from `x`, with
    /// a `Constant` of `payload` bytes of raw data after node `at`.
    fn chain(n: usize, at: usize, payload: usize) -> Vec<u8> {
        let mut nodes = Vec::new();
        let mut last = "x".to_string();
        for i in 0..n {
            let out = format!("/layers.{i}/act/LeakyRelu_output_0");
            let mut relu = node(
                "LeakyRelu",
                format!("/layers.{i}/act/LeakyRelu"),
                last,
                out.clone(),
            );
            relu.attribute.push(pb::AttributeProto {
                name: Some("alpha".into()),
                f: Some(0.125),
                r#type: Some(pb::attribute_proto::AttributeType::Float as i32),
                ..Default::default()
            });
            nodes.push(relu);
            last = out;
            if i == at {
                let t = pb::TensorProto {
                    dims: vec![payload as i64],
                    data_type: Some(pb::tensor_proto::DataType::Uint8 as i32),
                    raw_data: Some((0..payload).map(|k| (k % 251) as u8 + 1).collect()),
                    ..Default::default()
                };
                nodes.push(pb::NodeProto {
                    op_type: Some("Constant".into()),
                    name: Some("kept".into()),
                    output: vec!["kept_output".into()],
                    attribute: vec![pb::AttributeProto {
                        name: Some("value".into()),
                        t: Some(Box::new(t)),
                        r#type: Some(pb::attribute_proto::AttributeType::Tensor as i32),
                        ..Default::default()
                    }],
                    ..Default::default()
                });
            }
        }
        let value = |name: &str| pb::ValueInfoProto {
            name: Some(name.into()),
            ..Default::default()
        };
        pb::GraphProto {
            node: nodes,
            input: vec![value("x")],
            output: vec![value(&last), value("kept_output")],
            ..Default::default()
        }
        .encode_to_vec()
    }

    /// The IR of a graph whose nodes are given back as they are read is the IR of the same bytes
    /// decoded with the buffer kept, whole, also where a constant keeps a slice of the buffer
    /// (a payload over 64 KiB, from a file that is not skimmed); most of the nodes' pages are
    /// given back.
    #[test]
    fn nodes_given_back_as_they_are_read_leave_the_ir_as_it_was() {
        let path = Path::new("chain.onnx");
        // ~12 MiB of nodes, the constant's 100 KiB after the first 30,000: each run of nodes
        // read in place loses less than 2 MiB at either end
        let bytes = model(&chain(100_000, 30_000, 100 << 10));
        let kept = decode(path, Bytes::from(bytes.clone()), None).unwrap();
        assert_eq!(GIVEN_BACK.get(), 0);
        let given = decode_owned(path, Bytes::from(bytes.clone()), None, true).unwrap();
        let released = GIVEN_BACK.get();
        assert!(released >= 4 << 20, "{released}");
        assert_eq!(format!("{:?}", kept.graph), format!("{:?}", given.graph));
        // the constant's payload, left a slice of the buffer, is as written
        let constant = given
            .graph
            .nodes
            .iter()
            .find(|n| n.op_type.as_str() == "Constant");
        let Some(Attr::Tensor(t)) = constant.and_then(|n| n.attrs.0.first()).map(|(_, a)| a) else {
            panic!("no constant");
        };
        let TensorData::Raw(raw) = &t.data else {
            panic!("{:?}", t.data);
        };
        assert_eq!(raw.len(), 100 << 10);
        assert!(raw
            .iter()
            .enumerate()
            .all(|(k, &b)| b == (k % 251) as u8 + 1));
    }

    /// A graph that cannot be built after nodes were given back reports the same error as with
    /// the buffer kept: a corrupt node after them is found, the ones given back are not read.
    #[test]
    fn a_corrupt_node_after_nodes_given_back_is_reported_as_before() {
        let path = Path::new("chain.onnx");
        let mut graph = chain(60_000, 59_990, 16);
        // a last node whose op_type is not UTF-8
        let bad = [0x22, 0x02, 0xff, 0xfe];
        graph.extend_from_slice(&[0x0A, bad.len() as u8]);
        graph.extend_from_slice(&bad);
        let bytes = model(&graph);
        let kept = decode(path, Bytes::from(bytes.clone()), None).unwrap_err();
        let given = decode_owned(path, Bytes::from(bytes), None, true).unwrap_err();
        assert!(GIVEN_BACK.get() >= 6 << 20, "{}", GIVEN_BACK.get());
        assert_eq!(kept.to_string(), given.to_string());
        assert!(kept.to_string().contains("NodeProto.op_type"), "{kept}");
    }

    /// The encoded graph of `n` initializers of eight float32s each (the batch-norm parameters of
    /// an exported network: 32 bytes of raw data, kept in a skimmed file) read by one node, with a
    /// `payload`-byte initializer after initializer `at`, and `tail` (encoded initializers) last.
    fn initialized(n: usize, at: usize, payload: usize, tail: &[u8]) -> Vec<u8> {
        let float = pb::tensor_proto::DataType::Float as i32;
        let mut inits = Vec::new();
        for i in 0..n {
            inits.push(pb::TensorProto {
                name: Some(format!("/blocks.{i}/bn.weight")),
                dims: vec![8],
                data_type: Some(float),
                raw_data: Some((0..32).map(|k| (i + k) as u8).collect()),
                ..Default::default()
            });
            if i == at {
                inits.push(pb::TensorProto {
                    name: Some("kept".into()),
                    dims: vec![payload as i64],
                    data_type: Some(pb::tensor_proto::DataType::Uint8 as i32),
                    raw_data: Some((0..payload).map(|k| (k % 251) as u8 + 1).collect()),
                    ..Default::default()
                });
            }
        }
        let value = |name: &str| pb::ValueInfoProto {
            name: Some(name.into()),
            ..Default::default()
        };
        let mut graph = pb::GraphProto {
            node: vec![node(
                "Relu",
                "relu".into(),
                "/blocks.0/bn.weight".into(),
                "y".into(),
            )],
            initializer: inits,
            output: vec![value("y")],
            ..Default::default()
        }
        .encode_to_vec();
        graph.extend_from_slice(tail);
        graph
    }

    /// The IR of a graph whose initializers are given back as they are read is the IR of the
    /// same bytes decoded with the buffer kept, also where an initializer keeps a slice of the
    /// buffer (a payload over 64 KiB, from a file that is not skimmed); most of their pages are
    /// given back.
    #[test]
    fn initializers_given_back_as_they_are_read_leave_the_ir_as_it_was() {
        let path = Path::new("inits.onnx");
        // ~13 MiB of initializers (~66 bytes each), the large one after the first 60,000: a run
        // of ~4 MiB, then one of ~9 MiB; each loses less than 2 MiB at either end
        let bytes = model(&initialized(200_000, 60_000, 100 << 10, &[]));
        let kept = decode(path, Bytes::from(bytes.clone()), None).unwrap();
        assert_eq!(GIVEN_BACK.get(), 0);
        let given = decode_owned(path, Bytes::from(bytes), None, true).unwrap();
        let released = GIVEN_BACK.get();
        assert!(released >= 6 << 20, "{released}");
        // (not `assert_eq!`: the two texts are 60 MB)
        let same = format!("{:?}", kept.graph) == format!("{:?}", given.graph);
        assert!(same, "the IR built as pages were given back differs");
        let read = |t: &Tensor| match &t.data {
            TensorData::Raw(raw) => raw.to_vec(),
            other => panic!("{other:?}"),
        };
        let (_, large) = given
            .graph
            .initializers()
            .find(|(_, t)| &*t.name == "kept")
            .expect("the large initializer");
        let want: Vec<u8> = (0..100 << 10).map(|k| (k % 251) as u8 + 1).collect();
        assert_eq!(read(large), want);
        // a small one, copied out before its page went
        let (_, last) = given.graph.initializers().last().expect("initializers");
        assert_eq!(&*last.name, "/blocks.199999/bn.weight");
        let want: Vec<u8> = (0..32).map(|k| (199_999 + k) as u8).collect();
        assert_eq!(read(last), want);
    }

    /// A graph that cannot be built after initializers were given back reports the same error as
    /// with the buffer kept: a corrupt initializer after them is found, the ones given back are
    /// not read again.
    #[test]
    fn a_corrupt_initializer_after_initializers_given_back_is_reported_as_before() {
        let path = Path::new("inits.onnx");
        // a last initializer whose name is not UTF-8
        let bad = [0x42, 0x02, 0xff, 0xfe];
        let mut tail = vec![0x2A, bad.len() as u8];
        tail.extend_from_slice(&bad);
        let bytes = model(&initialized(100_000, 99_990, 16, &tail));
        let kept = decode(path, Bytes::from(bytes.clone()), None).unwrap_err();
        let given = decode_owned(path, Bytes::from(bytes), None, true).unwrap_err();
        assert!(GIVEN_BACK.get() >= 4 << 20, "{}", GIVEN_BACK.get());
        assert_eq!(kept.to_string(), given.to_string());
        assert!(kept.to_string().contains("TensorProto.name"), "{kept}");
    }

    /// Initializers read first, then nodes that lie before them in the buffer (a file written in
    /// field order): both are given back, the nodes' runs starting afresh after the initializers'.
    #[test]
    fn nodes_before_given_back_initializers_are_given_back_too() {
        let path = Path::new("both.onnx");
        // two encoded graphs one after the other are one graph (protobuf merges them): ~12 MiB of
        // nodes, then ~13 MiB of initializers and the node that reads them
        let (nodes, inits) = (
            chain(100_000, 99_999, 16),
            initialized(200_000, 199_999, 16, &[]),
        );
        let alone = |graph: &[u8]| {
            decode_owned(path, Bytes::from(model(graph)), None, true).unwrap();
            GIVEN_BACK.get()
        };
        let (by_nodes, by_inits) = (alone(&nodes), alone(&inits));
        assert!(
            by_nodes >= 6 << 20 && by_inits >= 6 << 20,
            "{by_nodes} {by_inits}"
        );
        let bytes = model(&[nodes, inits].concat());
        let kept = decode(path, Bytes::from(bytes.clone()), None).unwrap();
        let given = decode_owned(path, Bytes::from(bytes), None, true).unwrap();
        // together, less at most a 2 MiB page at each end of each run
        let released = GIVEN_BACK.get();
        assert!(released + (6 << 20) >= by_nodes + by_inits, "{released}");
        let same = format!("{:?}", kept.graph) == format!("{:?}", given.graph);
        assert!(same, "the IR built as pages were given back differs");
    }
}
