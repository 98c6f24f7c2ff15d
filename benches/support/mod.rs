//! Writing large synthetic ONNX models for the benchmarks, with the crate's own prost types.
//!
//! A [`Builder`] collects nodes (named the way the PyTorch exporter names them) and initializers
//! whose bytes are only described ([`Data`]); [`write_model`] then writes the model with the
//! graph's fields in field-number order, streaming each initializer's bytes, so the generator never
//! holds the weights in memory.

// Each bench compiles this module on its own and uses a different part of it.
#![allow(dead_code)]

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use nnlint::load::onnx_pb as pb;
use prost::Message;

pub const OPSET: i64 = 17;

// ---------------------------------------------------------------------------------------------
// Protobuf helpers (wire format for the parts written by hand)
// ---------------------------------------------------------------------------------------------

fn varint_len(mut v: u64) -> u64 {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn put_varint(out: &mut impl Write, mut v: u64) -> std::io::Result<()> {
    let mut buf = [0u8; 10];
    let mut i = 0;
    while v >= 0x80 {
        buf[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    buf[i] = v as u8;
    out.write_all(&buf[..=i])
}

/// Key of a length-delimited field.
fn key_ld(field: u32) -> u64 {
    ((field as u64) << 3) | 2
}

/// Bytes a length-delimited field of `len` bytes takes.
fn ld_field_len(field: u32, len: u64) -> u64 {
    varint_len(key_ld(field)) + varint_len(len) + len
}

fn put_ld_header(out: &mut impl Write, field: u32, len: u64) -> std::io::Result<()> {
    put_varint(out, key_ld(field))?;
    put_varint(out, len)
}

// GraphProto / ModelProto / TensorProto field numbers (onnx.proto)
const GRAPH_NODE: u32 = 1;
const GRAPH_NAME: u32 = 2;
const GRAPH_INITIALIZER: u32 = 5;
const GRAPH_INPUT: u32 = 11;
const GRAPH_OUTPUT: u32 = 12;
const MODEL_GRAPH: u32 = 7;
const TENSOR_RAW_DATA: u32 = 9;

pub const F32: i32 = pb::tensor_proto::DataType::Float as i32;
pub const I64: i32 = pb::tensor_proto::DataType::Int64 as i32;

// ---------------------------------------------------------------------------------------------
// Model builder
// ---------------------------------------------------------------------------------------------

/// The data of an initializer: small ones in memory, big ones produced while writing.
pub enum Data {
    Inline(Vec<u8>),
    /// `len` bytes of pseudo-random float32 values from the shared [`Pool`], generated at write
    /// time.
    Random {
        len: u64,
        seed: u64,
    },
    /// `numel` float32 values drawn from N(0, std²), generated at write time.
    Normal {
        numel: u64,
        std: f32,
        seed: u64,
    },
    /// `numel` float32 values drawn uniformly from [-bound, bound), generated at write time.
    Uniform {
        numel: u64,
        bound: f32,
        seed: u64,
    },
}

impl Data {
    fn len(&self) -> u64 {
        match self {
            Data::Inline(v) => v.len() as u64,
            Data::Random { len, .. } => *len,
            Data::Normal { numel, .. } | Data::Uniform { numel, .. } => 4 * numel,
        }
    }
}

pub struct Init {
    /// Everything but `raw_data`.
    pub header: pb::TensorProto,
    pub data: Data,
}

impl Init {
    fn tensor_len(&self) -> u64 {
        self.header.encoded_len() as u64 + ld_field_len(TENSOR_RAW_DATA, self.data.len())
    }
}

#[derive(Default)]
pub struct Builder {
    pub nodes: Vec<pb::NodeProto>,
    pub inits: Vec<Init>,
    pub inputs: Vec<pb::ValueInfoProto>,
    pub outputs: Vec<pb::ValueInfoProto>,
    pub seed: u64,
    /// Expected parameter count (float initializers with > 1 element, not BN statistics).
    pub params: u64,
    pub weight_bytes: u64,
}

pub use nnlint::rewrite::{attr_float, attr_int};

pub fn attr_ints(name: &str, v: &[i64]) -> pb::AttributeProto {
    nnlint::rewrite::attr_ints(name, v.to_vec())
}

pub fn attr_tensor(name: &str, t: pb::TensorProto) -> pb::AttributeProto {
    pb::AttributeProto {
        name: Some(name.into()),
        r#type: Some(pb::attribute_proto::AttributeType::Tensor as i32),
        t: Some(Box::new(t)),
        ..Default::default()
    }
}

pub fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A float32 tensor type with a symbolic first dimension.
pub fn value_info(name: &str, batch: &str, rest: &[i64]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value as D, Dimension};
    let mut dim = vec![Dimension {
        value: Some(D::DimParam(batch.into())),
        denotation: None,
    }];
    dim.extend(rest.iter().map(|&d| Dimension {
        value: Some(D::DimValue(d)),
        denotation: None,
    }));
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(F32),
                shape: Some(pb::TensorShapeProto { dim }),
            })),
            denotation: None,
        }),
        ..Default::default()
    }
}

impl Builder {
    /// Adds a node named like the PyTorch exporter does (`/scope/Op`), with outputs
    /// `/scope/Op_output_i`; returns the output names.
    pub fn node(
        &mut self,
        scope: &str,
        op: &str,
        inputs: &[&str],
        n_out: usize,
        attrs: Vec<pb::AttributeProto>,
    ) -> Vec<String> {
        let name = format!("{scope}/{op}");
        let outputs: Vec<String> = (0..n_out).map(|i| format!("{name}_output_{i}")).collect();
        self.nodes.push(pb::NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.clone(),
            name: Some(name),
            op_type: Some(op.into()),
            attribute: attrs,
            ..Default::default()
        });
        outputs
    }

    pub fn node1(
        &mut self,
        scope: &str,
        op: &str,
        inputs: &[&str],
        attrs: Vec<pb::AttributeProto>,
    ) -> String {
        self.node(scope, op, inputs, 1, attrs).pop().unwrap()
    }

    /// Adds a float32 initializer of `dims` whose bytes `data` makes from the next seed.
    /// `param`: counts as a trainable parameter.
    fn float_init(
        &mut self,
        name: &str,
        dims: &[i64],
        param: bool,
        data: impl FnOnce(u64, u64) -> Data,
    ) -> String {
        let numel: i64 = dims.iter().product();
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        if param && numel > 1 {
            self.params += numel as u64;
        }
        self.weight_bytes += 4 * numel as u64;
        self.inits.push(Init {
            header: pb::TensorProto {
                dims: dims.to_vec(),
                data_type: Some(F32),
                name: Some(name.into()),
                ..Default::default()
            },
            data: data(numel as u64, self.seed),
        });
        name.to_string()
    }

    /// A float32 initializer of values from the shared [`Pool`] (uniform in ±0.05).
    pub fn weight(&mut self, name: &str, dims: &[i64], param: bool) -> String {
        self.float_init(name, dims, param, |numel, seed| Data::Random {
            len: 4 * numel,
            seed,
        })
    }

    /// A float32 parameter drawn from N(0, std²).
    pub fn normal(&mut self, name: &str, dims: &[i64], std: f32) -> String {
        self.float_init(name, dims, true, |numel, seed| Data::Normal {
            numel,
            std,
            seed,
        })
    }

    /// A float32 parameter drawn uniformly from [-bound, bound).
    pub fn uniform(&mut self, name: &str, dims: &[i64], bound: f32) -> String {
        self.float_init(name, dims, true, |numel, seed| Data::Uniform {
            numel,
            bound,
            seed,
        })
    }

    pub fn const_i64(&mut self, name: &str, v: &[i64]) -> String {
        self.inits.push(Init {
            header: pb::TensorProto {
                dims: vec![v.len() as i64],
                data_type: Some(I64),
                name: Some(name.into()),
                ..Default::default()
            },
            data: Data::Inline(i64_bytes(v)),
        });
        name.to_string()
    }

    pub fn scalar_f32(&mut self, name: &str, v: f32) -> String {
        self.inits.push(Init {
            header: pb::TensorProto {
                dims: vec![],
                data_type: Some(F32),
                name: Some(name.into()),
                ..Default::default()
            },
            data: Data::Inline(v.to_le_bytes().to_vec()),
        });
        name.to_string()
    }
}

// ---------------------------------------------------------------------------------------------
// Weight bytes
// ---------------------------------------------------------------------------------------------

/// Pseudo-random float32 weights (uniform in ±0.05), from a 4 MiB pool read at a per-tensor offset:
/// real bytes on disk (not a sparse file), written at disk speed.
struct Pool(Vec<u8>);

impl Pool {
    fn new() -> Self {
        let mut s: u64 = 0x2545_F491_4F6C_DD1D;
        let mut v = Vec::with_capacity(4 << 20);
        for _ in 0..(1 << 20) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let f = ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1;
            v.extend_from_slice(&f.to_le_bytes());
        }
        Pool(v)
    }

    fn write(&self, out: &mut impl Write, mut len: u64, seed: u64) -> std::io::Result<()> {
        let mut off = ((seed >> 16) as usize % (self.0.len() / 4)) * 4;
        while len > 0 {
            let n = ((self.0.len() - off) as u64).min(len) as usize;
            out.write_all(&self.0[off..off + n])?;
            len -= n as u64;
            off = 0;
        }
        Ok(())
    }
}

/// splitmix64 (Steele, Lea and Flood 2014): a fast, seedable generator, good enough for weights.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Two independent standard normal values (Box–Muller).
    pub fn next_normal_pair(&mut self) -> (f64, f64) {
        let u1 = 1.0 - self.next_f64(); // (0, 1]: ln stays finite
        let u2 = self.next_f64();
        let r = (-2.0 * u1.ln()).sqrt();
        let (s, c) = (std::f64::consts::TAU * u2).sin_cos();
        (r * c, r * s)
    }
}

/// Values per chunk when generating weights: 1 MiB of float32.
const CHUNK: u64 = 1 << 18;

/// Writes `numel` float32 values from `gen` (pairs, as Box–Muller makes them), a chunk at a time.
fn write_generated(
    out: &mut impl Write,
    numel: u64,
    mut gen: impl FnMut() -> (f32, f32),
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4 * CHUNK as usize);
    let mut left = numel;
    while left > 0 {
        let n = left.min(CHUNK);
        buf.clear();
        for _ in 0..n.div_ceil(2) {
            let (a, b) = gen();
            buf.extend_from_slice(&a.to_le_bytes());
            buf.extend_from_slice(&b.to_le_bytes());
        }
        out.write_all(&buf[..4 * n as usize])?;
        left -= n;
    }
    Ok(())
}

fn write_data(out: &mut impl Write, data: &Data, pool: &Pool) -> std::io::Result<()> {
    match *data {
        Data::Inline(ref v) => out.write_all(v),
        Data::Random { len, seed } => pool.write(out, len, seed),
        Data::Normal { numel, std, seed } => {
            let mut rng = SplitMix64(seed);
            let std = f64::from(std);
            write_generated(out, numel, || {
                let (a, b) = rng.next_normal_pair();
                ((a * std) as f32, (b * std) as f32)
            })
        }
        Data::Uniform { numel, bound, seed } => {
            let mut rng = SplitMix64(seed);
            let bound = f64::from(bound);
            let mut draw = move || ((2.0 * rng.next_f64() - 1.0) * bound) as f32;
            write_generated(out, numel, || (draw(), draw()))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Writes the model with the graph's fields in field-number order, as protobuf serializers (and
/// therefore exporters) do: nodes first, then the initializers, then inputs and outputs.
/// Initializer data is streamed; nothing larger than one node is ever encoded in memory.
/// `version` is the generator's version (`producer_version`).
pub fn write_model(
    b: &Builder,
    graph_name: &str,
    version: &str,
    path: &Path,
) -> std::io::Result<u64> {
    let model = pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(OPSET),
        }],
        producer_name: Some("nnlint-bench".into()),
        producer_version: Some(version.into()),
        graph: None,
        ..Default::default()
    };
    let name_len = graph_name.len() as u64;
    let mut graph_len = ld_field_len(GRAPH_NAME, name_len);
    for n in &b.nodes {
        graph_len += ld_field_len(GRAPH_NODE, n.encoded_len() as u64);
    }
    for t in &b.inits {
        graph_len += ld_field_len(GRAPH_INITIALIZER, t.tensor_len());
    }
    for v in &b.inputs {
        graph_len += ld_field_len(GRAPH_INPUT, v.encoded_len() as u64);
    }
    for v in &b.outputs {
        graph_len += ld_field_len(GRAPH_OUTPUT, v.encoded_len() as u64);
    }

    // per process: `cargo test` and `cargo bench` may generate the same model at once
    let tmp = path.with_extension(format!("onnx.partial.{}", std::process::id()));
    let mut out = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
    out.write_all(&model.encode_to_vec())?;
    put_ld_header(&mut out, MODEL_GRAPH, graph_len)?;
    let mut buf = Vec::new();
    let mut put_msg = |out: &mut BufWriter<File>, field: u32, m: &dyn EncodeDyn| {
        buf.clear();
        m.encode_into(&mut buf);
        put_ld_header(out, field, buf.len() as u64)?;
        out.write_all(&buf)
    };
    for n in &b.nodes {
        put_msg(&mut out, GRAPH_NODE, n)?;
    }
    put_ld_header(&mut out, GRAPH_NAME, name_len)?;
    out.write_all(graph_name.as_bytes())?;
    let pool = Pool::new();
    for t in &b.inits {
        put_ld_header(&mut out, GRAPH_INITIALIZER, t.tensor_len())?;
        out.write_all(&t.header.encode_to_vec())?;
        put_ld_header(&mut out, TENSOR_RAW_DATA, t.data.len())?;
        write_data(&mut out, &t.data, &pool)?;
    }
    for v in &b.inputs {
        put_msg(&mut out, GRAPH_INPUT, v)?;
    }
    for v in &b.outputs {
        put_msg(&mut out, GRAPH_OUTPUT, v)?;
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    let size = file.metadata()?.len();
    let expected = model.encoded_len() as u64 + ld_field_len(MODEL_GRAPH, graph_len);
    assert_eq!(size, expected, "{}: size bookkeeping is off", tmp.display());
    std::fs::rename(&tmp, path)?;
    Ok(size)
}

/// `prost::Message` is not object-safe; this is the one method the writer needs.
trait EncodeDyn {
    fn encode_into(&self, buf: &mut Vec<u8>);
}

impl<M: Message> EncodeDyn for M {
    fn encode_into(&self, buf: &mut Vec<u8>) {
        self.encode(buf).expect("a Vec grows");
    }
}

/// `target/bench-models/VERSION/` (or `$CARGO_TARGET_DIR/bench-models/VERSION/`).
pub fn model_dir(version: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let target = if target.is_relative() {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(target)
    } else {
        target
    };
    target.join("bench-models").join(version)
}
