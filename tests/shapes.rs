//! Shape inference against onnxruntime: for every fixture, the shape and type of every value as
//! onnxruntime produced them at run time (testdata/expected/*.json, written by
//! testdata/generate.py) must equal what nnlint infers statically.

mod common;

use nnlint::analysis::{shape, Bindings};
use nnlint::load::{self, Loaded};

fn check(model: &str, failures: &mut Vec<String>) {
    let exp = common::expected(model);
    let staged = common::stage(model);
    let Loaded::Onnx(m) = load::load(&staged.path).unwrap_or_else(|e| panic!("{model}: {e}"))
    else {
        panic!("{model} is not ONNX")
    };
    let dims: std::collections::BTreeMap<String, i64> = exp["dims"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
                .collect()
        })
        .unwrap_or_default();
    // a static model is analysed as it is (`batch` in the file is nominal there)
    let bindings = Bindings {
        batch: if dims.is_empty() {
            None
        } else {
            exp["batch"].as_u64()
        },
        dims,
        ..Bindings::default()
    };
    let inf = shape::infer(&m, &bindings).unwrap_or_else(|e| panic!("{model}: {e}"));
    for (name, v) in exp["values"].as_object().unwrap() {
        let want: Vec<i64> = v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_i64().unwrap())
            .collect();
        let Some(id) = m.graph.value_by_name(name) else {
            failures.push(format!("{model}: value '{name}' not in the graph"));
            continue;
        };
        let fact = &inf.facts[id];
        let got: Option<Vec<i64>> = fact
            .shape
            .as_ref()
            .and_then(|s| s.iter().map(|d| d.as_i64()).collect());
        if got.as_ref() != Some(&want) {
            let shown = fact.shape.as_ref().map(|s| nnlint::ir::shape_to_string(s));
            failures.push(format!(
                "{model}: '{name}' is {want:?}, nnlint infers {shown:?}"
            ));
        }
        let dtype = fact.dtype.map(|d| d.name());
        if dtype != v["dtype"].as_str() {
            failures.push(format!(
                "{model}: '{name}' has type {}, nnlint infers {dtype:?}",
                v["dtype"]
            ));
        }
    }
    for (n, msg) in &inf.invalid {
        failures.push(format!(
            "{model}: node {} reported invalid: {msg}",
            m.graph.label(&m.graph.nodes[*n])
        ));
    }
}

#[test]
fn every_value_matches_onnxruntime() {
    let mut models: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(common::testdata().join("expected")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            continue; // expected/weights/: safetensors checkpoints, tested in tests/mem.rs
        }
        let exp: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        models.push(exp["model"].as_str().unwrap().to_string());
    }
    models.sort();
    assert!(
        models.len() > 100,
        "the op zoo is missing: {} fixtures",
        models.len()
    );
    let mut failures = Vec::new();
    for m in &models {
        check(m, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
