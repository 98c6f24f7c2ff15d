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
    /// The scan's chunk length (`chunk_size`; `mamba_chunk_size` in Granite 4 and Falcon-H1):
    /// the training kernel pads the sequence to a multiple of it.
    pub chunk: u64,
    /// Falcon-H1's mixer: its input scaled first (`ssm_in_multiplier`, a copy) and the
    /// projection multiplied by `mup_vector`.
    #[serde(skip)]
    pub falcon: bool,
    /// Whether the training tape knows what the scan keeps (Falcon-H1 without its gated RMSNorm
    /// before the gate is not measured).
    #[serde(skip)]
    pub tape: bool,
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

impl LayerCache {
    fn empty(layer: u64, kind: CacheKind) -> LayerCache {
        LayerCache {
            layer,
            kind,
            bytes: 0,
            decode_bytes: 0,
            bytes_per_token: 0,
            fixed_bytes: 0,
        }
    }
}

/// What one layer stores, before any runtime's rounding: keys and values per token, or a fixed
/// state per sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stored {
    /// Keys and values (MLA: the latent and the rotary key) of `per_token` bytes per token,
    /// over the positions `window` lets a query see.
    Tokens {
        kind: CacheKind,
        per_token: u64,
        window: Window,
    },
    /// A causal convolution over `conv_channels` with a `kernel`-wide window, and a recurrent
    /// state of `state` elements, per sequence.
    State {
        kind: CacheKind,
        conv_channels: u64,
        kernel: u64,
        state: u64,
    },
}

impl Stored {
    /// One sequence's state in bytes, keeping `kernel - columns_less` convolution columns.
    fn state_bytes(self, columns_less: u64, conv: u64, ssm: u64) -> Option<u64> {
        match self {
            Stored::State {
                conv_channels,
                kernel,
                state,
                ..
            } => conv_channels
                .checked_mul(kernel.saturating_sub(columns_less))?
                .checked_mul(conv)?
                .checked_add(state.checked_mul(ssm)?),
            Stored::Tokens { .. } => Some(0),
        }
    }
}

crate::named_enum! {
    /// Whose allocation the cache is counted as (`--cache-layout`).
    pub enum CacheLayout {
        /// What transformers 5.24's cache classes hold: exact tokens, sliding layers their window.
        Hf = "hf",
        /// What vLLM 0.34 allocates: paged blocks of --block-size tokens, one padded page per sequence for recurrent states.
        Vllm = "vllm",
        /// What llama.cpp (0c1e57098) allocates: one unified cache of pad256(batch x seq) cells, f16 K/V, f32 states.
        LlamaCpp = "llama.cpp",
    }
}

/// vLLM's default block size since v0.34 (`CacheConfig.DEFAULT_BLOCK_SIZE`,
/// `vllm/config/cache.py:185`; 16 before).
pub const VLLM_BLOCK_SIZE: u64 = 64;
/// vLLM's prefill chunk: `max_num_batched_tokens` of the API server on an H100/H200
/// (`vllm/engine/arg_utils.py:3008-3043`).
pub const VLLM_PREFILL_CHUNK: u64 = 8192;
/// llama.cpp's default micro-batch (`n_ubatch`, `llama-context.cpp:3757`; `common.h:454`).
pub const LLAMA_CPP_UBATCH: u64 = 512;
/// llama.cpp rounds its cells to this (`GGML_PAD(n_ctx, 256)`, `llama-context.cpp:290`).
pub const LLAMA_CPP_PAD: u64 = 256;
/// llama.cpp's window for Llama 4's chunked layers, whatever the config says
/// (`src/models/llama4.cpp:13-19`).
pub const LLAMA_CPP_CHUNK: u64 = 8192;

/// A runtime's allocation rules, resolved for one model and batch ([`Runtime::plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// transformers 5's `DynamicCache`.
    Hf,
    /// vLLM's paged allocator.
    Vllm {
        /// Tokens per block of attention layers: `--block-size`, raised in hybrids so a
        /// recurrent state fits one attention page (`Platform._align_hybrid_block_size`,
        /// `vllm/platforms/interface.py:950-1149`).
        block: u64,
        /// The page every recurrent layer takes per sequence in a hybrid: `block` tokens of
        /// attention (`mamba_page_size_padded`, `:1130-1140`); `None`: its own state.
        state_page: Option<u64>,
        /// Element sizes of the convolution and recurrent states (`mamba_cache_dtype`,
        /// `mamba_ssm_cache_dtype`: the model's dtype, NemotronH's SSM fp32).
        conv: u64,
        ssm: u64,
    },
    /// llama.cpp's KV cache of `cells` cells (all sequences, unified) and f32 recurrent rows.
    LlamaCpp { cells: u64 },
}

fn cdiv(a: u64, b: u64) -> u64 {
    a.div_ceil(b.max(1))
}

fn pad(x: u64, n: u64) -> Option<u64> {
    cdiv(x, n).checked_mul(n.max(1))
}

impl Runtime {
    /// The rules of `layout` for these mixers at `batch` × `seq`: vLLM's block size (raised in
    /// hybrids) and state page, llama.cpp's cells. `kv`: key/value element size; `model`: the
    /// weights' (vLLM's state dtypes); `ssm_fp32`: the family keeps its SSM state in fp32 in
    /// vLLM (NemotronH). `None` on overflow.
    #[allow(clippy::too_many_arguments)]
    pub fn plan<'a>(
        layout: CacheLayout,
        mixers: impl Iterator<Item = &'a Mixer>,
        block_size: u64,
        batch: u64,
        seq: u64,
        kv: u64,
        model: u64,
        ssm_fp32: bool,
    ) -> Option<Runtime> {
        match layout {
            CacheLayout::Hf => Some(Runtime::Hf),
            CacheLayout::LlamaCpp => Some(Runtime::LlamaCpp {
                cells: pad(batch.checked_mul(seq)?, LLAMA_CPP_PAD)?,
            }),
            CacheLayout::Vllm => {
                let (conv, ssm) = (model, if ssm_fp32 { 4 } else { model });
                let (mut token, mut state, mut mla) = (0u64, 0u64, false);
                for m in mixers.flat_map(Mixer::leaves) {
                    match m.stored(kv)? {
                        Some(Stored::Tokens { per_token, .. }) => {
                            token = token.max(per_token);
                            mla |= matches!(m, Mixer::Mla(_));
                        }
                        Some(s @ Stored::State { .. }) => {
                            state = state.max(s.state_bytes(1, conv, ssm)?);
                        }
                        None => {}
                    }
                }
                let block = block_size.max(1);
                if token == 0 || state == 0 {
                    return Some(Runtime::Vllm {
                        block,
                        state_page: None,
                        conv,
                        ssm,
                    });
                }
                // the smallest kernel block of FlashAttention is 16; MLA hybrids use 128
                let k = block.max(if mla { 128 } else { 16 });
                let raised = cdiv(state, k.checked_mul(token)?).checked_mul(k)?;
                let block = block.max(raised);
                Some(Runtime::Vllm {
                    block,
                    state_page: Some(block.checked_mul(token)?),
                    conv,
                    ssm,
                })
            }
        }
    }

    /// One layer's allocation for what it stores. `None` on overflow.
    pub fn layer(
        &self,
        layer: u64,
        s: &Stored,
        batch: u64,
        seq: u64,
        e: CacheDtypes,
    ) -> Option<LayerCache> {
        let (kind, pt) = match *s {
            Stored::Tokens {
                kind, per_token, ..
            } => (kind, per_token),
            Stored::State { kind, .. } => (kind, 0),
        };
        let mut c = LayerCache::empty(layer, kind);
        let bs = batch.checked_mul(seq)?;
        match (*self, *s) {
            (Runtime::Hf, Stored::Tokens { window, .. }) => {
                let full = bs.checked_mul(pt)?;
                c.bytes = full;
                match window {
                    Window::Full => {
                        c.decode_bytes = full;
                        c.bytes_per_token = pt;
                    }
                    Window::Sliding(w) | Window::Chunked(w) => {
                        // DynamicSlidingWindowLayer: the window, and an int64 scalar
                        c.bytes = c.bytes.checked_add(8)?;
                        let kept = batch.checked_mul(seq.min(w))?.checked_mul(pt)?;
                        c.decode_bytes = kept.checked_add(8)?;
                        if seq < w {
                            // still filling its window: it grows with the context
                            c.bytes_per_token = pt;
                            c.fixed_bytes = 8;
                        } else {
                            c.fixed_bytes = kept.checked_add(8)?;
                        }
                    }
                }
                return Some(c);
            }
            (Runtime::Hf, st @ Stored::State { .. }) => {
                // transformers keeps the convolution's whole kernel window, in the cache dtype
                c.fixed_bytes = batch.checked_mul(st.state_bytes(0, e.kv, e.state)?)?;
                c.bytes = c.fixed_bytes;
                c.decode_bytes = c.fixed_bytes;
                return Some(c);
            }
            (Runtime::Vllm { block, .. }, Stored::Tokens { window, .. }) => {
                let page = block.checked_mul(pt)?;
                let all = cdiv(seq, block);
                let (prefill, decode, grows) = match window {
                    // chunked layers: vLLM turns its hybrid allocator off for chunked
                    // attention and promotes them to full attention (vllm/config/vllm.py:
                    // 2157-2176, kv_cache_planning.py:783-866)
                    Window::Full | Window::Chunked(_) => (all, all, true),
                    Window::Sliding(w) => {
                        // blocks wholly below the window are freed (SlidingWindowManager,
                        // single_type_kv_cache_manager.py:1186-1187): the query sees w - 1
                        // earlier tokens; a prefill chunk allocates all its slots first
                        let skipped = (seq + 1).saturating_sub(w);
                        let chunk = seq.min(VLLM_PREFILL_CHUNK);
                        let skipped_pre = (seq.saturating_sub(chunk) + 1).saturating_sub(w);
                        (
                            all.saturating_sub(skipped_pre / block),
                            all.saturating_sub(skipped / block),
                            skipped == 0,
                        )
                    }
                };
                c.bytes = batch.checked_mul(prefill)?.checked_mul(page)?;
                c.decode_bytes = batch.checked_mul(decode)?.checked_mul(page)?;
                if grows {
                    c.bytes_per_token = pt;
                }
            }
            (
                Runtime::Vllm {
                    state_page,
                    conv,
                    ssm,
                    ..
                },
                st @ Stored::State { .. },
            ) => {
                // one page per sequence: K - 1 convolution columns and the state
                // (mamba_utils.py:194-298), padded to the attention page in hybrids
                let own = st.state_bytes(1, conv, ssm)?;
                c.decode_bytes = batch.checked_mul(state_page.map_or(own, |p| p.max(own)))?;
                c.bytes = c.decode_bytes;
            }
            (Runtime::LlamaCpp { cells }, Stored::Tokens { window, .. }) => {
                let (kept, grows) = match window.tokens() {
                    None => (cells, true),
                    Some(w) => {
                        // llama_kv_cache_iswa (llama-kv-cache-iswa.cpp:73-74): the window of
                        // every sequence of the unified cache plus a micro-batch
                        let w = if matches!(window, Window::Chunked(_)) {
                            LLAMA_CPP_CHUNK
                        } else {
                            w
                        };
                        let cap = w.checked_mul(batch)?.checked_add(LLAMA_CPP_UBATCH)?;
                        (pad(cells.min(cap), LLAMA_CPP_PAD)?, bs < cap)
                    }
                };
                c.decode_bytes = kept.checked_mul(pt)?;
                c.bytes = c.decode_bytes;
                if grows {
                    c.bytes_per_token = pt;
                }
            }
            (Runtime::LlamaCpp { .. }, st @ Stored::State { .. }) => {
                // llama_memory_recurrent: f32 rows whatever the cache type
                // (llama-model.cpp:2670-2678), K - 1 convolution columns (n_embd_r)
                c.decode_bytes = batch.checked_mul(st.state_bytes(1, 4, 4)?)?;
                c.bytes = c.decode_bytes;
            }
        }
        // what the rounding adds beyond the tokens held is fixed at this context
        c.fixed_bytes = c
            .decode_bytes
            .saturating_sub(bs.saturating_mul(c.bytes_per_token));
        Some(c)
    }
}

impl Mixer {
    /// What this layer caches for `batch` sequences at `seq` tokens, as Hugging Face's cache
    /// classes hold it (transformers 5). `None` on overflow.
    pub fn cache(&self, layer: u64, batch: u64, seq: u64, e: CacheDtypes) -> Option<LayerCache> {
        self.cache_in(layer, batch, seq, e, &Runtime::Hf)
    }

    /// What this layer takes for `batch` sequences at `seq` tokens in a runtime's layout: one
    /// description of what the layer stores ([`Mixer::stored`]), the runtime's rules applied to
    /// it ([`Runtime::layer`]). `None` on overflow.
    pub fn cache_in(
        &self,
        layer: u64,
        batch: u64,
        seq: u64,
        e: CacheDtypes,
        rt: &Runtime,
    ) -> Option<LayerCache> {
        match self {
            Mixer::Parallel { parts } => {
                let mut c = LayerCache::empty(layer, CacheKind::Hybrid);
                for p in parts {
                    let l = p.cache_in(layer, batch, seq, e, rt)?;
                    c.bytes = c.bytes.checked_add(l.bytes)?;
                    c.decode_bytes = c.decode_bytes.checked_add(l.decode_bytes)?;
                    c.bytes_per_token = c.bytes_per_token.checked_add(l.bytes_per_token)?;
                    c.fixed_bytes = c.fixed_bytes.checked_add(l.fixed_bytes)?;
                }
                Some(c)
            }
            _ => match self.stored(e.kv)? {
                Some(s) => rt.layer(layer, &s, batch, seq, e),
                // transformers' DummyLayer: nothing (the caller leaves such blocks out)
                None => Some(LayerCache::empty(layer, CacheKind::Attention)),
            },
        }
    }

    /// What this mixer stores, whoever allocates it (`None` inside: nothing; [`Mixer::Parallel`]
    /// is its parts'). `kv` is the element size of keys and values. `None` on overflow.
    pub fn stored(&self, kv: u64) -> Option<Option<Stored>> {
        Some(Some(match self {
            Mixer::Attention(a) => Stored::Tokens {
                kind: match a.window {
                    Window::Full => CacheKind::Attention,
                    Window::Sliding(_) => CacheKind::Sliding,
                    Window::Chunked(_) => CacheKind::Chunked,
                },
                per_token: a.kv_elems_per_token().checked_mul(kv)?,
                window: a.window,
            },
            // transformers 5 caches the compressed latent (after kv_a_layernorm) and the
            // shared rotary key, one "head" each, before kv_b_proj expands them
            // (DeepseekV3Attention.forward: cache.update(kv_nope, k_rot)); vLLM's MLA backends
            // cache the same kv_lora_rank + qk_rope_head_dim per token, llama.cpp the same as K
            // only (V is a view of it)
            Mixer::Mla(m) => Stored::Tokens {
                kind: CacheKind::Latent,
                per_token: m
                    .kv_lora_rank
                    .checked_add(m.qk_rope_head_dim)?
                    .checked_mul(kv)?,
                window: Window::Full,
            },
            Mixer::GatedDeltaNet(d) => Stored::State {
                kind: CacheKind::LinearAttention,
                conv_channels: (2 * d.key_heads)
                    .checked_mul(d.key_head_dim)?
                    .checked_add(d.value_heads.checked_mul(d.value_head_dim)?)?,
                kernel: d.conv_kernel,
                state: d
                    .value_heads
                    .checked_mul(d.key_head_dim)?
                    .checked_mul(d.value_head_dim)?,
            },
            Mixer::Mamba2(m) => Stored::State {
                kind: CacheKind::Ssm,
                conv_channels: m.conv_dim(),
                kernel: m.conv_kernel,
                state: m.heads.checked_mul(m.head_dim)?.checked_mul(m.state_size)?,
            },
            Mixer::ShortConv(s) => Stored::State {
                kind: CacheKind::Conv,
                conv_channels: s.width,
                kernel: s.kernel,
                state: 0,
            },
            Mixer::Parallel { .. } | Mixer::None => return Some(None),
        }))
    }

    /// The mixers this one is made of (itself, or a parallel block's parts).
    pub fn leaves(&self) -> Vec<&Mixer> {
        match self {
            Mixer::Parallel { parts } => parts.iter().flat_map(Mixer::leaves).collect(),
            m => vec![m],
        }
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
            chunk: 256,
            falcon: false,
            tape: true,
        });
        let a = m.cache(0, 1, 100, FP32).unwrap();
        let b = m.cache(0, 1, 10_000, FP32).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.bytes_per_token, 0);
        // conv (64 + 16) × 4 + ssm 4 × 16 × 8, fp32
        assert_eq!(a.fixed_bytes, (80 * 4 + 512) * 4);
    }
}
