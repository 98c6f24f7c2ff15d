//! `dead-node` (NL302): nodes whose outputs reach no graph output.

use super::{Finding, LintContext, Rule, Saving};

pub struct DeadNode;

impl Rule for DeadNode {
    fn name(&self) -> &'static str {
        "dead-node"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL302-dead-node")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        super::no_options(self.meta(), user)
    }

    fn check(&self, cx: &LintContext, _user: &toml::Table) -> Result<Vec<Finding>, String> {
        let meta = self.meta();
        let g = cx.graph();
        let captured = super::unused_initializer::captured_names(g);
        // live: values a graph output (or a subgraph) needs, found walking producers backwards
        let mut live = vec![false; g.values.len()];
        let mut stack: Vec<usize> = g.outputs.clone();
        stack.extend(
            g.values
                .iter()
                .enumerate()
                .filter(|(_, v)| captured.contains(g.name(v.name)))
                .map(|(i, _)| i),
        );
        let mut node_live = vec![false; g.nodes.len()];
        while let Some(v) = stack.pop() {
            if std::mem::replace(&mut live[v], true) {
                continue;
            }
            if let Some((n, _)) = g.values[v].producer() {
                if !std::mem::replace(&mut node_live[n], true) {
                    stack.extend(g.nodes[n].inputs().values());
                }
            }
        }
        Ok(g.nodes
            .iter()
            .enumerate()
            .filter(|(n, _)| !node_live[*n])
            .map(|(n, node)| Finding {
                code: &meta.code,
                rewrite: None,
                name: &meta.name,
                severity: meta.severity,
                node: g.name(node.name).to_string(),
                op: node.op_type.to_string(),
                message: format!("no graph output depends on node {}", g.label(node)),
                measured: cx.macs[n].map_or(f64::NAN, |m| m as f64),
                limit: 0.0,
                unit: "MACs",
                fix: "remove the node".into(),
                saving: Saving {
                    params: None,
                    bytes: None,
                    macs: cx.macs[n],
                    training_bytes: None,
                },
            })
            .collect())
    }
}
