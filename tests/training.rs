//! `nnlint mem --train` and `nnlint fit`, against values worked out by hand from PyTorch's autograd
//! rules (../shared/reference/autograd-saved-tensors.md) and the optimizer/sharding arithmetic.
//! tests/../testdata/validate_training.py checks the same model against PyTorch itself.

mod common;

use common::{nnlint, run_json, stage, stderr, stdout};
use serde_json::Value;

fn train(model: &str, extra: &[&str]) -> Value {
    let mut args = vec!["mem", model, "--train", "--format", "json"];
    args.extend_from_slice(extra);
    run_json(&args)
}

const MINICNN: &str = "testdata/models/torch/minicnn.onnx";

/// The parts of the training peak, which add up to `total_bytes`.
const PEAK_PARTS: [&str; 7] = [
    "weights_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    "saved_activation_bytes",
    "transient_bytes",
    "parallel_bytes",
    "overhead_bytes",
];

#[test]
fn minicnn_saved_activations_by_hand() {
    // batch 1, fp32. X(c, h) = c*h*h*4 bytes; BatchNorm keeps its input, save_mean and save_invstd
    // (2*C*4) and references its running statistics (2*C*4); ReLU keeps its output, which the next
    // conv keeps as its input (one storage); max pooling keeps its input and int64 indices; the
    // residual add and global pooling keep nothing; the head keeps its [1,64] input.
    let x = |c: u64, h: u64| c * h * h * 4;
    let bn = |c: u64, h: u64| x(c, h) + 2 * c * 4 + 2 * c * 4;
    let expected = bn(16, 32) + x(16, 32) // stem: BN input, ReLU output (= block1 conv input)
        + bn(32, 16) + x(32, 16)          // block1
        + bn(32, 16) + x(32, 16)          // block2
        + x(32, 16)                       // down conv: the residual sum
        + bn(64, 8) + x(64, 8)            // down BN, ReLU output (= max-pool input)
        + 64 * 4 * 4 * 8                  // max-pool indices, int64
        + 64 * 4; // Gemm input
    let r = train(MINICNN, &[]);
    assert_eq!(r["training"]["saved_activation_bytes"], expected);
    let relu = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "/stem/stem.2/Relu")
        .unwrap();
    assert_eq!(relu["saved_bytes"], x(16, 32));
    // the same at batch 8: activations scale, BatchNorm statistics do not
    let r8 = train(MINICNN, &["--batch", "8"]);
    let stats: u64 = [16u64, 32, 32, 64].iter().map(|c| 4 * c * 4).sum();
    assert_eq!(
        r8["training"]["saved_activation_bytes"],
        8 * (expected - stats) + stats
    );
}

#[test]
fn model_states_by_hand() {
    let p: u64 = 73_856; // the 3x3 64->128 conv
    let model = "testdata/models/conv3x3_64_128.onnx";
    let t = |extra: &[&str]| train(model, extra)["training"].clone();
    let adam = t(&[]);
    assert_eq!(
        (
            adam["weights_bytes"].as_u64(),
            adam["gradient_bytes"].as_u64(),
            adam["optimizer_bytes"].as_u64()
        ),
        (Some(4 * p), Some(4 * p), Some(8 * p))
    );
    assert_eq!(t(&["--optimizer", "momentum"])["optimizer_bytes"], 4 * p);
    assert_eq!(t(&["--optimizer", "sgd"])["optimizer_bytes"], 0);
    // autocast keeps fp32 weights, gradients and moments
    let amp = t(&["--precision", "amp-bf16"]);
    assert_eq!(
        (
            amp["weights_bytes"].as_u64(),
            amp["optimizer_bytes"].as_u64()
        ),
        (Some(4 * p), Some(8 * p))
    );
    // ...and saves a bf16 copy of the conv weight (64*128*9 elements) and of the fp32 input
    assert_eq!(amp["autocast_weight_copy_bytes"], 64 * 128 * 9 * 2);
    assert_eq!(
        amp["saved_activation_bytes"],
        64 * 128 * 9 * 2 + 64 * 56 * 56 * 2
    );
    // pure bf16: everything in two bytes
    let bf16 = t(&["--precision", "bf16"]);
    assert_eq!(
        (
            bf16["weights_bytes"].as_u64(),
            bf16["gradient_bytes"].as_u64(),
            bf16["optimizer_bytes"].as_u64()
        ),
        (Some(2 * p), Some(2 * p), Some(4 * p))
    );
    // ZeRO over 4 GPUs with mixed precision: half weights, fp32 master + moments (12 B) sharded
    let z1 = t(&["--precision", "amp-bf16", "--gpus", "4", "--shard", "zero1"]);
    assert_eq!(
        (
            z1["weights_bytes"].as_u64(),
            z1["gradient_bytes"].as_u64(),
            z1["optimizer_bytes"].as_u64()
        ),
        (Some(2 * p), Some(2 * p), Some(12 * p / 4))
    );
    let z2 = t(&["--precision", "amp-bf16", "--gpus", "4", "--shard", "zero2"]);
    assert_eq!(
        (
            z2["gradient_bytes"].as_u64(),
            z2["optimizer_bytes"].as_u64()
        ),
        (Some(2 * p / 4), Some(12 * p / 4))
    );
    let z3 = t(&["--precision", "amp-bf16", "--gpus", "4", "--shard", "zero3"]);
    assert_eq!(z3["weights_bytes"], 2 * p / 4);
    // DDP: a full replica plus gradient buckets
    let ddp = t(&["--gpus", "4", "--shard", "ddp"]);
    assert_eq!(
        (
            ddp["weights_bytes"].as_u64(),
            ddp["parallel_bytes"].as_u64()
        ),
        (Some(4 * p), Some(4 * p))
    );
    assert_eq!(
        ddp["communication_bytes"],
        2 * 4 * p * 3 / 4,
        "ring all-reduce sends 2(N-1)/N of the gradients"
    );
}

#[test]
fn the_peak_adds_up_and_overhead_is_its_own_line() {
    let r = train(MINICNN, &["--batch", "32"]);
    let t = &r["training"];
    let p = &t["peak"];
    let parts: u64 = PEAK_PARTS.iter().map(|k| p[k].as_u64().unwrap()).sum();
    assert_eq!(parts, t["total_bytes"].as_u64().unwrap());
    // default overhead: 512 MiB context + 256 MiB workspace + 5% of the allocated peak
    let allocated = t["total_bytes"].as_u64().unwrap() - t["overhead_bytes"].as_u64().unwrap();
    assert_eq!(
        t["overhead_bytes"],
        (512u64 << 20) + (256 << 20) + (allocated as f64 * 0.05) as u64
    );
    let custom = train(
        MINICNN,
        &[
            "--batch",
            "32",
            "--overhead-context",
            "0",
            "--overhead-workspace",
            "0",
            "--fragmentation",
            "0",
        ],
    );
    assert_eq!(custom["training"]["overhead_bytes"], 0);
}

#[test]
fn accumulation_and_effective_batch() {
    let r = train(
        MINICNN,
        &[
            "--batch",
            "16",
            "--accumulate",
            "4",
            "--gpus",
            "2",
            "--shard",
            "ddp",
        ],
    );
    assert_eq!(r["training"]["micro_batch"], 16);
    assert_eq!(r["training"]["effective_batch"], 16 * 4 * 2);
    // the micro-batch sets activation memory: the same saved bytes as batch 16 alone
    let alone = train(MINICNN, &["--batch", "16"]);
    assert_eq!(
        r["training"]["saved_activation_bytes"],
        alone["training"]["saved_activation_bytes"]
    );
    // accumulated gradients stay allocated across micro-steps
    assert_eq!(
        r["training"]["peak"]["gradient_bytes"],
        r["training"]["gradient_bytes"]
    );
}

#[test]
fn checkpointing_trades_memory_for_recompute() {
    let staged = stage("models/torch/resnet18.onnx");
    let path = staged.path.to_str().unwrap();
    let full = train(path, &["--batch", "16"]);
    let sqrt = train(path, &["--batch", "16", "--checkpoint", "sqrt"]);
    let every4 = train(path, &["--batch", "16", "--checkpoint", "every:4"]);
    let f = full["training"]["saved_activation_bytes"].as_u64().unwrap();
    for c in [&sqrt, &every4] {
        let t = &c["training"];
        assert!(t["saved_activation_bytes"].as_u64().unwrap() < f, "{t}");
        assert_eq!(t["saved_activation_bytes_full"], f);
        assert!(t["recompute_macs"].as_u64().unwrap() > 0);
        // recomputing at most one forward: at most a third of a step (forward + 2x backward)
        let frac = t["recompute_fraction"].as_f64().unwrap();
        assert!(frac > 0.0 && frac <= 1.0 / 3.0, "{frac}");
    }
}

#[test]
fn bad_training_options_are_usage_errors() {
    let out = nnlint(&["mem", MINICNN, "--train", "--checkpoint", "every:0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = nnlint(&["mem", MINICNN, "--train", "--gpus", "0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--gpus"), "{}", stderr(&out));
}

#[test]
fn fit_ranks_plans_and_finds_the_largest_batch() {
    let staged = stage("models/torch/resnet18.onnx");
    let path = staged.path.to_str().unwrap();
    let r = run_json(&[
        "fit", path, "--gpu", "T4", "--format", "json", "--gpus", "2",
    ]);
    assert_eq!(r["gpu"]["name"], "T4");
    let plans = r["plans"].as_array().unwrap();
    assert!(plans.len() >= 5);
    assert_eq!(plans[0]["rank"], 1);
    for p in plans {
        assert_eq!(p["fits"], true, "{p}");
        let max = p["max_micro_batch"].as_u64().unwrap();
        // the largest batch fits and the next one does not
        let precision = p["precision"].as_str().unwrap();
        let mut args: Vec<String> = vec![
            "mem".into(),
            path.into(),
            "--train".into(),
            "--format".into(),
            "json".into(),
        ];
        args.extend([
            "--precision".into(),
            precision.into(),
            "--checkpoint".into(),
            p["checkpoint"].as_str().unwrap().into(),
        ]);
        args.extend([
            "--gpus".into(),
            p["gpus"].to_string(),
            "--shard".into(),
            p["shard"].as_str().unwrap().into(),
        ]);
        let at = |b: u64| {
            let mut a = args.clone();
            a.extend(["--batch".into(), b.to_string()]);
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            run_json(&a)["training"]["total_bytes"].as_u64().unwrap()
        };
        let t4 = 15_360u64 << 20;
        assert!(at(max) <= t4, "{} at {max}", p["name"]);
        assert!(at(max + 1) > t4, "{} at {}", p["name"], max + 1);
    }
}

#[test]
fn fit_says_what_would_fit_when_nothing_does() {
    let staged = stage("models/torch/vgg16.onnx");
    let r = run_json(&[
        "fit",
        staged.path.to_str().unwrap(),
        "--gpu",
        "1536MiB",
        "--format",
        "json",
    ]);
    assert!(r["plans"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["fits"] == false));
    let s: Vec<&str> = r["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(s.iter().any(|s| s.contains("bigger card")), "{s:?}");
    assert!(s.iter().any(|s| s.contains("more GPUs")), "{s:?}");
    assert!(
        s.iter().any(|s| s.contains("Gemm")),
        "the FC head is the layer to lighten: {s:?}"
    );
}

#[test]
fn fit_for_serving() {
    let r = run_json(&[
        "fit",
        MINICNN,
        "--gpu",
        "16GiB",
        "--inference",
        "--format",
        "json",
    ]);
    assert_eq!(r["mode"], "inference");
    assert!(r["plans"][0]["max_micro_batch"].as_u64().unwrap() > 1000);
}

#[test]
fn snapshot_training_table() {
    let out = nnlint(&[
        "mem",
        MINICNN,
        "--train",
        "--batch",
        "64",
        "--precision",
        "amp-bf16",
        "--top",
        "4",
        "--sort",
        "activations",
    ]);
    insta::assert_snapshot!("minicnn_train_table", stdout(&out));
    let out = nnlint(&[
        "fit",
        MINICNN,
        "--gpu",
        "T4",
        "--gpus",
        "4",
        "--effective-batch",
        "1024",
    ]);
    insta::assert_snapshot!("minicnn_fit_table", stdout(&out));
}

#[test]
fn training_json_follows_the_documented_schema() {
    for extra in [
        &[][..],
        &[
            "--precision",
            "amp-fp16",
            "--checkpoint",
            "sqrt",
            "--gpus",
            "2",
            "--shard",
            "zero3",
        ][..],
    ] {
        let r = train(MINICNN, extra);
        let errors = common::schema_errors("mem.schema.json", &r);
        assert!(errors.is_empty(), "{}", errors.join("\n"));
    }
}

#[test]
fn training_needs_every_input_dimension_bound() {
    let model = "testdata/models/torch/tiny_transformer_dynamo.onnx";
    for args in [
        vec!["mem", model, "--train"],
        vec!["fit", model, "--gpu", "T4"],
    ] {
        let out = nnlint(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(stderr(&out).contains("--dim seq=V"), "{}", stderr(&out));
    }
    let r = train(model, &["--dim", "seq=128", "--batch", "4"]);
    // the token embedding output [4,128,64] float32 is saved (by the first LayerNorm / Linear)
    assert!(r["training"]["saved_activation_bytes"].as_u64().unwrap() >= 4 * 128 * 64 * 4);
}

#[test]
fn weights_in_constant_nodes_are_trained() {
    // Paddle2ONNX and some tf2onnx exports hold weights in Constant nodes, not initializers: they
    // are parameters all the same (weights, gradients and Adam's two moments, 4 bytes each).
    use common::onnx::{constant, floats, node, vi, G};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("constant_weights.onnx");
    let bytes = G::new("g")
        .input(vi("x", 1, &[2, 64]))
        .output(vi("y", 1, &[2, 16]))
        .node(constant("w", floats("w", &[64, 32], &[0.5; 64 * 32])))
        .node(constant("b", floats("b", &[32], &[0.0; 32])))
        .node(constant("w2", floats("w2", &[32, 16], &[0.5; 32 * 16])))
        .node(node("MatMul", "mm", &["x", "w"], &["h"]))
        .node(node("Add", "add", &["h", "b"], &["a"]))
        .node(node("MatMul", "mm2", &["a", "w2"], &["y"]))
        .model();
    std::fs::write(&model, bytes).unwrap();
    let r = train(&model.display().to_string(), &[]);
    let p: u64 = 64 * 32 + 32 + 32 * 16;
    let t = &r["training"];
    assert_eq!(t["weights_bytes"].as_u64(), Some(4 * p), "{t:#}");
    assert_eq!(t["gradient_bytes"].as_u64(), Some(4 * p), "{t:#}");
    assert_eq!(t["optimizer_bytes"].as_u64(), Some(8 * p), "{t:#}");
    assert_eq!(r["totals"]["params"].as_u64(), Some(p));
    // the second MatMul keeps its [2,32] input for w2's gradient; the graph input x is not an
    // activation and the bias add keeps nothing
    assert_eq!(
        t["saved_activation_bytes"].as_u64(),
        Some(2 * 32 * 4),
        "{t:#}"
    );
    assert_eq!(t["lower_bound"], false);
}

/// `mem --train` at a plan's settings: its peak per GPU.
fn plan_peak(path: &str, p: &Value, micro: u64, steps: u64) -> u64 {
    let args: Vec<String> = vec![
        "mem".into(),
        path.into(),
        "--train".into(),
        "--format".into(),
        "json".into(),
        "--precision".into(),
        p["precision"].as_str().unwrap().into(),
        "--checkpoint".into(),
        p["checkpoint"].as_str().unwrap().into(),
        "--gpus".into(),
        p["gpus"].to_string(),
        "--shard".into(),
        p["shard"].as_str().unwrap().into(),
        "--batch".into(),
        micro.to_string(),
        "--accumulate".into(),
        steps.to_string(),
    ];
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    run_json(&a)["training"]["total_bytes"].as_u64().unwrap()
}

#[test]
fn fit_plans_reach_the_effective_batch_exactly_and_fit_there() {
    let staged = stage("models/torch/resnet18.onnx");
    let path = staged.path.to_str().unwrap();
    let t4 = 15_360u64 << 20;
    for (effective, gpus) in [(256u64, 1u32), (250, 2), (97, 1)] {
        let r = run_json(&[
            "fit",
            path,
            "--gpu",
            "T4",
            "--format",
            "json",
            "--effective-batch",
            &effective.to_string(),
            "--gpus",
            &gpus.to_string(),
        ]);
        for p in r["plans"].as_array().unwrap() {
            assert_eq!(p["fits"], true, "{p}");
            let micro = p["micro_batch"].as_u64().unwrap();
            let steps = p["accumulate"].as_u64().unwrap();
            let g = p["gpus"].as_u64().unwrap();
            assert_eq!(micro * steps * g, effective, "{p}");
            assert_eq!(p["effective_batch"].as_u64(), Some(effective), "{p}");
            // the estimate at the plan's own settings (accumulation included) is the one quoted,
            // and it fits the card
            let peak = plan_peak(path, p, micro, steps);
            assert_eq!(p["peak_bytes"].as_u64(), Some(peak), "{p}");
            assert!(peak <= t4, "{}: {peak} > {t4}", p["name"]);
        }
    }
    // 7 samples on 4 GPUs cannot be even: the plans say so
    let r = run_json(&[
        "fit",
        path,
        "--gpu",
        "T4",
        "--format",
        "json",
        "--effective-batch",
        "7",
        "--gpus",
        "4",
    ]);
    let notes = r["notes"].to_string();
    assert!(notes.contains("not a multiple of 4 GPUs"), "{notes}");
}

#[test]
fn counts_and_sizes_are_validated_where_they_enter() {
    for (args, want) in [
        (vec!["mem", MINICNN, "--batch", "0"], "at least 1"),
        (vec!["mem", MINICNN, "--batch", "-1"], "negative"),
        (
            vec!["mem", MINICNN, "--batch", "1e12"],
            "write 1000000000000",
        ),
        (vec!["mem", MINICNN, "--top", "-1"], "negative"),
        (
            vec!["mem", MINICNN, "--train", "--accumulate", "0"],
            "at least 1",
        ),
        (
            vec!["fit", MINICNN, "--gpu", "16GiB", "--effective-batch", "0"],
            "at least 1",
        ),
        (vec!["fit", MINICNN, "--gpu", "16"], "no unit"),
        (vec!["fit", MINICNN, "--gpu", "0GiB"], "more than 0 bytes"),
        (
            vec!["fit", MINICNN, "--gpu", "A100"],
            "'A100-40GB' or 'A100-80GB'",
        ),
        // tensor parallelism is fit's way to serve a checkpoint, not a training plan
        (
            vec![
                "mem",
                MINICNN,
                "--train",
                "--gpus",
                "2",
                "--shard",
                "tensor-parallel",
            ],
            "possible values: none, ddp, zero1, zero2, zero3, fsdp",
        ),
        (vec!["lint", MINICNN, "--budget", "1"], "no unit"),
        // options a command would ignore are refused
        (vec!["mem", MINICNN, "--precision", "bf16"], "add --train"),
        (
            vec!["fit", MINICNN, "--gpu", "T4", "--precision", "fp32"],
            "fit chooses",
        ),
        (
            vec!["fit", MINICNN, "--gpu", "T4", "--accumulate", "4"],
            "fit chooses",
        ),
        (
            vec!["fit", MINICNN, "--gpu", "T4", "--shard", "ddp"],
            "fit chooses",
        ),
        (
            vec!["fit", MINICNN, "--gpu", "T4", "--checkpoint", "sqrt"],
            "fit chooses",
        ),
    ] {
        let out = nnlint(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("-- -1"), "{args:?}: clap's tip: {err}");
    }
}

#[test]
fn sizes_that_overflow_are_errors_naming_the_node() {
    // 10^14 x 16 x 32 x 32 outputs fit in 64 bits, their MACs (x 27) do not
    let out = nnlint(&["mem", MINICNN, "--batch", "100000000000000"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("/stem/stem.0/Conv") && err.contains("overflow 64-bit arithmetic"),
        "{err}"
    );
    assert!(
        stdout(&out).is_empty(),
        "no partial table: {}",
        stdout(&out)
    );
    let out = nnlint(&["lint", MINICNN, "--no-config", "--batch", "100000000000000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("overflow 64-bit arithmetic"));
    // the host-memory product of the input pipeline
    let out = nnlint(&[
        "mem",
        MINICNN,
        "--train",
        "--batch",
        "1000000",
        "--workers",
        "4000000000",
        "--prefetch",
        "4000000000",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("host memory"), "{}", stderr(&out));
    // a large but representable batch is still answered
    // (activations scale with the batch, BatchNorm statistics do not: see the by-hand test)
    let one = train(MINICNN, &[])["training"]["saved_activation_bytes"]
        .as_u64()
        .unwrap();
    let stats: u64 = [16u64, 32, 32, 64].iter().map(|c| 4 * c * 4).sum();
    let big = train(MINICNN, &["--batch", "1000000000"]);
    assert_eq!(
        big["training"]["saved_activation_bytes"].as_u64(),
        Some(1_000_000_000 * (one - stats) + stats)
    );
}

#[test]
fn every_format_carries_the_training_step() {
    let json = train(MINICNN, &["--batch", "4"]);
    let total = json["training"]["total_bytes"].as_u64().unwrap();
    let out = nnlint(&["mem", MINICNN, "--train", "--batch", "4", "--format", "csv"]);
    assert!(out.status.success());
    let csv = stdout(&out);
    let (layers, step) = csv.split_once("\n\n").expect("two sections");
    assert!(layers
        .lines()
        .next()
        .unwrap()
        .ends_with(",saved_bytes,gradient_bytes,folded,depth"));
    // per-layer saved bytes add up to the step's saved activations (before the peak's release)
    let saved: u64 = layers
        .lines()
        .skip(1)
        .map(|l| l.rsplit(',').nth(3).unwrap().parse::<u64>().unwrap_or(0))
        .sum();
    assert_eq!(
        saved,
        json["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["saved_bytes"].as_u64().unwrap_or(0))
            .sum::<u64>()
    );
    let item = |k: &str| -> u64 {
        step.lines()
            .find_map(|l| l.strip_prefix(&format!("{k},")))
            .unwrap_or_else(|| panic!("{k} in {step}"))
            .parse()
            .unwrap()
    };
    let parts: u64 = PEAK_PARTS.iter().map(|k| item(k)).sum();
    assert_eq!(parts, total);
    assert_eq!(item("total_bytes"), total);
    let out = nnlint(&[
        "mem", MINICNN, "--train", "--batch", "4", "--format", "markdown",
    ]);
    let md = stdout(&out);
    assert!(
        md.contains("| training step: adam, fp32, micro-batch 4"),
        "{md}"
    );
    assert!(md.contains("| peak per GPU |"), "{md}");
}

/// The dynamo exporter's GPT-2 attention (sdpa) on x `[1,4,8]`, 2 heads of 4: the packed qkv
/// projection is split with SplitToSequence/SequenceAt, the softmax is followed by its NaN guard
/// Where(IsNaN(p), 0, p), and the output passes an identity Reshape before the head transpose.
/// `attn_dropout` puts the exporter's inference-mode `Dropout(p, 0.1)` of SDPA's dropout between
/// the guard and the product with v (what `optimize=False` keeps); `out_dropout` a training-mode
/// `Dropout(y, 0.1, true)` after the out-projection (a model exported with its dropout active).
fn dynamo_sdpa_model(attn_dropout: bool, out_dropout: bool) -> Vec<u8> {
    use common::onnx::{attr_int, floats, ints, node, vi, weight, with, G};
    let scalar = |name: &str, v: i64| {
        let mut t = ints(name, &[v]);
        t.dims = vec![];
        t
    };
    let mut yes = scalar("yes", 1);
    yes.data_type = Some(9); // bool
    yes.raw_data = Some(vec![1u8].into());
    let mut g = G::new("g")
        .input(vi("x", 1, &[1, 4, 8]))
        .output(vi(if out_dropout { "yd" } else { "y" }, 1, &[4, 8]))
        .init(weight("w_qkv", &[8, 24]))
        .init(weight("w_o", &[8, 8]))
        .init(ints("s2d", &[4, 8]))
        .init(ints("s3d", &[1, 4, 24]))
        .init(ints("heads", &[1, 4, 2, 4]))
        .init(ints("heads_t", &[1, 2, 4, 4]))
        .init(ints("split", &[8, 8, 8]))
        .init(floats("scale", &[], &[std::f32::consts::FRAC_1_SQRT_2]))
        .init(floats("zero", &[], &[0.0]))
        .init(floats("ratio", &[], &[0.1]))
        .init(yes)
        .init(scalar("i0", 0))
        .init(scalar("i1", 1))
        .init(scalar("i2", 2))
        .node(node("Reshape", "in2d", &["x", "s2d"], &["x2"]))
        .node(node("Gemm", "qkv_proj", &["x2", "w_qkv"], &["qkv2"]))
        .node(node("Reshape", "qkv3", &["qkv2", "s3d"], &["qkv"]))
        .node(with(
            node("SplitToSequence", "split", &["qkv", "split"], &["seq"]),
            vec![attr_int("axis", 2)],
        ));
    for (i, t) in ["q", "k", "v"].iter().enumerate() {
        let idx = format!("i{i}");
        let (raw, h, ht) = (format!("{t}0"), format!("{t}h"), format!("{t}t"));
        g = g
            .value_info(vi(&raw, 1, &[1, 4, 8]))
            .node(node("SequenceAt", &raw, &["seq", &idx], &[&raw]))
            .node(node("Reshape", &h, &[&raw, "heads"], &[&h]))
            .node(with(
                node("Transpose", &ht, &[&h], &[&ht]),
                vec![common::onnx::ints_attr("perm", &[0, 2, 1, 3])],
            ));
    }
    g = g
        .node(with(
            node("Transpose", "kT", &["kt"], &["kT"]),
            vec![common::onnx::ints_attr("perm", &[0, 1, 3, 2])],
        ))
        .node(node("Mul", "qs", &["qt", "scale"], &["qs"]))
        .node(node("Mul", "ks", &["kT", "scale"], &["ks"]))
        .node(node("MatMul", "scores", &["qs", "ks"], &["scores"]))
        .node(node("Softmax", "softmax", &["scores"], &["p"]))
        .node(node("IsNaN", "isnan", &["p"], &["nan"]))
        .node(node("Where", "guard", &["nan", "zero", "p"], &["pg"]));
    let probs = if attn_dropout {
        g = g.node(node("Dropout", "attn_drop", &["pg", "ratio"], &["pd"]));
        "pd"
    } else {
        "pg"
    };
    g = g
        .node(node("MatMul", "pv", &[probs, "vt"], &["o"]))
        .node(node("Reshape", "o_same", &["o", "heads_t"], &["o2"]))
        .node(with(
            node("Transpose", "o_t", &["o2"], &["o3"]),
            vec![common::onnx::ints_attr("perm", &[0, 2, 1, 3])],
        ))
        .node(node("Reshape", "o2d", &["o3", "s2d"], &["o4"]))
        .node(node("Gemm", "out_proj", &["o4", "w_o"], &["y"]));
    if out_dropout {
        g = g.node(node("Dropout", "drop", &["y", "ratio", "yes"], &["yd"]));
    }
    g.model()
}

fn dynamo_sdpa_saved(attn_dropout: bool, out_dropout: bool, extra: &[&str]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("dynamo_sdpa.onnx");
    std::fs::write(&model, dynamo_sdpa_model(attn_dropout, out_dropout)).unwrap();
    let r = train(&model.display().to_string(), extra);
    r["training"]["saved_activation_bytes"].as_u64().unwrap()
}

#[test]
fn dynamo_sdpa_through_a_tensor_sequence_and_nan_guard() {
    // PyTorch runs one SDPA: it saves q, k, v (views of the packed [1,4,24] qkv: 384 B), the
    // output [1,2,4,4] (128 B) and an fp32 logsumexp per query row (1·2·4·4 = 32 B); the
    // out-projection's input is a view of the output (the kernel writes [B,L,h,D]), and the first
    // projection's input is the model input. 384 + 128 + 32 = 544 B, on either device.
    assert_eq!(dynamo_sdpa_saved(false, false, &[]), 544);
    assert_eq!(dynamo_sdpa_saved(false, false, &["--device", "cpu"]), 544);
}

#[test]
fn sdpa_with_dropout_runs_the_math_path_on_cpu() {
    // With dropout, CPU SDPA falls back to its math path: q·s and k·s (new, 128 B each), the
    // probabilities, the dropout noise and the dropped probabilities (1·2·4·4 fp32: 128 B each),
    // and a contiguous copy of the strided v (128 B); its output is [B,h,L,D], so the
    // out-projection saves a copy of the head transpose (128 B). 7 × 128 = 896 B.
    let cpu = ["--device", "cpu"];
    assert_eq!(dynamo_sdpa_saved(true, false, &cpu), 896);
    // the dynamo exporter's optimizer deletes SDPA's (inference-mode) Dropout: a graph that runs
    // dropout in training elsewhere is taken to have it in attention too; the output dropout
    // keeps its fp32 noise (4·8·4 = 128 B)
    assert_eq!(dynamo_sdpa_saved(false, true, &cpu), 896 + 128);
    // the fused CUDA kernels handle dropout: still q, k, v, output and logsumexp (and the output
    // dropout's bool mask, 32 B)
    assert_eq!(dynamo_sdpa_saved(true, false, &[]), 544);
    assert_eq!(dynamo_sdpa_saved(false, true, &[]), 544 + 32);
    // under autocast the math path still runs in fp32, v included (a new fp32 copy: 6 × 128 B);
    // around it, bf16: the qkv projection's copy of the model input and the out-projection's
    // input (4·8·2 = 64 B each) and the out-projection weight's copy (8·8·2 = 128 B)
    let amp = ["--device", "cpu", "--precision", "amp-bf16"];
    assert_eq!(
        dynamo_sdpa_saved(true, false, &amp),
        6 * 128 + 64 + 64 + 128
    );
}

#[test]
fn full_size_gpt2_saved_bytes_equal_pytorch() {
    // GPT-2 small (124M: 12 layers, 768 wide, 12 heads, vocab 50257), with its default dropout 0.1
    // and without dropout, exported in train mode by the dynamo exporter with eager and sdpa
    // attention; graph-only fixtures and the bytes PyTorch saves at batch 8, seq 128 on CPU
    // (tools/training/gpt2_saved.py).
    let mut checked = 0;
    for file in ["gpt2_124m.json", "gpt2_124m_nodropout.json"] {
        let path = common::testdata().join("expected/training").join(file);
        let exp: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let (batch, seq) = (exp["batch"].as_u64().unwrap(), exp["seq"].as_u64().unwrap());
        let dropout = exp["config"]["dropout"].as_f64().unwrap();
        for (attn, runs) in exp["saved_activation_bytes"].as_object().unwrap() {
            let onnx = common::testdata()
                .join("..")
                .join(runs["onnx"].as_str().unwrap());
            for precision in ["fp32", "amp-bf16"] {
                let want = runs[precision]["pytorch"].as_u64().unwrap();
                let (b, s) = (batch.to_string(), format!("seq={seq}"));
                let args = [
                    "--batch",
                    &b,
                    "--dim",
                    &s,
                    "--device",
                    "cpu",
                    "--precision",
                    precision,
                    "-q",
                ];
                let r = train(&onnx.display().to_string(), &args);
                let got = r["training"]["saved_activation_bytes"].as_u64().unwrap();
                let what = format!("{file} {attn} {precision}: nnlint {got}, PyTorch {want}");
                if attn == "eager" && precision == "amp-bf16" && dropout > 0.0 {
                    // GPT-2 casts the probabilities to v's dtype before its attention dropout; the
                    // fp32 export drops that no-op cast, so the noise and the dropped
                    // probabilities are taken as fp32 (+2 bytes per L×L element and layer)
                    assert_eq!(Some(got), runs[precision]["nnlint"].as_u64(), "{what}");
                    assert!(
                        got > want && (got - want) as f64 / (want as f64) < 0.04,
                        "{what}"
                    );
                } else {
                    assert_eq!(got, want, "{what}");
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 8);
}

#[test]
fn autocast_noise_takes_the_dtype_of_what_it_scales() {
    // torchvision's StochasticDepth as the legacy exporter writes it: noise drawn by
    // RandomUniformLike(ConstantOfShape([N,1])) < p (N read off the input), cast to float, / p, times the branch. PyTorch
    // makes the noise in the branch's dtype (`torch.empty(..., dtype=x.dtype).bernoulli_()`), so
    // under bf16 autocast the product stays bf16: the Linear saves its bf16 copy of the input x
    // (2·4·2 = 16 B), the Mul the noise (2·1·2 = 4 B), the Sigmoid its bf16 output (16 B).
    // (Typed as the export's fp32, the noise made the rest of the branch fp32: 8 + 32 B.)
    use common::onnx::{attr_int, floats, ints, node, vi, weight, with, G};
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("stochastic_depth.onnx");
    let bytes = G::new("g")
        .input(vi("x", 1, &[2, 4]))
        .output(vi("s", 1, &[2, 4]))
        .init(weight("w", &[4, 4]))
        .init(ints("one", &[1]))
        .init(floats("p", &[], &[0.9]))
        .node(node("Gemm", "fc", &["x", "w"], &["y"]))
        .node(with(
            node("Shape", "n", &["x"], &["n"]),
            vec![attr_int("start", 0), attr_int("end", 1)],
        ))
        .node(with(
            node("Concat", "shape", &["n", "one"], &["shape"]),
            vec![attr_int("axis", 0)],
        ))
        .node(node("ConstantOfShape", "zeros", &["shape"], &["z0"]))
        .node(with(
            node("RandomUniformLike", "draw", &["z0"], &["u"]),
            vec![attr_int("dtype", 1)],
        ))
        .node(node("Less", "keep", &["u", "p"], &["k"]))
        .node(with(
            node("Cast", "kf", &["k"], &["kf"]),
            vec![attr_int("to", 1)],
        ))
        .node(node("Div", "scale", &["kf", "p"], &["noise"]))
        .node(node("Mul", "drop_path", &["y", "noise"], &["z"]))
        .node(node("Sigmoid", "act", &["z"], &["s"]))
        .model();
    std::fs::write(&model, bytes).unwrap();
    let m = model.display().to_string();
    let saved = |p: &str| {
        train(&m, &["--device", "cpu", "--precision", p])["training"]["saved_activation_bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(saved("amp-bf16"), 16 + 4 + 16);
    // fp32: the noise (8 B) and the output (32 B); the Linear's input is the model input
    assert_eq!(saved("fp32"), 8 + 32);
}

/// `fit -` reads the model from standard input once, as `mem -` does, and answers as for the file.
#[test]
fn fit_reads_standard_input_like_mem() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let path = common::fixture("models/torch/minicnn.onnx");
    let bytes = std::fs::read(&path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_nnlint"))
        .args(["fit", "-", "--gpu", "T4", "--format", "json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let piped: Value = serde_json::from_slice(&out.stdout).unwrap();
    let file = run_json(&["fit", &path, "--gpu", "T4", "--format", "json"]);
    assert!(file["plans"].as_array().is_some_and(|p| !p.is_empty()));
    assert_eq!(piped["plans"], file["plans"]);
}

/// Language-model options on an ONNX graph: one line that names the option, and the `--dim` hint
/// only where it helps (`--seq`).
#[test]
fn fit_refuses_language_model_options_on_a_graph_in_one_line() {
    let path = common::fixture("models/torch/minicnn.onnx");
    for (flag, value, hint) in [
        ("--lora", "8", false),
        ("--seq", "64", true),
        ("--images", "1", false),
    ] {
        let out = nnlint(&["fit", &path, "--gpu", "T4", flag, value]);
        assert_eq!(out.status.code(), Some(2));
        let err = stderr(&out);
        assert!(
            err.contains(flag) && err.contains("language-model checkpoints"),
            "{err}"
        );
        assert_eq!(err.contains("--dim"), hint, "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

/// Issue 22: `fit`'s JSON is one versioned envelope for both kinds of model
/// (docs/fit.schema.json): the plans are `name` and `fits` in both, with each planner's own
/// fields beside them.
#[test]
fn fit_json_has_one_documented_envelope() {
    for (args, kind) in [
        (vec![MINICNN, "--gpu", "T4"], "graph"),
        (vec![MINICNN, "--gpu", "T4", "--inference"], "graph"),
        (vec![MINICNN, "--gpu", "1GiB"], "graph"),
        (
            vec!["testdata/llm/llama", "--gpu", "T4", "--seq", "64"],
            "language_model",
        ),
        (
            vec![
                "testdata/llm/granitemoehybrid",
                "--gpu",
                "24GB",
                "--seq",
                "64",
                "--inference",
            ],
            "language_model",
        ),
    ] {
        let mut a = vec!["fit", "--format", "json"];
        a.extend(&args);
        let v = common::run_json(&a);
        let errors = common::schema_errors("fit.schema.json", &v);
        assert!(errors.is_empty(), "{args:?}: {errors:#?}");
        assert_eq!(v["kind"], kind);
        for p in v["plans"].as_array().unwrap() {
            assert!(p["name"].is_string() && p["fits"].is_boolean(), "{p}");
        }
    }
}

/// Ops whose backward keeps tensors although their registry lines once left `saves` to its
/// default (nothing), counted by hand from PyTorch's derivatives.yaml: acosh/asinh/atanh keep
/// their input; gather keeps its index; prod, the L2 norm and logsumexp keep input and result;
/// sum of squares and of absolute values keep the input.
#[test]
fn ops_that_keep_tensors_say_so() {
    use common::onnx::{attr_int, constant, floats, ints, node, raw_tensor, vi, with, G};
    let dir = tempfile::tempdir().unwrap();
    // x [4, 8] -> a trainable scale (so that everything after it needs a gradient) -> op
    let case = |op: &str, extra: &[&str], build: &dyn Fn(G) -> G, out: &[i64]| {
        let model = dir.path().join(format!("{op}.onnx"));
        let g = G::new("g")
            .input(vi("x", 1, &[4, 8]))
            .output(vi("y", 1, out))
            .node(constant("w", floats("w", &[4, 8], &[0.5; 32])))
            .node(node("Mul", "scale", &["x", "w"], &["h"]));
        std::fs::write(&model, build(g).model()).unwrap();
        let r = train(&model.display().to_string(), extra);
        r["training"]["saved_activation_bytes"].as_u64().unwrap()
    };
    // Mul keeps x for w's gradient? x is the graph input, not an activation: 0 B from it
    for op in ["Acosh", "Asinh", "Atanh"] {
        let got = case(
            op,
            &[],
            &|g| g.node(node(op, "op", &["h"], &["y"])),
            &[4, 8],
        );
        assert_eq!(got, 4 * 8 * 4, "{op} keeps its [4, 8] fp32 input");
    }
    let got = case(
        "GatherElements",
        &[],
        &|g| {
            let idx: Vec<u8> = [0i64, 1, 0, 1, 0, 1, 0, 1]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            let mut t = raw_tensor("i", &[4, 2], idx);
            t.data_type = Some(common::onnx::INT64);
            g.node(constant("i", t)).node(with(
                node("GatherElements", "op", &["h", "i"], &["y"]),
                vec![attr_int("axis", 1)],
            ))
        },
        &[4, 2],
    );
    // a constant index is not an activation; the gather's own output is not kept
    assert_eq!(got, 0);
    for (op, want) in [
        ("ReduceProd", 4 * 8 * 4 + 4 * 4),
        ("ReduceL2", 4 * 8 * 4 + 4 * 4),
        ("ReduceLogSumExp", 4 * 8 * 4 + 4 * 4),
        ("ReduceSumSquare", 4 * 8 * 4),
        ("ReduceL1", 4 * 8 * 4),
    ] {
        let got = case(
            op,
            &[],
            &|g| {
                g.node(constant("axes", ints("axes", &[1]))).node(with(
                    node(op, "op", &["h", "axes"], &["y"]),
                    vec![attr_int("keepdims", 0)],
                ))
            },
            &[4],
        );
        assert_eq!(got, want, "{op}");
    }
}

/// LRN and MeanVarianceNormalization keep what PyTorch's compositions keep, measured with
/// saved_tensors_hooks (torch 2.15) on a [2, 16, 8, 8] fp32 input: `F.local_response_norm(x,
/// 3)` keeps x, two tensors of its size and the squares padded to 18 channels (33,792 B with x);
/// `(x - mean) / sqrt(var + eps)` over axes 0, 2, 3 keeps the centred x and one std per channel
/// (8,256 B). Both counted 0 B before.
#[test]
fn lrn_and_mvn_keep_what_pytorch_keeps() {
    use common::onnx::{attr_int, constant, floats, node, vi, with, G};
    let dir = tempfile::tempdir().unwrap();
    let case = |op: &str, attrs: Vec<_>| -> u64 {
        let model = dir.path().join(format!("{op}.onnx"));
        // x -> a trainable scale (so that the op's input is an activation) -> op
        let g = G::new("g")
            .input(vi("x", 1, &[2, 16, 8, 8]))
            .output(vi("y", 1, &[2, 16, 8, 8]))
            .node(constant("w", floats("w", &[1, 16, 8, 8], &[0.5; 1024])))
            .node(node("Mul", "scale", &["x", "w"], &["h"]))
            .node(with(node(op, "op", &["h"], &["y"]), attrs));
        std::fs::write(&model, g.model()).unwrap();
        let r = train(&model.display().to_string(), &["--device", "cpu"]);
        r["training"]["saved_activation_bytes"].as_u64().unwrap()
    };
    assert_eq!(case("LRN", vec![attr_int("size", 3)]), 33_792);
    assert_eq!(case("MeanVarianceNormalization", vec![]), 8_256);
}

/// A graph that ends before its loss gets the assumed cross-entropy whatever the batch: an
/// `[N, 1]` output at batch 1 has one element and is still not a loss; a rank-0 output is one.
#[test]
fn a_graph_without_its_loss_says_so_at_every_batch() {
    use common::onnx::{attr_int, constant, floats, node, vi, vi_sym, with, G};
    let dir = tempfile::tempdir().unwrap();
    let head = dir.path().join("head.onnx");
    let g = G::new("g")
        .input(vi_sym("x", 1, &["N", "4"]))
        .output(vi_sym("y", 1, &["N", "1"]))
        .node(constant("w", floats("w", &[4, 1], &[0.5; 4])))
        .node(node("MatMul", "mm", &["x", "w"], &["y"]));
    std::fs::write(&head, g.model()).unwrap();
    let with_loss = dir.path().join("loss.onnx");
    let g = G::new("g")
        .input(vi_sym("x", 1, &["N", "4"]))
        .output(vi("loss", 1, &[]))
        .node(constant("w", floats("w", &[4, 1], &[0.5; 4])))
        .node(node("MatMul", "mm", &["x", "w"], &["y"]))
        .node(with(
            node("ReduceMean", "mean", &["y"], &["loss"]),
            vec![attr_int("keepdims", 0)],
        ));
    std::fs::write(&with_loss, g.model()).unwrap();
    for batch in ["1", "8"] {
        let notes = |m: &std::path::Path| {
            train(&m.display().to_string(), &["--batch", batch])["training"]["notes"].to_string()
        };
        assert!(
            notes(&head).contains("ends before its loss"),
            "batch {batch}"
        );
        assert!(
            !notes(&with_loss).contains("ends before its loss"),
            "batch {batch}"
        );
    }
}
