//! The outer two levels of an ONNX model, with the large repeated messages left encoded.
//!
//! A graph of 100,000 nodes decoded at once as prost's `ModelProto` held ~1.8 KB of heap per node
//! beside the IR built from it (181 MiB of the 350 MiB peak on the benchmark's s100k model). Here the
//! model and its main graph are decoded with their `node`, `initializer` and `value_info` fields as
//! byte slices of the compact buffer (a protobuf message and a `bytes` field are the same on the
//! wire); each message is decoded when the IR takes it, and dropped.
//!
//! The structs are named `ModelProto` and `GraphProto` because prost's decoding errors name the
//! message: an error reads the same as when the whole model was decoded at once.

use std::cell::Cell;

use bytes::Bytes;
use prost::encoding::{encoded_len_varint, key_len};
use prost::Message;

use super::onnx_pb as pb;

#[derive(Clone, PartialEq, Message)]
pub(crate) struct ModelProto {
    #[prost(int64, optional, tag = "1")]
    pub ir_version: Option<i64>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<pb::OperatorSetIdProto>,
    #[prost(string, optional, tag = "2")]
    pub producer_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub producer_version: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub domain: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub model_version: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub doc_string: Option<String>,
    /// Every occurrence of the field: protobuf merges a message field that appears twice.
    #[prost(bytes = "bytes", repeated, tag = "7")]
    pub graph: Vec<Bytes>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<pb::StringStringEntryProto>,
    #[prost(message, repeated, tag = "20")]
    pub training_info: Vec<pb::TrainingInfoProto>,
    #[prost(message, repeated, tag = "25")]
    pub functions: Vec<pb::FunctionProto>,
    #[prost(message, repeated, tag = "26")]
    pub configuration: Vec<pb::DeviceConfigurationProto>,
}

#[derive(Clone, PartialEq, Message)]
pub(crate) struct GraphProto {
    #[prost(bytes = "bytes", repeated, tag = "1")]
    pub node: Vec<Bytes>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(bytes = "bytes", repeated, tag = "5")]
    pub initializer: Vec<Bytes>,
    #[prost(message, repeated, tag = "15")]
    pub sparse_initializer: Vec<pb::SparseTensorProto>,
    #[prost(string, optional, tag = "10")]
    pub doc_string: Option<String>,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<pb::ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<pb::ValueInfoProto>,
    #[prost(bytes = "bytes", repeated, tag = "13")]
    pub value_info: Vec<Bytes>,
    #[prost(message, repeated, tag = "14")]
    pub quantization_annotation: Vec<pb::TensorAnnotation>,
    #[prost(message, repeated, tag = "16")]
    pub metadata_props: Vec<pb::StringStringEntryProto>,
}

/// The bytes a length-delimited field of this tag and payload length takes.
fn field_len(tag: u32, len: usize) -> i64 {
    (key_len(tag) + encoded_len_varint(len as u64) + len) as i64
}

/// A decoding failure of one message of the main graph, with the fields that lead to it.
pub(crate) struct LazyError {
    pub error: prost::DecodeError,
    /// `GraphProto.node` and the like, innermost first.
    pub outer: [&'static str; 2],
}

/// A repeated message field: decoded already (a subgraph inside an attribute), or encoded (the main
/// graph), decoded one message at a time as it is read.
pub(crate) enum Lazy<'a, T> {
    Decoded(&'a [T]),
    Encoded {
        items: &'a [Bytes],
        tag: u32,
        field: &'static str,
        /// Re-encoded minus encoded length of the messages read so far: what prost dropped
        /// (unknown fields), in bytes, negative.
        shrink: &'a Cell<i64>,
    },
}

impl<'a, T: Message + Default + Clone> Lazy<'a, T> {
    pub fn len(&self) -> usize {
        match self {
            Lazy::Decoded(v) => v.len(),
            Lazy::Encoded { items, .. } => items.len(),
        }
    }

    /// Each message in turn, borrowed or freshly decoded.
    pub fn iter(&self) -> impl Iterator<Item = Result<std::borrow::Cow<'a, T>, LazyError>> + '_ {
        use std::borrow::Cow;
        let n = self.len();
        (0..n).map(move |i| match self {
            Lazy::Decoded(v) => Ok(Cow::Borrowed(&v[i])),
            Lazy::Encoded {
                items,
                tag,
                field,
                shrink,
            } => {
                let raw = &items[i];
                let msg = T::decode(raw.clone()).map_err(|error| LazyError {
                    error,
                    outer: [field, "ModelProto.graph"],
                })?;
                let delta = field_len(*tag, msg.encoded_len()) - field_len(*tag, raw.len());
                shrink.set(shrink.get() + delta);
                Ok(Cow::Owned(msg))
            }
        })
    }
}

/// The main graph: its small fields decoded, its large repeated ones left encoded.
pub(crate) struct Shell {
    pub model: ModelProto,
    pub graph: GraphProto,
    /// How the graph's lazily decoded messages change its encoded length (see [`Lazy`]).
    pub shrink: Cell<i64>,
}

impl Shell {
    /// Decodes the outer levels; `None` when the model has no graph.
    pub fn decode(bytes: Bytes) -> Result<Self, prost::DecodeError> {
        let model = ModelProto::decode(bytes)?;
        let mut graph = GraphProto::default();
        for g in &model.graph {
            graph.merge(g.clone()).map_err(|mut e| {
                e.push("ModelProto", "graph");
                e
            })?;
        }
        Ok(Shell {
            model,
            graph,
            shrink: Cell::new(0),
        })
    }

    pub fn has_graph(&self) -> bool {
        !self.model.graph.is_empty()
    }

    pub fn nodes(&self) -> Lazy<'_, pb::NodeProto> {
        self.lazy(&self.graph.node, 1, "GraphProto.node")
    }

    pub fn initializers(&self) -> Lazy<'_, pb::TensorProto> {
        self.lazy(&self.graph.initializer, 5, "GraphProto.initializer")
    }

    pub fn value_infos(&self) -> Lazy<'_, pb::ValueInfoProto> {
        self.lazy(&self.graph.value_info, 13, "GraphProto.value_info")
    }

    fn lazy<'a, T>(&'a self, items: &'a [Bytes], tag: u32, field: &'static str) -> Lazy<'a, T> {
        Lazy::Encoded {
            items,
            tag,
            field,
            shrink: &self.shrink,
        }
    }

    /// The length prost would encode the whole model in, once every lazy message has been read:
    /// less than the input when fields unknown to this schema were dropped.
    pub fn encoded_len(&self) -> usize {
        let raw_graphs: i64 = self.model.graph.iter().map(|g| field_len(7, g.len())).sum();
        let graph = self.graph.encoded_len() as i64 + self.shrink.get();
        let graph = if self.has_graph() {
            field_len(7, graph.max(0) as usize)
        } else {
            0
        };
        (self.model.encoded_len() as i64 - raw_graphs + graph).max(0) as usize
    }

    /// Decodes every lazy message, for the first decoding error among them (in the order fields are
    /// usually written: nodes, initializers, value infos). Called when the graph could not be built,
    /// so that a corrupt message is reported before what a well-formed one might mean.
    pub fn validate(&self) -> Result<(), LazyError> {
        for n in self.nodes().iter() {
            n?;
        }
        for t in self.initializers().iter() {
            t?;
        }
        for v in self.value_infos().iter() {
            v?;
        }
        Ok(())
    }
}
