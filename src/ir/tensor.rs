//! Stored tensors (initializers, `Constant` values): their type, shape and a lazy handle on the data.
//!
//! The data is never read when a model is loaded: `Raw` borrows a slice of the memory-mapped model,
//! `External` only records where the bytes are. Analysis reads values only for small integer or
//! float tensors that feed shape computations ([`Tensor::read_values`]).

use std::path::Path;

use bytes::Bytes;

use super::dtype::DType;

/// A tensor stored in the model file or beside it. 80 bytes: its name and dimensions are boxed
/// slices, not a `String` and a `Vec` (96 bytes; a graph of 100,000 nodes holds ~67,000
/// initializers, each boxed in its value).
#[derive(Clone, Debug)]
pub struct Tensor {
    pub name: Box<str>,
    pub dtype: DType,
    pub dims: Box<[u64]>,
    pub data: TensorData,
}

/// Where a tensor's bytes are.
#[derive(Clone, Debug)]
pub enum TensorData {
    /// `raw_data`: little-endian packed elements, a slice of the mapped model.
    Raw(Bytes),
    /// `data_location = EXTERNAL`: a validated range of a file inside the model's directory.
    External(ExternalData),
    /// Typed fields (`float_data`, `int64_data`, ...), decoded by prost.
    Typed(TypedData),
    /// No payload (string tensors, or a tensor with zero elements).
    Empty,
    /// Bytes that cannot be read (an external data file that is missing, or shorter than the
    /// tensor needs), and why. Shapes, sizes and costs do not need them; only what reads weight
    /// values (rewrites, the checker, duplicate detection, spectra) does.
    Unavailable(String),
}

/// A checked reference to external data: the file exists, lies under the model's directory, and
/// holds `offset..offset + length`.
#[derive(Clone, Debug)]
pub struct ExternalData {
    /// Shared by the tensors of one file (a graph of 60,000 weights left in the model file held a
    /// copy of its path per weight).
    pub path: std::sync::Arc<Path>,
    pub offset: u64,
    pub length: u64,
}

/// Values from the typed repeated fields of a `TensorProto`.
#[derive(Clone, Debug)]
pub enum TypedData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    /// `int32_data` also carries int8/16, uint8/16, bool and the 16-bit float types (as bit patterns).
    I32(Vec<i32>),
    I64(Vec<i64>),
    U64(Vec<u64>),
}

/// Small tensor values read for constant folding.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl Tensor {
    /// Why the bytes cannot be read, when they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        match &self.data {
            TensorData::Unavailable(why) => Some(why),
            _ => None,
        }
    }

    /// Number of elements, `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// Bytes this tensor takes in its stored dtype (`None` for strings or on overflow).
    pub fn byte_size(&self) -> Option<u64> {
        self.dtype.bytes_for(self.numel()?)
    }

    /// Reads the values of a small tensor (at most `max_elems` elements) of an integer, bool or
    /// float type. Returns `None` for anything else, for bigger tensors, or when the bytes cannot be
    /// read; folding then simply does not happen.
    pub fn read_values(&self, max_elems: u64) -> Option<Values> {
        let numel = self.numel()?;
        if numel > max_elems {
            return None;
        }
        let n = usize::try_from(numel).ok()?;
        match &self.data {
            TensorData::Raw(bytes) => decode_le(self.dtype, bytes, n),
            TensorData::External(ext) => read_external(ext, self.dtype, n),
            TensorData::Typed(t) => decode_typed(self.dtype, t, n),
            TensorData::Unavailable(_) => None,
            TensorData::Empty => {
                if n == 0 {
                    Some(if self.dtype.is_float() {
                        Values::Float(Vec::new())
                    } else {
                        Values::Int(Vec::new())
                    })
                } else {
                    None
                }
            }
        }
    }

    /// Visits the values of a float tensor in order, a chunk at a time (the index of the chunk's
    /// first value, the values), without holding them all: what reads a large weight once.
    /// `None` when the tensor is not float, or its data cannot be read.
    pub fn for_each_float_chunk(&self, mut f: impl FnMut(usize, &[f64])) -> Option<()> {
        if !matches!(
            self.dtype,
            DType::F32 | DType::F64 | DType::F16 | DType::BF16
        ) {
            return None;
        }
        let n = usize::try_from(self.numel()?).ok()?;
        let len = self.dtype.bytes_for(n as u64)?;
        let width = usize::try_from(self.dtype.bytes_for(1)?).ok()?;
        let mut chunk: Vec<f64> = Vec::new();
        let mut start = 0;
        let mut visit = |b: &[u8]| {
            chunk.resize(b.len() / width, 0.0);
            decode_float_into(self.dtype, b, &mut chunk)?;
            f(start, &chunk);
            start += chunk.len();
            Some(())
        };
        match &self.data {
            TensorData::Raw(b) if b.len() as u64 == len => {
                b.chunks(READ_CHUNK).try_for_each(&mut visit)?;
            }
            TensorData::External(ext) => stream_external(ext, len, &mut visit)?,
            _ => match self.read_values(u64::MAX)? {
                Values::Float(v) => {
                    f(0, &v);
                    start = v.len();
                }
                Values::Int(_) => return None,
            },
        }
        (start == n).then_some(())
    }
}

/// Bytes read from an external file at a time: a multiple of every element width, small enough
/// that the buffer stays in cache while it is decoded.
const READ_CHUNK: usize = 1 << 20;

/// Reads and decodes `n` elements from external data a chunk at a time, so that no byte copy of a
/// large tensor is held beside its values.
fn read_external(ext: &ExternalData, dtype: DType, n: usize) -> Option<Values> {
    let len = dtype.bytes_for(n as u64)?;
    let width = usize::try_from(dtype.bytes_for(1)?).ok()?;
    let parts = rayon::current_num_threads().min(n / PARALLEL_READ_ELEMS.max(1));
    if parts > 1 && matches!(dtype, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
        return read_external_parallel(ext, dtype, n, width, parts);
    }
    let mut out = Values::empty(dtype, n)?;
    stream_external(ext, len, |b| decode_le_into(dtype, b, &mut out))?;
    (out.len() == n).then_some(out)
}

/// Elements per thread from which a float tensor is read and decoded by several threads: writing
/// fresh memory (page faults) costs as much as the decoding, and both divide among cores.
const PARALLEL_READ_ELEMS: usize = 1 << 21;

/// [`read_external`] of a large float tensor: `parts` threads each read and decode a contiguous
/// share of the elements into their place in the result.
fn read_external_parallel(
    ext: &ExternalData,
    dtype: DType,
    n: usize,
    width: usize,
    parts: usize,
) -> Option<Values> {
    use rayon::prelude::*;
    if ext.length < dtype.bytes_for(n as u64)? {
        return None;
    }
    let mut out = vec![0.0f64; n];
    let share = n.div_ceil(parts);
    let ok = out.par_chunks_mut(share).enumerate().all(|(i, dst)| {
        let first = (i * share) as u64;
        let part = ExternalData {
            path: ext.path.clone(),
            offset: ext.offset + first * width as u64,
            length: (dst.len() * width) as u64,
        };
        let mut at = 0;
        stream_external(&part, part.length, |b| {
            let k = b.len() / width;
            decode_float_into(dtype, b, dst.get_mut(at..at + k)?)?;
            at += k;
            Some(())
        })
        .is_some()
            && at == dst.len()
    });
    ok.then_some(Values::Float(out))
}

/// Hands the first `len` bytes of external data to `f` in chunks of [`READ_CHUNK`] (the last one
/// shorter); `None` when the range is shorter than `len`, the file cannot be read, or `f` fails.
fn stream_external(
    ext: &ExternalData,
    len: u64,
    mut f: impl FnMut(&[u8]) -> Option<()>,
) -> Option<()> {
    use std::io::{Read, Seek, SeekFrom};
    if ext.length < len {
        return None;
    }
    let len = usize::try_from(len).ok()?;
    let mut file = std::fs::File::open(&ext.path).ok()?;
    file.seek(SeekFrom::Start(ext.offset)).ok()?;
    let mut buf = vec![0u8; len.min(READ_CHUNK)];
    let mut left = len;
    while left > 0 {
        let take = left.min(buf.len());
        file.read_exact(&mut buf[..take]).ok()?;
        f(&buf[..take])?;
        left -= take;
    }
    Some(())
}

impl Values {
    /// No values yet, of the kind `dtype` decodes to, with room for `n`; `None` for a dtype that
    /// is not read as numbers.
    fn empty(dtype: DType, n: usize) -> Option<Values> {
        use DType::*;
        match dtype {
            F32 | F64 | F16 | BF16 => Some(Values::Float(Vec::with_capacity(n))),
            I64 | U64 | I32 | U32 | I16 | U16 | I8 | U8 | Bool => {
                Some(Values::Int(Vec::with_capacity(n)))
            }
            _ => None,
        }
    }

    fn len(&self) -> usize {
        match self {
            Values::Int(v) => v.len(),
            Values::Float(v) => v.len(),
        }
    }
}

fn decode_le(dtype: DType, b: &[u8], n: usize) -> Option<Values> {
    let mut out = Values::empty(dtype, n)?;
    decode_le_into(dtype, b, &mut out)?;
    (out.len() == n).then_some(out)
}

/// Decodes the little-endian float elements of `b` into `dst` (as many as `b` holds).
fn decode_float_into(dtype: DType, b: &[u8], dst: &mut [f64]) -> Option<()> {
    fn each<const W: usize>(b: &[u8], dst: &mut [f64], f: impl Fn([u8; W]) -> f64) -> Option<()> {
        if b.len() != dst.len().checked_mul(W)? {
            return None;
        }
        for (d, c) in dst.iter_mut().zip(b.chunks_exact(W)) {
            *d = f(<[u8; W]>::try_from(c).ok()?);
        }
        Some(())
    }
    match dtype {
        DType::F32 => each::<4>(b, dst, |c| f32::from_le_bytes(c) as f64),
        DType::F64 => each::<8>(b, dst, f64::from_le_bytes),
        DType::F16 => each::<2>(b, dst, |c| f16_to_f64(u16::from_le_bytes(c))),
        DType::BF16 => each::<2>(b, dst, |c| {
            f32::from_bits((u16::from_le_bytes(c) as u32) << 16) as f64
        }),
        _ => None,
    }
}

/// Appends the little-endian elements of `b` (a whole number of them) to `out`, which
/// [`Values::empty`] made for `dtype`.
fn decode_le_into(dtype: DType, b: &[u8], out: &mut Values) -> Option<()> {
    fn chunks<const W: usize>(b: &[u8]) -> Option<impl Iterator<Item = [u8; W]> + '_> {
        if !b.len().is_multiple_of(W) {
            return None;
        }
        Some(
            b.chunks_exact(W)
                .map(|c| <[u8; W]>::try_from(c).expect("chunks_exact yields W bytes")),
        )
    }
    match (dtype, out) {
        (DType::I64, Values::Int(v)) => v.extend(chunks::<8>(b)?.map(i64::from_le_bytes)),
        (DType::U64, Values::Int(v)) => {
            for c in chunks::<8>(b)? {
                v.push(i64::try_from(u64::from_le_bytes(c)).ok()?);
            }
        }
        (DType::I32, Values::Int(v)) => {
            v.extend(chunks::<4>(b)?.map(|c| i32::from_le_bytes(c) as i64))
        }
        (DType::U32, Values::Int(v)) => {
            v.extend(chunks::<4>(b)?.map(|c| u32::from_le_bytes(c) as i64))
        }
        (DType::I16, Values::Int(v)) => {
            v.extend(chunks::<2>(b)?.map(|c| i16::from_le_bytes(c) as i64))
        }
        (DType::U16, Values::Int(v)) => {
            v.extend(chunks::<2>(b)?.map(|c| u16::from_le_bytes(c) as i64))
        }
        (DType::I8, Values::Int(v)) => v.extend(b.iter().map(|&c| c as i8 as i64)),
        (DType::U8 | DType::Bool, Values::Int(v)) => v.extend(b.iter().map(|&c| c as i64)),
        (DType::F32 | DType::F64 | DType::F16 | DType::BF16, Values::Float(v)) => {
            let width = usize::try_from(dtype.bytes_for(1)?).ok()?;
            let at = v.len();
            v.resize(at + b.len() / width, 0.0);
            decode_float_into(dtype, b, &mut v[at..])?;
        }
        _ => return None,
    }
    Some(())
}

fn decode_typed(dtype: DType, t: &TypedData, n: usize) -> Option<Values> {
    let v = match (dtype, t) {
        (DType::F32, TypedData::F32(v)) => Values::Float(v.iter().map(|&x| x as f64).collect()),
        (DType::F64, TypedData::F64(v)) => Values::Float(v.clone()),
        (DType::I64, TypedData::I64(v)) => Values::Int(v.clone()),
        (DType::U32 | DType::U64, TypedData::U64(v)) => Values::Int(
            v.iter()
                .map(|&x| i64::try_from(x).ok())
                .collect::<Option<_>>()?,
        ),
        (DType::F16, TypedData::I32(v)) => {
            Values::Float(v.iter().map(|&x| f16_to_f64(x as u16)).collect())
        }
        (DType::BF16, TypedData::I32(v)) => Values::Float(
            v.iter()
                .map(|&x| f32::from_bits((x as u32) << 16) as f64)
                .collect(),
        ),
        (d, TypedData::I32(v)) if d.is_int() || d == DType::Bool => {
            Values::Int(v.iter().map(|&x| x as i64).collect())
        }
        _ => return None,
    };
    (v.len() == n).then_some(v)
}

fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f64;
    sign * match exp {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(dtype: DType, dims: Vec<u64>, bytes: Vec<u8>) -> Tensor {
        Tensor {
            name: "t".into(),
            dtype,
            dims: dims.into(),
            data: TensorData::Raw(Bytes::from(bytes)),
        }
    }

    #[test]
    fn reads_little_endian_ints() {
        let bytes: Vec<u8> = [1i64, -1, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let t = raw(DType::I64, vec![3], bytes);
        assert_eq!(t.read_values(16), Some(Values::Int(vec![1, -1, 7])));
        assert_eq!(t.read_values(2), None, "over the element cap");
    }

    #[test]
    fn external_data_is_read_across_chunks() {
        // 300,001 f32 after a 3-byte prefix: the 1 MiB chunks end inside the tensor, and the
        // last one is short
        let n = 300_001usize;
        let want: Vec<f64> = (0..n).map(|i| (i as f32 * 0.25 - 7.0) as f64).collect();
        let mut bytes = vec![9u8; 3];
        bytes.extend(want.iter().flat_map(|&x| (x as f32).to_le_bytes()));
        bytes.extend([1u8; 5]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.bin");
        std::fs::write(&path, &bytes).unwrap();
        let ext = |length: u64| Tensor {
            name: "w".into(),
            dtype: DType::F32,
            dims: vec![n as u64].into(),
            data: TensorData::External(ExternalData {
                path: path.clone().into(),
                offset: 3,
                length,
            }),
        };
        let len = 4 * n as u64;
        assert_eq!(
            ext(len).read_values(u64::MAX),
            Some(Values::Float(want.clone()))
        );
        assert_eq!(
            ext(len + 5).read_values(u64::MAX),
            Some(Values::Float(want))
        );
        assert_eq!(
            ext(len - 4).read_values(u64::MAX),
            None,
            "a range too short"
        );
        let mut int = ext(8 * n as u64);
        int.dtype = DType::I64;
        assert_eq!(int.read_values(u64::MAX), None, "past the end of the file");
    }

    #[test]
    fn wrong_length_is_not_read() {
        let t = raw(DType::I64, vec![2], vec![0; 12]);
        assert_eq!(t.read_values(16), None);
    }

    #[test]
    fn half_precision_values() {
        // 1.0, -2.0, 0.5 in IEEE half
        let bytes: Vec<u8> = [0x3c00u16, 0xc000, 0x3800]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let t = raw(DType::F16, vec![3], bytes);
        assert_eq!(t.read_values(8), Some(Values::Float(vec![1.0, -2.0, 0.5])));
    }

    #[test]
    fn sizes() {
        let t = raw(DType::F32, vec![64, 3, 3, 3], Vec::new());
        assert_eq!(t.numel(), Some(1728));
        assert_eq!(t.byte_size(), Some(6912));
        let huge = raw(DType::F32, vec![u64::MAX, 2], Vec::new());
        assert_eq!(huge.numel(), None);
    }
}
