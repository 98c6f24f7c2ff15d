//! Stage 2, the intermediate representation: graphs, nodes, values, stored tensors and dimensions,
//! independent of protobuf. Loaders build it; analysis reads it.

mod attr;
mod dim;
mod dtype;
mod graph;
mod sym;
mod tensor;

use std::path::PathBuf;

pub use attr::{Attr, AttrResult, Attrs};
pub use dim::{shape_to_string, take_overflow, write_shape, Dim};
pub use dtype::DType;
pub use graph::{
    Graph, GraphBuilder, Name, Node, NodeId, PortIter, Ports, Readers, Value, ValueId,
};
pub use sym::{Sym, Symbols};
pub use tensor::{ExternalData, Tensor, TensorData, TypedData, Values};

/// A type the file declares for a value: element type and shape, each possibly unknown.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TypeDecl {
    pub dtype: Option<DType>,
    /// `None` when the rank is unknown.
    pub shape: Option<Vec<Dim>>,
}

/// A loaded ONNX model.
#[derive(Clone, Debug)]
pub struct Model {
    pub path: PathBuf,
    pub ir_version: i64,
    pub producer: String,
    /// `(domain, version)`; the default domain is `""`.
    pub opset_imports: Vec<(String, i64)>,
    pub graph: Graph,
    /// `metadata_props`: key, value.
    pub metadata: Vec<(String, String)>,
    /// Problems found while loading that do not stop analysis (ignored fields, ...).
    pub warnings: Vec<String>,
}

impl Model {
    /// Why some stored tensor's bytes cannot be read (a missing or short external data file), if
    /// any: what needs weight values (rewrite, verify) refuses the model with it.
    pub fn unavailable_weights(&self) -> Option<&str> {
        fn find(g: &Graph) -> Option<&str> {
            g.stored_tensors()
                .find_map(|(_, t)| t.unavailable())
                .or_else(|| g.subgraphs().into_iter().find_map(|(_, s)| find(s)))
        }
        find(&self.graph)
    }

    /// Refuses a model whose weights cannot be read, for `what` (a command that needs them).
    pub fn require_weights(&self, what: &str) -> crate::Result<()> {
        match self.unavailable_weights() {
            Some(why) => Err(crate::Error::refused(
                &self.path,
                format!("{what} needs the weight values, and {why}"),
            )),
            None => Ok(()),
        }
    }

    /// The opset version of the default ONNX domain.
    pub fn opset(&self) -> i64 {
        self.opset_imports
            .iter()
            .find(|(d, _)| d.is_empty() || d == "ai.onnx")
            .map(|(_, v)| *v)
            .unwrap_or(0)
    }
}
