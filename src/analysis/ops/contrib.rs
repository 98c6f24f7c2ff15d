//! onnxruntime's transformer contrib ops (`com.microsoft`), as its transformer optimizer and its
//! generative-AI exports emit them: fused attention (`Attention`, `MultiHeadAttention`,
//! `GroupQueryAttention`, `QAttention`), rotary embeddings, the fused norms
//! (`SkipLayerNormalization`, `SkipSimplifiedLayerNormalization`, `EmbedLayerNormalization`,
//! `QEmbedLayerNormalization`), fused activations (`BiasGelu`, `FastGelu`, `Gelu`, `QuickGelu`,
//! `BiasAdd`), `FusedMatMul`, and the 4-bit weight ops (`MatMulNBits`, `GatherBlockQuantized`).
//! Inputs and outputs follow onnxruntime's `docs/ContribOperators.md`.
//!
//! MACs: an attention computes its projections (where the op holds them) and, per head,
//! `Q·Kᵀ` and `P·V`: `2 · B · heads · S · T · head_size` for `S` queries over `T` keys.

use super::linalg::{matmul_dims_of, MatMulDims};
use super::{
    attrs, invalid, ovf, AttrReader, FromAttrs, InferError, InferResult, Op, OpCx, SlotRole,
};
use crate::analysis::fact::Fact;
use crate::ir::{Attrs, DType, Dim};

/// The head count (and KV head count) of an attention op.
#[derive(Clone, Debug, PartialEq)]
pub struct Heads {
    pub num_heads: i64,
    pub kv_num_heads: Option<i64>,
    /// `Attention`: sizes of Q, K and V when they differ.
    pub qkv_hidden_sizes: Option<Vec<i64>>,
    pub unidirectional: bool,
    /// The value added to masked-out scores (`-10000` by default).
    pub mask_filter_value: f32,
    /// The scores' scale (`1 / sqrt(head_size)` when absent or 0).
    pub scale: Option<f32>,
}

impl FromAttrs for Heads {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let num_heads = r
            .int_opt("num_heads")?
            .ok_or("attribute 'num_heads' is required")?;
        if num_heads < 1 {
            return Err(format!(
                "attribute 'num_heads' must be positive, found {num_heads}"
            ));
        }
        Ok(Heads {
            num_heads,
            kv_num_heads: r.int_opt("kv_num_heads")?,
            qkv_hidden_sizes: r.ints("qkv_hidden_sizes")?,
            unidirectional: r.flag("unidirectional", false)?,
            mask_filter_value: r.float("mask_filter_value", -10000.0)?,
            scale: r.float_opt("scale")?.filter(|&s| s != 0.0),
        })
    }
}

/// The `epsilon` of the fused norms (`SkipLayerNormalization`, `SkipSimplifiedLayerNormalization`,
/// `EmbedLayerNormalization`; 1e-12 by default).
#[derive(Clone, Debug, PartialEq)]
pub struct FusedNorm {
    pub epsilon: f32,
}

impl FromAttrs for FusedNorm {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        Ok(FusedNorm {
            epsilon: AttrReader(a).float("epsilon", 1e-12)?,
        })
    }
}

/// `RotaryEmbedding`'s attributes (`com.microsoft`).
#[derive(Clone, Debug, PartialEq)]
pub struct Rotary {
    /// Pairs are adjacent elements (`x[2i]`, `x[2i+1]`) rather than the two halves.
    pub interleaved: bool,
    /// Needed for a 3-D input whose hidden size is heads × head size with a partial rotation.
    pub num_heads: i64,
    /// How many leading elements of each head rotate (0: all).
    pub rotary_embedding_dim: i64,
    pub scale: f32,
    pub is_packed_batching: bool,
}

impl FromAttrs for Rotary {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(Rotary {
            interleaved: r.flag("interleaved", false)?,
            num_heads: r.int("num_heads", 0)?,
            rotary_embedding_dim: r.int("rotary_embedding_dim", 0)?,
            scale: r.float("scale", 1.0)?,
            is_packed_batching: r.flag("is_packed_batching", false)?,
        })
    }
}

/// `MatMulNBits`' attributes: `Y = A × dequantize(B)ᵀ`, B `[N, K/block, block·bits/8]`.
#[derive(Clone, Debug, PartialEq)]
pub struct NBits {
    pub k: i64,
    pub n: i64,
    pub bits: i64,
    pub block_size: i64,
}

impl FromAttrs for NBits {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        let need = |name: &str| -> Result<i64, String> {
            r.int_opt(name)?
                .ok_or_else(|| format!("attribute '{name}' is required"))
        };
        Ok(NBits {
            k: need("K")?,
            n: need("N")?,
            bits: r.int("bits", 4)?,
            block_size: need("block_size")?,
        })
    }
}

/// `GatherBlockQuantized`' attributes.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockGather {
    pub bits: i64,
    pub gather_axis: i64,
}

impl FromAttrs for BlockGather {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        Ok(BlockGather {
            bits: r.int("bits", 4)?,
            gather_axis: r.int("gather_axis", 0)?,
        })
    }
}

/// `FusedMatMul`'s attributes: transposes of the last two axes (and of the batch axes).
#[derive(Clone, Debug, PartialEq)]
pub struct FusedMatMul {
    pub trans_a: bool,
    pub trans_b: bool,
}

impl FromAttrs for FusedMatMul {
    fn from_attrs(a: &Attrs, _opset: i64) -> Result<Self, String> {
        let r = AttrReader(a);
        if r.flag("transBatchA", false)? || r.flag("transBatchB", false)? {
            return Err("attributes 'transBatchA'/'transBatchB' are not supported".into());
        }
        Ok(FusedMatMul {
            trans_a: r.flag("transA", false)?,
            trans_b: r.flag("transB", false)?,
        })
    }
}

/// `Attention`: input, weights (a parameter), bias, mask_index, past, attention_bias, ...
pub const ATTENTION: &[SlotRole] = &[
    SlotRole::Data,
    SlotRole::Data,
    SlotRole::Data,
    SlotRole::Config,
];
/// `EmbedLayerNormalization`: input_ids and segment_ids and mask are indices; gamma and beta
/// the norm's scale and bias.
pub const EMBED_LN: &[SlotRole] = &[
    SlotRole::Config,
    SlotRole::Config,
    SlotRole::Data,
    SlotRole::Data,
    SlotRole::Data,
    SlotRole::Affine,
    SlotRole::Affine,
    SlotRole::Config,
    SlotRole::Config,
];
/// `MatMulNBits`: A, B (packed), scales, zero points, g_idx, bias.
pub const NBITS: &[SlotRole] = &[
    SlotRole::Data,
    SlotRole::QuantWeight,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::Config,
    SlotRole::Data,
];
/// `GatherBlockQuantized`: data (packed), indices, scales, zero points.
pub const BLOCK_GATHER: &[SlotRole] = &[
    SlotRole::QuantWeight,
    SlotRole::Config,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
];
/// `QAttention`: input, weight (int8), bias, input_scale, weight_scale, mask, zero points, past.
pub const QATTENTION: &[SlotRole] = &[
    SlotRole::Data,
    SlotRole::QuantWeight,
    SlotRole::Data,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::Config,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
];
/// `QEmbedLayerNormalization`: ids, quantized tables and norms, their scales and zero points.
pub const QEMBED_LN: &[SlotRole] = &[
    SlotRole::Config,
    SlotRole::Config,
    SlotRole::QuantWeight,
    SlotRole::QuantWeight,
    SlotRole::QuantWeight,
    SlotRole::QuantWeight,
    SlotRole::QuantWeight,
    SlotRole::Config,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
    SlotRole::QuantParam,
];

fn same(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    Ok(vec![Fact {
        dtype: x.dtype,
        shape: x.shape.clone(),
        value: None,
    }])
}

/// `BiasGelu`, `FastGelu`, `Gelu`, `QuickGelu`, `BiasAdd`, `RotaryEmbedding`: like X.
pub fn like_input(cx: &OpCx) -> InferResult<Vec<Fact>> {
    same(cx)
}

/// `SkipLayerNormalization`, `SkipSimplifiedLayerNormalization`: output like input; mean and
/// inv_std_var `[..., 1]` in float; input_skip_bias_sum like input.
pub fn skip_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let x = cx.input(0)?;
    let s = cx.shape(0)?;
    let mut stat = s.to_vec();
    if let Some(last) = stat.last_mut() {
        *last = Dim::known(1);
    }
    Ok(vec![
        Fact::new(x.dtype, s.to_vec()),
        Fact::new(Some(DType::F32), stat.clone()),
        Fact::new(Some(DType::F32), stat),
        Fact::new(x.dtype, s.to_vec()),
    ])
}

/// `EmbedLayerNormalization`, `QEmbedLayerNormalization`: `[B, S, hidden]` (float), mask_index
/// `[B]` (int32), embedding_sum like the output.
pub fn embed_norm(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let ids = cx.shape(0)?;
    if ids.len() != 2 {
        return invalid(format!("input_ids has rank {}, expected 2", ids.len()));
    }
    let word = cx.shape(2)?;
    let hidden = word
        .last()
        .cloned()
        .ok_or_else(|| InferError::Invalid("word_embedding has rank 0".into()))?;
    let dtype = match cx.op {
        Op::QEmbedLayerNormalization => Some(DType::F32),
        _ => cx.dtype(2),
    };
    let out = vec![ids[0].clone(), ids[1].clone(), hidden];
    Ok(vec![
        Fact::new(dtype, out.clone()),
        Fact::new(Some(DType::I32), vec![ids[0].clone()]),
        Fact::new(dtype, out),
    ])
}

/// `Attention`, `QAttention`: input `[B, S, H]` projected by weights `[H, Q+K+V]` into
/// `num_heads` heads; output `[B, S, V]`; present `[2, B, heads, past + S, head_size]`.
pub fn attention(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let h = attrs!(cx, MsAttention | QAttention);
    let x = cx.shape(0)?;
    let w = cx.shape(1)?;
    if x.len() != 3 || w.len() != 2 {
        return invalid("input must be [B, S, H] and weights [H, 3H]");
    }
    let (q, v) = match &h.qkv_hidden_sizes {
        Some(s) if s.len() == 3 => (Dim::known(s[0]), Dim::known(s[2])),
        Some(_) => return invalid("qkv_hidden_sizes must have 3 values"),
        None => {
            let third = w[1].div_exact(&Dim::known(3)).ok_or_else(|| {
                InferError::Invalid("weights do not split into Q, K and V".into())
            })?;
            (third.clone(), third)
        }
    };
    let out = vec![x[0].clone(), x[1].clone(), v];
    let mut facts = vec![Fact::new(
        cx.dtype(0)
            .filter(|_| !matches!(cx.op, Op::QAttention(_)))
            .or(Some(DType::F32)),
        out,
    )];
    let past_slot = if matches!(cx.op, Op::QAttention(_)) {
        8
    } else {
        4
    };
    if let Some(past) = cx.opt_input(past_slot).and_then(|f| f.shape.as_deref()) {
        if past.len() == 5 {
            let total = ovf(past[3].checked_add(&x[1]), "past + sequence")?;
            let mut p = past.to_vec();
            p[3] = total;
            facts.push(Fact::new(facts[0].dtype, p));
        }
    } else {
        let head = ovf(q.floor_div(h.num_heads), "head size")?;
        facts.push(Fact::new(
            facts[0].dtype,
            vec![
                Dim::known(2),
                x[0].clone(),
                Dim::known(h.num_heads),
                x[1].clone(),
                head,
            ],
        ));
    }
    Ok(facts)
}

/// The projections and both attention products of an `Attention`.
pub fn attention_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let x = cx.shape(0).ok()?;
    let w = cx.shape(1).ok()?;
    let proj = Dim::product([&x[0], &x[1], &w[0], &w[1]])?;
    // keys: the present's sequence (past + S)
    let t = out.get(1)?.shape.as_ref()?.get(3)?.clone();
    let v = out.first()?.shape.as_ref()?.get(2)?.clone();
    // 2 · B · S · T · (Q size ≈ V size): heads × head_size summed over heads
    let attn = Dim::product([&Dim::known(2), &x[0], &x[1], &t, &v])?;
    proj.checked_add(&attn)
}

/// `MultiHeadAttention`: query `[B, S, D]` with key/value `[B, L, D]` (or `[B, heads, L, head]`, or
/// packed); output `[B, S, Dv]`; present_key/value `[B, heads, past + L, head]`.
pub fn multi_head_attention(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let h = attrs!(cx, MultiHeadAttention);
    let q = cx.shape(0)?;
    let heads = Dim::known(h.num_heads);
    match q.len() {
        3 => {}
        5 => {
            // packed QKV [B, S, heads, 3, head]
            let out = vec![
                q[0].clone(),
                q[1].clone(),
                ovf(q[2].checked_mul(&q[4]), "hidden size")?,
            ];
            return Ok(vec![Fact::new(cx.dtype(0), out)]);
        }
        r => return invalid(format!("query has rank {r}, expected 3 or 5")),
    }
    let (b, s, d) = (q[0].clone(), q[1].clone(), q[2].clone());
    let head = ovf(d.floor_div(h.num_heads), "head size")?;
    let (l, dv) = match cx.opt_input(2).and_then(|f| f.shape.as_deref()) {
        Some(v) if v.len() == 3 => (v[1].clone(), v[2].clone()),
        Some(v) if v.len() == 4 => (v[2].clone(), ovf(v[1].checked_mul(&v[3]), "hidden")?),
        _ => match cx.opt_input(1).and_then(|f| f.shape.as_deref()) {
            // packed KV [B, L, heads, 2, head]
            Some(k) if k.len() == 5 => (k[1].clone(), ovf(k[2].checked_mul(&k[4]), "hidden")?),
            Some(k) if k.len() == 3 => (k[1].clone(), d.clone()),
            _ => (s.clone(), d.clone()),
        },
    };
    let past = cx
        .opt_input(6)
        .and_then(|f| f.shape.as_deref())
        .and_then(|p| p.get(2).cloned());
    let total = match past {
        Some(p) => ovf(p.checked_add(&l), "past + sequence")?,
        None => l,
    };
    let v_head = ovf(dv.floor_div(h.num_heads), "head size")?;
    let dtype = cx.dtype(0);
    Ok(vec![
        Fact::new(dtype, vec![b.clone(), s, dv]),
        Fact::new(dtype, vec![b.clone(), heads.clone(), total.clone(), head]),
        Fact::new(dtype, vec![b, heads, total, v_head]),
    ])
}

/// `2 · B · S · T · D` for `S` queries over `T` keys of total width `D`.
pub fn mha_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let y = out.first()?.shape.as_ref()?;
    let t = match out.get(1).and_then(|f| f.shape.as_ref()) {
        Some(pk) => pk.get(2)?.clone(),
        None => y.get(1)?.clone(),
    };
    let q = cx.shape(0).ok()?;
    Dim::product([&Dim::known(2), &y[0], &y[1], &t, q.get(2)?])
}

/// `GroupQueryAttention`: query `[B, S, D]` (or packed `[B, S, D + 2·kv_D]`), key/value
/// `[B, S, kv_D]`, past_key/value `[B, kv_heads, P, head]`; output `[B, S, D]`; present
/// `[B, kv_heads, max(P, total), head]`.
pub fn group_query_attention(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let h = attrs!(cx, GroupQueryAttention);
    let kv_heads = h
        .kv_num_heads
        .ok_or_else(|| InferError::Invalid("attribute 'kv_num_heads' is required".into()))?;
    let q = cx.shape(0)?;
    if q.len() != 3 {
        return invalid(format!("query has rank {}, expected 3", q.len()));
    }
    let packed = cx.opt_input(1).is_none();
    let head = if packed {
        // D + 2 · kv_heads · head = (heads + 2 · kv_heads) · head
        ovf(q[2].floor_div(h.num_heads + 2 * kv_heads), "head size")?
    } else {
        let k = cx.shape(1)?;
        ovf(
            k.get(2).ok_or(InferError::Unknown)?.floor_div(kv_heads),
            "head size",
        )?
    };
    let d = ovf(head.checked_mul(&Dim::known(h.num_heads)), "hidden size")?;
    let total: Dim = match cx
        .opt_input(6)
        .and_then(|f| f.value.as_deref())
        .and_then(|v| v.as_dims())
    {
        Some(t) if t.len() == 1 => t[0].clone(),
        _ => {
            let past = cx
                .opt_input(3)
                .and_then(|f| f.shape.as_deref())
                .and_then(|p| p.get(2).cloned());
            match past {
                Some(p) => ovf(p.checked_add(&q[1]), "past + sequence")?,
                None => q[1].clone(),
            }
        }
    };
    let present_len = match cx
        .opt_input(3)
        .and_then(|f| f.shape.as_deref())
        .and_then(|p| p.get(2).cloned())
    {
        Some(p) => match (p.as_i64(), total.as_i64()) {
            (Some(a), Some(b)) => Dim::known(a.max(b)),
            _ => total.clone(),
        },
        None => total.clone(),
    };
    let dtype = cx.dtype(0);
    let kv = vec![q[0].clone(), Dim::known(kv_heads), present_len, head];
    Ok(vec![
        Fact::new(dtype, vec![q[0].clone(), q[1].clone(), d]),
        Fact::new(dtype, kv.clone()),
        Fact::new(dtype, kv),
    ])
}

/// `2 · B · S · T · D` over the present's `T` keys.
pub fn gqa_macs(cx: &OpCx, out: &[Fact]) -> Option<Dim> {
    let y = out.first()?.shape.as_ref()?;
    let t = out.get(1)?.shape.as_ref()?.get(2)?.clone();
    let _ = cx;
    Dim::product([&Dim::known(2), &y[0], &y[1], &t, &y[2]])
}

fn fused_dims(cx: &OpCx) -> InferResult<MatMulDims> {
    let f = attrs!(cx, FusedMatMul);
    let t = |s: &[Dim], yes: bool| -> Vec<Dim> {
        let mut v = s.to_vec();
        let n = v.len();
        if yes && n >= 2 {
            v.swap(n - 1, n - 2);
        }
        v
    };
    matmul_dims_of(&t(cx.shape(0)?, f.trans_a), &t(cx.shape(1)?, f.trans_b))
}

/// `FusedMatMul`: `alpha · A' B'` with the last two axes transposed as asked.
pub fn fused_matmul(cx: &OpCx) -> InferResult<Vec<Fact>> {
    Ok(vec![Fact::new(cx.dtype(0), fused_dims(cx)?.out)])
}

pub fn fused_matmul_macs(cx: &OpCx, _: &[Fact]) -> Option<Dim> {
    fused_dims(cx).ok()?.macs()
}

/// `MatMulNBits`: `A[..., K] × B[K, N]` with B stored in `bits`-bit blocks: `[..., N]`.
pub fn matmul_nbits(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let nb = attrs!(cx, MatMulNBits);
    let a = cx.shape(0)?;
    let Some((last, rest)) = a.split_last() else {
        return invalid("A has rank 0");
    };
    if let Some(k) = last.as_i64() {
        if k != nb.k {
            return invalid(format!("A's last axis is {k}, attribute K is {}", nb.k));
        }
    }
    let mut out = rest.to_vec();
    out.push(Dim::known(nb.n));
    Ok(vec![Fact::new(cx.dtype(0), out)])
}

pub fn matmul_nbits_macs(cx: &OpCx, _: &[Fact]) -> Option<Dim> {
    let Op::MatMulNBits(nb) = cx.op else {
        return None;
    };
    let a = cx.shape(0).ok()?;
    Dim::product(a.iter())?.checked_mul(&Dim::known(nb.n))
}

/// `GatherBlockQuantized`: a `Gather` of the dequantized table (a packed uint8 table holds
/// `8 / bits` values per byte on its last axis); the output takes the scales' type.
pub fn gather_block_quantized(cx: &OpCx) -> InferResult<Vec<Fact>> {
    let g = attrs!(cx, GatherBlockQuantized);
    let mut data = cx.shape(0)?.to_vec();
    let idx = cx.shape(1)?;
    if data.is_empty() {
        return invalid("data has rank 0");
    }
    if cx.dtype(0) == Some(DType::U8) && g.bits > 0 && g.bits < 8 {
        let per = 8 / g.bits;
        if let Some(last) = data.last_mut() {
            *last = ovf(last.checked_mul(&Dim::known(per)), "unpacked size")?;
        }
    }
    let a = super::axis(g.gather_axis, data.len())?;
    let mut out = data[..a].to_vec();
    out.extend_from_slice(idx);
    out.extend_from_slice(&data[a + 1..]);
    Ok(vec![Fact::new(cx.dtype(2), out)])
}
