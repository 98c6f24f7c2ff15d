use nnlint::load::onnx_pb as pb;
use prost::Message;
use std::panic;
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
fn arity() {
    panic::set_hook(Box::new(|i| {
        if let Some(l) = i.location() {
            println!(
                "LOC {}:{} {}",
                l.file(),
                l.line(),
                i.payload()
                    .downcast_ref::<String>()
                    .cloned()
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
    let dir = tempfile::tempdir().unwrap();
    let mut fails = vec![];
    let mut n = 0;
    for op in &ops {
        for kind in 0..4 {
            for nin in 0..5 {
                for nout in 0..3 {
                    let mut g = pb::GraphProto::default();
                    let mut ins = vec![];
                    for i in 0..nin {
                        let name = format!("i{i}");
                        match kind {
                            0 => g.initializer.push(pb::TensorProto {
                                name: Some(name.clone()),
                                dims: vec![2],
                                data_type: Some(7),
                                int64_data: vec![1, 2],
                                ..Default::default()
                            }),
                            1 => g.input.push(vi(&name, 1, &[1, 3, 8, 8])),
                            2 => g.initializer.push(pb::TensorProto {
                                name: Some(name.clone()),
                                dims: vec![],
                                data_type: Some(1),
                                float_data: vec![0.5],
                                ..Default::default()
                            }),
                            _ => g.initializer.push(pb::TensorProto {
                                name: Some(name.clone()),
                                dims: vec![0],
                                data_type: Some(7),
                                ..Default::default()
                            }),
                        }
                        ins.push(name);
                    }
                    let outs: Vec<String> = (0..nout).map(|i| format!("o{i}")).collect();
                    g.node.push(pb::NodeProto {
                        op_type: Some(op.clone()),
                        name: Some("n".into()),
                        input: ins,
                        output: outs.clone(),
                        ..Default::default()
                    });
                    for o in &outs {
                        g.output.push(pb::ValueInfoProto {
                            name: Some(o.clone()),
                            ..Default::default()
                        });
                    }
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
                        fails.push(format!("{op} kind{kind} in{nin} out{nout}"));
                    }
                }
            }
        }
    }
    let _ = panic::take_hook();
    println!(
        "runs {n} ops {}, panics {}:\n{}",
        ops.len(),
        fails.len(),
        fails.join("\n")
    );
}
