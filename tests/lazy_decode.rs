//! The main graph is decoded one message at a time (load/onnx_shell.rs), and float initializers
//! above 64 elements stay in the file (load/skim.rs, `analysis::ops::initializer_fact`). These
//! tests hold what that must not change: the count of bytes of unknown fields, which decoding error
//! is reported, and constant folding of the weights left in the file.

mod common;

use common::onnx::{floats, node, vi, FLOAT, G};
use nnlint::load::onnx_pb as pb;
use prost::encoding::encode_varint as varint;
use prost::Message;

/// A length-delimited field, whatever its payload (prost's own writer for the key and the length).
fn field(tag: u64, payload: &[u8], out: &mut Vec<u8>) {
    varint(tag << 3 | 2, out);
    varint(payload.len() as u64, out);
    out.extend_from_slice(payload);
}

fn model_with(graph: Vec<u8>, tail: &[u8]) -> Vec<u8> {
    let mut m = pb::ModelProto {
        ir_version: Some(8),
        opset_import: vec![pb::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(17),
        }],
        ..Default::default()
    }
    .encode_to_vec();
    field(7, &graph, &mut m);
    m.extend_from_slice(tail);
    m
}

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

#[test]
fn unknown_fields_in_a_node_and_in_the_model_are_counted_to_the_byte() {
    let graph = G::new("g")
        .input(vi("x", FLOAT, &[1, 4]))
        .output(vi("y", FLOAT, &[1, 4]))
        .build();
    let mut g = graph.encode_to_vec();
    let mut relu = node("Relu", "relu", &["x"], &["y"]).encode_to_vec();
    // field 50 of NodeProto (unknown): 2 bytes of key, 1 of length, 3 of payload
    field(50, b"abc", &mut relu);
    field(1, &relu, &mut g);
    assert!(
        relu.len() < 128 && g.len() < 128,
        "the length prefixes stay one byte"
    );
    // field 99 of ModelProto (unknown), a varint: 2 bytes of key, 1 of value
    let mut tail = Vec::new();
    varint(99 << 3, &mut tail);
    varint(1, &mut tail);
    let bytes = model_with(g, &tail);
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "unknown.onnx", &bytes);
    let out = common::nnlint(&["mem", &path]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let want = format!(
        "9 of {} bytes belong to fields this ONNX schema (IR version 14) does not know",
        bytes.len()
    );
    // the report's warnings follow the table
    assert!(
        common::stdout(&out).contains(&want),
        "{}",
        common::stdout(&out)
    );
}

#[test]
fn a_corrupt_node_is_reported_before_what_an_earlier_readable_node_means() {
    let graph = G::new("g")
        .input(vi("x", FLOAT, &[1, 4]))
        .output(vi("y", FLOAT, &[1, 4]))
        // reads a value nothing defines: an error, once the file is known to be readable
        .node(node("Add", "add", &["x", "nowhere"], &["y"]))
        .build();
    let mut g = graph.encode_to_vec();
    // a node whose op_type is not UTF-8: the file's structure is sound (the loader's first pass
    // reads it), the message is not
    let mut bad = Vec::new();
    field(4, &[0xff, 0xfe], &mut bad);
    field(1, &bad, &mut g);
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "corrupt.onnx", &model_with(g, &[]));
    let out = common::nnlint(&["mem", &path]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains(
            "not a valid ONNX model (protobuf decoding failed at ModelProto.graph > GraphProto.node > NodeProto.op_type: invalid string value: data is not UTF-8 encoded)"
        ),
        "{err}"
    );
    assert!(!err.contains("nowhere"), "{err}");

    // without the corrupt node, the graph's own error
    let path = write(
        &dir,
        "dangling.onnx",
        &model_with(graph.encode_to_vec(), &[]),
    );
    let err = common::stderr(&common::nnlint(&["mem", &path]));
    assert!(err.contains("reads 'nowhere'"), "{err}");
}

#[test]
fn float_weights_left_in_the_file_still_fold() {
    // 200 floats (800 bytes): the loader leaves them in the file, and the analysis reads them only
    // for the node that folds them
    let a: Vec<f32> = (0..200).map(|i| i as f32).collect();
    let model = G::new("g")
        .input(vi("x", FLOAT, &[200]))
        .output(vi("y", FLOAT, &[200]))
        .init(floats("a", &[200], &a))
        .init(floats("b", &[200], &a))
        .node(node("Add", "sum", &["a", "b"], &["s"]))
        .node(node("Add", "out", &["x", "s"], &["y"]))
        .model();
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "fold.onnx", &model);
    let v = common::run_json(&["mem", "-f", "json", &path]);
    assert_eq!(
        common::find_in(&v, "layers", "name", "sum")["folded"],
        true,
        "{v:#}"
    );
    assert_eq!(
        common::find_in(&v, "layers", "name", "out")["folded"],
        false,
        "{v:#}"
    );
}
