//! `large-fc-head` (NL102): a Flatten/Reshape of a spatial feature map feeding a fully-connected
//! layer that holds a large share of the parameters. Global average pooling first makes the layer
//! `H × W` times smaller.

use serde::Deserialize;

use super::heavy_conv::round4;
use super::{options, Finding, LintContext, Rule, Saving};
use crate::ir::ValueId;
use crate::util::units::count;

pub struct LargeFcHead;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    /// Smallest share of the model's parameters the head's weight holds.
    min_share: f64,
    /// Smallest spatial size of the flattened map.
    min_spatial: u64,
}

/// Follows pass-through ops (Identity, Dropout, Cast) back to the value that feeds them.
fn through_passthrough(cx: &LintContext, mut v: ValueId) -> ValueId {
    while let Some((_, node)) = cx.producer(v) {
        match node.op_type.as_str() {
            "Identity" | "Dropout" | "Cast" => match node.input(0) {
                Some(x) => v = x,
                None => break,
            },
            _ => break,
        }
    }
    v
}

impl Rule for LargeFcHead {
    fn name(&self) -> &'static str {
        "large-fc-head"
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
            if !matches!(node.op_type.as_str(), "Gemm" | "MatMul") {
                continue;
            }
            let (Some(a), Some(b)) = (node.input(0), node.input(1)) else {
                continue;
            };
            let Some(wt) = g.values[b].init.as_ref() else {
                continue;
            };
            let Some((_, flat)) = cx.producer(through_passthrough(cx, a)) else {
                continue;
            };
            if !matches!(flat.op_type.as_str(), "Flatten" | "Reshape") {
                continue;
            }
            let Some(map) = flat.input(0).and_then(|x| cx.shape(x)) else {
                continue;
            };
            if map.len() < 3 {
                continue;
            }
            let c = map[1];
            let spatial: u64 = map[2..].iter().product();
            let params: u64 = wt.numel().unwrap_or(0);
            let share = if total > 0 {
                params as f64 / total as f64
            } else {
                0.0
            };
            if spatial < o.min_spatial || share < o.min_share || wt.dims.len() != 2 {
                continue;
            }
            // the output width is the weight dimension that is not C*H*W
            let k = c * spatial;
            let trans_b =
                node.op_type == "Gemm" && node.attrs.int_or("transB", 0).unwrap_or(0) != 0;
            let (k_w, n_out) = if trans_b {
                (wt.dims[1], wt.dims[0])
            } else {
                (wt.dims[0], wt.dims[1])
            };
            if k_w != k {
                continue;
            }
            let new_params = c * n_out;
            let saved = params - new_params;
            let elem = wt.dtype.bytes_for(1).unwrap_or(4);
            let batch = cx.shape(a).and_then(|s| s.first().copied()).unwrap_or(1);
            let map_text: Vec<String> = map[1..].iter().map(|d| d.to_string()).collect();
            out.push(Finding {
                code: &meta.code,
                name: &meta.name,
                severity: meta.severity,
                node: g.nodes[n].name.clone(),
                op: node.op_type.clone(),
                message: format!(
                    "a flattened {} feature map feeds a {k} -> {n_out} layer holding {:.1}% of the parameters ({})",
                    map_text.join("x"),
                    share * 100.0,
                    count(params)
                ),
                measured: round4(share),
                limit: o.min_share,
                unit: "share of parameters",
                fix: format!(
                    "GlobalAveragePool -> Flatten -> {} {c} -> {n_out} ({} parameters), W'[n,c] = the sum of W[n,c,h,w] over h,w",
                    node.op_type,
                    count(new_params)
                ),
                saving: Saving {
                    params: Some(saved),
                    bytes: Some(saved * elem),
                    macs: Some(batch * saved),
                    training_bytes: Some((saved * per_param) as i64),
                },
            });
        }
        Ok(out)
    }
}
