//! safetensors loading: single files and sharded checkpoints (`*.safetensors.index.json`), header
//! only. Each file is memory-mapped and only its JSON header is parsed (by the `safetensors` crate,
//! which validates the header size cap, offsets, overlap and overflow); tensor data is never touched.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::ir::DType;

/// The tensors of a weights checkpoint (one file or several shards).
#[derive(Clone, Debug)]
pub struct Weights {
    pub path: PathBuf,
    /// Shard files, in the order first named by the index (one entry for a single file).
    pub shards: Vec<PathBuf>,
    /// Every tensor, in file order (shards in order, tensors by offset).
    pub tensors: Vec<WeightTensor>,
    pub warnings: Vec<String>,
}

/// One stored tensor: its name, type and shape.
#[derive(Clone, Debug)]
pub struct WeightTensor {
    pub name: String,
    pub dtype: DType,
    pub shape: Vec<u64>,
    /// Index into [`Weights::shards`].
    pub shard: usize,
}

impl WeightTensor {
    pub fn numel(&self) -> u64 {
        self.shape.iter().product()
    }

    pub fn bytes(&self) -> u64 {
        self.dtype.bytes_for(self.numel()).unwrap_or(0)
    }
}

/// Whether a path names a sharded checkpoint's index.
pub fn is_index(path: &Path) -> bool {
    path.to_string_lossy().ends_with(".index.json")
}

/// Loads a `.safetensors` file or a `*.safetensors.index.json` index with its shards.
pub fn load(path: &Path) -> Result<Weights> {
    if is_index(path) {
        load_sharded(path)
    } else {
        let mut warnings = Vec::new();
        let tensors = read_header(path, 0, &mut warnings)?;
        Ok(Weights {
            path: path.to_path_buf(),
            shards: vec![path.to_path_buf()],
            tensors,
            warnings,
        })
    }
}

fn convert_dtype(d: safetensors::Dtype) -> Option<DType> {
    use safetensors::Dtype as S;
    Some(match d {
        S::BOOL => DType::Bool,
        S::F4 => DType::F4E2M1,
        S::F6_E2M3 => DType::F6E2M3,
        S::F6_E3M2 => DType::F6E3M2,
        S::U8 => DType::U8,
        S::I8 => DType::I8,
        S::F8_E5M2 => DType::F8E5M2,
        S::F8_E4M3 => DType::F8E4M3FN,
        S::F8_E8M0 => DType::F8E8M0,
        S::F8_E4M3FNUZ => DType::F8E4M3FNUZ,
        S::F8_E5M2FNUZ => DType::F8E5M2FNUZ,
        S::I16 => DType::I16,
        S::U16 => DType::U16,
        S::F16 => DType::F16,
        S::BF16 => DType::BF16,
        S::I32 => DType::I32,
        S::U32 => DType::U32,
        S::F32 => DType::F32,
        S::C64 => DType::C64,
        S::F64 => DType::F64,
        S::I64 => DType::I64,
        S::U64 => DType::U64,
        _ => return None,
    })
}

/// Parses one file's header into tensors, in offset order.
fn read_header(path: &Path, shard: usize, warnings: &mut Vec<String>) -> Result<Vec<WeightTensor>> {
    let bytes = super::onnx::map_file(path)?;
    if bytes.len() >= 8 {
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        if n > 100_000_000 {
            return Err(Error::malformed(
                path,
                format!(
                    "safetensors header length {n} is larger than the 100 MB the format allows"
                ),
            ));
        }
        if n.checked_add(8).is_none_or(|end| end > bytes.len() as u64) {
            return Err(Error::malformed(
                path,
                format!(
                    "safetensors header length {n} runs past the end of the file ({} bytes): truncated or not a safetensors file",
                    bytes.len()
                ),
            ));
        }
    }
    let (header_len, meta) = safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| {
        Error::malformed(
            path,
            format!("not a valid safetensors file: {}", describe(&e)),
        )
    })?;
    let data_start = 8 + header_len as u64;
    let infos = meta.tensors();
    let mut out = Vec::with_capacity(infos.len());
    let mut misaligned = 0usize;
    for name in meta.offset_keys() {
        let info = infos[&name];
        let dtype = convert_dtype(info.dtype).ok_or_else(|| {
            Error::malformed(
                path,
                format!("tensor '{name}' has an unsupported dtype {:?}", info.dtype),
            )
        })?;
        let elem = dtype.bits().unwrap_or(8).div_ceil(8);
        if elem > 1 && (data_start + info.data_offsets.0 as u64) % elem != 0 {
            misaligned += 1;
        }
        out.push(WeightTensor {
            name,
            dtype,
            shape: info.shape.iter().map(|&d| d as u64).collect(),
            shard,
        });
    }
    if misaligned > 0 {
        warnings.push(format!(
            "{}: {misaligned} tensors are not aligned to their element size; zero-copy readers will have to copy them",
            path.display()
        ));
    }
    Ok(out)
}

fn describe(e: &safetensors::SafeTensorError) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::HeaderTooSmall => "the file is shorter than the 8-byte header length".into(),
        E::HeaderTooLarge => "the header length exceeds the 100 MB limit".into(),
        E::InvalidHeaderLength => "the header length runs past the end of the file".into(),
        E::InvalidOffset(name) => {
            format!("tensor '{name}' has offsets that overlap, leave gaps or are reversed")
        }
        E::MetadataIncompleteBuffer => {
            "the tensor data does not match the file size (truncated or trailing bytes)".into()
        }
        E::TensorInvalidInfo => "a tensor's byte range does not match its shape and dtype".into(),
        E::ValidationOverflow => "a tensor's size overflows".into(),
        other => other.to_string(),
    }
}

#[derive(serde::Deserialize)]
struct Index {
    #[serde(default)]
    weight_map: BTreeMap<String, String>,
}

fn load_sharded(path: &Path) -> Result<Weights> {
    let (mut file, _) = super::open_file(path)?;
    let mut text = String::new();
    file.read_to_string(&mut text)
        .map_err(|e| Error::io(path, e))?;
    let index: Index = serde_json::from_str(&text)
        .map_err(|e| Error::malformed(path, format!("not a safetensors index: {e}")))?;
    if index.weight_map.is_empty() {
        return Err(Error::malformed(
            path,
            "the index has an empty or missing weight_map",
        ));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut shards: Vec<PathBuf> = Vec::new();
    let mut shard_names: Vec<&str> = Vec::new();
    for file in index.weight_map.values() {
        if !shard_names.contains(&file.as_str()) {
            shard_names.push(file);
        }
    }
    shard_names.sort();
    for name in &shard_names {
        let rel = Path::new(name);
        if rel.is_absolute()
            || rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(Error::refused(
                path,
                format!("shard '{name}' is outside the index's directory"),
            ));
        }
        shards.push(dir.join(rel));
    }
    let mut warnings = Vec::new();
    let mut tensors = Vec::new();
    let mut seen = HashSet::new();
    let root = dir.canonicalize().map_err(|e| Error::io(dir, e))?;
    for (i, shard) in shards.iter().enumerate() {
        if !shard.exists() {
            return Err(Error::malformed(
                path,
                format!(
                    "shard '{}' named by the index does not exist",
                    shard.display()
                ),
            ));
        }
        // the same guard as ONNX external data: a link may not lead out of the directory
        let canonical = shard.canonicalize().map_err(|e| Error::io(shard, e))?;
        if !canonical.starts_with(&root) {
            return Err(Error::refused(
                path,
                format!(
                    "shard '{}' resolves outside the index's directory (through a link)",
                    shard_names[i]
                ),
            ));
        }
        for t in read_header(shard, i, &mut warnings)? {
            if !seen.insert(t.name.clone()) {
                return Err(Error::malformed(
                    shard,
                    format!("tensor '{}' is stored in more than one shard", t.name),
                ));
            }
            match index.weight_map.get(&t.name) {
                Some(f) if f == shard_names[i] => {}
                Some(f) => warnings.push(format!(
                    "tensor '{}' is in shard '{}' but the index says '{f}'",
                    t.name, shard_names[i]
                )),
                None => warnings.push(format!(
                    "tensor '{}' in shard '{}' is not listed in the index",
                    t.name, shard_names[i]
                )),
            }
            tensors.push(t);
        }
    }
    let missing: Vec<&String> = index
        .weight_map
        .keys()
        .filter(|k| !seen.contains(*k))
        .collect();
    if let Some(first) = missing.first() {
        return Err(Error::malformed(
            path,
            format!(
                "{} tensors listed in the index are in no shard (first: '{first}')",
                missing.len()
            ),
        ));
    }
    Ok(Weights {
        path: path.to_path_buf(),
        shards,
        tensors,
        warnings,
    })
}
