//! The recurrent and convolutional token mixers on the tape (Mamba-2, Gated DeltaNet, LFM2's
//! short convolution, and mixers run side by side). LFM2's short convolution is modelled whole.
//! The Mamba-2 and Gated DeltaNet scans are not yet: the projections into and out of each mixer
//! are (their weights, their LoRA adapters, the inputs they keep), the kernel between them is
//! recorded by [`Run::unmodelled`], so the saved bytes are a lower bound and say so. Their
//! measured closed forms wait in `tools/llm/measure_mixers.py` (`testdata/llm/*/mixers.json`).

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
            Mixer::ShortConv(s) => return self.short_conv(xn, s.width, s.kernel),
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

    /// LFM2's gated short convolution (`Lfm2ShortConv.slow_forward`): `in_proj` to B, C, x;
    /// `B * x` (both chunks kept: one storage, the projection's output), a depthwise causal
    /// convolution of `kernel` taps over it (its input and its [B, d, S + K - 1] output kept),
    /// `C * conv` into `out_proj`. Measured exact in every setting
    /// (`tools/llm/measure_mixers.py`): 4·B·d·(7S + K - 1) bytes in fp32, half in bf16 and under
    /// autocast, 4·B·d·(5S + K - 1) frozen with an input that needs a gradient, nothing under
    /// checkpointing (the block keeps its input) or frozen without one.
    fn short_conv(&mut self, xn: X, width: u64, kernel: u64) -> X {
        let h = self.a.hidden;
        let tok = self.tokens;
        let bcx = self.linear(xn, "in_proj", Role::Other, h, width.saturating_mul(3));
        if bcx.grad {
            self.t.save(bcx);
            let bx = self.t.new_act(tok.saturating_mul(width), bcx.dtype, true);
            self.t.save(bx);
            let padded = self
                .s
                .batch
                .saturating_mul(width)
                .saturating_mul(self.n.saturating_add(kernel.saturating_sub(1)));
            let conv = self.t.new_act(padded, bcx.dtype, true);
            self.t.save(conv);
        }
        let y = self
            .t
            .new_act(tok.saturating_mul(width), bcx.dtype, bcx.grad);
        self.linear(y, "out_proj", Role::Other, width, h)
    }
}
