//! What analysis knows about a value: element type, shape, and (for small shape-like tensors) the
//! values themselves, so that shape subgraphs (`Shape → Gather → Concat → Reshape`) fold.

use crate::ir::{DType, Dim, Values};

/// Facts about one value. Every part may be unknown.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fact {
    pub dtype: Option<DType>,
    /// `None` when even the rank is unknown.
    pub shape: Option<Box<[Dim]>>,
    /// Folded contents, row-major, for small integer or float tensors whose shape is known.
    pub value: Option<Box<Konst>>,
}

/// Contents of a folded tensor. Integers are [`Dim`]s so that shape values stay symbolic
/// (`Shape` of an `[N,3,224,224]` input is `[N,3,224,224]`).
#[derive(Clone, Debug, PartialEq)]
pub enum Konst {
    Int(Vec<Dim>),
    Float(Vec<f64>),
}

/// Largest tensor whose contents analysis keeps (shape vectors, scalars, small index lists).
pub const MAX_FOLD_ELEMS: u64 = 4096;

impl Konst {
    pub fn len(&self) -> usize {
        match self {
            Konst::Int(v) => v.len(),
            Konst::Float(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every element as a known integer, if all are known (floats are truncated toward zero, as
    /// ONNX casts do).
    pub fn as_i64s(&self) -> Option<Vec<i64>> {
        match self {
            Konst::Int(v) => v.iter().map(Dim::as_i64).collect(),
            Konst::Float(v) => v
                .iter()
                .map(|f| (f.is_finite() && f.abs() < 9.0e18).then_some(*f as i64))
                .collect(),
        }
    }

    /// Every element as a float, if all are known numbers.
    pub fn as_f64s(&self) -> Option<Vec<f64>> {
        match self {
            Konst::Int(v) => v.iter().map(|d| d.as_i64().map(|i| i as f64)).collect(),
            Konst::Float(v) => Some(v.clone()),
        }
    }

    /// Every element as a dim (floats that are whole numbers convert).
    pub fn as_dims(&self) -> Option<Vec<Dim>> {
        match self {
            Konst::Int(v) => Some(v.clone()),
            Konst::Float(v) => v
                .iter()
                .map(|f| (f.fract() == 0.0 && f.abs() < 9.0e18).then(|| Dim::known(*f as i64)))
                .collect(),
        }
    }

    pub fn from_values(v: Values) -> Konst {
        match v {
            Values::Int(v) => Konst::Int(v.into_iter().map(Dim::known).collect()),
            Values::Float(v) => Konst::Float(v),
        }
    }

    /// Picks elements by flat index.
    pub fn gather(&self, idx: &[usize]) -> Option<Konst> {
        Some(match self {
            Konst::Int(v) => Konst::Int(
                idx.iter()
                    .map(|&i| v.get(i).cloned())
                    .collect::<Option<_>>()?,
            ),
            Konst::Float(v) => Konst::Float(
                idx.iter()
                    .map(|&i| v.get(i).copied())
                    .collect::<Option<_>>()?,
            ),
        })
    }
}

impl Fact {
    pub fn new(dtype: Option<DType>, shape: Vec<Dim>) -> Fact {
        Fact {
            dtype,
            shape: Some(shape.into()),
            value: None,
        }
    }

    pub fn unknown() -> Fact {
        Fact::default()
    }

    pub fn with_value(mut self, value: Konst) -> Fact {
        self.value = Some(Box::new(value));
        self
    }

    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(|s| s.len())
    }

    /// Element count, if the shape is known (possibly symbolic). `None` on overflow too.
    pub fn numel(&self) -> Option<Dim> {
        Dim::product(self.shape.as_ref()?)
    }

    /// Bytes the tensor takes, if its type and shape are known.
    pub fn bytes(&self) -> Option<Dim> {
        let numel = self.numel()?;
        let bits = self.dtype?.bits()?;
        if bits % 8 == 0 {
            numel.checked_mul(&Dim::known((bits / 8) as i64))
        } else {
            let n = numel.as_u64()?;
            Some(Dim::known(i64::try_from(self.dtype?.bytes_for(n)?).ok()?))
        }
    }

    /// The shape as known numbers, if it is fully known.
    pub fn known_shape(&self) -> Option<Vec<u64>> {
        self.shape.as_ref()?.iter().map(Dim::as_u64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_of_symbolic_and_packed_tensors() {
        let f = Fact::new(
            Some(DType::F32),
            vec![Dim::sym("N"), Dim::known(3), Dim::known(4)],
        );
        assert_eq!(f.bytes().unwrap().to_string(), "48*N");
        let p = Fact::new(Some(DType::I4), vec![Dim::known(3)]);
        assert_eq!(p.bytes().unwrap().as_i64(), Some(2));
        assert_eq!(Fact::new(None, vec![]).bytes(), None);
    }

    #[test]
    fn float_konst_converts_to_dims_only_when_whole() {
        assert_eq!(
            Konst::Float(vec![2.0, 3.0]).as_dims(),
            Some(vec![Dim::known(2), Dim::known(3)])
        );
        assert_eq!(Konst::Float(vec![2.5]).as_dims(), None);
    }
}
