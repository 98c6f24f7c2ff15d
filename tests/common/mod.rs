//! Helpers shared by the integration tests: fixture paths, expected values, and staging models whose
//! external data was not committed (a sparse zero-filled file of the recorded length stands in).

#![allow(dead_code)]

pub mod onnx;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// A fixture path under testdata/ (`rules/large-fc-head/fire.onnx`, `models/rewrite/vgg_like.onnx`).
pub fn fixture(rel: &str) -> String {
    testdata().join(rel).display().to_string()
}

/// Runs the real binary.
pub fn nnlint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnlint"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the nnlint binary runs")
}

/// Runs the binary, which must exit with one of `codes`, and parses its standard output as JSON.
pub fn run_json_with(args: &[&str], codes: &[i32]) -> (serde_json::Value, i32) {
    let out = nnlint(args);
    let code = out.status.code().expect("an exit code");
    assert!(
        codes.contains(&code),
        "nnlint {args:?} exited {code}: {}",
        stderr(&out)
    );
    let v = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("nnlint {args:?}: not JSON ({e}): {}", stdout(&out)));
    (v, code)
}

/// Runs the binary, which must succeed, and parses its standard output as JSON.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    run_json_with(args, &[0]).0
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The expected-values file for a model path relative to testdata/ (`models/torch/resnet18.onnx`).
pub fn expected(model: &str) -> serde_json::Value {
    let key = model
        .trim_start_matches("models/")
        .trim_end_matches(".onnx")
        .replace('/', "__");
    let path = testdata().join("expected").join(format!("{key}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("expected values are JSON")
}

/// A model ready to load: the fixture itself, or a copy in a temporary directory next to a sparse
/// data file when its external data was not committed.
pub struct Staged {
    pub path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

pub fn stage(model: &str) -> Staged {
    let src = testdata().join(model);
    let exp = expected(model);
    let Some(ext) = exp.get("external_data") else {
        return Staged {
            path: src,
            _dir: None,
        };
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let dst = dir.path().join(src.file_name().unwrap());
    std::fs::copy(&src, &dst).expect("copy model");
    let data = dir.path().join(ext["file"].as_str().unwrap());
    let f = std::fs::File::create(&data).expect("create data file");
    f.set_len(ext["length"].as_u64().unwrap())
        .expect("sparse data file");
    Staged {
        path: dst,
        _dir: Some(dir),
    }
}

/// The errors of `instance` against a schema documented under docs/ (`mem.schema.json`,
/// `lint.schema.json`, `fit.schema.json`), each with where it is; empty when it is valid.
pub fn schema_errors(schema: &str, instance: &serde_json::Value) -> Vec<String> {
    let path = testdata().join("../docs").join(schema);
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the schema file")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}
