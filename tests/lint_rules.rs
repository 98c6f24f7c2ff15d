//! Every lint rule end to end, on fixtures that must fire and fixtures that must not
//! (testdata/rules/<rule>/fire*.onnx and pass*.onnx, written by testdata/generate.py), plus the
//! torchvision exports. Numbers are checked against values worked out by hand here, never against
//! nnlint's own output. Also: exit codes, `--fail-on`, ignores and baselines.

mod common;

use common::{nnlint, run_json_with, stage, stderr, stdout, testdata};
use serde_json::Value;

/// A fixture under testdata/rules/.
fn fixture(rel: &str) -> String {
    common::fixture(&format!("rules/{rel}"))
}

/// Runs `nnlint lint ARGS --format json`; returns the report and the exit code.
fn lint(args: &[&str]) -> (Value, i32) {
    let mut all = vec!["lint"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--format", "json"]);
    run_json_with(&all, &[0, 1])
}

/// Findings of `rule` on `model` with only that rule selected and no configuration file.
fn run_rule(rule: &str, model: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec![model, "--select", rule];
    if !extra.contains(&"--config") {
        args.push("--no-config");
    }
    args.extend_from_slice(extra);
    let (v, _) = lint(&args);
    let findings = v["files"][0]["findings"]
        .as_array()
        .expect("findings")
        .clone();
    for f in &findings {
        assert_eq!(f["name"], rule, "--select {rule} reported {f}");
    }
    findings
}

/// The one finding of `rule` on `model`, which must name `node`.
fn one(rule: &str, model: &str, node: &str, extra: &[&str]) -> Value {
    let found = run_rule(rule, model, extra);
    assert_eq!(found.len(), 1, "{rule} on {model}: {found:#?}");
    assert_eq!(found[0]["node"], node, "{rule} on {model}: {:#?}", found[0]);
    found[0].clone()
}

fn none(rule: &str, model: &str, extra: &[&str]) {
    let found = run_rule(rule, model, extra);
    assert!(
        found.is_empty(),
        "{rule} must not fire on {model}: {found:#?}"
    );
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not an unsigned integer: {v}"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `measured` shares are rounded to 4 decimals.
fn close4(got: &Value, want: f64) {
    assert!((f(got) - want).abs() <= 5e-5, "measured {got}, want {want}");
}

fn rules_config(rule: &str) -> String {
    fixture(&format!("{rule}/nnlint.toml"))
}

// ---- architecture ----------------------------------------------------------------------------

#[test]
fn heavy_standard_conv_fires_on_a_3x3_64_to_128_conv() {
    let x = one(
        "heavy-standard-conv",
        &fixture("heavy-standard-conv/fire.onnx"),
        "conv",
        &[],
    );
    assert_eq!(x["code"], "NL101");
    assert_eq!(x["severity"], "warning");
    assert_eq!(x["op"], "Conv");
    // depthwise-separable pair / standard conv = 1/C_out + 1/k^2
    let ratio = 1.0 / 128.0 + 1.0 / 9.0;
    close4(&x["measured"], 1.0 - ratio);
    assert_eq!(f(&x["limit"]), 0.5);
    let params = 64 * 128 * 9 - (64 * 9 + 64 * 128); // 73,728 - 8,768
    assert_eq!(u(&x["saving"]["params"]), params);
    assert_eq!(u(&x["saving"]["params"]), 64_960);
    assert_eq!(u(&x["saving"]["bytes"]), params * 4);
    // batch 1 (the symbolic N): 128 x 56 x 56 outputs, 64 x 9 MACs each
    let macs: u64 = 128 * 56 * 56 * 64 * 9;
    assert_eq!(macs, 231_211_008);
    let new_macs = macs / 1152 * (9 + 128); // macs x (1/128 + 1/9), exact here
    assert_eq!(u(&x["saving"]["macs"]), macs - new_macs);
    assert_eq!(u(&x["saving"]["macs"]), 203_714_560);
    // at --batch 8 the MACs (and the saving) scale by 8
    let x8 = one(
        "heavy-standard-conv",
        &fixture("heavy-standard-conv/fire.onnx"),
        "conv",
        &["--batch", "8"],
    );
    assert_eq!(u(&x8["saving"]["macs"]), 8 * (macs - new_macs));
    assert_eq!(u(&x8["saving"]["params"]), params);
    let msg = x["message"].as_str().unwrap();
    assert!(msg.contains("3x3") && msg.contains("64 -> 128"), "{msg}");
}

#[test]
fn heavy_standard_conv_leaves_separable_pairs_and_rgb_stems_alone() {
    for model in ["pass_separable.onnx", "pass_stem.onnx"] {
        none(
            "heavy-standard-conv",
            &fixture(&format!("heavy-standard-conv/{model}")),
            &[],
        );
    }
}

#[test]
fn heavy_standard_conv_on_torchvision_models() {
    let mobilenet = stage("models/torch/mobilenet_v2.onnx");
    none("heavy-standard-conv", mobilenet.path.to_str().unwrap(), &[]);
    // VGG-16: every 3x3 conv with >= 64 input channels (all but the RGB stem features.0)
    let vgg = stage("models/torch/vgg16.onnx");
    let found = run_rule("heavy-standard-conv", vgg.path.to_str().unwrap(), &[]);
    let nodes: Vec<&str> = found.iter().map(|x| x["node"].as_str().unwrap()).collect();
    let want: Vec<String> = [2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28]
        .iter()
        .map(|i| format!("/features/features.{i}/Conv"))
        .collect();
    assert_eq!(nodes, want);
    assert_eq!(found.len(), 12);
    // features.2: 3x3, 64 -> 64
    assert_eq!(
        u(&found[0]["saving"]["params"]),
        64 * 64 * 9 - (64 * 9 + 64 * 64)
    );
    // features.28: 3x3, 512 -> 512
    assert_eq!(
        u(&found[11]["saving"]["params"]),
        512 * 512 * 9 - (512 * 9 + 512 * 512)
    );
    close4(&found[11]["measured"], 1.0 - 1.0 / 512.0 - 1.0 / 9.0);
}

#[test]
fn large_fc_head_fires_on_a_flattened_map() {
    let x = one(
        "large-fc-head",
        &fixture("large-fc-head/fire.onnx"),
        "fc",
        &[],
    );
    assert_eq!(x["code"], "NL102");
    assert_eq!(x["op"], "Gemm");
    // Flatten([N,32,4,4]) -> Gemm 512 -> 64; after global average pooling: 32 -> 64
    let saved: u64 = 64 * 32 * (16 - 1);
    assert_eq!(u(&x["saving"]["params"]), saved);
    assert_eq!(u(&x["saving"]["params"]), 64 * 512 - 64 * 32);
    assert_eq!(u(&x["saving"]["bytes"]), saved * 4);
    assert_eq!(u(&x["saving"]["macs"]), saved); // batch 1
                                                // share: the layer's parameters (weight and bias, as `mem` counts the layer) over every
                                                // parameter (conv 32x3x3x3 + 32, fc 64x512 + 64)
    let total = 32 * 3 * 9 + 32 + 64 * 512 + 64;
    close4(&x["measured"], (64 * 512 + 64) as f64 / total as f64);
    assert!(x["message"].as_str().unwrap().contains("32x4x4"));
}

#[test]
fn large_fc_head_leaves_a_pooled_head_alone() {
    none(
        "large-fc-head",
        &fixture("large-fc-head/pass_gap.onnx"),
        &[],
    );
}

#[test]
fn large_fc_head_on_vgg16() {
    let vgg = stage("models/torch/vgg16.onnx");
    let x = one(
        "large-fc-head",
        vgg.path.to_str().unwrap(),
        "/classifier/classifier.0/Gemm",
        &[],
    );
    // W[4096, 512*7*7] -> W[4096, 512]: 102,760,448 weights (102,764,544 with the bias, which
    // the pooled head keeps) minus 2,097,152
    assert_eq!(4096 * 512 * 7 * 7, 102_760_448);
    assert_eq!(u(&x["saving"]["params"]), 4096 * 512 * 7 * 7 - 4096 * 512);
    assert_eq!(u(&x["saving"]["params"]), 100_663_296);
}

#[test]
fn oversized_linear_fires_on_a_rank_8_weight() {
    let cfg = rules_config("oversized-linear");
    let x = one(
        "oversized-linear",
        &fixture("oversized-linear/fire_rank8.onnx"),
        "fc",
        &["--config", &cfg],
    );
    assert_eq!(x["code"], "NL103");
    // 8 equal singular values: 90% of the energy needs all 8; rank 8 costs 8 x (128 + 128)
    let (params, factored) = (128 * 128, 8 * (128 + 128));
    close4(&x["measured"], 1.0 - factored as f64 / params as f64);
    assert_eq!(f(&x["measured"]), 0.875);
    assert_eq!(u(&x["saving"]["params"]), params - factored);
    assert_eq!(u(&x["saving"]["bytes"]), (params - factored) * 4);
    assert_eq!(u(&x["saving"]["macs"]), params - factored); // one row at batch 1
    let msg = x["message"].as_str().unwrap();
    assert!(
        msg.contains("below rank 64") && msg.contains("rank 8"),
        "{msg}"
    );
}

#[test]
fn oversized_linear_leaves_a_full_rank_weight_alone() {
    let cfg = rules_config("oversized-linear");
    none(
        "oversized-linear",
        &fixture("oversized-linear/pass_full_rank.onnx"),
        &["--config", &cfg],
    );
    // with the default min-params (1M) neither fixture is considered
    none(
        "oversized-linear",
        &fixture("oversized-linear/fire_rank8.onnx"),
        &[],
    );
}

// ---- memory and precision --------------------------------------------------------------------

#[test]
fn memory_budget_fires_when_the_training_step_does_not_fit() {
    let minicnn = testdata().join("models/torch/minicnn.onnx");
    let model = minicnn.to_str().unwrap();
    let args = [
        model,
        "--select",
        "memory-budget",
        "--no-config",
        "--batch",
        "4096",
        "--budget",
        "1GiB",
    ];
    let (v, code) = lint(&args);
    assert_eq!(code, 1, "memory-budget is an error: {v:#}");
    let found = v["files"][0]["findings"].as_array().unwrap();
    assert_eq!(found.len(), 1, "{found:#?}");
    let x = &found[0];
    assert_eq!(x["code"], "NL201");
    assert_eq!(x["severity"], "error");
    assert_eq!(x["op"], "model");
    assert_eq!(f(&x["limit"]), (1u64 << 30) as f64);
    assert!(f(&x["measured"]) > f(&x["limit"]), "{x:#}");
    let msg = x["message"].as_str().unwrap();
    let max: u64 = msg
        .split("the largest batch that fits is ")
        .nth(1)
        .unwrap_or_else(|| panic!("{msg}"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{msg}"));
    assert!(max > 0 && max < 4096, "{msg}");
    // the largest batch that fits does fit
    let b = max.to_string();
    let (v, code) = lint(&[
        model,
        "--select",
        "memory-budget",
        "--no-config",
        "--batch",
        &b,
        "--budget",
        "1GiB",
    ]);
    assert_eq!(
        (v["files"][0]["findings"].as_array().unwrap().len(), code),
        (0, 0)
    );
}

#[test]
fn memory_budget_is_quiet_when_it_fits_or_without_a_budget() {
    let minicnn = testdata().join("models/torch/minicnn.onnx");
    let model = minicnn.to_str().unwrap();
    none(
        "memory-budget",
        model,
        &["--batch", "1", "--budget", "8GiB"],
    );
    none("memory-budget", model, &["--batch", "4096"]);
}

#[test]
fn fp32_weights_fires_on_fp32_and_not_on_fp16() {
    let cfg = rules_config("fp32-weights");
    let x = one(
        "fp32-weights",
        &fixture("heavy-standard-conv/fire.onnx"),
        "heavy_conv",
        &["--config", &cfg],
    );
    assert_eq!(x["code"], "NL202");
    let params: u64 = 128 * 64 * 9 + 128;
    assert_eq!(f(&x["measured"]), (params * 4) as f64);
    assert_eq!(f(&x["limit"]), 1000.0);
    assert_eq!(u(&x["saving"]["bytes"]), params * 2);
    none(
        "fp32-weights",
        &fixture("fp32-weights/pass_fp16.onnx"),
        &["--config", &cfg],
    );
    // the default threshold (100 MiB) leaves a 289 KiB model alone
    none(
        "fp32-weights",
        &fixture("heavy-standard-conv/fire.onnx"),
        &[],
    );
}

#[test]
fn activation_hotspot_fires_on_the_early_relu() {
    let x = one(
        "activation-hotspot",
        &fixture("activation-hotspot/fire.onnx"),
        "relu1",
        &[],
    );
    assert_eq!(x["code"], "NL203");
    // relu1 saves its [1,16,32,32] fp32 output (conv2 reads the same storage); relu2 saves
    // [1,4,16,16]; conv1's input is the graph input, not counted
    let relu1: u64 = 16 * 32 * 32 * 4;
    let relu2: u64 = 4 * 16 * 16 * 4;
    assert_eq!(u(&x["saving"]["training_bytes"]), relu1);
    close4(&x["measured"], relu1 as f64 / (relu1 + relu2) as f64);
    // at batch 4 the bytes scale, the share does not
    let x4 = one(
        "activation-hotspot",
        &fixture("activation-hotspot/fire.onnx"),
        "relu1",
        &["--batch", "4"],
    );
    assert_eq!(u(&x4["saving"]["training_bytes"]), 4 * relu1);
    close4(&x4["measured"], relu1 as f64 / (relu1 + relu2) as f64);
}

#[test]
fn activation_hotspot_is_quiet_when_nothing_is_saved() {
    none(
        "activation-hotspot",
        &fixture("activation-hotspot/pass_gemm.onnx"),
        &[],
    );
}

// ---- hygiene ---------------------------------------------------------------------------------

#[test]
fn unused_initializer() {
    let x = one(
        "unused-initializer",
        &fixture("unused-initializer/fire.onnx"),
        "stale.weight",
        &[],
    );
    assert_eq!(x["code"], "NL301");
    assert_eq!(x["op"], "initializer");
    assert_eq!(f(&x["measured"]), (16 * 16 * 4) as f64);
    assert_eq!(u(&x["saving"]["params"]), 16 * 16);
    assert_eq!(u(&x["saving"]["bytes"]), 16 * 16 * 4);
    none(
        "unused-initializer",
        &fixture("heavy-standard-conv/fire.onnx"),
        &[],
    );
}

#[test]
fn dead_node() {
    let found = run_rule("dead-node", &fixture("dead-node/fire.onnx"), &[]);
    let nodes: Vec<&str> = found.iter().map(|x| x["node"].as_str().unwrap()).collect();
    assert_eq!(nodes, ["aux_conv", "aux_sigmoid"], "{found:#?}");
    assert_eq!(found[0]["code"], "NL302");
    // aux_conv: 1x1, 8 -> 2 on 16x16, batch 1
    assert_eq!(u(&found[0]["saving"]["macs"]), 2 * 8 * 16 * 16);
    none("dead-node", &fixture("dead-node/pass.onnx"), &[]);
}

#[test]
fn fixed_batch_input() {
    let x = one(
        "fixed-batch-input",
        &fixture("fixed-batch-input/fire.onnx"),
        "input",
        &[],
    );
    assert_eq!(x["code"], "NL303");
    assert_eq!(f(&x["measured"]), 1.0);
    assert!(x["message"].as_str().unwrap().contains("[1,3,32,32]"));
    none(
        "fixed-batch-input",
        &fixture("fixed-batch-input/pass.onnx"),
        &[],
    );
}

#[test]
fn duplicate_initializer() {
    let x = one(
        "duplicate-initializer",
        &fixture("duplicate-initializer/fire.onnx"),
        "conv2.weight",
        &[],
    );
    assert_eq!(x["code"], "NL304");
    let b: u64 = 16 * 16 * 3 * 3 * 4;
    assert_eq!(f(&x["measured"]), b as f64);
    assert_eq!(u(&x["saving"]["bytes"]), b);
    assert!(x["message"].as_str().unwrap().contains("'conv1.weight'"));
    // the same twins stored in float_data rather than raw_data
    let x = one(
        "duplicate-initializer",
        &fixture("duplicate-initializer/fire_typed.onnx"),
        "conv2.weight",
        &[],
    );
    assert_eq!(u(&x["saving"]["bytes"]), b);
    none(
        "duplicate-initializer",
        &fixture("duplicate-initializer/pass.onnx"),
        &[],
    );
}

/// No fixture trips a rule it is not about (the fixtures are clean apart from their one defect).
#[test]
fn fixtures_are_clean_apart_from_their_defect() {
    let cases = [
        ("heavy-standard-conv/pass_separable.onnx", vec![]),
        ("heavy-standard-conv/pass_stem.onnx", vec![]),
        ("large-fc-head/pass_gap.onnx", vec![]),
        ("oversized-linear/pass_full_rank.onnx", vec![]),
        ("fp32-weights/pass_fp16.onnx", vec!["NL101"]),
        ("activation-hotspot/pass_gemm.onnx", vec![]),
        ("dead-node/pass.onnx", vec![]),
        ("fixed-batch-input/pass.onnx", vec![]),
        ("duplicate-initializer/pass.onnx", vec![]),
        ("heavy-standard-conv/fire.onnx", vec!["NL101"]),
        ("large-fc-head/fire.onnx", vec!["NL102"]),
        ("oversized-linear/fire_rank8.onnx", vec![]),
        ("unused-initializer/fire.onnx", vec!["NL301"]),
        ("dead-node/fire.onnx", vec!["NL302"]),
        ("fixed-batch-input/fire.onnx", vec!["NL303"]),
        ("duplicate-initializer/fire.onnx", vec!["NL304"]),
        ("duplicate-initializer/fire_typed.onnx", vec!["NL304"]),
    ];
    for (model, want) in cases {
        // everything but activation-hotspot, which reports the biggest savers of any network
        let (v, _) = lint(&[
            &fixture(model),
            "--no-config",
            "--ignore",
            "activation-hotspot",
        ]);
        let mut codes: Vec<&str> = v["files"][0]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["code"].as_str().unwrap())
            .collect();
        codes.dedup();
        assert_eq!(codes, want, "{model}: {v:#}");
    }
}

// ---- exit codes, configuration, ignores, baselines -------------------------------------------

fn heavy_fire() -> String {
    fixture("heavy-standard-conv/fire.onnx")
}

fn write_config(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("nnlint.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn exit_codes_follow_fail_on() {
    let m = heavy_fire();
    let sel = ["--select", "heavy-standard-conv", "--no-config"];
    let run = |extra: &[&str]| {
        let mut args = vec![m.as_str()];
        args.extend_from_slice(&sel);
        args.extend_from_slice(extra);
        let (v, code) = lint(&args);
        assert_eq!(
            v["files"][0]["findings"].as_array().unwrap().len(),
            1,
            "{v:#}"
        );
        code
    };
    assert_eq!(run(&[]), 0, "a warning does not fail with --fail-on error");
    assert_eq!(run(&["--fail-on", "error"]), 0);
    assert_eq!(run(&["--fail-on", "warning"]), 1);
    assert_eq!(run(&["--fail-on", "info"]), 1);
    assert_eq!(run(&["--fail-on", "never"]), 0);
    // an info finding fails only at --fail-on info
    let fixed = fixture("fixed-batch-input/fire.onnx");
    for (fail_on, want) in [("warning", 0), ("info", 1)] {
        let (_, code) = lint(&[
            &fixed,
            "--select",
            "fixed-batch-input",
            "--no-config",
            "--fail-on",
            fail_on,
        ]);
        assert_eq!(code, want, "--fail-on {fail_on}");
    }
}

#[test]
fn a_config_can_raise_severity_and_fail_on() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(&dir, "[rules.heavy-standard-conv]\nseverity = \"error\"\n");
    let (v, code) = lint(&[&heavy_fire(), "--select", "NL101", "--config", &cfg]);
    assert_eq!(code, 1);
    assert_eq!(v["files"][0]["findings"][0]["severity"], "error");
    // --fail-on on the command line wins over the default
    let (_, code) = lint(&[
        &heavy_fire(),
        "--select",
        "NL101",
        "--config",
        &cfg,
        "--fail-on",
        "never",
    ]);
    assert_eq!(code, 0);
    // fail-on in the file
    let cfg = write_config(&dir, "fail-on = \"warning\"\n");
    let (_, code) = lint(&[&heavy_fire(), "--select", "NL101", "--config", &cfg]);
    assert_eq!(code, 1);
}

#[test]
fn ignores_suppress_findings() {
    let m = heavy_fire();
    // --ignore wins over --select
    let (v, code) = lint(&[
        &m,
        "--no-config",
        "--select",
        "NL1",
        "--ignore",
        "heavy-standard-conv",
    ]);
    assert_eq!(
        v["files"][0]["findings"].as_array().unwrap().len(),
        0,
        "{v:#}"
    );
    assert_eq!(code, 0);
    let dir = tempfile::tempdir().unwrap();
    // ignore-nodes, top level and per rule: suppressed, and no warning (the pattern matched)
    for text in [
        "ignore-nodes = [\"conv\"]\n",
        "ignore-nodes = [\"c*\"]\n",
        "[rules.heavy-standard-conv]\nignore-nodes = [\"conv\"]\n",
    ] {
        let cfg = write_config(&dir, text);
        let (v, _) = lint(&[&m, "--select", "heavy-standard-conv", "--config", &cfg]);
        assert_eq!(
            v["files"][0]["findings"].as_array().unwrap().len(),
            0,
            "{text}: {v:#}"
        );
        assert_eq!(v["warnings"].as_array().unwrap().len(), 0, "{text}: {v:#}");
    }
    // a pattern that matches nothing is reported, and the finding stays
    let cfg = write_config(&dir, "ignore-nodes = [\"/nowhere/*\"]\n");
    let (v, _) = lint(&[&m, "--select", "heavy-standard-conv", "--config", &cfg]);
    assert_eq!(
        v["files"][0]["findings"].as_array().unwrap().len(),
        1,
        "{v:#}"
    );
    let warnings = v["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{v:#}");
    let w = warnings[0].as_str().unwrap();
    assert!(
        w.contains("'/nowhere/*'") && w.contains("matches no finding"),
        "{w}"
    );
    // a rule switched off in the file
    let cfg = write_config(&dir, "[rules.heavy-standard-conv]\nenabled = false\n");
    let (v, _) = lint(&[&m, "--select", "heavy-standard-conv", "--config", &cfg]);
    assert_eq!(
        v["files"][0]["findings"].as_array().unwrap().len(),
        0,
        "{v:#}"
    );
}

#[test]
fn a_baseline_hides_known_findings() {
    let vgg = stage("models/torch/vgg16.onnx");
    let model = vgg.path.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("baseline.json");
    let b = baseline.to_str().unwrap();
    let (v, code) = lint(&[
        model,
        "--no-config",
        "--select",
        "NL1",
        "--fail-on",
        "warning",
    ]);
    let n = v["files"][0]["findings"].as_array().unwrap().len();
    // 12 heavy convs, the FC head, 3 oversized linear layers
    assert_eq!(n, 16, "{v:#}");
    assert_eq!((u(&v["files"][0]["baselined"]), code), (0, 1));
    let out = nnlint(&[
        "lint",
        model,
        "--no-config",
        "--select",
        "NL1",
        "--write-baseline",
        b,
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("wrote {n} findings")),
        "{}",
        stdout(&out)
    );
    let (v, code) = lint(&[
        model,
        "--no-config",
        "--select",
        "NL1",
        "--fail-on",
        "warning",
        "--baseline",
        b,
    ]);
    assert_eq!(
        v["files"][0]["findings"].as_array().unwrap().len(),
        0,
        "{v:#}"
    );
    assert_eq!(u(&v["files"][0]["baselined"]), n as u64);
    assert_eq!(code, 0, "baselined findings do not fail the run");
    // a finding the baseline does not hold is still reported
    let (v, _) = lint(&[
        &heavy_fire(),
        "--no-config",
        "--select",
        "NL1",
        "--baseline",
        b,
    ]);
    assert_eq!(
        v["files"][0]["findings"].as_array().unwrap().len(),
        1,
        "{v:#}"
    );
    assert_eq!(u(&v["files"][0]["baselined"]), 0);
}

#[test]
fn unknown_op_fires_once_per_op_type_and_not_on_known_ops() {
    use common::onnx::{node, vi, vi_untyped, FLOAT, G};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("custom.onnx");
    let mut custom = node("FancyAttention", "fancy1", &["x"], &["a"]);
    custom.domain = Some("com.example".into());
    let mut custom2 = node("FancyAttention", "fancy2", &["a"], &["b"]);
    custom2.domain = Some("com.example".into());
    let model = G::new("custom")
        .input(vi("x", FLOAT, &[1, 4]))
        .node(custom)
        .node(custom2)
        .node(node("Relu", "relu", &["b"], &["y"]))
        .output(vi_untyped("y"))
        .model();
    std::fs::write(&path, model).unwrap();
    let x = one("unknown-op", path.to_str().unwrap(), "fancy1", &[]);
    assert_eq!(x["code"], "NL305");
    assert_eq!(x["measured"], 2.0);
    assert!(
        x["message"]
            .as_str()
            .unwrap()
            .contains("op com.example.FancyAttention"),
        "{x}"
    );
    none(
        "unknown-op",
        &common::fixture("models/torch/minicnn.onnx"),
        &[],
    );
}

// ---- quantized layers and unknown costs ----------------------------------------------------------

/// A 3x3 64 -> 128 conv on a 56x56 map whose weight is int8 behind a DequantizeLinear (the
/// onnxruntime quantizer's QDQ form), written to `dir`.
fn qdq_conv(dir: &std::path::Path) -> String {
    use common::onnx::{floats, node, vi, vi_untyped, FLOAT, G};
    let mut w = common::onnx::raw_tensor("w_q", &[128, 64, 3, 3], vec![1; 128 * 64 * 9]);
    w.data_type = Some(common::onnx::INT8);
    let mut zp = common::onnx::raw_tensor("w_zp", &[], vec![0]);
    zp.data_type = Some(common::onnx::INT8);
    let model = G::new("qdq")
        .input(vi("x", FLOAT, &[1, 64, 56, 56]))
        .init(w)
        .init(floats("w_scale", &[], &[0.01]))
        .init(zp)
        .node(node(
            "DequantizeLinear",
            "w_dq",
            &["w_q", "w_scale", "w_zp"],
            &["w"],
        ))
        .node(common::onnx::with(
            node("Conv", "conv", &["x", "w"], &["y"]),
            vec![common::onnx::ints_attr("pads", &[1, 1, 1, 1])],
        ))
        .output(vi_untyped("y"))
        .model();
    let path = dir.join("qdq_conv.onnx");
    std::fs::write(&path, model).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn heavy_standard_conv_fires_on_a_quantized_conv_and_counts_stored_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let model = qdq_conv(dir.path());
    let x = one("heavy-standard-conv", &model, "conv", &[]);
    let params = 64 * 128 * 9 - (64 * 9 + 64 * 128);
    assert_eq!(u(&x["saving"]["params"]), params);
    // the weight is stored as int8: one byte a parameter, not four
    assert_eq!(u(&x["saving"]["bytes"]), params);
    assert_eq!(u(&x["saving"]["macs"]), 203_714_560);
    // the rewrite works on float weights only, and the finding says so
    assert!(x["rewrite"].is_null(), "{x:#}");
    let fix = x["fix"].as_str().unwrap();
    assert!(
        fix.contains("not rewritten") && fix.contains("int8"),
        "{fix}"
    );
    // and `rewrite` leaves the model alone with the same reason
    let out = dir.path().join("out.onnx");
    let o = nnlint(&["rewrite", &model, "-o", out.to_str().unwrap()]);
    assert!(!out.exists(), "{}", stdout(&o));
}

#[test]
fn memory_budget_cannot_confirm_a_fit_on_a_lower_bound() {
    use common::onnx::{node, vi, vi_untyped, FLOAT, G};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("custom.onnx");
    let mut custom = node("FancyAttention", "fancy", &["h"], &["a"]);
    custom.domain = Some("com.example".into());
    let model = G::new("custom")
        .input(vi("x", FLOAT, &[1, 1024]))
        .node(node("Relu", "relu", &["x"], &["h"]))
        .node(custom)
        .node(node("Relu", "relu2", &["a"], &["y"]))
        .output(vi_untyped("y"))
        .model();
    std::fs::write(&path, model).unwrap();
    let model = path.to_str().unwrap();
    // an 8 GiB budget is far above what nnlint can count, but the custom op's output is unknown:
    // the peak is a lower bound and the rule says it cannot confirm the fit
    let found = run_rule("memory-budget", model, &["--budget", "8GiB"]);
    assert_eq!(found.len(), 1, "{found:#?}");
    let x = &found[0];
    assert_eq!(x["op"], "model");
    assert_eq!(x["severity"], "warning", "{x:#}");
    let msg = x["message"].as_str().unwrap();
    assert!(msg.contains("cannot confirm"), "{msg}");
    assert!(
        msg.contains("lower bound") && msg.contains("FancyAttention"),
        "{msg}"
    );
    assert_eq!(f(&x["limit"]), 8.0 * (1u64 << 30) as f64);
    assert!(
        f(&x["measured"]) > 0.0 && f(&x["measured"]) < f(&x["limit"]),
        "{x:#}"
    );
}

#[test]
fn a_memory_budget_fix_fits_the_budget_at_the_stated_batch() {
    let staged = stage("models/torch/resnet18.onnx");
    let model = staged.path.to_str().unwrap();
    let (v, code) = lint(&[
        model,
        "--select",
        "memory-budget",
        "--no-config",
        "--batch",
        "64",
        "--budget",
        "1GiB",
    ]);
    assert_eq!(code, 1, "{v:#}");
    let x = &v["files"][0]["findings"][0];
    let fix = x["fix"].as_str().unwrap();
    // "<plan>: micro-batch M x S accumulation steps x G GPU(s), <peak> per GPU"
    let nums: Vec<u64> = fix
        .split(": micro-batch ")
        .nth(1)
        .unwrap_or_else(|| panic!("{fix}"))
        .split(" x ")
        .take(3)
        .map(|t| t.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    let (micro, steps, gpus) = (nums[0], nums[1], nums[2]);
    assert_eq!(micro * steps * gpus, 64, "{fix}");
    let plan = fix.split(':').next().unwrap();
    let (precision, checkpoint, optimizer) = match plan {
        "full, fp32" => ("fp32", "none", "adamw"),
        "full, amp-bf16" => ("amp-bf16", "none", "adamw"),
        "full, amp-bf16 + checkpointing" => ("amp-bf16", "sqrt", "adamw"),
        "full, bf16" => ("bf16", "none", "adamw"),
        "full, bf16 + checkpointing" => ("bf16", "sqrt", "adamw"),
        "full, bf16 + checkpointing + 8-bit AdamW" => ("bf16", "sqrt", "adamw-8bit"),
        other => panic!("unexpected plan {other}"),
    };
    // re-run the estimate on the plan it proposes: it fits
    let r = common::run_json(&[
        "mem",
        model,
        "--train",
        "--format",
        "json",
        "--batch",
        &micro.to_string(),
        "--accumulate",
        &steps.to_string(),
        "--precision",
        precision,
        "--checkpoint",
        checkpoint,
        "--optimizer",
        optimizer,
    ]);
    let peak = u(&r["training"]["total_bytes"]);
    assert!(peak <= 1 << 30, "{fix}: the plan needs {peak} bytes");
}
