//! GGUF files (llama.cpp): the header, metadata and tensor infos only; tensor data is never read.
//! Layout as in ggml's `gguf.c` and candle's `quantized::gguf_file`: magic `GGUF`, version (2 or
//! 3), tensor and key counts, typed key/value metadata, tensor infos (name, dims innermost first,
//! ggml type, offset), then the data aligned to `general.alignment` (default 32). Every count and
//! length is checked against the file before it is used; a header that claims more than the file
//! holds is an error naming the field.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// A metadata value. Arrays keep their length and, for numbers, their values (tokenizer arrays
/// of strings are summarised).
#[derive(Clone, Debug, PartialEq)]
pub enum Meta {
    Uint(u64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    /// An array: element count, and the numeric values when it holds numbers or bools (1.0 for
    /// true; at most 4096).
    Array(u64, Vec<f64>),
}

impl Meta {
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Meta::Uint(v) => Some(v),
            Meta::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Meta::Uint(v) => Some(v as f64),
            Meta::Int(v) => Some(v as f64),
            Meta::Float(v) => Some(v),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Meta::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// A ggml tensor type: its name, elements per block and bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    pub block: u64,
    pub block_bytes: u64,
}

/// Every ggml type llama.cpp defines (ggml.h `ggml_type`, sizes from `ggml_type_traits`), as
/// gguf-py's `GGML_QUANT_SIZES` lists them.
pub const TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),
    t(3, "Q4_1", 32, 20),
    t(6, "Q5_0", 32, 22),
    t(7, "Q5_1", 32, 24),
    t(8, "Q8_0", 32, 34),
    t(9, "Q8_1", 32, 40),
    t(10, "Q2_K", 256, 84),
    t(11, "Q3_K", 256, 110),
    t(12, "Q4_K", 256, 144),
    t(13, "Q5_K", 256, 176),
    t(14, "Q6_K", 256, 210),
    t(15, "Q8_K", 256, 292),
    t(16, "IQ2_XXS", 256, 66),
    t(17, "IQ2_XS", 256, 74),
    t(18, "IQ3_XXS", 256, 98),
    t(19, "IQ1_S", 256, 50),
    t(20, "IQ4_NL", 32, 18),
    t(21, "IQ3_S", 256, 110),
    t(22, "IQ2_S", 256, 82),
    t(23, "IQ4_XS", 256, 136),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54),
    t(35, "TQ2_0", 256, 66),
    t(39, "MXFP4", 32, 17),
    t(40, "NVFP4", 64, 36),
    t(41, "Q1_0", 128, 18),
];

const fn t(id: u32, name: &'static str, block: u64, block_bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block,
        block_bytes,
    }
}

pub fn ggml_type(id: u32) -> Option<GgmlType> {
    TYPES.iter().copied().find(|t| t.id == id)
}

/// One tensor info.
#[derive(Clone, Debug)]
pub struct GgufTensor {
    pub name: String,
    /// Dimensions, outermost first (as safetensors and PyTorch list them).
    pub shape: Vec<u64>,
    pub ty: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    pub elements: u64,
    pub bytes: u64,
}

/// A GGUF file's header.
#[derive(Clone, Debug)]
pub struct Gguf {
    pub path: PathBuf,
    pub version: u32,
    pub alignment: u64,
    pub data_start: u64,
    pub metadata: BTreeMap<String, Meta>,
    pub tensors: Vec<GgufTensor>,
    pub warnings: Vec<String>,
}

impl Gguf {
    /// `<general.architecture>.<key>`, e.g. `block_count`.
    pub fn arch_key(&self, key: &str) -> Option<&Meta> {
        let arch = self.metadata.get("general.architecture")?.as_str()?;
        self.metadata.get(&format!("{arch}.{key}"))
    }
}

/// Whether the first bytes are GGUF's magic.
pub fn is_gguf(head: &[u8]) -> bool {
    head.starts_with(b"GGUF")
}

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
    path: &'a Path,
    /// A read ran past the bytes at hand (the header may go on in the rest of the file).
    ran_out: bool,
}

impl<'a> Reader<'a> {
    fn bad(&self, what: impl std::fmt::Display) -> Error {
        Error::malformed(self.path, format!("GGUF header: {what}"))
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let left = (self.b.len() - self.pos) as u64;
        if n > left {
            self.ran_out = true;
            return Err(self.bad(format_args!(
                "{what} needs {n} bytes at offset {} but the file has {left} left (truncated, or a length that lies)",
                self.pos
            )));
        }
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4"),
        ))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8"),
        ))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        let bytes = self.take(n, what)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    /// A value of type `ty`; arrays nest at most once (GGUF forbids deeper nesting in practice).
    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Meta> {
        let what = format!("the value of '{key}'");
        Ok(match ty {
            0 => Meta::Uint(self.take(1, &what)?[0] as u64),
            1 => Meta::Int(self.take(1, &what)?[0] as i8 as i64),
            2 => Meta::Uint(u16::from_le_bytes(self.take(2, &what)?.try_into().expect("2")) as u64),
            3 => Meta::Int(i16::from_le_bytes(self.take(2, &what)?.try_into().expect("2")) as i64),
            4 => Meta::Uint(self.u32(&what)? as u64),
            5 => Meta::Int(self.u32(&what)? as i32 as i64),
            6 => Meta::Float(f32::from_bits(self.u32(&what)?) as f64),
            7 => Meta::Bool(self.take(1, &what)?[0] != 0),
            8 => Meta::Str(self.string(&what)?),
            9 if depth == 0 => {
                let inner = self.u32(&what)?;
                let n = self.u64(&what)?;
                let mut nums = Vec::new();
                for i in 0..n {
                    let v = self.value(inner, key, depth + 1)?;
                    if i < 4096 {
                        match v {
                            Meta::Uint(x) => nums.push(x as f64),
                            Meta::Int(x) => nums.push(x as f64),
                            Meta::Float(x) => nums.push(x),
                            Meta::Bool(b) => nums.push(f64::from(u8::from(b))),
                            _ => {}
                        }
                    }
                }
                Meta::Array(n, nums)
            }
            10 => Meta::Uint(self.u64(&what)?),
            11 => Meta::Int(self.u64(&what)? as i64),
            12 => Meta::Float(f64::from_bits(self.u64(&what)?)),
            _ => {
                return Err(self.bad(format_args!(
                    "key '{key}' has value type {ty}, which GGUF does not define"
                )))
            }
        })
    }
}

/// Reads a GGUF file's header.
pub fn load(path: &Path) -> Result<Gguf> {
    load_declared(path, None)
}

/// [`load`] for a file that may be a header-only copy of a file of `declared` bytes (nnlint's Hub
/// cache keeps the header of a remote GGUF file and its real size): the tensors are checked
/// against that size. `None`: the file is whole.
pub fn load_declared(path: &Path, declared: Option<u64>) -> Result<Gguf> {
    let map = super::onnx::map_file(path)?;
    let len = declared.unwrap_or(map.len() as u64);
    parse_prefix(path, &map, len)?.ok_or_else(|| {
        Error::malformed(
            path,
            "the header-only copy ends inside the GGUF header (remove the cache entry, or run with --refresh)",
        )
    })
}

/// Parses the header from the file's bytes (`bytes` is the whole file, mapped).
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Gguf> {
    parse_inner(&mut reader(path, bytes), bytes, bytes.len() as u64)
}

/// Parses the header from the first `bytes` of a file of `file_len` bytes (a ranged read of a
/// remote file). `Ok(None)`: the bytes end inside the header, read more; an error: the header is
/// wrong whatever follows.
pub fn parse_prefix(path: &Path, bytes: &[u8], file_len: u64) -> Result<Option<Gguf>> {
    let mut r = reader(path, bytes);
    match parse_inner(&mut r, bytes, file_len) {
        Ok(g) => Ok(Some(g)),
        Err(_) if r.ran_out && (bytes.len() as u64) < file_len => Ok(None),
        Err(e) => Err(e),
    }
}

fn reader<'a>(path: &'a Path, bytes: &'a [u8]) -> Reader<'a> {
    Reader {
        b: bytes,
        pos: 0,
        path,
        ran_out: false,
    }
}

fn parse_inner(r: &mut Reader, bytes: &[u8], file_len: u64) -> Result<Gguf> {
    let path = r.path;
    if bytes.len() < 4 && (bytes.len() as u64) < file_len {
        r.ran_out = true;
    }
    if !is_gguf(bytes) {
        return Err(Error::malformed(path, "not a GGUF file (no 'GGUF' magic)"));
    }
    r.pos = 4;
    let version = r.u32("the version")?;
    if !(2..=3).contains(&version) {
        return Err(r.bad(format_args!(
            "version {version}: nnlint reads GGUF versions 2 and 3"
        )));
    }
    let tensor_count = r.u64("the tensor count")?;
    let kv_count = r.u64("the metadata count")?;
    // every key/value takes at least 12 bytes and every tensor info at least 24
    let left = file_len.saturating_sub(r.pos as u64);
    if kv_count > left / 12 || tensor_count > left / 24 {
        return Err(r.bad(format_args!(
            "it claims {kv_count} metadata entries and {tensor_count} tensors, more than its {file_len} bytes can hold"
        )));
    }
    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string("a metadata key")?;
        let ty = r.u32("a metadata type")?;
        let v = r.value(ty, &key, 0)?;
        metadata.insert(key, v);
    }
    // bounded by the bytes at hand: a header-only copy declares a far larger file
    let at_hand = (bytes.len() - r.pos.min(bytes.len())) as u64 / 24;
    let mut tensors = Vec::with_capacity(tensor_count.min(at_hand) as usize);
    for _ in 0..tensor_count {
        let name = r.string("a tensor name")?;
        let n_dims = r.u32("a tensor's rank")?;
        if n_dims > 8 {
            return Err(r.bad(format_args!(
                "tensor '{name}' has {n_dims} dimensions (at most 8)"
            )));
        }
        let mut ne = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            ne.push(r.u64("a tensor dimension")?);
        }
        let ty_id = r.u32("a tensor type")?;
        let offset = r.u64("a tensor offset")?;
        let ty = ggml_type(ty_id).ok_or_else(|| {
            r.bad(format_args!(
                "tensor '{name}' has ggml type {ty_id}, which nnlint does not know"
            ))
        })?;
        let elements = ne
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| r.bad(format_args!("tensor '{name}': its element count overflows")))?;
        if elements % ty.block != 0 {
            return Err(r.bad(format_args!(
                "tensor '{name}' has {elements} elements, not a multiple of {}'s block of {}",
                ty.name, ty.block
            )));
        }
        let bytes = (elements / ty.block)
            .checked_mul(ty.block_bytes)
            .ok_or_else(|| r.bad(format_args!("tensor '{name}': its size overflows")))?;
        ne.reverse();
        tensors.push(GgufTensor {
            name,
            shape: ne,
            ty,
            offset,
            elements,
            bytes,
        });
    }
    let alignment = match metadata.get("general.alignment").and_then(Meta::as_u64) {
        None => 32,
        Some(a) if a > 0 && a.is_power_of_two() => a,
        Some(a) => return Err(r.bad(format_args!("general.alignment is {a}, not a power of two"))),
    };
    let data_start = (r.pos as u64).div_ceil(alignment) * alignment;
    let mut warnings = Vec::new();
    for t in &tensors {
        let end = data_start
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.bytes));
        if end.is_none_or(|e| e > file_len) {
            return Err(r.bad(format_args!(
                "tensor '{}' ({} bytes at data offset {}) runs past the end of the file ({file_len} bytes)",
                t.name, t.bytes, t.offset
            )));
        }
        if t.offset % alignment != 0 {
            warnings.push(format!(
                "{}: tensor '{}' is not aligned to {alignment} bytes",
                path.display(),
                t.name
            ));
        }
    }
    Ok(Gguf {
        path: path.to_path_buf(),
        version,
        alignment,
        data_start,
        metadata,
        tensors,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kv: &[(&str, u32, Vec<u8>)], tensors: &[(&str, &[u64], u32, u64)]) -> Vec<u8> {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_le_bytes());
        b.extend((tensors.len() as u64).to_le_bytes());
        b.extend((kv.len() as u64).to_le_bytes());
        let s = |b: &mut Vec<u8>, s: &str| {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        };
        for (k, ty, v) in kv {
            s(&mut b, k);
            b.extend(ty.to_le_bytes());
            b.extend(v);
        }
        for (name, ne, ty, off) in tensors {
            s(&mut b, name);
            b.extend((ne.len() as u32).to_le_bytes());
            for d in *ne {
                b.extend(d.to_le_bytes());
            }
            b.extend(ty.to_le_bytes());
            b.extend(off.to_le_bytes());
        }
        b
    }

    #[test]
    fn reads_metadata_and_block_sizes() {
        let mut b = header(
            &[("llama.block_count", 4, 2u32.to_le_bytes().to_vec())],
            &[("w", &[256, 4], 12, 0)],
        );
        b.resize(b.len().div_ceil(32) * 32 + 4 * 144, 0);
        let g = parse(Path::new("m.gguf"), &b).unwrap();
        assert_eq!(g.metadata["llama.block_count"], Meta::Uint(2));
        let t = &g.tensors[0];
        assert_eq!(
            (t.shape.clone(), t.elements, t.bytes),
            (vec![4, 256], 1024, 576)
        );
    }

    #[test]
    fn lying_headers_are_errors() {
        let b = header(&[], &[("w", &[256, 4], 12, 0)]); // no data
        let e = parse(Path::new("m.gguf"), &b).unwrap_err().to_string();
        assert!(e.contains("runs past the end"), "{e}");
        let mut b = header(&[], &[]);
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = parse(Path::new("m.gguf"), &b).unwrap_err().to_string();
        assert!(e.contains("more than its"), "{e}");
        let b = header(&[("k", 8, u64::MAX.to_le_bytes().to_vec())], &[]);
        let e = parse(Path::new("m.gguf"), &b).unwrap_err().to_string();
        assert!(e.contains("needs"), "{e}");
        let b = header(&[], &[("w", &[3], 12, 0)]);
        let e = parse(Path::new("m.gguf"), &b).unwrap_err().to_string();
        assert!(e.contains("block"), "{e}");
    }

    #[test]
    fn a_prefix_says_when_it_needs_more_and_a_declared_size_covers_the_data() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("testdata/llm/gguf/tiny-llama-q4_k_m.gguf");
        let whole = std::fs::read(&path).unwrap();
        let len = whole.len() as u64;
        assert!(parse_prefix(&path, &whole[..100], len).unwrap().is_none());
        assert!(parse_prefix(&path, &whole[..2], len).unwrap().is_none());
        let g = parse_prefix(&path, &whole, len).unwrap().unwrap();
        let head = &whole[..g.data_start as usize];
        let h = parse_prefix(&path, head, len).unwrap().unwrap();
        assert_eq!(h.tensors.len(), g.tensors.len());
        // the header alone, read as a whole file, is truncated
        assert!(parse(&path, head).is_err());
        // a declared size the tensors do not fit in is an error, not "read more"
        assert!(parse_prefix(&path, head, g.data_start + 1).is_err());
        // bytes that are not GGUF are an error at once
        assert!(parse_prefix(&path, b"NOTGGUF!", len).is_err());
    }
}
