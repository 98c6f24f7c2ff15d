//! `nnlint mem` end to end, checked against values computed independently of nnlint: hand
//! arithmetic, PyTorch's own parameter counts (testdata/expected/), and torchvision's published
//! GFLOPS figures. Snapshot tests pin the rendered tables.

mod common;

use common::{expected, nnlint, run_json, stage, stderr, stdout};
use serde_json::Value;

fn mem_json(path: &str, extra: &[&str]) -> Value {
    let mut args = vec!["mem", path, "--format", "json"];
    args.extend_from_slice(extra);
    run_json(&args)
}

fn staged_json(model: &str, extra: &[&str]) -> Value {
    let staged = stage(model);
    mem_json(staged.path.to_str().unwrap(), extra)
}

fn layer<'a>(r: &'a Value, name: &str) -> &'a Value {
    common::find_in(r, "layers", "name", name)
}

#[test]
fn conv3x3_64_to_128_by_hand() {
    let r = mem_json("testdata/models/conv3x3_64_128.onnx", &[]);
    let conv = &r["layers"][0];
    // 3x3x64x128 weights + 128 biases
    assert_eq!(conv["params"], 73_856);
    assert_eq!(conv["param_bytes"], 73_856 * 4);
    assert_eq!(conv["output_shapes"], serde_json::json!([[1, 128, 56, 56]]));
    // every output element: 64 input channels x 9 taps
    assert_eq!(conv["macs"], 56 * 56 * 128 * 64 * 9);
    assert_eq!(conv["activation_bytes"], 128 * 56 * 56 * 4);
    // input and output live together while the conv runs
    assert_eq!(
        r["totals"]["inference_peak_bytes"],
        (64 + 128) * 56 * 56 * 4
    );
    assert_eq!(r["totals"]["flops"], 2 * 56 * 56 * 128 * 64 * 9);
    assert_eq!(r["batch"], 1);

    let r4 = mem_json("testdata/models/conv3x3_64_128.onnx", &["--batch", "4"]);
    assert_eq!(r4["layers"][0]["macs"], 4 * 56 * 56 * 128 * 64 * 9);
    assert_eq!(
        r4["totals"]["inference_peak_bytes"],
        4 * (64 + 128) * 56 * 56 * 4
    );
    assert_eq!(
        r4["layers"][0]["params"], 73_856,
        "parameters do not scale with the batch"
    );
}

#[test]
fn parameter_counts_match_pytorch() {
    for model in [
        "models/torch/minicnn.onnx",
        "models/torch/resnet18.onnx",
        "models/torch/mobilenet_v2.onnx",
        "models/torch/vgg16.onnx",
        "models/torch/efficientnet_b0.onnx",
        "models/torch/vit_b_16.onnx",
        "models/torch/tiny_transformer.onnx",
        "models/torch/tiny_transformer_dynamo.onnx",
    ] {
        let torch = &expected(model)["torch"];
        let r = staged_json(model, &[]);
        assert_eq!(
            r["totals"]["params"], torch["params"],
            "{model}: parameters"
        );
        assert_eq!(r["totals"]["buffers"], torch["buffers"], "{model}: buffers");
        assert_eq!(r["unknown_ops"], serde_json::json!([]), "{model}");
        assert_eq!(r["warnings"], serde_json::json!([]), "{model}");
    }
}

#[test]
fn vgg16_by_hand_and_published_gflops() {
    let r = staged_json("models/torch/vgg16.onnx", &[]);
    // torchvision's documented parameter count
    assert_eq!(r["totals"]["params"], 138_357_544);
    let fc1 = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["op"] == "Gemm")
        .unwrap();
    assert_eq!(fc1["params"], 25_088 * 4_096 + 4_096);
    assert_eq!(fc1["params"], 102_764_544);
    assert_eq!(fc1["macs"], 25_088 * 4_096);
}

#[test]
fn macs_match_torchvision_published_gflops() {
    // torchvision's model docs list "GFLOPS" that are multiply-accumulates at 224x224, batch 1
    for (model, gmacs) in [
        ("models/torch/resnet18.onnx", 1.81),
        ("models/torch/mobilenet_v2.onnx", 0.30),
        ("models/torch/vgg16.onnx", 15.47),
        ("models/torch/efficientnet_b0.onnx", 0.39),
        ("models/torch/vit_b_16.onnx", 17.56),
    ] {
        let r = staged_json(model, &[]);
        let got = r["totals"]["macs"].as_f64().unwrap() / 1e9;
        assert!(
            (got - gmacs).abs() < 0.005 + 1e-9,
            "{model}: {got:.3} GMACs, torchvision says {gmacs}"
        );
    }
}

#[test]
fn resnet18_peak_by_hand() {
    // The stem conv's output [N,64,112,112] and the BatchNorm's output of the same size are live
    // together; the 3x224x224 input is already freed. Nothing later is larger.
    let stem = 64 * 112 * 112 * 4;
    for batch in [1u64, 8] {
        let r = staged_json(
            "models/torch/resnet18.onnx",
            &["--batch", &batch.to_string()],
        );
        assert_eq!(r["batch"], batch);
        assert_eq!(r["totals"]["inference_peak_bytes"], batch * 2 * stem);
        assert_eq!(layer(&r, "/conv1/Conv")["activation_bytes"], batch * stem);
        assert_eq!(r["peak"]["node"], "/bn1/BatchNormalization");
    }
}

#[test]
fn symbolic_dims_stay_symbolic_until_bound() {
    let model = "testdata/models/torch/tiny_transformer_dynamo.onnx";
    let r = mem_json(model, &[]);
    assert_eq!(r["totals"]["inference_peak_bytes"], Value::Null);
    assert_eq!(r["unbound_dims"], serde_json::json!(["seq"]));
    // the embedding output is [batch, seq, 64] float32: 256 bytes per token
    let emb = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["op"] == "Gather")
        .unwrap();
    assert_eq!(emb["activation_bytes"], Value::Null);
    assert_eq!(emb["activation_bytes_expr"], "256*seq");
    assert_eq!(emb["output_shapes"], serde_json::json!([[1, "seq", 64]]));

    let b = mem_json(model, &["--batch", "3", "--dim", "seq=10"]);
    let emb = b["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["op"] == "Gather")
        .unwrap();
    assert_eq!(emb["activation_bytes"], 3 * 10 * 64 * 4);
    assert!(b["totals"]["inference_peak_bytes"].as_u64().unwrap() > 0);
    assert_eq!(b["dims"], serde_json::json!({"batch": 3, "seq": 10}));
}

#[test]
fn unknown_dim_name_is_a_usage_error() {
    let out = nnlint(&[
        "mem",
        "testdata/models/torch/tiny_transformer.onnx",
        "--dim",
        "sequence=5",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("no dimension named 'sequence'") && err.contains("seq"),
        "{err}"
    );
}

#[test]
fn safetensors_single_file_matches_pytorch() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(common::testdata().join("expected/weights/minicnn.json")).unwrap(),
    )
    .unwrap();
    let r = mem_json("testdata/models/safetensors/minicnn.safetensors", &[]);
    assert_eq!(r["format"], "safetensors");
    assert_eq!(r["totals"]["params"], exp["torch"]["params"]);
    assert_eq!(
        r["totals"]["param_bytes"],
        exp["torch"]["params"].as_u64().unwrap() * 4
    );
    // running mean/var and the int64 num_batches_tracked counters
    let nbt = exp["num_batches_tracked"].as_u64().unwrap();
    assert_eq!(
        r["totals"]["buffers"],
        exp["torch"]["buffers"].as_u64().unwrap() + nbt
    );
    assert_eq!(
        r["totals"]["buffer_bytes"],
        exp["torch"]["buffers"].as_u64().unwrap() * 4 + nbt * 8
    );
    assert_eq!(r["totals"]["inference_peak_bytes"], Value::Null);
    assert_eq!(r["layers"][0]["activation_bytes"], Value::Null);
}

#[test]
fn sharded_safetensors_matches_pytorch() {
    let exp: Value = serde_json::from_str(
        &std::fs::read_to_string(
            common::testdata().join("expected/weights/tiny_transformer_bf16.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let r = mem_json(
        "testdata/models/safetensors/tiny_transformer_bf16/model.safetensors.index.json",
        &[],
    );
    let params = exp["torch"]["params"].as_u64().unwrap();
    assert_eq!(r["totals"]["params"], params);
    assert_eq!(r["totals"]["param_bytes"], params * 2, "bf16 is two bytes");
    let kinds: Vec<&str> = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["op"].as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"Embedding") && kinds.contains(&"Linear") && kinds.contains(&"Norm"),
        "{kinds:?}"
    );
}

fn validate(instance: &Value) {
    let errors = common::schema_errors("mem.schema.json", instance);
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

#[test]
fn json_output_follows_the_documented_schema() {
    validate(&mem_json("testdata/models/torch/minicnn.onnx", &[]));
    validate(&mem_json(
        "testdata/models/torch/tiny_transformer_dynamo.onnx",
        &[],
    ));
    validate(&mem_json(
        "testdata/models/torch/tiny_transformer_dynamo.onnx",
        &["--sort", "macs", "--top", "3"],
    ));
    validate(&mem_json(
        "testdata/models/safetensors/minicnn.safetensors",
        &[],
    ));
    validate(&staged_json(
        "models/torch/efficientnet_b0.onnx",
        &["--batch", "2"],
    ));
}

#[test]
fn top_and_sort() {
    let r = staged_json(
        "models/torch/vgg16.onnx",
        &["--sort", "params", "--top", "3"],
    );
    let layers = r["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 3);
    assert_eq!(layers[0]["params"], 102_764_544);
    let shares: f64 = layers.iter().map(|l| l["share"].as_f64().unwrap()).sum();
    // the three FC layers hold 89.4% of VGG-16's parameters
    assert!((shares - (102_764_544.0 + 16_781_312.0 + 4_097_000.0) / 138_357_544.0).abs() < 1e-5);
}

#[test]
fn top_alone_keeps_the_largest_by_parameters_and_top_0_the_totals() {
    // issue 22: `--top K` without `--sort` showed the first K layers in graph order
    let r = staged_json("models/torch/vgg16.onnx", &["--top", "3"]);
    let params: Vec<u64> = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["params"].as_u64().unwrap())
        .collect();
    assert_eq!(params, [102_764_544, 16_781_312, 4_097_000]);
    let out = nnlint(&["mem", "testdata/models/torch/minicnn.onnx", "--top", "0"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(!text.contains("output shape"), "no layer table: {text}");
    assert!(text.contains("parameters") && text.contains("more layers not shown (--top)"));
}

#[test]
fn snapshot_table() {
    let out = nnlint(&["mem", "testdata/models/torch/minicnn.onnx"]);
    insta::assert_snapshot!("minicnn_table", stdout(&out));
    let out = nnlint(&[
        "mem",
        "testdata/models/torch/minicnn.onnx",
        "--batch",
        "32",
        "--sort",
        "activations",
        "--top",
        "5",
    ]);
    insta::assert_snapshot!("minicnn_table_sorted", stdout(&out));
}

#[test]
fn snapshot_symbolic_table() {
    let out = nnlint(&[
        "mem",
        "testdata/models/torch/tiny_transformer_dynamo.onnx",
        "--sort",
        "macs",
        "--top",
        "6",
    ]);
    insta::assert_snapshot!("transformer_symbolic_table", stdout(&out));
}

#[test]
fn snapshot_markdown_csv_json() {
    let out = nnlint(&[
        "mem",
        "testdata/models/torch/minicnn.onnx",
        "--format",
        "markdown",
        "--top",
        "4",
        "--sort",
        "params",
    ]);
    insta::assert_snapshot!("minicnn_markdown", stdout(&out));
    let out = nnlint(&[
        "mem",
        "testdata/models/torch/minicnn.onnx",
        "--format",
        "csv",
    ]);
    insta::assert_snapshot!("minicnn_csv", stdout(&out));
    let out = nnlint(&[
        "mem",
        "testdata/models/conv3x3_64_128.onnx",
        "--format",
        "json",
    ]);
    insta::assert_snapshot!("conv3x3_json", stdout(&out));
}

#[test]
fn snapshot_safetensors_table() {
    let out = nnlint(&[
        "mem",
        "testdata/models/safetensors/tiny_transformer_bf16/model.safetensors.index.json",
    ]);
    insta::assert_snapshot!("sharded_safetensors_table", stdout(&out));
}

#[test]
fn on_a_narrow_terminal_layer_names_are_shortened_and_numbers_kept() {
    use nnlint::report::{render_mem, MemFormat, ViewOptions};
    let path = common::testdata().join("models/torch/minicnn.onnx");
    let r = nnlint::analysis::analyze_path(&path, &Default::default(), None).unwrap();
    let whole = render_mem(&r, MemFormat::Table, ViewOptions::default());
    let narrow = render_mem(
        &r,
        MemFormat::Table,
        ViewOptions {
            width: Some(100),
            ..ViewOptions::default()
        },
    );
    let table = |s: &str| -> Vec<String> {
        s.lines()
            .skip(2)
            .take_while(|l| !l.is_empty())
            .filter(|l| !l.starts_with("(left out"))
            .map(String::from)
            .collect()
    };
    let (whole, narrow) = (table(&whole), table(&narrow));
    assert!(whole.iter().any(|l| l.chars().count() > 100), "{whole:?}");
    assert_eq!(whole.len(), narrow.len());
    for (w, n) in whole.iter().zip(&narrow) {
        assert!(n.chars().count() <= 100, "{n}");
        // every number column is intact: the cells after the name are the same
        let cells = |l: &str| {
            l.split_whitespace()
                .skip(1)
                .map(String::from)
                .collect::<Vec<_>>()
        };
        // every cell shown after the name is the whole table's: columns are left out, never cut
        let all = cells(w);
        assert!(cells(n).iter().all(|c| all.contains(c)), "{w}\n{n}");
    }
}

/// Issue 22: one rule for folders across `mem`, `fit`, `report` and `lint`. A folder without a
/// `config.json` holding one model file is read as that file, with the same numbers, said in one
/// line on standard error; a folder holding several is refused by every command, naming them.
#[test]
fn a_folder_is_read_as_its_only_model_file_by_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let one = dir.path().join("one");
    std::fs::create_dir(&one).unwrap();
    std::fs::copy(
        common::fixture("models/torch/minicnn.onnx"),
        one.join("model.onnx"),
    )
    .unwrap();
    // a file that is not a model does not count
    std::fs::write(one.join("README.md"), "a model").unwrap();
    let file = one.join("model.onnx");
    let (f, d) = (file.to_str().unwrap(), one.to_str().unwrap());
    let said = format!("{d}: reading model.onnx, the folder's only model file (no config.json)");
    for (cmd, extra) in [
        ("mem", vec!["--batch", "8", "--train"]),
        ("fit", vec!["--gpu", "T4"]),
    ] {
        let run = |m: &str| {
            let mut args = vec![cmd, m, "--format", "json"];
            args.extend_from_slice(&extra);
            let o = nnlint(&args);
            assert_eq!(o.status.code(), Some(0), "{cmd} {m}: {}", stderr(&o));
            (stdout(&o), stderr(&o))
        };
        let (by_file, err_file) = run(f);
        let (by_dir, err_dir) = run(d);
        assert!(!err_file.contains("reading"), "{err_file}");
        assert!(err_dir.contains(&said), "{cmd}: {err_dir}");
        assert_eq!(err_dir.matches("the folder's only model file").count(), 1);
        // the same numbers: only the model's path differs
        assert_eq!(
            by_dir.replace(d, f).replace(&format!("{f}/model.onnx"), f),
            by_file,
            "{cmd}"
        );
    }
    let o = nnlint(&["report", d, "-o", "-"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains(&said), "{}", stderr(&o));
    assert!(stdout(&o).contains("<html"));
    let o = nnlint(&["lint", d, "--format", "json", "--no-config"]);
    assert!(stderr(&o).contains(&said), "{}", stderr(&o));
    let o_file = nnlint(&["lint", f, "--format", "json", "--no-config"]);
    assert_eq!(o.status.code(), o_file.status.code());

    // several model files: every command refuses, naming them
    let many = dir.path().join("many");
    std::fs::create_dir(&many).unwrap();
    for n in ["a.onnx", "b.onnx"] {
        std::fs::copy(common::fixture("models/torch/minicnn.onnx"), many.join(n)).unwrap();
    }
    std::fs::write(many.join("w.safetensors"), b"").unwrap();
    let m = many.to_str().unwrap();
    for args in [
        vec!["mem", m],
        vec!["fit", m, "--gpu", "T4"],
        vec!["report", m, "-o", "-"],
        vec!["lint", m],
    ] {
        let o = nnlint(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stdout(&o));
        let err = stderr(&o);
        assert!(
            err.contains("3 model files (a.onnx, b.onnx, w.safetensors): name the one to read"),
            "{args:?}: {err}"
        );
    }
    // an index and its shards are one model
    let idx = dir.path().join("idx");
    std::fs::create_dir(&idx).unwrap();
    for n in [
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ] {
        std::fs::copy(
            common::fixture(&format!("models/safetensors/tiny_transformer_bf16/{n}")),
            idx.join(n),
        )
        .unwrap();
    }
    let o = nnlint(&["mem", idx.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("reading model.safetensors.index.json"),
        "{}",
        stderr(&o)
    );
}

/// Issue 22: the CSV's rows include what the table hides (folded shape computations, subgraph
/// nodes); its `folded` and `depth` columns say which, and the rows with `false` and `0` add up to
/// the totals.
#[test]
fn csv_columns_add_up_to_the_totals() {
    for (model, dims) in [
        (
            "testdata/models/torch/tiny_transformer_dynamo.onnx",
            ["--batch", "2", "--dim", "seq=16"],
        ),
        (
            "testdata/models/torch/minicnn.onnx",
            ["--batch", "2", "--dim", "batch=2"],
        ),
    ] {
        let json = mem_json(model, &dims);
        let mut args = vec!["mem", model, "--format", "csv"];
        args.extend_from_slice(&dims);
        let out = nnlint(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let csv = stdout(&out);
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (params, acts, folded, depth) = (
            col("params"),
            col("activation_bytes"),
            col("folded"),
            col("depth"),
        );
        let (mut p, mut a, mut hidden) = (0u64, 0u64, 0);
        for line in lines.take_while(|l| !l.is_empty()) {
            // a quoted field (shapes) holds commas: split the plain tail from the right
            let fields: Vec<&str> = line.rsplitn(header.len() - 2, ',').collect();
            let get = |i: usize| fields[header.len() - 1 - i];
            if get(folded) == "false" && get(depth) == "0" {
                p += get(params).parse::<u64>().unwrap();
                a += get(acts).parse::<u64>().unwrap_or(0);
            } else {
                hidden += 1;
            }
        }
        assert_eq!(p, json["totals"]["params"].as_u64().unwrap(), "{model}");
        assert_eq!(
            a,
            json["totals"]["activation_bytes"].as_u64().unwrap(),
            "{model}"
        );
        if model.contains("dynamo") {
            assert!(hidden > 0, "the dynamo export has folded shape rows");
        }
    }
}

/// Issue 22: at 80 columns (a real pseudo-terminal, through util-linux's `script`) the table
/// leaves out columns by priority, says which, and keeps layer names readable instead of cutting
/// them to 8 characters; every line of the table fits.
#[test]
fn a_narrow_terminal_gets_readable_names_and_the_columns_that_fit() {
    let bin = env!("CARGO_BIN_EXE_nnlint");
    for (args, names) in [
        (
            "mem testdata/models/torch/minicnn.onnx --train --batch 8",
            ["/stem/stem.0/Conv", "/stem/stem.1/BatchNormalization"],
        ),
        (
            "mem testdata/models/torch/resnet18.onnx",
            ["/conv1/Conv", "/layer1/layer1.0/conv1/Conv"],
        ),
    ] {
        let out = std::process::Command::new("script")
            .args(["-qec", &format!("{bin} {args}"), "/dev/null"])
            .env("COLUMNS", "80")
            .env("NO_COLOR", "1")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("util-linux's script runs (Debian: bsdutils, essential)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
        let table: Vec<&str> = text.lines().skip(2).take_while(|l| !l.is_empty()).collect();
        for l in &table {
            assert!(
                l.chars().count() <= 80,
                "{} columns: {l}",
                l.chars().count()
            );
        }
        for n in names {
            assert!(table.iter().any(|l| l.starts_with(n)), "{n} whole: {text}");
        }
        assert!(
            table[0].contains("params") && table[0].contains("activations"),
            "{text}"
        );
        assert!(
            text.contains("(left out at 80 columns: %params, param bytes"),
            "{text}"
        );
    }
}
