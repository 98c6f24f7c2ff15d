//! safetensors loading: single files and sharded checkpoints (`*.safetensors.index.json`), header
//! only. Each file is memory-mapped and only its JSON header is parsed (with the `safetensors`
//! crate's rules: header size cap, offsets, overlap, overflow); tensor data is never touched.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
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
    /// What the report says about where the tensors come from (a pipeline's components,
    /// `load::pipeline`); empty for a file or a sharded checkpoint.
    pub notes: Vec<String>,
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
    load_within(path, None)
}

/// [`load`], with the folder a sharded index's shards may resolve into through links: `None` for
/// the index's own folder; a Hugging Face cache snapshot's repo folder, whose snapshot files are
/// links into its `blobs/` (`load::hub`).
pub fn load_within(path: &Path, links_within: Option<&Path>) -> Result<Weights> {
    load_declared(path, links_within, None)
}

/// The real sizes of header-only copies, by path: nnlint's Hub cache (`load::hub_store`) keeps
/// each weight file's first `8 + n` bytes and records the whole file's size in its manifest.
pub type Declared = std::collections::HashMap<PathBuf, u64>;

/// [`load_within`] for files that may be header-only copies: a file `declared` lists is checked
/// against that size (the tensor data must cover it exactly, as for a whole file), not its own
/// length. `None`: every file is whole.
pub fn load_declared(
    path: &Path,
    links_within: Option<&Path>,
    declared: Option<&Declared>,
) -> Result<Weights> {
    if is_index(path) {
        load_sharded(path, links_within, declared)
    } else {
        let mut warnings = Vec::new();
        let tensors = read_header(path, 0, &mut warnings, real_len(path, declared)?)?;
        Ok(Weights {
            path: path.to_path_buf(),
            shards: vec![path.to_path_buf()],
            tensors,
            warnings,
            notes: Vec::new(),
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

/// The size a header-only copy declares, `None` for a whole file; a file missing from a
/// declaration is an error (a header-only copy read as whole would fail obscurely).
fn real_len(path: &Path, declared: Option<&Declared>) -> Result<Option<u64>> {
    match declared {
        None => Ok(None),
        Some(d) => d.get(path).copied().map(Some).ok_or_else(|| {
            Error::malformed(
                path,
                "is not in its cache manifest's list of header-only files (remove the cache entry, or run with --refresh)",
            )
        }),
    }
}

/// Parses one file's header into tensors, in offset order. The header is read, not mapped: it is
/// all that is touched, and reading it costs one copy where a mapping costs a page fault per
/// 4 KiB (a quarter of the run on a checkpoint of 41 shards and 16 MB of headers).
/// `declared`: the whole file's size when `path` is a header-only copy.
fn read_header(
    path: &Path,
    shard: usize,
    warnings: &mut Vec<String>,
    declared: Option<u64>,
) -> Result<Vec<WeightTensor>> {
    let (mut file, stored) = super::open_file(path)?;
    let len = declared.unwrap_or(stored);
    if len == 0 {
        return Err(Error::malformed(path, "the file is empty"));
    }
    let mut head = [0u8; 8];
    if len < 8 {
        return Err(Error::malformed(
            path,
            "not a valid safetensors file: the file is shorter than the 8-byte header length",
        ));
    }
    file.read_exact(&mut head).map_err(|e| Error::io(path, e))?;
    let n = u64::from_le_bytes(head);
    if n > 100_000_000 {
        return Err(Error::malformed(
            path,
            format!("safetensors header length {n} is larger than the 100 MB the format allows"),
        ));
    }
    if 8 + n > len {
        return Err(Error::malformed(
            path,
            format!(
                "safetensors header length {n} runs past the end of the file ({len} bytes): truncated or not a safetensors file"
            ),
        ));
    }
    if 8 + n > stored {
        return Err(Error::malformed(
            path,
            format!(
                "the header-only copy holds {stored} bytes, fewer than its {} header bytes (remove the cache entry, or run with --refresh)",
                8 + n
            ),
        ));
    }
    // one buffer a thread, reused from shard to shard: a fresh one per header was fresh pages the
    // kernel zeroed and faulted in (a quarter of the run on 41 shards); at most 100 MB
    thread_local! {
        static HEADER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let data_start = 8 + n;
    let tensors = HEADER.with(|buf| -> Result<_> {
        let mut header = buf.borrow_mut();
        header.clear();
        let got = (&mut file)
            .take(n)
            .read_to_end(&mut header)
            .map_err(|e| Error::io(path, e))?;
        if got as u64 != n {
            return Err(Error::malformed(
                path,
                "the file ended inside its safetensors header (truncated while being read)",
            ));
        }
        parse_header(&header, len - data_start)
            .map_err(|e| Error::malformed(path, format!("not a valid safetensors file: {e}")))
    })?;
    let mut out = Vec::with_capacity(tensors.len());
    let mut misaligned = 0usize;
    for (name, info) in tensors {
        let dtype = convert_dtype(info.dtype).ok_or_else(|| {
            Error::malformed(
                path,
                format!("tensor '{name}' has an unsupported dtype {:?}", info.dtype),
            )
        })?;
        let elem = dtype.bits().unwrap_or(8).div_ceil(8);
        if elem > 1 && (data_start + info.data_offsets.0) % elem != 0 {
            misaligned += 1;
        }
        out.push(WeightTensor {
            name,
            dtype,
            shape: info.shape,
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

/// One tensor's entry in a safetensors header, as the format defines it.
#[derive(Debug, serde::Deserialize)]
struct Info {
    dtype: safetensors::Dtype,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// A safetensors header: its tensors, named, in the order the header lists them. The
/// `__metadata__` entry must be a map of strings, as the format requires, and is dropped.
struct Header(Vec<(String, Info)>);

impl<'de> serde::Deserialize<'de> for Header {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Header;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of tensor names to {dtype, shape, data_offsets}")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Header, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(name) = map.next_key::<String>()? {
                    if name == "__metadata__" {
                        map.next_value::<Option<BTreeMap<String, String>>>()?;
                    } else {
                        out.push((name, map.next_value::<Info>()?));
                    }
                }
                Ok(Header(out))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// Parses and validates a safetensors header (the bytes after the 8-byte length) with the
/// reference implementation's rules (`safetensors::SafeTensors::read_metadata`): valid UTF-8
/// JSON; tensors, in offset order, cover the data from 0 without gaps or overlaps; each range
/// holds exactly its shape times its dtype (checked arithmetic, whole bytes); the data ends at the
/// end of the file. The crate's own parser buffers the whole header through serde's `Content`
/// (its map is `#[serde(flatten)]`) and hashes every name twice, which dominated the time on
/// checkpoints of 45,000 tensors; this reads each entry once. Returns the tensors in offset order.
fn parse_header(header: &[u8], data_len: u64) -> std::result::Result<Vec<(String, Info)>, String> {
    let text = std::str::from_utf8(header).map_err(|e| format!("invalid UTF-8 in header: {e}"))?;
    let Header(mut tensors) =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON in header: {e}"))?;
    tensors.sort_by_key(|(_, i)| i.data_offsets);
    let mut end = 0u64;
    for (name, info) in &tensors {
        let (s, e) = info.data_offsets;
        if s != end || e < s {
            return Err(format!(
                "tensor '{name}' has offsets that overlap, leave gaps or are reversed"
            ));
        }
        end = e;
        let bits = info
            .shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| n.checked_mul(info.dtype.bitsize() as u64))
            .ok_or_else(|| "a tensor's size overflows".to_string())?;
        if bits % 8 != 0 {
            return Err(format!(
                "tensor '{name}' of {} does not end on a byte boundary",
                info.dtype
            ));
        }
        if e - s != bits / 8 {
            return Err("a tensor's byte range does not match its shape and dtype".into());
        }
    }
    if end != data_len {
        return Err(
            "the tensor data does not match the file size (truncated or trailing bytes)".into(),
        );
    }
    Ok(tensors)
}

/// A fixed-seed fast hasher for maps keyed by tensor names: checkpoints with many experts name
/// 45,000-75,000 tensors, and SipHash over those names was a tenth of the run.
type Names = foldhash::fast::FixedState;

/// A name in the index, borrowed from its text unless it has escapes.
#[derive(serde::Deserialize)]
struct Name<'a>(#[serde(borrow)] Cow<'a, str>);

/// The index's `weight_map` as listed (tensor, shard file); the checks below hash each name
/// once.
#[derive(serde::Deserialize)]
struct Index<'a> {
    #[serde(default, borrow, deserialize_with = "entries")]
    weight_map: Vec<(Name<'a>, Name<'a>)>,
}

fn entries<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<(Name<'de>, Name<'de>)>, D::Error> {
    struct Visit;
    impl<'de> serde::de::Visitor<'de> for Visit {
        type Value = Vec<(Name<'de>, Name<'de>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of tensor names to shard files")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some(e) = map.next_entry()? {
                out.push(e);
            }
            Ok(out)
        }
    }
    d.deserialize_map(Visit)
}

/// One shard's tensors as its worker read and checked them against the index.
struct Checked {
    tensors: Vec<WeightTensor>,
    /// Tensors in another shard than the index says, or not listed, in file order.
    warnings: Vec<String>,
    /// A listed tensor this shard holds was already found (here or in another shard).
    repeated: bool,
    /// Tensors the index does not list.
    unlisted: Vec<String>,
}

/// The shard files an index names, each once and in name order, with the shard of each entry as
/// a number in first-seen order and `order` mapping name order to those numbers: an index lists
/// a shard's tensors in runs, so most entries are the previous entry's shard and hash nothing.
fn shards_of<'a>(index: &'a Index) -> (Vec<&'a str>, Vec<usize>, Vec<usize>) {
    let mut seen: HashMap<&str, usize, Names> = HashMap::default();
    let mut first_seen: Vec<&str> = Vec::new();
    let mut last: Option<(&str, usize)> = None;
    let entry_shard: Vec<usize> = index
        .weight_map
        .iter()
        .map(|(_, f)| {
            let f = f.0.as_ref();
            match last {
                Some((l, i)) if l == f => i,
                _ => {
                    let i = *seen.entry(f).or_insert_with(|| {
                        first_seen.push(f);
                        first_seen.len() - 1
                    });
                    last = Some((f, i));
                    i
                }
            }
        })
        .collect();
    let mut order: Vec<usize> = (0..first_seen.len()).collect();
    order.sort_unstable_by_key(|&i| first_seen[i]);
    let names = order.iter().map(|&i| first_seen[i]).collect();
    (names, order, entry_shard)
}

/// Parses a mapped index (its text validated as UTF-8 once: parsing from bytes validates string
/// by string, slower).
fn parse_index<'a>(path: &Path, map: &'a [u8]) -> Result<Index<'a>> {
    let text = std::str::from_utf8(map)
        .map_err(|e| Error::malformed(path, format!("not a safetensors index: {e}")))?;
    serde_json::from_str(text)
        .map_err(|e| Error::malformed(path, format!("not a safetensors index: {e}")))
}

/// The shard files an index names, each once, sorted (for `load::hub` to see which a cache
/// snapshot lacks before the index is loaded).
pub fn shard_names(path: &Path) -> Result<Vec<String>> {
    // mapped, not read: an index of 75,000 tensors is 7 MB that a read copies into fresh pages
    let map = super::onnx::map_whole(path)?;
    let index = parse_index(path, &map)?;
    Ok(shards_of(&index)
        .0
        .into_iter()
        .map(str::to_string)
        .collect())
}

fn load_sharded(
    path: &Path,
    links_within: Option<&Path>,
    declared: Option<&Declared>,
) -> Result<Weights> {
    let map = super::onnx::map_whole(path)?;
    let index = parse_index(path, &map)?;
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
    let (shard_names, order, entry_shard) = shards_of(&index);
    let mut position = vec![0; order.len()];
    for (p, &i) in order.iter().enumerate() {
        position[i] = p;
    }
    let mut shards: Vec<PathBuf> = Vec::with_capacity(shard_names.len());
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
    // a Hugging Face cache snapshot given as a path (`models--org--name/snapshots/<sha>/`) links
    // its shards into the repo's `blobs/`: the repo's folder bounds them, as for a Hub ID
    let cache_repo = dir
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "snapshots"))
        .and_then(Path::parent)
        .filter(|r| {
            r.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("models--"))
        });
    let within = links_within.or(cache_repo).unwrap_or(dir);
    let root = within.canonicalize().map_err(|e| Error::io(within, e))?;
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
        // the same guard as ONNX external data: a link may not lead out of the directory (out
        // of the repo's folder, for a cache snapshot)
        let canonical = shard.canonicalize().map_err(|e| Error::io(shard, e))?;
        if !canonical.starts_with(&root) {
            return Err(Error::refused(
                path,
                match links_within.or(cache_repo) {
                    None => format!(
                        "shard '{}' resolves outside the index's directory (through a link)",
                        shard_names[i]
                    ),
                    Some(_) => format!(
                        "shard '{}' resolves outside its repo's folder in the Hugging Face cache ({}) through a link",
                        shard_names[i],
                        root.display()
                    ),
                },
            ));
        }
    }
    // the headers are independent: parsed on every core while the index's names are hashed,
    // then each shard's tensors checked against the index on every core (the first error in
    // shard order wins)
    use rayon::prelude::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    let (listed, headers) = rayon::join(
        || {
            // per listed tensor: the shard the index names, and whether a shard held it
            let mut listed: HashMap<&str, (usize, AtomicBool), Names> = HashMap::default();
            listed.reserve(index.weight_map.len());
            for ((t, _), &f) in index.weight_map.iter().zip(&entry_shard) {
                // a name listed twice keeps its last shard, as JSON readers do
                listed.insert(t.0.as_ref(), (position[f], AtomicBool::new(false)));
            }
            listed
        },
        || {
            shards
                .par_iter()
                .enumerate()
                .map(|(i, shard)| {
                    let mut w = Vec::new();
                    real_len(shard, declared)
                        .and_then(|len| read_header(shard, i, &mut w, len))
                        .map(|t| (t, w))
                })
                .collect::<Vec<Result<(Vec<WeightTensor>, Vec<String>)>>>()
        },
    );
    let mut read = Vec::with_capacity(shards.len());
    for r in headers {
        read.push(r?);
    }
    let results: Vec<Checked> = read
        .into_par_iter()
        .enumerate()
        .map(|(i, (tensors, mut warnings))| {
            let (mut repeated, mut unlisted) = (false, Vec::new());
            for t in &tensors {
                match listed.get(t.name.as_str()) {
                    Some((_, found)) if found.swap(true, Ordering::Relaxed) => repeated = true,
                    Some((named, _)) if *named != i => warnings.push(format!(
                        "tensor '{}' is in shard '{}' but the index says '{}'",
                        t.name, shard_names[i], shard_names[*named]
                    )),
                    Some(_) => {}
                    None => {
                        warnings.push(format!(
                            "tensor '{}' in shard '{}' is not listed in the index",
                            t.name, shard_names[i]
                        ));
                        unlisted.push(t.name.clone());
                    }
                }
            }
            Checked {
                tensors,
                warnings,
                repeated,
                unlisted,
            }
        })
        .collect();
    let mut warnings = Vec::new();
    let parsed = results;
    let mut unlisted: HashSet<&str, Names> = HashSet::default();
    let repeated = parsed.iter().any(|c| c.repeated)
        || parsed
            .iter()
            .flat_map(|c| &c.unlisted)
            .any(|n| !unlisted.insert(n.as_str()));
    if repeated {
        // which tensor repeats first, in shard order: as a reader going through the shards
        // would meet it
        let mut seen: HashSet<&str, Names> = HashSet::default();
        for (i, c) in parsed.iter().enumerate() {
            for t in &c.tensors {
                if !seen.insert(t.name.as_str()) {
                    return Err(Error::malformed(
                        &shards[i],
                        format!("tensor '{}' is stored in more than one shard", t.name),
                    ));
                }
            }
        }
    }
    let mut tensors = Vec::with_capacity(parsed.iter().map(|c| c.tensors.len()).sum());
    for c in parsed {
        warnings.extend(c.warnings);
        tensors.extend(c.tensors);
    }
    let missing: Vec<&str> = listed
        .iter()
        .filter(|(_, (_, found))| !found.load(Ordering::Relaxed))
        .map(|(t, _)| *t)
        .collect();
    if let Some(first) = missing.iter().min() {
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
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_header;

    fn parse(h: &str, data: u64) -> Result<Vec<(String, Vec<u64>)>, String> {
        parse_header(h.as_bytes(), data).map(|t| t.into_iter().map(|(n, i)| (n, i.shape)).collect())
    }

    #[test]
    fn tensors_come_back_in_offset_order_and_metadata_is_dropped() {
        let h = r#"{"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},
                    "__metadata__":{"format":"pt"},
                    "a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}"#;
        let t = parse(h, 16).unwrap();
        assert_eq!(t, vec![("a".into(), vec![2, 2]), ("b".into(), vec![2])]);
        // sub-byte types: 4 F4 elements are 2 bytes
        let h = r#"{"q":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}}"#;
        assert!(parse(h, 2).is_ok());
    }

    #[test]
    fn the_reference_rules_are_enforced() {
        let one = |offsets: &str, shape: &str, dtype: &str, data: u64| {
            parse(
                &format!(
                    r#"{{"t":{{"dtype":"{dtype}","shape":{shape},"data_offsets":{offsets}}}}}"#
                ),
                data,
            )
            .unwrap_err()
        };
        // a gap before the first tensor, reversed offsets
        assert!(one("[4,8]", "[1]", "F32", 8).contains("overlap, leave gaps"));
        assert!(one("[0,0]", "[1]", "F32", 4).contains("does not match its shape"));
        // the range is not the shape's size; the data is longer than the tensors
        assert!(one("[0,8]", "[1]", "F32", 8).contains("does not match its shape"));
        assert!(one("[0,4]", "[1]", "F32", 8).contains("does not match the file size"));
        // overflow, and a sub-byte tensor that does not end on a byte
        assert!(one("[0,4]", "[4294967296,4294967296]", "F64", 4).contains("overflows"));
        assert!(one("[0,1]", "[3]", "F4", 1).contains("byte boundary"));
        // overlapping tensors
        let h = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                    "b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        assert!(parse(h, 8).unwrap_err().contains("overlap"));
        // metadata must be strings; the JSON must be a map; UTF-8
        assert!(parse(r#"{"__metadata__":{"a":1}}"#, 0)
            .unwrap_err()
            .contains("invalid JSON"));
        assert!(parse("[1]", 0).unwrap_err().contains("invalid JSON"));
        assert!(parse_header(b"{\"\xff\":1}", 0)
            .unwrap_err()
            .contains("UTF-8"));
        assert!(parse("{}", 0).unwrap().is_empty());
    }

    #[test]
    fn a_header_only_copy_is_read_against_its_declared_size() {
        let h = br#"{"w":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}}"#;
        let mut head = (h.len() as u64).to_le_bytes().to_vec();
        head.extend(h);
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("model.safetensors");
        std::fs::write(&p, &head).unwrap();
        // as a whole file it is truncated; with its real size declared it is whole
        let e = super::load(&p).unwrap_err().to_string();
        assert!(e.contains("does not match the file size"), "{e}");
        let real = head.len() as u64 + 4000;
        let d: super::Declared = [(p.clone(), real)].into_iter().collect();
        let w = super::load_declared(&p, None, Some(&d)).unwrap();
        assert_eq!(w.tensors[0].shape, vec![1000]);
        // a wrong size, or a copy shorter than its header, is an error
        let d: super::Declared = [(p.clone(), real + 1)].into_iter().collect();
        assert!(super::load_declared(&p, None, Some(&d)).is_err());
        std::fs::write(&p, &head[..head.len() - 1]).unwrap();
        let d: super::Declared = [(p.clone(), real)].into_iter().collect();
        let e = super::load_declared(&p, None, Some(&d))
            .unwrap_err()
            .to_string();
        assert!(e.contains("header-only copy holds"), "{e}");
        // a file the declaration does not list
        let d = super::Declared::new();
        assert!(super::load_declared(&p, None, Some(&d)).is_err());
    }
}
