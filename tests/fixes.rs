//! Findings carry their fix: for every rule with a rewrite, on its firing fixture, the finding's
//! proposal is planned by `nnlint rewrite` as it stands (nothing skipped), its safety is the one the
//! rule declares, and linting the rewritten model with the same thresholds reaches a model with no
//! fixable finding of that rule within a bounded number of passes (no ping-pong).

mod common;

use std::path::Path;

use common::{fixture, run_json, run_json_with};
use serde_json::Value;

/// The firing fixture of each rule with a rewrite, and the config that lowers its thresholds.
const CASES: &[(&str, &str, Option<&str>)] = &[
    (
        "heavy-standard-conv",
        "rules/heavy-standard-conv/fire.onnx",
        None,
    ),
    ("large-fc-head", "rules/large-fc-head/fire.onnx", None),
    (
        "oversized-linear",
        "rules/oversized-linear/fire_rank8.onnx",
        Some("rules/oversized-linear/nnlint.toml"),
    ),
];

fn config_args(config: Option<&str>) -> Vec<String> {
    match config {
        Some(c) => vec!["--config".into(), fixture(c)],
        None => vec!["--no-config".into()],
    }
}

/// The findings of `rule` on `model` that carry a rewrite.
fn fixable(rule: &str, model: &str, config: Option<&str>) -> Vec<Value> {
    let mut args: Vec<String> = ["lint", model, "--select", rule, "--format", "json"]
        .map(String::from)
        .to_vec();
    args.extend(config_args(config));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (v, _) = run_json_with(&args, &[0, 1]);
    v["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| !f["rewrite"].is_null())
        .cloned()
        .collect()
}

fn declared_safety(rule: &str) -> String {
    let rules = run_json(&["rules", "--format", "json"]);
    let meta = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == rule)
        .unwrap_or_else(|| panic!("no rule {rule}"));
    meta["safety"]
        .as_str()
        .expect("a declared safety")
        .to_string()
}

fn rewrite(model: &str, out: &Path, rule: &str, config: Option<&str>) -> Value {
    let out_s = out.display().to_string();
    let mut args: Vec<String> = [
        "rewrite",
        model,
        "-o",
        &out_s,
        "--rule",
        rule,
        "--format",
        "json",
        "--no-verify",
        "--lossy",
    ]
    .map(String::from)
    .to_vec();
    args.extend(config_args(config));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_json(&args)
}

#[test]
fn every_fixable_finding_is_planned_with_its_declared_safety() {
    for &(rule, model, config) in CASES {
        let model = fixture(model);
        let found = fixable(rule, &model, config);
        assert!(!found.is_empty(), "{rule} proposes no rewrite on {model}");
        let declared = declared_safety(rule);
        for f in &found {
            assert_eq!(f["rewrite"]["safety"], declared.as_str(), "{rule}: {f:#}");
        }
        let dir = tempfile::tempdir().unwrap();
        let r = rewrite(&model, &dir.path().join("out.onnx"), rule, config);
        let done = r["rewrites"].as_array().expect("rewrites");
        assert_eq!(
            done.len(),
            found.len(),
            "{rule}: every fixable finding is rewritten; skipped: {}",
            r["skipped"]
        );
        for (row, f) in done.iter().zip(&found) {
            assert_eq!(row["node"], f["node"], "{rule}");
            assert_eq!(row["kind"], f["rewrite"]["kind"], "{rule}");
            assert_eq!(row["safety"], f["rewrite"]["safety"], "{rule}");
            if let Some(rank) = f["rewrite"]["rank"].as_u64() {
                assert_eq!(
                    row["rank"].as_u64(),
                    Some(rank),
                    "{rule}: the finding's rank"
                );
            }
        }
    }
}

#[test]
fn rewriting_until_nothing_is_fixable_terminates() {
    const MAX_PASSES: usize = 3;
    for &(rule, model, config) in CASES {
        let dir = tempfile::tempdir().unwrap();
        let mut current = fixture(model);
        let mut passes = 0;
        while !fixable(rule, &current, config).is_empty() {
            passes += 1;
            assert!(
                passes <= MAX_PASSES,
                "{rule}: still fixable after {MAX_PASSES} rewrites of {model}"
            );
            let out = dir.path().join(format!("pass{passes}.onnx"));
            rewrite(&current, &out, rule, config);
            current = out.display().to_string();
        }
        assert_eq!(passes, 1, "{rule}: its own rewrite is not proposed again");
    }
}
