//! `If` branches and integer ops end to end (issue 19 item 8): which branch the totals count and
//! why, `--value NAME=V` for a scalar input that decides one, weights sliced inside a branch, and
//! the MACs of onnxruntime's dynamically quantized ops. The expected figures are
//! testdata/models/branches/expected.json, written by testdata/generate.py (`--branches-only`) from
//! onnxruntime's output shapes and onnx.reference's run of the branch that is taken, with textbook
//! MAC formulas: never from nnlint.

mod common;

use common::{fixture, nnlint, run_json, stderr, stdout};
use serde_json::Value;

fn expected(model: &str) -> Vec<Value> {
    let all: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("models/branches/expected.json")).unwrap(),
    )
    .unwrap();
    all[model].as_array().unwrap().clone()
}

fn mem(model: &str, extra: &[&str]) -> Value {
    let path = fixture(&format!("models/branches/{model}.onnx"));
    let mut args = vec!["mem", path.as_str(), "--format", "json"];
    args.extend_from_slice(extra);
    run_json(&args)
}

/// The top-level row of the `If`.
fn if_row(r: &Value) -> &Value {
    r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["op"] == "If" && l["depth"] == 0)
        .expect("an If row")
}

#[test]
fn a_value_given_for_the_sample_rate_counts_the_branch_onnxruntime_runs() {
    for case in expected("if_sample_rate") {
        let sr = case["values"]["sr"].as_i64().unwrap();
        let r = mem("if_sample_rate", &["--value", &format!("sr={sr}")]);
        let branch = case["branch"][0].as_str().unwrap();
        // the branch's own MACs and the bytes its nodes produce (its weight Slice folds at load)
        assert_eq!(if_row(&r)["macs"], case["branch_macs"], "sr={sr}");
        let sub_bytes = case["branch_activation_bytes"].as_u64().unwrap();
        // + the If's output [1,16] f32, + Equal's bool: runtime tensors, though their value is known
        assert_eq!(
            if_row(&r)["activation_bytes"].as_u64(),
            Some(sub_bytes + 64),
            "sr={sr}"
        );
        assert_eq!(
            r["totals"]["activation_bytes"].as_u64(),
            Some(sub_bytes + 64 + 1)
        );
        assert_eq!(r["totals"]["unaccounted"]["undecided_branches"], 0);
        let b = &r["branches"][0];
        assert_eq!(b["node"], "If_1");
        assert_eq!(b["counted"], branch, "sr={sr}");
        assert_eq!(b["decided"], true);
        assert_eq!(b["reason"], "condition");
        assert_eq!(b["inputs"], serde_json::json!(["sr"]));
        assert!(
            b["why"]
                .as_str()
                .unwrap()
                .contains(&format!("--value sr={sr}")),
            "{b}"
        );
        // the other branch's rows are listed as not taken
        let other = if branch == "then_branch" {
            "else_branch"
        } else {
            "then_branch"
        };
        assert!(r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["branch"] == format!("If_1.{other} (not taken)")));
    }
}

#[test]
fn without_a_value_the_larger_branch_is_counted_and_the_note_says_how_to_decide() {
    let cases = expected("if_sample_rate");
    let r = mem("if_sample_rate", &[]);
    let larger = cases
        .iter()
        .max_by_key(|c| c["branch_macs"].as_u64())
        .unwrap();
    let smaller = cases
        .iter()
        .min_by_key(|c| c["branch_macs"].as_u64())
        .unwrap();
    assert_eq!(if_row(&r)["macs"], larger["branch_macs"]);
    assert_eq!(r["totals"]["unaccounted"]["undecided_branches"], 1);
    let b = &r["branches"][0];
    assert_eq!(b["counted"], larger["branch"][0]);
    assert_eq!(b["decided"], false);
    assert_eq!(b["reason"], "larger");
    assert_eq!(b["inputs"], serde_json::json!(["sr"]));
    let why = b["why"].as_str().unwrap();
    assert!(why.contains("depends on the value of sr"), "{why}");
    assert!(why.contains("--value sr=V"), "{why}");
    // both branches' costs, the one not counted included
    let costs = b["costs"].as_array().unwrap();
    let other = costs
        .iter()
        .find(|c| c["branch"] == smaller["branch"][0])
        .unwrap();
    assert_eq!(other["macs"], smaller["branch_macs"]);
    assert_eq!(
        other["activation_bytes"],
        smaller["branch_activation_bytes"]
    );

    let path = fixture("models/branches/if_sample_rate.onnx");
    let out = nnlint(&["mem", &path]);
    let text = stdout(&out);
    assert!(
        text.contains(
            "If If_1: counts its then_branch (undecided): its condition depends on the value of sr"
        ),
        "{text}"
    );
}

#[test]
fn a_condition_read_from_an_input_shape_is_decided_and_says_so() {
    let case = &expected("if_state_shape")[0];
    // the generator fed x [2,4], state [2,2,4]
    let r = mem("if_state_shape", &["--batch", "2"]);
    assert_eq!(if_row(&r)["macs"], case["branch_macs"]);
    let b = &r["branches"][0];
    assert_eq!(b["counted"], case["branch"][0]);
    assert_eq!(b["decided"], true);
    assert_eq!(b["reason"], "condition");
    assert_eq!(b["inputs"], serde_json::json!(["state"]));
    assert!(
        b["why"]
            .as_str()
            .unwrap()
            .contains("true at these input shapes (it reads the shape of state)"),
        "{b}"
    );
    let out = nnlint(&["mem", &fixture("models/branches/if_state_shape.onnx")]);
    assert!(stdout(&out).contains("If If_3: counts its then_branch: its condition is true"));
}

#[test]
fn integer_ops_count_the_macs_of_their_float_twins() {
    let case = &expected("quantized_ops")[0];
    let r = mem("quantized_ops", &[]);
    let mut total = 0;
    for (op, macs) in case["macs_by_op"].as_object().unwrap() {
        let got: u64 = r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["op"].as_str().unwrap().ends_with(op.as_str()))
            .map(|l| l["macs"].as_u64().unwrap())
            .sum();
        assert_eq!(got, macs.as_u64().unwrap(), "{op}");
        total += got;
    }
    assert_eq!(r["totals"]["macs"].as_u64(), Some(total));
    // the quantized LSTM's outputs as onnxruntime measured them
    let lstm = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["op"] == "com.microsoft.DynamicQuantizeLSTM")
        .unwrap();
    let s = &case["shapes"];
    assert_eq!(
        lstm["output_shapes"],
        serde_json::json!([s["Y"], s["Y_h"], s["Y_c"]])
    );
    assert!(r.get("branches").is_none(), "no If: no branches field");
}

#[test]
fn value_errors_name_the_input() {
    let path = fixture("models/branches/if_sample_rate.onnx");
    let out = nnlint(&["mem", &path, "--value", "rate=16000"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no input named 'rate' (inputs: x, sr)"),
        "{}",
        stderr(&out)
    );
    let out = nnlint(&["mem", &path, "--value", "x=1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("'x' has shape [1,8], not a single element"),
        "{}",
        stderr(&out)
    );
    let out = nnlint(&["mem", &path, "--value", "sr=16k"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not an integer"), "{}", stderr(&out));
}

#[test]
fn the_branches_field_follows_the_documented_schema() {
    for (model, extra) in [
        ("if_sample_rate", vec![]),
        ("if_sample_rate", vec!["--value", "sr=8000"]),
        ("if_state_shape", vec![]),
        ("loop_steps_input", vec![]),
    ] {
        let r = mem(model, &extra);
        let errors = common::schema_errors("mem.schema.json", &r);
        assert!(errors.is_empty(), "{model}: {}", errors.join("\n"));
    }
}

#[test]
fn a_loop_count_given_as_a_value_multiplies_its_body_and_an_unknown_one_is_a_lower_bound() {
    let case = &expected("loop_steps_input")[0];
    let steps = case["values"]["steps"].as_i64().unwrap();
    let r = mem("loop_steps_input", &["--value", &format!("steps={steps}")]);
    assert_eq!(r["totals"]["macs"], case["loop_macs"]);
    assert_eq!(r["totals"]["lower_bound"]["macs"], false);
    assert!(r["totals"]["unaccounted"]
        .get("unknown_trip_counts")
        .is_none());
    let body = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["depth"] == 1)
        .unwrap();
    assert_eq!(
        body["branch"],
        format!("Loop_0.body (x{})", case["iterations"])
    );

    // without it: the body once, and the totals say they are lower bounds, and why
    let r = mem("loop_steps_input", &[]);
    let per_run = case["loop_macs"].as_u64().unwrap() / case["iterations"].as_u64().unwrap();
    assert_eq!(r["totals"]["macs"].as_u64(), Some(per_run));
    assert_eq!(r["totals"]["lower_bound"]["macs"], true);
    assert_eq!(r["totals"]["unaccounted"]["unknown_trip_counts"], 1);
    let notes: Vec<&str> = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n
            .contains("Loop_0: trip count unknown (it depends on the value of steps)")
            && n.contains("--value steps=N")),
        "{notes:?}"
    );
}

#[test]
fn verify_feeds_the_given_value_instead_of_a_random_one() {
    let path = fixture("models/branches/if_sample_rate.onnx");
    let dir = std::env::temp_dir().join(format!("nnlint-branches-verify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = nnlint(&[
        "verify",
        &path,
        &path,
        "--value",
        "sr=8000",
        "--dump",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let file = manifest["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "sr")
        .unwrap()["file"]
        .as_str()
        .unwrap()
        .to_string();
    // a float64 .npy scalar: its last 8 bytes are the value
    let bytes = std::fs::read(dir.join(file)).unwrap();
    let v = f64::from_le_bytes(bytes[bytes.len() - 8..].try_into().unwrap());
    assert_eq!(v, 8000.0);
    let _ = std::fs::remove_dir_all(&dir);
}
