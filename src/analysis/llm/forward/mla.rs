//! Multi-head latent attention on the tape (DeepSeek-V2/V3, Kimi-K2), as
//! `DeepseekV3Attention.forward` runs it in training: the query through `q_a_proj`,
//! `q_a_layernorm` and `q_b_proj` (or one `q_proj`), the latent through `kv_a_proj_with_mqa` and
//! `kv_a_layernorm`, rotary positions on the rope slices, `kv_b_proj` expanding the latent into
//! per-head keys and values, the kernel, `o_proj`.

use super::super::layers::Mla;
use super::{Attn, Role, Run};
use crate::analysis::llm::tape::X;
use crate::ir::DType;

impl Run<'_> {
    pub(super) fn mla(&mut self, xn: X, m: &Mla, cs: Option<(X, X)>) -> X {
        let a = self.a;
        let (h, tok, b, n) = (a.hidden, self.tokens, self.s.batch, self.n);
        let heads = m.heads;
        let qk = m.qk_head_dim();
        let rope = m.qk_rope_head_dim;
        let q = match m.q_lora_rank {
            None => self.linear(xn, "q_proj", Role::Q, h, heads * qk),
            Some(r) => {
                let qa = self.linear(xn, "q_a_proj", Role::Other, h, r);
                let qa = self.norm(qa, r);
                self.linear(qa, "q_b_proj", Role::Q, r, heads * qk)
            }
        };
        let latent = m.kv_lora_rank + rope;
        let ckv = self.linear(xn, "kv_a_proj_with_mqa", Role::Other, h, latent);
        // kv_nope is a slice of the projection: the norm's pow keeps the whole of it
        let kv_nope = self.t.view(ckv, tok.saturating_mul(m.kv_lora_rank));
        let kv = self.norm(kv_nope, m.kv_lora_rank);
        let q_rot = self.t.view(q, tok.saturating_mul(heads * rope));
        let k_rot = self.t.view(ckv, tok.saturating_mul(rope));
        let (q_rot, k_rot) = match cs {
            Some(cs) => (self.mla_rope(q_rot, cs), self.mla_rope(k_rot, cs)),
            None => (q_rot, k_rot),
        };
        // cat(q_pass, q_rot): a contiguous [B, h, S, qk]
        let q_numel = tok.saturating_mul(heads * qk);
        let query = self.t.plain(&[q, q_rot], q_numel);
        let kvb = self.linear(
            kv,
            "kv_b_proj",
            Role::V,
            m.kv_lora_rank,
            heads * (m.qk_nope_head_dim + m.v_head_dim),
        );
        // key_states = new_empty + copy_ of k_nope and the expanded k_rot
        let key = self.t.plain(&[kvb, k_rot], q_numel);
        let v_numel = tok.saturating_mul(heads * m.v_head_dim);
        let value = self.t.view(kvb, v_numel);
        let probs = b.saturating_mul(heads).saturating_mul(n).saturating_mul(n);
        let same_dims = qk == m.v_head_dim;
        let o = match self.s.attn {
            Attn::Eager => {
                // q (from cat) and k (new_empty) are contiguous [B, h, S, d]: bmm keeps them
                // as they are; v is a slice of kv_b_proj's output, which bmm copies
                let qi = self.t.view(query, q_numel);
                let s = self.t.matmul(qi, key, probs);
                let s = self.t.plain(&[s], probs); // × scaling
                let s = self.t.plain(&[s], probs); // + mask
                let p = self.t.softmax(s, DType::F32);
                let p = self.t.to(p, query.dtype);
                let p = self.t.dropout(p, a.drop.attn);
                let v = self.t.plain(&[value], v_numel);
                self.t.matmul(p, v, v_numel)
            }
            Attn::Sdpa | Attn::Flash if same_dims && (a.drop.attn <= 0.0 || self.s.cuda) => {
                let mask = self.s.padded.then(|| {
                    let dt = query.dtype;
                    self.t
                        .new_act(b.saturating_mul(n).saturating_mul(n), dt, false)
                });
                self.t.sdpa(
                    query,
                    key,
                    value,
                    mask,
                    v_numel,
                    b.saturating_mul(heads * n),
                )
            }
            // q·k and v head widths differ: no fused CPU kernel takes them, PyTorch runs its
            // math path (measured: sdpa == eager in fp32), upcasting half inputs to fp32
            Attn::Sdpa | Attn::Flash => self.mla_sdpa_math(query, key, value, probs),
        };
        // transpose(1, 2).contiguous(): a copy
        let o = self.t.plain(&[o], v_numel);
        self.linear(o, "o_proj", Role::O, heads * m.v_head_dim, h)
    }

    /// Rotary positions on a rope slice (`numel` elements of `x`): products with the tables
    /// (which keep the tables), differences, sums and a cat, interleaved or not.
    fn mla_rope(&mut self, x: X, cs: (X, X)) -> X {
        let half = self.t.view(x, x.numel / 2);
        let c1 = self.t.mul(half, cs.0);
        let s1 = self.t.mul(half, cs.1);
        let a = self.t.plain(&[c1, s1], half.numel);
        let c2 = self.t.mul(half, cs.0);
        let s2 = self.t.mul(half, cs.1);
        let b = self.t.plain(&[c2, s2], half.numel);
        self.t.plain(&[a, b], x.numel)
    }

    /// PyTorch's math SDPA (`_scaled_dot_product_attention_math`) without dropout: half inputs
    /// upcast to fp32, `q·√s` and `kᵀ·√s` kept for each other's gradient, the safe-softmax
    /// probabilities for theirs and for v's, and v (fp32, contiguous) for theirs. Returns the
    /// output [B, h, S, v] in q's lowered dtype.
    fn mla_sdpa_math(&mut self, q: X, k: X, v: X, probs: u64) -> X {
        let (q, k, v) = (self.t.lower(q), self.t.lower(k), self.t.lower(v));
        let scores = q.grad || k.grad;
        for (numel, keep) in [
            (q.numel, k.grad),
            (k.numel, q.grad),
            (probs, scores || v.grad),
            (v.numel, scores),
        ] {
            if keep {
                let t = self.t.new_act(numel, DType::F32, false);
                self.t.save(t);
            }
        }
        self.t.new_act(v.numel, q.dtype, scores || v.grad)
    }
}
