use nnlint::load::onnx_pb as pb;
use prost::Message;
use std::panic;
use std::sync::Mutex;
static LAST: Mutex<String> = Mutex::new(String::new());
fn vi(name: &str, elem: i32, dims: &[i64]) -> pb::ValueInfoProto {
    use pb::tensor_shape_proto::{dimension::Value, Dimension};
    pb::ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(pb::TypeProto {
            value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                elem_type: Some(elem),
                shape: Some(pb::TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|&d| Dimension {
                            value: Some(Value::DimValue(d)),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}
#[test]
fn attrs() {
    panic::set_hook(Box::new(|i| {
        if let Some(l) = i.location() {
            *LAST.lock().unwrap() = format!(
                "{}:{} {}",
                l.file(),
                l.line(),
                i.payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .or(i.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            );
        }
    }));
    let ops: Vec<String> = std::fs::read_to_string("src/analysis/ops/mod.rs")
        .unwrap()
        .lines()
        .filter_map(|l| {
            let t = l.trim();
            if t.starts_with('"') && t.contains("\" =>") {
                Some(t[1..t.find("\" =>").unwrap()].to_string())
            } else {
                None
            }
        })
        .collect();
    let attrs = [
        "axis",
        "axes",
        "perm",
        "kernel_shape",
        "strides",
        "pads",
        "dilations",
        "group",
        "keepdims",
        "blocksize",
        "to",
        "transA",
        "transB",
        "split",
        "num_outputs",
        "k",
        "hidden_size",
        "output_padding",
        "output_shape",
        "allowzero",
        "batch_dims",
        "upper",
        "direction",
        "value_int",
        "value_ints",
        "noop_with_empty_axes",
        "largest",
        "sorted",
        "mode",
        "start",
        "end",
    ];
    let vals: &[&[i64]] = &[
        &[i64::MIN],
        &[i64::MAX],
        &[-1],
        &[0],
        &[-5, 3],
        &[1 << 40, 1 << 40],
        &[2, 2, 2, 2, 2, 2, 2, 2],
        &[],
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut fails = std::collections::BTreeMap::new();
    let mut n = 0;
    for op in &ops {
        for attr in attrs {
            for v in vals {
                for ints_attr in [false, true] {
                    if !ints_attr && v.len() != 1 {
                        continue;
                    }
                    for kind in 0..2 {
                        let mut g = pb::GraphProto::default();
                        g.input.push(vi("x", 1, &[1, 3, 8, 8]));
                        g.initializer.push(pb::TensorProto {
                            name: Some("w".into()),
                            dims: vec![4, 3, 3, 3],
                            data_type: Some(1),
                            raw_data: Some(vec![0u8; 4 * 108].into()),
                            ..Default::default()
                        });
                        g.initializer.push(pb::TensorProto {
                            name: Some("s".into()),
                            dims: vec![4],
                            data_type: Some(7),
                            int64_data: vec![1, 3, 4, 16],
                            ..Default::default()
                        });
                        g.initializer.push(pb::TensorProto {
                            name: Some("t".into()),
                            dims: vec![2],
                            data_type: Some(7),
                            int64_data: vec![0, -1],
                            ..Default::default()
                        });
                        let ins: Vec<String> = if kind == 0 {
                            vec!["x".into(), "w".into(), "s".into()]
                        } else {
                            vec!["s".into(), "t".into(), "t".into(), "t".into()]
                        };
                        let a = if ints_attr {
                            pb::AttributeProto {
                                name: Some(attr.into()),
                                r#type: Some(7),
                                ints: v.to_vec(),
                                ..Default::default()
                            }
                        } else {
                            pb::AttributeProto {
                                name: Some(attr.into()),
                                r#type: Some(2),
                                i: Some(v[0]),
                                ..Default::default()
                            }
                        };
                        g.node.push(pb::NodeProto {
                            op_type: Some(op.clone()),
                            name: Some("n".into()),
                            input: ins,
                            output: vec!["y".into(), "y2".into()],
                            attribute: vec![a],
                            ..Default::default()
                        });
                        g.output.push(pb::ValueInfoProto {
                            name: Some("y".into()),
                            ..Default::default()
                        });
                        let m = pb::ModelProto {
                            ir_version: Some(8),
                            opset_import: vec![pb::OperatorSetIdProto {
                                domain: Some("".into()),
                                version: Some(17),
                            }],
                            graph: Some(g),
                            ..Default::default()
                        }
                        .encode_to_vec();
                        let p = dir.path().join("m.onnx");
                        std::fs::write(&p, m).unwrap();
                        n += 1;
                        let r = panic::catch_unwind(|| {
                            nnlint::mem_report(&p, &Default::default(), None).map(|r| {
                                nnlint::report::render_mem(
                                    &r,
                                    nnlint::report::MemFormat::Json,
                                    Default::default(),
                                )
                            })
                        });
                        if r.is_err() {
                            fails
                                .entry(LAST.lock().unwrap().clone())
                                .or_insert_with(Vec::new)
                                .push(format!("{op} {attr}={v:?} ints={ints_attr} kind{kind}"));
                        }
                    }
                }
            }
        }
    }
    let _ = panic::take_hook();
    println!("runs {n}");
    for (k, v) in &fails {
        println!(
            "{k}  ({} cases, e.g. {})",
            v.len(),
            v[..v.len().min(3)].join("; ")
        );
    }
}
