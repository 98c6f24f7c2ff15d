//! Stage 1, loading: bytes → protobuf or headers → IR. Nothing here reads tensor data.

pub mod gguf;
pub mod hf;
pub mod onnx;
#[allow(clippy::all, missing_docs, rustdoc::all)]
#[rustfmt::skip]
pub mod onnx_pb;
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

/// Loads a model, choosing the format from the name and, failing that, from the first bytes.
pub fn load(path: &Path) -> Result<Loaded> {
    let name = path.to_string_lossy();
    if path != Path::new("-") && path.is_dir() {
        return hf::load(path).map(Loaded::Checkpoint);
    }
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
