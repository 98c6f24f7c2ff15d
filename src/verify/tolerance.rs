//! Tolerances as named levels: how far two computations of the same function may drift apart,
//! by what separates them, mapped per dtype to `(atol, rtol)` in one function
//! ([`Tolerance::atol_rtol`]). verify's verdicts and the op-by-op comparison with onnxruntime
//! (`tests/checker_ort.rs`) both read them here.

use crate::ir::DType;

/// A named tolerance level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tolerance {
    /// Equal values: integers, booleans, indices, and floats that are only moved, selected,
    /// compared or counted (a reshape, a gather, a max pool, `Shape`), which no runtime rounds.
    Exact,
    /// One op computed by a runtime in `dtype` against the checker's f64 on the same inputs: the
    /// runtime's round-off, a few units in the last place per operation, growing with the number of
    /// terms it accumulates (a convolution's or a matmul's dot products, a softmax's sum). What the
    /// op-by-op comparison with onnxruntime allows.
    Kernel,
    /// A rewrite that is exact in real arithmetic (BatchNorm folding, a fused bias), its weights
    /// re-derived and stored in `dtype`, checked in f64 through the layers that follow: what
    /// `nnlint verify` allows an exact rewrite, as a max-norm error
    /// ([`Tolerance::allows_max_norm`]).
    Rewrite,
}

/// Bits of precision (the significand with its implicit bit) of a float dtype.
fn precision(dtype: DType) -> Option<i32> {
    use DType::*;
    Some(match dtype {
        F64 => 53,
        F32 => 24,
        F16 => 11,
        BF16 => 8,
        F8E4M3FN | F8E4M3FNUZ | F6E2M3 => 4,
        F8E5M2 | F8E5M2FNUZ | F6E3M2 => 3,
        F4E2M1 => 2,
        F8E8M0 => 1,
        _ => return None,
    })
}

impl Tolerance {
    /// The absolute and relative tolerance of this level for values of `dtype`. Integer, boolean
    /// and every non-float dtype are exact at every level.
    ///
    /// The numbers, by level:
    /// - `Kernel`, f32: `rtol` 1.3e-6, PyTorch's default for comparing a kernel with a reference
    ///   (`torch.testing.assert_close`), about 22 units of f32 round-off (2^-24 ≈ 6e-8): a
    ///   runtime's dot products and its few-ulp `exp`/`tanh`/`erf`. `atol` 2e-6, about 32 units at
    ///   unit scale (the fixtures' inputs are standard normal), for results that cancel toward
    ///   zero; tighter than PyTorch's 1e-5 so that a relative error of 1e-5 in a unit-scale op (a
    ///   wrong constant) is caught. On the fixtures the largest f32 error is a fifth of this
    ///   (`tests/checker_ort.rs` prints the closest calls).
    /// - `Kernel`, f64: 1e-12 both, summation order over thousands of terms (2^-53 ≈ 1.1e-16
    ///   each). f16: `rtol` 1e-3 (PyTorch's), twice the half ulp
    ///   (2^-11) a runtime loses rounding its f32 result once; bf16: 1.6e-2 (PyTorch's), four of
    ///   its half ulps (2^-8); `atol` 1e-5 for both. Narrower floats: two ulps.
    /// - `Rewrite`, f32: 1e-4 both, the f32 round-off of re-stored weights (2^-24 each) grown
    ///   through a deep network, with margin: a broken rewrite is off by far more, a correct one
    ///   by around 1e-6.
    /// - `Rewrite`, f64: 1e-10; f16: 1e-2 and bf16: 5e-2, their round-off (2^-11, 2^-8) grown the
    ///   same way.
    pub fn atol_rtol(self, dtype: DType) -> (f64, f64) {
        let Some(p) = precision(dtype) else {
            return (0.0, 0.0);
        };
        let two_ulps = 2f64.powi(2 - p);
        match (self, dtype) {
            (Tolerance::Exact, _) => (0.0, 0.0),
            (Tolerance::Kernel, DType::F64) => (1e-12, 1e-12),
            (Tolerance::Kernel, DType::F32) => (2e-6, 1.3e-6),
            (Tolerance::Kernel, DType::F16) => (1e-5, 1e-3),
            (Tolerance::Kernel, DType::BF16) => (1e-5, 1.6e-2),
            (Tolerance::Kernel, _) => (two_ulps, two_ulps),
            (Tolerance::Rewrite, DType::F64) => (1e-10, 1e-10),
            (Tolerance::Rewrite, DType::F32) => (1e-4, 1e-4),
            (Tolerance::Rewrite, DType::F16) => (1e-2, 1e-2),
            (Tolerance::Rewrite, DType::BF16) => (5e-2, 5e-2),
            (Tolerance::Rewrite, _) => (4.0 * two_ulps, 4.0 * two_ulps),
        }
    }

    /// Element-wise: `|got - want| <= atol + rtol · |want|`. NaN matches NaN, and an infinity
    /// only itself.
    pub fn allows(self, dtype: DType, got: f64, want: f64) -> bool {
        if got.is_nan() || want.is_nan() {
            return got.is_nan() && want.is_nan();
        }
        if got.is_infinite() || want.is_infinite() {
            return got == want;
        }
        let (atol, rtol) = self.atol_rtol(dtype);
        (got - want).abs() <= atol + rtol * want.abs()
    }

    /// Over a whole tensor, as verify measures it: the largest absolute difference `max_abs`
    /// against `rtol` times the reference's largest magnitude `scale`, so that an output of small
    /// values is held to the same relative precision as one of large values; `atol` serves only an
    /// all-zero reference.
    pub fn allows_max_norm(self, dtype: DType, max_abs: f64, scale: f64) -> bool {
        let (atol, rtol) = self.atol_rtol(dtype);
        if scale > 0.0 {
            max_abs <= rtol * scale
        } else {
            max_abs <= atol
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_exact_at_every_level() {
        for level in [Tolerance::Exact, Tolerance::Kernel, Tolerance::Rewrite] {
            assert_eq!(level.atol_rtol(DType::I64), (0.0, 0.0));
            assert_eq!(level.atol_rtol(DType::Bool), (0.0, 0.0));
            assert!(level.allows(DType::I64, 3.0, 3.0));
            assert!(!level.allows(DType::I64, 3.0, 4.0));
        }
    }

    #[test]
    fn levels_grow_and_narrow_types_are_looser() {
        for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
            let (_, k) = Tolerance::Kernel.atol_rtol(dtype);
            let (_, r) = Tolerance::Rewrite.atol_rtol(dtype);
            assert!(0.0 < k && k <= r, "{dtype}: {k} {r}");
        }
        let rtol = |d| Tolerance::Kernel.atol_rtol(d).1;
        assert!(rtol(DType::F64) < rtol(DType::F32));
        assert!(rtol(DType::F32) < rtol(DType::F16));
        assert!(rtol(DType::F16) < rtol(DType::BF16));
        // a float16 rounding (half an ulp) is within the f16 kernel tolerance
        let x = 1.0 + 2f64.powi(-11);
        assert!(Tolerance::Kernel.allows(DType::F16, 1.0, x));
        assert!(!Tolerance::Kernel.allows(DType::F32, 1.0, x));
    }

    #[test]
    fn special_values() {
        let k = Tolerance::Kernel;
        assert!(k.allows(DType::F32, f64::NAN, f64::NAN));
        assert!(!k.allows(DType::F32, 0.0, f64::NAN));
        assert!(k.allows(DType::F32, f64::INFINITY, f64::INFINITY));
        assert!(!k.allows(DType::F32, f64::INFINITY, f64::NEG_INFINITY));
        assert!(!k.allows(DType::F32, 1e30, f64::INFINITY));
    }

    #[test]
    fn the_rewrite_verdict_is_relative_to_the_largest_magnitude() {
        let r = Tolerance::Rewrite;
        assert!(r.allows_max_norm(DType::F32, 0.9e-4, 1.0));
        assert!(!r.allows_max_norm(DType::F32, 1.1e-4, 1.0));
        // small outputs get no absolute slack
        assert!(!r.allows_max_norm(DType::F32, 1e-6, 1e-3));
        assert!(r.allows_max_norm(DType::F32, 1e-5, 0.0));
    }
}
