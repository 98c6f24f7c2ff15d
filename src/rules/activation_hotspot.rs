//! `activation-hotspot` (NL203): layers whose saved activations dominate training memory.

use serde::Deserialize;

use super::heavy_conv::round4;
use super::{options, Finding, LintContext, Rule, Saving};
use crate::util::units::bytes;

pub struct ActivationHotspot;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    /// Smallest share of all saved activations.
    min_share: f64,
    /// Most layers reported.
    max_findings: usize,
}

impl Rule for ActivationHotspot {
    fn name(&self) -> &'static str {
        "activation-hotspot"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL203-activation-hotspot")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        options::<Options>(self.meta(), user).map(|_| ())
    }

    fn check(&self, cx: &LintContext, user: &toml::Table) -> Result<Vec<Finding>, String> {
        let o: Options = options(self.meta(), user)?;
        let meta = self.meta();
        let t = cx.training();
        let total = t.saved_activation_bytes_full;
        if total == 0 {
            return Ok(Vec::new());
        }
        let mut hot: Vec<(usize, u64)> = t
            .per_node
            .iter()
            .enumerate()
            .map(|(n, (saved, _))| (n, *saved))
            .filter(|&(_, s)| s as f64 >= o.min_share * total as f64)
            .collect();
        hot.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        hot.truncate(o.max_findings);
        let g = cx.graph();
        Ok(hot
            .into_iter()
            .map(|(n, saved)| {
                let share = saved as f64 / total as f64;
                Finding {
                    code: &meta.code,
                    rewrite: None,
                    name: &meta.name,
                    severity: meta.severity,
                    node: g.name(g.nodes[n].name).to_string(),
                    op: g.nodes[n].op_type.to_string(),
                    message: format!(
                        "saves {} for backward, {:.1}% of the {} of saved activations at batch {}",
                        bytes(saved),
                        share * 100.0,
                        bytes(total),
                        cx.report.batch.map_or("?".into(), |b| b.to_string())
                    ),
                    measured: round4(share),
                    limit: o.min_share,
                    unit: "share of saved activations",
                    fix: "checkpoint the segment that contains it (recompute it in backward: about a third more compute for that segment)".into(),
                    saving: Saving {
                        params: None,
                        bytes: None,
                        macs: None,
                        training_bytes: Some(saved as i64),
                    },
                }
            })
            .collect())
    }
}
