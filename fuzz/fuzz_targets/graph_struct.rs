//! Structure-aware: `arbitrary` builds a small, well-formed ONNX graph of known ops with hostile
//! attribute values (huge or negative strides, pads, kernel shapes, axes, perms), hostile input
//! dims (0, negative, up to i64::MAX, symbols) and small initializers; it is encoded with the
//! project's prost types and run through load → analyze (batch up to huge values) → training
//! estimate → lint → and, for a graph with a weighted Conv / MatMul / Gemm, `verify` of the model
//! against itself (the checker must refuse tensors it cannot hold rather than allocate them) and
//! `nnlint rewrite` of it (plan, emit, reload, verify the rewritten model).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use nnlint::analysis::{self, training::TrainConfig, Bindings};
use nnlint::load::{self, onnx_pb as pb};
use nnlint::rewrite::{attr_float, attr_int, attr_ints, attr_string};
use nnlint::rules::{self, Selection, Settings};
use prost::Message;

#[path = "common.rs"]
mod common;

const FLOAT: i32 = pb::tensor_proto::DataType::Float as i32;
const INT64: i32 = pb::tensor_proto::DataType::Int64 as i32;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Conv,
    ConvTranspose,
    MatMul,
    Gemm,
    Reshape,
    Transpose,
    Concat,
    Add,
    Mul,
    Relu,
    BatchNormalization,
    MaxPool,
    AveragePool,
    GlobalAveragePool,
    Gather,
    Slice,
    Flatten,
    Squeeze,
    Unsqueeze,
    Softmax,
    Split,
    Pad,
    Expand,
    ReduceMean,
    LayerNormalization,
    Shape,
    Identity,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Conv => "Conv",
            Op::ConvTranspose => "ConvTranspose",
            Op::MatMul => "MatMul",
            Op::Gemm => "Gemm",
            Op::Reshape => "Reshape",
            Op::Transpose => "Transpose",
            Op::Concat => "Concat",
            Op::Add => "Add",
            Op::Mul => "Mul",
            Op::Relu => "Relu",
            Op::BatchNormalization => "BatchNormalization",
            Op::MaxPool => "MaxPool",
            Op::AveragePool => "AveragePool",
            Op::GlobalAveragePool => "GlobalAveragePool",
            Op::Gather => "Gather",
            Op::Slice => "Slice",
            Op::Flatten => "Flatten",
            Op::Squeeze => "Squeeze",
            Op::Unsqueeze => "Unsqueeze",
            Op::Softmax => "Softmax",
            Op::Split => "Split",
            Op::Pad => "Pad",
            Op::Expand => "Expand",
            Op::ReduceMean => "ReduceMean",
            Op::LayerNormalization => "LayerNormalization",
            Op::Shape => "Shape",
            Op::Identity => "Identity",
        }
    }
}

/// An integer biased towards the values that break size arithmetic.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Int {
    Small(u8),
    Neg(i8),
    Zero,
    One,
    Max,
    Min,
    Pow(u8),
    Any(i64),
}

impl Int {
    fn get(self) -> i64 {
        match self {
            Int::Small(v) => (v % 8) as i64,
            Int::Neg(v) => -((v as i64).abs() % 5) - 1,
            Int::Zero => 0,
            Int::One => 1,
            Int::Max => i64::MAX,
            Int::Min => i64::MIN,
            Int::Pow(p) => 1i64 << (p % 63),
            Int::Any(v) => v,
        }
    }
}

/// An input dimension.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Dim {
    Value(Int),
    Sym(u8),
    Unknown,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum AttrName {
    KernelShape,
    Strides,
    Pads,
    Dilations,
    Group,
    Axis,
    Axes,
    Perm,
    TransA,
    TransB,
    Epsilon,
    Keepdims,
    CeilMode,
    AutoPad,
    OutputPadding,
    Split,
    AllowZero,
    Alpha,
    NumOutputs,
}

impl AttrName {
    fn name(self) -> &'static str {
        match self {
            AttrName::KernelShape => "kernel_shape",
            AttrName::Strides => "strides",
            AttrName::Pads => "pads",
            AttrName::Dilations => "dilations",
            AttrName::Group => "group",
            AttrName::Axis => "axis",
            AttrName::Axes => "axes",
            AttrName::Perm => "perm",
            AttrName::TransA => "transA",
            AttrName::TransB => "transB",
            AttrName::Epsilon => "epsilon",
            AttrName::Keepdims => "keepdims",
            AttrName::CeilMode => "ceil_mode",
            AttrName::AutoPad => "auto_pad",
            AttrName::OutputPadding => "output_padding",
            AttrName::Split => "split",
            AttrName::AllowZero => "allowzero",
            AttrName::Alpha => "alpha",
            AttrName::NumOutputs => "num_outputs",
        }
    }
}

#[derive(Arbitrary, Debug, Clone)]
enum AttrVal {
    Int(Int),
    Ints(Vec<Int>),
    Float(f32),
    Str(u8),
}

#[derive(Arbitrary, Debug, Clone)]
struct Attr {
    name: AttrName,
    val: AttrVal,
}

/// A small initializer: float weights, or int64 values (shapes, indices, slice bounds, axes).
#[derive(Arbitrary, Debug, Clone)]
struct Init {
    dims: Vec<u8>,
    ints: bool,
    values: Vec<Int>,
    /// Declare the dims but store data of the wrong length.
    lie: bool,
}

#[derive(Arbitrary, Debug, Clone)]
enum Src {
    /// A value defined earlier (graph input, initializer, node output), by index.
    Prev(u8),
    /// A new initializer.
    Init(Init),
    /// An omitted optional input ("").
    Empty,
}

#[derive(Arbitrary, Debug, Clone)]
struct Node {
    op: Op,
    inputs: Vec<Src>,
    attrs: Vec<Attr>,
    outputs: u8,
}

#[derive(Arbitrary, Debug, Clone)]
struct Input {
    dims: Vec<Dim>,
    ints: bool,
}

#[derive(Arbitrary, Debug)]
struct Spec {
    inputs: Vec<Input>,
    nodes: Vec<Node>,
    batch: Option<Int>,
    opset: u8,
    train: bool,
    /// Declare the output's shape (from the last input's dims) instead of leaving it untyped.
    typed_output: bool,
}

fn vi(name: &str, elem: i32, dims: Option<&[Dim]>) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value, Dimension};
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(elem),
                shape: dims.map(|dims| pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: match d {
                                Dim::Value(v) => Some(Value::DimValue(v.get())),
                                Dim::Sym(s) => Some(Value::DimParam(format!("s{}", s % 3))),
                                Dim::Unknown => None,
                            },
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn tensor(name: &str, init: &Init) -> pb::TensorProto {
    let dims: Vec<i64> = init.dims.iter().take(4).map(|&d| (d % 9) as i64).collect();
    let numel: i64 = dims.iter().product();
    let numel = numel.clamp(0, 4096) as usize;
    let n = if init.lie { numel + 1 } else { numel };
    let raw: Vec<u8> = if init.ints {
        let vals: Vec<i64> = (0..n)
            .map(|i| init.values.get(i % init.values.len().max(1)).map_or(1, |v| v.get()))
            .collect();
        vals.iter().flat_map(|v| v.to_le_bytes()).collect()
    } else {
        (0..n).flat_map(|i| ((i % 7) as f32 * 0.25 - 0.5).to_le_bytes()).collect()
    };
    pb::TensorProto {
        name: Some(name.into()),
        dims,
        data_type: Some(if init.ints { INT64 } else { FLOAT }),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

fn attr(a: &Attr) -> pb::AttributeProto {
    let name = a.name.name();
    match &a.val {
        AttrVal::Int(v) => attr_int(name, v.get()),
        AttrVal::Ints(v) => attr_ints(name, v.iter().take(8).map(|v| v.get()).collect()),
        AttrVal::Float(f) => attr_float(name, *f),
        AttrVal::Str(s) => attr_string(
            name,
            ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "bogus"][(*s % 5) as usize],
        ),
    }
}

/// The encoded model, and whether it has a Conv / MatMul / Gemm reading an initializer.
fn build(spec: &Spec) -> (Vec<u8>, bool) {
    let mut g = pb::GraphProto {
        name: Some("fuzz".into()),
        ..Default::default()
    };
    let mut values: Vec<String> = Vec::new();
    let mut inits: std::collections::HashSet<String> = Default::default();
    for (i, inp) in spec.inputs.iter().take(3).enumerate() {
        let name = format!("in{i}");
        let dims: Vec<Dim> = inp.dims.iter().take(5).copied().collect();
        g.input
            .push(vi(&name, if inp.ints { INT64 } else { FLOAT }, Some(&dims)));
        values.push(name);
    }
    let mut weighted = false;
    let mut last: Vec<String> = Vec::new();
    for (i, n) in spec.nodes.iter().take(8).enumerate() {
        let mut inputs = Vec::new();
        for (j, src) in n.inputs.iter().take(5).enumerate() {
            match src {
                Src::Prev(k) if !values.is_empty() => {
                    inputs.push(values[*k as usize % values.len()].clone())
                }
                Src::Prev(_) | Src::Empty => inputs.push(String::new()),
                Src::Init(init) => {
                    let name = format!("w{i}_{j}");
                    g.initializer.push(tensor(&name, init));
                    inits.insert(name.clone());
                    values.push(name.clone());
                    inputs.push(name);
                }
            }
        }
        if matches!(n.op, Op::Conv | Op::MatMul | Op::Gemm)
            && inputs.get(1).is_some_and(|w| inits.contains(w))
        {
            weighted = true;
        }
        let outputs: Vec<String> = (0..(n.outputs % 3).max(1))
            .map(|k| format!("n{i}_o{k}"))
            .collect();
        g.node.push(pb::NodeProto {
            op_type: Some(n.op.name().into()),
            name: Some(format!("n{i}")),
            input: inputs,
            output: outputs.clone(),
            attribute: n.attrs.iter().take(6).map(attr).collect(),
            ..Default::default()
        });
        values.extend(outputs.iter().cloned());
        last = outputs;
    }
    if last.is_empty() {
        last = values.last().cloned().into_iter().collect();
    }
    let out_dims: Option<Vec<Dim>> = spec
        .typed_output
        .then(|| spec.inputs.last().map(|i| i.dims.iter().take(5).copied().collect()))
        .flatten();
    for o in last {
        g.output.push(vi(&o, FLOAT, out_dims.as_deref()));
    }
    let bytes = pb::ModelProto {
        ir_version: Some(8),
        producer_name: Some("nnlint-fuzz".into()),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(7 + (spec.opset % 15) as i64),
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec();
    (bytes, weighted)
}

fuzz_target!(|spec: Spec| {
    let (bytes, weighted) = build(&spec);
    let path = common::write_input("model.onnx", &bytes);
    let Ok(model) = load::load_graph(&path, "fuzz") else {
        return;
    };
    let batch = spec.batch.map(|b| b.get() as u64);
    let bindings = Bindings {
        batch,
        ..Bindings::default()
    };
    let train = TrainConfig::default();
    let _ = analysis::analyze(&model, &Bindings::default(), None);
    let _ = analysis::analyze(&model, &bindings, None);
    if spec.train {
        let _ = analysis::analyze(&model, &bindings, Some(&train));
    }
    let settings = Settings {
        bindings: bindings.clone(),
        train,
        budget: Some(1 << 30),
    };
    let _ = rules::lint(&model, &settings, &Selection::default());
    if weighted {
        let _ = nnlint::verify::verify(&nnlint::verify::Request {
            original: &model,
            rewritten: &model,
            bindings,
            seed: 0,
            whole: true,
            dump: None,
            progress: &nnlint::util::progress::Silent,
        });
        let out = path.with_file_name("rewritten.onnx");
        let _ = std::fs::remove_file(&out);
        let mut argv = vec!["nnlint".to_string(), "rewrite".into()];
        argv.push(path.display().to_string());
        argv.extend(["-o".into(), out.display().to_string(), "--format".into(), "json".into()]);
        if let Some(b) = batch {
            argv.extend(["--batch".into(), b.to_string()]);
        }
        if let Ok(cli) = <nnlint::app::cli::Cli as clap::Parser>::try_parse_from(&argv) {
            // the output too: a command may return it as a writer that runs only when printed
            let _ = nnlint::app::execute(&cli).map(nnlint::app::Outcome::text);
        }
    }
});
