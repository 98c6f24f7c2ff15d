//! One training forward of each family, written op by op on a [`Tape`] as the Hugging Face
//! modeling code runs it (transformers 5), so that what autograd keeps falls out of the rules in
//! [`super::tape`]: frozen layers under LoRA, autocast, attention implementations and gradient
//! checkpointing change the ops' inputs, not the formulas.

use super::arch::{Act, Arch, Dispatch, Family, Head, Moe, Norm, NormPlace, QkNorm, Router};
use super::layers::{Attention, Channel, Mixer};
use super::tape::{SavedBytes, Tape, X};
use crate::ir::DType;
use std::collections::BTreeSet;

mod mla;
mod recurrent;

crate::named_enum! {
    /// Attention kernels, as `attn_implementation` names them.
    pub enum Attn {
        /// Matmul, softmax, matmul: keeps the S×S probabilities (fp32).
        Eager = "eager",
        /// `scaled_dot_product_attention` (flash / memory-efficient kernels): no S×S matrix.
        Sdpa = "sdpa",
        /// FlashAttention 2: saves what SDPA's flash kernel saves.
        Flash = "flash",
    }
}

/// Which linear layers get LoRA adapters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Targets {
    /// Module names (`q_proj`, `v_proj`, or the family's own: `c_attn`, `query_key_value`...).
    Named(Vec<String>),
    /// Every linear layer but the output head (peft's `all-linear`).
    AllLinear,
}

/// A LoRA adapter configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lora {
    pub rank: u64,
    pub targets: Targets,
}

/// The weights' dtype and autocast.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Numerics {
    /// Parameters (and so activations outside autocast).
    pub weights: DType,
    /// `torch.autocast`'s half type.
    pub autocast: Option<DType>,
}

/// One training forward's setting.
#[derive(Clone, Debug)]
pub struct Step {
    pub batch: u64,
    pub seq: u64,
    pub attn: Attn,
    pub numerics: Numerics,
    /// Gradient checkpointing of every block (as `gradient_checkpointing_enable()`).
    pub checkpoint: bool,
    pub lora: Option<Lora>,
    /// An attention mask is passed (padded batches).
    pub padded: bool,
    /// The input embeddings carry a gradient (image features from a vision encoder that
    /// trains or holds adapters, scattered into them).
    pub input_grad: bool,
    /// CUDA's kernels instead of the CPU's (measured): dropout keeps a bool mask, and SDPA
    /// with dropout stays on a fused kernel.
    pub cuda: bool,
}

/// What one linear layer is, whatever the family calls it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Q,
    K,
    V,
    Qkv,
    O,
    Gate,
    Up,
    GateUp,
    Down,
    Router,
    Other,
}

impl Role {
    /// Llama's names for the projections this one stands for.
    fn canonical(self) -> &'static [&'static str] {
        match self {
            Role::Q => &["q_proj"],
            Role::K => &["k_proj"],
            Role::V => &["v_proj"],
            Role::Qkv => &["q_proj", "k_proj", "v_proj"],
            Role::O => &["o_proj"],
            Role::Gate => &["gate_proj"],
            Role::Up => &["up_proj"],
            Role::GateUp => &["gate_proj", "up_proj"],
            Role::Down => &["down_proj"],
            Role::Router => &["gate"],
            Role::Other => &[],
        }
    }
}

/// The result: saved bytes and the trainable parameters the forward created.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub saved: SavedBytes,
    /// LoRA adapter parameters (0 without LoRA).
    pub adapter_params: u64,
    /// The gradient of the logits (fp32) that backward starts from, in bytes.
    pub logits_grad_bytes: u64,
    pub overflow: bool,
    /// Named LoRA targets no linear layer of the model matched (peft refuses when none does).
    pub unmatched_targets: Vec<String>,
    /// The names the model's linear layers answer to (for the message about unmatched targets).
    pub linear_names: Vec<String>,
    /// The saved storages (bytes, dtype), for diagnostics.
    pub list: Vec<(u64, DType)>,
    /// Token mixers the tape does not model, with how many blocks have each: their saved
    /// tensors are missing from `saved` (a lower bound).
    pub unmodelled: Vec<(String, u64)>,
    /// Why peft cannot train this adapter configuration at all (its forward fails).
    pub peft_fails: Option<String>,
    /// peft wraps expert or router parameters ([`ExpertTargets`]).
    pub wraps_experts: bool,
    /// Backward, step by step ([`Tape::backward`]), and the trained elements it names.
    pub backward: Vec<crate::analysis::step::BackwardStep>,
    pub backward_params: u64,
}

struct Run<'a> {
    t: Tape,
    a: &'a Arch,
    s: &'a Step,
    /// tokens per sequence and in all
    n: u64,
    tokens: u64,
    w: DType,
    full: bool,
    adapters: u64,
    /// The linear layers' names (the family's and Llama's), and the LoRA targets that matched.
    names: BTreeSet<String>,
    matched: BTreeSet<String>,
    unmodelled: Vec<(String, u64)>,
    peft_fails: Option<String>,
    /// The expert and router parameters peft wraps directly ([`ExpertTargets`]).
    experts: Option<ExpertTargets>,
}

/// What peft 0.21 wraps with `ParamWrapper` on an MoE whose targets it converts
/// ([`super::arch::peft_converts_moe`]): the targets naming the v4 layers (`gate_proj` and
/// `up_proj` together, `down_proj`, `gate`; Mixtral's `w1`, `w3`, `w2`) become the fused
/// `gate_up_proj` (at twice the rank and alpha), `down_proj` and the router's `gate.weight`, and
/// leave `target_modules`: no `nn.Linear` with those names is wrapped then (dense MLPs and shared
/// experts keep none). `all-linear` names them all.
#[derive(Clone, Copy, Debug, Default)]
struct ExpertTargets {
    gate_up: bool,
    down: bool,
    router: bool,
}

/// The v4 names peft maps to fused parameters, and which.
fn peft_moe_names(a: &Arch) -> &'static [(&'static str, u8)] {
    // 0: gate_up_proj, 1: down_proj, 2: the router's weight
    if a.model_type == "mixtral" {
        &[("w1", 0), ("w3", 0), ("w2", 1), ("gate", 2)]
    } else {
        &[
            ("gate_proj", 0),
            ("up_proj", 0),
            ("down_proj", 1),
            ("gate", 2),
        ]
    }
}

/// Whether target `t` names the v4 layer `old` (exactly or as a dotted suffix).
fn names_old(t: &str, old: &str) -> bool {
    t == old || t.strip_suffix(old).is_some_and(|p| p.ends_with('.'))
}

/// [`ExpertTargets`] of this run, or why peft refuses the targets.
fn expert_targets(a: &Arch, s: &Step) -> Result<Option<ExpertTargets>, String> {
    let Some(l) = s.lora.as_ref() else {
        return Ok(None);
    };
    if !a.moe.as_ref().is_some_and(|m| m.peft_wraps_experts) {
        return Ok(None);
    }
    let names = peft_moe_names(a);
    let hit = |old: &str| match &l.targets {
        Targets::AllLinear => true,
        Targets::Named(ts) => ts.iter().any(|t| names_old(t, old)),
    };
    let fused: Vec<&str> = names
        .iter()
        .filter(|(_, p)| *p == 0)
        .map(|(n, _)| *n)
        .collect();
    let present: Vec<&str> = fused.iter().copied().filter(|n| hit(n)).collect();
    if !present.is_empty() && present.len() < fused.len() {
        let missing: Vec<&str> = fused
            .iter()
            .copied()
            .filter(|n| !present.contains(n))
            .collect();
        return Err(format!(
            "peft 0.21 cannot convert the target {} without also targeting {}: on this transformers-5 MoE they are fused into gate_up_proj",
            present.join(", "),
            missing.join(", ")
        ));
    }
    let part = |p: u8| names.iter().any(|(n, q)| *q == p && hit(n));
    let e = ExpertTargets {
        gate_up: part(0),
        down: part(1),
        router: part(2),
    };
    Ok((e.gate_up || e.down || e.router).then_some(e))
}

/// Runs the forward of `a` under `s` and returns what it saves.
pub fn training_forward(a: &Arch, s: &Step) -> Outcome {
    let n = a.tokens(s.seq);
    let mut r = Run {
        t: Tape::new(s.numerics.autocast).on_cuda(s.cuda),
        a,
        s,
        n,
        tokens: s.batch.saturating_mul(n),
        w: s.numerics.weights,
        full: s.lora.is_none(),
        adapters: 0,
        names: BTreeSet::new(),
        matched: BTreeSet::new(),
        unmodelled: Vec::new(),
        peft_fails: None,
        experts: None,
    };
    match expert_targets(a, s) {
        Ok(e) => r.experts = e,
        Err(why) => r.peft_fails = Some(why),
    }
    // the fp32 logits the loss starts backward from (0 without a head)
    let logits_rows = match a.family {
        Family::Decoder | Family::Gpt2 | Family::GptNeox => r.causal_lm(),
        Family::Bert => r.bert(),
        Family::Vit => r.vit(),
    };
    let (backward, backward_params) = r.t.backward();
    Outcome {
        backward,
        backward_params,
        saved: r.t.saved(),
        adapter_params: r.adapters,
        logits_grad_bytes: logits_rows.saturating_mul(4),
        overflow: r.t.overflow,
        unmatched_targets: match s.lora.as_ref().map(|l| &l.targets) {
            Some(Targets::Named(names)) => names
                .iter()
                .filter(|t| !r.matched.contains(*t))
                .cloned()
                .collect(),
            _ => Vec::new(),
        },
        linear_names: r.names.iter().cloned().collect(),
        list: r.t.saved_list(),
        unmodelled: r.unmodelled,
        peft_fails: r.peft_fails,
        wraps_experts: r.experts.is_some(),
    }
}

impl Run<'_> {
    fn param(&mut self, numel: u64) -> X {
        let full = self.full;
        self.t.param(numel, self.w, full)
    }

    /// A parameter of `experts` stacked `inp → out` matrices (one for a router's weight) that
    /// peft wraps with `ParamWrapper` at `rank` (`ExpertTargets`), or the bare parameter.
    /// Wrapped, every forward computes `W' = W + scaling · B·A` inside `parametrize.cached()`:
    /// for stacked experts `_LoraFactorsProxy` with `baddbmm(W, lhs, rhs)` (which keeps the two
    /// factors, cast to W's dtype: copies over a half-precision base, whose adapters peft keeps
    /// in fp32); for a router `_LoraParameterProxy`, `W + delta` (the delta transient). W' is a
    /// new tensor the size of the whole stack, in W's dtype, that carries a gradient: the ops
    /// reading it keep it and their inputs, and backward makes its full-size gradient
    /// (measured, peft 0.21.2 / transformers 5.24: every expert's slice is kept, hit or not).
    fn wrapped_param(&mut self, experts: u64, inp: u64, out: u64, rank: Option<u64>) -> X {
        let numel = experts.saturating_mul(inp).saturating_mul(out);
        let w = self.param(numel);
        let Some(rank) = rank else {
            return w;
        };
        let r = rank.saturating_mul(experts);
        self.adapters = self
            .adapters
            .saturating_add(r.saturating_mul(inp.saturating_add(out)));
        let dtype = match self.w {
            DType::BF16 | DType::F16 => DType::F32,
            w => w,
        };
        let la = self.t.param(r.saturating_mul(inp), dtype, true);
        let lb = self.t.param(r.saturating_mul(out), dtype, true);
        if experts > 1 {
            let lhs = self.t.to(la, self.w);
            let rhs = self.t.to(lb, self.w);
            self.t.save(lhs);
            self.t.save(rhs);
            self.t.reads(&[w, lhs, rhs]);
        } else {
            self.t.reads(&[w, la, lb]);
        }
        self.t.new_act(numel, self.w, true)
    }

    /// Whether the linear layer `name` gets an adapter; records the names the targets can match
    /// and the targets that matched.
    fn lora_on(&mut self, name: &str, role: Role) -> bool {
        if role == Role::Router && self.a.moe.as_ref().is_some_and(|m| !m.router_linear) {
            return false;
        }
        self.names.insert(name.to_string());
        self.names
            .extend(role.canonical().iter().map(|c| c.to_string()));
        // targets peft moved onto the experts' and the router's parameters wrap no module
        let moved = |t: &str| {
            self.experts.is_some() && peft_moe_names(self.a).iter().any(|(o, _)| names_old(t, o))
        };
        match self.s.lora.as_ref().map(|l| &l.targets) {
            None => false,
            Some(Targets::AllLinear) => !moved(name.rsplit('.').next().unwrap_or(name)),
            Some(Targets::Named(names)) => {
                let mut on = false;
                for t in names {
                    if moved(t) {
                        self.matched.insert(t.clone());
                        continue;
                    }
                    if t == name
                        || name.ends_with(&format!(".{t}"))
                        || role.canonical().contains(&t.as_str())
                    {
                        self.matched.insert(t.clone());
                        on = true;
                    }
                }
                on
            }
        }
    }

    /// A linear layer `name` of `inp → out` features on `x` (rows = x.numel / inp), with a LoRA
    /// adapter when it is a target.
    fn linear(&mut self, x: X, name: &str, role: Role, inp: u64, out: u64) -> X {
        let rows = x.numel / inp.max(1);
        let w = self.param(inp.saturating_mul(out));
        let y = self.t.linear(x, w, rows.saturating_mul(out));
        let on = self.lora_on(name, role);
        let Some(rank) = self.s.lora.as_ref().map(|l| l.rank) else {
            return y;
        };
        if !on {
            return y;
        }
        self.adapters += rank * (inp + out);
        // peft keeps the adapters in fp32 over a half-precision base (autocast_adapter_dtype)
        // and casts each adapter's input to their dtype: q and v on one input make two copies
        let dtype = match self.w {
            DType::BF16 | DType::F16 => DType::F32,
            w => w,
        };
        let la = self.t.param(rank * inp, dtype, true);
        let lb = self.t.param(rank * out, dtype, true);
        let xa = self.t.to(x, dtype);
        let h = self.t.linear(xa, la, rows.saturating_mul(rank));
        let d = self.t.linear(h, lb, rows.saturating_mul(out));
        let d = self.t.plain(&[d], d.numel); // × scaling
                                             // result + lora, cast back to the base layer's dtype
        let sum = self.t.plain(&[y, d], y.numel);
        self.t.to(sum, y.dtype)
    }

    /// A norm over rows of `width` features.
    fn norm(&mut self, x: X, width: u64) -> X {
        let rows = x.numel / width.max(1);
        match self.a.norm {
            Norm::LayerNorm => {
                let w = self.param(width);
                self.t.layer_norm(x, w, width)
            }
            Norm::LayerNormFp32 => {
                // CohereLayerNorm: x - mean twice (for the variance and for the output)
                let xf = self.t.to(x, DType::F32);
                let mean = self.t.plain(&[xf], rows);
                let centred = self.t.plain(&[xf, mean], xf.numel);
                let sq = self.t.keeps_input(centred); // pow(2)
                let var = self.t.plain(&[sq], rows);
                let var = self.t.plain(&[var], rows); // + eps
                let r = self.t.keeps_result(var, rows, DType::F32); // rsqrt
                let centred = self.t.plain(&[xf, mean], xf.numel);
                let normed = self.t.mul(centred, r);
                let w = self.param(width);
                let wf = self.t.to(w, DType::F32);
                let out = self.t.mul(wf, normed);
                self.t.to(out, x.dtype)
            }
            Norm::Rms | Norm::RmsGemma | Norm::RmsWeightFp32 | Norm::RmsWeightCastFp32 => {
                let xf = self.t.to(x, DType::F32);
                let sq = self.t.keeps_input(xf); // pow(2)
                let mean = self.t.plain(&[sq], rows);
                let var = self.t.plain(&[mean], rows); // + eps
                let r = self.t.keeps_result(var, rows, DType::F32); // rsqrt
                let normed = self.t.mul(xf, r);
                let w = self.param(width);
                match self.a.norm {
                    Norm::Rms => {
                        let nb = self.t.to(normed, x.dtype);
                        self.t.mul(w, nb)
                    }
                    Norm::RmsWeightFp32 => {
                        let out = self.t.mul(w, normed);
                        self.t.to(out, x.dtype)
                    }
                    Norm::RmsWeightCastFp32 => {
                        let wf = self.t.to(w, DType::F32);
                        let out = self.t.mul(wf, normed);
                        self.t.to(out, x.dtype)
                    }
                    _ => {
                        let wf = self.t.to(w, DType::F32);
                        let one_plus = self.t.plain(&[wf], width);
                        let out = self.t.mul(normed, one_plus);
                        self.t.to(out, x.dtype)
                    }
                }
            }
        }
    }

    /// Llama 4's weightless L2 norm over each head: `x.float() * rsqrt(mean(x²) + eps)`, cast
    /// back.
    fn l2_norm(&mut self, x: X, width: u64) -> X {
        let rows = x.numel / width.max(1);
        let xf = self.t.to(x, DType::F32);
        let sq = self.t.keeps_input(xf);
        let mean = self.t.plain(&[sq], rows);
        let var = self.t.plain(&[mean], rows);
        let r = self.t.keeps_result(var, rows, DType::F32);
        let normed = self.t.mul(xf, r);
        self.t.to(normed, x.dtype)
    }

    fn act(&mut self, x: X) -> X {
        match self.a.act {
            Act::Silu | Act::Gelu => self.t.keeps_input(x),
            Act::GeluNew => {
                // 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
                let cube = self.t.keeps_input(x);
                let inner = self.t.plain(&[x, cube], x.numel);
                let th = self.t.keeps_result(inner, x.numel, inner.dtype);
                let one_plus = self.t.plain(&[th], x.numel);
                let half = self.t.plain(&[x], x.numel);
                self.t.mul(half, one_plus)
            }
        }
    }

    /// Rotary embedding of `x` ([B, S, heads, head_dim]) with the tables `cs`.
    fn rope(&mut self, x: X, heads: u64, cs: (X, X)) -> X {
        let a = self.a;
        if a.rotary_dim == 0 {
            return x;
        }
        let rot = self.tokens.saturating_mul(heads * a.rotary_dim);
        if a.complex_rope {
            // view_as_complex(x.float()) * freqs_cis: keeps the complex table; type_as(x)
            let xf = self.t.to(x, DType::F32);
            let out = self.t.mul(xf, cs.0);
            return self.t.to(out, x.dtype);
        }
        let part = self.t.view(x, rot);
        let c = self.t.mul(part, cs.0);
        let half = self.t.plain(&[part], rot); // rotate_half: slices, neg, cat
        let s = self.t.mul(half, cs.1);
        let out = self.t.plain(&[c, s], rot);
        let out = if a.rotary_dim == a.head_dim {
            out
        } else {
            self.t.plain(&[out, x], x.numel) // cat with the pass-through part
        };
        if a.rotary_fp32_per_layer {
            // q.float() * cos ... .to(original_dtype)
            self.t.to(out, x.dtype)
        } else {
            out
        }
    }

    /// The q or k norm before the rotary embedding: per head (Qwen3, Gemma 3) or over the
    /// projection's `width` (OLMo 2/3).
    fn qk_norm(&mut self, x: X, width: u64) -> X {
        match self.a.qk_norm {
            QkNorm::Head => self.norm(x, self.a.head_dim),
            QkNorm::Projection => self.norm(x, width),
            QkNorm::None | QkNorm::L2 => x,
        }
    }

    fn repeat_kv(&mut self, x: X) -> X {
        let a = self.a;
        if a.kv_heads == a.heads {
            x
        } else {
            self.t.plain(&[x], self.tokens.saturating_mul(a.q_dim()))
        }
    }

    /// Attention from q, k, v ([B, S, h, d] each); returns the input of the output projection.
    fn attention(&mut self, q: X, k: X, v: X, layer: usize, fresh_output: bool) -> X {
        let a = self.a;
        let (b, n) = (self.s.batch, self.n);
        let q_numel = self.tokens.saturating_mul(a.q_dim());
        let masked = self.s.padded || a.window(layer).is_some();
        // sink logits (gpt-oss) have no SDPA kernel: transformers runs them eagerly only
        let sinks = a
            .blocks
            .get(layer)
            .and_then(|b| b.mixer.attention())
            .is_some_and(|at| at.sinks);
        let attn = if sinks { Attn::Eager } else { self.s.attn };
        match attn {
            // with dropout, CPU SDPA runs PyTorch's math path (CUDA's fused kernels take it)
            Attn::Sdpa if a.drop.attn > 0.0 && !self.s.cuda => {
                let probs = b
                    .saturating_mul(a.heads)
                    .saturating_mul(n)
                    .saturating_mul(n);
                let o = self.t.sdpa_math(q, k, v, q_numel, probs);
                self.t.plain(&[o], q_numel) // transpose + contiguous: a copy
            }
            Attn::Sdpa | Attn::Flash => {
                let (k, v) = if masked {
                    (self.repeat_kv(k), self.repeat_kv(v))
                } else {
                    (k, v)
                };
                let mask = masked.then(|| {
                    let dt = q.dtype;
                    self.t
                        .new_act(b.saturating_mul(n).saturating_mul(n), dt, false)
                });
                let o = self
                    .t
                    .sdpa(q, k, v, mask, q_numel, b.saturating_mul(a.heads * n));
                if fresh_output {
                    self.t.plain(&[o], q_numel)
                } else {
                    o
                }
            }
            Attn::Eager => {
                let (k, v) = (self.repeat_kv(k), self.repeat_kv(v));
                // matmul reshapes its transposed operands into contiguous copies
                let q = self.t.plain(&[q], q.numel);
                let k = self.t.plain(&[k], k.numel);
                let v = self.t.plain(&[v], v.numel);
                let scores_n = b
                    .saturating_mul(a.heads)
                    .saturating_mul(n)
                    .saturating_mul(n);
                let s = self.t.matmul(q, k, scores_n);
                let mut s = self.t.plain(&[s], scores_n); // × scaling
                if a.attn_softcap.is_some() {
                    let d = self.t.plain(&[s], scores_n);
                    let th = self.t.keeps_result(d, scores_n, d.dtype);
                    s = self.t.plain(&[th], scores_n);
                }
                let s = self.t.plain(&[s], scores_n); // + mask
                let p = if sinks {
                    // cat with the sink column, minus the row max (which keeps its indices),
                    // softmax in the logits' dtype, the sink column sliced off (a view)
                    let rows = b.saturating_mul(a.heads).saturating_mul(n);
                    let sink = self.param(a.heads);
                    let c = self.t.plain(&[s, sink], rows.saturating_mul(n + 1));
                    if c.grad {
                        let idx = self.t.new_act(rows, DType::I64, false);
                        self.t.save(idx);
                    }
                    let c = self.t.plain(&[c], c.numel);
                    let p = self.t.softmax(c, c.dtype);
                    self.t.view(p, scores_n)
                } else {
                    // most ask for an fp32 softmax; BERT takes the scores' dtype; a softmax in
                    // the scores' dtype runs in fp32 under CPU autocast (its fp32 op list;
                    // measured on Llama 4: fp32 probabilities, then matmul's bf16 copy)
                    let dt = match a.family {
                        Family::Bert => s.dtype,
                        _ if !a.softmax_fp32 && self.s.numerics.autocast.is_none() => s.dtype,
                        _ => DType::F32,
                    };
                    let p = self.t.softmax(s, dt);
                    self.t.to(p, q.dtype)
                };
                let p = self.t.dropout(p, a.drop.attn);
                let o = self.t.matmul(p, v, q_numel);
                self.t.plain(&[o], q_numel) // transpose + reshape: a copy
            }
        }
    }

    fn rotary_tables(&mut self) -> Vec<(X, X)> {
        let a = self.a;
        let dt = if self.s.numerics.autocast.is_some() || a.complex_rope {
            DType::F32
        } else {
            self.w
        };
        let mut numel = self.n.saturating_mul(if a.rotary_half_tables {
            a.rotary_dim / 2
        } else {
            a.rotary_dim
        });
        if a.rotary_per_sequence {
            numel = numel.saturating_mul(self.s.batch);
        }
        if a.complex_rope {
            // one complex64 table of rotary_dim / 2 numbers a position
            let t = self.t.new_act(numel, dt, false);
            return vec![(t, t)];
        }
        (0..a.rotary_tables)
            .map(|_| {
                (
                    self.t.new_act(numel, dt, false),
                    self.t.new_act(numel, dt, false),
                )
            })
            .collect()
    }

    /// One block under gradient checkpointing when asked: only its input is kept.
    fn block(&mut self, x: X, f: impl FnOnce(&mut Self, X) -> X) -> X {
        if !self.s.checkpoint {
            return f(self, x);
        }
        self.t.save(x);
        self.t.begin_recompute();
        let out = f(self, x);
        self.t.end_recompute();
        out
    }

    fn causal_lm(&mut self) -> u64 {
        let a = self.a;
        let h = a.hidden;
        let tok = self.tokens;
        let ids = self.t.input(tok, DType::I64);
        let emb = self.param(a.vocab.saturating_mul(h));
        let mut x = self.t.embedding(ids, emb, tok.saturating_mul(h));
        x.grad |= self.s.input_grad;
        if a.family == Family::Gpt2 {
            let pos = self.t.new_act(self.n, DType::I64, false);
            let wpe = self.param(a.max_positions.saturating_mul(h));
            let p = self.t.embedding(pos, wpe, self.n.saturating_mul(h));
            x = self.t.plain(&[x, p], x.numel);
        }
        if matches!(a.family, Family::Gpt2 | Family::GptNeox) {
            x = self.t.dropout(x, a.drop.embed);
        }
        if a.embed_scale {
            let normalizer = self.t.param(1, self.w, false);
            x = self.t.mul(x, normalizer);
        }
        let tables = self.rotary_tables();
        for layer in 0..a.layers as usize {
            let cs = match tables.len() {
                0 => None,
                1 => Some(tables[0]),
                _ => Some(tables[usize::from(a.window(layer).is_none())]),
            };
            // a NoPE layer applies no rotary embedding
            let cs = cs.filter(|_| {
                a.blocks
                    .get(layer)
                    .is_none_or(|b| b.mixer.attention().is_none_or(|at| at.rope))
            });
            // fresh fp32 tables a layer, made from the shared ones (ERNIE 4.5)
            let cs = cs.map(|(c, s)| {
                if a.rotary_fp32_per_layer {
                    (
                        self.t.new_act(c.numel, DType::F32, false),
                        self.t.new_act(s.numel, DType::F32, false),
                    )
                } else {
                    (c, s)
                }
            });
            x = self.block(x, |r, x| match a.family {
                Family::Gpt2 => r.gpt2_block(x, layer),
                Family::GptNeox => r.neox_block(x, layer, cs),
                _ => r.decoder_block(x, layer, cs),
            });
        }
        let x = self.norm(x, h);
        match a.head {
            Head::CausalLm | Head::MaskedLm => {}
            Head::Classifier { labels } => {
                // `score` over every position, gathered at each sequence's last token
                let logits = self.linear(x, "score", Role::Other, h, labels);
                let b = self.s.batch;
                // logits[arange(b), last]: the index keeps both int64 index vectors
                if logits.grad {
                    for _ in 0..2 {
                        let idx = self.t.new_act(b, DType::I64, false);
                        self.t.save(idx);
                    }
                }
                let pooled = self.t.plain(&[logits], b.saturating_mul(labels));
                let target = self.t.input(b, DType::I64);
                self.t.cross_entropy(pooled, target);
                return b.saturating_mul(labels);
            }
            Head::None | Head::Other { .. } => return 0,
        }
        let head = if a.tied {
            emb
        } else {
            self.param(a.vocab.saturating_mul(h))
        };
        let mut logits = self.t.linear(x, head, tok.saturating_mul(a.vocab));
        if a.logit_scale.is_some() {
            logits = self.t.plain(&[logits], logits.numel);
        }
        if a.final_softcap.is_some() {
            let d = self.t.plain(&[logits], logits.numel);
            let th = self.t.keeps_result(d, d.numel, d.dtype);
            logits = self.t.plain(&[th], th.numel);
        }
        let logits = self.t.to(logits, DType::F32);
        // the shifted labels: `pad(labels, (0, 1))[..., 1:].contiguous()` copies B×S, except at
        // batch 1, where the slice is already contiguous and keeps the padded [1, S + 1] storage
        let shifted = if self.s.batch == 1 {
            tok.saturating_add(1)
        } else {
            tok
        };
        let target = self.t.new_act(shifted, DType::I64, false);
        self.t.cross_entropy(logits, target);
        tok.saturating_mul(a.vocab)
    }

    /// A decoder block: the token mixer, then the channel mixer, each with the family's norms
    /// where [`NormPlace`] puts them.
    fn decoder_block(&mut self, x: X, layer: usize, cs: Option<(X, X)>) -> X {
        let a = self.a;
        let h = a.hidden;
        let Some(block) = a.blocks.get(layer) else {
            return x;
        };
        let (pre, post) = match a.norms {
            NormPlace::Pre | NormPlace::Parallel => (true, false),
            NormPlace::Sandwich => (true, true),
            NormPlace::Post => (false, true),
        };
        // a block without a token mixer is its channel mixer alone (Nemotron-H's MLP blocks)
        if !block.mixer.caches() {
            return self.channel_half(x, &block.channel, pre, post);
        }
        let xn = if pre { self.norm(x, h) } else { x };
        let mut o = match &block.mixer {
            Mixer::Attention(at) => self.softmax_attention(xn, at, layer, cs),
            Mixer::Mla(m) => self.mla(xn, m, cs),
            other => self.recurrent_mixer(xn, other, layer, cs),
        };
        if post {
            o = self.norm(o, h);
        }
        let o = self.t.dropout(o, a.drop.hidden);
        if a.norms == NormPlace::Parallel {
            // residual + attention(xn) + mlp(xn)
            let m = self.channel(xn, &block.channel);
            let x = self.t.plain(&[x, o], x.numel);
            return match m {
                Some(m) => {
                    let m = self.t.dropout(m, a.drop.hidden);
                    self.t.plain(&[x, m], x.numel)
                }
                None => x,
            };
        }
        let x = self.t.plain(&[x, o], x.numel);
        self.channel_half(x, &block.channel, pre, post)
    }

    /// The channel half of a block: its norms where `pre` and `post` put them, the channel
    /// mixer, dropout and the residual add (`x` itself when the block has no channel mixer).
    fn channel_half(&mut self, x: X, c: &Channel, pre: bool, post: bool) -> X {
        if *c == Channel::None {
            return x;
        }
        let h = self.a.hidden;
        let xn = if pre { self.norm(x, h) } else { x };
        let Some(mut m) = self.channel(xn, c) else {
            return x;
        };
        if post {
            m = self.norm(m, h);
        }
        let m = self.t.dropout(m, self.a.drop.hidden);
        self.t.plain(&[x, m], x.numel)
    }

    /// The channel mixer on `xn` (`None`: the block has none).
    fn channel(&mut self, xn: X, c: &Channel) -> Option<X> {
        match c {
            Channel::None => None,
            Channel::Moe => Some(self.moe(xn)),
            Channel::Mlp { intermediate } => Some(self.mlp(xn, *intermediate)),
        }
    }

    /// A token mixer the tape does not model: its output, with nothing saved, and a record that
    /// the count misses it.
    fn unmodelled(&mut self, xn: X, m: &Mixer) -> X {
        // inside a checkpointed block nothing is kept but the block's input (measured exact for
        // every hybrid): the kernel misses nothing there
        if self.t.recording {
            let what = m.describe();
            match self.unmodelled.iter_mut().find(|(w, _)| *w == what) {
                Some((_, n)) => *n += 1,
                None => self.unmodelled.push((what, 1)),
            }
        }
        self.t.plain(&[xn], xn.numel)
    }

    /// Llama-style attention: q, k, v projections (or one fused), per-head norms, rotary
    /// positions, the kernel, the output projection.
    fn softmax_attention(&mut self, xn: X, at: &Attention, layer: usize, cs: Option<(X, X)>) -> X {
        let a = self.a;
        let (h, tok) = (a.hidden, self.tokens);
        let (q_dim, kv_dim) = (at.q_dim(), at.kv_dim());
        let mut gate: Option<X> = None;
        let (q, k, v) = if a.fused_qkv {
            let qkv = self.linear(xn, "qkv_proj", Role::Qkv, h, q_dim + 2 * kv_dim);
            (
                self.t.view(qkv, tok.saturating_mul(q_dim)),
                self.t.view(qkv, tok.saturating_mul(kv_dim)),
                self.t.view(qkv, tok.saturating_mul(kv_dim)),
            )
        } else {
            // a gated attention's q projection is twice as wide: query and output gate
            let q = if at.output_gate {
                let qg = self.linear(xn, "q_proj", Role::Q, h, 2 * q_dim);
                gate = Some(self.t.view(qg, tok.saturating_mul(q_dim)));
                self.t.view(qg, tok.saturating_mul(q_dim))
            } else {
                self.linear(xn, "q_proj", Role::Q, h, q_dim)
            };
            (
                q,
                self.linear(xn, "k_proj", Role::K, h, kv_dim),
                self.linear(xn, "v_proj", Role::V, h, kv_dim),
            )
        };
        let q = self.qk_norm(q, q_dim);
        let k = self.qk_norm(k, kv_dim);
        // OLMoE's clip_qkv: clamp_ in place keeps what it clamps (measured: one q-, k- and
        // v-sized tensor a layer)
        let (q, k, v) = if a.clip_qkv {
            (
                self.t.keeps_input(q),
                self.t.keeps_input(k),
                self.t.keeps_input(v),
            )
        } else {
            (q, k, v)
        };
        let (mut q, mut k) = match cs {
            Some(cs) => (self.rope(q, at.heads, cs), self.rope(k, at.kv_heads, cs)),
            None => (q, k),
        };
        if a.qk_norm == QkNorm::L2 && at.rope {
            q = self.l2_norm(q, at.head_dim);
            k = self.l2_norm(k, at.head_dim);
        }
        if a.attn_temperature && !at.rope {
            // q * log1p(floor((pos + 1) / floor_scale)) * attn_scale + 1: an fp32 [S] scale
            let scales = self.t.new_act(self.n, DType::F32, false);
            let qs = self.t.mul(q, scales);
            q = self.t.to(qs, q.dtype);
        }
        // a partial rotary embedding ends in a cat, a contiguous [B, heads, S, d] query: SDPA's
        // output then has that layout too, and `transpose(1, 2).reshape(...)` copies it (a full
        // rotary embedding keeps the projection's [B, S, heads, d] layout: a view)
        let partial = cs.is_some() && a.rotary_dim > 0 && a.rotary_dim < at.head_dim;
        let mut o = self.attention(q, k, v, layer, a.o_proj_copy || (partial && gate.is_none()));
        if let Some(g) = gate {
            // Qwen3-Next: attn_output.reshape(...).contiguous() * sigmoid(gate): the sigmoid
            // keeps its result, the product both factors
            let g = self.t.plain(&[g], g.numel); // reshape of a strided chunk: a copy
            let sig = self.t.keeps_result(g, g.numel, g.dtype);
            let oc = if partial {
                self.t.plain(&[o], o.numel)
            } else {
                o
            };
            o = self.t.mul(oc, sig);
        }
        self.linear(o, "o_proj", Role::O, q_dim, h)
    }

    /// The gated MLP: down(act(gate(x)) * up(x)).
    fn mlp(&mut self, xn: X, inter: u64) -> X {
        let a = self.a;
        let (h, tok) = (a.hidden, self.tokens);
        if !a.gated && a.family == Family::Decoder {
            // an ungated MLP (Nemotron-H's relu²: relu keeps its result, which the square
            // keeps too): up, the activation, down
            let u = self.linear(xn, "up_proj", Role::Up, h, inter);
            let ua = self.act(u);
            return self.linear(ua, "down_proj", Role::Down, inter, h);
        }
        let (g, u) = if a.fused_gate_up {
            let gu = self.linear(xn, "gate_up_proj", Role::GateUp, h, 2 * inter);
            (
                self.t.view(gu, tok.saturating_mul(inter)),
                self.t.view(gu, tok.saturating_mul(inter)),
            )
        } else {
            (
                self.linear(xn, "gate_proj", Role::Gate, h, inter),
                self.linear(xn, "up_proj", Role::Up, h, inter),
            )
        };
        let ga = self.act(g);
        let p = if a.fused_gate_up {
            self.t.mul(u, ga)
        } else {
            self.t.mul(ga, u)
        };
        self.linear(p, "down_proj", Role::Down, inter, h)
    }

    /// A mixture-of-experts block with grouped matmuls (transformers 5's `grouped_mm`): the
    /// router as the family scores it, the routed experts, the shared experts.
    fn moe(&mut self, xn: X) -> X {
        let a = self.a;
        let Some(m) = a.moe.clone() else {
            return xn;
        };
        if m.dispatch == Dispatch::AllExperts {
            return self.moe_all_experts(xn, &m);
        }
        let (h, tok) = (a.hidden, self.tokens);
        let routed = tok.saturating_mul(m.top_k);
        // Ernie runs its shared experts first; the order changes nothing kept
        let wts = self.router(xn, &m);
        // tokens sorted by expert: index, grouped mm (gate_up), act * up, grouped mm (down)
        let grad = xn.grad || wts.grad || self.full;
        let save_int = |r: &mut Self, n: u64, dt: DType| {
            if grad {
                let t = r.t.new_act(n, dt, false);
                r.t.save(t);
            }
        };
        save_int(self, routed, DType::I64);
        let xs = self.t.plain(&[xn], routed.saturating_mul(h));
        let inter = m.expert_intermediate;
        let ungated = !a.gated && a.family == Family::Decoder;
        let rank = self.s.lora.as_ref().map(|l| l.rank);
        let ex = self.experts.unwrap_or_default();
        // gate and up fused: twice the rank (and alpha)
        let wgu = self.wrapped_param(
            m.experts,
            h,
            if ungated { inter } else { 2 * inter },
            rank.filter(|_| ex.gate_up).map(|r| r.saturating_mul(2)),
        );
        let mut gu = self.t.grouped_mm(
            xs,
            wgu,
            routed.saturating_mul(if ungated { inter } else { 2 * inter }),
        );
        if m.clamped_glu {
            // the biases gathered per row (`gate_up_proj_bias[expert_ids_g]` keeps the ids)
            save_int(self, routed, DType::I64);
            let bias = self.param(m.experts.saturating_mul(2 * inter));
            gu = self.t.plain(&[gu, bias], gu.numel);
        }
        let p = if m.clamped_glu {
            // gpt-oss: interleaved gate/up slices, clamps (which keep their inputs),
            // glu = gate · σ(α · gate), (up + 1) · glu
            let n = routed.saturating_mul(inter);
            let g = self.t.view(gu, n);
            let u = self.t.view(gu, n);
            let gc = self.t.keeps_input(g);
            let uc = self.t.keeps_input(u);
            let ga = self.t.plain(&[gc], n);
            let sig = self.t.keeps_result(ga, n, ga.dtype);
            let glu = self.t.mul(gc, sig);
            let u1 = self.t.plain(&[uc], n);
            self.t.mul(u1, glu)
        } else if ungated {
            // Nemotron-H's experts: up, relu², down
            self.act(gu)
        } else {
            let g = self.t.view(gu, routed.saturating_mul(inter));
            let u = self.t.view(gu, routed.saturating_mul(inter));
            let ga = self.act(g);
            self.t.mul(ga, u)
        };
        let wd = self.wrapped_param(m.experts, inter, h, rank.filter(|_| ex.down));
        let mut d = self.t.grouped_mm(p, wd, routed.saturating_mul(h));
        if m.clamped_glu {
            let bias = self.param(m.experts.saturating_mul(h));
            d = self.t.plain(&[d, bias], d.numel);
        }
        save_int(self, m.experts, DType::I32); // group offsets
        save_int(self, routed, DType::I64);
        let ws = self.t.plain(&[wts], routed);
        let y = self.t.mul(d, ws);
        save_int(self, routed, DType::I64);
        // index back, sum over k, in the hidden states' dtype (`weighted.to(final.dtype)`)
        let out = self.t.plain(&[y], tok.saturating_mul(h));
        let mut out = self.t.to(out, xn.dtype);
        if m.shared_intermediate > 0 {
            let mut s = self.mlp(xn, m.shared_intermediate);
            if m.shared_gate {
                let gate = self.linear(xn, "shared_expert_gate", Role::Other, h, 1);
                let sig = self.t.keeps_result(gate, gate.numel, gate.dtype);
                s = self.t.mul(sig, s);
            }
            out = self.t.plain(&[out, s], out.numel);
        }
        out
    }

    /// Llama 4's MoE: the router's top-k logits through a sigmoid (0 elsewhere) scale a copy of
    /// the input for every expert; batched matmuls over all experts; their sum plus an ungated
    /// shared expert.
    fn moe_all_experts(&mut self, xn: X, m: &Moe) -> X {
        let (h, tok) = (self.a.hidden, self.tokens);
        let (e, inter) = (m.experts, m.expert_intermediate);
        let logits = self.linear(xn, "router", Role::Router, h, e);
        if self.s.lora.is_some() && self.lora_on("router", Role::Router) {
            self.peft_fails = Some(
                "peft 0.21 wraps Llama 4's router (Llama4Router, an nn.Linear whose forward returns a tuple) and its forward then fails ('tuple' object has no attribute 'dtype'): name the targets instead, e.g. q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj".into(),
            );
        }
        if logits.grad {
            // topk's indices, which scatter_ keeps too
            let idx = self
                .t
                .new_act(tok.saturating_mul(m.top_k), DType::I64, false);
            self.t.save(idx);
        }
        let top = self.t.plain(&[logits], tok.saturating_mul(m.top_k));
        let scores = self.t.plain(&[top], tok.saturating_mul(e)); // scatter_ into -inf
        let sf = self.t.to(scores, DType::F32);
        let sig = self.t.keeps_result(sf, sf.numel, DType::F32);
        let sig = self.t.to(sig, scores.dtype);
        let routed = tok.saturating_mul(e);
        let rin = self.t.plain(&[xn], routed.saturating_mul(h)); // repeat
        let col = self.t.plain(&[sig], routed); // transpose + reshape: a copy
        let scaled = self.t.mul(rin, col);
        let wgu = self.param(e.saturating_mul(2 * inter * h));
        let gu = self.t.linear(scaled, wgu, routed.saturating_mul(2 * inter)); // bmm
        let g = self.t.view(gu, routed.saturating_mul(inter));
        let u = self.t.view(gu, routed.saturating_mul(inter));
        let ga = self.act(g);
        let p = self.t.mul(u, ga);
        let wd = self.param(e.saturating_mul(inter * h));
        let d = self.t.linear(p, wd, routed.saturating_mul(h)); // bmm
        let shared = self.mlp(xn, m.shared_intermediate);
        let sum = self.t.plain(&[d], tok.saturating_mul(h));
        self.t.plain(&[shared, sum], shared.numel) // add_
    }

    /// The router: its logits, the top k and the routing weights ([tokens, k]) the experts'
    /// outputs are scaled by.
    fn router(&mut self, xn: X, m: &Moe) -> X {
        let (h, tok) = (self.a.hidden, self.tokens);
        let routed = tok.saturating_mul(m.top_k);
        let save_idx = |r: &mut Self, keep: bool| {
            if keep {
                let idx = r.t.new_act(routed, DType::I64, false);
                r.t.save(idx);
            }
        };
        match m.router {
            Router::Softmax => {
                let logits = match self.router_rank() {
                    Some(r) => {
                        let w = self.wrapped_param(1, h, m.experts, Some(r));
                        self.t.linear(xn, w, tok.saturating_mul(m.experts))
                    }
                    None => self.linear(xn, "gate", Role::Router, h, m.experts),
                };
                let probs = self.t.softmax(logits, DType::F32);
                let top = self.t.plain(&[probs], routed);
                save_idx(self, top.grad); // topk's indices
                let mut wts = top;
                if m.norm_topk {
                    let sum = self.t.plain(&[top], tok);
                    wts = self.t.div(top, sum);
                }
                self.t.to(wts, xn.dtype)
            }
            Router::SigmoidGroup => {
                // F.linear(x.float(), weight.float()) on the fp32 weight (autocast lowers it)
                let x = self.t.to(xn, DType::F32);
                let w = self.router_weight(m.experts, h);
                let logits = self.t.linear(x, w, tok.saturating_mul(m.experts));
                self.lora_on("gate", Role::Router);
                let scores = self.t.keeps_result(logits, logits.numel, logits.dtype);
                // the biased choice does not reach the loss; gather keeps the indices
                save_idx(self, scores.grad);
                let mut wts = self.t.plain(&[scores], routed);
                if m.norm_topk {
                    let sum = self.t.plain(&[wts], tok);
                    wts = self.t.div(wts, sum);
                }
                self.t.plain(&[wts], routed) // × routed_scaling_factor
            }
            Router::SoftmaxBias => {
                // autocast off: an fp32 linear on x.float(), an fp32 softmax
                let x = self.t.to(xn, DType::F32);
                let w = self.router_weight(m.experts, h);
                let autocast = self.t.autocast.take();
                let logits = self.t.linear(x, w, tok.saturating_mul(m.experts));
                self.lora_on("gate", Role::Router);
                let probs = self.t.softmax(logits, DType::F32);
                save_idx(self, probs.grad); // gather's indices
                let top = self.t.plain(&[probs], routed);
                // / clamp(sum, min): the clamp keeps the sum, the division both
                let sum = self.t.plain(&[top], tok);
                let sum = self.t.keeps_input(sum);
                let wts = self.t.div(top, sum);
                self.t.autocast = autocast;
                self.t.to(wts, xn.dtype)
            }
            Router::TopkSoftmax => {
                let logits = self.linear(xn, "router", Role::Router, h, m.experts);
                let top = self.t.plain(&[logits], routed);
                save_idx(self, top.grad); // topk's indices
                self.t.softmax(top, top.dtype)
            }
        }
    }

    /// The LoRA rank of a router whose weight peft wraps as a parameter.
    fn router_rank(&mut self) -> Option<u64> {
        if !self.experts.is_some_and(|e| e.router) {
            return None;
        }
        self.names.insert("gate".into());
        self.s.lora.as_ref().map(|l| l.rank)
    }

    /// The weight of a router computing in fp32 (`F.linear(x.float(), weight.float())`):
    /// wrapped by peft, W' in the weights' dtype cast to fp32.
    fn router_weight(&mut self, experts: u64, h: u64) -> X {
        match self.router_rank() {
            Some(r) => {
                let w = self.wrapped_param(1, h, experts, Some(r));
                self.t.to(w, DType::F32)
            }
            None => self
                .t
                .param(experts.saturating_mul(h), DType::F32, self.full),
        }
    }

    fn gpt2_block(&mut self, x: X, layer: usize) -> X {
        let a = self.a;
        let (h, tok) = (a.hidden, self.tokens);
        let xn = self.norm(x, h);
        let qkv = self.linear(xn, "c_attn", Role::Qkv, h, 3 * h);
        let q = self.t.view(qkv, tok.saturating_mul(h));
        let o = self.attention(q, q, q, layer, false);
        let o = self.linear(o, "c_proj", Role::O, h, h);
        let o = self.t.dropout(o, a.drop.hidden);
        let x = self.t.plain(&[x, o], x.numel);
        let xn = self.norm(x, h);
        let f = self.linear(xn, "c_fc", Role::Up, h, a.intermediate);
        let g = self.act(f);
        let m = self.linear(g, "c_proj", Role::Down, a.intermediate, h);
        let m = self.t.dropout(m, a.drop.hidden);
        self.t.plain(&[x, m], x.numel)
    }

    fn neox_block(&mut self, x: X, layer: usize, cs: Option<(X, X)>) -> X {
        let a = self.a;
        let (h, tok) = (a.hidden, self.tokens);
        let xn = self.norm(x, h);
        let qkv = self.linear(xn, "query_key_value", Role::Qkv, h, 3 * h);
        let qv = self.t.view(qkv, tok.saturating_mul(h));
        let (q, k) = match cs {
            Some(cs) => (self.rope(qv, a.heads, cs), self.rope(qv, a.heads, cs)),
            None => (qv, qv),
        };
        let o = self.attention(q, k, qv, layer, true);
        let o = self.linear(o, "dense", Role::O, h, h);
        let o = self.t.dropout(o, a.drop.hidden);
        let x2 = if a.parallel_residual {
            x
        } else {
            self.t.plain(&[x, o], x.numel)
        };
        let xn2 = self.norm(x2, h);
        let f = self.linear(xn2, "dense_h_to_4h", Role::Up, h, a.intermediate);
        let g = self.act(f);
        let m = self.linear(g, "dense_4h_to_h", Role::Down, a.intermediate, h);
        let m = self.t.dropout(m, a.drop.hidden);
        if a.parallel_residual {
            self.t.plain(&[x, o, m], x.numel)
        } else {
            self.t.plain(&[x2, m], x.numel)
        }
    }

    /// A post-norm encoder layer (BERT) or a pre-norm one (ViT).
    fn encoder_block(&mut self, x: X, layer: usize, pre_norm: bool) -> X {
        let a = self.a;
        let h = a.hidden;
        let xn = if pre_norm { self.norm(x, h) } else { x };
        let q = self.linear(xn, "query", Role::Q, h, h);
        let k = self.linear(xn, "key", Role::K, h, h);
        let v = self.linear(xn, "value", Role::V, h, h);
        let o = self.attention(q, k, v, layer, false);
        let o = self.linear(o, "dense", Role::O, h, h);
        let o = self.t.dropout(o, a.drop.hidden);
        let mut x = self.t.plain(&[o, x], x.numel);
        if !pre_norm {
            x = self.norm(x, h);
        }
        let xn = if pre_norm { self.norm(x, h) } else { x };
        let f = self.linear(xn, "intermediate.dense", Role::Up, h, a.intermediate);
        let g = self.act(f);
        let m = self.linear(g, "output.dense", Role::Down, a.intermediate, h);
        let m = self.t.dropout(m, a.drop.hidden);
        let x = self.t.plain(&[m, x], x.numel);
        if pre_norm {
            x
        } else {
            self.norm(x, h)
        }
    }

    fn bert(&mut self) -> u64 {
        let a = self.a;
        let (h, tok, n) = (a.hidden, self.tokens, self.n);
        let ids = self.t.input(tok, DType::I64);
        let word = self.param(a.vocab.saturating_mul(h));
        let e = self.t.embedding(ids, word, tok.saturating_mul(h));
        let pos_ids = if a.model_type == "roberta" {
            self.t.new_act(tok, DType::I64, false) // from input_ids and padding_idx
        } else {
            self.t.param(a.max_positions, DType::I64, false) // the position_ids buffer
        };
        let pos = self.param(a.max_positions.saturating_mul(h));
        let p = self.t.embedding(pos_ids, pos, tok.saturating_mul(h));
        // BERT expands its token_type_ids buffer ([1, S]); RoBERTa gathers it at the position
        // ids, a new [B, S]
        let types = if a.model_type == "roberta" {
            self.t.new_act(tok, DType::I64, false)
        } else {
            self.t.new_act(n, DType::I64, false)
        };
        let type_w = self.param(2 * h);
        let ty = self.t.embedding(types, type_w, tok.saturating_mul(h));
        let x = self.t.plain(&[e, p, ty], e.numel);
        let x = self.norm(x, h);
        let mut x = self.t.dropout(x, a.drop.embed);
        for layer in 0..a.layers as usize {
            x = self.block(x, |r, x| r.encoder_block(x, layer, false));
        }
        match a.head {
            Head::CausalLm | Head::MaskedLm => {
                // the masked-LM head: dense, gelu, LayerNorm, decoder tied to the word embeddings
                let t = self.linear(x, "transform.dense", Role::Other, h, h);
                let g = self.t.keeps_input(t);
                let g = self.norm(g, h);
                let logits = self.t.linear(g, word, tok.saturating_mul(a.vocab));
                let labels = self.t.input(tok, DType::I64);
                self.t.cross_entropy(logits, labels);
                tok.saturating_mul(a.vocab)
            }
            Head::Classifier { labels } => {
                let p = self.pooler(x);
                self.classify(p, labels)
            }
            Head::None | Head::Other { .. } => {
                if a.pooler {
                    self.pooler(x);
                }
                0
            }
        }
    }

    /// BERT's and ViT's pooler: dense and tanh on the [CLS] token (a view of `x`).
    fn pooler(&mut self, x: X) -> X {
        let h = self.a.hidden;
        let mut cls = self.t.view(x, self.s.batch.saturating_mul(h));
        if self.a.model_type == "roberta" && matches!(self.a.head, Head::Classifier { .. }) {
            // RobertaClassificationHead drops the <s> token before its dense as well as after
            cls = self.t.dropout(cls, self.a.drop.classifier);
        }
        let d = self.linear(cls, "pooler.dense", Role::Other, h, h);
        self.t.keeps_result(d, d.numel, d.dtype)
    }

    /// A classifier of `labels` outputs on one row per sequence, and its cross-entropy.
    fn classify(&mut self, x: X, labels: u64) -> u64 {
        let b = self.s.batch;
        let x = self.t.dropout(x, self.a.drop.classifier);
        let logits = self.linear(x, "classifier", Role::Other, self.a.hidden, labels);
        let target = self.t.input(b, DType::I64);
        self.t.cross_entropy(logits, target);
        b.saturating_mul(labels)
    }

    fn vit(&mut self) -> u64 {
        let a = self.a;
        let Some((img, patch, ch, _)) = a.image else {
            return 0;
        };
        let h = a.hidden;
        let b = self.s.batch;
        let pixels = self.t.input(b.saturating_mul(ch * img * img), DType::F32);
        let pixels = self.t.to(pixels, self.w); // cast to the patch embedding's dtype
        let conv = self.param(h * ch * patch * patch);
        let patches = (img / patch.max(1)).pow(2);
        let pe = self.t.linear(pixels, conv, b.saturating_mul(patches * h));
        let cls = self.param(h);
        // cat with [CLS] and add the positions (both parameters: fp32 under autocast)
        let x = self.t.plain(&[pe, cls], self.tokens.saturating_mul(h));
        let mut x = self.t.dropout(x, a.drop.embed);
        for layer in 0..a.layers as usize {
            x = self.block(x, |r, x| r.encoder_block(x, layer, true));
        }
        let x = self.norm(x, h);
        match a.head {
            Head::Classifier { labels } => {
                let cls = self.t.view(x, b.saturating_mul(h));
                self.classify(cls, labels)
            }
            _ => {
                if a.pooler {
                    self.pooler(x);
                }
                0
            }
        }
    }
}
