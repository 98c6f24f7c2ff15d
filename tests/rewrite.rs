//! `nnlint rewrite` and `nnlint verify` on the rewrite fixtures (testdata/models/rewrite, written by
//! testdata/generate.py): hand-computed parameter and MAC counts, the exactness of full-rank
//! decompositions, the GAP head's summed weights, emission (external data, names, metadata, never
//! over the input) and the checker's dump.

mod common;

use std::path::{Path, PathBuf};

use common::{nnlint, stderr, stdout};
use nnlint::ir::Values;

fn fixture(name: &str) -> String {
    common::fixture(&format!("models/rewrite/{name}"))
}

fn config() -> String {
    fixture("nnlint.toml")
}

/// Runs `nnlint rewrite MODEL -o OUT --config testdata/models/rewrite/nnlint.toml EXTRA...`, which
/// must succeed, and returns its standard output.
fn rewrite_text(model: &str, out: &Path, extra: &[&str]) -> String {
    let cfg = config();
    let out_s = out.display().to_string();
    let mut args = vec!["rewrite", model, "-o", &out_s, "--config", &cfg, "--lossy"];
    args.extend_from_slice(extra);
    let o = nnlint(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

/// The same with `--format json`, parsed.
fn rewrite(model: &str, out: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--format", "json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&rewrite_text(model, out, &args)).expect("the report is JSON")
}

fn rewrites(r: &serde_json::Value) -> &Vec<serde_json::Value> {
    r["rewrites"].as_array().expect("rewrites is an array")
}

fn floats(model: &Path, name: &str) -> (Vec<u64>, Vec<f64>) {
    let m = nnlint::load::onnx::load(model).unwrap();
    let v = m.graph.value_by_name(name).unwrap();
    let t = m.graph.values[v].init.as_deref().unwrap();
    let Some(Values::Float(x)) = t.read_values(u64::MAX) else {
        panic!("{name} is not a float tensor")
    };
    (t.dims.to_vec(), x)
}

#[test]
fn full_rank_decompositions_reproduce_the_original() {
    let dir = tempfile::tempdir().unwrap();
    for model in ["vgg_like.onnx", "resnet_like.onnx"] {
        let out = dir.path().join(model);
        let r = rewrite(
            &fixture(model),
            &out,
            &["--rank", "full", "--rule", "NL101,NL103", "--batch", "2"],
        );
        assert!(!rewrites(&r).is_empty());
        for rw in rewrites(&r) {
            assert_eq!(rw["safety"], "exact", "{rw}");
            let rel = rw["verify"]["max_rel_error"].as_f64().unwrap();
            assert!(rel < 1e-4, "{model} {}: relative error {rel}", rw["node"]);
        }
        let whole = &r["whole_model"];
        assert_eq!(whole["checked"], true, "{whole}");
        for o in whole["outputs"].as_array().unwrap() {
            let rel = o["max_rel_error"].as_f64().unwrap();
            assert!(rel < 1e-4, "{model}: whole-model relative error {rel}");
        }
        // `nnlint verify` on the written files agrees, and passes
        let o = nnlint(&[
            "verify",
            &fixture(model),
            &out.display().to_string(),
            "--format",
            "json",
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        assert_eq!(v["checks"].as_array().unwrap().len(), rewrites(&r).len());
    }
}

#[test]
fn default_rewrite_of_the_vgg_like_model_by_hand() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slim.onnx");
    let r = rewrite(&fixture("vgg_like.onnx"), &out, &[]);
    let rows = rewrites(&r);
    let by_node = |n: &str| {
        rows.iter()
            .find(|x| x["node"] == n)
            .unwrap_or_else(|| panic!("no rewrite of {n}: {rows:?}"))
    };
    // conv 16 -> 32, 3x3 on 16x16 (pad 1): rank 1 keeps 16·9 depthwise + 32·16 pointwise weights
    let c = by_node("/features/features.2/Conv");
    assert_eq!(c["kind"], "depthwise-separable");
    assert_eq!(c["rank"], 1);
    assert_eq!(c["safety"], "approximate");
    assert_eq!(c["params"]["before"], 32 * 16 * 9 + 32);
    assert_eq!(c["params"]["after"], 16 * 9 + 32 * 16 + 32);
    assert_eq!(c["macs"]["before"], 32 * 16 * 9 * 256);
    assert_eq!(c["macs"]["after"], 16 * 9 * 256 + 32 * 16 * 256);
    // the depthwise output is a new 16-channel 16x16 activation (fp32)
    assert_eq!(c["activation_bytes"]["after"], (16 + 32) * 256 * 4);
    // GAP head: 512 -> 64 becomes 32 -> 64, same bias
    let h = by_node("/classifier/classifier.0/Gemm");
    assert_eq!(h["kind"], "gap-head");
    assert_eq!(h["safety"], "lossy");
    assert_eq!(h["params"]["before"], 512 * 64 + 64);
    assert_eq!(h["params"]["after"], 32 * 64 + 64);
    let constant = h["verify"]["constant_input_rel_error"].as_f64().unwrap();
    assert!(
        constant < 1e-6,
        "exact on a spatially constant map: {constant}"
    );
    // oversized-linear also flags the head: pooled first, so it is skipped
    let skipped = r["skipped"].as_array().unwrap();
    assert!(skipped
        .iter()
        .any(|s| s["node"] == "/classifier/classifier.0/Gemm"
            && s["reason"].as_str().unwrap().contains("gap-head")));
    // totals: 47,818 parameters before; the three weights replaced by hand-counted ones
    let after = 47_818 - 32 * 16 * 9 - 32 * 32 * 9 - 512 * 64
        + (16 * 9 + 32 * 16)
        + (32 * 9 + 32 * 32)
        + 32 * 64;
    assert_eq!(r["totals"]["params"]["before"], 47_818);
    assert_eq!(r["totals"]["params"]["after"], after);
    assert!(
        r["totals"]["training_peak"]["after"].as_u64()
            < r["totals"]["training_peak"]["before"].as_u64()
    );
}

#[test]
fn gap_head_weight_is_the_spatial_sum() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("gap.onnx");
    rewrite(&fixture("vgg_like.onnx"), &out, &["--rule", "gap-head"]);
    let (dims, w) = floats(Path::new(&fixture("vgg_like.onnx")), "classifier.0.weight");
    assert_eq!(dims, [64, 512]);
    let (new_dims, got) = floats(&out, "classifier.0.weight.gap");
    assert_eq!(new_dims, [64, 32]);
    for n in 0..64 {
        for c in 0..32 {
            let want: f64 = (0..16).map(|s| w[n * 512 + c * 16 + s]).sum();
            let have = got[n * 32 + c];
            assert!(
                (want - have).abs() < 1e-5,
                "W'[{n},{c}] = {have}, want {want}"
            );
        }
    }
    // the original weight and the Flatten are gone; the bias stays
    let m = nnlint::load::onnx::load(&out).unwrap();
    assert!(m.graph.value_by_name("classifier.0.weight").is_none());
    assert!(m.graph.value_by_name("classifier.0.bias").is_some());
    assert!(!m
        .graph
        .nodes
        .iter()
        .any(|n| m.graph.name(n.name) == "/Flatten"));
    let ops: Vec<&str> = m.graph.nodes.iter().map(|n| n.op_type.as_str()).collect();
    assert!(ops
        .windows(3)
        .any(|w| w == ["GlobalAveragePool", "Flatten", "Gemm"]));
}

#[test]
fn external_data_is_written_next_to_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ext.onnx");
    let r = rewrite(&fixture("resnet_like_ext.onnx"), &out, &["--no-verify"]);
    let data = dir.path().join("ext.onnx.data");
    assert!(data.is_file());
    assert_eq!(r["external_data"], data.display().to_string());
    // every weight of 1 KiB or more lives in the data file, and the model loads and checks
    let m = nnlint::load::onnx::load(&out).unwrap();
    for (_, t) in m.graph.initializers() {
        if t.byte_size().unwrap() >= 1024 {
            match &t.data {
                nnlint::ir::TensorData::External(e) => {
                    assert_eq!(e.path.canonicalize().unwrap(), data.canonicalize().unwrap())
                }
                other => panic!("{} is not external: {other:?}", t.name),
            }
        }
    }
    let o = nnlint(&[
        "verify",
        &fixture("resnet_like_ext.onnx"),
        &out.display().to_string(),
    ]);
    // rank-1 factorisations change the output: exit 3
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("verdict: changed as declared: 4 rewrites (4 approximate)"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("whole model"), "{}", stdout(&o));
}

#[test]
fn the_input_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.onnx");
    std::fs::copy(fixture("vgg_like.onnx"), &model).unwrap();
    let before = std::fs::read(&model).unwrap();
    let m = model.display().to_string();
    let cfg = config();
    let o = nnlint(&["rewrite", &m, "-o", &m, "--config", &cfg, "--lossy"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("would overwrite the input"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(&model).unwrap(), before);
    // without -o, the name is derived
    let o = nnlint(&["rewrite", &m, "--config", &cfg, "--no-verify", "--lossy"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.path().join("m-rewritten.onnx").is_file());
    assert_eq!(std::fs::read(&model).unwrap(), before);
    // no temporary file is left behind
    let left: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // the external data of the input is not a valid output either
    let ext = dir.path().join("e.onnx");
    std::fs::copy(fixture("resnet_like_ext.onnx"), &ext).unwrap();
    std::fs::copy(
        fixture("resnet_like_ext.onnx.data"),
        dir.path().join("resnet_like_ext.onnx.data"),
    )
    .unwrap();
    let o = nnlint(&[
        "rewrite",
        &ext.display().to_string(),
        "-o",
        &dir.path()
            .join("resnet_like_ext.onnx")
            .display()
            .to_string(),
        "--config",
        &cfg,
        "--lossy",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stdout(&o));
    assert!(stderr(&o).contains("would overwrite"), "{}", stderr(&o));
}

#[test]
fn records_metadata_and_value_info() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.onnx");
    rewrite(&fixture("resnet_like.onnx"), &out, &["--no-verify"]);
    let m = nnlint::load::onnx::load(&out).unwrap();
    let records = nnlint::rules::fix::applied(&m).unwrap().unwrap();
    assert_eq!(records.len(), 4);
    for r in &records {
        assert_eq!(r.rule, "NL101");
        assert_eq!(r.added.len(), 2);
        // the new depthwise output is declared with the symbolic batch kept
        let v = m.graph.value_by_name(&r.added[0]).unwrap();
        let decl = m.graph.values[v].declared.as_ref().expect("value_info");
        let shape = decl.shape.as_ref().unwrap();
        assert_eq!(shape[0].to_string(), "batch");
    }
    // the fixture's own metadata survives
    assert!(
        m.metadata.iter().any(|(k, _)| k == "source"),
        "{:?}",
        m.metadata
    );
}

#[test]
fn diff_shows_the_replaced_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d.onnx");
    let text = rewrite_text(
        &fixture("vgg_like.onnx"),
        &out,
        &[
            "--rule",
            "NL101",
            "--node",
            "*features.5*",
            "--diff",
            "--no-verify",
        ],
    );
    assert!(
        text.contains("-init features.5.weight: float32[32, 32, 3, 3]"),
        "{text}"
    );
    assert!(
        text.contains("+init features.5.weight.depthwise: float32[32, 1, 3, 3]"),
        "{text}"
    );
    assert!(
        !text.contains("features.2.weight.depthwise"),
        "--node selects: {text}"
    );
}

#[test]
fn verify_dumps_inputs_and_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("v.onnx");
    rewrite(&fixture("vgg_like.onnx"), &out, &["--no-verify"]);
    let dump = dir.path().join("dump");
    let o = nnlint(&[
        "verify",
        &fixture("vgg_like.onnx"),
        &out.display().to_string(),
        "--batch",
        "3",
        "--dump",
        &dump.display().to_string(),
    ]);
    // the rewrites are lossy and changed the output: exit 3, said in the verdict
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dump.join("manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["inputs"][0]["name"], "input");
    assert_eq!(
        manifest["inputs"][0]["shape"],
        serde_json::json!([3, 3, 16, 16])
    );
    let npy = std::fs::read(dump.join("original_0.npy")).unwrap();
    assert_eq!(&npy[..6], b"\x93NUMPY");
    let header_len = u16::from_le_bytes([npy[8], npy[9]]) as usize;
    assert_eq!(npy.len(), 10 + header_len + 3 * 10 * 8);
}

#[test]
fn usage_errors_exit_2() {
    let m = fixture("vgg_like.onnx");
    for args in [
        vec!["rewrite", m.as_str(), "--rank", "0"],
        vec!["rewrite", m.as_str(), "--energy", "1.5"],
        vec!["rewrite", m.as_str(), "--rule", "memory-budget"],
        vec!["rewrite", "-", "-o", "x.onnx"],
    ] {
        let o = nnlint(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        let first = stderr(&o).lines().next().unwrap_or_default().to_string();
        assert!(
            first.starts_with("error: ") || first.starts_with("nnlint: error: "),
            "{first}"
        );
    }
}

#[test]
fn nothing_to_rewrite_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("none.onnx");
    let o = nnlint(&[
        "rewrite",
        &fixture("resnet_like.onnx"),
        "-o",
        &out.display().to_string(),
        "--no-config",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing to rewrite"), "{}", stdout(&o));
    assert!(!out.exists());
    // in JSON too, for scripts
    let o = nnlint(&[
        "rewrite",
        &fixture("resnet_like.onnx"),
        "-o",
        &out.display().to_string(),
        "--no-config",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("JSON");
    assert_eq!(r["output"], serde_json::Value::Null);
    assert_eq!(rewrites(&r).len(), 0);
    assert!(!out.exists());
}

/// Paddle2ONNX holds weights in `Constant` nodes: they are rewritten like initializers, and the
/// Constant node that held the replaced weight goes.
#[test]
fn weights_in_constant_nodes_are_rewritable() {
    use common::onnx::{constant, floats, node, vi, with, G};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("paddle_like.onnx");
    let mut rng = 1u64;
    let w: Vec<f32> = (0..32 * 16 * 9)
        .map(|_| {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((rng >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect();
    let conv = with(
        node("Conv", "conv", &["x", "w"], &["y"]),
        vec![common::onnx::ints_attr("pads", &[1, 1, 1, 1])],
    );
    let bytes = G::new("g")
        .input(vi("x", 1, &[1, 16, 32, 32]))
        .output(vi("y", 1, &[1, 32, 32, 32]))
        .node(constant("w", floats("w", &[32, 16, 3, 3], &w)))
        .node(conv)
        .model();
    std::fs::write(&model, bytes).unwrap();
    let out = dir.path().join("slim.onnx");
    let r = rewrite(
        &model.display().to_string(),
        &out,
        &["--rank", "full", "--rule", "depthwise-separable"],
    );
    assert_eq!(rewrites(&r).len(), 1, "{r}");
    assert_eq!(r["rewrites"][0]["params"]["before"], 32 * 16 * 9);
    assert!(r["whole_model"]["checked"].as_bool().unwrap(), "{r}");
    let err = r["whole_model"]["outputs"][0]["max_rel_error"]
        .as_f64()
        .unwrap();
    assert!(err < 1e-5, "full rank is exact: {err}");
    let m = nnlint::load::onnx::load(&out).unwrap();
    assert!(
        m.graph.nodes.iter().all(|n| n.op_type != "Constant"),
        "the replaced weight's Constant node is dropped"
    );
}

#[test]
fn report_table_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slim.onnx");
    let text = rewrite_text(&fixture("vgg_like.onnx"), &out, &["--batch", "8"])
        .replace(&fixture("vgg_like.onnx"), "vgg_like.onnx")
        .replace(&out.display().to_string(), "slim.onnx");
    // round-off errors differ in their last bits with the summation order: not part of the snapshot
    let text: String = text
        .split_inclusive(['\n', ' '])
        .map(|tok| match tok.trim().parse::<f64>() {
            Ok(v) if v < 1e-4 && tok.contains("e-") => tok.replace(tok.trim(), "[round-off]"),
            _ => tok.to_string(),
        })
        .collect();
    insta::assert_snapshot!(text);
}

/// The done-when on the real torchvision VGG-16 export (its weights staged as zeros: the
/// structure and the counts are what is checked here; tests/interop and docs/rewrite.md cover
/// onnxruntime and the numbers on real weights).
#[test]
fn vgg16_loses_at_least_five_sixths_of_its_parameters() {
    let staged = common::stage("models/torch/vgg16.onnx");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("vgg16-slim.onnx");
    let o = nnlint(&[
        "rewrite",
        &staged.path.display().to_string(),
        "-o",
        &out.display().to_string(),
        "--no-config",
        "--rule",
        "heavy-standard-conv,large-fc-head",
        "--lossy",
        "--no-verify",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    // the 3x3 convolutions with at least 64 input channels (C_in, C_out), by hand from the paper
    let convs: [(u64, u64); 12] = [
        (64, 64),
        (64, 128),
        (128, 128),
        (128, 256),
        (256, 256),
        (256, 256),
        (256, 512),
        (512, 512),
        (512, 512),
        (512, 512),
        (512, 512),
        (512, 512),
    ];
    let conv_saved: u64 = convs
        .iter()
        .map(|&(ci, co)| co * ci * 9 - (ci * 9 + ci * co))
        .sum();
    let head_saved = 4096 * 25088 - 4096 * 512;
    assert_eq!(rewrites(&r).len(), 13);
    assert_eq!(r["totals"]["params"]["before"], 138_357_544u64);
    let after = 138_357_544 - conv_saved - head_saved;
    assert_eq!(r["totals"]["params"]["after"], after);
    assert!(138_357_544 >= 5 * after, "{after}");
    assert!(
        r["skipped"].as_array().unwrap().is_empty(),
        "{}",
        r["skipped"]
    );
    // the written model loads and analyses
    let o = nnlint(&["mem", &out.display().to_string(), "--format", "json"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_rewritten_model_can_be_rewritten_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first.onnx");
    let second = dir.path().join("second.onnx");
    rewrite(
        &fixture("vgg_like.onnx"),
        &first,
        &["--rule", "NL101", "--no-verify"],
    );
    let r = rewrite(
        &first.display().to_string(),
        &second,
        &["--rule", "gap-head"],
    );
    assert_eq!(rewrites(&r).len(), 1);
    assert!(
        rewrites(&r)[0]["verify"]["max_rel_error"].is_number(),
        "{r}"
    );
    // both runs are on record; verify compares only what this original still has
    let m = nnlint::load::onnx::load(&second).unwrap();
    assert_eq!(nnlint::rules::fix::applied(&m).unwrap().unwrap().len(), 3);
    let o = nnlint(&[
        "verify",
        &first.display().to_string(),
        &second.display().to_string(),
    ]);
    // the GAP head is lossy: the output changed, as declared (exit 3)
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stdout(&o).matches("(gap-head").count(), 1, "{}", stdout(&o));
    assert!(!stdout(&o).contains("not checked"), "{}", stdout(&o));
}

#[test]
fn a_truncated_model_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture("vgg_like.onnx")).unwrap();
    let cut = dir.path().join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = nnlint(&["rewrite", &cut.display().to_string(), "--no-config"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("cut.onnx"), "{err}");
    assert!(!dir.path().join("cut-rewritten.onnx").exists());
}

#[test]
fn token_id_inputs_are_fed_as_indices_in_the_whole_model_check() {
    // a language-model head: token ids gather rows of an embedding table, a mask multiplies them,
    // a linear layer follows. Random integers would index out of the table; the check draws ids
    // below its 50 rows and feeds the mask as ones.
    use common::onnx::{floats as tensor, node, vi, G, INT64};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("lm.onnx");
    let mut rng = 7u64;
    let mut next = || {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((rng >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    let table: Vec<f32> = (0..50 * 128).map(|_| next()).collect();
    let w: Vec<f32> = (0..128 * 96).map(|_| next()).collect();
    let cast = common::onnx::with(
        node("Cast", "cast", &["mask"], &["m"]),
        vec![common::onnx::attr_int("to", 1)],
    );
    let axes = common::onnx::ints("axes", &[2]);
    let bytes = G::new("lm")
        .input(vi("ids", INT64, &[1, 6]))
        .input(vi("mask", INT64, &[1, 6]))
        .output(vi("y", 1, &[1, 6, 96]))
        .init(tensor("table", &[50, 128], &table))
        .init(tensor("w", &[128, 96], &w))
        .init(axes)
        .node(node("Gather", "embed", &["table", "ids"], &["e"]))
        .node(cast)
        .node(node("Unsqueeze", "unsq", &["m", "axes"], &["m3"]))
        .node(node("Mul", "masked", &["e", "m3"], &["h"]))
        .node(node("MatMul", "head", &["h", "w"], &["y"]))
        .model();
    std::fs::write(&model, bytes).unwrap();
    let out = dir.path().join("slim.onnx");
    let r = rewrite(
        &model.display().to_string(),
        &out,
        &["--rank", "full", "--rule", "low-rank"],
    );
    assert_eq!(rewrites(&r).len(), 1, "{r:#}");
    assert_eq!(r["whole_model"]["checked"], true, "{r:#}");
    let err = r["whole_model"]["outputs"][0]["max_rel_error"]
        .as_f64()
        .unwrap();
    assert!(err < 1e-5, "full rank is exact: {err}");
}

#[test]
fn verify_states_its_verdict_and_fails_on_models_that_differ() {
    use common::onnx::{floats as tensor, node, vi, G};
    let dir = tempfile::tempdir().unwrap();
    let linear = |name: &str, w: f32| {
        let path = dir.path().join(name);
        let bytes = G::new("g")
            .input(vi("x", 1, &[2, 8]))
            .output(vi("y", 1, &[2, 4]))
            .init(tensor("w", &[8, 4], &[w; 32]))
            .node(node("MatMul", "mm", &["x", "w"], &["y"]))
            .model();
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    };
    let a = linear("a.onnx", 0.5);
    let b = linear("b.onnx", 0.5);
    let c = linear("c.onnx", 0.6);
    let verify = |x: &str, y: &str| {
        let o = nnlint(&["verify", x, y, "--format", "json"]);
        let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        (o.status.code(), v, stderr(&o))
    };
    // the same function: pass
    let (code, v, err) = verify(&a, &b);
    assert_eq!(code, Some(0), "{v:#}");
    assert_eq!(v["verdict"]["status"], "pass");
    assert!(err.contains("nnlint verify: pass"), "{err}");
    // weights 20% apart, no rewrite records: two models given as equivalent that are not
    let (code, v, err) = verify(&a, &c);
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["verdict"]["status"], "fail");
    assert!(err.contains("output 'y' differs"), "{err}");
    // unrelated models: their inputs do not correspond
    let (code, v, err) = verify(&a, &fixture("vgg_like.onnx"));
    assert_eq!(code, Some(1), "{v:#}");
    assert_eq!(v["verdict"]["status"], "fail");
    assert!(err.contains("do not correspond"), "{err}");
}

/// Issue 22: a rewrite that changes the output is not applied unless asked; when asked, the
/// verdict says the output changed (exit 3), once, and an exact rewrite still passes (exit 0).
#[test]
fn lossy_rewrites_need_asking_and_verify_says_the_output_changed() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config();
    let model = fixture("vgg_like.onnx");
    let out = dir.path().join("slim.onnx");
    let out_s = out.display().to_string();
    // the default: nothing that changes the output is applied, and nothing is written
    let o = nnlint(&[
        "rewrite", &model, "-o", &out_s, "--config", &cfg, "--format", "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!out.exists(), "nothing to write, nothing written");
    let r: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(rewrites(&r).is_empty(), "{r:#}");
    let held: Vec<&serde_json::Value> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| !s["safety"].is_null())
        .collect();
    assert!(!held.is_empty(), "{r:#}");
    for s in &held {
        assert!(
            ["approximate", "lossy"].contains(&s["safety"].as_str().unwrap()),
            "{s}"
        );
        assert!(s["reason"].as_str().unwrap().contains("--lossy"), "{s}");
    }
    let note = r["notes"][0].as_str().unwrap();
    assert!(
        note.contains(&format!("{} would change the output", held.len())),
        "{note}"
    );
    let o = nnlint(&["rewrite", &model, "-o", &out_s, "--config", &cfg]);
    assert!(
        stdout(&o).contains("not applied without --lossy"),
        "{}",
        stdout(&o)
    );
    // the exact decomposition is applied without asking, and passes
    let r = rewrite_exact(&model, &out);
    assert!(!rewrites(&r).is_empty());
    assert_eq!(r["verdict"]["status"], "pass", "{r:#}");
    // asked for: the rewrite applies them, and its verdict says the output changed
    let r = rewrite(&model, &out, &["--batch", "2"]);
    assert!(rewrites(&r).iter().any(|x| x["safety"] == "lossy"), "{r:#}");
    assert_eq!(r["verdict"]["status"], "changed", "{r:#}");
    let reason = r["verdict"]["reason"].as_str().unwrap();
    assert!(reason.starts_with("changed as declared: "), "{reason}");
    assert!(reason.contains("needs fine-tuning"), "{reason}");
    // verify of the two files agrees: exit 3, the verdict printed once
    let o = nnlint(&["verify", &model, &out_s, "--batch", "2"]);
    assert_eq!(o.status.code(), Some(3), "{}{}", stdout(&o), stderr(&o));
    let text = stdout(&o);
    assert_eq!(text.matches("changed as declared").count(), 1, "{text}");
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    let o = nnlint(&["verify", &model, &out_s, "--batch", "2", "--format", "json"]);
    assert_eq!(o.status.code(), Some(3));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["verdict"]["status"], "changed", "{v:#}");
}

/// `rewrite --rank full` without `--lossy`: only exact decompositions, so nothing is held back.
fn rewrite_exact(model: &str, out: &Path) -> serde_json::Value {
    let cfg = config();
    let out_s = out.display().to_string();
    let o = nnlint(&[
        "rewrite",
        model,
        "-o",
        &out_s,
        "--config",
        &cfg,
        "--rank",
        "full",
        "--rule",
        "NL101,NL103",
        "--batch",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap()
}
