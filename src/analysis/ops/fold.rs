//! Constant folding of small tensors (shape vectors, index tables, masks of a fixed size): the
//! values move through data-movement ops by index mapping, so shape subgraphs fold as onnxruntime
//! folds them at load. Everything here is bounded by [`MAX_FOLD_ELEMS`] and returns `None` (not
//! folded) rather than fail.

use crate::analysis::fact::{Fact, Konst, MAX_FOLD_ELEMS};
use crate::ir::Dim;

/// A fully known shape as `u64`s.
pub fn known(shape: &[Dim]) -> Option<Vec<u64>> {
    shape.iter().map(Dim::as_u64).collect()
}

fn numel(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))
}

fn strides(shape: &[u64]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1]);
    }
    s
}

/// For every element of an output of shape `out` (row-major), the flat index into an input of
/// shape `inp` that `map` gives from the output coordinate (`None`: the element has no source,
/// such as padding). `None` overall when the output is too large to fold or a mapped coordinate
/// falls outside the input.
pub fn index_map(
    out: &[u64],
    inp: &[u64],
    mut map: impl FnMut(&[u64], &mut [u64]) -> bool,
) -> Option<Vec<Option<usize>>> {
    let n = numel(out)?;
    if n > MAX_FOLD_ELEMS {
        return None;
    }
    let st = strides(inp);
    let mut coord = vec![0u64; out.len()];
    let mut src = vec![0u64; inp.len()];
    let mut idx = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if map(&coord, &mut src) {
            if src.iter().zip(inp).any(|(&c, &d)| c >= d) {
                return None;
            }
            idx.push(Some(
                src.iter().zip(&st).map(|(&c, &s)| (c * s) as usize).sum(),
            ));
        } else {
            idx.push(None);
        }
        for ax in (0..out.len()).rev() {
            coord[ax] += 1;
            if coord[ax] < out[ax] {
                break;
            }
            coord[ax] = 0;
        }
    }
    Some(idx)
}

/// The input's values picked by `idx`, `fill` where an element has no source.
pub fn pick(v: &Konst, idx: &[Option<usize>], fill: Option<&Konst>) -> Option<Konst> {
    Some(match v {
        Konst::Int(x) => {
            let f = match fill {
                Some(Konst::Int(f)) => f.first().cloned(),
                Some(Konst::Float(f)) => f.first().map(|&x| Dim::known(x as i64)),
                None => None,
            };
            Konst::Int(
                idx.iter()
                    .map(|i| match i {
                        Some(i) => x.get(*i).cloned(),
                        None => f.clone(),
                    })
                    .collect::<Option<_>>()?,
            )
        }
        Konst::Float(x) => {
            let f = match fill {
                Some(k) => k.as_f64s()?.first().copied(),
                None => None,
            };
            Konst::Float(
                idx.iter()
                    .map(|i| match i {
                        Some(i) => x.get(*i).copied(),
                        None => f,
                    })
                    .collect::<Option<_>>()?,
            )
        }
    })
}

/// The value of a movement whose output element `out` comes from input coordinate `map(out)`.
pub fn moved(x: &Fact, out: &[Dim], map: impl FnMut(&[u64], &mut [u64]) -> bool) -> Option<Konst> {
    let v = x.value.as_deref()?;
    let inp = x.known_shape()?;
    let out = known(out)?;
    if numel(&inp)? != v.len() as u64 {
        return None;
    }
    pick(v, &index_map(&out, &inp, map)?, None)
}

/// The coordinate of an output of rank `out_rank` broadcast from an input of shape `inp`.
pub fn broadcast_from(inp: &[u64], out_rank: usize) -> impl Fn(&[u64], &mut [u64]) -> bool + '_ {
    move |o, src| {
        let off = out_rank - inp.len();
        for (j, s) in src.iter_mut().enumerate() {
            *s = if inp[j] == 1 { 0 } else { o[j + off] };
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::DType;

    fn fact(shape: &[u64], v: Vec<i64>) -> Fact {
        Fact::new(
            Some(DType::I64),
            shape.iter().map(|&d| Dim::known(d as i64)).collect(),
        )
        .with_value(Konst::Int(v.into_iter().map(Dim::known).collect()))
    }

    fn ints(k: Option<Konst>) -> Vec<i64> {
        k.expect("folded").as_i64s().expect("known")
    }

    #[test]
    fn a_transpose_moves_the_values() {
        // [[0, 1, 2], [3, 4, 5]]^T = [[0, 3], [1, 4], [2, 5]]
        let x = fact(&[2, 3], vec![0, 1, 2, 3, 4, 5]);
        let out = [Dim::known(3), Dim::known(2)];
        let v = moved(&x, &out, |o, src| {
            src[0] = o[1];
            src[1] = o[0];
            true
        });
        assert_eq!(ints(v), [0, 3, 1, 4, 2, 5]);
    }

    #[test]
    fn padding_fills_where_there_is_no_source() {
        let x = fact(&[3], vec![7, 8, 9]);
        let idx = index_map(&[5], &[3], |o, src| {
            if o[0] == 0 || o[0] == 4 {
                return false;
            }
            src[0] = o[0] - 1;
            true
        })
        .unwrap();
        let fill = Konst::Int(vec![Dim::known(0)]);
        assert_eq!(
            ints(pick(x.value.as_deref().unwrap(), &idx, Some(&fill))),
            [0, 7, 8, 9, 0]
        );
    }

    #[test]
    fn broadcasting_repeats_size_one_axes() {
        let x = fact(&[2, 1], vec![1, 2]);
        let out = [Dim::known(2), Dim::known(3)];
        let v = moved(&x, &out, broadcast_from(&[2, 1], 2));
        assert_eq!(ints(v), [1, 1, 1, 2, 2, 2]);
    }

    #[test]
    fn a_source_outside_the_input_folds_nothing() {
        let x = fact(&[2], vec![1, 2]);
        let v = moved(&x, &[Dim::known(3)], |o, src| {
            src[0] = o[0];
            true
        });
        assert!(v.is_none());
    }
}
