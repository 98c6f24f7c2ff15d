//! Helpers shared by the integration tests: fixture paths, expected values, and staging models whose
//! external data was not committed (a sparse zero-filled file of the recorded length stands in).

#![allow(dead_code)]

pub mod onnx;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The variables that choose a Hub ID's caches, endpoint, token or proxy, cleared in every run of
/// the Hub tests so that the machine's own settings never leak in (each test sets what it needs).
pub const HUB_ENV: &[&str] = &[
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HOME",
    "XDG_CACHE_HOME",
    "HF_ENDPOINT",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "NNLINT_CACHE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_HUB_DISABLE_IMPLICIT_TOKEN",
    "HF_HUB_DOWNLOAD_TIMEOUT",
    "ALL_PROXY",
    "all_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
];

pub fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

/// A fixture path under testdata/ (`rules/large-fc-head/fire.onnx`, `models/rewrite/vgg_like.onnx`).
pub fn fixture(rel: &str) -> String {
    testdata().join(rel).display().to_string()
}

/// Runs the real binary.
pub fn nnlint(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nnlint"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .expect("the nnlint binary runs")
}

/// Runs the binary, which must exit with one of `codes`, and parses its standard output as JSON.
pub fn run_json_with(args: &[&str], codes: &[i32]) -> (serde_json::Value, i32) {
    let out = nnlint(args);
    let code = out.status.code().expect("an exit code");
    assert!(
        codes.contains(&code),
        "nnlint {args:?} exited {code}: {}",
        stderr(&out)
    );
    let v = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("nnlint {args:?}: not JSON ({e}): {}", stdout(&out)));
    (v, code)
}

/// Runs the binary, which must succeed, and parses its standard output as JSON.
pub fn run_json(args: &[&str]) -> serde_json::Value {
    run_json_with(args, &[0]).0
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The expected-values file for a model path relative to testdata/ (`models/torch/resnet18.onnx`).
pub fn expected(model: &str) -> serde_json::Value {
    let key = model
        .trim_start_matches("models/")
        .trim_end_matches(".onnx")
        .replace('/', "__");
    let path = testdata().join("expected").join(format!("{key}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("expected values are JSON")
}

/// A model ready to load: the fixture itself, or a copy in a temporary directory next to a sparse
/// data file when its external data was not committed.
pub struct Staged {
    pub path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

pub fn stage(model: &str) -> Staged {
    let src = testdata().join(model);
    let exp = expected(model);
    let Some(ext) = exp.get("external_data") else {
        return Staged {
            path: src,
            _dir: None,
        };
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let dst = dir.path().join(src.file_name().unwrap());
    std::fs::copy(&src, &dst).expect("copy model");
    let data = dir.path().join(ext["file"].as_str().unwrap());
    let f = std::fs::File::create(&data).expect("create data file");
    f.set_len(ext["length"].as_u64().unwrap())
        .expect("sparse data file");
    Staged {
        path: dst,
        _dir: Some(dir),
    }
}

/// The errors of `instance` against a schema documented under docs/ (`mem.schema.json`,
/// `lint.schema.json`, `fit.schema.json`), each with where it is; empty when it is valid.
pub fn schema_errors(schema: &str, instance: &serde_json::Value) -> Vec<String> {
    let path = testdata().join("../docs").join(schema);
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("the schema file")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    validator
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect()
}

/// A safetensors file of zero-filled tensors `(name, dtype, shape)`, laid out in the order
/// given (the header lists them sorted, as safetensors writes it).
pub fn safetensors_file(tensors: &[(&str, &str, &[u64])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, dtype, shape) in tensors {
        let size = match *dtype {
            "F32" | "I32" => 4,
            "F16" | "BF16" => 2,
            "I64" | "F64" => 8,
            _ => 1,
        };
        let n = shape.iter().product::<u64>() * size;
        header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}),
        );
        offset += n;
    }
    let mut text = serde_json::Value::Object(header).to_string();
    // padded with spaces to 8 bytes, as safetensors writes it, so the data is aligned
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(text.as_bytes());
    out.resize(out.len() + offset as usize, 0);
    out
}

/// The parameters (elements) and bytes of tensors as [`safetensors_file`] takes them.
pub fn counted(tensors: &[(&str, &str, &[u64])]) -> (u64, u64) {
    tensors.iter().fold((0, 0), |(p, b), (_, dtype, shape)| {
        let n: u64 = shape.iter().product();
        let size = match *dtype {
            "F32" | "I32" => 4,
            "F16" | "BF16" => 2,
            "I64" | "F64" => 8,
            _ => 1,
        };
        (p + n, b + n * size)
    })
}

pub type Tensors = &'static [(&'static str, &'static str, &'static [u64])];

/// The tensors of a tiny diffusers pipeline's components (the UNet in two shards).
pub const UNET_1: Tensors = &[
    ("conv_in.weight", "F32", &[8, 4, 3, 3]),
    ("conv_in.bias", "F32", &[8]),
];
pub const UNET_2: Tensors = &[
    ("conv_out.weight", "F32", &[4, 8, 3, 3]),
    ("conv_out.bias", "F32", &[4]),
];
pub const VAE: Tensors = &[
    ("encoder.conv_in.weight", "F32", &[8, 3, 3, 3]),
    ("encoder.conv_in.bias", "F32", &[8]),
    ("decoder.conv_out.weight", "F32", &[3, 8, 3, 3]),
];
pub const TEXT_ENCODER: Tensors = &[
    (
        "text_model.embeddings.token_embedding.weight",
        "F16",
        &[100, 16],
    ),
    ("text_model.final_layer_norm.weight", "F16", &[16]),
    ("text_model.embeddings.position_ids", "I64", &[1, 8]),
];

/// The files of a tiny diffusers repo (paths relative to its root): `unet` sharded with an
/// index, `vae` as `diffusion_pytorch_model.safetensors`, `text_encoder` as `model.safetensors`,
/// a scheduler and a tokenizer without weights, an absent safety checker.
pub fn diffusers_files() -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut f = std::collections::BTreeMap::new();
    let idx = serde_json::json!({
        "_class_name": "StableDiffusionPipeline",
        "_diffusers_version": "0.30.0",
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "scheduler": ["diffusers", "PNDMScheduler"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "safety_checker": [null, null],
        "requires_safety_checker": false
    });
    f.insert("model_index.json".into(), idx.to_string().into_bytes());
    let config = |class: &str| {
        serde_json::json!({ "_class_name": class })
            .to_string()
            .into_bytes()
    };
    f.insert("unet/config.json".into(), config("UNet2DConditionModel"));
    let s1 = "diffusion_pytorch_model-00001-of-00002.safetensors";
    let s2 = "diffusion_pytorch_model-00002-of-00002.safetensors";
    let mut map = serde_json::Map::new();
    for (t, _, _) in UNET_1 {
        map.insert(t.to_string(), s1.into());
    }
    for (t, _, _) in UNET_2 {
        map.insert(t.to_string(), s2.into());
    }
    f.insert(
        "unet/diffusion_pytorch_model.safetensors.index.json".into(),
        serde_json::json!({"metadata": {}, "weight_map": map})
            .to_string()
            .into_bytes(),
    );
    f.insert(format!("unet/{s1}"), safetensors_file(UNET_1));
    f.insert(format!("unet/{s2}"), safetensors_file(UNET_2));
    f.insert("vae/config.json".into(), config("AutoencoderKL"));
    f.insert(
        "vae/diffusion_pytorch_model.safetensors".into(),
        safetensors_file(VAE),
    );
    f.insert("text_encoder/config.json".into(), config("CLIPTextModel"));
    f.insert(
        "text_encoder/model.safetensors".into(),
        safetensors_file(TEXT_ENCODER),
    );
    f.insert(
        "scheduler/scheduler_config.json".into(),
        config("PNDMScheduler"),
    );
    f.insert("tokenizer/vocab.json".into(), b"{}".to_vec());
    f
}

/// A sentence-transformers Dense module from the transformer's width (32) to 16.
pub const ST_DENSE: Tensors = &[
    ("linear.weight", "F32", &[16, 32]),
    ("linear.bias", "F32", &[16]),
];

/// The files of a tiny sentence-transformers repo: the transformer at the root (the bert_model
/// fixture, a BertModel of width 32), `1_Pooling/` (no weights), `2_Dense/` with its own
/// `model.safetensors`. `transformer_config`: whether the root holds the transformer's
/// `config.json` (without it the repo is only listed).
pub fn sentence_transformers_files_with(
    transformer_config: bool,
) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut f = std::collections::BTreeMap::new();
    let modules = serde_json::json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}
    ]);
    f.insert("modules.json".into(), modules.to_string().into_bytes());
    let bert = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/llm/bert_model");
    if transformer_config {
        f.insert(
            "config.json".into(),
            std::fs::read(bert.join("config.json")).unwrap(),
        );
    }
    f.insert(
        "model.safetensors".into(),
        std::fs::read(bert.join("model.safetensors")).unwrap(),
    );
    f.insert(
        "1_Pooling/config.json".into(),
        br#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#.to_vec(),
    );
    f.insert(
        "2_Dense/config.json".into(),
        br#"{"in_features": 32, "out_features": 16}"#.to_vec(),
    );
    f.insert(
        "2_Dense/model.safetensors".into(),
        safetensors_file(ST_DENSE),
    );
    f
}

/// [`sentence_transformers_files_with`] the transformer's `config.json`, as repos ship.
pub fn sentence_transformers_files() -> std::collections::BTreeMap<String, Vec<u8>> {
    sentence_transformers_files_with(true)
}

/// Writes `files` (relative paths) under `dir`.
pub fn write_files(dir: &Path, files: &std::collections::BTreeMap<String, Vec<u8>>) {
    for (name, bytes) in files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
}

/// The element of the JSON array `v[list]` whose `field` equals `value` (a layer by name, a
/// plan by name), or a panic naming what was missing.
pub fn find_in<'a>(
    v: &'a serde_json::Value,
    list: &str,
    field: &str,
    value: &str,
) -> &'a serde_json::Value {
    v[list]
        .as_array()
        .unwrap_or_else(|| panic!("no array {list}: {v:#}"))
        .iter()
        .find(|e| e[field] == value)
        .unwrap_or_else(|| panic!("no {list} entry with {field} {value}: {v:#}"))
}
