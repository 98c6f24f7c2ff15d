//! Inference exports (issue 19, item 1): `torch.onnx.export` in eval mode folds BatchNorm into the
//! convolution and drops Dropout, so what training keeps cannot be read off the graph. The training
//! estimate is then a lower bound with the reason and the export call that gives the exact answer,
//! in `mem`, its JSON and `fit`. The graphs are the three shapes PyTorch writes (measured on
//! torchvision's resnet18, see docs/training-memory.md): the legacy exporter's folded convolutions
//! (a bias into an activation), the dynamo exporter's (no bias, metadata naming the fused
//! BatchNorm), and a training-mode export (BatchNormalization with training_mode=1).

mod common;

use common::onnx::{attr_int, ints_attr, node, vi, weight, with, FLOAT, G};
use common::{nnlint, run_json, stdout};
use nnlint::load::onnx_pb as pb;

/// x[2,3,8,8] → conv → (bn) → relu → conv → (bn) → relu; each conv output is 2·4·8·8 fp32 = 2 KiB.
fn cnn(bias: bool, bn_mode: Option<i64>, fused_metadata: bool) -> Vec<u8> {
    let mut g = G::new("cnn")
        .input(vi("x", FLOAT, &[2, 3, 8, 8]))
        .output(vi("y", FLOAT, &[2, 4, 8, 8]))
        .init(weight("w1", &[4, 3, 3, 3]))
        .init(weight("w2", &[4, 4, 3, 3]));
    let mut x = "x".to_string();
    for i in 1..=2 {
        let w = format!("w{i}");
        let b = format!("b{i}");
        let c = format!("c{i}");
        let mut inputs = vec![x.as_str(), w.as_str()];
        if bias {
            g = g.init(weight(&b, &[4]));
            inputs.push(b.as_str());
        }
        let mut conv = with(
            node("Conv", &format!("conv{i}"), &inputs, &[&c]),
            vec![ints_attr("pads", &[1, 1, 1, 1])],
        );
        if fused_metadata {
            conv.metadata_props = vec![pb::StringStringEntryProto {
                key: Some("pkg.onnxscript.rewriter.rule_name".into()),
                value: Some("RemoveOptionalBiasFromConv, FuseBatchNormIntoConv".into()),
            }];
        }
        g = g.node(conv);
        let mut pre = c.clone();
        if let Some(mode) = bn_mode {
            let n = format!("n{i}");
            for p in ["s", "o", "m", "v"] {
                g = g.init(weight(&format!("{p}{i}"), &[4]));
            }
            let s = format!("s{i}");
            let o = format!("o{i}");
            let m = format!("m{i}");
            let v = format!("v{i}");
            g = g.node(with(
                node(
                    "BatchNormalization",
                    &format!("bn{i}"),
                    &[&c, &s, &o, &m, &v],
                    &[&n],
                ),
                vec![attr_int("training_mode", mode)],
            ));
            pre = n;
        }
        let out = if i == 2 {
            "y".to_string()
        } else {
            format!("r{i}")
        };
        g = g.node(node("Relu", &format!("relu{i}"), &[&pre], &[&out]));
        x = out;
    }
    g.model()
}

fn train(model: &[u8]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, model).unwrap();
    let p = path.display().to_string();
    let v = run_json(&["mem", &p, "--train", "--format", "json"]);
    let fit = nnlint(&["fit", &p, "--gpu", "16GiB"]);
    (v["training"].clone(), stdout(&fit))
}

#[test]
fn a_legacy_eval_export_is_a_lower_bound_with_the_export_call() {
    let (t, fit) = train(&cnn(true, None, false));
    assert_eq!(t["lower_bound"], true, "{t}");
    let why = t["unknown"][0].as_str().unwrap();
    for phrase in [
        "an inference export",
        "2 convolutions with a bias straight into an activation",
        // the BatchNorms' inputs: both conv outputs, by hand 2 x (2*4*8*8*4 B)
        "about 4 KiB more over 2 convolutions",
        "training=torch.onnx.TrainingMode.TRAINING",
        "model.train()",
    ] {
        assert!(why.contains(phrase), "{phrase:?} not in {why:?}");
    }
    // fit: the batches are upper bounds, and it says why; this small model reaches the
    // search's cap, where an upper bound says nothing: `?`
    assert!(fit.contains("           ? "), "{fit}");
    assert!(fit.contains("the batches upper bounds"), "{fit}");
    assert!(fit.contains("an inference export"), "{fit}");
}

#[test]
fn a_dynamo_eval_export_is_known_by_its_metadata() {
    // the dynamo exporter folds a fresh BatchNorm into a conv without bias: only the node
    // metadata says a BatchNorm was there
    let (t, _) = train(&cnn(false, None, true));
    assert_eq!(t["lower_bound"], true, "{t}");
    let why = t["unknown"][0].as_str().unwrap();
    assert!(
        why.contains("metadata says 2 inference-mode BatchNorms were fused"),
        "{why}"
    );
}

#[test]
fn a_training_export_and_a_plain_network_are_exact() {
    for model in [cnn(false, Some(1), false), cnn(false, None, false)] {
        let (t, fit) = train(&model);
        assert_eq!(t["lower_bound"], false, "{t}");
        assert_eq!(t["unknown"], serde_json::json!([]), "{t}");
        assert!(!fit.contains("≤ "), "{fit}");
    }
}

#[test]
fn batchnorm_kept_in_inference_mode_is_counted_and_noted() {
    // BatchNormalization with training_mode=0 is still in the graph: counted as training runs
    // it (the same saved bytes as the training-mode graph), with a note
    let (eval, _) = train(&cnn(false, Some(0), false));
    let (trained, _) = train(&cnn(false, Some(1), false));
    assert_eq!(eval["lower_bound"], false, "{eval}");
    assert_eq!(
        eval["saved_activation_bytes"], trained["saved_activation_bytes"],
        "{eval}\n{trained}"
    );
    let notes = eval["notes"].to_string();
    assert!(
        notes.contains("an inference export (2 BatchNormalization nodes in inference mode)"),
        "{notes}"
    );
}

// ---------------------------------------------------------------------------------------------
// Parameters of real exports (issue 19, item 7): what the exporter deduplicated, folded or
// removed. The counts are PyTorch's `sum(p.numel() for p in model.parameters())` of the modules
// the graphs stand for, by hand; docs/training-memory.md has the torchvision/transformers runs.

fn mem(model: &[u8]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    std::fs::write(&path, model).unwrap();
    run_json(&["mem", path.to_str().unwrap(), "--format", "json"])
}

/// Three LayerNorms of width 8 in a row, their scale and bias read from `s`/`b` (or, with
/// `identity`, the TorchScript exporter's Identity copies of them for the second and third).
fn layer_norms(scale: &[f32], identity: bool) -> Vec<u8> {
    let mut g = G::new("ln")
        .input(vi("x", FLOAT, &[2, 4, 8]))
        .output(vi("y", FLOAT, &[2, 4, 8]))
        .init(common::onnx::floats("s", &[8], scale))
        .init(common::onnx::floats("b", &[8], &[0.0; 8]));
    let mut x = "x".to_string();
    for i in 1..=3 {
        let (s, b) = if identity && i > 1 {
            let (s, b) = (format!("s{i}"), format!("b{i}"));
            g = g
                .node(node("Identity", &format!("is{i}"), &["s"], &[&s]))
                .node(node("Identity", &format!("ib{i}"), &["b"], &[&b]));
            (s, b)
        } else {
            ("s".to_string(), "b".to_string())
        };
        let out = if i == 3 {
            "y".to_string()
        } else {
            format!("h{i}")
        };
        g = g.node(node(
            "LayerNormalization",
            &format!("ln{i}"),
            &[&x, &s, &b],
            &[&out],
        ));
        x = out;
    }
    g.model()
}

#[test]
fn identical_initializers_the_exporter_stored_once_count_per_layer() {
    // fresh LayerNorms (weight 1, bias 0): 3 x (8 + 8) parameters in PyTorch, one pair stored,
    // read directly (dynamo) or through Identity copies (TorchScript)
    for identity in [false, true] {
        let v = mem(&layer_norms(&[1.0; 8], identity));
        assert_eq!(
            v["totals"]["params"], 48,
            "identity {identity}: {}",
            v["totals"]
        );
        assert!(
            v["notes"]
                .to_string()
                .contains("the exporter stored identical tensors once"),
            "{}",
            v["notes"]
        );
    }
    // a trained (non-uniform) scale read by every layer is a shared parameter: counted once
    let scale: Vec<f32> = (0..8).map(|i| 1.0 + i as f32 / 10.0).collect();
    let v = mem(&layer_norms(&scale, false));
    assert_eq!(v["totals"]["params"], 8 + 3 * 8, "{}", v["totals"]);
}

#[test]
fn a_mask_added_to_attention_scores_is_not_a_parameter() {
    // scores = q @ k^T ([1,2,4,4]); + a folded mask/relative bias [1,2,4,4]; softmax
    let g = G::new("attn")
        .input(vi("q", FLOAT, &[1, 2, 4, 8]))
        .input(vi("kt", FLOAT, &[1, 2, 8, 4]))
        .output(vi("p", FLOAT, &[1, 2, 4, 4]))
        .init(common::onnx::floats("bias", &[1, 2, 4, 4], &[0.5; 32]))
        .node(node("MatMul", "qk", &["q", "kt"], &["s"]))
        .node(node("Add", "mask", &["s", "bias"], &["m"]))
        .node(with(
            node("Softmax", "softmax", &["m"], &["p"]),
            vec![attr_int("axis", -1)],
        ));
    let v = mem(&g.model());
    assert_eq!(v["totals"]["params"], 0, "{}", v["totals"]);
    assert_eq!(v["totals"]["constants"], 32, "{}", v["totals"]);
    assert!(v["notes"]
        .to_string()
        .contains("relative_position_bias_table"));
}

fn tagged(mut n: pb::NodeProto, rule: &str) -> pb::NodeProto {
    n.metadata_props = vec![pb::StringStringEntryProto {
        key: Some("pkg.onnxscript.rewriter.rule_name".into()),
        value: Some(rule.into()),
    }];
    n
}

#[test]
fn what_the_exporter_fused_or_removed_is_counted_from_its_metadata() {
    // Conv2d(3, 4, 3, bias=False) + BatchNorm2d(4), fused: 108 + 2 x 4 parameters, 2 x 4
    // buffers; then Linear(4*6*6, 16) whose zero bias was removed: 2304 + 16
    let g = G::new("fused")
        .input(vi("x", FLOAT, &[1, 3, 8, 8]))
        .output(vi("y", FLOAT, &[1, 16]))
        .init(weight("w", &[4, 3, 3, 3]))
        .init(weight("fc", &[144, 16]))
        .init(common::onnx::ints("shape", &[1, 144]))
        .node(tagged(
            node("Conv", "conv", &["x", "w"], &["c"]),
            "RemoveOptionalBiasFromConv, FuseBatchNormIntoConv, RemoveOptionalBiasFromConv",
        ))
        .node(node("Reshape", "flat", &["c", "shape"], &["f"]))
        .node(tagged(
            node("Gemm", "fc", &["f", "fc"], &["y"]),
            "RemoveOptionalBiasFromGemm",
        ));
    let v = mem(&g.model());
    assert_eq!(
        v["totals"]["params"],
        108 + 8 + 2304 + 16,
        "{}",
        v["totals"]
    );
    assert_eq!(v["totals"]["buffers"], 8, "{}", v["totals"]);
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("1 BatchNorm fused") && notes.contains("1 zero bias removed"),
        "{notes}"
    );
}

#[test]
fn a_fused_batchnorms_stored_bias_is_its_shift() {
    // the BatchNorm's shift was not zero: the fused bias is stored and counted; only its weight
    // (4) is missing, and its 2 x 4 running statistics
    let g = G::new("fused")
        .input(vi("x", FLOAT, &[1, 3, 8, 8]))
        .output(vi("y", FLOAT, &[1, 4, 6, 6]))
        .init(weight("w", &[4, 3, 3, 3]))
        .init(common::onnx::floats("b", &[4], &[0.1, 0.2, 0.3, 0.4]))
        .node(tagged(
            node("Conv", "conv", &["x", "w", "b"], &["y"]),
            "FuseBatchNormIntoConv",
        ));
    let v = mem(&g.model());
    assert_eq!(v["totals"]["params"], 108 + 4 + 4, "{}", v["totals"]);
    assert_eq!(v["totals"]["buffers"], 8, "{}", v["totals"]);
}

#[test]
fn attention_without_dropout_says_an_eval_export_may_have_removed_it() {
    let g = G::new("attn")
        .input(vi("s", FLOAT, &[2, 4, 8, 8]))
        .output(vi("p", FLOAT, &[2, 4, 8, 8]))
        .node(with(
            node("Softmax", "softmax", &["s"], &["p"]),
            vec![attr_int("axis", -1)],
        ));
    let (t, _) = train(&g.model());
    assert_eq!(t["lower_bound"], false, "{t}");
    assert!(
        t["notes"].to_string().contains("no Dropout in the graph"),
        "{}",
        t["notes"]
    );
}
