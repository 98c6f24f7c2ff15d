//! Issue 21, item 7: diffusers pipelines (`model_index.json`) and sentence-transformers models
//! (`modules.json`) are read as one parameter table, each component's tensors prefixed with its
//! name, numbers exact from the safetensors headers; a sentence-transformers model whose
//! transformer is a checkpoint is estimated as that checkpoint, its later modules rows of their own. Component names are untrusted: nothing may
//! lead out of the model's folder. (tests/hub_net.rs reads the same repos over the network.)

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

fn mem_json(dir: &Path) -> Value {
    common::run_json(&["mem", &dir.display().to_string(), "-f", "json"])
}

/// Checks a pipeline's JSON: valid against the schema, each component's rows adding up to its
/// tensors, the totals to all of them, and the notes saying what was read.
pub fn check(v: &Value, components: &[(&str, &[common::Tensors])], without: &str) {
    let errors = common::schema_errors("mem.schema.json", v);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(v["format"], "safetensors");
    let layers = v["layers"].as_array().unwrap();
    let (mut all_p, mut all_b) = (0, 0);
    for (name, parts) in components {
        let (mut p, mut b) = (0, 0);
        for t in *parts {
            let (pp, bb) = common::counted(t);
            p += pp;
            b += bb;
        }
        let rows: Vec<&Value> = layers
            .iter()
            .filter(|l| l["name"].as_str().unwrap().starts_with(&format!("{name}.")))
            .collect();
        assert!(!rows.is_empty(), "{name}: {v:#}");
        let got_p: u64 = rows
            .iter()
            .map(|l| l["params"].as_u64().unwrap() + l["buffers"].as_u64().unwrap())
            .sum();
        let got_b: u64 = rows
            .iter()
            .map(|l| l["param_bytes"].as_u64().unwrap() + l["buffer_bytes"].as_u64().unwrap())
            .sum();
        assert_eq!((got_p, got_b), (p, b), "{name}");
        let notes = v["notes"].to_string();
        assert!(
            notes.contains(&format!(": {p} elements, {b} bytes (")),
            "{name}: {notes}"
        );
        all_p += p;
        all_b += b;
    }
    let rows: usize = components.len();
    assert!(rows > 0);
    let t = &v["totals"];
    assert_eq!(
        t["params"].as_u64().unwrap() + t["buffers"].as_u64().unwrap(),
        all_p
    );
    assert_eq!(
        t["param_bytes"].as_u64().unwrap() + t["buffer_bytes"].as_u64().unwrap(),
        all_b
    );
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("parameters only:") && n.ends_with("are out of scope")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| *n == format!("without weights: {without}")),
        "{notes:?}"
    );
}

pub const DIFFUSERS: &[(&str, &[common::Tensors])] = &[
    ("text_encoder", &[common::TEXT_ENCODER]),
    ("unet", &[common::UNET_1, common::UNET_2]),
    ("vae", &[common::VAE]),
];
fn folder(files: &BTreeMap<String, Vec<u8>>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::write_files(dir.path(), files);
    dir
}

#[test]
fn a_diffusers_folder_is_one_table_of_its_components() {
    let d = folder(&common::diffusers_files());
    let v = mem_json(d.path());
    check(&v, DIFFUSERS, "scheduler, tokenizer");
    // rows grouped by component, in name order
    let names: Vec<&str> = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    let first = |c: &str| names.iter().position(|n| n.starts_with(c)).unwrap();
    assert!(first("text_encoder.") < first("unet.") && first("unet.") < first("vae."));
    assert!(names.contains(&"unet.conv_in") && names.contains(&"unet.conv_out"));
    // the text report: the same rows and the notes
    let out = common::nnlint(&["mem", &d.path().display().to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let text = common::stdout(&out);
    assert!(
        text.contains("unet.conv_in") && text.contains("vae.encoder.conv_in"),
        "{text}"
    );
    assert!(
        text.contains("diffusers pipeline (model_index.json): 3 components with weights"),
        "{text}"
    );
    assert!(text.contains("out of scope"), "{text}");
    // the index path names the pipeline too
    let by_file = mem_json(&d.path().join("model_index.json"));
    assert_eq!(by_file["totals"], v["totals"]);
}

/// A sentence-transformers model is its transformer, estimated as a checkpoint (sequence,
/// training, fit), plus the modules after it as rows of their own: a Dense layer runs once per
/// sequence on the pooled vector (its output and MACs per sequence, its parameters trained).
#[test]
fn a_sentence_transformers_model_is_its_transformer_and_its_modules() {
    let d = folder(&common::sentence_transformers_files());
    let bert = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/llm/bert_model");
    let args = |p: &Path, extra: &[&str]| {
        let mut a = vec!["mem".to_string(), p.display().to_string()];
        a.extend(["-f", "json", "--batch", "4", "--seq", "32"].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |p: &Path, extra: &[&str]| {
        let a = args(p, extra);
        common::run_json(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (v, b) = (run(d.path(), &[]), run(&bert, &[]));
    let errors = common::schema_errors("mem.schema.json", &v);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(v["format"], b["format"]);
    // the Dense module: 32 -> 16 with a bias, once per sequence
    let dense = (32 * 16 + 16, (32 * 16 + 16) * 4);
    let rows = v["layers"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|l| l["name"] == "2_Dense.linear")
        .expect("a Dense row");
    assert_eq!(row["op"], "Dense");
    assert_eq!(row["params"], dense.0);
    assert_eq!(row["param_bytes"], dense.1);
    assert_eq!(
        row["activation_bytes"],
        4 * 16 * 4,
        "batch 4 x 16 outputs x fp32"
    );
    assert_eq!(row["macs"], 4 * 32 * 16);
    let t = |v: &Value, k: &str| v["totals"][k].as_u64().unwrap();
    assert_eq!(t(&v, "params"), t(&b, "params") + dense.0);
    assert_eq!(t(&v, "param_bytes"), t(&b, "param_bytes") + dense.1);
    assert_eq!(
        t(&v, "activation_bytes"),
        t(&b, "activation_bytes") + 4 * 16 * 4
    );
    // every other row is the transformer's, unchanged
    let others: Vec<&Value> = rows
        .iter()
        .filter(|l| l["name"] != "2_Dense.linear")
        .collect();
    assert_eq!(others.len(), b["layers"].as_array().unwrap().len());
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("sentence-transformers model (modules.json): its transformer (the folder's root) is estimated as a checkpoint")
            && notes.contains("2_Dense (Dense, 528 parameters")
            && notes.contains("without weights: 1_Pooling"),
        "{notes}"
    );
    // training: the Dense trains with the transformer
    let (v, b) = (run(d.path(), &["--train"]), run(&bert, &["--train"]));
    assert_eq!(
        v["llm"]["trainable_params"],
        b["llm"]["trainable_params"].as_u64().unwrap() + dense.0,
        "{:#}",
        v["llm"]
    );
    // the listing names the folder too
    let by_file = common::run_json(&[
        "mem",
        &d.path().join("modules.json").display().to_string(),
        "-f",
        "json",
    ]);
    assert_eq!(
        by_file["totals"]["params"],
        t(&run(d.path(), &[]), "params")
    );
}

/// Without the transformer's config.json there is no architecture to estimate: the repo is
/// listed by module, parameters only, as a pipeline is.
#[test]
fn a_sentence_transformers_repo_without_a_transformer_config_is_listed() {
    let d = folder(&common::sentence_transformers_files_with(false));
    let v = mem_json(d.path());
    let errors = common::schema_errors("mem.schema.json", &v);
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(v["format"], "safetensors");
    let bert = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/llm/bert_model");
    let b = mem_json(&bert);
    assert_eq!(
        v["totals"]["params"].as_u64().unwrap(),
        b["totals"]["params"].as_u64().unwrap() + 32 * 16 + 16
    );
    let notes = v["notes"].to_string();
    assert!(
        notes.contains("sentence-transformers model (modules.json): 2 components")
            && notes.contains("out of scope"),
        "{notes}"
    );
}

fn error_line(dir: &Path) -> String {
    let out = common::nnlint(&["mem", &dir.display().to_string()]);
    let err = common::stderr(&out);
    assert!(!err.contains("panicked"), "nnlint panicked:\n{err}");
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line: {err}");
    lines[0].to_string()
}

#[test]
fn component_names_and_links_never_leave_the_folder() {
    // names from the listing
    for (file, body) in [
        ("model_index.json", r#"{"../outside": ["diffusers", "X"]}"#),
        ("model_index.json", r#"{"/etc": ["diffusers", "X"]}"#),
        ("model_index.json", r#"{"a/b": ["diffusers", "X"]}"#),
        ("modules.json", r#"[{"path": "../../etc", "type": "x"}]"#),
        ("modules.json", r#"[{"path": "/tmp", "type": "x"}]"#),
        ("modules.json", r#"{"not": "a list"}"#),
        ("model_index.json", r#"not json"#),
    ] {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(file), body).unwrap();
        let e = error_line(d.path());
        assert!(e.contains(file), "{body}: {e}");
    }
    #[cfg(unix)]
    {
        let outside = folder(&common::diffusers_files());
        // a component folder that is a link out of the model's folder
        let d = folder(&common::diffusers_files());
        std::fs::remove_dir_all(d.path().join("vae")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("vae"), d.path().join("vae")).unwrap();
        let e = error_line(d.path());
        assert!(e.contains("resolves outside the model's folder"), "{e}");
        // a weight file that is a link out
        let d = folder(&common::diffusers_files());
        let w = d.path().join("vae/diffusion_pytorch_model.safetensors");
        std::fs::remove_file(&w).unwrap();
        std::os::unix::fs::symlink(
            outside
                .path()
                .join("vae/diffusion_pytorch_model.safetensors"),
            &w,
        )
        .unwrap();
        let e = error_line(d.path());
        assert!(e.contains("resolves outside the model's folder"), "{e}");
        // a shard that is a link out
        let d = folder(&common::diffusers_files());
        let s = d
            .path()
            .join("unet/diffusion_pytorch_model-00002-of-00002.safetensors");
        std::fs::remove_file(&s).unwrap();
        std::os::unix::fs::symlink(
            outside
                .path()
                .join("unet/diffusion_pytorch_model-00002-of-00002.safetensors"),
            &s,
        )
        .unwrap();
        let e = error_line(d.path());
        assert!(e.contains("outside"), "{e}");
    }
    // no component holds weights; a component with two candidate files
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("model_index.json"),
        r#"{"scheduler": ["diffusers", "PNDMScheduler"]}"#,
    )
    .unwrap();
    let e = error_line(d.path());
    assert!(e.contains("hold no safetensors weights"), "{e}");
    let d = folder(&common::diffusers_files());
    std::fs::write(
        d.path().join("vae/extra.safetensors"),
        common::safetensors_file(common::VAE),
    )
    .unwrap();
    std::fs::remove_file(d.path().join("vae/diffusion_pytorch_model.safetensors")).unwrap();
    std::fs::write(
        d.path().join("vae/other.safetensors"),
        common::safetensors_file(common::VAE),
    )
    .unwrap();
    let e = error_line(d.path());
    assert!(e.contains("holds 2 safetensors files"), "{e}");
}
