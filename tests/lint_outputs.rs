//! `nnlint lint` outputs: every format snapshot-tested, SARIF validated against the official
//! SARIF 2.1.0 schema (testdata/schemas/), the rule catalog kept fresh, configuration errors.

mod common;

use common::{nnlint, stderr, stdout};
use serde_json::Value;

const MINICNN: &str = "testdata/models/torch/minicnn.onnx";

fn lint(extra: &[&str]) -> std::process::Output {
    let mut args = vec!["lint", MINICNN, "--no-config", "--batch", "32"];
    args.extend_from_slice(extra);
    nnlint(&args)
}

#[test]
fn every_format_snapshot() {
    for (format, name) in [
        ("human", "lint_human"),
        ("json", "lint_json"),
        ("sarif", "lint_sarif"),
        ("github", "lint_github"),
        ("markdown", "lint_markdown"),
    ] {
        let out = lint(&["--format", format]);
        assert_eq!(out.status.code(), Some(0), "{format}: {}", stderr(&out));
        insta::assert_snapshot!(name, stdout(&out));
    }
}

#[test]
fn sarif_validates_against_the_official_schema() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(common::testdata().join("schemas/sarif-schema-2.1.0.json"))
            .unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the SARIF schema compiles");
    let staged = common::stage("models/torch/vgg16.onnx");
    for out in [
        lint(&["--format", "sarif"]),
        nnlint(&[
            "lint",
            MINICNN,
            staged.path.to_str().unwrap(),
            "--no-config",
            "--select",
            "NL1,NL2",
            "--format",
            "sarif",
        ]),
        nnlint(&[
            "lint",
            MINICNN,
            "testdata/missing.onnx",
            "--no-config",
            "--format",
            "sarif",
        ]),
    ] {
        let sarif: Value = serde_json::from_str(&stdout(&out)).expect("SARIF is JSON");
        let errors: Vec<String> = validator
            .iter_errors(&sarif)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{}", errors.join("\n"));
        let run = &sarif["runs"][0];
        assert_eq!(
            run["tool"]["driver"]["rules"].as_array().unwrap().len(),
            nnlint::rules::RULES.len()
        );
        for r in run["results"].as_array().unwrap() {
            let index = r["ruleIndex"].as_u64().unwrap() as usize;
            assert_eq!(run["tool"]["driver"]["rules"][index]["id"], r["ruleId"]);
            assert!(
                r["partialFingerprints"]["nnlintFinding/v1"]
                    .as_str()
                    .unwrap()
                    .len()
                    == 16
            );
        }
    }
}

#[test]
fn fingerprints_are_stable_across_thresholds() {
    let fp = |extra: &[&str]| -> Vec<String> {
        let v: Value = serde_json::from_str(&stdout(&lint(
            &[
                &["--format", "sarif", "--select", "heavy-standard-conv"],
                extra,
            ]
            .concat(),
        )))
        .unwrap();
        v["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r["partialFingerprints"]["nnlintFinding/v1"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    assert_eq!(fp(&[]), fp(&["--precision", "amp-bf16"]));
}

#[test]
fn several_files_make_one_report() {
    let out = nnlint(&[
        "lint",
        MINICNN,
        "testdata/models/conv3x3_64_128.onnx",
        "--no-config",
        "--batch",
        "32",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[1]["model"], "testdata/models/conv3x3_64_128.onnx");
    assert!(files[1]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "heavy-standard-conv"));
}

#[test]
fn a_bad_file_is_a_tool_error_with_exit_2() {
    let out = nnlint(&["lint", MINICNN, "testdata/missing.onnx", "--no-config"]);
    assert_eq!(out.status.code(), Some(2));
    // the error goes to standard error, naming the file once; the summary counts the file
    let err = stderr(&out);
    assert_eq!(
        err.matches("testdata/missing.onnx").count(),
        1,
        "the file is named once: {err}"
    );
    assert!(
        err.contains("nnlint: error: testdata/missing.onnx: "),
        "{err}"
    );
    let text = stdout(&out);
    assert!(!text.contains("missing.onnx: error"), "{text}");
    assert!(text.contains("1 file could not be linted"), "{text}");
    // every format carries it, named once
    for format in ["json", "sarif", "github", "markdown"] {
        let out = nnlint(&[
            "lint",
            "testdata/missing.onnx",
            "--no-config",
            "--format",
            format,
        ]);
        assert_eq!(out.status.code(), Some(2), "{format}");
        let text = stdout(&out);
        assert!(
            text.contains("No such file") && !text.contains("missing.onnx: testdata/missing.onnx"),
            "{format}: {text}"
        );
        assert!(stderr(&out).contains("nnlint: error:"), "{format}");
    }
}

#[test]
fn a_weights_file_needs_a_graph_for_every_graph_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    // a minimal safetensors file: one f32 tensor of 2 elements
    let header = br#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0; 8]);
    std::fs::write(&path, bytes).unwrap();
    let p = path.to_str().unwrap();
    let out_model = dir.path().join("o.onnx");
    for (args, what) in [
        (vec!["lint", p, "--no-config"], "lint"),
        (
            vec!["rewrite", p, "-o", out_model.to_str().unwrap()],
            "rewrite",
        ),
        (vec!["verify", p, p], "verify"),
        (vec!["fit", p, "--gpu", "16GiB"], "fit"),
        (vec!["mem", p, "--train"], "--train"),
    ] {
        let out = nnlint(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("{what} needs a graph")) && err.contains("weights-only"),
            "{args:?}: {err}"
        );
    }
    // mem without --train reads a weights file
    let out = nnlint(&["mem", p]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn rules_and_explain() {
    let out = nnlint(&["rules"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for name in [
        "heavy-standard-conv",
        "large-fc-head",
        "oversized-linear",
        "memory-budget",
        "fp32-weights",
        "activation-hotspot",
    ] {
        assert!(text.contains(name), "{name} missing from `nnlint rules`");
    }
    let json: Value =
        serde_json::from_str(&stdout(&nnlint(&["rules", "--format", "json"]))).unwrap();
    assert_eq!(json.as_array().unwrap().len(), nnlint::rules::RULES.len());
    let by_code = stdout(&nnlint(&["explain", "NL102"]));
    let by_name = stdout(&nnlint(&["explain", "large-fc-head"]));
    assert_eq!(by_code, by_name);
    for section in [
        "## What it does",
        "## Why is this bad?",
        "## Example",
        "## Use instead",
        "## Rewrite safety",
        "## Options",
        "## References",
    ] {
        assert!(by_code.contains(section), "{section}");
    }
    let out = nnlint(&["explain", "large-fc-haed"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("did you mean 'large-fc-head'?"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn the_rule_catalog_is_fresh() {
    let generated = stdout(&nnlint(&["rules", "--format", "markdown"]));
    let committed =
        std::fs::read_to_string(common::testdata().join("../docs/rules.md")).unwrap_or_default();
    assert!(
        generated == committed,
        "docs/rules.md is stale: regenerate it with `cargo run -- rules --format markdown > docs/rules.md`"
    );
}

#[test]
fn the_man_page_is_fresh() {
    let out = nnlint(&["man"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let generated = stdout(&out);
    let path = common::testdata().join("../docs/nnlint.1");
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        generated == committed,
        "docs/nnlint.1 is stale: regenerate it with `cargo run -- man > docs/nnlint.1` (or UPDATE_DOCS=1 cargo test --test lint_outputs)"
    );
    for command in [
        "NNLINT MEM",
        "NNLINT REPORT",
        "NNLINT COMPLETIONS",
        "\\-\\-quiet",
    ] {
        assert!(generated.contains(command), "{command}");
    }
}

#[test]
fn completions_cover_the_commands_and_their_options() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef nnlint"),
        ("fish", "complete -c nnlint"),
    ] {
        let out = nnlint(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: {script}");
        for word in ["report", "effective-batch", "lint"] {
            assert!(script.contains(word), "{shell} completion lacks {word}");
        }
    }
    let out = nnlint(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn config_errors_name_the_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("nnlint.toml");
    for (text, expect) in [
        (
            "batch = 8\nbugdet = \"1GiB\"\n",
            "line 2: unknown key 'bugdet': did you mean 'budget'?",
        ),
        (
            "[rules.heavy-standard-conv]\nmin-savng = 0.5\n",
            "line 2: [rules.heavy-standard-conv]: unknown option 'min-savng': did you mean 'min-saving'?",
        ),
        (
            "batch = 2\n\n[rules.heavy-standard-conv]\nmin-macs = \"lots\"\n",
            "line 4: [rules.heavy-standard-conv]: invalid type: string \"lots\", expected u64 in `min-macs`",
        ),
        ("[rules.heavy-conv]\n", "unknown rule 'heavy-conv'"),
        ("budget = \"lots\"\n", "budget: 'lots' is not a size"),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let out = nnlint(&["lint", MINICNN, "--config", cfg.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = stderr(&out);
        assert!(
            err.contains(cfg.to_str().unwrap()) && err.contains(expect),
            "{text}: {err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn config_is_discovered_from_the_working_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("nnlint.toml"),
        "select = [\"fixed-batch-input\"]\n",
    )
    .unwrap();
    let sub = dir.path().join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    let model = common::testdata().join("models/conv3x3_64_128.onnx");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nnlint"))
        .args(["lint", model.to_str().unwrap(), "--format", "json"])
        .current_dir(&sub)
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        v["files"][0]["findings"].as_array().unwrap().len(),
        0,
        "only fixed-batch-input runs, and the input's batch is symbolic"
    );
}

/// Issue 22: one JSON shape for one file or several (docs/lint.schema.json), an unreadable file
/// included: its entry has the error and no findings, never "a file without findings".
#[test]
fn lint_json_has_one_documented_shape() {
    let fire = common::fixture("rules/large-fc-head/fire.onnx");
    let conv = common::fixture("models/conv3x3_64_128.onnx");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.onnx");
    std::fs::write(&bad, b"not a model").unwrap();
    let bad = bad.display().to_string();
    for (files, code) in [
        (vec![fire.as_str()], 0),
        (vec![fire.as_str(), conv.as_str()], 0),
        (vec![fire.as_str(), bad.as_str()], 2),
        (vec![bad.as_str()], 2),
    ] {
        let mut args = vec![
            "lint",
            "--format",
            "json",
            "--no-config",
            "--fail-on",
            "never",
        ];
        args.extend(&files);
        let out = nnlint(&args);
        assert_eq!(out.status.code(), Some(code), "{files:?}: {}", stderr(&out));
        let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
        let errors = common::schema_errors("lint.schema.json", &v);
        assert!(errors.is_empty(), "{files:?}: {errors:#?}\n{v:#}");
        assert_eq!(v["schema_version"], 2);
        let entries = v["files"].as_array().unwrap();
        assert_eq!(entries.len(), files.len());
        for (e, f) in entries.iter().zip(&files) {
            assert_eq!(e["model"], *f);
            assert_eq!(e["error"].is_string(), *f == bad, "{e:#}");
        }
    }
}
