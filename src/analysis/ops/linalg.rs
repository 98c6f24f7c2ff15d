//! Matrix products: `Gemm`, `MatMul`, `Einsum`, and the recurrent layers.
//!
//! MACs are the multiplications of the product: `M×N×K` for a `[M,K]×[K,N]` product (times the
//! broadcast batch for `MatMul`); the bias and `alpha`/`beta` scaling are not counted.

use super::{attrs, broadcast, invalid, AttrReader, FromAttrs, InferError, InferResult, Op, OpCx};
use crate::analysis::fact::Fact;
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{Attrs, DType, Dim};

/// `Gemm`'s attributes: `Y = alpha · A' B' + beta · C`.
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    pub trans_a: bool,
    pub trans_b: bool,
    pub alpha: f32,
    pub beta: f32,
}

impl FromAttrs for Gemm {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Gemm {
            trans_a: r.flag("transA", false)?,
            trans_b: r.flag("transB", false)?,
            alpha: r.float("alpha", 1.0)?,
            beta: r.float("beta", 1.0)?,
        })
    }
}

/// `Einsum`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct EinsumAttrs {
    pub equation: String,
}

impl FromAttrs for EinsumAttrs {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(EinsumAttrs {
            equation: AttrReader(a)
                .string("equation")?
                .ok_or("attribute 'equation' is required")?,
        })
    }
}

crate::named_enum! {
    /// Which way a recurrent op runs over the sequence.
    pub enum Direction {
        /// First to last step.
        Forward = "forward",
        /// Last to first step.
        Reverse = "reverse",
        /// Both, the forward direction first in the outputs.
        Bidirectional = "bidirectional",
    }
}

/// The attributes of `LSTM`, `GRU` and `RNN`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rnn {
    pub hidden_size: Option<i64>,
    /// `layout = 1`: batch first.
    pub batch_first: bool,
    pub direction: Direction,
    /// The activation functions by name, as the file gives them (empty: the op's defaults).
    pub activations: Vec<String>,
    pub activation_alpha: Vec<f32>,
    pub activation_beta: Vec<f32>,
    /// Bound on the gates' inputs, `[-clip, clip]`.
    pub clip: Option<f32>,
    /// `LSTM`: the forget gate is `1 - input gate`.
    pub input_forget: bool,
    /// `GRU`: the reset gate multiplies after the hidden state's linear transform.
    pub linear_before_reset: bool,
}

impl FromAttrs for Rnn {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let direction = match r.string("direction")? {
            None => Direction::Forward,
            Some(s) => s
                .parse()
                .map_err(|e| format!("attribute 'direction': {e}"))?,
        };
        let activations = match a.get("activations") {
            None => Vec::new(),
            Some(crate::ir::Attr::Strings(v)) => v
                .iter()
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect(),
            Some(_) => return Err("attribute 'activations' must be a list of strings".into()),
        };
        Ok(Rnn {
            hidden_size: r.int_opt("hidden_size")?,
            batch_first: r.flag("layout", false)?,
            direction,
            activations,
            activation_alpha: r.floats("activation_alpha")?.unwrap_or_default(),
            activation_beta: r.floats("activation_beta")?.unwrap_or_default(),
            clip: r.float_opt("clip")?,
            input_forget: r.flag("input_forget", false)?,
            linear_before_reset: r.flag("linear_before_reset", false)?,
        })
    }
}

fn mismatch(what: &str, a: &Dim, b: &Dim) -> InferResult<()> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        if x != y {
            return invalid(format!("{what}: {x} against {y}"));
        }
    }
    Ok(())
}

/// `(M, K, N)` of a `Gemm`.
fn gemm_dims(cx: &OpCx) -> InferResult<(Dim, Dim, Dim)> {
    gemm_dims_at(cx, attrs!(cx, Gemm), 0, 1)
}

/// `(M, K, N)` of a Gemm reading A at slot `a` and B at slot `b`.
pub fn gemm_dims_at(cx: &OpCx, g: &Gemm, a: usize, b: usize) -> InferResult<(Dim, Dim, Dim)> {
    let a = cx.shape(a)?;
    let b = cx.shape(b)?;
    if a.len() != 2 || b.len() != 2 {
        return invalid(format!(
            "A and B must be matrices, found ranks {} and {}",
            a.len(),
            b.len()
        ));
    }
    let (m, k) = if g.trans_a {
        (&a[1], &a[0])
    } else {
        (&a[0], &a[1])
    };
    let (k2, n) = if g.trans_b {
        (&b[1], &b[0])
    } else {
        (&b[0], &b[1])
    };
    mismatch("inner dimensions of A and B differ", k, k2)?;
    Ok((m.clone(), k.clone(), n.clone()))
}

pub fn gemm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (m, _, n) = gemm_dims(cx)?;
    let out = vec![m, n];
    if let Some(c) = cx.opt_input(2).and_then(|f| f.shape.as_deref()) {
        let b = broadcast(&[&out, c])?;
        if b != out
            && b.iter()
                .zip(&out)
                .any(|(x, y)| x.is_known() && y.is_known() && x != y)
        {
            return invalid("C does not broadcast to the output [M, N]");
        }
    }
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

pub fn gemm_macs(cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    let (m, k, n) = gemm_dims(cx).ok()?;
    Dim::product(&[m, k, n])
}

/// A numpy-style matmul: broadcast batch, `M`, `K`, `N`, and the output shape.
pub struct MatMulDims {
    pub batch: Vec<Dim>,
    pub m: Dim,
    pub k: Dim,
    pub n: Dim,
    pub out: Vec<Dim>,
}

impl MatMulDims {
    /// `batch × M × K × N`.
    pub fn macs(&self) -> Option<Dim> {
        Dim::product(self.batch.iter().chain([&self.m, &self.k, &self.n]))
    }
}

fn matmul_dims(cx: &OpCx) -> InferResult<MatMulDims> {
    matmul_dims_of(cx.shape(0)?, cx.shape(1)?)
}

/// The product of `a` and `b` as numpy's matmul takes it.
pub fn matmul_dims_of(a: &[Dim], b: &[Dim]) -> InferResult<MatMulDims> {
    // a vector operand is a row (left) or a column (right) that the result drops again; read in
    // place, without copying either shape (two of the five arrays a product made)
    let one = Dim::known(1);
    let (a_vec, b_vec) = (a.len() == 1, b.len() == 1);
    let (a_batch, m, k) = match a {
        [k] => (&[][..], &one, k),
        [batch @ .., m, k] => (batch, m, k),
        [] => return invalid("MatMul operands must have rank 1 or more"),
    };
    let (b_batch, k2, n) = match b {
        [k2] => (&[][..], k2, &one),
        [batch @ .., k2, n] => (batch, k2, n),
        [] => return invalid("MatMul operands must have rank 1 or more"),
    };
    mismatch("inner dimensions differ", k, k2)?;
    let batch = broadcast(&[a_batch, b_batch])?;
    let mut out = Vec::with_capacity(batch.len() + 2);
    out.extend_from_slice(&batch);
    if !a_vec {
        out.push(m.clone());
    }
    if !b_vec {
        out.push(n.clone());
    }
    Ok(MatMulDims {
        batch,
        m: m.clone(),
        k: k.clone(),
        n: n.clone(),
        out,
    })
}

pub fn matmul(cx: &OpCx) -> InferResult<Vec<Fact>> {
    Ok(vec![Fact::new(cx.dtype(0), matmul_dims(cx)?.out)])
}

pub fn matmul_macs(cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    matmul_dims(cx).ok()?.macs()
}

/// A parsed einsum equation: the letters of each operand and of the output, with `.` standing for
/// the broadcast (ellipsis) axes.
pub struct Einsum {
    pub inputs: Vec<Vec<char>>,
    pub output: Vec<char>,
}

/// Parses an equation for operands of these ranks (the checker's `Einsum` kernel uses it too).
pub fn parse_einsum(eq: &str, ranks: &[usize]) -> InferResult<Einsum> {
    let eq: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ranks.len() {
        return invalid(format!(
            "equation has {} operands, node has {}",
            terms.len(),
            ranks.len()
        ));
    }
    let mut inputs = Vec::new();
    let mut ell_rank = 0;
    for (t, &r) in terms.iter().zip(ranks) {
        let letters: Vec<char> = t.replace("...", ".").chars().collect();
        let named = letters.iter().filter(|c| **c != '.').count();
        let mut expanded = Vec::new();
        for c in letters {
            if c == '.' {
                let e = r.checked_sub(named).ok_or_else(|| {
                    InferError::Invalid("operand rank too small for the equation".into())
                })?;
                ell_rank = ell_rank.max(e);
                // ellipsis axes are numbered from the right so that they broadcast
                for j in (0..e).rev() {
                    expanded.push(char::from_u32(0x2460 + j as u32).unwrap_or('?'));
                }
            } else if c.is_ascii_alphabetic() {
                expanded.push(c);
            } else {
                return invalid(format!("unexpected '{c}' in equation"));
            }
        }
        if expanded.len() != r {
            return invalid(format!("operand '{t}' does not match rank {r}"));
        }
        inputs.push(expanded);
    }
    let ell: Vec<char> = (0..ell_rank)
        .rev()
        .map(|j| char::from_u32(0x2460 + j as u32).unwrap_or('?'))
        .collect();
    let output = match rhs {
        Some(r) => {
            let mut out = Vec::new();
            for c in r.replace("...", ".").chars() {
                if c == '.' {
                    out.extend(&ell);
                } else {
                    out.push(c);
                }
            }
            out
        }
        None => {
            // implicit mode: ellipsis, then letters appearing once, alphabetically
            let mut counts = std::collections::BTreeMap::new();
            for c in inputs.iter().flatten().filter(|c| c.is_ascii_alphabetic()) {
                *counts.entry(*c).or_insert(0) += 1;
            }
            let mut out = ell.clone();
            out.extend(counts.into_iter().filter(|(_, n)| *n == 1).map(|(c, _)| c));
            out
        }
    };
    Ok(Einsum { inputs, output })
}

fn einsum_sizes(cx: &OpCx) -> InferResult<(Einsum, std::collections::BTreeMap<char, Dim>)> {
    let eq = &attrs!(cx, Einsum).equation;
    let shapes: Vec<&[Dim]> = (0..cx.n_inputs())
        .map(|i| cx.shape(i))
        .collect::<InferResult<_>>()?;
    let ranks: Vec<usize> = shapes.iter().map(|s| s.len()).collect();
    let e = parse_einsum(eq, &ranks)?;
    let mut sizes: std::collections::BTreeMap<char, Dim> = std::collections::BTreeMap::new();
    for (letters, shape) in e.inputs.iter().zip(&shapes) {
        for (c, d) in letters.iter().zip(shape.iter()) {
            match sizes.get(c) {
                Some(prev) if *prev == Dim::known(1) => {
                    sizes.insert(*c, d.clone());
                }
                Some(prev) if *d != Dim::known(1) => {
                    mismatch(&format!("index '{c}' has two sizes"), prev, d)?
                }
                Some(_) => {}
                None => {
                    sizes.insert(*c, d.clone());
                }
            }
        }
    }
    Ok((e, sizes))
}

pub fn einsum(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let (e, sizes) = einsum_sizes(cx)?;
    let out = e
        .output
        .iter()
        .map(|c| {
            sizes.get(c).cloned().ok_or_else(|| {
                InferError::Invalid(format!("output index '{c}' appears in no operand"))
            })
        })
        .collect::<InferResult<Vec<_>>>()?;
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

/// A product over every index of the equation (each output element sums over the contracted ones).
pub fn einsum_macs(cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    if cx.n_inputs() < 2 {
        return None;
    }
    let (_, sizes) = einsum_sizes(cx).ok()?;
    Dim::product(sizes.values())
}

struct RnnDims {
    seq: Dim,
    batch: Dim,
    input: Dim,
    hidden: Dim,
    dirs: Dim,
    gates: i64,
    batch_first: bool,
}

fn rnn_dims(cx: &OpCx) -> InferResult<RnnDims> {
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    if x.len() != 3 || w.len() != 3 {
        return invalid("X and W must have rank 3");
    }
    let r = attrs!(cx, Lstm | Gru | Rnn);
    let batch_first = r.batch_first;
    let (seq, batch) = if batch_first {
        (&x[1], &x[0])
    } else {
        (&x[0], &x[1])
    };
    let gates = match cx.op {
        Op::Lstm(_) => 4,
        Op::Gru(_) => 3,
        _ => 1,
    };
    let hidden = match r.hidden_size {
        Some(h) => Dim::known(h),
        None => w[1].floor_div(gates).ok_or(InferError::Unknown)?,
    };
    Ok(RnnDims {
        seq: seq.clone(),
        batch: batch.clone(),
        input: x[2].clone(),
        hidden,
        dirs: w[0].clone(),
        gates,
        batch_first,
    })
}

/// `LSTM`, `GRU`, `RNN`: `Y`, `Y_h` (and `Y_c` for LSTM).
pub fn rnn(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let d = rnn_dims(cx)?;
    let t = cx.dtype(0).or(Some(DType::F32));
    let (y, h) = if d.batch_first {
        (
            vec![
                d.batch.clone(),
                d.seq.clone(),
                d.dirs.clone(),
                d.hidden.clone(),
            ],
            vec![d.batch.clone(), d.dirs.clone(), d.hidden.clone()],
        )
    } else {
        (
            vec![
                d.seq.clone(),
                d.dirs.clone(),
                d.batch.clone(),
                d.hidden.clone(),
            ],
            vec![d.dirs.clone(), d.batch.clone(), d.hidden.clone()],
        )
    };
    Ok(vec![
        Fact::new(t, y),
        Fact::new(t, h.clone()),
        Fact::new(t, h),
    ])
}

pub fn rnn_macs(cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    let d = rnn_dims(cx).ok()?;
    let width = d.input.checked_add(&d.hidden)?;
    Dim::product(&[d.seq, d.batch, d.dirs, Dim::known(d.gates), d.hidden, width])
}

/// A recurrent layer saves its input and every gate activation of every step (approximated as the
/// gates, plus the cell state for LSTM, times the output size).
pub fn rnn_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    if !cx.out_grad() {
        return Some(Vec::new());
    }
    let mut s: Vec<Save> = cx.node.input(0).map(Save::Value).into_iter().collect();
    let gates = match cx.op {
        Op::Lstm(_) => 5,
        Op::Gru(_) => 4,
        _ => 1,
    };
    let y = cx.node.output(0)?;
    let yb = cx.bytes_as(y, cx.dtype(y));
    s.push(Save::Own(yb.saturating_mul(gates)));
    Some(s)
}

/// `Det`: the determinants of `[..., M, M]` matrices, `[...]`.
pub fn det(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.shape(0)?;
    if x.len() < 2 {
        return invalid(format!("input has rank {}, expected at least 2", x.len()));
    }
    let (m, n) = (&x[x.len() - 2], &x[x.len() - 1]);
    if let (Some(a), Some(b)) = (m.as_i64(), n.as_i64()) {
        if a != b {
            return invalid(format!("the matrices are {a}x{b}, not square"));
        }
    }
    Ok(vec![Fact::new(cx.dtype(0), x[..x.len() - 2].to_vec())])
}

/// MACs of `Det` by LU factorisation (what PyTorch and onnxruntime run): eliminating column `k`
/// of an `n×n` matrix updates the `(n-k)²` entries below and right of the pivot, so one matrix
/// costs `Σ_{k=1}^{n-1} k² = (n-1)·n·(2n-1)/6`; the product of the diagonal and the pivot
/// divisions are not counted.
pub fn det_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let x = cx.shape(0).ok()?;
    let n = x.last()?.as_i64()?;
    let one = n
        .checked_sub(1)?
        .checked_mul(n)?
        .checked_mul(n.checked_mul(2)?.checked_sub(1)?)?
        / 6;
    out.first()?.numel()?.checked_mul(&Dim::known(one))
}

/// `linalg_det` keeps its input, its output, the LU factors (the input's size) and the int32
/// pivots (`n` per matrix).
pub fn det_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    let Some(x) = cx.node.input(0).filter(|&x| cx.grad(Some(x))) else {
        return Some(Vec::new());
    };
    let f = cx.fact(x);
    let n = f.shape.as_ref()?.last()?.as_u64()?;
    let batch = f.numel()?.as_u64()? / n.saturating_mul(n).max(1);
    let mut s = vec![Save::Value(x)];
    s.extend(cx.node.output(0).map(Save::Value));
    s.push(Save::Own(cx.bytes_as(x, cx.dtype(x))));
    s.push(Save::Own(batch.checked_mul(n)?.checked_mul(4)?));
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, run, shapes};
    use super::*;

    #[test]
    fn determinant_macs_by_lu() {
        // n = 3: (2·3·5)/6 = 5 per matrix, two matrices
        let (out, macs) = run("Det", vec![], vec![f32s(&[2, 3, 3])], 22);
        assert_eq!(shapes(&out), ["[2]"]);
        assert_eq!(macs, Some(Dim::known(10)));
        // n = 4: 1 + 4 + 9 = 14
        let (out, macs) = run("Det", vec![], vec![f32s(&[4, 4])], 22);
        assert_eq!(shapes(&out), ["[]"]);
        assert_eq!(macs, Some(Dim::known(14)));
        let (out, _) = run("Det", vec![], vec![f32s(&[3, 4])], 22);
        assert!(shapes(&out)[0].contains("not square"), "{out:?}");
    }
}
