//! Hugging Face checkpoint folders: `config.json` (required), `generation_config.json`
//! (optional) and the weights as `model.safetensors`, a sharded
//! `model.safetensors.index.json`, or a single other `*.safetensors` file. Headers only.

use std::path::{Path, PathBuf};

use super::safetensors::{self, Weights};
use crate::error::{Error, Result};

/// A checkpoint folder.
#[derive(Clone, Debug)]
pub struct Checkpoint {
    pub dir: PathBuf,
    pub config_path: PathBuf,
    pub config: serde_json::Value,
    pub generation: Option<serde_json::Value>,
    /// `preprocessor_config.json`: the image processor's settings of a multimodal model.
    pub preprocessor: Option<serde_json::Value>,
    pub weights: Weights,
    /// A sentence-transformers model's modules after its transformer (`2_Dense`), whose tensors
    /// `weights` holds as `{module}.{tensor}`, with their class (`Dense`): they run once per
    /// sequence, on the pooled vector.
    pub modules: Vec<(String, String)>,
}

/// Whether `path` is a folder holding a `config.json`.
pub fn is_checkpoint(path: &Path) -> bool {
    path.is_dir()
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::malformed(path, format!("not valid JSON: {e}")))
}

/// Loads a checkpoint folder's config and weight headers.
pub fn load(dir: &Path) -> Result<Checkpoint> {
    load_within(dir, None)
}

/// [`load`] for a folder whose files are links into another folder that `links_within` holds (a
/// Hugging Face cache snapshot, whose files link into its repo's `blobs/`): a sharded index's
/// shards may resolve anywhere inside it, and nowhere else. `None`: the folder itself.
pub fn load_within(dir: &Path, links_within: Option<&Path>) -> Result<Checkpoint> {
    load_declared(dir, links_within, None)
}

/// [`load_within`] for a folder whose weight files may be header-only copies of the sizes
/// `declared` gives (nnlint's Hub cache, `load::hub_store`).
pub fn load_declared(
    dir: &Path,
    links_within: Option<&Path>,
    declared: Option<&safetensors::Declared>,
) -> Result<Checkpoint> {
    let config_path = dir.join("config.json");
    if !config_path.is_file() {
        return Err(Error::refused(
            dir,
            "is a directory without a config.json: nnlint reads model files and Hugging Face checkpoint folders (config.json and safetensors weights)",
        ));
    }
    let config = read_json(&config_path)?;
    if !config.is_object() {
        return Err(Error::malformed(&config_path, "is not a JSON object"));
    }
    let generation = {
        let p = dir.join("generation_config.json");
        p.is_file().then(|| read_json(&p)).transpose()?
    };
    let preprocessor = {
        let p = dir.join("preprocessor_config.json");
        p.is_file().then(|| read_json(&p)).transpose()?
    };
    let weights_path = weights_file(dir)?;
    let weights = safetensors::load_declared(&weights_path, links_within, declared)?;
    Ok(Checkpoint {
        dir: dir.to_path_buf(),
        config_path,
        config,
        generation,
        preprocessor,
        weights,
        modules: Vec::new(),
    })
}

/// The weights of a folder: the sharded index, `model.safetensors`, or the one safetensors file.
fn weights_file(dir: &Path) -> Result<PathBuf> {
    for name in ["model.safetensors.index.json", "model.safetensors"] {
        let p = dir.join(name);
        if p.is_file() {
            return Ok(p);
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| Error::io(dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.ends_with(".safetensors") || n.ends_with(".safetensors.index.json")
                })
        })
        .collect();
    found.sort();
    let indexes: Vec<&PathBuf> = found.iter().filter(|p| safetensors::is_index(p)).collect();
    match (indexes.as_slice(), found.as_slice()) {
        ([one], _) => Ok((*one).clone()),
        ([], [one]) => Ok(one.clone()),
        ([], []) => {
            let bin = dir.join("pytorch_model.bin");
            Err(Error::refused(
                dir,
                if bin.exists() {
                    "holds pytorch_model.bin (a pickle) but no safetensors weights: nnlint reads safetensors headers only; convert with `save_pretrained(..., safe_serialization=True)`"
                } else {
                    "has a config.json but no safetensors weights (model.safetensors or model.safetensors.index.json)"
                },
            ))
        }
        _ => Err(Error::refused(
            dir,
            format!(
                "holds {} safetensors files and no model.safetensors.index.json naming which are the model's shards",
                found.len()
            ),
        )),
    }
}
