//! Stored tensors (initializers, `Constant` values): their type, shape and a lazy handle on the data.
//!
//! The data is never read when a model is loaded: `Raw` borrows a slice of the memory-mapped model,
//! `External` only records where the bytes are. Analysis reads values only for small integer or
//! float tensors that feed shape computations ([`Tensor::read_values`]).

use std::path::PathBuf;

use bytes::Bytes;

use super::dtype::DType;

/// A tensor stored in the model file or beside it.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub name: String,
    pub dtype: DType,
    pub dims: Vec<u64>,
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
    pub path: PathBuf,
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
            TensorData::External(ext) => {
                let bytes = read_external(ext, self.dtype.bytes_for(numel)?)?;
                decode_le(self.dtype, &bytes, n)
            }
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
}

fn read_external(ext: &ExternalData, len: u64) -> Option<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&ext.path).ok()?;
    f.seek(SeekFrom::Start(ext.offset)).ok()?;
    let mut buf = vec![0u8; usize::try_from(len.min(ext.length)).ok()?];
    f.read_exact(&mut buf).ok()?;
    Some(buf)
}

fn decode_le(dtype: DType, b: &[u8], n: usize) -> Option<Values> {
    fn chunks<const W: usize>(b: &[u8], n: usize) -> Option<impl Iterator<Item = [u8; W]> + '_> {
        if b.len() != n.checked_mul(W)? {
            return None;
        }
        Some(
            b.chunks_exact(W)
                .map(|c| <[u8; W]>::try_from(c).expect("chunks_exact yields W bytes")),
        )
    }
    Some(match dtype {
        DType::I64 => Values::Int(chunks::<8>(b, n)?.map(i64::from_le_bytes).collect()),
        DType::U64 => Values::Int(
            chunks::<8>(b, n)?
                .map(|c| i64::try_from(u64::from_le_bytes(c)).ok())
                .collect::<Option<_>>()?,
        ),
        DType::I32 => Values::Int(
            chunks::<4>(b, n)?
                .map(|c| i32::from_le_bytes(c) as i64)
                .collect(),
        ),
        DType::U32 => Values::Int(
            chunks::<4>(b, n)?
                .map(|c| u32::from_le_bytes(c) as i64)
                .collect(),
        ),
        DType::I16 => Values::Int(
            chunks::<2>(b, n)?
                .map(|c| i16::from_le_bytes(c) as i64)
                .collect(),
        ),
        DType::U16 => Values::Int(
            chunks::<2>(b, n)?
                .map(|c| u16::from_le_bytes(c) as i64)
                .collect(),
        ),
        DType::I8 => Values::Int(chunks::<1>(b, n)?.map(|c| c[0] as i8 as i64).collect()),
        DType::U8 | DType::Bool => Values::Int(chunks::<1>(b, n)?.map(|c| c[0] as i64).collect()),
        DType::F32 => Values::Float(
            chunks::<4>(b, n)?
                .map(|c| f32::from_le_bytes(c) as f64)
                .collect(),
        ),
        DType::F64 => Values::Float(chunks::<8>(b, n)?.map(f64::from_le_bytes).collect()),
        DType::F16 => Values::Float(
            chunks::<2>(b, n)?
                .map(|c| f16_to_f64(u16::from_le_bytes(c)))
                .collect(),
        ),
        DType::BF16 => Values::Float(
            chunks::<2>(b, n)?
                .map(|c| f32::from_bits((u16::from_le_bytes(c) as u32) << 16) as f64)
                .collect(),
        ),
        _ => return None,
    })
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
    let len = match &v {
        Values::Int(v) => v.len(),
        Values::Float(v) => v.len(),
    };
    (len == n).then_some(v)
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
            dims,
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
