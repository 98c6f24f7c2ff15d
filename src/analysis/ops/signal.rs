//! Signal processing: `DFT`, `STFT`, the window generators (`HannWindow`, `HammingWindow`,
//! `BlackmanWindow`) and `MelWeightMatrix`. Complex values are a trailing axis of 2 (real,
//! imaginary); a real signal has a trailing axis of 1.
//!
//! MACs: not counted. Runtimes compute these transforms with FFTs, not as the matrix products the
//! MAC count is made of, and no convention gives them a multiply-accumulate count.

use super::{attrs, axis, invalid, ovf, AttrReader, FromAttrs, InferError, InferResult, OpCx};
use crate::analysis::fact::Fact;
use crate::ir::{Attrs, DType, Dim};

/// `DFT`'s attributes (`axis` is an input from opset 20).
#[derive(Clone, Debug, PartialEq)]
pub struct Dft {
    pub inverse: bool,
    pub onesided: bool,
    /// The attribute of opset 17 (default 1); from opset 20 the input, default -2.
    pub axis: i64,
}

impl FromAttrs for Dft {
    fn from_attrs(a: &Attrs, opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Dft {
            inverse: r.flag("inverse", false)?,
            onesided: r.flag("onesided", false)?,
            axis: if opset < 20 { r.int("axis", 1)? } else { -2 },
        })
    }
}

/// A scalar integer input that folds, if present.
fn scalar(cx: &OpCx, i: usize) -> InferResult<Option<Dim>> {
    match cx.opt_input(i) {
        None => Ok(None),
        Some(f) => match f.value.as_deref().and_then(|v| v.as_dims()).as_deref() {
            Some([d]) => Ok(Some(d.clone())),
            Some(v) => invalid(format!(
                "input {i} has {} values, expected a scalar",
                v.len()
            )),
            None => Err(InferError::Unknown),
        },
    }
}

/// `floor(n / 2) + 1`: the unique bins of a real signal's spectrum.
fn half_spectrum(n: &Dim) -> InferResult<Dim> {
    ovf(
        n.floor_div(2).and_then(|h| h.checked_add(&Dim::known(1))),
        "spectrum size",
    )
}

/// `DFT`: the input with `dft_length` on the transformed axis (`floor(n/2) + 1` one-sided) and a
/// complex last axis.
pub fn dft(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let d = attrs!(cx, Dft);
    let s = cx.shape(0)?;
    if s.len() < 2
        || s.last()
            .and_then(Dim::as_i64)
            .is_some_and(|c| c != 1 && c != 2)
    {
        return invalid("input must be [..., 1] (real) or [..., 2] (complex)");
    }
    let a = match scalar(cx, 2)? {
        Some(v) if cx.opset >= 20 => v.as_i64().ok_or(InferError::Unknown)?,
        _ => d.axis,
    };
    let a = axis(a, s.len())?;
    if a == s.len() - 1 {
        return invalid("the last axis holds the complex parts and cannot be transformed");
    }
    if d.inverse && d.onesided {
        // IRFFT: a real signal of length 2 (n - 1) by default; its layout is not fixed here
        return Err(InferError::Unknown);
    }
    let n = scalar(cx, 1)?.unwrap_or_else(|| s[a].clone());
    let mut out = s.to_vec();
    out[a] = if d.onesided { half_spectrum(&n)? } else { n };
    if let Some(last) = out.last_mut() {
        *last = Dim::known(2);
    }
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// `STFT`'s attribute.
#[derive(Clone, Debug, PartialEq)]
pub struct Stft {
    pub onesided: bool,
}

impl FromAttrs for Stft {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Stft {
            onesided: AttrReader(a).flag("onesided", true)?,
        })
    }
}

/// `STFT`: signal `[B, L, 1 or 2]` to `[B, frames, bins, 2]`, `frames = floor((L - frame_length)
/// / frame_step) + 1`, `bins = frame_length` (`floor(frame_length / 2) + 1` one-sided).
pub fn stft(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let onesided = attrs!(cx, Stft).onesided;
    let s = cx.shape(0)?;
    if s.len() != 3 {
        return invalid(format!("signal has rank {}, expected 3", s.len()));
    }
    let step = scalar(cx, 1)?
        .ok_or_else(|| InferError::Invalid("frame_step is required".into()))?
        .as_i64()
        .ok_or(InferError::Unknown)?;
    if step < 1 {
        return invalid(format!("frame_step {step} is not positive"));
    }
    let frame = match scalar(cx, 3)? {
        Some(f) => f,
        None => match cx.opt_input(2) {
            Some(w) => match w.shape.as_deref() {
                Some([n]) => n.clone(),
                Some(o) => return invalid(format!("window has rank {}, expected 1", o.len())),
                None => return Err(InferError::Unknown),
            },
            None => s[1].clone(),
        },
    };
    let span = ovf(s[1].checked_sub(&frame), "frame count")?;
    if span.as_i64().is_some_and(|v| v < 0) {
        return invalid(format!(
            "frames of {frame} are longer than the signal ({})",
            s[1]
        ));
    }
    let frames = ovf(
        span.floor_div(step)
            .and_then(|q| q.checked_add(&Dim::known(1))),
        "frame count",
    )?;
    let bins = if onesided {
        half_spectrum(&frame)?
    } else {
        frame
    };
    Ok(vec![Fact::new(
        cx.dtype(0),
        vec![s[0].clone(), frames, bins, Dim::known(2)],
    )])
}

/// The output type of the generators (`output_datatype`, float by default).
#[derive(Clone, Debug, PartialEq)]
pub struct Generated {
    pub dtype: DType,
}

impl FromAttrs for Generated {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(Generated {
            dtype: AttrReader(a)
                .dtype("output_datatype")?
                .unwrap_or(DType::F32),
        })
    }
}

/// `HannWindow`, `HammingWindow`, `BlackmanWindow`: `[size]`.
pub fn window(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let g = attrs!(cx, HannWindow | HammingWindow | BlackmanWindow);
    let n = scalar(cx, 0)?.ok_or_else(|| InferError::Invalid("size is required".into()))?;
    if n.as_i64().is_some_and(|v| v < 0) {
        return invalid(format!("window size {n} is negative"));
    }
    Ok(vec![Fact::new(Some(g.dtype), vec![n])])
}

/// `MelWeightMatrix`: `[floor(dft_length / 2) + 1, num_mel_bins]`.
pub fn mel_weight_matrix(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let g = attrs!(cx, MelWeightMatrix);
    let bins =
        scalar(cx, 0)?.ok_or_else(|| InferError::Invalid("num_mel_bins is required".into()))?;
    let dft = scalar(cx, 1)?.ok_or_else(|| InferError::Invalid("dft_length is required".into()))?;
    Ok(vec![Fact::new(
        Some(g.dtype),
        vec![half_spectrum(&dft)?, bins],
    )])
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, run, shapes};
    use super::*;
    use crate::analysis::fact::Konst;
    use crate::ir::Attr;

    fn scalar(v: i64) -> Option<Fact> {
        Some(Fact::new(Some(DType::I64), Vec::new()).with_value(Konst::Int(vec![Dim::known(v)])))
    }

    #[test]
    fn spectra() {
        // one-sided, 32 points: 17 bins
        let (out, macs) = run(
            "DFT",
            vec![("onesided", Attr::Int(1))],
            vec![f32s(&[2, 64, 1]), scalar(32), scalar(1)],
            20,
        );
        assert_eq!(shapes(&out), ["[2,17,2]"]);
        assert_eq!(macs, Some(Dim::ZERO));
        // opset 17's axis attribute
        let (out, _) = run(
            "DFT",
            vec![("axis", Attr::Int(1))],
            vec![f32s(&[2, 64, 2])],
            17,
        );
        assert_eq!(shapes(&out), ["[2,64,2]"]);
        // floor((64 - 16) / 8) + 1 = 7 frames of 16 / 2 + 1 = 9 bins
        let (out, _) = run(
            "STFT",
            vec![],
            vec![f32s(&[2, 64, 1]), scalar(8), f32s(&[16])],
            17,
        );
        assert_eq!(shapes(&out), ["[2,7,9,2]"]);
        let (out, _) = run(
            "STFT",
            vec![],
            vec![f32s(&[2, 8, 1]), scalar(8), f32s(&[16])],
            17,
        );
        assert!(
            shapes(&out)[0].contains("longer than the signal"),
            "{out:?}"
        );
        let (out, _) = run(
            "MelWeightMatrix",
            vec![],
            vec![scalar(8), scalar(16), scalar(8000), f32s(&[]), f32s(&[])],
            17,
        );
        assert_eq!(shapes(&out), ["[9,8]"]);
    }
}
