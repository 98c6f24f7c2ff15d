//! Reads an ONNX file without reading its weights.
//!
//! The protobuf is walked with positioned reads; every `raw_data` payload of at least
//! [`MIN_ELIDED`] bytes (of a float initializer, [`MIN_ELIDED_FLOAT`]) is skipped, never read, and
//! its tensor is rewritten to point back into the
//! model file itself (`data_location = EXTERNAL`, location [`SELF_LOCATION`], offset, length). The
//! result is a compact protobuf that prost decodes as usual. Memory-mapping the file instead would
//! let the kernel map whole page-cache folios around every tensor header it touches: on a warm cache
//! that counts hundreds of megabytes of weights in the process's resident set although none is read.
//! Readahead is turned off (`POSIX_FADV_RANDOM`) so that a cold cache reads the headers only.

use std::fs::File;

/// `location` of a tensor whose bytes stay in the model file itself.
pub const SELF_LOCATION: &str = "\u{0}nnlint:self";

/// Smaller payloads are kept inline: they are the shape vectors and scalars analysis folds.
pub const MIN_ELIDED: u64 = 4096;

/// A floating-point initializer's payload is skipped from this size: analysis keeps the values of
/// float initializers of at most 16 elements only (`analysis::ops::initializer_fact`; 128 bytes as
/// `f64`) and reads the others from the file for the rare node that folds them. Without this, a
/// graph of many small weights (100,000 nodes with 8-channel convolutions) held the whole file in
/// memory.
pub const MIN_ELIDED_FLOAT: u64 = 16 * 8 + 1;

/// The most the result's buffer reserves before the walk (beyond it, it grows as it fills).
const MAX_RESERVED: u64 = 64 << 20;

/// How deep the walk may nest; prost's own limit (100 messages of any kind) applies after it.
const MAX_DEPTH: usize = 200;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Model,
    Graph,
    Node,
    Attribute,
    Tensor,
    /// A graph's `initializer`: a tensor whose float payload is elided from [`MIN_ELIDED_FLOAT`].
    Initializer,
    SparseTensor,
    Function,
    TrainingInfo,
}

/// Fields that hold messages which can (transitively) hold tensors.
fn child(kind: Kind, field: u64) -> Option<Kind> {
    use Kind::*;
    Some(match (kind, field) {
        (Model, 7) => Graph,
        (Model, 20) => TrainingInfo,
        (Model, 25) => Function,
        (TrainingInfo, 1 | 2) => Graph,
        (Graph, 1) => Node,
        (Graph, 5) => Initializer,
        (Graph, 15) => SparseTensor,
        (Node, 5) => Attribute,
        (Attribute, 5 | 10) => Tensor,
        (Attribute, 6 | 11) => Graph,
        (Attribute, 22 | 23) => SparseTensor,
        (SparseTensor, 1 | 2) => Tensor,
        (Function, 7) => Node,
        _ => return None,
    })
}

/// Positioned reads through a small window.
struct Reader<'f> {
    file: &'f File,
    len: u64,
    pos: u64,
    buf: Vec<u8>,
    buf_start: u64,
    /// Whether messages that fit the window are read from memory ([`Slice`]); off only in tests,
    /// which compare both ways.
    slices: bool,
}

/// Read size: headers sit right before their payloads, so a small window reads little of the weights.
const WINDOW: usize = 16 << 10;

/// Why a walk stopped: a problem with the file (the message the user sees), or a [`Slice`] that ran
/// out of window (the [`Reader`] takes the message over).
enum Fail {
    Msg(String),
    Refill,
}

/// What [`compact`] reads from: the file through its window, or a message already in the window.
trait Source {
    fn pos(&self) -> u64;
    fn seek(&mut self, pos: u64);
    fn err(&self, msg: &str) -> Fail;
    fn byte(&mut self) -> Result<u8, Fail>;

    fn varint(&mut self) -> Result<u64, Fail> {
        read_varint(self)
    }

    /// Appends the `n` bytes at the position to `out`.
    fn copy(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), Fail>;
    /// Whether the bytes read are at hand in memory ([`Source::raw`], [`Source::skip`]).
    fn in_memory(&self) -> bool;
    /// The bytes `[from, to)`, read already (only in memory; `None` otherwise).
    fn raw(&self, from: u64, to: u64) -> Option<&[u8]>;
    /// Moves past `n` bytes, which the caller copies later with [`Source::raw`] (only in memory).
    fn skip(&mut self, n: u64) -> Result<(), Fail>;
    /// The message `[start, start + len)`, at the position, in memory when it fits the window.
    fn window(&mut self, start: u64, len: u64) -> Result<Option<Slice<'_>>, Fail>;
}

/// A varint read byte by byte.
fn read_varint<S: Source + ?Sized>(r: &mut S) -> Result<u64, Fail> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let b = r.byte()?;
        if shift == 63 && b > 1 {
            return Err(r.err("invalid varint"));
        }
        v |= ((b & 0x7f) as u64) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(r.err("invalid varint"))
}

impl Reader<'_> {
    fn err(&self, msg: &str) -> Fail {
        Fail::Msg(format!("{msg} at byte {}", self.pos))
    }

    /// Makes `[pos, pos + n)` available in the window (n ≤ WINDOW).
    fn fill(&mut self, n: usize) -> Result<(), Fail> {
        let end = self
            .pos
            .checked_add(n as u64)
            .ok_or_else(|| self.err("offset overflows"))?;
        if end > self.len {
            return Err(self.err("a field runs past the end of the file (a truncated file?)"));
        }
        let have = self.pos >= self.buf_start && end <= self.buf_start + self.buf.len() as u64;
        if !have {
            let want = (WINDOW as u64).min(self.len - self.pos) as usize;
            self.buf.resize(want.max(n), 0);
            read_exact_at(self.file, &mut self.buf, self.pos)
                .map_err(|e| self.err(&e.to_string()))?;
            self.buf_start = self.pos;
        }
        Ok(())
    }

    fn byte(&mut self) -> Result<u8, Fail> {
        // in the window: no bounds arithmetic beyond this (a varint reads bytes one by one)
        if let Some(&b) = self
            .pos
            .checked_sub(self.buf_start)
            .and_then(|at| self.buf.get(usize::try_from(at).ok()?))
        {
            self.pos += 1;
            return Ok(b);
        }
        self.fill(1)?;
        let b = self.buf[(self.pos - self.buf_start) as usize];
        self.pos += 1;
        Ok(b)
    }

    /// Appends `n` bytes at the position to `out`.
    fn copy(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), Fail> {
        let end = self
            .pos
            .checked_add(n)
            .ok_or_else(|| self.err("length overflows"))?;
        if end > self.len {
            return Err(self.err("a field runs past the end of the file (a truncated file?)"));
        }
        let mut left = n;
        while left > 0 {
            let chunk = left.min(WINDOW as u64) as usize;
            self.fill(chunk)?;
            let at = (self.pos - self.buf_start) as usize;
            out.extend_from_slice(&self.buf[at..at + chunk]);
            self.pos += chunk as u64;
            left -= chunk as u64;
        }
        Ok(())
    }
}

impl Source for Reader<'_> {
    fn pos(&self) -> u64 {
        self.pos
    }

    fn seek(&mut self, pos: u64) {
        self.pos = pos;
    }

    fn err(&self, msg: &str) -> Fail {
        Reader::err(self, msg)
    }

    fn byte(&mut self) -> Result<u8, Fail> {
        Reader::byte(self)
    }

    fn copy(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), Fail> {
        Reader::copy(self, n, out)
    }

    fn in_memory(&self) -> bool {
        false
    }

    fn raw(&self, _from: u64, _to: u64) -> Option<&[u8]> {
        None
    }

    fn skip(&mut self, _n: u64) -> Result<(), Fail> {
        Err(Fail::Refill)
    }

    fn window(&mut self, start: u64, len: u64) -> Result<Option<Slice<'_>>, Fail> {
        if !self.slices || len > WINDOW as u64 {
            return Ok(None);
        }
        debug_assert_eq!(self.pos, start);
        self.fill(len as usize)?;
        let at = (start - self.buf_start) as usize;
        Ok(Some(Slice {
            bytes: &self.buf[at..],
            base: start,
            at: 0,
        }))
    }
}

/// A message that lies whole in the reader's window, read from memory: the bytes from its start to
/// the window's end. Reading past them is [`Fail::Refill`]: the message is read again through the
/// [`Reader`], which gives the same result or the same error as if it had never been sliced.
struct Slice<'b> {
    bytes: &'b [u8],
    /// File offset of `bytes[0]`.
    base: u64,
    at: usize,
}

impl Source for Slice<'_> {
    fn pos(&self) -> u64 {
        self.base + self.at as u64
    }

    fn seek(&mut self, pos: u64) {
        // past the bytes when it skips an elided payload beyond the window: the next read refills
        self.at = pos
            .checked_sub(self.base)
            .and_then(|at| usize::try_from(at).ok())
            .unwrap_or(usize::MAX);
    }

    fn err(&self, msg: &str) -> Fail {
        Fail::Msg(format!("{msg} at byte {}", self.pos()))
    }

    #[inline]
    fn byte(&mut self) -> Result<u8, Fail> {
        let &b = self.bytes.get(self.at).ok_or(Fail::Refill)?;
        self.at += 1;
        Ok(b)
    }

    #[inline]
    fn varint(&mut self) -> Result<u64, Fail> {
        // one byte, as nearly every tag and length of a graph's messages is
        match self.bytes.get(self.at) {
            Some(&b) if b < 0x80 => {
                self.at += 1;
                Ok(u64::from(b))
            }
            _ => read_varint(self),
        }
    }

    fn copy(&mut self, n: u64, out: &mut Vec<u8>) -> Result<(), Fail> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .filter(|&e| e <= self.bytes.len())
            .ok_or(Fail::Refill)?;
        out.extend_from_slice(&self.bytes[self.at..end]);
        self.at = end;
        Ok(())
    }

    fn in_memory(&self) -> bool {
        true
    }

    fn raw(&self, from: u64, to: u64) -> Option<&[u8]> {
        let at = |p: u64| usize::try_from(p.checked_sub(self.base)?).ok();
        self.bytes.get(at(from)?..at(to)?)
    }

    fn skip(&mut self, n: u64) -> Result<(), Fail> {
        self.at = usize::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .filter(|&e| e <= self.bytes.len())
            .ok_or(Fail::Refill)?;
        Ok(())
    }

    fn window(&mut self, _start: u64, _len: u64) -> Result<Option<Slice<'_>>, Fail> {
        Ok(None)
    }
}

#[cfg(unix)]
pub(crate) fn read_exact_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

#[cfg(windows)]
pub(crate) fn read_exact_at(f: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    while !buf.is_empty() {
        match f.seek_read(buf, offset)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
        }
    }
    Ok(())
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bytes `v` takes as a varint.
fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn put_bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, field << 3 | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Appends an `external_data` entry (field 13, a StringStringEntryProto: key = 1, value = 2),
/// written in place (an entry built apart and its number formatted as a `String` were most of the
/// cost of leaving a payload in the file).
fn put_entry(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let len = |b: usize| 1 + varint_len(b as u64) + b;
    put_varint(out, 13 << 3 | 2);
    put_varint(out, (len(key.len()) + len(value.len())) as u64);
    put_bytes_field(out, 1, key.as_bytes());
    put_bytes_field(out, 2, value);
}

/// `v` in decimal, in `buf`.
fn decimal(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[at..];
        }
    }
}

/// Appends the compacted message `r.pos..end` of `kind` to `out`. A nested message is compacted in
/// place, after room for its length as the file wrote it (a compacted message is never longer than
/// its original: an elided payload of at least 129 bytes, 132 with its tag and length, gives way
/// to at most 92 bytes of location); the length is written there when the message is done, and
/// the message moves back only when its length takes fewer bytes than the original's (an elided
/// payload crossed a power of 128). Each byte is copied once, not once per level of nesting.
fn compact<S: Source>(
    r: &mut S,
    end: u64,
    kind: Kind,
    depth: usize,
    out: &mut Vec<u8>,
) -> Result<(), Fail> {
    if depth > MAX_DEPTH {
        return Err(Fail::Msg("the model is nested too deeply".into()));
    }
    let tensor = matches!(kind, Kind::Tensor | Kind::Initializer);
    let mut elided: Option<(u64, u64)> = None;
    let mut data_location: Option<u64> = None;
    // an initializer's data_type, when it comes before the payload (as every exporter writes it)
    let mut float = false;
    // in memory: where the fields read but not yet written, to be copied as they are, begin
    let mut run: Option<u64> = None;
    fn flush<S: Source>(
        r: &S,
        run: &mut Option<u64>,
        to: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), Fail> {
        if let Some(from) = run.take() {
            // bytes read in memory are there: otherwise the reader reads the message again
            out.extend_from_slice(r.raw(from, to).ok_or(Fail::Refill)?);
        }
        Ok(())
    }
    while r.pos() < end {
        let from = r.pos();
        let tag = r.varint()?;
        let (field, wire) = (tag >> 3, tag & 7);
        if field == 0 {
            return Err(r.err("invalid field number 0"));
        }
        // in memory, a field whose tag and varint are minimal (as they are written here) is copied
        // as the file has it, with the fields before and after it: one copy per run of such fields
        let minimal = |r: &S, second: Option<u64>| {
            let read = r.pos() - from;
            // one byte each (nearly always) is minimal
            r.in_memory()
                && (read == 1 + u64::from(second.is_some())
                    || read == (varint_len(tag) + second.map_or(0, varint_len)) as u64)
        };
        match wire {
            0 => {
                let v = r.varint()?;
                if kind == Kind::Initializer && field == 2 {
                    float = i32::try_from(v)
                        .ok()
                        .and_then(crate::ir::DType::from_onnx)
                        .is_some_and(crate::ir::DType::is_float);
                }
                if tensor && field == 14 {
                    // data_location: written once at the end (an elided tensor's becomes EXTERNAL;
                    // a second copy would read as bytes of an unknown field)
                    flush(r, &mut run, from, out)?;
                    data_location = Some(v);
                    continue;
                }
                if minimal(r, Some(v)) {
                    run.get_or_insert(from);
                } else {
                    flush(r, &mut run, from, out)?;
                    put_varint(out, tag);
                    put_varint(out, v);
                }
            }
            1 | 5 => {
                let n = if wire == 1 { 8 } else { 4 };
                if minimal(r, None) {
                    r.skip(n)?;
                    run.get_or_insert(from);
                } else {
                    flush(r, &mut run, from, out)?;
                    put_varint(out, tag);
                    r.copy(n, out)?;
                }
            }
            2 => {
                let len = r.varint()?;
                let start = r.pos();
                let stop = start.checked_add(len).filter(|&s| s <= end).ok_or_else(|| {
                    r.err("a field runs past the end of its message (a truncated or corrupt file?)")
                })?;
                let min = if float { MIN_ELIDED_FLOAT } else { MIN_ELIDED };
                if tensor && field == 9 && len >= min {
                    flush(r, &mut run, from, out)?;
                    elided = Some((start, len));
                    r.seek(stop);
                } else if child(kind, field).is_some_and(|k| {
                    minimal(r, Some(len))
                        && r.raw(start, stop).is_some_and(|b| plain(b, k, depth + 1))
                }) {
                    // nothing in it changes: copied with the fields around it
                    r.skip(len)?;
                    run.get_or_insert(from);
                } else if let Some(k) = child(kind, field) {
                    flush(r, &mut run, from, out)?;
                    put_varint(out, tag);
                    let width = varint_len(len);
                    let len_at = out.len();
                    out.extend_from_slice(&[0; 10][..width]);
                    let body = out.len();
                    let sliced = match r.window(start, len)? {
                        Some(mut slice) => compact(&mut slice, stop, k, depth + 1, out),
                        None => Err(Fail::Refill),
                    };
                    match sliced {
                        Err(Fail::Refill) => {
                            // not in memory, or it reads past the window: through the reader
                            out.truncate(body);
                            r.seek(start);
                            compact(r, stop, k, depth + 1, out)?;
                        }
                        done => done?,
                    }
                    let n = (out.len() - body) as u64;
                    let used = varint_len(n);
                    if used > width {
                        return Err(r.err("a message grew when compacted"));
                    }
                    let mut at = len_at;
                    let mut v = n;
                    while v >= 0x80 {
                        out[at] = (v as u8) | 0x80;
                        v >>= 7;
                        at += 1;
                    }
                    out[at] = v as u8;
                    if used < width {
                        out.copy_within(body.., len_at + used);
                        out.truncate(out.len() - (width - used));
                    }
                    r.seek(stop);
                } else if minimal(r, Some(len)) {
                    r.skip(len)?;
                    run.get_or_insert(from);
                } else {
                    flush(r, &mut run, from, out)?;
                    put_varint(out, tag);
                    put_varint(out, len);
                    r.copy(len, out)?;
                }
            }
            _ => return Err(r.err(&format!("invalid wire type {wire}"))),
        }
    }
    if r.pos() != end {
        return Err(r.err("a message ends inside a field"));
    }
    flush(r, &mut run, end, out)?;
    if let Some((offset, length)) = elided {
        let mut buf = [0; 20];
        put_entry(out, "location", SELF_LOCATION.as_bytes());
        put_entry(out, "offset", decimal(offset, &mut buf));
        put_entry(out, "length", decimal(length, &mut buf));
        put_varint(out, 14 << 3);
        put_varint(out, 1);
    } else if let Some(v) = data_location {
        put_varint(out, 14 << 3);
        put_varint(out, v);
    }
    Ok(())
}

/// Whether [`compact`] would write the message `b` of `kind` as it is: every varint minimal, no
/// payload it leaves in the file, no `data_location` it moves, nothing it refuses (the walk gives
/// the errors). Most nodes and small initializers are so, and checking costs less than the walk.
fn plain(mut b: &[u8], kind: Kind, depth: usize) -> bool {
    // the in-place readers' varint: prost's, and no longer than its value needs
    use super::onnx_shell::minimal_varint as varint;
    if depth > MAX_DEPTH {
        return false;
    }
    let tensor = matches!(kind, Kind::Tensor | Kind::Initializer);
    // an initializer's float payload is left in the file from the lower bound: any payload from
    // it makes the message not plain, whatever its type
    let min = if kind == Kind::Initializer {
        MIN_ELIDED_FLOAT
    } else {
        MIN_ELIDED
    };
    while !b.is_empty() {
        let Some(tag) = varint(&mut b) else {
            return false;
        };
        let field = tag >> 3;
        if field == 0 {
            return false;
        }
        match tag & 7 {
            0 => {
                if varint(&mut b).is_none() || (tensor && field == 14) {
                    return false;
                }
            }
            wire @ (1 | 5) => {
                let n = if wire == 1 { 8 } else { 4 };
                let Some(rest) = b.get(n..) else {
                    return false;
                };
                b = rest;
            }
            2 => {
                let Some(body) = varint(&mut b)
                    .and_then(|len| usize::try_from(len).ok())
                    .and_then(|len| b.get(..len))
                else {
                    return false;
                };
                b = &b[body.len()..];
                if tensor && field == 9 && body.len() as u64 >= min {
                    return false;
                }
                if let Some(k) = child(kind, field) {
                    if !plain(body, k, depth + 1) {
                        return false;
                    }
                }
            }
            _ => return false,
        }
    }
    true
}

/// The model's protobuf with large `raw_data` payloads replaced by references into the file.
pub fn skim(file: &File, len: u64) -> Result<Vec<u8>, String> {
    skim_with(file, len, true)
}

fn skim_with(file: &File, len: u64, slices: bool) -> Result<Vec<u8>, String> {
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor for the life of `file`; the call only sets an access hint.
        unsafe {
            libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
        }
    }
    let mut r = Reader {
        file,
        len,
        pos: 0,
        buf: Vec::new(),
        buf_start: 0,
        slices,
    };
    // room for the whole result at once: it is never longer than the file (`compact`), and pages
    // reserved but not written take no memory; grown by doubling, the 17 MB result of a 42 MB
    // graph of 100,000 nodes was copied 16 times (2% of `mem`'s instructions)
    let mut out = Vec::with_capacity(len.min(MAX_RESERVED) as usize);
    crate::util::pages::advise_huge(&out);
    match compact(&mut r, len, Kind::Model, 0, &mut out) {
        Ok(()) => Ok(out),
        Err(Fail::Msg(m)) => Err(m),
        // the reader takes over every slice that runs out; it never runs out itself
        Err(Fail::Refill) => Err("the file could not be read in order".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::onnx_pb as pb;
    use prost::Message;

    /// `b` written to `path` and skimmed through the window (in memory where a message fits) and
    /// through the reader alone.
    fn both_ways(
        path: &std::path::Path,
        b: &[u8],
    ) -> (Result<Vec<u8>, String>, Result<Vec<u8>, String>) {
        std::fs::write(path, b).unwrap();
        let f = File::open(path).unwrap();
        let len = b.len() as u64;
        (skim_with(&f, len, true), skim_with(&f, len, false))
    }

    /// Skims an encoded model written to a file.
    fn skim_encoded(bytes: &[u8]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, bytes).unwrap();
        skim(&File::open(&path).unwrap(), bytes.len() as u64).unwrap()
    }

    #[test]
    fn large_raw_data_becomes_a_self_reference() {
        let big = vec![7u8; 10_000];
        let model = pb::ModelProto {
            ir_version: Some(9),
            graph: Some(pb::GraphProto {
                initializer: vec![
                    pb::TensorProto {
                        name: Some("w".into()),
                        dims: vec![2500],
                        data_type: Some(1),
                        raw_data: Some(big.clone().into()),
                        ..Default::default()
                    },
                    pb::TensorProto {
                        name: Some("s".into()),
                        dims: vec![2],
                        data_type: Some(7),
                        raw_data: Some(vec![1u8; 16].into()),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = model.encode_to_vec();
        let compacted = skim_encoded(&bytes);
        assert!(compacted.len() < 200, "{}", compacted.len());
        let back = pb::ModelProto::decode(compacted.as_slice()).unwrap();
        let w = &back.graph.as_ref().unwrap().initializer[0];
        assert_eq!(w.raw_data, None);
        assert_eq!(w.data_location, Some(1));
        let kv: Vec<(&str, &str)> = w
            .external_data
            .iter()
            .map(|e| (e.key.as_deref().unwrap(), e.value.as_deref().unwrap()))
            .collect();
        let offset: usize = kv[1].1.parse().unwrap();
        assert_eq!(kv[0], ("location", SELF_LOCATION));
        assert_eq!(&bytes[offset..offset + 10_000], big.as_slice());
        // small payloads stay inline
        let s = &back.graph.as_ref().unwrap().initializer[1];
        assert_eq!(s.raw_data.as_deref(), Some(&[1u8; 16][..]));
    }

    #[test]
    fn float_initializers_are_elided_from_129_bytes_and_other_tensors_from_4096() {
        let tensor = |name: &str, data_type: i32, len: usize| pb::TensorProto {
            name: Some(name.into()),
            dims: vec![len as i64],
            data_type: Some(data_type),
            raw_data: Some(vec![1u8; len].into()),
            ..Default::default()
        };
        let (float, int8) = (1, 3);
        let model = pb::ModelProto {
            ir_version: Some(9),
            graph: Some(pb::GraphProto {
                initializer: vec![
                    tensor("f129", float, 129),
                    tensor("f128", float, 128),
                    tensor("i2048", int8, 2048),
                ],
                node: vec![pb::NodeProto {
                    op_type: Some("Constant".into()),
                    output: vec!["c".into()],
                    attribute: vec![pb::AttributeProto {
                        name: Some("value".into()),
                        r#type: Some(4),
                        t: Some(Box::new(tensor("c", float, 2048))),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        let back = pb::ModelProto::decode(skim_encoded(&model.encode_to_vec()).as_slice()).unwrap();
        let g = back.graph.unwrap();
        let inline: Vec<bool> = g.initializer.iter().map(|t| t.raw_data.is_some()).collect();
        assert_eq!(inline, [false, true, true]);
        // a Constant's tensor is folded from its node's fact: kept below 4096 bytes
        assert!(g.node[0].attribute[0]
            .t
            .as_ref()
            .unwrap()
            .raw_data
            .is_some());
    }

    #[test]
    fn an_entry_is_what_prost_encodes_and_numbers_are_decimal() {
        for (key, v) in [
            ("offset", 0u64),
            ("length", 7),
            ("offset", 1 << 40),
            ("x", u64::MAX),
        ] {
            let mut buf = [0; 20];
            let mut out = Vec::new();
            put_entry(&mut out, key, decimal(v, &mut buf));
            let want = pb::TensorProto {
                external_data: vec![pb::StringStringEntryProto {
                    key: Some(key.into()),
                    value: Some(v.to_string()),
                }],
                ..Default::default()
            };
            assert_eq!(out, want.encode_to_vec(), "{key}={v}");
        }
    }

    #[test]
    fn varint_len_is_what_put_varint_writes() {
        for v in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            (1 << 35) - 1,
            1 << 35,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(varint_len(v), out.len(), "{v}");
        }
    }

    /// Messages whose lengths take fewer bytes once compacted (a node, its attribute, the graph
    /// and the model around an elided payload) move back over the room kept for the longer length:
    /// the result decodes to the same model, minus the payloads, and every length is minimal.
    #[test]
    fn nested_messages_that_shrink_across_a_length_byte_decode_the_same() {
        let tensor = |name: &str, len: usize| pb::TensorProto {
            name: Some(name.into()),
            dims: vec![len as i64 / 4],
            data_type: Some(1),
            raw_data: Some(vec![3u8; len].into()),
            ..Default::default()
        };
        let node = |name: &str, len: usize| pb::NodeProto {
            name: Some(name.into()),
            op_type: Some("Constant".into()),
            output: vec![name.into()],
            attribute: vec![pb::AttributeProto {
                name: Some("value".into()),
                r#type: Some(4),
                t: Some(Box::new(tensor(name, len))),
                ..Default::default()
            }],
            ..Default::default()
        };
        let model = pb::ModelProto {
            ir_version: Some(9),
            graph: Some(pb::GraphProto {
                name: Some("g".into()),
                // 2-byte, 3-byte and 1-byte lengths before, 1-byte after (or unchanged)
                node: vec![node("a", 5000), node("b", 40_000), node("c", 16)],
                initializer: vec![tensor("w", 20_000), tensor("s", 8)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = model.encode_to_vec();
        let compacted = skim_encoded(&bytes);
        let back = pb::ModelProto::decode(compacted.as_slice()).unwrap();
        // minimal lengths: re-encoding gives the same bytes
        assert_eq!(back.encode_to_vec(), compacted);
        let g = back.graph.unwrap();
        let payloads: Vec<bool> = g
            .node
            .iter()
            .map(|n| n.attribute[0].t.as_ref().unwrap().raw_data.is_some())
            .chain(g.initializer.iter().map(|t| t.raw_data.is_some()))
            .collect();
        assert_eq!(payloads, [false, false, true, false, true]);
        let names: Vec<&str> = g.node.iter().map(|n| n.name.as_deref().unwrap()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        let mut stripped = model.graph.unwrap();
        stripped.node[2].attribute[0]
            .t
            .as_mut()
            .unwrap()
            .external_data
            .clear();
        assert_eq!(g.node[2], stripped.node[2]);
        assert_eq!(g.initializer[1], stripped.initializer[1]);
        assert_eq!(g.name.as_deref(), Some("g"));
    }

    /// Messages read from memory ([`Slice`]) give what the reader alone gives, byte for byte and
    /// error for error: on a model larger than the window (nodes straddle its ends), whole, cut at
    /// many lengths, and with single bytes overwritten.
    #[test]
    fn slices_read_as_the_reader_does_whole_truncated_and_corrupt() {
        let node = |i: usize| pb::NodeProto {
            name: Some(format!("/blocks.{i}/conv/Conv")),
            op_type: Some(if i % 50 == 7 { "Constant" } else { "Conv" }.into()),
            input: vec![format!("x{i}"), format!("w{i}")],
            output: vec![format!("x{}", i + 1)],
            attribute: vec![pb::AttributeProto {
                name: Some(if i % 50 == 7 { "value" } else { "strides" }.into()),
                r#type: Some(if i % 50 == 7 { 4 } else { 7 }),
                ints: if i % 50 == 7 { vec![] } else { vec![1, 1] },
                // a payload elided inside a node, and one kept
                t: (i % 50 == 7).then(|| {
                    Box::new(pb::TensorProto {
                        dims: vec![1200 + i as i64],
                        data_type: Some(1),
                        raw_data: Some(vec![9u8; 4 * (1200 + i)].into()),
                        data_location: Some(0),
                        ..Default::default()
                    })
                }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let model = pb::ModelProto {
            ir_version: Some(9),
            graph: Some(pb::GraphProto {
                node: (0..300).map(node).collect(),
                initializer: (0..40)
                    .map(|i| pb::TensorProto {
                        name: Some(format!("w{i}")),
                        dims: vec![i * 40],
                        data_type: Some(1),
                        raw_data: Some(vec![1u8; 160 * i as usize].into()),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = model.encode_to_vec();
        assert!(bytes.len() > 3 * WINDOW, "{}", bytes.len());
        let dir = tempfile::tempdir().unwrap();
        let both = |b: &[u8]| both_ways(&dir.path().join("m.onnx"), b);
        let (sliced, read) = both(&bytes);
        assert!(sliced.is_ok());
        assert_eq!(sliced, read);
        let (mut oks, mut errs) = (0, 0);
        for cut in (1..bytes.len()).step_by(97) {
            let (sliced, read) = both(&bytes[..cut]);
            assert_eq!(sliced, read, "cut at {cut}");
            if sliced.is_ok() {
                oks += 1
            } else {
                errs += 1
            }
        }
        for at in (0..bytes.len()).step_by(89) {
            for byte in [0x00, 0x80, 0xff, 0x0a] {
                let mut b = bytes.clone();
                b[at] = byte;
                let (sliced, read) = both(&b);
                assert_eq!(sliced, read, "byte {at} set to {byte:#x}");
                if sliced.is_ok() {
                    oks += 1
                } else {
                    errs += 1
                }
            }
        }
        assert!(oks > 100 && errs > 100, "{oks} {errs}");
    }

    /// The messages [`plain`] lets through are copied as the walk writes them: a small model whose
    /// nodes hold the cases that make a message not plain (a payload left in the file inside a
    /// subgraph's initializer, a `data_location`, a float initializer at the bound), with every
    /// byte overwritten by each of a few values and the file cut at every byte, skims to the same
    /// bytes or the same error through the window (where `plain` applies) and through the reader
    /// alone (where it never does).
    #[test]
    fn plain_messages_are_copied_as_the_walk_writes_them() {
        let tensor = |name: &str, len: usize, data_type: i32| pb::TensorProto {
            name: Some(name.into()),
            dims: vec![len as i64],
            data_type: Some(data_type),
            raw_data: Some(vec![3u8; len * 4].into()),
            ..Default::default()
        };
        let node = |name: &str, attribute: Vec<pb::AttributeProto>| pb::NodeProto {
            name: Some(name.into()),
            op_type: Some("Op".into()),
            input: vec!["x".into(), String::new()],
            output: vec!["y".into()],
            attribute,
            ..Default::default()
        };
        let sub = pb::GraphProto {
            node: vec![node("inner", vec![])],
            // 128 bytes stay, 132 go
            initializer: vec![
                tensor("f32", 32, 1),
                tensor("g32", 33, 1),
                tensor("i32", 33, 6),
            ],
            ..Default::default()
        };
        let model = pb::ModelProto {
            ir_version: Some(9),
            graph: Some(pb::GraphProto {
                node: vec![
                    node(
                        "plain",
                        vec![pb::AttributeProto {
                            name: Some("k".into()),
                            ints: vec![3, -1],
                            f: Some(0.5),
                            ..Default::default()
                        }],
                    ),
                    node(
                        "located",
                        vec![pb::AttributeProto {
                            name: Some("value".into()),
                            t: Some(Box::new(pb::TensorProto {
                                data_location: Some(0),
                                ..tensor("c", 2, 7)
                            })),
                            ..Default::default()
                        }],
                    ),
                    node(
                        "branch",
                        vec![pb::AttributeProto {
                            name: Some("then_branch".into()),
                            g: Some(Box::new(sub)),
                            ..Default::default()
                        }],
                    ),
                ],
                initializer: vec![tensor("b", 4, 1), tensor("w", 40, 1)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = model.encode_to_vec();
        let dir = tempfile::tempdir().unwrap();
        let both = |b: &[u8]| both_ways(&dir.path().join("m.onnx"), b);
        let (sliced, read) = both(&bytes);
        assert_eq!(sliced, read);
        assert!(
            sliced.unwrap().len() < bytes.len(),
            "a payload is left in the file"
        );
        for at in 0..bytes.len() {
            for byte in [0x00, 0x01, 0x80, 0xff, bytes[at] ^ 0x08] {
                let mut b = bytes.clone();
                b[at] = byte;
                let (sliced, read) = both(&b);
                assert_eq!(sliced, read, "byte {at} set to {byte:#x}");
            }
            let (sliced, read) = both(&bytes[..at]);
            assert_eq!(sliced, read, "cut at {at}");
        }
    }

    #[test]
    fn truncation_is_an_error() {
        let model = pb::ModelProto {
            ir_version: Some(9),
            graph: Some(pb::GraphProto {
                name: Some("g".repeat(100)),
                ..Default::default()
            }),
            ..Default::default()
        };
        let bytes = model.encode_to_vec();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
        let f = File::open(&path).unwrap();
        let e = skim(&f, (bytes.len() - 10) as u64).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
    }
}
