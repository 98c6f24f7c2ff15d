//! Writes a (rewritten) compact model to disk without holding its weights in memory.
//!
//! The compact protobuf from the loader references every large `raw_data` payload in the input file
//! (location [`SELF_LOCATION`]) and external data in its files. The writer encodes the small fields
//! with prost and streams each top-level initializer's bytes straight from where they are, so
//! writing a 500 MB model takes a few megabytes of memory instead of a second full-size buffer
//! (`encode_to_vec`). Tensors nested in nodes (Constant values, subgraph initializers) are read in.
//!
//! With `external`, initializers of at least [`EXTERNAL_MIN`] bytes go to one data file next to the
//! output (`OUT.data`, offsets aligned to 64 bytes), as `onnx.save_model(save_as_external_data=True)`
//! lays them out. Both files are written to temporary siblings and renamed into place, the data
//! file first; neither may be the input or one of its data files.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use crate::error::{Error, Result};
use crate::load::onnx::{resolve_location, Located};
use crate::load::onnx_pb as pb;
use crate::load::skim::{read_exact_at, SELF_LOCATION};
use crate::util::fs::AtomicFile;
use crate::util::progress::Progress;

/// Smallest initializer written to the external data file (onnx's default `size_threshold`).
pub const EXTERNAL_MIN: u64 = 1024;
/// protobuf's limit on a message: a model file beyond it needs external data.
const PROTOBUF_MAX: u64 = (1 << 31) - 1;
const ALIGN: u64 = 64;
const EXTERNAL: i32 = pb::tensor_proto::DataLocation::External as i32;

/// What was written.
#[derive(Clone, Debug)]
pub struct Written {
    pub model: PathBuf,
    /// The external data file, when one was written.
    pub data: Option<PathBuf>,
    pub model_bytes: u64,
    pub data_bytes: u64,
}

/// Where an initializer's bytes come from.
enum Payload {
    /// Stays in the tensor message as it is (small `raw_data`, typed fields).
    Kept,
    /// A byte range of a file (the input model, or one of its data files).
    Range {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
    /// Bytes in memory (a new tensor), moved to the data file.
    Memory(bytes::Bytes),
}

impl Payload {
    fn len(&self) -> u64 {
        match self {
            Payload::Kept => 0,
            Payload::Range { len, .. } => *len,
            Payload::Memory(b) => b.len() as u64,
        }
    }
}

struct Sources<'a> {
    input: &'a Path,
    dir: &'a Path,
    files: HashMap<PathBuf, File>,
}

impl Sources<'_> {
    /// The file and range an external reference points at, checked.
    fn range(&mut self, t: &pb::TensorProto) -> Result<Payload> {
        let name = t.name.as_deref().unwrap_or("");
        let (mut location, mut offset, mut length) = (None, 0u64, None);
        for e in &t.external_data {
            let v = e.value.as_deref().unwrap_or("");
            match e.key.as_deref() {
                Some("location") => location = Some(v),
                Some("offset") => offset = v.parse().unwrap_or(u64::MAX),
                Some("length") => length = Some(v.parse().unwrap_or(u64::MAX)),
                _ => {}
            }
        }
        let location = location.ok_or_else(|| {
            Error::malformed(
                self.input,
                format!("tensor '{name}': external data without a location"),
            )
        })?;
        let path = if location == SELF_LOCATION {
            self.input.to_path_buf()
        } else {
            resolve_location(self.dir, location).map_err(|e| match e {
                Located::Escapes(how) => Error::refused(
                    self.input,
                    format!("tensor '{name}': external data location '{location}' {how}"),
                ),
                Located::NotFound(p) => Error::malformed(
                    self.input,
                    format!(
                        "tensor '{name}': external data file '{}' not found",
                        p.display()
                    ),
                ),
                Located::Io(p, e) => Error::io(p, e),
            })?
        };
        let file_len = self
            .file(&path)?
            .metadata()
            .map_err(|e| Error::io(&path, e))?
            .len();
        let len = length.unwrap_or(file_len.saturating_sub(offset));
        if offset.checked_add(len).is_none_or(|end| end > file_len) {
            return Err(Error::malformed(
                self.input,
                format!(
                    "tensor '{name}': external data range {offset}+{len} is outside '{}' ({file_len} bytes)",
                    path.display()
                ),
            ));
        }
        Ok(Payload::Range { path, offset, len })
    }

    fn file(&mut self, path: &Path) -> Result<&File> {
        if !self.files.contains_key(path) {
            let f = File::open(path).map_err(|e| Error::io(path, e))?;
            self.files.insert(path.to_path_buf(), f);
        }
        Ok(&self.files[path])
    }

    /// Copies a range to `out` through a 1 MiB buffer.
    fn copy(
        &mut self,
        path: &Path,
        offset: u64,
        len: u64,
        out: &mut impl Write,
        to: &Path,
    ) -> Result<()> {
        let file = self.file(path)?;
        let mut buf = vec![0u8; (1 << 20).min(len as usize)];
        let mut done = 0;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            read_exact_at(file, &mut buf[..n], offset + done).map_err(|e| Error::io(path, e))?;
            out.write_all(&buf[..n]).map_err(|e| Error::io(to, e))?;
            done += n as u64;
        }
        Ok(())
    }

    /// Reads a nested tensor's external bytes into `raw_data`.
    fn materialize(&mut self, t: &mut pb::TensorProto) -> Result<()> {
        if t.data_location != Some(EXTERNAL) {
            return Ok(());
        }
        let Payload::Range { path, offset, len } = self.range(t)? else {
            unreachable!("range() returns ranges")
        };
        let mut buf = vec![
            0u8;
            usize::try_from(len).map_err(|_| {
                Error::refused(self.input, "a nested tensor is too large to read")
            })?
        ];
        read_exact_at(self.file(&path)?, &mut buf, offset).map_err(|e| Error::io(&path, e))?;
        t.raw_data = Some(buf.into());
        t.external_data.clear();
        t.data_location = None;
        Ok(())
    }

    fn nodes(&mut self, nodes: &mut [pb::NodeProto]) -> Result<()> {
        for n in nodes {
            for a in &mut n.attribute {
                if let Some(t) = a.t.as_deref_mut() {
                    self.materialize(t)?;
                }
                for t in &mut a.tensors {
                    self.materialize(t)?;
                }
                if let Some(sp) = a.sparse_tensor.as_deref_mut() {
                    self.sparse(sp)?;
                }
                for sp in &mut a.sparse_tensors {
                    self.sparse(sp)?;
                }
                if let Some(g) = a.g.as_deref_mut() {
                    self.graph(g)?;
                }
                for g in &mut a.graphs {
                    self.graph(g)?;
                }
            }
        }
        Ok(())
    }

    fn sparse(&mut self, sp: &mut pb::SparseTensorProto) -> Result<()> {
        if let Some(t) = sp.values.as_mut() {
            self.materialize(t)?;
        }
        if let Some(t) = sp.indices.as_mut() {
            self.materialize(t)?;
        }
        Ok(())
    }

    /// A nested graph: everything read in.
    fn graph(&mut self, g: &mut pb::GraphProto) -> Result<()> {
        for t in &mut g.initializer {
            self.materialize(t)?;
        }
        for sp in &mut g.sparse_initializer {
            self.sparse(sp)?;
        }
        self.nodes(&mut g.node)
    }
}

/// The external data file of an output model: `OUT.data` beside it.
pub fn data_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".data");
    out.with_file_name(name)
}

/// The same file, whether or not it exists yet.
fn same_file(a: &Path, b: &Path) -> bool {
    fn canon(p: &Path) -> Option<PathBuf> {
        if let Ok(c) = p.canonicalize() {
            return Some(c);
        }
        let parent = p
            .parent()
            .filter(|x| !x.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Some(parent.canonicalize().ok()?.join(p.file_name()?))
    }
    match (canon(a), canon(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// Writes `proto` (compact, from [`load_proto`](crate::load::onnx::load_proto) of `input`) to `out`.
pub fn write(
    mut proto: pb::ModelProto,
    input: &Path,
    out: &Path,
    external: bool,
    progress: &dyn Progress,
) -> Result<Written> {
    let dir = input
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let data = external.then(|| data_path(out));
    let mut sources = Sources {
        input,
        dir,
        files: HashMap::new(),
    };
    let mut graph = proto
        .graph
        .take()
        .ok_or_else(|| Error::malformed(input, "the model has no graph"))?;

    // the files the output must not replace: the input and every file its tensors come from
    let mut payloads = Vec::with_capacity(graph.initializer.len());
    for t in &mut graph.initializer {
        let p = if t.data_location == Some(EXTERNAL) {
            let p = sources.range(t)?;
            t.external_data.clear();
            t.data_location = None;
            p
        } else if external
            && t.raw_data
                .as_ref()
                .is_some_and(|r| r.len() as u64 >= EXTERNAL_MIN)
        {
            Payload::Memory(t.raw_data.take().unwrap_or_default())
        } else {
            Payload::Kept
        };
        payloads.push(p);
    }
    for target in std::iter::once(out).chain(data.as_deref()) {
        let clash = same_file(target, input)
            || payloads.iter().any(|p| match p {
                Payload::Range { path, .. } => same_file(target, path),
                _ => false,
            });
        if clash {
            return Err(Error::refused(
                target,
                "this would overwrite the input model or its data: choose another output with -o",
            ));
        }
    }
    for sp in &mut graph.sparse_initializer {
        sources.sparse(sp)?;
    }
    sources.nodes(&mut graph.node)?;
    for f in &mut proto.functions {
        sources.nodes(&mut f.node)?;
    }
    for ti in &mut proto.training_info {
        for g in ti.initialization.iter_mut().chain(ti.algorithm.iter_mut()) {
            sources.graph(g)?;
        }
    }

    // external layout: offsets in the data file
    let mut data_len = 0u64;
    let data_name = data
        .as_ref()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if external {
        for (t, p) in graph.initializer.iter_mut().zip(&payloads) {
            if matches!(p, Payload::Kept) {
                continue;
            }
            let offset = data_len.div_ceil(ALIGN) * ALIGN;
            data_len = offset + p.len();
            let entry = |k: &str, v: String| pb::StringStringEntryProto {
                key: Some(k.into()),
                value: Some(v),
            };
            t.external_data = vec![
                entry("location", data_name.clone()),
                entry("offset", offset.to_string()),
                entry("length", p.len().to_string()),
            ];
            t.data_location = Some(EXTERNAL);
        }
    }

    // sizes, for the length prefixes
    let inline = |p: &Payload| -> u64 {
        if external || matches!(p, Payload::Kept) {
            0
        } else {
            key_len(9) as u64 + encoded_len_varint(p.len()) as u64 + p.len()
        }
    };
    let bodies: Vec<u64> = graph
        .initializer
        .iter()
        .zip(&payloads)
        .map(|(t, p)| t.encoded_len() as u64 + inline(p))
        .collect();
    let inits = std::mem::take(&mut graph.initializer);
    let graph_rest = graph.encode_to_vec();
    let graph_len = graph_rest.len() as u64
        + bodies
            .iter()
            .map(|&b| key_len(5) as u64 + encoded_len_varint(b) as u64 + b)
            .sum::<u64>();
    let model_rest = proto.encode_to_vec();
    let total = model_rest.len() as u64
        + key_len(7) as u64
        + encoded_len_varint(graph_len) as u64
        + graph_len;
    if total > PROTOBUF_MAX {
        return Err(Error::refused(
            out,
            format!(
                "the rewritten model would take {} bytes, over protobuf's 2 GiB limit: pass --external-data",
                total
            ),
        ));
    }

    // the data file first, then the model, each through a temporary sibling
    let payload_bytes: u64 = payloads.iter().map(Payload::len).sum();
    progress.start("writing", payload_bytes >> 20);
    let mut written_data = None;
    if let Some(dpath) = &data {
        let mut file = AtomicFile::create(dpath).map_err(|e| Error::io(dpath, e))?;
        {
            let mut w = BufWriter::with_capacity(1 << 20, file.file());
            let mut pos = 0u64;
            for p in &payloads {
                if matches!(p, Payload::Kept) {
                    continue;
                }
                let offset = pos.div_ceil(ALIGN) * ALIGN;
                w.write_all(&vec![0u8; (offset - pos) as usize])
                    .map_err(|e| Error::io(dpath, e))?;
                write_payload(&mut sources, p, &mut w, dpath)?;
                progress.advance(p.len() >> 20);
                pos = offset + p.len();
            }
            w.flush().map_err(|e| Error::io(dpath, e))?;
        }
        file.commit().map_err(|e| Error::io(dpath, e))?;
        written_data = Some(dpath.clone());
    }
    let mut file = AtomicFile::create(out).map_err(|e| Error::io(out, e))?;
    {
        let mut w = BufWriter::with_capacity(1 << 20, file.file());
        let mut head = model_rest;
        encode_key(7, WireType::LengthDelimited, &mut head);
        encode_varint(graph_len, &mut head);
        head.extend_from_slice(&graph_rest);
        w.write_all(&head).map_err(|e| Error::io(out, e))?;
        let mut buf = Vec::new();
        for ((t, p), &body) in inits.iter().zip(&payloads).zip(&bodies) {
            buf.clear();
            encode_key(5, WireType::LengthDelimited, &mut buf);
            encode_varint(body, &mut buf);
            t.encode(&mut buf).expect("a Vec grows");
            if !external && !matches!(p, Payload::Kept) {
                encode_key(9, WireType::LengthDelimited, &mut buf);
                encode_varint(p.len(), &mut buf);
                w.write_all(&buf).map_err(|e| Error::io(out, e))?;
                write_payload(&mut sources, p, &mut w, out)?;
                progress.advance(p.len() >> 20);
            } else {
                w.write_all(&buf).map_err(|e| Error::io(out, e))?;
            }
        }
        w.flush().map_err(|e| Error::io(out, e))?;
    }
    file.commit().map_err(|e| Error::io(out, e))?;
    progress.finish();
    Ok(Written {
        model: out.to_path_buf(),
        data: written_data,
        model_bytes: total,
        data_bytes: data_len,
    })
}

fn write_payload(sources: &mut Sources, p: &Payload, w: &mut impl Write, to: &Path) -> Result<()> {
    match p {
        Payload::Kept => Ok(()),
        Payload::Memory(b) => w.write_all(b).map_err(|e| Error::io(to, e)),
        Payload::Range { path, offset, len } => sources.copy(path, *offset, *len, w, to),
    }
}
