//! The recurrent ops of the linear-algebra family, `LSTM`, `GRU` and `RNN`, as the ONNX spec
//! defines them: every direction, initial states, `sequence_lens` (steps past a sequence's end
//! give zeros in `Y`, and the last states are those of its last step), LSTM's peepholes and
//! `input_forget`, GRU's `linear_before_reset`, the activations with their alphas and betas,
//! `clip` and `layout` (batch first, opset 14).

use super::{attrs, check_size, checked_product, tensor, values, At, Cx, OpResult};
use crate::analysis::ops::linalg::{Direction, Rnn};
use crate::verify::exec::{ExecError, MAX_ELEMENTS};

/// One activation function with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Act {
    Sigmoid,
    Tanh,
    Relu,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

impl Act {
    fn apply(self, x: f64) -> f64 {
        match self {
            Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            Act::Tanh => x.tanh(),
            Act::Relu => x.max(0.0),
            Act::Affine(a, b) => a * x + b,
            Act::LeakyRelu(a) => {
                if x < 0.0 {
                    a * x
                } else {
                    x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > a {
                    x
                } else {
                    0.0
                }
            }
            Act::ScaledTanh(a, b) => a * (b * x).tanh(),
            Act::HardSigmoid(a, b) => (a * x + b).clamp(0.0, 1.0),
            Act::Elu(a) => {
                if x < 0.0 {
                    a * x.exp_m1()
                } else {
                    x
                }
            }
            Act::Softsign => x / (1.0 + x.abs()),
            Act::Softplus => x.exp().ln_1p(),
        }
    }
}

/// The activations of every direction: the attribute's (names case-insensitive, each function
/// that takes an alpha or a beta reading the next of the lists, as onnxruntime does), the op's
/// defaults when it has none; a list for one direction serves both of a bidirectional op.
fn activations(cx: &Cx, r: &Rnn, defaults: &[Act], dirs: usize) -> Result<Vec<Act>, ExecError> {
    let per = defaults.len();
    if r.activations.is_empty() {
        return Ok(defaults.iter().copied().cycle().take(per * dirs).collect());
    }
    let (mut alphas, mut betas) = (r.activation_alpha.iter(), r.activation_beta.iter());
    fn next(list: &mut std::slice::Iter<f32>, default: f64) -> f64 {
        list.next().map_or(default, |&v| f64::from(v))
    }
    let mut out = Vec::new();
    for name in &r.activations {
        out.push(match name.to_ascii_lowercase().as_str() {
            "sigmoid" => Act::Sigmoid,
            "tanh" => Act::Tanh,
            "relu" => Act::Relu,
            "affine" => Act::Affine(next(&mut alphas, 1.0), next(&mut betas, 0.0)),
            "leakyrelu" => Act::LeakyRelu(next(&mut alphas, 0.01)),
            "thresholdedrelu" => Act::ThresholdedRelu(next(&mut alphas, 1.0)),
            "scaledtanh" => Act::ScaledTanh(next(&mut alphas, 1.0), next(&mut betas, 1.0)),
            "hardsigmoid" => Act::HardSigmoid(next(&mut alphas, 0.2), next(&mut betas, 0.5)),
            "elu" => Act::Elu(next(&mut alphas, 1.0)),
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            other => return Err(cx.unsupported(format!("activation '{other}' is not supported"))),
        });
    }
    if out.len() == per && dirs == 2 {
        out.extend_from_within(..);
    }
    if out.len() != per * dirs {
        return Err(cx.fail(format!(
            "{} activations, expected {}",
            out.len(),
            per * dirs
        )));
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Lstm,
    Gru,
    Rnn,
}

impl Kind {
    fn gates(self) -> usize {
        match self {
            Kind::Lstm => 4,
            Kind::Gru => 3,
            Kind::Rnn => 1,
        }
    }

    fn defaults(self) -> &'static [Act] {
        match self {
            Kind::Lstm => &[Act::Sigmoid, Act::Tanh, Act::Tanh],
            Kind::Gru => &[Act::Sigmoid, Act::Tanh],
            Kind::Rnn => &[Act::Tanh],
        }
    }
}

pub fn lstm(cx: &Cx) -> OpResult {
    recurrent(cx, attrs!(cx, Lstm), Kind::Lstm)
}

pub fn gru(cx: &Cx) -> OpResult {
    recurrent(cx, attrs!(cx, Gru), Kind::Gru)
}

pub fn rnn(cx: &Cx) -> OpResult {
    recurrent(cx, attrs!(cx, Rnn), Kind::Rnn)
}

/// `y[j] = Σₖ m[row0 + j][k] · v[k]` for `n` rows of a row-major matrix of width `v.len()`.
fn matvec(m: &[f64], row0: usize, n: usize, v: &[f64], y: &mut [f64]) {
    let w = v.len();
    for (j, out) in y.iter_mut().enumerate().take(n) {
        let row = &m[(row0 + j) * w..(row0 + j + 1) * w];
        *out += row.iter().zip(v).map(|(a, b)| a * b).sum::<f64>();
    }
}

fn recurrent(cx: &Cx, r: &Rnn, kind: Kind) -> OpResult {
    let g = kind.gates();
    let (x, w, rw) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    let dirs = if r.direction == Direction::Bidirectional {
        2
    } else {
        1
    };
    let (&[a, b, input], &[wd, wg, wi], &[rd, rg, hidden]) = (x.dims(), w.dims(), rw.dims()) else {
        return Err(cx.fail(format!(
            "X {:?}, W {:?} and R {:?} must have rank 3",
            x.dims(),
            w.dims(),
            rw.dims()
        )));
    };
    let (seq, batch) = if r.batch_first { (b, a) } else { (a, b) };
    if r.hidden_size
        .is_some_and(|h| usize::try_from(h) != Ok(hidden))
        || wd != dirs
        || rd != dirs
        || wg != g * hidden
        || rg != g * hidden
        || wi != input
    {
        return Err(cx.fail(format!(
            "W {:?} and R {:?} do not fit X {:?} with {dirs} directions and hidden size {hidden}",
            w.dims(),
            rw.dims(),
            x.dims()
        )));
    }
    let work = checked_product(&[seq, batch, dirs, g, hidden, input + hidden]);
    if work.is_none_or(|n| n > 64 * MAX_ELEMENTS) {
        return Err(cx.fail("the recurrence is too large to evaluate"));
    }
    check_size(cx, &[seq, dirs, batch, hidden])?;
    let acts = activations(cx, r, kind.defaults(), dirs)?;
    let per = kind.defaults().len();
    let xv = values(x).at(cx)?;
    let wv = values(w).at(cx)?;
    let rv = values(rw).at(cx)?;
    let bias = match cx.opt(3) {
        Some(t) if t.dims() == [dirs, 2 * g * hidden] => values(t).at(cx)?,
        Some(t) => {
            return Err(cx.fail(format!(
                "B has shape {:?}, expected [{dirs}, {}]",
                t.dims(),
                2 * g * hidden
            )))
        }
        None => vec![0.0; dirs * 2 * g * hidden],
    };
    let lens: Vec<usize> = match cx.opt(4) {
        Some(t) => {
            let v = super::to_ints(t).map_err(|e| cx.fail(format!("sequence_lens: {e}")))?;
            if v.len() != batch {
                return Err(cx.fail(format!("{} sequence_lens for a batch of {batch}", v.len())));
            }
            v.iter()
                .map(|&l| usize::try_from(l).ok().filter(|&l| l <= seq))
                .collect::<Option<_>>()
                .ok_or_else(|| cx.fail(format!("sequence_lens {v:?} are not in [0, {seq}]")))?
        }
        None => vec![seq; batch],
    };
    // initial states, as [dirs, batch, hidden]
    let state = |i: usize, what: &str| -> Result<Vec<f64>, ExecError> {
        let Some(t) = cx.opt(i) else {
            return Ok(vec![0.0; dirs * batch * hidden]);
        };
        let want = if r.batch_first {
            [batch, dirs, hidden]
        } else {
            [dirs, batch, hidden]
        };
        if t.dims() != want {
            return Err(cx.fail(format!(
                "{what} has shape {:?}, expected {want:?}",
                t.dims()
            )));
        }
        let v = values(t).at(cx)?;
        if !r.batch_first {
            return Ok(v);
        }
        let mut out = vec![0.0; v.len()];
        for bi in 0..batch {
            for d in 0..dirs {
                let (from, to) = ((bi * dirs + d) * hidden, (d * batch + bi) * hidden);
                out[to..to + hidden].copy_from_slice(&v[from..from + hidden]);
            }
        }
        Ok(out)
    };
    let h0 = state(5, "initial_h")?;
    let c0 = if kind == Kind::Lstm {
        state(6, "initial_c")?
    } else {
        Vec::new()
    };
    let peep = match (kind, cx.opt(7)) {
        (Kind::Lstm, Some(t)) if t.dims() == [dirs, 3 * hidden] => Some(values(t).at(cx)?),
        (Kind::Lstm, Some(t)) => {
            return Err(cx.fail(format!(
                "P has shape {:?}, expected [{dirs}, {}]",
                t.dims(),
                3 * hidden
            )))
        }
        _ => None,
    };
    let clip = r.clip.map(f64::from);
    let clipped = |v: f64| clip.map_or(v, |c| v.clamp(-c, c));
    // outputs as [seq, dirs, batch, hidden] and [dirs, batch, hidden]
    let mut y = vec![0.0; seq * dirs * batch * hidden];
    let mut yh = vec![0.0; dirs * batch * hidden];
    let mut yc = vec![0.0; dirs * batch * hidden];
    let x_at = |t: usize, bi: usize| -> &[f64] {
        let row = if r.batch_first {
            bi * seq + t
        } else {
            t * batch + bi
        };
        &xv[row * input..(row + 1) * input]
    };
    let gh_len = g * hidden;
    for d in 0..dirs {
        let reverse = r.direction == Direction::Reverse || d == 1;
        let wd = &wv[d * gh_len * input..(d + 1) * gh_len * input];
        let rd = &rv[d * gh_len * hidden..(d + 1) * gh_len * hidden];
        let wb = &bias[d * 2 * gh_len..d * 2 * gh_len + gh_len];
        let rb = &bias[d * 2 * gh_len + gh_len..(d + 1) * 2 * gh_len];
        let act = &acts[d * per..(d + 1) * per];
        for (bi, &len) in lens.iter().enumerate() {
            let at = (d * batch + bi) * hidden;
            let mut h = h0[at..at + hidden].to_vec();
            let mut c = if kind == Kind::Lstm {
                c0[at..at + hidden].to_vec()
            } else {
                Vec::new()
            };
            let mut gx = vec![0.0; gh_len];
            let mut gh = vec![0.0; gh_len];
            for step in 0..len {
                let t = if reverse { len - 1 - step } else { step };
                gx.copy_from_slice(wb);
                matvec(wd, 0, gh_len, x_at(t, bi), &mut gx);
                gh.copy_from_slice(rb);
                matvec(rd, 0, gh_len, &h, &mut gh);
                match kind {
                    Kind::Lstm => {
                        // gates i, o, f, c; peepholes i, o, f
                        let p = |k: usize, j: usize| {
                            peep.as_ref()
                                .map_or(0.0, |p| p[d * 3 * hidden + k * hidden + j])
                        };
                        for j in 0..hidden {
                            let pre = |k: usize| gx[k * hidden + j] + gh[k * hidden + j];
                            let i = act[0].apply(clipped(pre(0) + p(0, j) * c[j]));
                            let f = if r.input_forget {
                                1.0 - i
                            } else {
                                act[0].apply(clipped(pre(2) + p(2, j) * c[j]))
                            };
                            let cand = act[1].apply(clipped(pre(3)));
                            c[j] = f * c[j] + i * cand;
                            let o = act[0].apply(clipped(pre(1) + p(1, j) * c[j]));
                            h[j] = o * act[2].apply(c[j]);
                        }
                    }
                    Kind::Gru => {
                        // gates z, r, h
                        let z: Vec<f64> = (0..hidden)
                            .map(|j| act[0].apply(clipped(gx[j] + gh[j])))
                            .collect();
                        let rg: Vec<f64> = (0..hidden)
                            .map(|j| act[0].apply(clipped(gx[hidden + j] + gh[hidden + j])))
                            .collect();
                        let cand: Vec<f64> = if r.linear_before_reset {
                            (0..hidden)
                                .map(|j| gx[2 * hidden + j] + rg[j] * gh[2 * hidden + j])
                                .collect()
                        } else {
                            let rh: Vec<f64> = rg.iter().zip(&h).map(|(a, b)| a * b).collect();
                            let mut lin = rb[2 * hidden..].to_vec();
                            matvec(rd, 2 * hidden, hidden, &rh, &mut lin);
                            (0..hidden).map(|j| gx[2 * hidden + j] + lin[j]).collect()
                        };
                        for j in 0..hidden {
                            let n = act[1].apply(clipped(cand[j]));
                            h[j] = (1.0 - z[j]) * n + z[j] * h[j];
                        }
                    }
                    Kind::Rnn => {
                        for j in 0..hidden {
                            h[j] = act[0].apply(clipped(gx[j] + gh[j]));
                        }
                    }
                }
                let o = ((t * dirs + d) * batch + bi) * hidden;
                y[o..o + hidden].copy_from_slice(&h);
            }
            yh[at..at + hidden].copy_from_slice(&h);
            if kind == Kind::Lstm {
                yc[at..at + hidden].copy_from_slice(&c);
            }
        }
    }
    let (y, yh, yc) = if r.batch_first {
        let mut ty = vec![0.0; y.len()];
        for t in 0..seq {
            for d in 0..dirs {
                for bi in 0..batch {
                    let from = ((t * dirs + d) * batch + bi) * hidden;
                    let to = ((bi * seq + t) * dirs + d) * hidden;
                    ty[to..to + hidden].copy_from_slice(&y[from..from + hidden]);
                }
            }
        }
        let swap = |s: &[f64]| {
            let mut out = vec![0.0; s.len()];
            for d in 0..dirs {
                for bi in 0..batch {
                    let (from, to) = ((d * batch + bi) * hidden, (bi * dirs + d) * hidden);
                    out[to..to + hidden].copy_from_slice(&s[from..from + hidden]);
                }
            }
            out
        };
        (
            tensor(ty, &[batch, seq, dirs, hidden]),
            tensor(swap(&yh), &[batch, dirs, hidden]),
            tensor(swap(&yc), &[batch, dirs, hidden]),
        )
    } else {
        (
            tensor(y, &[seq, dirs, batch, hidden]),
            tensor(yh, &[dirs, batch, hidden]),
            tensor(yc, &[dirs, batch, hidden]),
        )
    };
    let mut out = vec![y.at(cx)?, yh.at(cx)?];
    if kind == Kind::Lstm {
        out.push(yc.at(cx)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_close, flat, G};
    use crate::ir::Attr;

    #[test]
    fn rnn_by_hand() {
        // hidden 1, input 1: h1 = tanh(0.5 · 1 + 0 + 0.1) , h2 = tanh(0.5 · 2 + 2 · h1 + 0.1)
        let mut g = G::new();
        g.input("x", &[2, 1, 1], vec![1.0, 2.0])
            .init("w", &[1, 1, 1], vec![0.5])
            .init("r", &[1, 1, 1], vec![2.0])
            .init("b", &[1, 2], vec![0.25, -0.15])
            .node(
                "RNN",
                &["x", "w", "r", "b"],
                &["y", "yh"],
                vec![("hidden_size", Attr::Int(1))],
            );
        let out = g.run(&["y", "yh"]).unwrap();
        // the biases are stored as f32
        let b = f64::from(0.25f32) + f64::from(-0.15f32);
        let h1 = (0.5f64 + b).tanh();
        let h2 = (1.0 + 2.0 * h1 + b).tanh();
        assert_close(&flat(&out[0]), &[h1, h2]);
        assert_close(&flat(&out[1]), &[h2]);
    }

    #[test]
    fn lstm_one_step_by_hand() {
        // all weights 0 but the input's: i = o = f = σ(x), c̃ = tanh(x), c = i c̃, h = o tanh(c)
        let mut g = G::new();
        g.input("x", &[1, 1, 1], vec![0.7])
            .init("w", &[1, 4, 1], vec![1.0; 4])
            .init("r", &[1, 4, 1], vec![0.0; 4])
            .node(
                "LSTM",
                &["x", "w", "r"],
                &["y", "yh", "yc"],
                vec![("hidden_size", Attr::Int(1))],
            );
        let out = g.run(&["y", "yh", "yc"]).unwrap();
        let s = 1.0 / (1.0 + (-0.7f64).exp());
        let c = s * 0.7f64.tanh();
        assert_close(&flat(&out[2]), &[c]);
        assert_close(&flat(&out[1]), &[s * c.tanh()]);
    }

    #[test]
    fn sequence_lens_zero_the_steps_past_the_end() {
        let mut g = G::new();
        g.input("x", &[3, 2, 1], vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
            .init("w", &[2, 1, 1], vec![1.0, 1.0])
            .init("r", &[2, 1, 1], vec![0.0, 0.0])
            .init_i64("lens", vec![3, 1])
            .node(
                "RNN",
                &["x", "w", "r", "", "lens"],
                &["y", "yh"],
                vec![("direction", Attr::String(b"bidirectional".to_vec()))],
            );
        let out = g.run(&["y", "yh"]).unwrap();
        let t = 1f64.tanh();
        // [seq, dirs, batch, hidden]: batch 1 has one step
        assert_close(
            &flat(&out[0]),
            &[t, t, t, t, t, 0.0, t, 0.0, t, 0.0, t, 0.0],
        );
        assert_close(&flat(&out[1]), &[t, t, t, t]);
    }
}
