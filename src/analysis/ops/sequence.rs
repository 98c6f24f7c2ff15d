//! Ops on values that are not tensors or whose sizes are in the data: sequences
//! (`SequenceConstruct`, `SequenceAt`, `SequenceEmpty`, `SequenceErase`, `SequenceInsert`,
//! `SequenceLength`, `SplitToSequence`, `ConcatFromSequence`, `SequenceMap`), optionals (`Optional`,
//! `OptionalHasElement`, `OptionalGetElement`), strings (`StringNormalizer`, `StringSplit`,
//! `StringConcat`, `RegexFullMatch`), `TfIdfVectorizer` and `ImageDecoder`.
//!
//! A sequence or an optional is not described by a shape: the ops that make them are known, and
//! their outputs stay unknown, so that analysis reports an unknown size rather than an unknown op.
//! Not counted in MACs.

use super::movement::data_dependent;
use super::{attrs, broadcast, invalid, AttrReader, FromAttrs, InferResult, OpCx};
use crate::analysis::fact::Fact;
use crate::ir::{Attrs, DType, Dim};

/// `SequenceMap` runs its body once per element of a sequence whose length the analysis does not
/// follow: its MACs are unknown, never 0.
pub fn sequence_map_macs(_cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    None
}

/// `SequenceLength`: an int64 scalar.
pub fn sequence_length(_cx: &OpCx) -> InferResult<Vec<Fact>> {
    Ok(vec![Fact::new(Some(DType::I64), Vec::new())])
}

/// `OptionalHasElement`: a bool scalar.
pub fn optional_has_element(_cx: &OpCx) -> InferResult<Vec<Fact>> {
    Ok(vec![Fact::new(Some(DType::Bool), Vec::new())])
}

/// `StringNormalizer`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct StringNormalizer {
    /// Words removed from the input: the output may be shorter.
    pub stopwords: bool,
}

impl FromAttrs for StringNormalizer {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(StringNormalizer {
            stopwords: a.get("stopwords").is_some(),
        })
    }
}

/// `StringNormalizer`: strings `[C]` or `[1, C]`; stop words removed make `C` a data-dependent
/// size.
pub fn string_normalizer(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let n = attrs!(cx, StringNormalizer);
    let s = cx.shape(0)?;
    if !matches!(s.len(), 1 | 2) {
        return invalid(format!(
            "input has rank {}, expected [C] or [1, C]",
            s.len()
        ));
    }
    let mut out = s.to_vec();
    if n.stopwords {
        if let Some(last) = out.last_mut() {
            *last = data_dependent("stringnormalizer", cx);
        }
    }
    Ok(vec![Fact::new(Some(DType::String), out)])
}

/// `StringSplit`: the substrings `[..., max_splits]` (padded; the count is in the data) and
/// their number per string, int64 of the input's shape.
pub fn string_split(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let s = cx.shape(0)?;
    let mut y = s.to_vec();
    y.push(data_dependent("stringsplit", cx));
    Ok(vec![
        Fact::new(Some(DType::String), y),
        Fact::new(Some(DType::I64), s.to_vec()),
    ])
}

/// `StringConcat`: broadcast, strings.
pub fn string_concat(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let out = broadcast(&[cx.shape(0)?, cx.shape(1)?])?;
    Ok(vec![Fact::new(Some(DType::String), out)])
}

/// `RegexFullMatch`: a bool per string.
pub fn regex_full_match(cx: &OpCx) -> InferResult<Vec<Fact>> {
    Ok(vec![Fact::new(Some(DType::Bool), cx.shape(0)?.to_vec())])
}

/// `TfIdfVectorizer`'s output width: one column per n-gram index.
#[derive(Clone, Debug, PartialEq)]
pub struct TfIdf {
    pub width: i64,
}

impl FromAttrs for TfIdf {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let idx = AttrReader(a)
            .ints("ngram_indexes")?
            .ok_or("attribute 'ngram_indexes' is required")?;
        if let Some(bad) = idx.iter().find(|&&i| i < 0) {
            return Err(format!(
                "attribute 'ngram_indexes' has a negative index {bad}"
            ));
        }
        let width = idx.iter().max().map_or(Some(0), |m| m.checked_add(1));
        Ok(TfIdf {
            width: width.ok_or("attribute 'ngram_indexes' overflows")?,
        })
    }
}

/// `TfIdfVectorizer`: `[C]` → `[max(ngram_indexes) + 1]`, `[N, C]` → `[N, max + 1]`, float.
pub fn tf_idf(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let t = attrs!(cx, TfIdfVectorizer);
    let s = cx.shape(0)?;
    let w = Dim::known(t.width);
    let out = match s.len() {
        1 => vec![w],
        2 => vec![s[0].clone(), w],
        r => return invalid(format!("input has rank {r}, expected 1 or 2")),
    };
    Ok(vec![Fact::new(Some(DType::F32), out)])
}

/// `ImageDecoder`'s pixel format.
#[derive(Clone, Debug, PartialEq)]
pub struct ImageDecoder {
    pub channels: i64,
}

impl FromAttrs for ImageDecoder {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let channels = match AttrReader(a).string("pixel_format")?.as_deref() {
            None | Some("RGB") | Some("BGR") => 3,
            Some("Grayscale") => 1,
            Some(f) => return Err(format!("attribute 'pixel_format': unknown value '{f}'")),
        };
        Ok(ImageDecoder { channels })
    }
}

/// `ImageDecoder`: `[H, W, channels]` uint8, the height and width in the encoded data.
pub fn image_decoder(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let d = attrs!(cx, ImageDecoder);
    let s = cx.shape(0)?;
    if s.len() != 1 {
        return invalid(format!("encoded_stream has rank {}, expected 1", s.len()));
    }
    Ok(vec![Fact::new(
        Some(DType::U8),
        vec![
            data_dependent("image_height", cx),
            data_dependent("image_width", cx),
            Dim::known(d.channels),
        ],
    )])
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, run, shapes};
    use super::super::{lookup, parse, Op};
    use crate::ir::{Attrs, Node};

    #[test]
    fn sequence_and_optional_ops_are_known() {
        for op in [
            "SequenceConstruct",
            "SequenceAt",
            "SequenceEmpty",
            "SequenceErase",
            "SequenceInsert",
            "SequenceLength",
            "SplitToSequence",
            "ConcatFromSequence",
            "Optional",
            "OptionalHasElement",
            "OptionalGetElement",
        ] {
            let node = Node::new(
                Default::default(),
                op.into(),
                "".into(),
                &[],
                &[],
                Attrs::default(),
            );
            assert!(lookup("", op).is_some(), "{op}");
            assert!(!matches!(parse(&node, 17), Op::Opaque), "{op}");
        }
        let (out, _) = run("SequenceLength", vec![], vec![None], 17);
        assert_eq!(shapes(&out), ["[]"]);
    }

    #[test]
    fn text_ops() {
        let (out, _) = run("StringSplit", vec![], vec![f32s(&[2, 3])], 20);
        assert_eq!(shapes(&out), ["[2,3,stringsplit(n)]", "[2,3]"]);
        let (out, _) = run("StringConcat", vec![], vec![f32s(&[2, 3]), f32s(&[3])], 20);
        assert_eq!(shapes(&out), ["[2,3]"]);
        let (out, _) = run("ImageDecoder", vec![], vec![f32s(&[1000])], 20);
        assert_eq!(shapes(&out), ["[image_height(n),image_width(n),3]"]);
    }
}
