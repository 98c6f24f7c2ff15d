//! Stage 1, loading: bytes → protobuf or headers → IR. Nothing here reads tensor data.

pub mod gguf;
pub mod hf;
pub mod hub;
pub mod hub_net;
pub mod hub_store;
pub mod onnx;
#[allow(clippy::all, missing_docs, rustdoc::all)]
#[rustfmt::skip]
pub mod onnx_pb;
mod onnx_shell;
pub mod pipeline;
pub mod safetensors;
pub(crate) mod skim;

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::ir::Model;

/// A loaded model: a graph, or weights only.
#[derive(Debug)]
pub enum Loaded {
    Onnx(Model),
    Weights(safetensors::Weights),
    /// A Hugging Face checkpoint folder (config.json + safetensors).
    Checkpoint(hf::Checkpoint),
    Gguf(gguf::Gguf),
}

/// What a model argument names: the path to read, and the line that says which file of a
/// folder was chosen.
#[derive(Debug)]
pub struct Resolved {
    pub path: std::path::PathBuf,
    /// Set when `path` is a file picked from a folder without a `config.json`.
    pub chosen: Option<String>,
}

/// The one rule for folders, shared by every command: a folder with a `model_index.json`
/// (diffusers) or a `modules.json` (sentence-transformers) is a pipeline (`pipeline.rs`), read
/// as its components' weights, except a sentence-transformers model whose transformer module is
/// a checkpoint (a `config.json`), estimated as that checkpoint with its other modules as rows
/// of their own; a folder with a `config.json` is a Hugging Face checkpoint; a folder without one is read as its only model file (one `.onnx`, one `.gguf`
/// besides a multimodal projector, one safetensors index, or one `.safetensors` when there is no
/// index), said in one line; a folder with several is refused, naming them. Any other path is
/// read as it is.
pub fn resolve(path: &Path) -> Result<Resolved> {
    let as_is = || Resolved {
        path: path.to_path_buf(),
        chosen: None,
    };
    if path == Path::new("-")
        || !path.is_dir()
        || path.join("config.json").is_file()
        || pipeline::detect(path).is_some()
    {
        return Ok(as_is());
    }
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(path)
        .map_err(|e| Error::io(path, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    let name = |p: &Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let indexes: Vec<&std::path::PathBuf> = files
        .iter()
        .filter(|p| name(p).ends_with(".safetensors.index.json"))
        .collect();
    let ggufs: Vec<&std::path::PathBuf> = files
        .iter()
        .filter(|p| name(p).ends_with(".gguf"))
        .collect();
    // a projector beside its model is read with it (gguf::load)
    let models = ggufs.iter().filter(|p| !name(p).contains("mmproj")).count();
    let mut candidates: Vec<&std::path::PathBuf> = files
        .iter()
        .filter(|p| {
            let n = name(p);
            n.ends_with(".onnx")
                || n.ends_with(".safetensors.index.json")
                || (n.ends_with(".safetensors") && indexes.is_empty())
                || (n.ends_with(".gguf") && (models == 0 || !n.contains("mmproj")))
        })
        .collect();
    candidates.dedup();
    match candidates.as_slice() {
        [one] => Ok(Resolved {
            path: (*one).clone(),
            chosen: Some(format!(
                "{}: reading {}, the folder's only model file (no config.json)",
                path.display(),
                name(one)
            )),
        }),
        [] => Err(Error::refused(
            path,
            "is a directory without a config.json or a model file (.onnx, .gguf, .safetensors): nnlint reads model files and Hugging Face checkpoint folders",
        )),
        many => {
            let shown: Vec<String> = many.iter().take(4).map(|p| name(p)).collect();
            Err(Error::refused(
                path,
                format!(
                    "is a directory without a config.json and with {} model files ({}{}): name the one to read",
                    many.len(),
                    shown.join(", "),
                    if many.len() > shown.len() { ", ..." } else { "" }
                ),
            ))
        }
    }
}

/// Loads a model, choosing the format from the name and, failing that, from the first bytes. A
/// folder is resolved by [`resolve`]'s rule.
pub fn load(path: &Path) -> Result<Loaded> {
    if path != Path::new("-") && path.is_dir() {
        // a diffusers pipeline or a sentence-transformers model: its components' weights
        if pipeline::detect(path).is_some() {
            if let Some(ck) = pipeline::transformer_checkpoint(path, None, None)? {
                return Ok(Loaded::Checkpoint(ck));
            }
            return pipeline::load_declared(path, None, None).map(Loaded::Weights);
        }
        let r = resolve(path)?;
        if r.chosen.is_none() {
            return hf::load(path).map(Loaded::Checkpoint);
        }
        return load(&r.path);
    }
    // a pipeline's listing names its folder
    if let (Some(file), Some(dir)) = (path.file_name(), path.parent()) {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if pipeline::detect(dir).is_some_and(|k| file == k.file()) {
            return load(dir);
        }
    }
    let name = path.to_string_lossy();
    if name.ends_with(".gguf") {
        return gguf::load(path).map(Loaded::Gguf);
    }
    if name.ends_with(".safetensors") || safetensors::is_index(path) {
        return safetensors::load(path).map(Loaded::Weights);
    }
    if name.ends_with(".onnx") || path == Path::new("-") {
        return onnx::load(path).map(Loaded::Onnx);
    }
    let head = sniff(path)?;
    if gguf::is_gguf(&head) {
        gguf::load(path).map(Loaded::Gguf)
    } else if head.len() == 9 && head[8] == b'{' {
        safetensors::load(path).map(Loaded::Weights)
    } else {
        onnx::load(path).map(Loaded::Onnx)
    }
}

/// Loads a Hugging Face cache snapshot ([`hub::find`]) as a local folder or file: a checkpoint's
/// sharded index may name shards that resolve anywhere inside the repo's cache folder (its
/// `blobs/`), never outside it.
/// A snapshot of nnlint's own cache holds header-only weight files whose real sizes it declares.
pub fn load_snapshot(s: &hub::Snapshot) -> Result<Loaded> {
    match (&s.id.file, &s.declared) {
        (Some(_), None) => load(&s.path),
        (Some(_), Some(d)) => {
            let len = d.get(&s.path).copied().ok_or_else(|| {
                Error::malformed(&s.path, "is not in its cache manifest (run with --refresh)")
            })?;
            gguf::load_declared(&s.path, Some(len)).map(Loaded::Gguf)
        }
        (None, d) if pipeline::detect(&s.dir).is_some() => {
            match pipeline::transformer_checkpoint(&s.dir, Some(&s.repo_dir), d.as_ref())? {
                Some(ck) => Ok(Loaded::Checkpoint(ck)),
                None => pipeline::load_declared(&s.dir, Some(&s.repo_dir), d.as_ref())
                    .map(Loaded::Weights),
            }
        }
        (None, d) => {
            hf::load_declared(&s.dir, Some(&s.repo_dir), d.as_ref()).map(Loaded::Checkpoint)
        }
    }
}

/// An ONNX model for a command that needs its graph: a weights-only file (safetensors, a sharded
/// index) is refused in one line saying what `what` needs, rather than failing to decode as
/// protobuf.
pub fn load_graph(path: &Path, what: &str) -> Result<crate::ir::Model> {
    into_graph(path, load(path)?, what)
}

/// [`load_graph`] for a model already loaded (standard input can be read once only).
pub fn into_graph(path: &Path, loaded: Loaded, what: &str) -> Result<crate::ir::Model> {
    match loaded {
        Loaded::Onnx(m) => Ok(m),
        Loaded::Weights(_) => Err(Error::refused(
            path,
            format!(
                "is a weights-only file (safetensors): {what} needs a graph (its layers and activations); pass the model exported to ONNX"
            ),
        )),
        Loaded::Checkpoint(_) | Loaded::Gguf(_) => Err(Error::refused(
            path,
            format!(
                "is a language-model checkpoint: {what} needs an ONNX graph; `nnlint mem` and `nnlint fit` read checkpoints"
            ),
        )),
    }
}

/// Opens a model file for reading, with its length. Directories, pipes and devices are refused
/// before they are opened (opening a FIFO would block, mapping a device fails obscurely).
pub(crate) fn open_file(path: &Path) -> Result<(std::fs::File, u64)> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        return Err(Error::refused(path, "is a directory, not a model file"));
    }
    if !meta.is_file() {
        return Err(Error::refused(
            path,
            "is not a regular file (a pipe or a device): to read a model from a pipe, pass `-`",
        ));
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    Ok((file, meta.len()))
}

/// The first 9 bytes (fewer for a shorter file): a safetensors file starts with an 8-byte
/// little-endian header length and then `{`, a GGUF file with `GGUF`.
fn sniff(path: &Path) -> Result<Vec<u8>> {
    let mut head = [0u8; 9];
    let (mut f, _) = open_file(path)?;
    let mut got = 0;
    while got < head.len() {
        match f.read(&mut head[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(head[..got].to_vec())
}
