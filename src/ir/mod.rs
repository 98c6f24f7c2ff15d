//! Stage 2, the intermediate representation: graphs, nodes, values, stored tensors and dimensions,
//! independent of protobuf. Loaders build it; analysis reads it.

mod attr;
mod dim;
mod dtype;
mod graph;
mod tensor;

use std::path::PathBuf;

pub use attr::{Attr, AttrResult, Attrs};
pub use dim::{shape_to_string, Dim};
pub use dtype::DType;
pub use graph::{Graph, GraphBuilder, Node, NodeId, Value, ValueId};
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
    /// The opset version of the default ONNX domain.
    pub fn opset(&self) -> i64 {
        self.opset_imports
            .iter()
            .find(|(d, _)| d.is_empty() || d == "ai.onnx")
            .map(|(_, v)| *v)
            .unwrap_or(0)
    }
}
