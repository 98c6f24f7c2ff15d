//! `large-fc-head` (NL102): a Flatten/Reshape of a spatial feature map feeding a fully-connected
//! layer that holds a large share of the parameters. Global average pooling first makes the layer
//! `H × W` times smaller.
//!
//! Preconditions: a `Gemm` or `MatMul` whose second input is a stored 2-D weight reading
//! `C·H·W` features, fed (through Identity, Dropout and Cast) by a `Flatten` or `Reshape` of an
//! `N × C × spatial` map that a convolution or a pooling produced (through element-wise ops and
//! norms), every spatial axis at least `min-spatial` wide. A model input, a sequence or an
//! embedding flattened into a layer is not a feature map and never fires.

use std::collections::HashSet;

use serde::Deserialize;

use super::heavy_conv::round4;
use super::{options, Finding, Fix, LintContext, Rule, Saving};
use crate::analysis::ops::Op;
use crate::ir::{NodeId, ValueId};
use crate::util::units::count;

pub struct LargeFcHead;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    min_share: f64,
    min_spatial: u64,
}

/// Follows pass-through ops (Identity, Dropout, Cast) back from `v`: the value they start from,
/// and the nodes passed, nearest first.
fn through_passthrough(cx: &LintContext, mut v: ValueId) -> (ValueId, Vec<NodeId>) {
    let mut passed = Vec::new();
    while let Some((n, node)) = cx.producer(v) {
        match (cx.op(n), node.input(0)) {
            (Op::Identity | Op::Dropout(_) | Op::Cast(_), Some(x)) if passed.len() < 16 => {
                passed.push(n);
                v = x;
            }
            _ => break,
        }
    }
    (v, passed)
}

/// Whether a value is a feature map: made by a convolution or a pooling, through element-wise
/// ops, activations and norms (a residual `Add` counts when one of its inputs is a map).
fn from_conv_or_pool(cx: &LintContext, v: ValueId) -> bool {
    let mut stack = vec![v];
    let mut seen = HashSet::new();
    while let Some(v) = stack.pop() {
        if !seen.insert(v) || seen.len() > 64 {
            continue;
        }
        let Some((n, node)) = cx.producer(v) else {
            continue;
        };
        match cx.op(n) {
            Op::Conv(_)
            | Op::ConvTranspose(_)
            | Op::MaxPool(_)
            | Op::AveragePool(_)
            | Op::LpPool(_) => return true,
            Op::Relu
            | Op::LeakyRelu(_)
            | Op::Clip(_)
            | Op::Sigmoid
            | Op::HardSigmoid(_)
            | Op::HardSwish
            | Op::Elu(_)
            | Op::Selu(_)
            | Op::Celu(_)
            | Op::Gelu(_)
            | Op::Mish
            | Op::Softplus
            | Op::Tanh
            | Op::PRelu
            | Op::BatchNormalization(_)
            | Op::InstanceNormalization(_)
            | Op::GroupNormalization(_)
            | Op::Dropout(_)
            | Op::Identity
            | Op::Cast(_)
            | Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div => {
                // only inputs of the map's rank carry the map (not a broadcast scale or bias)
                let rank = cx.facts[v].rank();
                stack.extend(
                    node.inputs()
                        .iter()
                        .flatten()
                        .filter(|&i| cx.facts[i].rank() == rank),
                );
            }
            _ => {}
        }
    }
    false
}

impl Rule for LargeFcHead {
    fn name(&self) -> &'static str {
        "large-fc-head"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL102-large-fc-head")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        options::<Options>(self.meta(), user).map(|_| ())
    }

    fn check(&self, cx: &LintContext, user: &toml::Table) -> Result<Vec<Finding>, String> {
        let o: Options = options(self.meta(), user)?;
        let meta = self.meta();
        let g = cx.graph();
        let total = cx.report.totals.params;
        let per_param = crate::analysis::training::bytes_per_param(&cx.settings.train);
        let mut out = Vec::new();
        for (n, node) in g.nodes.iter().enumerate() {
            let trans_b = match cx.op(n) {
                Op::Gemm(gemm) if !gemm.trans_a => gemm.trans_b,
                Op::QGemm(gemm) if !gemm.trans_a => gemm.trans_b,
                Op::MatMul | Op::MatMulInteger | Op::QLinearMatMul => false,
                _ => continue,
            };
            let Some(a) = node.input(0) else { continue };
            let Some(lw) = cx.layer_weight(n) else {
                continue;
            };
            if lw.dims.len() != 2 {
                continue;
            }
            let wt = &lw;
            let (flat_v, through) = through_passthrough(cx, a);
            let Some((f, flat)) = cx.producer(flat_v) else {
                continue;
            };
            if !matches!(cx.op(f), Op::Flatten(_) | Op::Reshape(_)) {
                continue;
            }
            let Some(x) = flat.input(0) else { continue };
            let Some(map) = cx.shape(x) else { continue };
            let flat_shape = cx.shape(flat_v).unwrap_or_default();
            if map.len() < 3 || flat_shape.len() != 2 || flat_shape.first() != map.first() {
                continue;
            }
            if map[2..].iter().any(|&d| d < o.min_spatial) || !from_conv_or_pool(cx, x) {
                continue;
            }
            let c = map[1];
            let Some(spatial) = map[2..].iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
                continue;
            };
            let params = cx.layer_params(n);
            let share = if total > 0 {
                params as f64 / total as f64
            } else {
                0.0
            };
            if share < o.min_share {
                continue;
            }
            // the output width is the weight dimension that is not C*H*W
            let (k_w, n_out) = if trans_b {
                (wt.dims[1], wt.dims[0])
            } else {
                (wt.dims[0], wt.dims[1])
            };
            if Some(k_w) != c.checked_mul(spatial) {
                continue;
            }
            let bias_slot = if matches!(cx.op(n), Op::QGemm(_)) {
                6
            } else {
                2
            };
            let bias = node
                .input(bias_slot)
                .and_then(|v| cx.weight(v).or_else(|| cx.dequantized_weight(v)))
                .and_then(|t| t.numel())
                .unwrap_or(0);
            let new_params = c.saturating_mul(n_out).saturating_add(bias);
            let saved = params.saturating_sub(new_params);
            let batch = cx.shape(a).and_then(|s| s.first().copied()).unwrap_or(1);
            let map_text: Vec<String> = map[1..].iter().map(|d| d.to_string()).collect();
            out.push(Finding {
                code: &meta.code,
                name: &meta.name,
                severity: meta.severity,
                node: g.name(node.name).to_string(),
                op: node.op_type.to_string(),
                message: format!(
                    "a flattened {} feature map feeds a {k_w} -> {n_out} layer holding {:.1}% of the parameters ({})",
                    map_text.join("x"),
                    share * 100.0,
                    count(params)
                ),
                measured: round4(share),
                limit: o.min_share,
                unit: "share of parameters",
                fix: lw.fix_text(format!(
                    "GlobalAveragePool -> Flatten -> {} {c} -> {n_out} ({} parameters), W'[n,c] = the sum of W[n,c,h,w] over h,w",
                    node.op_type,
                    count(new_params)
                )),
                saving: Saving {
                    params: Some(saved),
                    bytes: Some(lw.bytes(saved)),
                    macs: Some(batch.saturating_mul(saved)),
                    training_bytes: Some(saved.saturating_mul(per_param) as i64),
                },
                rewrite: lw
                    .quantized
                    .is_none()
                    .then(|| Fix::gap_head(n, f, through)),
            });
        }
        Ok(out)
    }
}
