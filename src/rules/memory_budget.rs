//! `memory-budget` (NL201): the inference or training peak at the configured batch and precision
//! exceeds the budget. Reports the largest batch that fits and the cheapest plan that does.

use serde::Deserialize;

use super::{options, Finding, LintContext, Rule, Saving};
use crate::analysis::fit::{self, FitRequest, Gpu};
use crate::util::units::bytes;

pub struct MemoryBudget;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Options {
    /// "training", "inference" or "both".
    mode: Mode,
}

#[derive(Deserialize, Clone, Copy, PartialEq)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Training,
    Inference,
    Both,
}

impl Rule for MemoryBudget {
    fn name(&self) -> &'static str {
        "memory-budget"
    }

    fn data(&self) -> super::RuleData {
        super::rule_data!("NL201-memory-budget")
    }

    fn validate(&self, user: &toml::Table) -> Result<(), String> {
        options::<Options>(self.meta(), user).map(|_| ())
    }

    fn check(&self, cx: &LintContext, user: &toml::Table) -> Result<Vec<Finding>, String> {
        let o: Options = options(self.meta(), user)?;
        let meta = self.meta();
        let Some(budget) = cx.settings.budget else {
            return Ok(Vec::new());
        };
        let batch = cx.report.batch.unwrap_or(1);
        let req = FitRequest {
            gpu: Gpu {
                name: "budget",
                bytes: budget,
                bf16: true,
            },
            gpus: cx.settings.train.gpus,
            effective_batch: batch
                * cx.settings.train.accumulate.max(1) as u64
                * cx.settings.train.gpus.max(1) as u64,
            base: cx.settings.train,
            optimizer: None,
            dims: cx.settings.bindings.dims.clone(),
            inputs: cx.settings.bindings.inputs.clone(),
            inference: false,
        };
        let mut out = Vec::new();
        let err = |e: crate::Error| e.to_string();
        // a lower bound under the budget confirms nothing: say so rather than pass
        let mut unconfirmed = Vec::new();
        let mut unconfirmed_bytes = Vec::new();
        if matches!(o.mode, Mode::Training | Mode::Both) {
            let t = cx.training();
            let peak = t.total_bytes;
            if t.lower_bound && peak <= budget {
                unconfirmed.push(format!(
                    "the training estimate ({}) is a lower bound ({})",
                    bytes(peak),
                    t.unknown.join("; ")
                ));
                unconfirmed_bytes.push(peak);
            }
            if peak > budget {
                let max = fit::max_train_batch(cx.model, &req, &cx.settings.train, budget)
                    .map_err(err)?;
                let plans = fit::fit(cx.model, &req).map_err(err)?;
                let best = plans.plans.iter().find(|p| p.fits);
                let remedy = match best {
                    Some(p) => format!(
                        "{}: micro-batch {} x {} accumulation steps x {} GPU(s), {} per GPU",
                        p.name,
                        p.micro_batch,
                        p.accumulate,
                        p.gpus,
                        p.peak_bytes.map_or("?".into(), bytes)
                    ),
                    None => {
                        "no plan fits at batch 1: see `nnlint fit` for a bigger card or more GPUs"
                            .into()
                    }
                };
                out.push(Finding {
                    code: &meta.code,
                    rewrite: None,
                    name: &meta.name,
                    severity: meta.severity,
                    node: cx.model_label(),
                    op: "model".into(),
                    message: format!(
                        "the training step at batch {batch} needs {}{} per GPU, over the {} budget; the largest batch that fits is {max}",
                        if t.lower_bound { "at least " } else { "" },
                        bytes(peak),
                        bytes(budget)
                    ),
                    measured: peak as f64,
                    limit: budget as f64,
                    unit: "bytes",
                    fix: remedy,
                    saving: Saving {
                        training_bytes: best
                            .and_then(|p| p.peak_bytes)
                            .map(|b| peak as i64 - b as i64),
                        ..Saving::default()
                    },
                });
            }
        }
        if matches!(o.mode, Mode::Inference | Mode::Both) {
            let totals = &cx.report.totals;
            let lower = totals.lower.activations() || totals.lower.params();
            let Some(peak) = fit::serving_bytes(totals, &cx.settings.train.overhead, false) else {
                unconfirmed.push(
                    "the inference peak is unknown (the shapes of its first layers are not known)"
                        .into(),
                );
                return Ok(vec![unconfirmed_finding(cx, budget, 0, &unconfirmed)]);
            };
            if lower && peak <= budget {
                unconfirmed.push(format!(
                    "the inference estimate ({}) is a lower bound ({} layers of unknown size)",
                    bytes(peak),
                    totals.lower.layers_without_size
                ));
                unconfirmed_bytes.push(peak);
            }
            if peak > budget {
                let max = fit::max_serve_batch(
                    cx.model,
                    &FitRequest {
                        inference: true,
                        ..req
                    },
                    budget,
                )
                .map_err(err)?;
                out.push(Finding {
                    code: &meta.code,
                    rewrite: None,
                    name: &meta.name,
                    severity: meta.severity,
                    node: cx.model_label(),
                    op: "model".into(),
                    message: format!(
                        "inference at batch {batch} needs {}{}, over the {} budget; the largest batch that fits is {max}",
                        if lower { "at least " } else { "" },
                        bytes(peak),
                        bytes(budget)
                    ),
                    measured: peak as f64,
                    limit: budget as f64,
                    unit: "bytes",
                    fix: if max > 0 {
                        format!("serve at batch {max}, or with fp16/bf16 weights")
                    } else {
                        "serve with fp16/bf16 weights, or on a bigger card".into()
                    },
                    saving: Saving::default(),
                });
            }
        }
        if out.is_empty() && !unconfirmed.is_empty() {
            let counted = unconfirmed_bytes.into_iter().max().unwrap_or(0);
            out.push(unconfirmed_finding(cx, budget, counted, &unconfirmed));
        }
        Ok(out)
    }
}

/// The finding for a budget that a lower bound cannot confirm: a warning whatever the rule's
/// severity (nothing is known to be over), with what was counted as `measured`.
fn unconfirmed_finding(cx: &LintContext, budget: u64, counted: u64, why: &[String]) -> Finding {
    let meta = MemoryBudget.meta();
    Finding {
        code: &meta.code,
        rewrite: None,
        name: &meta.name,
        severity: meta.severity.min(super::Severity::Warning),
        node: cx.model_label(),
        op: "model".into(),
        message: format!(
            "cannot confirm the model fits the {} budget: {}",
            bytes(budget),
            why.join("; ")
        ),
        measured: counted as f64,
        limit: budget as f64,
        unit: "bytes",
        fix:
            "describe the unknown ops' outputs (or bind the unknown dimensions with --dim) so that \
              every layer is counted"
                .into(),
        saving: Saving::default(),
    }
}
