//! The checker against onnxruntime, op by op: for every `testdata/ort/*.json` whose model the
//! checker can run (its own static support check), the recorded inputs go through the checker and
//! every recorded node output is compared with onnxruntime's, within the named tolerance of its
//! dtype ([`Tolerance::Kernel`] for floats computed by onnxruntime in their own precision,
//! [`Tolerance::Exact`] for integers and booleans). The fixtures the checker cannot run are listed
//! with the reason, and must be the ones named in [`SKIPPED`].
//!
//! `cargo test --test checker_ort -- --nocapture` prints the summary.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{Device, Tensor as CTensor};
use nnlint::ir::DType;
use nnlint::verify::exec::{ExecError, Executor};
use nnlint::verify::Tolerance;
use serde_json::Value;

/// Fixtures the checker does not run, by key, with the reason in words (the test prints the
/// checker's own). A fixture that starts to run, or one that stops, fails the test until this list
/// says so.
const SKIPPED: &[(&str, &str)] = &[
    ("conv3x3_64_128", "its input was too large to record"),
    ("ops__affinegrid_opset20", "no AffineGrid kernel yet"),
    (
        "ops__attention_3d_gqa_causal_opset23",
        "no Attention kernel yet",
    ),
    ("ops__attention_4d_past_opset23", "no Attention kernel yet"),
    (
        "ops__bitcast_float_to_int32_opset26",
        "no BitCast kernel yet",
    ),
    (
        "ops__bitwise_opset18",
        "no BitwiseAnd/BitwiseOr/BitwiseXor/BitwiseNot kernel yet",
    ),
    (
        "ops__causalconvwithstate_silu_opset27",
        "no CausalConvWithState kernel yet",
    ),
    ("ops__centercroppad_opset18", "no CenterCropPad kernel yet"),
    ("ops__col2im_opset18", "no Col2Im kernel yet"),
    ("ops__col2im_strides_pads_opset18", "no Col2Im kernel yet"),
    ("ops__compress_axis1", "no Compress kernel yet"),
    ("ops__compress_flat", "no Compress kernel yet"),
    ("ops__cumprod_reverse_opset26", "no CumProd kernel yet"),
    (
        "ops__deformconv_mask_strides_opset22",
        "no DeformConv kernel yet",
    ),
    ("ops__deformconv_opset22", "no DeformConv kernel yet"),
    ("ops__det_batch_opset22", "no Det kernel yet"),
    ("ops__dft_axis_input_opset20", "no DFT kernel yet"),
    ("ops__dft_onesided_attr_axis", "no DFT kernel yet"),
    ("ops__dft_onesided_length_opset20", "no DFT kernel yet"),
    (
        "ops__gridsample_bilinear_opset16",
        "no GridSample kernel yet",
    ),
    (
        "ops__gridsample_nearest_border_opset20",
        "no GridSample kernel yet",
    ),
    (
        "ops__linearattention_linear_opset27",
        "no LinearAttention kernel yet",
    ),
    ("ops__maxroipool", "no MaxRoiPool kernel yet"),
    ("ops__maxunpool_after_maxpool", "no MaxUnpool kernel yet"),
    ("ops__maxunpool_output_shape", "no MaxUnpool kernel yet"),
    ("ops__melweightmatrix", "no MelWeightMatrix kernel yet"),
    ("ops__multinomial_opset15", "no Multinomial kernel yet"),
    (
        "ops__nllloss_none_opset22",
        "no NegativeLogLikelihoodLoss kernel yet",
    ),
    (
        "ops__nonmaxsuppression_none_selected_opset11",
        "no NonMaxSuppression kernel yet",
    ),
    ("ops__onehot_axis1_opset11", "no OneHot kernel yet"),
    (
        "ops__reversesequence_batch_major",
        "no ReverseSequence kernel yet",
    ),
    ("ops__roialign_opset16", "no RoiAlign kernel yet"),
    ("ops__scatter_axis1_opset10", "no Scatter kernel yet"),
    (
        "ops__rotaryembedding_3d_partial_opset23",
        "no RotaryEmbedding kernel yet",
    ),
    (
        "ops__rotaryembedding_4d_opset23",
        "no RotaryEmbedding kernel yet",
    ),
    (
        "ops__softmaxcrossentropyloss_mean_opset13",
        "no SoftmaxCrossEntropyLoss kernel yet",
    ),
    ("ops__stft_window", "no STFT kernel yet"),
    ("ops__swish_opset24", "no Swish kernel yet"),
    (
        "ops__tensorscatter_circular_opset24",
        "no TensorScatter kernel yet",
    ),
    (
        "ops__tfidfvectorizer_tf_opset9",
        "no TfIdfVectorizer kernel yet",
    ),
    (
        "ops__windows",
        "no HannWindow/HammingWindow/BlackmanWindow kernel yet",
    ),
];

fn number(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("{n} is not a number")),
        Value::Bool(b) => Ok(f64::from(u8::from(*b))),
        Value::String(s) => match s.as_str() {
            "nan" => Ok(f64::NAN),
            "inf" => Ok(f64::INFINITY),
            "-inf" => Ok(f64::NEG_INFINITY),
            other => Err(format!("unexpected value '{other}'")),
        },
        other => Err(format!("unexpected value {other}")),
    }
}

/// numpy's dtype names.
fn dtype(name: &str) -> Result<DType, String> {
    Ok(match name {
        "float64" => DType::F64,
        "float32" => DType::F32,
        "float16" => DType::F16,
        "bfloat16" => DType::BF16,
        "int64" => DType::I64,
        "int32" => DType::I32,
        "int16" => DType::I16,
        "int8" => DType::I8,
        "uint64" => DType::U64,
        "uint32" => DType::U32,
        "uint16" => DType::U16,
        "uint8" => DType::U8,
        "bool" => DType::Bool,
        other => return Err(format!("unknown dtype '{other}'")),
    })
}

/// A recorded tensor: name, dtype, shape and values (as f64, the checker's type).
struct Recorded {
    name: String,
    dtype: DType,
    shape: Vec<usize>,
    values: Vec<f64>,
}

fn recorded(v: &Value) -> Result<Recorded, String> {
    let name = v["name"]
        .as_str()
        .ok_or("a tensor without a name")?
        .to_string();
    let shape = v["shape"]
        .as_array()
        .ok_or_else(|| format!("{name}: no shape"))?
        .iter()
        .map(|d| d.as_u64().map(|d| d as usize))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("{name}: a bad dim"))?;
    let values = v["values"]
        .as_array()
        .ok_or_else(|| format!("{name}: no values"))?
        .iter()
        .map(number)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Recorded {
        dtype: dtype(v["dtype"].as_str().unwrap_or_default())?,
        name,
        shape,
        values,
    })
}

/// The tolerance level an output is held to.
fn level(dtype: DType) -> Tolerance {
    if dtype.is_float() {
        Tolerance::Kernel
    } else {
        Tolerance::Exact
    }
}

/// How one fixture went.
enum Outcome {
    /// Compared every output; the largest error as a share of what the tolerance allows, and
    /// where.
    Compared {
        outputs: usize,
        worst: (f64, String),
    },
    Skipped(String),
    Mismatch(Vec<String>),
}

fn run_fixture(path: &Path) -> Result<Outcome, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let rec: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    if let Some(s) = rec["skipped"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["kind"] == "input")
    {
        return Ok(Outcome::Skipped(format!(
            "input '{}' was not recorded ({})",
            s["name"].as_str().unwrap_or("?"),
            s["reason"].as_str().unwrap_or("?")
        )));
    }
    let model_path = common::testdata().join(rec["model"].as_str().ok_or("no model path")?);
    let model = nnlint::load::onnx::load(&model_path).map_err(|e| e.to_string())?;
    let g = &model.graph;
    let mut exec = Executor::new(g, model.opset());
    let nodes: Vec<usize> = (0..g.nodes.len()).collect();
    let unsupported = exec.unsupported(&nodes);
    if !unsupported.is_empty() {
        let mut why: Vec<String> = unsupported
            .iter()
            .map(|(n, why)| format!("{}: {why}", g.nodes[*n].op_type))
            .collect();
        why.dedup();
        return Ok(Outcome::Skipped(why.join("; ")));
    }
    let mut feeds = HashMap::new();
    for input in rec["inputs"].as_array().ok_or("no inputs")? {
        let t = recorded(input)?;
        let v = g
            .value_by_name(&t.name)
            .ok_or_else(|| format!("the model has no input '{}'", t.name))?;
        let x = CTensor::from_vec(t.values, t.shape.as_slice(), &Device::Cpu)
            .map_err(|e| format!("input '{}': {e}", t.name))?;
        feeds.insert(v, x);
    }
    let outputs: Vec<Recorded> = rec["outputs"]
        .as_array()
        .ok_or("no outputs")?
        .iter()
        .map(recorded)
        .collect::<Result<_, _>>()?;
    let wanted = outputs
        .iter()
        .map(|o| {
            g.value_by_name(&o.name)
                .ok_or_else(|| format!("the model has no value '{}'", o.name))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let got = match exec.eval(&nodes, &feeds, &wanted) {
        Ok(got) => got,
        Err(e @ ExecError::Unsupported { .. }) => return Ok(Outcome::Skipped(e.to_string())),
        Err(e) => return Ok(Outcome::Mismatch(vec![format!("the checker failed: {e}")])),
    };
    let mut problems = Vec::new();
    let mut worst = (0.0f64, String::new());
    for (want, got) in outputs.iter().zip(&got) {
        if got.dims() != want.shape.as_slice() {
            problems.push(format!(
                "'{}': shape {:?}, onnxruntime {:?}",
                want.name,
                got.dims(),
                want.shape
            ));
            continue;
        }
        let values = got
            .flatten_all()
            .and_then(|t| t.to_vec1::<f64>())
            .map_err(|e| e.to_string())?;
        let level = level(want.dtype);
        let (atol, rtol) = level.atol_rtol(want.dtype);
        let mut bad = Vec::new();
        for (i, (&a, &b)) in values.iter().zip(&want.values).enumerate() {
            if !level.allows(want.dtype, a, b) {
                bad.push(i);
            } else if a.is_finite() && b.is_finite() && atol + rtol > 0.0 {
                let share = (a - b).abs() / (atol + rtol * b.abs());
                if share > worst.0 {
                    worst = (share, format!("'{}' [{i}]", want.name));
                }
            }
        }
        if let Some(&i) = bad.first() {
            problems.push(format!(
                "'{}' ({}, {:?} at {:?}): {} of {} values differ, first at {i}: checker {}, onnxruntime {}",
                want.name,
                want.dtype,
                level,
                (atol, rtol),
                bad.len(),
                values.len(),
                values[i],
                want.values[i]
            ));
        }
    }
    Ok(if problems.is_empty() {
        Outcome::Compared {
            outputs: outputs.len(),
            worst,
        }
    } else {
        Outcome::Mismatch(problems)
    })
}

#[test]
fn the_checker_matches_onnxruntime_op_by_op() {
    let dir = common::testdata().join("ort");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("testdata/ort exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    let mut compared = BTreeMap::new();
    let mut skipped = BTreeMap::new();
    let mut failures = Vec::new();
    for path in &files {
        let key = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        match run_fixture(path) {
            Ok(Outcome::Compared { outputs, worst }) => {
                compared.insert(key, (outputs, worst));
            }
            Ok(Outcome::Skipped(why)) => {
                skipped.insert(key, why);
            }
            Ok(Outcome::Mismatch(problems)) => {
                failures.push(format!("{key}:\n    {}", problems.join("\n    ")))
            }
            Err(e) => failures.push(format!("{key}: {e}")),
        }
    }
    let outputs: usize = compared.values().map(|(n, _)| n).sum();
    println!(
        "checker vs onnxruntime: {} fixtures compared ({outputs} outputs), {} skipped, {} failed",
        compared.len(),
        skipped.len(),
        failures.len()
    );
    let mut closest: Vec<_> = compared.iter().collect();
    closest.sort_by(|a, b| b.1 .1 .0.total_cmp(&a.1 .1 .0));
    println!("closest to the tolerance (largest error / allowed):");
    for (key, (_, (share, at))) in closest.iter().take(8) {
        println!("  {share:.3}  {key} {at}");
    }
    println!("skipped:");
    for (key, why) in &skipped {
        println!("  {key}: {why}");
    }
    let expected: BTreeMap<&str, &str> = SKIPPED.iter().copied().collect();
    for key in skipped.keys() {
        if !expected.contains_key(key.as_str()) {
            failures.push(format!(
                "{key} is skipped ({}) but not listed in SKIPPED",
                skipped[key]
            ));
        }
    }
    for (key, why) in &expected {
        if compared.contains_key(*key) {
            failures.push(format!(
                "{key} is listed in SKIPPED ({why}) but now runs: remove it from the list"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixtures disagree with onnxruntime:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
