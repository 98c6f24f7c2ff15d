//! `unknown-op` (NL305): nodes of an op nnlint does not know, whose outputs, memory and MACs it
//! cannot account for. The totals that include them are lower bounds; in CI this rule makes that
//! visible instead of a number that silently leaves them out.
//!
//! Preconditions: a node of the main graph whose op (domain and type) is not in the op registry.

use std::collections::BTreeMap;

use super::{Finding, LintContext, Rule, Saving};
use crate::analysis::ops::Op;
use crate::ir::Sym;

pub struct UnknownOp;

impl Rule for UnknownOp {
    fn name(&self) -> &'static str {
        "unknown-op"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL305-unknown-op")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        super::no_options(self.meta(), user)
    }

    fn check(&self, cx: &LintContext, _user: &toml::Table) -> Result<Vec<Finding>, String> {
        let meta = self.meta();
        let g = cx.graph();
        // one finding per op type, on its first node, counting the others
        let mut by_op: BTreeMap<(Sym, Sym), Vec<usize>> = BTreeMap::new();
        for (n, node) in g.nodes.iter().enumerate() {
            if matches!(cx.op(n), Op::Opaque) {
                by_op
                    .entry((node.domain.clone(), node.op_type.clone()))
                    .or_default()
                    .push(n);
            }
        }
        Ok(by_op
            .into_iter()
            .map(|((domain, op), nodes)| {
                let first = &g.nodes[nodes[0]];
                let label = if domain.is_empty() {
                    op.to_string()
                } else {
                    format!("{domain}.{op}")
                };
                Finding {
                    code: &meta.code,
                    rewrite: None,
                    name: &meta.name,
                    severity: meta.severity,
                    node: g.name(first.name).to_string(),
                    op: first.op_type.to_string(),
                    message: format!(
                        "{} node{} of op {label} that nnlint cannot account for: their outputs, memory and MACs are unknown, and the totals are lower bounds",
                        nodes.len(),
                        if nodes.len() == 1 { "" } else { "s" }
                    ),
                    measured: nodes.len() as f64,
                    limit: 0.0,
                    unit: "nodes",
                    fix: format!(
                        "declare the outputs' shapes in value_info, or replace {label} by standard ONNX ops"
                    ),
                    saving: Saving::default(),
                }
            })
            .collect())
    }
}
