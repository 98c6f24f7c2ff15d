//! `heavy-standard-conv` (NL101): a standard convolution that a depthwise-separable pair would make
//! several times cheaper. The pair costs `1/C_out + 1/k²` of the original (MobileNets).
//!
//! Preconditions: a `Conv` with `group = 1`, a stored weight of rank 3 or more with a kernel of at
//! least `min-kernel-area` cells and `min-in-channels` input channels, whose MACs at the
//! configured batch are known and at least `min-macs`. Not a convolution an earlier depthwise
//! rewrite made.

use serde::Deserialize;

use super::{options, Finding, Fix, LintContext, RewriteKind, Rule, Saving};
use crate::analysis::ops::Op;
use crate::util::units::count;

pub struct HeavyConv;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    min_kernel_area: u64,
    min_in_channels: u64,
    min_saving: f64,
    min_macs: u64,
}

/// The rank `nnlint rewrite` uses by default: 1, the MobileNet block.
const DEFAULT_RANK: u64 = 1;

impl Rule for HeavyConv {
    fn name(&self) -> &'static str {
        "heavy-standard-conv"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL101-heavy-standard-conv")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        options::<Options>(self.meta(), user).map(|_| ())
    }

    fn check(&self, cx: &LintContext, user: &toml::Table) -> Result<Vec<Finding>, String> {
        let o: Options = options(self.meta(), user)?;
        let meta = self.meta();
        let g = cx.graph();
        let per_param = crate::analysis::training::bytes_per_param(&cx.settings.train);
        let mut out = Vec::new();
        for (n, node) in g.nodes.iter().enumerate() {
            let (Op::Conv(conv) | Op::ConvInteger(conv) | Op::QLinearConv(conv)) = cx.op(n) else {
                continue;
            };
            if conv.group != 1 || cx.made_by(n, RewriteKind::DepthwiseSeparable) {
                continue;
            }
            let Some(y) = node.output(0) else { continue };
            let Some(lw) = cx.layer_weight(n) else {
                continue;
            };
            let ws = &lw.dims;
            if ws.len() < 3 {
                continue;
            }
            let (m, c) = (ws[0], ws[1]);
            let Some(k) = ws[2..].iter().try_fold(1u64, |a, &d| a.checked_mul(d)) else {
                continue;
            };
            if k < o.min_kernel_area || c < o.min_in_channels || m == 0 {
                continue;
            }
            let ratio = 1.0 / m as f64 + 1.0 / k as f64;
            let saving = 1.0 - ratio;
            // unknown MACs (an unbound dimension) cannot be compared with the threshold
            let Some(macs) = cx.macs[n] else { continue };
            if saving < o.min_saving || macs < o.min_macs {
                continue;
            }
            let old_params = cx.layer_params(n);
            let bias_slot = if matches!(cx.op(n), Op::QLinearConv(_)) {
                8
            } else {
                2
            };
            let bias = node
                .input(bias_slot)
                .and_then(|b| cx.weight(b).or_else(|| cx.dequantized_weight(b)))
                .and_then(|t| t.numel())
                .unwrap_or(0);
            let new_params = c
                .saturating_mul(k)
                .saturating_add(c.saturating_mul(m))
                .saturating_add(bias);
            let params_saved = old_params.saturating_sub(new_params);
            let new_macs = (macs as f64 * ratio).round() as u64;
            // the depthwise output is a new activation the pointwise conv saves for backward
            let y_shape = cx.shape(y).unwrap_or_default();
            let dw_out: u64 =
                y_shape.first().copied().unwrap_or(1) * c * y_shape.iter().skip(2).product::<u64>();
            let act_elem = if cx.settings.train.precision == crate::analysis::saved::Precision::Fp32
            {
                4
            } else {
                2
            };
            let training = (params_saved.saturating_mul(per_param)) as i64
                - dw_out.saturating_mul(act_elem) as i64;
            let kernel: Vec<String> = ws[2..].iter().map(|d| d.to_string()).collect();
            out.push(Finding {
                code: &meta.code,
                name: &meta.name,
                severity: meta.severity,
                node: g.name(node.name).to_string(),
                op: node.op_type.to_string(),
                message: format!(
                    "standard {} convolution {c} -> {m}: {} MACs, {} parameters; a depthwise-separable pair costs {:.1}% of that",
                    kernel.join("x"),
                    count(macs),
                    count(old_params),
                    ratio * 100.0
                ),
                measured: round4(saving),
                limit: o.min_saving,
                unit: "share saved",
                fix: lw.fix_text(format!(
                    "depthwise {} conv (group {c}) then 1x1 conv {c} -> {m}: {} parameters, {} MACs",
                    kernel.join("x"),
                    count(new_params),
                    count(new_macs),
                )),
                saving: Saving {
                    params: Some(params_saved),
                    bytes: Some(lw.bytes(params_saved)),
                    macs: Some(macs.saturating_sub(new_macs)),
                    training_bytes: Some(training),
                },
                rewrite: lw
                    .quantized
                    .is_none()
                    .then(|| Fix::depthwise(n, DEFAULT_RANK, m.min(k))),
            });
        }
        Ok(out)
    }
}

pub(crate) fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}
