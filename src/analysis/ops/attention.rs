//! The default domain's transformer ops (opset 23 on): `Attention`, `RotaryEmbedding`,
//! `LinearAttention`. Inputs and outputs follow the ONNX operator documentation.
//!
//! MACs: `Attention` computes, per query head, `Q·Kᵀ` and `P·V` over the `T = past + kv` keys:
//! `B · q_heads · S · T · (head_size + v_head_size)`. `LinearAttention` keeps a `[d_k, d_v]` state
//! per KV head: per token it adds the outer product `k ⊗ v` (`d_k · d_v` per KV head) and reads it
//! with each query (`d_k · d_v` per query head); the delta rules also compute `Sᵀ·k` (`d_k · d_v`
//! per KV head). Decays and gates are element-wise and not counted. `RotaryEmbedding` is
//! element-wise: not counted.

use super::{
    attrs, invalid, ovf, AttrReader, FromAttrs, InferError, InferResult, Op, OpCx, SlotRole,
};
use crate::analysis::fact::Fact;
use crate::analysis::saved::{Save, SaveCx};
use crate::ir::{shape_to_string, Attrs, Dim};

/// `Attention`'s attributes (the ones that shape its outputs).
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    /// Heads of 3-D (packed) inputs; required there.
    pub q_num_heads: Option<i64>,
    pub kv_num_heads: Option<i64>,
    pub is_causal: bool,
    pub scale: Option<f32>,
    pub softcap: f32,
    pub qk_matmul_output_mode: i64,
}

impl FromAttrs for Attention {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let q_num_heads = r.int_opt("q_num_heads")?;
        let kv_num_heads = r.int_opt("kv_num_heads")?;
        for (name, h) in [("q_num_heads", q_num_heads), ("kv_num_heads", kv_num_heads)] {
            if let Some(h) = h.filter(|&h| h < 1) {
                return Err(format!("attribute '{name}' must be positive, found {h}"));
            }
        }
        let mode = r.int("qk_matmul_output_mode", 0)?;
        if !(0..=3).contains(&mode) {
            return Err(format!(
                "attribute 'qk_matmul_output_mode' must be 0 to 3, found {mode}"
            ));
        }
        Ok(Attention {
            q_num_heads,
            kv_num_heads,
            is_causal: r.flag("is_causal", false)?,
            scale: r.float_opt("scale")?,
            softcap: r.float("softcap", 0.0)?,
            qk_matmul_output_mode: mode,
        })
    }
}

/// The geometry of one `Attention` node.
struct Geometry {
    b: Dim,
    q_heads: Dim,
    kv_heads: Dim,
    s: Dim,
    /// past + kv sequence.
    total: Dim,
    head: Dim,
    v_head: Dim,
    packed: bool,
}

fn heads_of(d: &Dim, heads: i64, what: &str) -> InferResult<Dim> {
    d.div_exact(&Dim::known(heads)).ok_or_else(|| {
        InferError::Invalid(format!(
            "{what} width {d} does not split into {heads} heads"
        ))
    })
}

fn geometry(cx: &OpCx) -> InferResult<Geometry> {
    let a = attrs!(cx, Attention);
    let q = cx.shape(0)?;
    let k = cx.shape(1)?;
    let v = cx.shape(2)?;
    if k.len() != q.len() || v.len() != q.len() {
        return invalid(format!(
            "Q, K and V have ranks {}, {} and {}; they must all be 3 or all be 4",
            q.len(),
            k.len(),
            v.len()
        ));
    }
    let (g, l) = match q.len() {
        4 => (
            Geometry {
                b: q[0].clone(),
                q_heads: q[1].clone(),
                kv_heads: k[1].clone(),
                s: q[2].clone(),
                total: Dim::ZERO,
                head: q[3].clone(),
                v_head: v[3].clone(),
                packed: false,
            },
            k[2].clone(),
        ),
        3 => {
            let (Some(hq), Some(hkv)) = (a.q_num_heads, a.kv_num_heads) else {
                return invalid(
                    "3-D Q, K and V need the attributes 'q_num_heads' and 'kv_num_heads'",
                );
            };
            (
                Geometry {
                    b: q[0].clone(),
                    q_heads: Dim::known(hq),
                    kv_heads: Dim::known(hkv),
                    s: q[1].clone(),
                    total: Dim::ZERO,
                    head: heads_of(&q[2], hq, "Q")?,
                    v_head: heads_of(&v[2], hkv, "V")?,
                    packed: true,
                },
                k[1].clone(),
            )
        }
        r => return invalid(format!("Q has rank {r}, expected 3 or 4")),
    };
    if let (Some(hq), Some(hkv)) = (g.q_heads.as_i64(), g.kv_heads.as_i64()) {
        if hkv < 1 || hq % hkv != 0 {
            return invalid(format!(
                "{hq} query heads do not group over {hkv} key/value heads"
            ));
        }
    }
    let past = cx
        .opt_input(4)
        .and_then(|f| f.shape.as_deref())
        .map(|p| match p {
            [_, _, len, _] => Ok(len.clone()),
            _ => invalid(format!(
                "past_key is {}, expected [batch, kv_heads, past, head_size]",
                shape_to_string(p)
            )),
        })
        .transpose()?;
    let total = match past {
        Some(p) => ovf(p.checked_add(&l), "past + kv sequence")?,
        None => l,
    };
    Ok(Geometry { total, ..g })
}

/// `Attention`: Y `[B, q_heads, S, v_head]` (`[B, S, q_heads · v_head]` for 3-D inputs),
/// present_key/value `[B, kv_heads, past + L, head]`, qk_matmul_output `[B, q_heads, S, past + L]`.
pub fn attention(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let g = geometry(cx)?;
    let dtype = cx.dtype(0);
    let y = if g.packed {
        vec![
            g.b.clone(),
            g.s.clone(),
            ovf(g.q_heads.checked_mul(&g.v_head), "output width")?,
        ]
    } else {
        vec![
            g.b.clone(),
            g.q_heads.clone(),
            g.s.clone(),
            g.v_head.clone(),
        ]
    };
    let kv = |d: &Dim| vec![g.b.clone(), g.kv_heads.clone(), g.total.clone(), d.clone()];
    Ok(vec![
        Fact::new(dtype, y),
        Fact::new(cx.dtype(1).or(dtype), kv(&g.head)),
        Fact::new(cx.dtype(2).or(dtype), kv(&g.v_head)),
        Fact::new(
            dtype,
            vec![g.b.clone(), g.q_heads.clone(), g.s.clone(), g.total.clone()],
        ),
    ])
}

/// `B · q_heads · S · T · (head_size + v_head_size)`: both products of every query head.
pub fn attention_macs(cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    let g = geometry(cx).ok()?;
    Dim::product([&g.b, &g.q_heads, &g.s, &g.total])?.checked_mul(&g.head.checked_add(&g.v_head)?)
}

/// `scaled_dot_product_attention` (its flash and efficient kernels): Q, K and V as the kernel
/// sees them (the present cache when there is a past), the output, and an fp32 logsumexp per query
/// row.
pub fn attention_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    if !cx.out_grad() {
        return Some(Vec::new());
    }
    let n = cx.node;
    let past = n.input(4).is_some();
    let mut s = Vec::new();
    s.extend(n.input(0).map(Save::Value));
    for (input, present) in [(1, 1), (2, 2)] {
        let v = if past {
            n.output(present).or(n.input(input))
        } else {
            n.input(input)
        };
        s.extend(v.map(Save::Value));
    }
    let y = n.output(0)?;
    s.push(Save::Value(y));
    // one row per (batch, query head, query): numel(Y) / v_head_size
    let yf = cx.fact(y);
    let v = cx.fact(n.input(2)?);
    let v_head = match (yf.rank()?, v.shape.as_deref()?) {
        (4, vs) => vs.get(3)?.as_u64()?,
        (_, vs) => {
            let Op::Attention(a) = cx.op else { return None };
            vs.get(2)?.as_u64()? / u64::try_from(a.kv_num_heads?).ok()?.max(1)
        }
    };
    let rows = yf.numel()?.as_u64()? / v_head.max(1);
    s.push(Save::Own(rows.checked_mul(4)?));
    Some(s)
}

/// `RotaryEmbedding`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct Rotary {
    pub num_heads: Option<i64>,
    pub rotary_embedding_dim: i64,
    pub interleaved: bool,
}

impl FromAttrs for Rotary {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let rotary_embedding_dim = r.int("rotary_embedding_dim", 0)?;
        if rotary_embedding_dim < 0 || rotary_embedding_dim % 2 != 0 {
            return Err(format!(
                "attribute 'rotary_embedding_dim' must be even and not negative, found {rotary_embedding_dim}"
            ));
        }
        Ok(Rotary {
            num_heads: r.int_opt("num_heads")?,
            rotary_embedding_dim,
            interleaved: r.flag("interleaved", false)?,
        })
    }
}

/// `RotaryEmbedding`: the input's shape, X `[B, heads, S, head]` or `[B, S, heads · head]`
/// (`num_heads` required); the caches' last axis is half the rotated width.
pub fn rotary_embedding(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let r = attrs!(cx, RotaryEmbedding);
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let head = match s.len() {
        4 => s[3].clone(),
        3 => {
            let h = r.num_heads.ok_or_else(|| {
                InferError::Invalid("a 3-D input needs the attribute 'num_heads'".into())
            })?;
            heads_of(&s[2], h, "input")?
        }
        n => return invalid(format!("input has rank {n}, expected 3 or 4")),
    };
    let rotated = if r.rotary_embedding_dim > 0 {
        Dim::known(r.rotary_embedding_dim)
    } else {
        head
    };
    if let Some(c) = cx.opt_input(1).and_then(|f| f.shape.as_deref()) {
        if let (Some(last), Some(rot)) = (c.last().and_then(Dim::as_i64), rotated.as_i64()) {
            if last * 2 != rot {
                return invalid(format!(
                    "cos_cache's last axis is {last}, expected half the rotated width {rot}"
                ));
            }
        }
    }
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: x.shape.clone(),
        value: None,
    }])
}

/// `RotaryEmbedding`: X, then the cos and sin caches (buffers, as PyTorch registers them), then
/// the position ids.
pub const ROTARY: &[SlotRole] = &[
    SlotRole::Data,
    SlotRole::Buffer,
    SlotRole::Buffer,
    SlotRole::Config,
];

/// RoPE as PyTorch runs it, `x · cos + rotate_half(x) · sin`: each product keeps its cache
/// operand (which needs no gradient); the rotation itself (slices, negation, concatenation) keeps
/// nothing.
pub fn rotary_saves(cx: &SaveCx) -> Option<Vec<Save>> {
    Some(if cx.grad(cx.node.input(0)) {
        [1, 2]
            .into_iter()
            .filter_map(|i| cx.node.input(i))
            .map(Save::Value)
            .collect()
    } else {
        Vec::new()
    })
}

crate::named_enum! {
    /// `LinearAttention`'s recurrence.
    pub enum UpdateRule {
        /// `S += k ⊗ v`.
        Linear = "linear",
        /// `S = exp(g) · S + k ⊗ v`.
        Gated = "gated",
        /// `S += β · k ⊗ (v - Sᵀ k)`.
        Delta = "delta",
        /// The delta rule with a decay.
        GatedDelta = "gated_delta",
    }
}

/// `LinearAttention`'s attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct LinearAttention {
    pub q_num_heads: i64,
    pub kv_num_heads: i64,
    pub update_rule: UpdateRule,
}

impl FromAttrs for LinearAttention {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let need = |name: &str| -> Result<i64, String> {
            match r.int_opt(name)? {
                Some(h) if h >= 1 => Ok(h),
                Some(h) => Err(format!("attribute '{name}' must be positive, found {h}")),
                None => Err(format!("attribute '{name}' is required")),
            }
        };
        let (q_num_heads, kv_num_heads) = (need("q_num_heads")?, need("kv_num_heads")?);
        if q_num_heads % kv_num_heads != 0 {
            return Err(format!(
                "attribute 'q_num_heads' ({q_num_heads}) is not a multiple of 'kv_num_heads' ({kv_num_heads})"
            ));
        }
        let update_rule = match r.string("update_rule")? {
            None => UpdateRule::GatedDelta,
            Some(s) => s
                .parse()
                .map_err(|e| format!("attribute 'update_rule': {e}"))?,
        };
        Ok(LinearAttention {
            q_num_heads,
            kv_num_heads,
            update_rule,
        })
    }
}

/// `(B, T, d_k, d_v)` of a `LinearAttention`.
fn linear_dims(cx: &OpCx) -> InferResult<(Dim, Dim, Dim, Dim)> {
    let a = attrs!(cx, LinearAttention);
    let q = cx.shape(0)?;
    let v = cx.shape(2)?;
    if q.len() != 3 || v.len() != 3 {
        return invalid("query, key and value must be [B, T, heads x head_size]");
    }
    let dk = heads_of(&q[2], a.q_num_heads, "query")?;
    let dv = heads_of(&v[2], a.kv_num_heads, "value")?;
    Ok((q[0].clone(), q[1].clone(), dk, dv))
}

/// `LinearAttention`: output `[B, T, q_heads · d_v]`, present_state `[B, kv_heads, d_k, d_v]`.
pub fn linear_attention(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let a = attrs!(cx, LinearAttention);
    let (b, t, dk, dv) = linear_dims(cx)?;
    let dtype = cx.dtype(0);
    Ok(vec![
        Fact::new(
            dtype,
            vec![
                b.clone(),
                t,
                ovf(dv.checked_mul(&Dim::known(a.q_num_heads)), "output width")?,
            ],
        ),
        Fact::new(dtype, vec![b, Dim::known(a.kv_num_heads), dk, dv]),
    ])
}

/// `B · T · d_k · d_v · (q_heads + kv_heads)`, plus `B · T · d_k · d_v · kv_heads` for the delta
/// rules' `Sᵀ·k`.
pub fn linear_attention_macs(cx: &OpCx, _out: &[Fact]) -> Option<Dim> {
    let Op::LinearAttention(a) = cx.op else {
        return None;
    };
    let (b, t, dk, dv) = linear_dims(cx).ok()?;
    let delta = matches!(a.update_rule, UpdateRule::Delta | UpdateRule::GatedDelta);
    let heads = a
        .q_num_heads
        .checked_add(a.kv_num_heads.checked_mul(if delta { 2 } else { 1 })?)?;
    Dim::product([&b, &t, &dk, &dv, &Dim::known(heads)])
}

#[cfg(test)]
mod tests {
    use super::super::testing::{f32s, run, shapes};
    use crate::ir::{Attr, Dim};

    #[test]
    fn attention_with_a_past_and_its_macs() {
        // T = 3 past + 5 new keys; MACs 2·4·5·8·(8 + 8) = 5120
        let (out, macs) = run(
            "Attention",
            vec![],
            vec![
                f32s(&[2, 4, 5, 8]),
                f32s(&[2, 4, 5, 8]),
                f32s(&[2, 4, 5, 8]),
                None,
                f32s(&[2, 4, 3, 8]),
                f32s(&[2, 4, 3, 8]),
            ],
            23,
        );
        assert_eq!(
            shapes(&out),
            ["[2,4,5,8]", "[2,4,8,8]", "[2,4,8,8]", "[2,4,5,8]"]
        );
        assert_eq!(macs, Some(Dim::known(5120)));
    }

    #[test]
    fn packed_grouped_query_attention() {
        // head 32/4 = 8, v_head 24/2 = 12; MACs 2·4·5·6·(8 + 12) = 4800
        let (out, macs) = run(
            "Attention",
            vec![
                ("q_num_heads", Attr::Int(4)),
                ("kv_num_heads", Attr::Int(2)),
            ],
            vec![f32s(&[2, 5, 32]), f32s(&[2, 6, 16]), f32s(&[2, 6, 24])],
            23,
        );
        assert_eq!(
            shapes(&out),
            ["[2,5,48]", "[2,2,6,8]", "[2,2,6,12]", "[2,4,5,6]"]
        );
        assert_eq!(macs, Some(Dim::known(4800)));
        // heads that do not group
        let (out, _) = run(
            "Attention",
            vec![
                ("q_num_heads", Attr::Int(3)),
                ("kv_num_heads", Attr::Int(2)),
            ],
            vec![f32s(&[2, 5, 24]), f32s(&[2, 6, 16]), f32s(&[2, 6, 16])],
            23,
        );
        assert!(shapes(&out)[0].contains("do not group"), "{out:?}");
        // 3-D inputs without head counts
        let (out, _) = run(
            "Attention",
            vec![],
            vec![f32s(&[2, 5, 32]), f32s(&[2, 6, 16]), f32s(&[2, 6, 24])],
            23,
        );
        assert!(shapes(&out)[0].contains("q_num_heads"), "{out:?}");
    }

    #[test]
    fn symbolic_attention_macs() {
        let s = Dim::sym("S");
        let q = crate::analysis::fact::Fact::new(
            Some(crate::ir::DType::F32),
            vec![Dim::known(1), Dim::known(2), s.clone(), Dim::known(4)],
        );
        let (_, macs) = run(
            "Attention",
            vec![],
            vec![Some(q.clone()), Some(q.clone()), Some(q)],
            23,
        );
        // 1·2·S·S·(4 + 4)
        assert_eq!(macs.unwrap().to_string(), "16*S^2");
    }

    #[test]
    fn linear_attention_macs_per_rule() {
        let ins = || vec![f32s(&[2, 5, 8]), f32s(&[2, 5, 8]), f32s(&[2, 5, 6])];
        let heads = |rule: &str| {
            vec![
                ("q_num_heads", Attr::Int(2)),
                ("kv_num_heads", Attr::Int(2)),
                ("update_rule", Attr::String(rule.as_bytes().to_vec())),
            ]
        };
        // d_k = 4, d_v = 3: 2·5·4·3·(2 + 2) = 480; the delta rules add 2·5·4·3·2 = 240
        let (out, macs) = run("LinearAttention", heads("linear"), ins(), 27);
        assert_eq!(shapes(&out), ["[2,5,6]", "[2,2,4,3]"]);
        assert_eq!(macs, Some(Dim::known(480)));
        let (_, macs) = run("LinearAttention", heads("gated_delta"), ins(), 27);
        assert_eq!(macs, Some(Dim::known(720)));
    }

    #[test]
    fn rotary_checks_the_cache_width() {
        let (out, macs) = run(
            "RotaryEmbedding",
            vec![
                ("num_heads", Attr::Int(2)),
                ("rotary_embedding_dim", Attr::Int(4)),
            ],
            vec![f32s(&[2, 5, 16]), f32s(&[10, 2]), f32s(&[10, 2])],
            23,
        );
        assert_eq!(shapes(&out), ["[2,5,16]"]);
        assert_eq!(macs, Some(Dim::ZERO));
        let (out, _) = run(
            "RotaryEmbedding",
            vec![],
            vec![f32s(&[2, 4, 5, 8]), f32s(&[10, 3]), f32s(&[10, 3])],
            23,
        );
        assert!(
            shapes(&out)[0].contains("half the rotated width"),
            "{out:?}"
        );
    }
}
