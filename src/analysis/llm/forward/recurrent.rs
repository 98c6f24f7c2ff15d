//! The recurrent and convolutional token mixers on the tape (Mamba-2, Gated DeltaNet, LFM2's
//! short convolution, and mixers run side by side). Their scans are not modelled yet: the
//! projections into and out of each mixer are (their weights, their LoRA adapters, the inputs
//! they keep), the kernel between them is recorded by [`Run::unmodelled`], so the saved bytes
//! are a lower bound and say so.

use super::super::layers::Mixer;
use super::super::tape::X;
use super::{Role, Run};

impl Run<'_> {
    /// A token mixer other than softmax attention: its linear layers, and a record of the
    /// kernel the tape does not model.
    pub(super) fn recurrent_mixer(
        &mut self,
        xn: X,
        m: &Mixer,
        layer: usize,
        cs: Option<(X, X)>,
    ) -> X {
        let h = self.a.hidden;
        let tok = self.tokens;
        // (name, into the kernel, out of it)
        let (proj_in, proj_out): (Vec<(&str, u64)>, (&str, u64)) = match m {
            Mixer::Mamba2(s) => (
                vec![("in_proj", s.inner + s.conv_dim() + s.heads)],
                ("out_proj", s.inner),
            ),
            Mixer::ShortConv(s) => (vec![("in_proj", 3 * s.width)], ("out_proj", s.width)),
            Mixer::GatedDeltaNet(d) => {
                let (kd, vd) = (
                    d.key_heads * d.key_head_dim,
                    d.value_heads * d.value_head_dim,
                );
                let ins = if d.split_in_proj {
                    vec![
                        ("in_proj_qkv", 2 * kd + vd),
                        ("in_proj_z", vd),
                        ("in_proj_b", d.value_heads),
                        ("in_proj_a", d.value_heads),
                    ]
                } else {
                    vec![
                        ("in_proj_qkvz", 2 * kd + 2 * vd),
                        ("in_proj_ba", 2 * d.value_heads),
                    ]
                };
                (ins, ("out_proj", vd))
            }
            Mixer::Parallel { parts } => {
                let mut out: Option<X> = None;
                for p in parts {
                    let o = match p {
                        Mixer::Attention(at) => self.softmax_attention(xn, at, layer, cs),
                        other => self.recurrent_mixer(xn, other, layer, cs),
                    };
                    out = Some(match out {
                        Some(prev) => self.t.plain(&[prev, o], o.numel),
                        None => o,
                    });
                }
                return out.unwrap_or(xn);
            }
            Mixer::Attention(at) => return self.softmax_attention(xn, at, layer, cs),
            Mixer::Mla(_) | Mixer::None => return self.unmodelled(xn, m),
        };
        let mut ins = Vec::new();
        for (name, out) in proj_in {
            ins.push(self.linear(xn, name, Role::Other, h, out));
        }
        let kernel = self.unmodelled(ins.first().copied().unwrap_or(xn), m);
        let y = self.t.plain(&[kernel], tok.saturating_mul(proj_out.1));
        self.linear(y, proj_out.0, Role::Other, proj_out.1, h)
    }
}
