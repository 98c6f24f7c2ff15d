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
    // fit: the batches are upper bounds, and it says why
    assert!(fit.contains("≤ "), "{fit}");
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
