//! The shared layer model. Every block of every family is a *token mixer* (attention in one of
//! its variants, multi-head latent attention, a linear-attention or state-space recurrence, a
//! short convolution) followed by a *channel mixer* (an MLP, a mixture of experts, or nothing).
//! A family maps its `config.json` onto a list of [`Block`]s; the cache, the serving workspace,
//! the decode MACs and the training tape read the blocks, not the family.

/// One block: what mixes tokens, then what mixes channels.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Block {
    pub mixer: Mixer,
    pub channel: Channel,
}

/// What mixes information across positions.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Mixer {
    /// Softmax attention over cached keys and values (MHA, GQA, MQA; full, sliding or chunked).
    Attention(Attention),
    /// Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): low-rank q and kv projections.
    Mla(Mla),
    /// Gated DeltaNet linear attention (Qwen3-Next): a recurrent state per head, a short
    /// convolution over q, k and v.
    GatedDeltaNet(DeltaNet),
    /// Mamba-2's selective state space (Mamba-2, Granite 4, Falcon-H1, Nemotron-H).
    Mamba2(Mamba2),
    /// A gated short convolution (LFM2).
    ShortConv(ShortConv),
    /// Mixers run side by side on the same normed input, their outputs summed (Falcon-H1's
    /// Mamba-2 and attention in every layer); one cache layer holds all their states.
    Parallel { parts: Vec<Mixer> },
    /// No token mixer: the block is its channel mixer alone (Nemotron-H's MLP and MoE blocks);
    /// it caches nothing.
    None,
}

/// Softmax attention.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Attention {
    pub heads: u64,
    pub kv_heads: u64,
    /// Query and key width per head.
    pub head_dim: u64,
    /// Value width per head (most families: `head_dim`).
    pub v_head_dim: u64,
    pub window: Window,
    /// Rotary positions; `false` is a NoPE layer (SmolLM3, Llama 4's global layers).
    pub rope: bool,
    /// Learned per-head sink logits in the softmax (gpt-oss).
    pub sinks: bool,
    /// A sigmoid gate on the attention output, from a q projection twice as wide (Qwen3-Next).
    pub output_gate: bool,
}

impl Attention {
    pub fn q_dim(&self) -> u64 {
        self.heads * self.head_dim
    }
    pub fn kv_dim(&self) -> u64 {
        self.kv_heads * self.head_dim
    }
    /// Keys and values of one token, in elements.
    pub fn kv_elems_per_token(&self) -> u64 {
        self.kv_heads * (self.head_dim + self.v_head_dim)
    }
}

/// Which positions a query sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "type", content = "tokens")]
pub enum Window {
    Full,
    /// The last `w` positions (Mistral, Gemma 2/3's local layers, gpt-oss).
    Sliding(u64),
    /// Positions of the same `w`-token chunk (Llama 4's local layers).
    Chunked(u64),
}

impl Window {
    pub fn tokens(self) -> Option<u64> {
        match self {
            Window::Full => None,
            Window::Sliding(w) | Window::Chunked(w) => Some(w),
        }
    }
}

/// Multi-head latent attention.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Mla {
    pub heads: u64,
    /// The query's low rank (`None`: a plain `q_proj`, DeepSeek-V2-Lite).
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

impl Mla {
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }
}

/// Gated DeltaNet.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct DeltaNet {
    pub key_heads: u64,
    pub value_heads: u64,
    pub key_head_dim: u64,
    pub value_head_dim: u64,
    pub conv_kernel: u64,
    /// Separate `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a` (Qwen3.5) where Qwen3-Next
    /// fuses `in_proj_qkvz` and `in_proj_ba`: the same weights in four linear layers (four LoRA
    /// targets, four autocast copies of the input).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub split_in_proj: bool,
}

/// Mamba-2.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Mamba2 {
    /// The inner width x and z have (`heads × head_dim` in every released config; Falcon-H1's
    /// `mamba_d_ssm`).
    pub inner: u64,
    pub heads: u64,
    pub head_dim: u64,
    pub state_size: u64,
    pub groups: u64,
    pub conv_kernel: u64,
}

impl Mamba2 {
    /// Channels the causal convolution runs over: x, B and C.
    pub fn conv_dim(&self) -> u64 {
        self.inner + 2 * self.groups * self.state_size
    }
}

/// LFM2's gated short convolution over the hidden width.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ShortConv {
    pub width: u64,
    /// The convolution's length (`conv_L_cache`).
    pub kernel: u64,
}

/// What mixes channels within a position.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Channel {
    /// A dense MLP of this width (gated or not, as the family's `gated` says).
    Mlp { intermediate: u64 },
    /// The family's mixture of experts ([`super::arch::Moe`]).
    Moe,
    /// No channel mixer (Mamba-2's blocks are the mixer alone).
    None,
}

crate::named_enum! {
    /// What a cache entry holds, for the breakdown.
    pub enum CacheKind {
        /// Keys and values of full-attention layers: grow with the context.
        Attention = "attention",
        /// Keys and values of sliding-window layers: at most the window in steady decoding.
        Sliding = "sliding",
        /// Keys and values of chunked-attention layers.
        Chunked = "chunked",
        /// MLA's cached keys and values.
        Latent = "mla",
        /// Gated DeltaNet's recurrent and convolution states: fixed per sequence.
        LinearAttention = "linear_attention",
        /// Mamba-2's SSM and convolution states: fixed per sequence.
        Ssm = "ssm",
        /// A short convolution's state: fixed per sequence.
        Conv = "conv",
        /// Keys and values and a Mamba-2 state in one layer (Falcon-H1).
        Hybrid = "hybrid",
    }
}

/// One layer's cache for a batch: after the prefill, in steady decoding, and how decoding's
/// splits into what grows with the context and what does not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LayerCache {
    pub layer: u64,
    pub kind: CacheKind,
    /// Bytes after a prefill of `seq` tokens.
    pub bytes: u64,
    /// Bytes in steady decoding at `seq` tokens.
    pub decode_bytes: u64,
    /// Bytes one more token of one sequence adds at this context.
    pub bytes_per_token: u64,
    /// Bytes of the batch's decoding cache that do not grow with the context.
    pub fixed_bytes: u64,
}

/// The element sizes a cache is kept in: `kv` for attention keys and values (the weights'
/// dtype or `--kv-dtype`), `state` for recurrent states where the reference implementation
/// keeps them in their own dtype (else the weights').
#[derive(Clone, Copy, Debug)]
pub struct CacheDtypes {
    pub kv: u64,
    pub state: u64,
}

impl Mixer {
    /// What this layer caches for `batch` sequences at `seq` tokens, as Hugging Face's cache
    /// classes hold it (transformers 5). `None` on overflow.
    pub fn cache(&self, layer: u64, batch: u64, seq: u64, e: CacheDtypes) -> Option<LayerCache> {
        let mut c = LayerCache {
            layer,
            kind: CacheKind::Attention,
            bytes: 0,
            decode_bytes: 0,
            bytes_per_token: 0,
            fixed_bytes: 0,
        };
        match self {
            Mixer::Attention(a) => {
                let per_token = a.kv_elems_per_token().checked_mul(e.kv)?;
                let full = batch.checked_mul(seq)?.checked_mul(per_token)?;
                c.bytes = full;
                match a.window {
                    Window::Full => {
                        c.decode_bytes = full;
                        c.bytes_per_token = per_token;
                    }
                    Window::Sliding(w) | Window::Chunked(w) => {
                        c.kind = match a.window {
                            Window::Chunked(_) => CacheKind::Chunked,
                            _ => CacheKind::Sliding,
                        };
                        // DynamicSlidingWindowLayer: the window, and an int64 scalar
                        c.bytes = c.bytes.checked_add(8)?;
                        let kept = batch.checked_mul(seq.min(w))?.checked_mul(per_token)?;
                        c.decode_bytes = kept.checked_add(8)?;
                        if seq < w {
                            // still filling its window: it grows with the context
                            c.bytes_per_token = per_token;
                            c.fixed_bytes = 8;
                        } else {
                            c.fixed_bytes = kept.checked_add(8)?;
                        }
                    }
                }
            }
            Mixer::Mla(m) => {
                // transformers 5 caches the compressed latent (after kv_a_layernorm) and the
                // shared rotary key, one "head" each, before kv_b_proj expands them
                // (DeepseekV3Attention.forward: cache.update(kv_nope, k_rot)); vLLM's MLA
                // backends cache the same kv_lora_rank + qk_rope_head_dim per token
                c.kind = CacheKind::Latent;
                let per_token = (m.kv_lora_rank + m.qk_rope_head_dim).checked_mul(e.kv)?;
                c.bytes = batch.checked_mul(seq)?.checked_mul(per_token)?;
                c.decode_bytes = c.bytes;
                c.bytes_per_token = per_token;
            }
            Mixer::GatedDeltaNet(d) => {
                c.kind = CacheKind::LinearAttention;
                let conv = (2 * d.key_heads * d.key_head_dim + d.value_heads * d.value_head_dim)
                    .checked_mul(d.conv_kernel)?
                    .checked_mul(e.kv)?;
                let state =
                    (d.value_heads * d.key_head_dim * d.value_head_dim).checked_mul(e.state)?;
                c.fixed_bytes = batch.checked_mul(conv.checked_add(state)?)?;
                c.bytes = c.fixed_bytes;
                c.decode_bytes = c.fixed_bytes;
            }
            Mixer::Mamba2(m) => {
                c.kind = CacheKind::Ssm;
                let conv = m.conv_dim().checked_mul(m.conv_kernel)?.checked_mul(e.kv)?;
                let state = (m.heads * m.head_dim * m.state_size).checked_mul(e.state)?;
                c.fixed_bytes = batch.checked_mul(conv.checked_add(state)?)?;
                c.bytes = c.fixed_bytes;
                c.decode_bytes = c.fixed_bytes;
            }
            Mixer::ShortConv(s) => {
                c.kind = CacheKind::Conv;
                c.fixed_bytes =
                    batch.checked_mul(s.width.checked_mul(s.kernel)?.checked_mul(e.kv)?)?;
                c.bytes = c.fixed_bytes;
                c.decode_bytes = c.fixed_bytes;
            }
            Mixer::Parallel { parts } => {
                c.kind = CacheKind::Hybrid;
                for p in parts {
                    let l = p.cache(layer, batch, seq, e)?;
                    c.bytes = c.bytes.checked_add(l.bytes)?;
                    c.decode_bytes = c.decode_bytes.checked_add(l.decode_bytes)?;
                    c.bytes_per_token = c.bytes_per_token.checked_add(l.bytes_per_token)?;
                    c.fixed_bytes = c.fixed_bytes.checked_add(l.fixed_bytes)?;
                }
            }
            // transformers' DummyLayer: nothing (the caller leaves such blocks out)
            Mixer::None => {}
        }
        Some(c)
    }

    /// The attention, when this mixer is softmax attention over per-head keys and values.
    pub fn attention(&self) -> Option<&Attention> {
        match self {
            Mixer::Attention(a) => Some(a),
            Mixer::Parallel { parts } => parts.iter().find_map(Mixer::attention),
            _ => None,
        }
    }

    /// Whether this block has a cache layer (every mixer but [`Mixer::None`]).
    pub fn caches(&self) -> bool {
        !matches!(self, Mixer::None)
    }

    /// MACs one decoded token spends in this mixer beyond its weights, at context `seq`:
    /// q·k and p·v over the positions it sees.
    pub fn context_macs(&self, seq: u64) -> u64 {
        match self {
            Mixer::Attention(a) => {
                let seen = a.window.tokens().map_or(seq, |w| seq.min(w));
                (a.heads * (a.head_dim + a.v_head_dim)).saturating_mul(seen)
            }
            Mixer::Mla(m) => (m.heads * (m.qk_head_dim() + m.v_head_dim)).saturating_mul(seq),
            // a recurrence: a fixed state update per token
            Mixer::GatedDeltaNet(d) => 2 * d.value_heads * d.key_head_dim * d.value_head_dim,
            Mixer::Mamba2(m) => 2 * m.heads * m.head_dim * m.state_size,
            Mixer::ShortConv(s) => s.width * s.kernel,
            Mixer::Parallel { parts } => parts
                .iter()
                .map(|p| p.context_macs(seq))
                .fold(0u64, u64::saturating_add),
            Mixer::None => 0,
        }
    }

    /// Words for the tables.
    pub fn describe(&self) -> String {
        match self {
            Mixer::Attention(a) => {
                let mut s = match a.window {
                    Window::Full => "attention".to_string(),
                    Window::Sliding(w) => format!("sliding attention ({w})"),
                    Window::Chunked(w) => format!("chunked attention ({w})"),
                };
                if !a.rope {
                    s.push_str(", NoPE");
                }
                s
            }
            Mixer::Mla(_) => "multi-head latent attention".into(),
            Mixer::GatedDeltaNet(_) => "Gated DeltaNet".into(),
            Mixer::Mamba2(_) => "Mamba-2".into(),
            Mixer::ShortConv(_) => "short convolution".into(),
            Mixer::Parallel { parts } => parts
                .iter()
                .map(Mixer::describe)
                .collect::<Vec<_>>()
                .join(" + "),
            Mixer::None => "no token mixer".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attn(window: Window) -> Mixer {
        Mixer::Attention(Attention {
            heads: 4,
            kv_heads: 2,
            head_dim: 8,
            v_head_dim: 8,
            window,
            rope: true,
            sinks: false,
            output_gate: false,
        })
    }

    const FP32: CacheDtypes = CacheDtypes { kv: 4, state: 4 };

    #[test]
    fn full_attention_grows_and_sliding_keeps_its_window() {
        // llama fixture: 2·kv_heads·head_dim·4 B = 128 B per token and layer
        let full = attn(Window::Full).cache(0, 2, 24, FP32).unwrap();
        assert_eq!(
            (full.bytes, full.decode_bytes, full.bytes_per_token),
            (6144, 6144, 128)
        );
        // mistral fixture: the prefill keeps all 24 tokens (+ the int64 counter), decoding 8
        let s = attn(Window::Sliding(8)).cache(0, 2, 24, FP32).unwrap();
        assert_eq!(
            (s.bytes, s.decode_bytes, s.bytes_per_token, s.fixed_bytes),
            (6152, 2056, 0, 2056)
        );
        assert_eq!(s.kind, CacheKind::Sliding);
    }

    #[test]
    fn recurrent_states_do_not_grow_with_the_context() {
        let m = Mixer::Mamba2(Mamba2 {
            inner: 64,
            heads: 4,
            head_dim: 16,
            state_size: 8,
            groups: 1,
            conv_kernel: 4,
        });
        let a = m.cache(0, 1, 100, FP32).unwrap();
        let b = m.cache(0, 1, 10_000, FP32).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.bytes_per_token, 0);
        // conv (64 + 16) × 4 + ssm 4 × 16 × 8, fp32
        assert_eq!(a.fixed_bytes, (80 * 4 + 512) * 4);
    }
}
