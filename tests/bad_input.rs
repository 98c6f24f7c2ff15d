//! Hostile, malformed and unsupported inputs. nnlint must never panic on a file: each case below
//! builds one bad file in a temporary directory, runs the real binary, and checks for exit code 2
//! and a single error line on stderr naming the file and the problem (or, where analysis must go on,
//! exit code 0 and a warning in the report).

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::onnx::*;
use nnlint::load::onnx_pb as pb;
use prost::Message;

/// `y = Relu(x)` with x: float[1, 4]; the smallest well-formed model.
fn relu() -> G {
    G::new("relu")
        .input(vi("x", FLOAT, &[1, 4]))
        .node(node("Relu", "relu", &["x"], &["y"]))
        .output(vi_untyped("y"))
}

/// `y = Add(x, w)` with an initializer `w` of float[4], given by the caller.
fn add_weight(w: pb::TensorProto) -> G {
    G::new("add")
        .input(vi("x", FLOAT, &[1, 4]))
        .init(w)
        .node(node("Add", "add", &["x", "w"], &["y"]))
        .output(vi_untyped("y"))
}

// ---------------------------------------------------------------------------------------------
// safetensors builders

/// A safetensors file: 8-byte little-endian header length, the JSON header, then `data`.
fn safetensors_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// A well-formed single-tensor file: `w` of F32[2, 2] (16 bytes).
fn good_safetensors() -> Vec<u8> {
    safetensors_bytes(
        r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#,
        &[0; 16],
    )
}

// ---------------------------------------------------------------------------------------------
// Running and checking

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write test file");
    path
}

fn mem(path: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["mem", path.to_str().expect("utf-8 temp path")];
    args.extend_from_slice(extra);
    common::nnlint(&args)
}

/// `nnlint mem - [extra]` with `input` on standard input.
fn mem_stdin(input: &[u8], extra: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_nnlint"))
        .args(["mem", "-"])
        .args(extra)
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the nnlint binary runs");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input)
        .expect("write stdin");
    child.wait_with_output().expect("nnlint finishes")
}

/// Checks a refusal: exit code 2, no panic, one `nnlint: error:` line naming `shown` (the file as the
/// user gave it) and containing every phrase (case-insensitive). Returns the line.
fn assert_error(out: &Output, shown: &str, phrases: &[&str]) -> String {
    let err = common::stderr(out);
    assert!(!err.contains("panicked"), "nnlint panicked:\n{err}");
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected exit code 2, stderr:\n{err}\nstdout:\n{}",
        common::stdout(out)
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout on error, got:\n{}",
        common::stdout(out)
    );
    let line = err.trim_end();
    assert_eq!(
        line.lines().count(),
        1,
        "stderr must be a single line:\n{err}"
    );
    assert!(line.starts_with("nnlint: error: "), "{line}");
    assert!(
        line.contains(shown),
        "the error does not name '{shown}': {line}"
    );
    let lower = line.to_lowercase();
    for p in phrases {
        assert!(
            lower.contains(&p.to_lowercase()),
            "the error does not say '{p}': {line}"
        );
    }
    eprintln!("ERROR LINE: {line}");
    line.to_string()
}

fn assert_refused(path: &Path, phrases: &[&str]) -> String {
    let out = mem(path, &[]);
    assert_error(&out, &path.display().to_string(), phrases)
}

/// Checks a successful run (exit code 0, no panic) and returns stdout.
fn assert_ok(out: &Output) -> String {
    let err = common::stderr(out);
    assert!(!err.contains("panicked"), "nnlint panicked:\n{err}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "expected exit code 0, stderr:\n{err}"
    );
    common::stdout(out)
}

fn json(out: &Output) -> serde_json::Value {
    let text = assert_ok(out);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"))
}

/// Deterministic pseudo-random bytes (xorshift64*).
fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s >> 12;
            s ^= s << 25;
            s ^= s >> 27;
            (s.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Paths that are not model files

#[test]
fn nonexistent_path() {
    let dir = tempfile::tempdir().unwrap();
    assert_refused(&dir.path().join("missing.onnx"), &["no such file"]);
    assert_refused(&dir.path().join("missing"), &["no such file"]);
}

#[test]
fn directory_as_model() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("model");
    std::fs::create_dir(&plain).unwrap();
    assert_refused(&plain, &["is a directory"]);
    // the extension must not send a directory to a loader that maps it
    for name in [
        "model.onnx",
        "model.safetensors",
        "model.safetensors.index.json",
    ] {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        assert_refused(&d, &["is a directory"]);
    }
}

#[test]
fn empty_file() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["empty.onnx", "empty", "empty.safetensors"] {
        assert_refused(&write(dir.path(), name, b""), &["empty"]);
    }
}

// ---------------------------------------------------------------------------------------------
// ONNX files that do not decode

#[test]
fn truncated_onnx() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = add_weight(weight("w", &[1024])).model();
    let path = write(dir.path(), "model.onnx", &bytes[..bytes.len() / 2]);
    assert_refused(&path, &["not a valid onnx model", "truncated"]);
    // cut inside the last varint: the decoder cannot tell that from corruption
    let path = write(dir.path(), "model.onnx", &bytes[..bytes.len() - 1]);
    assert_refused(&path, &["not a valid onnx model"]);
}

#[test]
fn non_onnx_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = b"name,params\nresnet18,11689512\n";
    assert_refused(&write(dir.path(), "model.onnx", text), &["onnx"]);
    // a PNG given without a telling extension
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x10\x08\x06\0\0\0";
    assert_refused(&write(dir.path(), "picture", png), &["onnx"]);
}

#[test]
fn valid_protobuf_that_is_not_a_model() {
    let dir = tempfile::tempdir().unwrap();
    // a GraphProto on its own: its fields clash with ModelProto's
    let bytes = relu().build().encode_to_vec();
    let path = write(dir.path(), "graph.onnx", &bytes);
    assert_refused(&path, &["not a valid onnx model", "ModelProto.ir_version"]);
    // a ModelProto without a graph
    let bytes = pb::ModelProto {
        ir_version: Some(8),
        producer_name: Some("x".into()),
        ..Default::default()
    }
    .encode_to_vec();
    let path = write(dir.path(), "nograph.onnx", &bytes);
    assert_refused(&path, &["not an onnx model", "no graph"]);
    // a graph, but neither IR version nor opsets
    let bytes = pb::ModelProto {
        graph: Some(relu().build()),
        ..Default::default()
    }
    .encode_to_vec();
    let path = write(dir.path(), "noversion.onnx", &bytes);
    assert_refused(&path, &["not an onnx model", "no ir version"]);
}

#[test]
fn random_bytes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..32 {
        let len = [1, 7, 64, 4096][seed as usize % 4];
        let name = if seed % 2 == 0 {
            "random.onnx"
        } else {
            "random"
        };
        let path = write(dir.path(), name, &random_bytes(seed, len));
        let out = mem(&path, &[]);
        assert_error(&out, &path.display().to_string(), &["onnx"]);
    }
}

#[test]
fn onnx_with_unknown_data_type() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = weight("w", &[4]);
    w.data_type = Some(9999);
    let path = write(dir.path(), "m.onnx", &add_weight(w).model());
    assert_refused(&path, &["'w'", "unknown data type"]);
}

// ---------------------------------------------------------------------------------------------
// ONNX tensors and declared types

#[test]
fn initializer_negative_dim() {
    let dir = tempfile::tempdir().unwrap();
    let w = raw_tensor("w", &[-4], vec![0; 16]);
    let path = write(dir.path(), "m.onnx", &add_weight(w).model());
    assert_refused(&path, &["'w'", "negative dimension"]);
}

#[test]
fn initializer_dims_product_overflows() {
    let dir = tempfile::tempdir().unwrap();
    let w = raw_tensor("w", &[1 << 40, 1 << 40], vec![0; 16]);
    let path = write(dir.path(), "m.onnx", &add_weight(w).model());
    assert_refused(&path, &["'w'", "overflows"]);
}

#[test]
fn initializer_byte_size_overflows() {
    // 2^62 elements fit in u64, their 2^64 bytes do not
    let dir = tempfile::tempdir().unwrap();
    let w = raw_tensor("w", &[1 << 31, 1 << 31], vec![0; 16]);
    let path = write(dir.path(), "m.onnx", &add_weight(w).model());
    assert_refused(&path, &["'w'", "overflows"]);
}

#[test]
fn sparse_initializer_bad_dims() {
    let dir = tempfile::tempdir().unwrap();
    for (dims, phrase) in [
        (vec![1i64 << 40, 1 << 40], "overflows"),
        (vec![4, -4], "negative dimension"),
    ] {
        let mut indices = raw_tensor("w_idx", &[1], vec![0; 8]);
        indices.data_type = Some(INT64);
        let mut g = add_weight(weight("unused", &[4]));
        g.0.initializer.clear();
        g.0.sparse_initializer.push(pb::SparseTensorProto {
            values: Some(weight("w", &[1])),
            indices: Some(indices),
            dims,
        });
        let path = write(dir.path(), "sparse.onnx", &g.model());
        assert_refused(&path, &["sparse initializer 'w'", phrase]);
    }
}

#[test]
fn a_negative_declared_dim_is_a_dynamic_axis() {
    // Paddle2ONNX writes -1 for a dynamic axis; onnx.checker and onnxruntime accept it
    let dir = tempfile::tempdir().unwrap();
    let input = G::new("g")
        .input(vi("x", FLOAT, &[-1, 3, -1, -1]))
        .node(node("Relu", "relu", &["x"], &["y"]))
        .output(vi_untyped("y"))
        .value_info(vi("y", FLOAT, &[-1, 3, -1, -1]));
    let path = write(dir.path(), "input.onnx", &input.model());
    let out = mem(&path, &["--format", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let r: serde_json::Value = serde_json::from_str(&common::stdout(&out)).unwrap();
    // the batch is bound to 1 by default; the two spatial axes stay unbound, each on its own
    assert_eq!(r["unbound_dims"], serde_json::json!(["x_d2", "x_d3"]));
    let out = mem(&path, &["--format", "json", "--input", "x=2x3x48x192"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let r: serde_json::Value = serde_json::from_str(&common::stdout(&out)).unwrap();
    assert_eq!(r["batch"], 2);
    assert_eq!(
        r["layers"][0]["output_shapes"][0],
        serde_json::json!([2, 3, 48, 192])
    );
    assert_eq!(r["totals"]["activation_bytes"], 2 * 3 * 48 * 192 * 4);
}

#[test]
fn conflicting_bindings_are_errors_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "m.onnx",
        &G::new("g")
            .input(common::onnx::vi_sym("x", FLOAT, &["batch", "3"]))
            .node(node("Relu", "relu", &["x"], &["y"]))
            .output(vi_untyped("y"))
            .model(),
    );
    for (args, phrases) in [
        (
            vec!["--batch", "8", "--dim", "batch=4"],
            vec!["--batch 8", "--dim batch=4"],
        ),
        (
            vec!["--input", "x=2x3", "--batch", "8"],
            vec!["--batch 8", "--input x=2x3"],
        ),
        (vec!["--input", "x=2x4"], vec!["fixed at 3"]),
        (
            vec!["--input", "z=2x3"],
            vec!["no input named 'z'", "inputs: x"],
        ),
        (vec!["--input", "x=2"], vec!["rank 2"]),
    ] {
        let out = mem(&path, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = common::stderr(&out);
        for p in phrases {
            assert!(err.contains(p), "{args:?}: {err}");
        }
    }
    // the same value twice is no conflict, and --dim on the first axis sets the reported batch
    let out = mem(&path, &["--format", "json", "--dim", "batch=64"]);
    let r: serde_json::Value = serde_json::from_str(&common::stdout(&out)).unwrap();
    assert_eq!(r["batch"], 64);
}

#[test]
fn value_info_dims_product_overflows() {
    let dir = tempfile::tempdir().unwrap();
    let input = G::new("g")
        .input(vi("x", FLOAT, &[i64::MAX, i64::MAX]))
        .node(node("Relu", "relu", &["x"], &["y"]))
        .output(vi_untyped("y"));
    let path = write(dir.path(), "input.onnx", &input.model());
    assert_refused(&path, &["'x'", "overflows"]);
    let inner = relu().value_info(vi("y", FLOAT, &[1 << 40, 1 << 40]));
    let path = write(dir.path(), "value_info.onnx", &inner.model());
    assert_refused(&path, &["'y'", "overflows"]);
}

#[test]
fn raw_data_length_does_not_match_shape() {
    let dir = tempfile::tempdir().unwrap();
    let w = raw_tensor("w", &[4], vec![0; 15]);
    let path = write(dir.path(), "m.onnx", &add_weight(w).model());
    assert_refused(&path, &["'w'", "raw_data holds 15 bytes", "16"]);
}

#[test]
fn initializer_without_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = weight("w", &[4]);
    w.raw_data = None;
    let path = write(dir.path(), "m.onnx", &add_weight(w).model());
    assert_refused(&path, &["'w'", "no data"]);
}

// ---------------------------------------------------------------------------------------------
// ONNX external data

/// A model whose weights are missing is analysed from its graph, with a warning; only what needs
/// the weight values refuses it, in one line naming the file and exit code 2.
fn analysed_without_weights(path: &Path, phrases: &[&str]) {
    let out = mem(path, &["--format", "json"]);
    let v = json(&out);
    assert_eq!(v["totals"]["params"], 4, "{v}");
    let warning = v["warnings"][0].as_str().unwrap_or_default();
    for p in phrases {
        assert!(warning.contains(p), "{p:?} not in {warning:?}");
    }
    let out = common::nnlint(&["mem", &path.display().to_string()]);
    assert!(
        common::stdout(&out).contains("warning:"),
        "{}",
        common::stdout(&out)
    );
    // where standard output is data (JSON, CSV) or there is no table of warnings (fit, report),
    // the warning goes to standard error, naming the model and the data file
    let p = path.to_str().unwrap();
    for cmd in [
        vec!["mem", p, "--format", "json"],
        vec!["mem", p, "--format", "csv"],
        vec!["fit", p, "--gpu", "16GiB"],
        vec!["report", p],
    ] {
        let out = common::nnlint(&cmd);
        let err = common::stderr(&out);
        assert!(
            err.contains(&format!("nnlint: warning: {p}: ")) && err.contains(phrases[0]),
            "{cmd:?}: {err}"
        );
    }
    for cmd in [vec!["rewrite", p], vec!["verify", p, p]] {
        let out = common::nnlint(&cmd);
        assert_error(
            &out,
            &path.display().to_string(),
            &["needs the weight values", phrases[0]],
        );
    }
}

/// `duplicate-initializer` compares weight bytes: without them it refuses, in one line.
#[test]
fn duplicate_initializer_refuses_missing_external_data() {
    let dir = tempfile::tempdir().unwrap();
    let model = G::new("g")
        .input(vi("x", FLOAT, &[4]))
        .output(vi("y", FLOAT, &[4]))
        .init(external_tensor("a", &[1024], "w.bin", 0))
        .init(external_tensor("b", &[1024], "w.bin", 4096))
        .node(node("Add", "add1", &["x", "a"], &["t"]))
        .node(node("Add", "add2", &["t", "b"], &["y"]))
        .model();
    let path = write(dir.path(), "m.onnx", &model);
    // the data file holds the first tensor only: the second is short
    write(dir.path(), "w.bin", &[0; 4096]);
    let p = path.to_str().unwrap();
    let out = common::nnlint(&["lint", p, "--select", "NL304"]);
    assert_eq!(out.status.code(), Some(2), "{}", common::stdout(&out));
    let err = common::stderr(&out);
    assert!(
        err.contains(p)
            && err.contains("duplicate-initializer")
            && err.contains("needs the weight bytes")
            && err.contains("beyond the end of 'w.bin'"),
        "{err}"
    );
}

#[test]
fn external_data_file_missing() {
    let dir = tempfile::tempdir().unwrap();
    let model = add_weight(external_tensor("w", &[4], "w.bin", 0)).model();
    let path = write(dir.path(), "m.onnx", &model);
    analysed_without_weights(&path, &["w.bin", "not found"]);
}

#[test]
fn external_data_parent_dir_escapes() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    write(dir.path(), "x", &[0; 16]);
    let model = add_weight(external_tensor("w", &[4], "../x", 0)).model();
    let path = write(&models, "m.onnx", &model);
    assert_refused(&path, &["'../x'", "outside the model's directory"]);
}

#[test]
fn external_data_absolute_path() {
    let dir = tempfile::tempdir().unwrap();
    let data = write(dir.path(), "w.bin", &[0; 16]);
    let model = add_weight(external_tensor("w", &[4], data.to_str().unwrap(), 0)).model();
    let path = write(dir.path(), "m.onnx", &model);
    assert_refused(&path, &["outside the model's directory"]);
}

#[cfg(unix)]
#[test]
fn external_data_symlink_pointing_outside() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    let secret = write(dir.path(), "secret", &[0; 16]);
    std::os::unix::fs::symlink(&secret, models.join("w.bin")).unwrap();
    let model = add_weight(external_tensor("w", &[4], "w.bin", 0)).model();
    let path = write(&models, "m.onnx", &model);
    assert_refused(&path, &["'w.bin'", "outside the model's directory", "link"]);
}

#[cfg(unix)]
#[test]
fn external_data_symlinked_directory_pointing_outside() {
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    write(&elsewhere, "w.bin", &[0; 16]);
    std::os::unix::fs::symlink(&elsewhere, models.join("data")).unwrap();
    let model = add_weight(external_tensor("w", &[4], "data/w.bin", 0)).model();
    let path = write(&models, "m.onnx", &model);
    assert_refused(&path, &["outside the model's directory"]);
}

#[test]
fn external_data_range_beyond_end_of_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "w.bin", &[0; 20]);
    let model = add_weight(external_tensor("w", &[4], "w.bin", 8)).model();
    let path = write(dir.path(), "m.onnx", &model);
    analysed_without_weights(&path, &["8..24", "beyond the end", "20 bytes"]);
}

#[test]
fn external_data_offset_overflows() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "w.bin", &[0; 16]);
    let model = add_weight(external_tensor("w", &[4], "w.bin", u64::MAX - 3)).model();
    let path = write(dir.path(), "m.onnx", &model);
    assert_refused(&path, &["'w'", "overflows"]);
}

#[test]
fn external_data_location_is_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("w.bin")).unwrap();
    let model = add_weight(external_tensor("w", &[4], "w.bin", 0)).model();
    let path = write(dir.path(), "m.onnx", &model);
    assert_refused(&path, &["'w.bin'", "not a file"]);
}

#[test]
fn external_data_is_fine_inside_the_directory() {
    // the counterpart of the refusals above: the same model with its data in place loads
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    write(&dir.path().join("data"), "w.bin", &[0; 32]);
    let model = add_weight(external_tensor("w", &[4], "data/w.bin", 16)).model();
    let path = write(dir.path(), "m.onnx", &model);
    let report = json(&mem(&path, &["--format", "json"]));
    assert_eq!(report["totals"]["params"], 4);
}

// ---------------------------------------------------------------------------------------------
// ONNX graphs

#[test]
fn graph_with_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let g = G::new("cycle")
        .input(vi("x", FLOAT, &[1, 4]))
        .node(node("Add", "a", &["x", "c"], &["b"]))
        .node(node("Relu", "b", &["b"], &["c"]))
        .output(vi_untyped("c"));
    let path = write(dir.path(), "cycle.onnx", &g.model());
    assert_refused(&path, &["cycle"]);
}

#[test]
fn node_reading_its_own_output() {
    let dir = tempfile::tempdir().unwrap();
    let g = G::new("self")
        .input(vi("x", FLOAT, &[1, 4]))
        .node(node("Add", "a", &["x", "y"], &["y"]))
        .output(vi_untyped("y"));
    let path = write(dir.path(), "self.onnx", &g.model());
    assert_refused(&path, &["cycle"]);
}

#[test]
fn node_reading_an_undefined_value() {
    let dir = tempfile::tempdir().unwrap();
    let g = relu().node(node("Add", "add", &["y", "ghost"], &["z"]));
    let path = write(dir.path(), "m.onnx", &g.model());
    assert_refused(&path, &["'ghost'"]);
}

#[test]
fn unknown_op_is_reported_and_analysis_continues() {
    let dir = tempfile::tempdir().unwrap();
    let mut custom = node("FancyAttention", "fancy", &["h"], &["a"]);
    custom.domain = Some("com.example".into());
    let g = G::new("g")
        .input(vi("x", FLOAT, &[1, 4]))
        .init(weight("w", &[4]))
        .node(node("Add", "add", &["x", "w"], &["h"]))
        .node(custom)
        .node(node("Relu", "relu", &["a"], &["y"]))
        .output(vi_untyped("y"));
    let path = write(dir.path(), "custom.onnx", &g.model());

    let table = assert_ok(&mem(&path, &[]));
    assert!(table.contains("unknown ops"), "{table}");
    assert!(table.contains("FancyAttention"), "{table}");

    let report = json(&mem(&path, &["--format", "json"]));
    let unknown = report["unknown_ops"].as_array().unwrap();
    assert_eq!(unknown.len(), 1, "{report}");
    assert_eq!(unknown[0]["op"], "FancyAttention");
    assert_eq!(unknown[0]["domain"], "com.example");
    assert_eq!(unknown[0]["nodes"][0], "fancy");
    // the nodes around it are still analysed
    let layers: Vec<&str> = report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(layers, ["add", "fancy", "relu"]);
    assert_eq!(report["totals"]["params"], 4);
}

/// A Conv over x: float[1, 3, 8, 8] with weight float[w_shape], plus attributes.
fn conv_model(w_shape: &[i64], attrs: Vec<pb::AttributeProto>) -> Vec<u8> {
    let mut conv = node("Conv", "conv", &["x", "w"], &["y"]);
    conv.attribute = attrs;
    G::new("conv")
        .input(vi("x", FLOAT, &[1, 3, 8, 8]))
        .init(weight("w", w_shape))
        .node(conv)
        .node(node("Relu", "relu", &["y"], &["z"]))
        .output(vi_untyped("z"))
        .model()
}

fn warnings(report: &serde_json::Value) -> Vec<String> {
    report["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn conv_with_group_zero_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let model = conv_model(&[6, 3, 3, 3], vec![attr_int("group", 0)]);
    let path = write(dir.path(), "conv.onnx", &model);
    let report = json(&mem(&path, &["--format", "json"]));
    let w = warnings(&report);
    assert!(
        w.iter().any(|w| w.contains("conv") && w.contains("group")),
        "{w:?}"
    );
    assert_eq!(report["totals"]["params"], 6 * 3 * 3 * 3);
    assert!(assert_ok(&mem(&path, &[])).contains("warning:"));
}

#[test]
fn conv_with_mismatched_channels_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    // 3 input channels, a weight for 5
    let model = conv_model(&[6, 5, 3, 3], vec![]);
    let path = write(dir.path(), "conv.onnx", &model);
    let report = json(&mem(&path, &["--format", "json"]));
    let w = warnings(&report);
    assert!(
        w.iter()
            .any(|w| w.contains("conv") && w.contains("channels")),
        "{w:?}"
    );
    assert_eq!(report["layers"].as_array().unwrap().len(), 2);
}

#[test]
fn attribute_declared_but_empty() {
    let dir = tempfile::tempdir().unwrap();
    let mut group = attr_int("group", 1);
    group.i = None;
    let path = write(
        dir.path(),
        "conv.onnx",
        &conv_model(&[6, 3, 3, 3], vec![group]),
    );
    assert_refused(&path, &["'group'", "holds no value"]);
}

#[test]
fn depth_to_space_with_a_huge_blocksize() {
    let dir = tempfile::tempdir().unwrap();
    for op in ["DepthToSpace", "SpaceToDepth"] {
        let mut n = node(op, "d2s", &["x"], &["y"]);
        n.attribute = vec![attr_int("blocksize", i64::MAX)];
        let g = G::new("g")
            .input(vi("x", FLOAT, &[1, 4, 8, 8]))
            .node(n)
            .output(vi_untyped("y"));
        let path = write(dir.path(), "d2s.onnx", &g.model());
        let report = json(&mem(&path, &["--format", "json"]));
        assert!(
            warnings(&report).iter().any(|w| w.contains("blocksize")),
            "{op}: {report}"
        );
    }
}

#[test]
fn nodes_with_the_wrong_number_of_inputs() {
    // like bad attributes, a wrong input count must be a warning on that node, never a crash
    let dir = tempfile::tempdir().unwrap();
    let ints = |name: &str, values: &[i64]| pb::TensorProto {
        name: Some(name.into()),
        dims: vec![values.len() as i64],
        data_type: Some(INT64),
        int64_data: values.to_vec(),
        ..Default::default()
    };
    let cases: &[(&str, &[&str])] = &[
        ("Add", &[]),
        ("Mul", &[]),
        ("PRelu", &[]),
        ("Greater", &["a"]),
        ("Equal", &["a"]),
        ("Slice", &["a", "a", "a"]),
        ("Slice", &["a", "e", "e"]),
    ];
    let mut failures = Vec::new();
    for (op, inputs) in cases {
        let g = G::new("arity")
            .init(ints("a", &[1, 2]))
            .init(ints("e", &[]))
            .node(node(op, "n", inputs, &["y"]))
            .output(vi_untyped("y"));
        let path = write(dir.path(), "arity.onnx", &g.model());
        let out = mem(&path, &[]);
        if out.status.code() != Some(0) || common::stderr(&out).contains("panicked") {
            let err = common::stderr(&out);
            let first: Vec<&str> = err.lines().filter(|l| !l.is_empty()).take(2).collect();
            failures.push(format!("{op}{inputs:?}: {}", first.join(" ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// `If(cond)` nested `depth` levels deep in its then-branch; every else-branch is a leaf.
fn nested_if(depth: usize) -> pb::GraphProto {
    let leaf = |k: usize| {
        G::new(&format!("leaf{k}"))
            .node(node(
                "Identity",
                &format!("id{k}"),
                &["x"],
                &[&format!("out{k}")],
            ))
            .output(vi_untyped(&format!("out{k}")))
            .build()
    };
    let mut inner = leaf(depth);
    for k in (0..depth).rev() {
        let mut n = node("If", &format!("if{k}"), &["cond"], &[&format!("out{k}")]);
        n.attribute = vec![
            graph_attr("then_branch", inner),
            graph_attr("else_branch", leaf(k)),
        ];
        inner = G::new(&format!("level{k}"))
            .node(n)
            .output(vi_untyped(&format!("out{k}")))
            .build();
    }
    inner
}

/// A model whose graph is [`nested_if`] of the given depth.
fn nested_model(depth: usize) -> Vec<u8> {
    let mut g = G::new("nested")
        .input(vi("x", FLOAT, &[1, 4]))
        .input(vi("cond", BOOL, &[]));
    for n in nested_if(depth).node {
        g = g.node(n);
    }
    g.output(vi_untyped("out0")).model()
}

#[test]
fn nested_subgraphs_within_the_protobuf_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "nested.onnx", &nested_model(30));
    let report = json(&mem(&path, &["--format", "json"]));
    assert_eq!(report["layers"][0]["name"], "if0");
}

#[test]
fn deeply_nested_subgraphs_50_levels() {
    // 50 levels of If is ~150 levels of protobuf messages: past the 100 that protobuf readers accept
    // (prost here, and the C++ and Python runtimes), so a clean refusal rather than a stack overflow
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "nested.onnx", &nested_model(50));
    assert_refused(&path, &["nested too deeply", "100 levels"]);
}

#[test]
fn absurdly_nested_subgraphs() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "nested.onnx", &nested_model(1000));
    assert_refused(&path, &["nested too deeply"]);
}

#[test]
fn many_huge_sparse_initializers_on_one_node() {
    // each dense shape is 2^58 float32 elements (2^60 bytes): legal alone, 17 of them overflow u64
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..17).map(|i| format!("s{i}")).collect();
    let mut g = G::new("sparse").node(node(
        "Sum",
        "sum",
        &names.iter().map(String::as_str).collect::<Vec<_>>(),
        &["y"],
    ));
    for name in &names {
        let mut indices = raw_tensor(&format!("{name}_idx"), &[1], vec![0; 8]);
        indices.data_type = Some(INT64);
        g.0.sparse_initializer.push(pb::SparseTensorProto {
            values: Some(weight(name, &[1])),
            indices: Some(indices),
            dims: vec![1 << 29, 1 << 29],
        });
    }
    let path = write(
        dir.path(),
        "sparse.onnx",
        &g.output(vi_untyped("y")).model(),
    );
    assert_ok(&mem(&path, &[]));
}

#[test]
fn subgraph_initializers_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    // If: each branch adds its own weight (4 and 4 params)
    let branch = |k: &str| {
        G::new(k)
            .init(weight(&format!("w_{k}"), &[4]))
            .node(node(
                "Add",
                &format!("add_{k}"),
                &["x", &format!("w_{k}")],
                &[&format!("y_{k}")],
            ))
            .output(vi(&format!("y_{k}"), FLOAT, &[1, 4]))
            .build()
    };
    let mut if_node = node("If", "if", &["cond"], &["y"]);
    if_node.attribute = vec![
        graph_attr("then_branch", branch("then")),
        graph_attr("else_branch", branch("else")),
    ];
    // Loop: the body multiplies the carried value by a weight of 8 params
    let body = G::new("body")
        .input(vi("i", INT64, &[]))
        .input(vi("c_in", BOOL, &[]))
        .input(vi("v_in", FLOAT, &[2, 4]))
        .init(weight("w_body", &[2, 4]))
        .node(node("Identity", "keep_going", &["c_in"], &["c_out"]))
        .node(node("Mul", "mul", &["v_in", "w_body"], &["v_out"]))
        .output(vi("c_out", BOOL, &[]))
        .output(vi("v_out", FLOAT, &[2, 4]))
        .build();
    let mut loop_node = node("Loop", "loop", &["trip", "cond", "v0"], &["v_final"]);
    loop_node.attribute = vec![graph_attr("body", body)];
    let g = G::new("control_flow")
        .input(vi("x", FLOAT, &[1, 4]))
        .input(vi("cond", BOOL, &[]))
        .input(vi("trip", INT64, &[]))
        .input(vi("v0", FLOAT, &[2, 4]))
        .node(if_node)
        .node(loop_node)
        .output(vi_untyped("y"))
        .output(vi_untyped("v_final"));
    let path = write(dir.path(), "control_flow.onnx", &g.model());
    let report = json(&mem(&path, &["--format", "json"]));
    assert_eq!(
        report["totals"]["params"],
        4 + 4 + 8,
        "{}",
        report["totals"]
    );
    let params: Vec<(String, u64, u64)> = report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["name"].as_str().unwrap().to_string(),
                l["params"].as_u64().unwrap(),
                l["depth"].as_u64().unwrap(),
            )
        })
        .collect();
    // the subgraphs' nodes are listed under their node; their weights are charged to it
    let p = |n: &str, k: u64, d: u64| (n.to_string(), k, d);
    assert_eq!(
        params,
        [
            p("if", 8, 0),
            p("add_then", 0, 1),
            p("add_else", 0, 1),
            p("loop", 8, 0),
            p("keep_going", 0, 1),
            p("mul", 0, 1)
        ]
    );
}

#[test]
fn subgraph_with_a_bad_initializer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let then = G::new("then")
        .init(raw_tensor("w_then", &[4], vec![0; 3]))
        .node(node("Add", "add_then", &["x", "w_then"], &["y_then"]))
        .output(vi_untyped("y_then"))
        .build();
    let mut if_node = node("If", "if", &["cond"], &["y"]);
    if_node.attribute = vec![
        graph_attr("then_branch", then),
        graph_attr("else_branch", relu().build()),
    ];
    let g = G::new("g")
        .input(vi("x", FLOAT, &[1, 4]))
        .input(vi("cond", BOOL, &[]))
        .node(if_node)
        .output(vi_untyped("y"));
    let path = write(dir.path(), "m.onnx", &g.model());
    assert_refused(&path, &["'w_then'", "raw_data"]);
}

// ---------------------------------------------------------------------------------------------
// Standard input

#[test]
fn stdin_valid_model() {
    let report = json(&mem_stdin(
        &add_weight(weight("w", &[4])).model(),
        &["--format", "json"],
    ));
    assert_eq!(report["totals"]["params"], 4);
    assert_eq!(report["layers"][0]["name"], "add");
}

#[test]
fn stdin_with_external_data() {
    let out = mem_stdin(
        &add_weight(external_tensor("w", &[4], "w.bin", 0)).model(),
        &[],
    );
    assert_error(&out, "<stdin>", &["'w'", "external data", "standard input"]);
}

#[test]
fn stdin_garbage() {
    let out = mem_stdin(&random_bytes(7, 512), &[]);
    assert_error(&out, "<stdin>", &["onnx"]);
    let out = mem_stdin(b"", &[]);
    assert_error(&out, "<stdin>", &["empty"]);
}

// ---------------------------------------------------------------------------------------------
// safetensors

#[test]
fn safetensors_well_formed_file_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "model.safetensors", &good_safetensors());
    let report = json(&mem(&path, &["--format", "json"]));
    assert_eq!(report["totals"]["params"], 4);
}

#[test]
fn safetensors_header_length_2_pow_60() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = (1u64 << 60).to_le_bytes().to_vec();
    bytes.extend_from_slice(br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#);
    let path = write(dir.path(), "model.safetensors", &bytes);
    assert_refused(&path, &["header length 1152921504606846976", "100 MB"]);
    // without the extension, the `{` after the length still marks it as safetensors
    let path = write(dir.path(), "model", &bytes);
    assert_refused(&path, &["header length 1152921504606846976", "100 MB"]);
}

#[test]
fn safetensors_header_length_past_end_of_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = good_safetensors();
    bytes[..8].copy_from_slice(&1000u64.to_le_bytes());
    let path = write(dir.path(), "model.safetensors", &bytes);
    assert_refused(&path, &["header length 1000", "past the end of the file"]);
}

#[test]
fn safetensors_shorter_than_header_length_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "model.safetensors", &[0x10, 0, 0]);
    assert_refused(&path, &["8-byte header length"]);
}

#[test]
fn safetensors_header_not_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "model.safetensors",
        &safetensors_bytes("{not json", &[]),
    );
    assert_refused(&path, &["not a valid safetensors file"]);
}

#[test]
fn safetensors_overlapping_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}}"#;
    let path = write(
        dir.path(),
        "model.safetensors",
        &safetensors_bytes(header, &[0; 24]),
    );
    assert_refused(&path, &["'b'", "overlap"]);
}

#[test]
fn safetensors_offsets_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,4000]}}"#;
    let path = write(
        dir.path(),
        "model.safetensors",
        &safetensors_bytes(header, &[0; 16]),
    );
    assert_refused(&path, &["byte range does not match its shape"]);
    let header = r#"{"w":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}}"#;
    let path = write(
        dir.path(),
        "model.safetensors",
        &safetensors_bytes(header, &[0; 16]),
    );
    assert_refused(&path, &["does not match the file size"]);
}

#[test]
fn safetensors_trailing_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = good_safetensors();
    bytes.extend_from_slice(&[0; 5]);
    let path = write(dir.path(), "model.safetensors", &bytes);
    assert_refused(&path, &["does not match the file size"]);
}

#[test]
fn safetensors_truncated_data() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = good_safetensors();
    bytes.truncate(bytes.len() - 6);
    let path = write(dir.path(), "model.safetensors", &bytes);
    assert_refused(&path, &["does not match the file size"]);
}

#[test]
fn safetensors_truncated_header() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = good_safetensors();
    let path = write(dir.path(), "model.safetensors", &bytes[..20]);
    assert_refused(&path, &["past the end of the file"]);
}

#[test]
fn safetensors_dims_product_overflows() {
    let dir = tempfile::tempdir().unwrap();
    let header = format!(
        r#"{{"w":{{"dtype":"F32","shape":[{},{}],"data_offsets":[0,16]}}}}"#,
        u64::MAX / 2,
        u64::MAX / 2
    );
    let path = write(
        dir.path(),
        "model.safetensors",
        &safetensors_bytes(&header, &[0; 16]),
    );
    assert_refused(&path, &["overflows"]);
}

#[test]
fn safetensors_unknown_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"w":{"dtype":"Q4_K","shape":[4],"data_offsets":[0,16]}}"#;
    let path = write(
        dir.path(),
        "model.safetensors",
        &safetensors_bytes(header, &[0; 16]),
    );
    assert_refused(&path, &["not a valid safetensors file"]);
}

fn write_index(dir: &Path, weight_map: &[(&str, &str)]) -> PathBuf {
    let map: serde_json::Map<String, serde_json::Value> = weight_map
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let index = serde_json::json!({ "metadata": {}, "weight_map": map });
    write(
        dir,
        "model.safetensors.index.json",
        index.to_string().as_bytes(),
    )
}

#[test]
fn safetensors_index_names_a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "model-00001-of-00002.safetensors",
        &good_safetensors(),
    );
    let index = write_index(
        dir.path(),
        &[
            ("w", "model-00001-of-00002.safetensors"),
            ("v", "model-00002-of-00002.safetensors"),
        ],
    );
    assert_refused(
        &index,
        &["model-00002-of-00002.safetensors", "does not exist"],
    );
}

#[test]
fn safetensors_index_shard_outside_directory() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("ckpt");
    std::fs::create_dir(&sub).unwrap();
    let outside = write(dir.path(), "outside.safetensors", &good_safetensors());
    let index = write_index(&sub, &[("w", "../outside.safetensors")]);
    assert_refused(
        &index,
        &["'../outside.safetensors'", "outside the index's directory"],
    );
    let index = write_index(&sub, &[("w", outside.to_str().unwrap())]);
    assert_refused(&index, &["outside the index's directory"]);
}

#[cfg(unix)]
#[test]
fn safetensors_index_shard_symlink_outside_directory() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("ckpt");
    std::fs::create_dir(&sub).unwrap();
    let outside = write(dir.path(), "outside.safetensors", &good_safetensors());
    std::os::unix::fs::symlink(&outside, sub.join("model.safetensors")).unwrap();
    let index = write_index(&sub, &[("w", "model.safetensors")]);
    assert_refused(
        &index,
        &["'model.safetensors'", "outside the index's directory"],
    );
}

#[test]
fn safetensors_index_not_json() {
    let dir = tempfile::tempdir().unwrap();
    let index = write(
        dir.path(),
        "model.safetensors.index.json",
        b"{\"weight_map\": [1,",
    );
    assert_refused(&index, &["not a safetensors index"]);
}

#[test]
fn safetensors_index_with_a_bad_shard() {
    let dir = tempfile::tempdir().unwrap();
    let mut shard = good_safetensors();
    shard.truncate(shard.len() - 1);
    let bad = write(dir.path(), "model-00001-of-00001.safetensors", &shard);
    let index = write_index(dir.path(), &[("w", "model-00001-of-00001.safetensors")]);
    let out = mem(&index, &[]);
    // the error names the shard that is wrong
    assert_error(
        &out,
        &bad.display().to_string(),
        &["does not match the file size"],
    );
}

/// A shard of one F32[2] tensor per name (8 bytes each, in order).
fn shard_of(names: &[&str]) -> Vec<u8> {
    let entries: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            format!(
                r#""{n}":{{"dtype":"F32","shape":[2],"data_offsets":[{},{}]}}"#,
                i * 8,
                i * 8 + 8
            )
        })
        .collect();
    safetensors_bytes(
        &format!("{{{}}}", entries.join(",")),
        &vec![0; names.len() * 8],
    )
}

/// The index and its shards disagree: a tensor in another shard than listed, or not listed, is
/// a warning; one stored in two shards (listed or not) or listed and stored nowhere is an error
/// naming the tensor and the file, whichever core read which shard.
#[test]
fn safetensors_index_and_shards_disagree() {
    let (a, b) = (
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    );
    let case = |sa: &[&str], sb: &[&str], listed: &[(&str, &str)]| {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), a, &shard_of(sa));
        write(dir.path(), b, &shard_of(sb));
        let index = write_index(dir.path(), listed);
        (dir, index)
    };
    // x is in b but listed in a; y is not listed: warnings, the counts stand
    let (_d, index) = case(&["w"], &["x", "y", "v"], &[("w", a), ("x", a), ("v", b)]);
    let out = mem(&index, &["--format", "json"]);
    let text = assert_ok(&out);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["totals"]["params"], 8, "{v}");
    let warnings = v["warnings"].to_string();
    assert!(
        warnings.contains(&format!(
            "tensor 'x' is in shard '{b}' but the index says '{a}'"
        )),
        "{warnings}"
    );
    assert!(
        warnings.contains(&format!(
            "tensor 'y' in shard '{b}' is not listed in the index"
        )),
        "{warnings}"
    );
    // a listed tensor in both shards: the error names the second shard in order
    let (d, index) = case(&["w", "x"], &["x", "v"], &[("w", a), ("x", a), ("v", b)]);
    let out = mem(&index, &[]);
    assert_error(
        &out,
        &d.path().join(b).display().to_string(),
        &["tensor 'x' is stored in more than one shard"],
    );
    // an unlisted tensor in both shards, and one repeated within a shard
    let (d, index) = case(&["w", "z"], &["z", "v"], &[("w", a), ("v", b)]);
    assert_error(
        &mem(&index, &[]),
        &d.path().join(b).display().to_string(),
        &["tensor 'z' is stored in more than one shard"],
    );
    let (d, index) = case(&["w", "w"], &["v"], &[("w", a), ("v", b)]);
    assert_error(
        &mem(&index, &[]),
        &d.path().join(a).display().to_string(),
        &["tensor 'w' is stored in more than one shard"],
    );
    // listed, stored nowhere
    let (_d, index) = case(&["w"], &["v"], &[("w", a), ("v", b), ("u", b)]);
    assert_error(
        &mem(&index, &[]),
        &index.display().to_string(),
        &["1 tensors listed in the index are in no shard (first: 'u')"],
    );
}

#[test]
fn an_explicit_default_data_location_is_not_an_unknown_field() {
    use common::onnx::{node, vi, weight, G};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dl.onnx");
    // 64 x 64 floats: large enough that the loader skips the bytes, with data_location = DEFAULT
    let mut w = weight("w", &[64, 64]);
    w.data_location = Some(0);
    let model = G::new("g")
        .input(vi("x", 1, &[1, 64]))
        .output(vi("y", 1, &[1, 64]))
        .init(w)
        .node(node("MatMul", "mm", &["x", "w"], &["y"]))
        .model();
    std::fs::write(&path, model).unwrap();
    let out = common::nnlint(&["mem", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let err = common::stderr(&out);
    assert!(!err.contains("does not know"), "false warning: {err}");
    assert!(
        common::stdout(&out).contains("4.1K"),
        "{}",
        common::stdout(&out)
    );
}

/// Every input a fuzz target crashed on (fuzz/regressions/, named `TARGET-what.EXT`) runs through
/// the commands that target drives: never a panic, only exit 0, 1 or 2.
#[test]
fn fuzz_regressions_do_not_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("fuzz/regressions") {
        let path = e.expect("entry").path();
        let p = path.to_str().expect("utf-8");
        for args in [
            vec!["mem", p],
            vec!["mem", p, "--batch", "8"],
            vec!["mem", p, "--train", "--batch", "8"],
            vec!["lint", p],
        ] {
            let out = common::nnlint(&args);
            let err = common::stderr(&out);
            assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
            assert!(
                matches!(out.status.code(), Some(0..=2)),
                "{args:?}: {:?}\n{err}",
                out.status
            );
        }
        n += 1;
    }
    assert!(n >= 1);
}

#[test]
fn saved_bytes_past_64_bits_are_refused_naming_the_node() {
    // found by the graph_struct fuzz target: a BatchNormalization over a zero-size input of
    // 2^63 - 1 channels saves per-channel statistics whose size overflowed the backward timeline
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions/graph_struct-batchnorm-saved-bytes-overflow.onnx");
    let out = mem(&path, &["--train"]);
    assert_error(
        &out,
        "graph_struct-batchnorm-saved-bytes-overflow.onnx",
        &[
            "out of range",
            "saved for backward",
            "bn (BatchNormalization)",
        ],
    );
}

#[test]
fn activation_bytes_past_64_bits_are_refused_in_the_training_estimate() {
    // found by the onnx_mem fuzz target: a Resize to sizes whose byte size overflows while the
    // element count does not
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/regressions/onnx_mem-training-activation-bytes-overflow.onnx");
    let out = mem(&path, &["--train", "--batch", "8"]);
    assert_error(
        &out,
        "onnx_mem-training-activation-bytes-overflow.onnx",
        &["out of range", "activations"],
    );
}

#[test]
fn split_with_more_outputs_declared_than_it_has_is_refused() {
    // found by the graph_struct fuzz target: num_outputs = 2^44 allocated 2^44 split sizes
    let mut attr = ints_attr("num_outputs", &[1 << 44]);
    attr.r#type = Some(pb::attribute_proto::AttributeType::Int as i32);
    attr.i = Some(1 << 44);
    attr.ints.clear();
    let bytes = G::new("split")
        .input(vi("x", FLOAT, &[1, 4]))
        .node(with(
            node("Split", "split", &["x"], &["a", "b"]),
            vec![attr],
        ))
        .output(vi_untyped("a"))
        .output(vi_untyped("b"))
        .model_at(18);
    survives(&bytes, &["mem"], "num_outputs");
}

/// Writes `bytes` as a model, runs `args` on it (`verify` gets it twice), and checks that nnlint
/// neither panicked nor failed an allocation, and that its output says `needle`.
fn survives(bytes: &[u8], args: &[&str], needle: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "model.onnx", bytes);
    let p = path.to_str().unwrap();
    let mut argv = args.to_vec();
    argv.push(p);
    if args == ["verify"] {
        argv.push(p);
    }
    let out = common::nnlint(&argv);
    let err = common::stderr(&out);
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation"),
        "{err}"
    );
    let text = format!("{}{err}", common::stdout(&out));
    assert!(text.contains(needle), "{text}");
}

#[test]
fn verify_refuses_an_input_too_large_to_draw() {
    // found by the graph_struct fuzz target: a bool input of 2^40 elements that no checked node
    // reads was drawn in full (an allocation of terabytes)
    let bytes = G::new("flag")
        .input(vi("x", FLOAT, &[1, 4]))
        .input(vi("flag", BOOL, &[1 << 40]))
        .node(node("Relu", "relu", &["x"], &["y"]))
        .output(vi_untyped("y"))
        .model();
    survives(&bytes, &["verify"], "too large");
}

#[test]
fn verify_refuses_tensors_of_more_than_8_dimensions() {
    // found by the graph_struct fuzz target: candle panics past 8 dimensions
    let bytes = G::new("deep")
        .input(vi("x", FLOAT, &[1; 9]))
        .node(node("Relu", "relu", &["x"], &["y"]))
        .output(vi_untyped("y"))
        .model();
    survives(&bytes, &["verify"], "at most 8");
}

#[test]
fn fixed_overheads_past_a_pebibyte_are_refused() {
    // `--overhead-context 18446744073709551615B` overflowed the peak's sum (a panic)
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/models/torch/minicnn.onnx");
    let m = model.to_str().unwrap();
    for args in [
        vec![
            "mem",
            m,
            "--train",
            "--overhead-context",
            "18446744073709551615B",
        ],
        vec!["mem", m, "--train", "--overhead-workspace", "2048TiB"],
        vec![
            "fit",
            m,
            "--gpu",
            "A100-80GB",
            "--overhead-context",
            "18446744073709551615B",
        ],
    ] {
        let out = common::nnlint(&args);
        let err = common::stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("more than 1 PiB"), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}
