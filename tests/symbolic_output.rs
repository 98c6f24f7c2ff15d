//! Issue 22, item 9: what a graph with a free input size prints, as OCR exports (ddddocr,
//! PP-OCR) have them. A strided convolution's output size is `floor((W - 1)/2) + 1`; three in a
//! row were printed nested (`floor((floor((floor((W - 1)/2))/2))/2)`), a reshape's -1 over such a
//! size came out as `(1024*floor(...) + 1024)/(floor(...) + 1)` (which is 1024), the summary's
//! numbers were padded to the width of the longest symbolic total (~800 columns), and the hint
//! asked to bind derived sizes no one can bind. The graph here is that shape in small: a
//! 32-pixel-high strip of any width, three stride-2 convolutions, the sequence axis moved first
//! and a reshape to `[sequence, 1, -1]` built from the tensor's own shape.

mod common;

use common::onnx::{constant, ints, ints_attr, node, vi_sym, weight, with, FLOAT, G};
use common::{nnlint, run_json, stdout};

fn crnn() -> Vec<u8> {
    let mut g = G::new("crnn")
        .input(vi_sym("x", FLOAT, &["1", "1", "8", "image_width"]))
        .output(vi_sym("y", FLOAT, &["seq", "1", "c"]))
        .init(weight("w1", &[4, 1, 3, 3]))
        .init(weight("w2", &[4, 4, 3, 3]))
        .init(weight("w3", &[8, 4, 3, 3]));
    let mut x = "x".to_string();
    for i in 1..=3 {
        let out = format!("c{i}");
        g = g.node(with(
            node(
                "Conv",
                &format!("conv{i}"),
                &[&x, &format!("w{i}")],
                &[&out],
            ),
            vec![
                ints_attr("strides", &[2, 2]),
                ints_attr("pads", &[1, 1, 1, 1]),
            ],
        ));
        x = out;
    }
    g.node(with(
        node("Transpose", "to_sequence", &["c3"], &["t"]),
        vec![ints_attr("perm", &[3, 0, 1, 2])],
    ))
    .node(node("Shape", "shape", &["t"], &["s"]))
    .node(constant("first", ints("first", &[0])))
    .node(node("Gather", "seq_len", &["s", "first"], &["n"]))
    .node(constant("rest", ints("rest", &[1, -1])))
    .node(with(
        node("Concat", "target", &["n", "rest"], &["shape_t"]),
        vec![common::onnx::attr_int("axis", 0)],
    ))
    .node(node("Reshape", "to_rows", &["t", "shape_t"], &["y"]))
    .model()
}

fn model() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("crnn.onnx"), crnn()).unwrap();
    d
}

#[test]
fn derived_sizes_print_simplified_and_name_what_can_be_bound() {
    let d = model();
    let path = d.path().join("crnn.onnx");
    let p = path.to_str().unwrap();
    let out = nnlint(&["mem", p]);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}");
    // three stride-2 convolutions are one division by 8
    assert!(
        text.contains("[1,8,1,floor((image_width - 1)/8) + 1]"),
        "{text}"
    );
    assert!(!text.contains("floor((floor("), "{text}");
    // the reshape's -1 over (8·F + 8) elements and F rows is 8
    assert!(
        text.contains("[floor((image_width - 1)/8) + 1,1,8]"),
        "{text}"
    );
    assert!(!text.contains(")/(floor"), "{text}");
    // the hint names the input's size only
    assert!(
        text.contains(
            "sizes depend on unbound dimensions (image_width): bind them with --dim NAME=V"
        ),
        "{text}"
    );
    // the summary's numbers are not padded to the symbolic totals' width
    let params = text
        .lines()
        .find(|l| l.starts_with("parameters"))
        .expect("a parameters line");
    assert!(params.len() < 60, "{params:?}");
    let j = run_json(&["mem", p, "-f", "json"]);
    assert_eq!(j["unbound_dims"], serde_json::json!(["image_width"]));
    // bound, every size is a number: W = 100 gives floor(99/2)+1 = 50, 25, 13 (= floor(99/8)+1)
    let j = run_json(&["mem", p, "--dim", "image_width=100", "-f", "json"]);
    let layer = |name: &str| common::find_in(&j, "layers", "name", name).clone();
    assert_eq!(
        layer("conv3")["output_shapes"][0],
        serde_json::json!([1, 8, 1, 13])
    );
    assert_eq!(
        layer("to_rows")["output_shapes"][0],
        serde_json::json!([13, 1, 8])
    );
    assert_eq!(layer("to_rows")["activation_bytes"], 13 * 8 * 4);
    assert!(j["unbound_dims"].as_array().unwrap().is_empty(), "{j:#}");
}
