//! `fp32-weights` (NL202): a large model stored in fp32.

use serde::Deserialize;

use super::{options, Finding, LintContext, Rule, Saving};
use crate::analysis::storage::{self, Role};
use crate::ir::DType;
use crate::util::units::bytes;

pub struct Fp32Weights;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    /// Smallest fp32 parameter bytes reported.
    min_bytes: u64,
}

impl Rule for Fp32Weights {
    fn name(&self) -> &'static str {
        "fp32-weights"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL202-fp32-weights")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        options::<Options>(self.meta(), user).map(|_| ())
    }

    fn check(&self, cx: &LintContext, user: &toml::Table) -> Result<Vec<Finding>, String> {
        let o: Options = options(self.meta(), user)?;
        let meta = self.meta();
        let g = cx.graph();
        let (mut n, mut fp32) = (0u64, 0u64);
        for (id, t) in g.initializers() {
            let numel = t.numel().unwrap_or(0);
            if t.dtype == DType::F32 && storage::classify(g, id, t.dtype, numel) == Role::Param {
                n += numel;
                fp32 += t.byte_size().unwrap_or(0);
            }
        }
        if fp32 < o.min_bytes {
            return Ok(Vec::new());
        }
        Ok(vec![Finding {
            code: &meta.code,
            rewrite: None,
            name: &meta.name,
            severity: meta.severity,
            node: cx.model_label(),
            op: "model".into(),
            message: format!(
                "{} of parameters are stored in fp32 (limit {})",
                bytes(fp32),
                bytes(o.min_bytes)
            ),
            measured: fp32 as f64,
            limit: o.min_bytes as f64,
            unit: "bytes",
            fix: format!("store the weights in fp16 or bf16: {}", bytes(fp32 / 2)),
            saving: Saving {
                params: None,
                bytes: Some(fp32 - n * 2),
                macs: None,
                training_bytes: None,
            },
        }])
    }
}
