//! A small ONNX graph builder for tests: protobuf graphs of a few nodes, with the library's own
//! attribute and value-info builders (`nnlint::rewrite::attr_*`, `value_info`).

use nnlint::load::onnx_pb as pb;
use prost::Message;

#[allow(unused_imports)]
pub use nnlint::rewrite::{attr_float, attr_int, attr_ints, attr_string};

pub const FLOAT: i32 = pb::tensor_proto::DataType::Float as i32;
pub const INT64: i32 = pb::tensor_proto::DataType::Int64 as i32;
pub const BOOL: i32 = pb::tensor_proto::DataType::Bool as i32;
#[allow(dead_code)]
pub const INT8: i32 = pb::tensor_proto::DataType::Int8 as i32;

/// A tensor type with known dims.
pub fn ty(elem: i32, dims: &[i64]) -> pb::TypeProto {
    use pb::tensor_shape_proto::{dimension::Value, Dimension};
    pb::TypeProto {
        value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
            elem_type: Some(elem),
            shape: Some(pb::TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&d| Dimension {
                        value: Some(Value::DimValue(d)),
                        ..Default::default()
                    })
                    .collect(),
            }),
        })),
        ..Default::default()
    }
}

/// A value of a known type and shape.
pub fn vi(name: &str, elem: i32, dims: &[i64]) -> pb::ValueInfoProto {
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(ty(elem, dims)),
        ..Default::default()
    }
}

/// A value whose dims are symbols or numbers (`["batch", "3"]`).
pub fn vi_sym(name: &str, elem: i32, dims: &[&str]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value, Dimension};
    let mut v = vi(name, elem, &[]);
    if let Some(pb::type_proto::Value::TensorType(t)) =
        v.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        t.shape = Some(pb::TensorShapeProto {
            dim: dims
                .iter()
                .map(|d| Dimension {
                    value: Some(match d.parse::<i64>() {
                        Ok(k) => Value::DimValue(k),
                        Err(_) => Value::DimParam(d.to_string()),
                    }),
                    ..Default::default()
                })
                .collect(),
        });
    }
    v
}

/// A value declared by name only (its type is inferred).
pub fn vi_untyped(name: &str) -> pb::ValueInfoProto {
    pb::ValueInfoProto {
        name: Some(name.into()),
        ..Default::default()
    }
}

/// A float tensor with zero-filled `raw_data` of the right length.
pub fn weight(name: &str, dims: &[i64]) -> pb::TensorProto {
    let numel: i64 = dims.iter().product();
    raw_tensor(name, dims, vec![0; 4 * numel as usize])
}

/// A float tensor holding `values`.
pub fn floats(name: &str, dims: &[i64], values: &[f32]) -> pb::TensorProto {
    raw_tensor(
        name,
        dims,
        values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    )
}

/// An int64 tensor holding `values`.
pub fn ints(name: &str, values: &[i64]) -> pb::TensorProto {
    pb::TensorProto {
        name: Some(name.into()),
        dims: vec![values.len() as i64],
        data_type: Some(INT64),
        raw_data: Some(
            values
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect::<Vec<u8>>()
                .into(),
        ),
        ..Default::default()
    }
}

/// A float tensor with the given `raw_data`, whatever its length.
pub fn raw_tensor(name: &str, dims: &[i64], raw: Vec<u8>) -> pb::TensorProto {
    pb::TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

/// A float tensor stored in an external file.
pub fn external_tensor(name: &str, dims: &[i64], location: &str, offset: u64) -> pb::TensorProto {
    let kv = |k: &str, v: String| pb::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v),
    };
    pb::TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(FLOAT),
        data_location: Some(pb::tensor_proto::DataLocation::External as i32),
        external_data: vec![
            kv("location", location.into()),
            kv("offset", offset.to_string()),
        ],
        ..Default::default()
    }
}

/// A node with any number of outputs.
pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> pb::NodeProto {
    pb::NodeProto {
        op_type: Some(op.into()),
        name: Some(name.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

/// The same node with attributes.
pub fn with(mut n: pb::NodeProto, attrs: Vec<pb::AttributeProto>) -> pb::NodeProto {
    n.attribute = attrs;
    n
}

/// An `ints` attribute.
pub fn ints_attr(name: &str, values: &[i64]) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(pb::attribute_proto::AttributeType::Ints as i32),
        ints: values.to_vec(),
        ..Default::default()
    }
}

/// A `Constant` node holding `t` (the way Paddle2ONNX stores weights).
pub fn constant(output: &str, t: pb::TensorProto) -> pb::NodeProto {
    with(
        node("Constant", &format!("{output}_const"), &[], &[output]),
        vec![pb::AttributeProto {
            name: Some("value".into()),
            r#type: Some(pb::attribute_proto::AttributeType::Tensor as i32),
            t: Some(Box::new(t)),
            ..Default::default()
        }],
    )
}

pub fn graph_attr(name: &str, g: pb::GraphProto) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(pb::attribute_proto::AttributeType::Graph as i32),
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

/// A graph, built step by step.
#[derive(Default)]
pub struct G(pub pb::GraphProto);

impl G {
    pub fn new(name: &str) -> G {
        G(pb::GraphProto {
            name: Some(name.into()),
            ..Default::default()
        })
    }
    pub fn input(mut self, v: pb::ValueInfoProto) -> G {
        self.0.input.push(v);
        self
    }
    pub fn output(mut self, v: pb::ValueInfoProto) -> G {
        self.0.output.push(v);
        self
    }
    pub fn value_info(mut self, v: pb::ValueInfoProto) -> G {
        self.0.value_info.push(v);
        self
    }
    pub fn init(mut self, t: pb::TensorProto) -> G {
        self.0.initializer.push(t);
        self
    }
    pub fn node(mut self, n: pb::NodeProto) -> G {
        self.0.node.push(n);
        self
    }
    pub fn build(self) -> pb::GraphProto {
        self.0
    }
    /// The encoded model (IR version 8, opset 17).
    pub fn model(self) -> Vec<u8> {
        self.model_at(17)
    }
    /// The encoded model at an opset.
    pub fn model_at(self, opset: i64) -> Vec<u8> {
        pb::ModelProto {
            ir_version: Some(8),
            producer_name: Some("nnlint-tests".into()),
            opset_import: vec![pb::OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(opset),
            }],
            graph: Some(self.0),
            ..Default::default()
        }
        .encode_to_vec()
    }
}
