//! Element types of tensors, with their storage width.

use std::fmt;

/// An element type, covering ONNX's `TensorProto.DataType` and safetensors' dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F8E8M0,
    F6E2M3,
    F6E3M2,
    F4E2M1,
    I64,
    I32,
    I16,
    I8,
    I4,
    I2,
    U64,
    U32,
    U16,
    U8,
    U4,
    U2,
    Bool,
    C64,
    C128,
    String,
}

impl DType {
    /// Width of one element in bits; `None` for strings, whose size is not fixed.
    pub fn bits(self) -> Option<u64> {
        use DType::*;
        Some(match self {
            C128 => 128,
            F64 | I64 | U64 | C64 => 64,
            F32 | I32 | U32 => 32,
            F16 | BF16 | I16 | U16 => 16,
            F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 | I8 | U8 | Bool => 8,
            F6E2M3 | F6E3M2 => 6,
            F4E2M1 | I4 | U4 => 4,
            I2 | U2 => 2,
            String => return None,
        })
    }

    /// Bytes taken by `numel` packed elements (sub-byte types round up to whole bytes).
    pub fn bytes_for(self, numel: u64) -> Option<u64> {
        let bits = numel.checked_mul(self.bits()?)?;
        Some(bits.div_ceil(8))
    }

    /// Whether values of this type are floating point (and so may be trainable parameters).
    pub fn is_float(self) -> bool {
        use DType::*;
        matches!(
            self,
            F64 | F32
                | F16
                | BF16
                | F8E4M3FN
                | F8E4M3FNUZ
                | F8E5M2
                | F8E5M2FNUZ
                | F8E8M0
                | F6E2M3
                | F6E3M2
                | F4E2M1
        )
    }

    pub fn is_int(self) -> bool {
        use DType::*;
        matches!(
            self,
            I64 | I32 | I16 | I8 | I4 | I2 | U64 | U32 | U16 | U8 | U4 | U2
        )
    }

    /// From ONNX's `TensorProto.DataType` number.
    pub fn from_onnx(code: i32) -> Option<DType> {
        use DType::*;
        Some(match code {
            1 => F32,
            2 => U8,
            3 => I8,
            4 => U16,
            5 => I16,
            6 => I32,
            7 => I64,
            8 => String,
            9 => Bool,
            10 => F16,
            11 => F64,
            12 => U32,
            13 => U64,
            14 => C64,
            15 => C128,
            16 => BF16,
            17 => F8E4M3FN,
            18 => F8E4M3FNUZ,
            19 => F8E5M2,
            20 => F8E5M2FNUZ,
            21 => U4,
            22 => I4,
            23 => F4E2M1,
            24 => F8E8M0,
            25 => U2,
            26 => I2,
            27 => F6E2M3,
            28 => F6E3M2,
            _ => return None,
        })
    }

    /// ONNX's `TensorProto.DataType` number.
    pub fn to_onnx(self) -> i32 {
        use DType::*;
        match self {
            F32 => 1,
            U8 => 2,
            I8 => 3,
            U16 => 4,
            I16 => 5,
            I32 => 6,
            I64 => 7,
            String => 8,
            Bool => 9,
            F16 => 10,
            F64 => 11,
            U32 => 12,
            U64 => 13,
            C64 => 14,
            C128 => 15,
            BF16 => 16,
            F8E4M3FN => 17,
            F8E4M3FNUZ => 18,
            F8E5M2 => 19,
            F8E5M2FNUZ => 20,
            U4 => 21,
            I4 => 22,
            F4E2M1 => 23,
            F8E8M0 => 24,
            U2 => 25,
            I2 => 26,
            F6E2M3 => 27,
            F6E3M2 => 28,
        }
    }

    /// The conventional lower-case name (`float32`, `bfloat16`, `int64`, ...), as numpy spells it.
    pub fn name(self) -> &'static str {
        use DType::*;
        match self {
            F64 => "float64",
            F32 => "float32",
            F16 => "float16",
            BF16 => "bfloat16",
            F8E4M3FN => "float8e4m3fn",
            F8E4M3FNUZ => "float8e4m3fnuz",
            F8E5M2 => "float8e5m2",
            F8E5M2FNUZ => "float8e5m2fnuz",
            F8E8M0 => "float8e8m0",
            F6E2M3 => "float6e2m3",
            F6E3M2 => "float6e3m2",
            F4E2M1 => "float4e2m1",
            I64 => "int64",
            I32 => "int32",
            I16 => "int16",
            I8 => "int8",
            I4 => "int4",
            I2 => "int2",
            U64 => "uint64",
            U32 => "uint32",
            U16 => "uint16",
            U8 => "uint8",
            U4 => "uint4",
            U2 => "uint2",
            Bool => "bool",
            C64 => "complex64",
            C128 => "complex128",
            String => "string",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onnx_codes_round_trip() {
        for code in 1..=28 {
            let dt = DType::from_onnx(code).unwrap();
            assert_eq!(dt.to_onnx(), code);
        }
        assert_eq!(DType::from_onnx(0), None);
        assert_eq!(DType::from_onnx(29), None);
    }

    #[test]
    fn packed_sizes() {
        assert_eq!(DType::F32.bytes_for(10), Some(40));
        assert_eq!(DType::BF16.bytes_for(3), Some(6));
        assert_eq!(DType::I4.bytes_for(3), Some(2));
        assert_eq!(DType::F6E2M3.bytes_for(4), Some(3));
        assert_eq!(DType::String.bytes_for(3), None);
        assert_eq!(DType::F64.bytes_for(u64::MAX), None);
    }
}
