//! The recurrent and convolutional token mixers on the tape (Mamba-2, Gated DeltaNet, LFM2's
//! short convolution, and mixers run side by side). The projections into and out of each mixer
//! are linear layers as everywhere (their weights, their LoRA adapters, the inputs they keep);
//! what each kernel between them keeps is the closed form measured per layer by
//! `tools/llm/measure_mixers.py` (`testdata/llm/*/mixers.json`). A setting it was not measured in
//! (LoRA on an fp16 base or under fp16 autocast, an adapter on only some of Gated DeltaNet's
//! in-projections, a GGUF file's Mamba-2 without its chunk size) is recorded by
//! [`Run::unmodelled`]: the saved bytes are then a lower bound and say so.

use super::super::layers::{DeltaNet, Mamba2, Mixer};
use super::super::tape::X;
use super::{Role, Run};
use crate::ir::DType;

impl Run<'_> {
    /// A token mixer other than softmax attention (or several side by side).
    pub(super) fn recurrent_mixer(
        &mut self,
        xn: X,
        m: &Mixer,
        layer: usize,
        cs: Option<(X, X)>,
    ) -> X {
        match m {
            Mixer::Mamba2(s) => self.mamba2(xn, s, m),
            Mixer::ShortConv(s) => self.short_conv(xn, s.width, s.kernel),
            Mixer::GatedDeltaNet(d) => self.delta_net(xn, d, m),
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
                out.unwrap_or(xn)
            }
            Mixer::Attention(at) => self.softmax_attention(xn, at, layer, cs),
            Mixer::Mla(_) | Mixer::None => self.unmodelled(xn, m),
        }
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

    /// What a scan kernel keeps for backward, as one storage of `bytes` (a measured closed form),
    /// or, where the setting was not measured (`None`), a record that the count misses it.
    fn keep_kernel(&mut self, bytes: Option<u64>, input: X, m: &Mixer) {
        match bytes {
            Some(0) => {}
            Some(b) => {
                let k = self.t.new_act(b, DType::U8, true);
                self.t.save(k);
            }
            None => {
                self.unmodelled(input, m);
            }
        }
    }

    /// Mamba-2's training forward as transformers runs it without the CUDA kernels
    /// (`torch_forward`: the chunked SSD scan of `chunk` tokens, the sequence padded to a
    /// multiple of it; the gated RMSNorm; Falcon-H1's scaled input). `in_proj` and `out_proj`
    /// are linear layers as everywhere (their inputs, their adapters); what the kernel between
    /// them keeps is a closed form measured per layer by `tools/llm/measure_mixers.py`
    /// (`testdata/llm/<family>/mixers.json`: every tensor named there, exact at 1,536 points):
    /// fp32, bf16 weights and bf16 autocast, the mixer trained or frozen (LoRA). LoRA on an fp16
    /// base or under fp16 autocast is not measured: recorded as unmodelled.
    fn mamba2(&mut self, xn: X, s: &Mamba2, m: &Mixer) -> X {
        let h = self.a.hidden;
        let tok = self.tokens;
        let (i, w) = (s.inner, s.inner + s.conv_dim() + s.heads);
        // Falcon-H1: x * ssm_in_multiplier, a copy the projection keeps
        let x = if s.falcon {
            self.t.plain(&[xn], xn.numel)
        } else {
            xn
        };
        let zx = self.linear(x, "in_proj", Role::Other, h, w);
        // inside a checkpointed block the kernel's tensors are made again in backward
        if zx.grad {
            let bytes = self.mamba2_kernel(s);
            self.keep_kernel(bytes, zx, m);
        }
        let y = self.t.new_act(tok.saturating_mul(i), zx.dtype, zx.grad);
        self.linear(y, "out_proj", Role::Other, i, h)
    }

    /// Bytes the Mamba-2 kernel keeps beyond the two projections' inputs (the measured layer
    /// total less `in_proj`'s input and `out_proj`'s input, which [`Self::linear`] keeps), or
    /// `None` where the setting was not measured. Symbols as `measure_mixers.py` names them.
    fn mamba2_kernel(&self, s: &Mamba2) -> Option<u64> {
        if !s.tape {
            return None;
        }
        let frozen = self.s.lora.is_some();
        let nm = self.s.numerics;
        let (b, sq) = (self.s.batch as i128, self.n as i128);
        let (d, i, hh, p, n, g, k, q) = (
            self.a.hidden as i128,
            s.inner as i128,
            s.heads as i128,
            s.head_dim as i128,
            s.state_size as i128,
            s.groups as i128,
            s.conv_kernel as i128,
            s.chunk.max(1) as i128,
        );
        let cd = i + 2 * g * n;
        let w = i + cd + hh;
        let t = (sq + q - 1) / q * q;
        let c = t / q;
        let iv = |x: bool| i128::from(x);
        // the scan: padded x, exp(segsum) L, G, decays, B chunks, C·states, decay_chunk, the
        // einsums' operand copies, the states and the padded output
        let scan = 3 * b * t * i
            + 3 * b * hh * t * q
            + 2 * b * hh * t
            + 5 * b * t * hh * n
            + 2 * b * t * hh * p
            + b * hh * (c + 1) * (c + 1)
            + b * hh * (c + 1) * p * n
            + b * c * hh * p * n;
        let masks = 2 * q * q + 2 * (c + 1) * (c + 1);
        // one chunk: C·states is a view of the new states; the x chunks one storage; at batch 1
        // the C chunks are shared too
        let one = iv(c == 1)
            * (4 * b * hh * p * n - 4 * b * t * hh * p - iv(b == 1) * 8 * b * t * hh * n);
        let fp32 = 4
            * (b * sq * d
                + b * sq * w
                + b * cd * (sq + k - 1)
                + b * sq * cd
                + 3 * b * sq * hh
                + 2 * hh
                + scan
                + 4 * b * sq * i
                + b * sq * g)
            + masks
            + one;
        let bf16 = 2 * b * sq * w
            + 8 * b * sq * i
            + 2 * b * cd * (sq + k - 1)
            + 12 * b * sq * hh
            + 8 * hh
            + 4 * (scan + 3 * b * sq * i + b * sq * g)
            + masks
            + one;
        let ac = 2 * b * cd * sq
            + 8 * b * sq * i
            + 2 * b * cd * (sq + k - 1)
            + 12 * b * sq * hh
            + 8 * hh
            + 4 * b * t * i
            + 4 * b * hh * t * q
            + 2 * b * hh * t * q
            + 8 * b * hh * t
            + 4 * b * t * hh * n
            + 2 * b * t * i
            + 6 * b * hh * (c + 1) * (c + 1)
            + 2 * (4 * b * t * hh * n
                + 2 * b * t * hh * p
                + b * hh * t * q
                + b * hh * (c + 1) * p * n
                + b * c * hh * p * n)
            + 4 * b * t * i
            + 4 * (3 * b * sq * i + b * sq * g)
            + masks
            + iv(c == 1) * 2 * b * hh * p * n
            + iv(s.falcon) * (4 * b * sq * w + 4 * b * sq * cd - 8 * b * sq * i);
        let total = match (nm.weights, nm.autocast, frozen) {
            (DType::F32, None, false) => fp32 - 4 * b * sq * d - 4 * b * sq * i,
            // frozen (LoRA): exp(A_log), D·pad(x) and the norm's normalized input are not kept
            (DType::F32, None, true) => {
                fp32 - 4 * b * sq * d - 4 * hh - 4 * b * t * i - 4 * b * sq * i - 4 * b * sq * i
            }
            (DType::BF16, None, false) => bf16,
            // LoRA on a bf16 base: exp(A_log), dt.float() of A*dt, D·pad(x) and the norm's
            // normalized input are not kept (the adapters' fp32 input copies are the linears')
            (DType::BF16, None, true) => {
                bf16 - 4 * hh - 4 * b * sq * hh - 4 * b * t * i - 4 * b * sq * i
            }
            (DType::F32, Some(DType::BF16), false) => ac,
            // LoRA under bf16 autocast: as on a bf16 base (Falcon-H1's dt stays fp32, kept by
            // x·dt); the adapters' bf16 input copies and outputs are the linears'
            (DType::F32, Some(DType::BF16), true) => {
                ac - 4 * hh - iv(!s.falcon) * 4 * b * sq * hh - 4 * b * t * i - 4 * b * sq * i
            }
            _ => return None,
        };
        u64::try_from(total).ok()
    }

    /// Gated DeltaNet's training forward as transformers runs it without the fla kernels
    /// (`torch_chunk_gated_delta_rule`, chunks of 64, the sequence padded to a multiple): the
    /// in-projections (two fused in Qwen3-Next, four in Qwen3.5) and `out_proj` are linear
    /// layers as everywhere; what the kernel between them keeps (the causal convolution, the
    /// l2-normed q and k, the gates, the chunked scan's matrices and states, the gated norm) is
    /// the closed form measured per layer by `tools/llm/measure_mixers.py`
    /// (`testdata/llm/<family>/mixers.json`, exact at every point, including sequences that are
    /// not a multiple of the chunk): fp32, bf16 weights and bf16 autocast, trained or frozen
    /// (LoRA). LoRA on an fp16 base or under fp16 autocast, and adapters on only some of the
    /// in-projections of a mixer whose input needs no gradient (the gates then need none and
    /// the scan keeps less; measured, no closed form yet), are recorded as unmodelled.
    fn delta_net(&mut self, xn: X, d: &DeltaNet, m: &Mixer) -> X {
        let h = self.a.hidden;
        let tok = self.tokens;
        let (kd, vd) = (
            d.key_heads * d.key_head_dim,
            d.value_heads * d.value_head_dim,
        );
        let ins: Vec<(&str, u64)> = if d.split_in_proj {
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
        let mut outs = Vec::new();
        for (name, out) in &ins {
            outs.push(self.linear(xn, name, Role::Other, h, *out));
        }
        let grads = outs.iter().filter(|x| x.grad).count();
        let grad = grads > 0;
        if grad {
            // measured: the input needs a gradient, or every in-projection trains (an adapter on
            // some only keeps less: `*_lora_in_proj_part` in measure_mixers.py, no closed form)
            let known = xn.grad || grads == outs.len();
            let bytes = self.delta_net_kernel(d).filter(|_| known);
            self.keep_kernel(bytes, xn, m);
        }
        let dtype = outs.first().map_or(xn.dtype, |x| x.dtype);
        let y = self.t.new_act(tok.saturating_mul(vd), dtype, grad);
        self.linear(y, "out_proj", Role::Other, vd, h)
    }

    /// Bytes the Gated DeltaNet kernel keeps beyond the projections' inputs (the measured layer
    /// total less the in-projections' input and `out_proj`'s input, which [`Self::linear`]
    /// keeps), or `None` where the setting was not measured. Symbols as `measure_mixers.py`
    /// names them.
    fn delta_net_kernel(&self, dn: &DeltaNet) -> Option<u64> {
        let frozen = self.s.lora.is_some();
        let nm = self.s.numerics;
        let (b, s) = (self.s.batch as i128, self.n as i128);
        let d = self.a.hidden as i128;
        let (hk, hv, dk, dv, k) = (
            dn.key_heads as i128,
            dn.value_heads as i128,
            dn.key_head_dim as i128,
            dn.value_head_dim as i128,
            dn.conv_kernel as i128,
        );
        let q: i128 = 64;
        let cd = 2 * hk * dk + hv * dv;
        let v = hv * dv;
        let t = (s + q - 1) / q * q;
        let c = t / q;
        let fused = !dn.split_in_proj;
        let iv = |x: bool| i128::from(x);
        let scan = 4 * b * hv * t * dk
            + 3 * b * hv * t * dv
            + b * hv * t
            + 5 * b * hv * t * q
            + 3 * b * hv * t
            + b * hv * c
            + c * b * hv * dk * dv;
        let fp32 = 4
            * (b * s * d
                + b * cd * s
                + b * cd * (s + k - 1)
                + 3 * b * s * hv
                + 2 * hv
                + if hk == hv {
                    b * cd * s
                } else {
                    2 * b * hv * s * dk
                }
                + 2 * b * hv * s
                + scan
                + iv(c > 1 && (s % q != 0 || b == 1)) * 2 * b * hv * t * dk
                + iv(s % q == 0 && !(b == 1 && c == 1)) * 4 * b * hv * t * dk
                + iv(s % q == 0 && c > 1 && b > 1) * 2 * (c - 1) * b * hv * q * dk
                + 4 * b * s * v
                + if fused && hk == hv {
                    b * s * (2 * hk * dk + 2 * v)
                } else {
                    b * s * v
                }
                + b * s * hv
                + b * s * v)
            + q * q;
        let bf16 = 2 * b * cd * s
            + 2 * b * cd * (s + k - 1)
            + 2 * b * s * hv
            + 8 * b * s * hv
            + 8 * hv
            + 8 * b * hv * s * dk
            + 8 * b * hv * s
            + 4 * (scan + iv(c > 1) * 2 * b * hv * t * dk)
            + 4 * b * s * v
            + 4 * b * s * hv
            + 2 * b * s * v
            + 4 * b * s * v
            + 4 * b * s * v
            + 2 * b * s * v
            + q * q;
        let ac = // the input's bf16 copies are the in-projections' own (one each)
            2 * b * cd * s
                + 2 * b * cd * (s + k - 1)
                + 2 * b * s * hv
                + 8 * b * s * hv
                + 8 * hv
                + 8 * b * hv * s * dk
                + 8 * b * hv * s
                + 4 * (3 * b * hv * t * dk + b * hv * t * dv + b * hv * t)
                + 8 * b * hv * t * q
                + 6 * b * hv * t * q
                + 4 * (3 * b * hv * t + b * hv * c)
                + 4 * (b * hv * t * dv + b * hv * t * dk)
                + 8 * b * hv * t * dk
                + 4 * c * b * hv * dk * dv
                + 2 * (2 * c - 1) * b * hv * q * dv
                + 6 * (c - 1) * b * hv * q * dk
                + 4 * (c - 1) * b * hv * dk * dv
                + 4 * b * s * v
                + 4 * b * s * hv
                + 12 * b * s * v
                + 2 * b * s * v
                + q * q;
        let total = match (nm.weights, nm.autocast, frozen) {
            (DType::F32, None, false) => fp32 - 4 * b * s * d - 4 * b * s * v,
            // frozen (LoRA): exp(A_log), the softplus output and the norm's normalized input
            // are not kept
            (DType::F32, None, true) => {
                fp32 - 4 * b * s * d - 4 * hv - 4 * b * s * hv - 4 * b * s * v - 4 * b * s * v
            }
            (DType::BF16, None, false) => bf16,
            // LoRA on a bf16 base: exp(A_log), the softplus output and the norm's normalized input
            // (bf16) are not kept (the adapters' fp32 input copies are the linears')
            (DType::BF16, None, true) => bf16 - 4 * hv - 4 * b * s * hv - 2 * b * s * v,
            (DType::F32, Some(DType::BF16), false) => ac,
            // LoRA under bf16 autocast: as on a bf16 base; the adapters' bf16 input copies and
            // outputs are the linears'
            (DType::F32, Some(DType::BF16), true) => ac - 4 * hv - 4 * b * s * hv - 2 * b * s * v,
            _ => return None,
        };
        u64::try_from(total).ok()
    }
}
