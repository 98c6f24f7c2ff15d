//! onnxruntime's transformer contrib ops (`com.microsoft`), as its `docs/ContribOperators.md`
//! defines them: the fused norms `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization`
//! (`s = input + skip (+ bias)`, then a layer or RMS norm of `s` over the last axis with `gamma`
//! (and `beta`); outputs: the norm, the mean and inverse standard deviation (`[..., 1]`) and `s`),
//! the activations `Gelu` (erf), `BiasGelu` (erf of `A + B`), `FastGelu` (tanh approximation of
//! `X (+ bias)`), `QuickGelu` (`x · σ(alpha · x)`, alpha 1.702) and `BiasAdd` (`X + bias + skip`),
//! and `Attention` (the packed QKV projection, heads, scale, `unidirectional`, a 1-D (right
//! padding), 2-D or 3-D (keys to attend) `mask_index`, `attention_bias`; no `past`, no
//! `do_rotary`).

use candle_core::Tensor as CTensor;

use super::{attrs, broadcast_values, check_size, one, tensor, values, At, Cx, OpResult};
use crate::verify::exec::ExecError;

/// `a + b` with numpy broadcasting, as a tensor of the broadcast shape.
fn add(cx: &Cx, a: &CTensor, b: &CTensor) -> Result<CTensor, ExecError> {
    let bc = broadcast_values(cx, a, b)?;
    let sum = bc.a.iter().zip(&bc.b).map(|(x, y)| x + y).collect();
    tensor(sum, &bc.shape).at(cx)
}

/// A broadcast that must keep `x`'s shape (a bias or skip added to it).
fn add_onto(cx: &Cx, x: &CTensor, other: &CTensor, what: &str) -> Result<CTensor, ExecError> {
    let y = add(cx, x, other)?;
    if y.dims() != x.dims() {
        return Err(cx.fail(format!(
            "{what} of shape {:?} does not broadcast to the input's {:?}",
            other.dims(),
            x.dims()
        )));
    }
    Ok(y)
}

fn map_values(cx: &Cx, t: &CTensor, f: impl Fn(f64) -> f64) -> OpResult {
    let v: Vec<f64> = values(t).at(cx)?.into_iter().map(f).collect();
    one(tensor(v, t.dims()).at(cx)?)
}

pub(crate) fn gelu(cx: &Cx) -> OpResult {
    one(cx.input(0)?.gelu_erf().at(cx)?)
}

pub(crate) fn bias_gelu(cx: &Cx) -> OpResult {
    let x = add_onto(cx, cx.input(0)?, cx.input(1)?, "the bias")?;
    one(x.gelu_erf().at(cx)?)
}

pub(crate) fn fast_gelu(cx: &Cx) -> OpResult {
    let x = match cx.opt(1) {
        Some(b) => add_onto(cx, cx.input(0)?, b, "the bias")?,
        None => cx.input(0)?.clone(),
    };
    let c = (2.0 / std::f64::consts::PI).sqrt();
    map_values(cx, &x, |x| {
        0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
    })
}

pub(crate) fn quick_gelu(cx: &Cx) -> OpResult {
    let alpha = f64::from(
        cx.node
            .attrs
            .float_or("alpha", 1.702)
            .map_err(|e| cx.fail(e))?,
    );
    map_values(cx, cx.input(0)?, |x| x / (1.0 + (-alpha * x).exp()))
}

pub(crate) fn bias_add(cx: &Cx) -> OpResult {
    let x = cx.input(0)?;
    let y = add_onto(cx, x, cx.input(1)?, "the bias")?;
    one(add_onto(cx, &y, cx.input(2)?, "the skip")?)
}

/// `SkipLayerNormalization` and `SkipSimplifiedLayerNormalization`.
pub(crate) fn skip_layer_norm(cx: &Cx) -> OpResult {
    let n = attrs!(
        cx,
        SkipLayerNormalization | SkipSimplifiedLayerNormalization
    );
    let simplified = matches!(
        cx.op,
        crate::analysis::ops::Op::SkipSimplifiedLayerNormalization(_)
    );
    let x = cx.input(0)?;
    if !(2..=3).contains(&x.rank()) {
        return Err(cx.fail(format!("the input has rank {}, expected 2 or 3", x.rank())));
    }
    let hidden = x.dims()[x.rank() - 1];
    let vector = |i: usize, what: &str| -> Result<Option<&CTensor>, ExecError> {
        match cx.opt(i) {
            Some(t) if t.dims() != [hidden] => Err(cx.fail(format!(
                "{what} has shape {:?}, expected [{hidden}]",
                t.dims()
            ))),
            t => Ok(t),
        }
    };
    let gamma = vector(2, "gamma")?.ok_or_else(|| cx.fail("input 2 (gamma) is missing"))?;
    // SkipSimplifiedLayerNormalization has no beta: its input 3 is the bias
    let (beta, bias) = if simplified {
        (None, vector(3, "bias")?)
    } else {
        (vector(3, "beta")?, vector(4, "bias")?)
    };
    let mut sum = add_onto(cx, x, cx.input(1)?, "the skip")?;
    if let Some(b) = bias {
        sum = add_onto(cx, &sum, b, "the bias")?;
    }
    let last = x.rank() - 1;
    let eps = f64::from(n.epsilon);
    let mean = sum.mean_keepdim(last).at(cx)?;
    let (normed, inv_std) = if simplified {
        let ms = sum.sqr().at(cx)?.mean_keepdim(last).at(cx)?;
        let inv = ms.affine(1.0, eps).at(cx)?.sqrt().at(cx)?.recip().at(cx)?;
        (sum.broadcast_mul(&inv).at(cx)?, inv)
    } else {
        let centred = sum.broadcast_sub(&mean).at(cx)?;
        let var = centred.sqr().at(cx)?.mean_keepdim(last).at(cx)?;
        let inv = var.affine(1.0, eps).at(cx)?.sqrt().at(cx)?.recip().at(cx)?;
        (centred.broadcast_mul(&inv).at(cx)?, inv)
    };
    let mut y = normed.broadcast_mul(gamma).at(cx)?;
    if let Some(b) = beta {
        y = y.broadcast_add(b).at(cx)?;
    }
    Ok(vec![y, mean, inv_std, sum])
}

/// `Attention` (`com.microsoft`): `input · weights + bias` split into Q, K and V (sizes from
/// `qkv_hidden_sizes`, else thirds), `num_heads` heads, `softmax(scale · Q Kᵀ + mask + bias) V`
/// with the heads merged back. The mask adds `mask_filter_value` to the scores of keys a 1-D
/// `mask_index` (`[B]`, each sequence's length) puts past the end, a 2-D (`[B, T]`) or 3-D
/// (`[B, S, T]`) one marks 0, and, `unidirectional`, of keys after the query.
pub(crate) fn attention(cx: &Cx) -> OpResult {
    let h = attrs!(cx, MsAttention);
    if cx.opt(4).is_some() || cx.opt(6).is_some() {
        return Err(cx.unsupported("an Attention with past state is not supported"));
    }
    if cx.node.outputs().iter().skip(1).flatten().next().is_some() {
        return Err(cx.unsupported("the present output is not computed by the interpreter"));
    }
    let rotary = cx
        .node
        .attrs
        .int_or("do_rotary", 0)
        .map_err(|e| cx.fail(e))?;
    if rotary != 0 {
        return Err(cx.unsupported("an Attention with do_rotary is not supported"));
    }
    let x = cx.input(0)?;
    let w = cx.input(1)?;
    let (&[b, s, d_in], &[d_w, d_qkv]) = (x.dims(), w.dims()) else {
        return Err(cx.fail(format!(
            "input must be [B, S, H] and weights [H, Q+K+V], found {:?} and {:?}",
            x.dims(),
            w.dims()
        )));
    };
    if d_w != d_in {
        return Err(cx.fail(format!(
            "weights have {d_w} rows, the input {d_in} features"
        )));
    }
    let (dq, dv) = match &h.qkv_hidden_sizes {
        Some(v) => match v
            .iter()
            .map(|&x| usize::try_from(x))
            .collect::<Result<Vec<_>, _>>()
        {
            Ok(v) if v.len() == 3 && v[0] == v[1] && v[0] + v[1] + v[2] == d_qkv => (v[0], v[2]),
            _ => {
                return Err(cx.fail(format!(
                    "qkv_hidden_sizes {v:?} do not split weights of {d_qkv} columns (Q and K equal)"
                )))
            }
        },
        None if d_qkv % 3 == 0 => (d_qkv / 3, d_qkv / 3),
        None => return Err(cx.fail(format!("{d_qkv} weight columns do not split in three"))),
    };
    let heads = usize::try_from(h.num_heads).map_err(|_| cx.fail("num_heads overflows"))?;
    if dq % heads != 0 || dv % heads != 0 {
        return Err(cx.fail(format!(
            "Q, K ({dq}) and V ({dv}) do not split into {heads} heads"
        )));
    }
    let (hd, hv) = (dq / heads, dv / heads);
    let mut proj = x.matmul(
        &w.unsqueeze(0)
            .at(cx)?
            .broadcast_as((b, d_in, d_qkv))
            .at(cx)?,
    );
    if let Some(bias) = cx.opt(2) {
        if bias.dims() != [d_qkv] {
            return Err(cx.fail(format!(
                "bias has shape {:?}, expected [{d_qkv}]",
                bias.dims()
            )));
        }
        proj = proj.and_then(|p| p.broadcast_add(bias));
    }
    let qkv = values(&proj.at(cx)?).at(cx)?;
    // the mask, as what each (batch, query, key) adds to its score
    let fill = f64::from(h.mask_filter_value);
    let mask: Option<(Vec<f64>, Vec<usize>)> = match cx.opt(3) {
        None => None,
        Some(m) => Some((values(m).at(cx)?, m.dims().to_vec())),
    };
    // as onnxruntime: the causal mask and mask_index each add mask_filter_value
    let mask_add = |bi: usize, i: usize, j: usize| -> Result<f64, ExecError> {
        let causal = h.unidirectional && j > i;
        let by_mask = match &mask {
            None => false,
            Some((v, dims)) => match dims.as_slice() {
                [n] if *n == b => (j as f64) >= v[bi],
                [n, t] if *n == b && *t == s => v[bi * s + j] <= 0.0,
                [n, q, t] if *n == b && *q == s && *t == s => v[(bi * s + i) * s + j] <= 0.0,
                other => {
                    return Err(cx.unsupported(format!(
                        "a mask_index of shape {other:?} is not supported (only [B], [B, T] and [B, S, T])"
                    )))
                }
            },
        };
        Ok(fill * (f64::from(u8::from(causal)) + f64::from(u8::from(by_mask))))
    };
    let attn_bias = match cx.opt(5) {
        None => None,
        Some(a) => {
            check_size(cx, &[b, heads, s, s])?;
            let full = a.broadcast_as((b, heads, s, s)).map_err(|_| {
                cx.fail(format!(
                    "attention_bias of shape {:?} does not broadcast to [{b}, {heads}, {s}, {s}]",
                    a.dims()
                ))
            })?;
            Some(values(&full).at(cx)?)
        }
    };
    let scale = h.scale.map_or(1.0 / (hd as f64).sqrt(), f64::from);
    let mut out = vec![0.0; b * s * dv];
    let mut scores = vec![0.0; s];
    for bi in 0..b {
        for n in 0..heads {
            for i in 0..s {
                let q = (bi * s + i) * d_qkv + n * hd;
                for (j, score) in scores.iter_mut().enumerate() {
                    let k = (bi * s + j) * d_qkv + dq + n * hd;
                    let dot: f64 = (0..hd).map(|e| qkv[q + e] * qkv[k + e]).sum();
                    *score = scale * dot
                        + mask_add(bi, i, j)?
                        + attn_bias
                            .as_ref()
                            .map_or(0.0, |a| a[((bi * heads + n) * s + i) * s + j]);
                }
                let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let exps: Vec<f64> = scores.iter().map(|x| (x - top).exp()).collect();
                let total: f64 = exps.iter().sum();
                for (j, e) in exps.iter().enumerate() {
                    let p = e / total;
                    let v = (bi * s + j) * d_qkv + 2 * dq + n * hv;
                    let o = (bi * s + i) * dv + n * hv;
                    for e in 0..hv {
                        out[o + e] += p * qkv[v + e];
                    }
                }
            }
        }
    }
    one(tensor(out, &[b, s, dv]).at(cx)?)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, ints, G};
    use crate::ir::Attr;

    fn ms(g: &mut G, op: &str, ins: &[&str], outs: &[&str], attrs: Vec<(&str, Attr)>) {
        let attrs = crate::ir::Attrs(attrs.into_iter().map(|(n, a)| (n.into(), a)).collect());
        g.b.add_node(&format!("{op}_0"), op, "com.microsoft", ins, outs, attrs);
    }

    #[test]
    fn gelus_by_hand() {
        // erf(1/√2) = 0.682689492137086 (the normal distribution's 1σ mass)
        let p1 = 0.682_689_492_137_086;
        let mut g = G::new();
        g.input("x", &[3], vec![1.0, -1.0, 0.0]);
        ms(&mut g, "Gelu", &["x"], &["y"], vec![]);
        assert_close(
            &flat(&g.run1("y")),
            &[0.5 * (1.0 + p1), -0.5 * (1.0 - p1), 0.0],
        );
        // BiasGelu: x + b = 1, -1
        let mut g = G::new();
        g.input("x", &[2], vec![0.5, -1.5])
            .init("b", &[2], vec![0.5, 0.5]);
        ms(&mut g, "BiasGelu", &["x", "b"], &["y"], vec![]);
        assert_close(&flat(&g.run1("y")), &[0.5 * (1.0 + p1), -0.5 * (1.0 - p1)]);
        // FastGelu at 1: 0.5 (1 + tanh(√(2/π) · 1.044715)); √(2/π) = 0.7978845608028654
        let t = (0.797_884_560_802_865_4f64 * 1.044_715).tanh();
        let mut g = G::new();
        g.input("x", &[2], vec![0.75, 0.0])
            .init("b", &[1], vec![0.25]);
        ms(&mut g, "FastGelu", &["x", "b"], &["y"], vec![]);
        let t2 = (0.797_884_560_802_865_4f64 * (0.25 + 0.044_715 * 0.015_625)).tanh();
        assert_close(&flat(&g.run1("y")), &[0.5 * (1.0 + t), 0.125 * (1.0 + t2)]);
        // QuickGelu with alpha 2 at ln 3 / 2: σ(ln 3) = 3/4
        let x = 3f64.ln() / 2.0;
        let mut g = G::new();
        g.input("x", &[1], vec![x]);
        ms(
            &mut g,
            "QuickGelu",
            &["x"],
            &["y"],
            vec![("alpha", Attr::Float(2.0))],
        );
        assert_close(&flat(&g.run1("y")), &[0.75 * x]);
    }

    #[test]
    fn skip_layer_norm_by_hand() {
        // input + skip + bias = [1, 2, 3, 6] and [0, 0, 0, 4]: mean 3, variance (4+1+0+9)/4 = 3.5;
        // mean 1, variance (1+1+1+9)/4 = 3
        let mut g = G::new();
        g.input(
            "x",
            &[1, 2, 4],
            vec![1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        )
        .input(
            "skip",
            &[1, 2, 4],
            vec![0.0, 1.0, 2.0, 5.0, 0.0, 0.0, 0.0, 4.0],
        )
        .init("gamma", &[4], vec![1.0, 2.0, 1.0, 1.0])
        .init("beta", &[4], vec![0.0, 0.0, 0.0, 0.5]);
        g.init("bias", &[4], vec![0.0; 4]);
        ms(
            &mut g,
            "SkipLayerNormalization",
            &["x", "skip", "gamma", "beta", "bias"],
            &["y", "mean", "inv", "sum"],
            vec![("epsilon", Attr::Float(0.0))],
        );
        let out = g.run(&["y", "mean", "inv", "sum"]).unwrap();
        let (s, t) = (3.5f64.sqrt(), 3f64.sqrt());
        assert_close(
            &flat(&out[0]),
            &[
                -2.0 / s,
                -2.0 / s,
                0.0,
                3.0 / s + 0.5,
                -1.0 / t,
                -2.0 / t,
                -1.0 / t,
                3.0 / t + 0.5,
            ],
        );
        assert_eq!(out[1].dims(), [1, 2, 1]);
        assert_close(&flat(&out[1]), &[3.0, 1.0]);
        assert_close(&flat(&out[2]), &[1.0 / s, 1.0 / t]);
        assert_close(&flat(&out[3]), &[1.0, 2.0, 3.0, 6.0, 0.0, 0.0, 0.0, 4.0]);
    }

    #[test]
    fn skip_simplified_layer_norm_by_hand() {
        // input + skip + bias = [3, 4] (bias broadcast): mean square 12.5
        let mut g = G::new();
        g.input("x", &[1, 2], vec![1.0, 1.0])
            .input("skip", &[1, 2], vec![1.0, 2.0])
            .init("gamma", &[2], vec![1.0, 2.0])
            .init("bias", &[2], vec![1.0, 1.0]);
        ms(
            &mut g,
            "SkipSimplifiedLayerNormalization",
            &["x", "skip", "gamma", "bias"],
            &["y", "", "inv", "sum"],
            vec![("epsilon", Attr::Float(0.0))],
        );
        let out = g.run(&["y", "inv", "sum"]).unwrap();
        let r = 12.5f64.sqrt();
        assert_close(&flat(&out[0]), &[3.0 / r, 8.0 / r]);
        assert_close(&flat(&out[1]), &[1.0 / r]);
        assert_close(&flat(&out[2]), &[3.0, 4.0]);
    }

    /// Attention over x = [[1, 0], [0, 1]] (B 1, S 2, D 2) with Q = K = V = x (weights [I I I]).
    fn attention(heads: i64, attrs: Vec<(&str, Attr)>, mask: Option<Vec<i64>>) -> Vec<f64> {
        let mut g = G::new();
        g.input("x", &[1, 2, 2], vec![1.0, 0.0, 0.0, 1.0]).init(
            "w",
            &[2, 6],
            vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0],
        );
        let mut all = vec![("num_heads", Attr::Int(heads))];
        all.extend(attrs);
        let ins: &[&str] = match mask {
            Some(m) => {
                g.init_i64("mask", m);
                &["x", "w", "", "mask"]
            }
            None => &["x", "w"],
        };
        ms(&mut g, "Attention", ins, &["y"], all);
        flat(&g.run1("y"))
    }

    #[test]
    fn attention_by_hand() {
        // one head, scale 1/√2: query 0 scores [1/√2, 0], query 1 [0, 1/√2]
        let a = std::f64::consts::FRAC_1_SQRT_2;
        let p = a.exp() / (a.exp() + 1.0);
        assert_close(&attention(1, vec![], None), &[p, 1.0 - p, 1.0 - p, p]);
        // causal: query 0 sees key 0 only
        let causal = attention(1, vec![("unidirectional", Attr::Int(1))], None);
        assert_close(&causal, &[1.0, 0.0, 1.0 - p, p]);
        // sequence length 1: key 1 is masked for both queries (e^-10000 is 0)
        assert_close(&attention(1, vec![], Some(vec![1])), &[1.0, 0.0, 1.0, 0.0]);
        // two heads of size 1 (scale 1): head 0 reads feature 0, head 1 feature 1
        let e = 1f64.exp() / (1.0 + 1f64.exp());
        assert_close(&attention(2, vec![], None), &[e, 0.5, 0.5, e]);
        // an explicit scale of 2 with one head: scores [2, 0]
        let q = 2f64.exp() / (2f64.exp() + 1.0);
        assert_close(
            &attention(1, vec![("scale", Attr::Float(2.0))], None),
            &[q, 1.0 - q, 1.0 - q, q],
        );
        // Q, K and V of 2, 2 and 2 columns given explicitly: the same as thirds
        assert_close(
            &attention(1, vec![("qkv_hidden_sizes", ints(&[2, 2, 2]))], None),
            &[p, 1.0 - p, 1.0 - p, p],
        );
    }

    #[test]
    fn bias_add_and_bad_shapes() {
        let mut g = G::new();
        g.input("x", &[1, 2, 2], vec![1.0, 2.0, 3.0, 4.0])
            .input("s", &[1, 2, 2], vec![10.0, 20.0, 30.0, 40.0])
            .init("b", &[2], vec![0.5, -0.5]);
        ms(&mut g, "BiasAdd", &["x", "b", "s"], &["y"], vec![]);
        assert_close(&flat(&g.run1("y")), &[11.5, 21.5, 33.5, 43.5]);
        let mut g = G::new();
        g.input("x", &[1, 2, 2], vec![0.0; 4])
            .input("s", &[1, 2, 2], vec![0.0; 4])
            .init("gamma", &[3], vec![1.0; 3]);
        ms(
            &mut g,
            "SkipLayerNormalization",
            &["x", "s", "gamma"],
            &["y"],
            vec![],
        );
        let err = g.run(&["y"]).unwrap_err().to_string();
        assert!(err.contains("gamma has shape [3], expected [2]"), "{err}");
    }
}
