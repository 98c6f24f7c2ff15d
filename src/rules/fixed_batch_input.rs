//! `fixed-batch-input` (NL303): graph inputs whose batch dimension is a fixed number.

use super::{Finding, LintContext, Rule, Saving};

pub struct FixedBatchInput;

impl Rule for FixedBatchInput {
    fn name(&self) -> &'static str {
        "fixed-batch-input"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL303-fixed-batch-input")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        super::no_options(self.meta(), user)
    }

    fn check(&self, cx: &LintContext, _user: &toml::Table) -> Result<Vec<Finding>, String> {
        let meta = self.meta();
        let g = cx.graph();
        let mut out = Vec::new();
        for &v in &g.inputs {
            let val = &g.values[v];
            let Some(shape) = val.declared.as_ref().and_then(|d| d.shape.as_ref()) else {
                continue;
            };
            if shape.len() < 2 {
                continue;
            }
            let Some(b) = shape[0].as_i64() else { continue };
            out.push(Finding {
                code: &meta.code,
                rewrite: None,
                name: &meta.name,
                severity: meta.severity,
                node: g.name(val.name).to_string(),
                op: "input".into(),
                message: format!(
                    "input '{}' has a fixed batch dimension of {b}: {}",
                    g.name(val.name),
                    crate::ir::shape_to_string(shape)
                ),
                measured: b as f64,
                limit: 0.0,
                unit: "batch",
                fix: "export with a symbolic batch dimension (dynamic_axes / dynamic_shapes)"
                    .into(),
                saving: Saving::default(),
            });
        }
        Ok(out)
    }
}
