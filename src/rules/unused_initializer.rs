//! `unused-initializer` (NL301): initializers no node reads.

use super::{Finding, LintContext, Rule, Saving};
use crate::util::units::bytes;

pub struct UnusedInitializer;

/// Names read from inside subgraphs (captures of the outer scope).
pub(crate) fn captured_names(g: &crate::ir::Graph) -> std::collections::HashSet<String> {
    let mut out = std::collections::HashSet::new();
    for (_, sub) in g.subgraphs() {
        out.extend(
            sub.values
                .iter()
                .filter(|v| v.outer())
                .map(|v| sub.name(v.name).to_string()),
        );
    }
    out
}

impl Rule for UnusedInitializer {
    fn name(&self) -> &'static str {
        "unused-initializer"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL301-unused-initializer")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        super::no_options(self.meta(), user)
    }

    fn check(&self, cx: &LintContext, _user: &toml::Table) -> Result<Vec<Finding>, String> {
        let meta = self.meta();
        let g = cx.graph();
        let captured = captured_names(g);
        let mut out = Vec::new();
        for (id, t) in g.initializers() {
            let v = &g.values[id];
            if !g.consumers(id).is_empty()
                || g.outputs.contains(&id)
                || captured.contains(g.name(v.name))
            {
                continue;
            }
            let b = t.byte_size().unwrap_or(0);
            out.push(Finding {
                code: &meta.code,
                rewrite: None,
                name: &meta.name,
                severity: meta.severity,
                node: g.name(v.name).to_string(),
                op: "initializer".into(),
                message: format!(
                    "initializer '{}' {:?} is read by no node: {}",
                    g.name(v.name),
                    t.dims,
                    bytes(b)
                ),
                measured: b as f64,
                limit: 0.0,
                unit: "bytes",
                fix: "remove it".into(),
                saving: Saving {
                    params: t.numel(),
                    bytes: Some(b),
                    macs: None,
                    training_bytes: None,
                },
            });
        }
        Ok(out)
    }
}
