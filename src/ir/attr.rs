//! Node attributes, all ONNX attribute types, with typed getters whose errors name the attribute.

use super::dtype::DType;
use super::graph::Graph;
use super::sym::Sym;
use super::tensor::Tensor;
use super::TypeDecl;

/// One attribute value.
#[derive(Clone, Debug)]
pub enum Attr {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(Box<Tensor>),
    Graph(Box<Graph>),
    /// Boxed, with `Type`: the rare large variants, so that an attribute takes 32 bytes, not 40.
    SparseTensor(Box<(Tensor, Vec<u64>)>),
    Type(Box<TypeDecl>),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    Tensors(Vec<Tensor>),
    Graphs(Vec<Graph>),
    SparseTensors(Vec<(Tensor, Vec<u64>)>),
    Types(Vec<TypeDecl>),
    /// A reference to an attribute of the enclosing function (`ref_attr_name`).
    Ref(String),
}

impl Attr {
    pub fn kind(&self) -> &'static str {
        match self {
            Attr::Float(_) => "float",
            Attr::Int(_) => "int",
            Attr::String(_) => "string",
            Attr::Tensor(_) => "tensor",
            Attr::Graph(_) => "graph",
            Attr::SparseTensor(_) => "sparse tensor",
            Attr::Type(_) => "type",
            Attr::Floats(_) => "floats",
            Attr::Ints(_) => "ints",
            Attr::Strings(_) => "strings",
            Attr::Tensors(_) => "tensors",
            Attr::Graphs(_) => "graphs",
            Attr::SparseTensors(_) => "sparse tensors",
            Attr::Types(_) => "types",
            Attr::Ref(_) => "reference",
        }
    }
}

/// The attributes of a node, in file order; their names are interned ([`Sym`]). Shared, not owned:
/// a node's attributes do not change once it is built, and the loader gives nodes whose attributes
/// are encoded alike one list (load/onnx.rs; a graph of 100,000 nodes held 45,000 lists of ~15
/// kinds, 6 MiB).
#[derive(Clone, Debug, Default)]
pub struct Attrs(pub std::sync::Arc<[(Sym, Attr)]>);

/// An attribute lookup failure: the message names the attribute; the caller adds the node.
pub type AttrResult<T> = Result<T, String>;

impl Attrs {
    pub fn get(&self, name: &str) -> Option<&Attr> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, a)| a)
    }

    fn wrong(name: &str, want: &str, got: &Attr) -> String {
        format!("attribute '{name}': expected {want}, found {}", got.kind())
    }

    pub fn int_opt(&self, name: &str) -> AttrResult<Option<i64>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Int(v)) => Ok(Some(*v)),
            Some(a) => Err(Self::wrong(name, "int", a)),
        }
    }

    pub fn int_or(&self, name: &str, default: i64) -> AttrResult<i64> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    pub fn float_or(&self, name: &str, default: f32) -> AttrResult<f32> {
        match self.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(a) => Err(Self::wrong(name, "float", a)),
        }
    }

    pub fn ints_opt(&self, name: &str) -> AttrResult<Option<&[i64]>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v)),
            Some(a) => Err(Self::wrong(name, "ints", a)),
        }
    }

    pub fn floats_opt(&self, name: &str) -> AttrResult<Option<&[f32]>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v)),
            Some(a) => Err(Self::wrong(name, "floats", a)),
        }
    }

    pub fn string_opt(&self, name: &str) -> AttrResult<Option<String>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::String(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
            Some(a) => Err(Self::wrong(name, "string", a)),
        }
    }

    pub fn tensor_opt(&self, name: &str) -> AttrResult<Option<&Tensor>> {
        match self.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t)),
            Some(a) => Err(Self::wrong(name, "tensor", a)),
        }
    }

    /// A dtype given as an ONNX `TensorProto.DataType` number (`Cast`'s `to`, ...).
    pub fn dtype_opt(&self, name: &str) -> AttrResult<Option<DType>> {
        match self.int_opt(name)? {
            None => Ok(None),
            Some(code) => i32::try_from(code)
                .ok()
                .and_then(DType::from_onnx)
                .map(Some)
                .ok_or_else(|| format!("attribute '{name}': unknown data type {code}")),
        }
    }

    /// Every subgraph held by these attributes (If branches, Loop/Scan bodies).
    pub fn subgraphs(&self) -> impl Iterator<Item = (&str, &Graph)> {
        self.0.iter().flat_map(|(name, a)| {
            let graphs: Vec<&Graph> = match a {
                Attr::Graph(g) => vec![g],
                Attr::Graphs(gs) => gs.iter().collect(),
                _ => Vec::new(),
            };
            graphs.into_iter().map(move |g| (name.as_str(), g))
        })
    }
}
