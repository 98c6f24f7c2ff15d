//! The `nnlint rewrite` and `nnlint verify` reports: per rewrite and in total, parameters, bytes,
//! MACs, activations, inference peak and training memory before → after, and the numeric error.
//! Every number comes from analysing the two model files (the original and the one written).

use serde::Serialize;

use super::units::{bytes, count};
use crate::analysis::training::TrainConfig;
use crate::analysis::{self, Bindings, MemReport};
use crate::ir::{Graph, Model, NodeId};
use crate::rewrite::{Planned, RewriteKind, Safety, Skipped};
use crate::util::table::{Align, Table};
use crate::verify::{Check, VerdictLine, Verification, WholeModel};

crate::named_enum! {
    /// Output formats of `nnlint rewrite` and `nnlint verify`.
    pub enum RewriteFormat {
        /// Aligned text.
        Table = "table",
        /// JSON.
        Json = "json",
    }
}

/// A quantity before and after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Change {
    pub before: u64,
    pub after: u64,
}

impl Change {
    fn text(&self, f: fn(u64) -> String) -> String {
        format!("{} -> {}", f(self.before), f(self.after))
    }
}

/// The numeric check of a rewrite, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct Numbers {
    pub max_abs_error: Option<f64>,
    pub max_rel_error: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constant_input_rel_error: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

impl From<&Check> for Numbers {
    fn from(c: &Check) -> Self {
        Numbers {
            max_abs_error: c.max_abs_error,
            max_rel_error: c.max_rel_error,
            constant_input_rel_error: c.constant_input_rel_error,
            skipped: c.skipped.clone(),
        }
    }
}

/// One applied rewrite.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub rule: String,
    pub kind: RewriteKind,
    pub node: String,
    pub new_nodes: Vec<String>,
    pub rank: Option<u64>,
    pub safety: Safety,
    /// Share of the squared singular values kept (factorisations).
    pub energy_kept: Option<f64>,
    pub params: Change,
    pub bytes: Change,
    pub macs: Change,
    /// Bytes of the outputs of the replaced and the new nodes.
    pub activation_bytes: Change,
    /// Bytes these nodes save for backward in training.
    pub saved_bytes: Change,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub verify: Option<Numbers>,
}

/// Whole-model totals.
#[derive(Clone, Debug, Serialize)]
pub struct Totals {
    pub params: Change,
    /// Parameters, buffers and constants, in their stored types.
    pub bytes: Change,
    pub macs: Change,
    pub inference_peak: Option<Change>,
    /// The training-step peak per GPU under `training`.
    pub training_peak: Option<Change>,
    /// The training plan the peak is for.
    pub training: TrainConfig,
}

/// The whole report of a rewrite run.
#[derive(Clone, Debug, Serialize)]
pub struct RewriteReport {
    pub model: String,
    pub output: Option<String>,
    pub external_data: Option<String>,
    pub batch: u64,
    pub rewrites: Vec<Row>,
    pub skipped: Vec<Skipped>,
    pub totals: Totals,
    pub whole_model: Option<WholeModel>,
    /// What the check concluded (`pass`, `changed`: the output moved as the approximate or lossy
    /// rewrites declared, `fail`, `inconclusive`); absent with `--no-verify`.
    pub verdict: Option<VerdictLine>,
    pub notes: Vec<String>,
}

/// The report of a run that had nothing to rewrite: no model is written.
#[derive(Clone, Debug, Serialize)]
pub struct NothingReport {
    pub model: String,
    /// Always `null`: nothing was written.
    pub output: Option<String>,
    /// Always empty.
    pub rewrites: Vec<Row>,
    /// The findings with a rewrite that could not be applied, and why.
    pub skipped: Vec<Skipped>,
    pub notes: Vec<String>,
}

/// Per-node costs of one model at the bound batch.
struct Costs {
    report: MemReport,
    macs: Vec<u64>,
    acts: Vec<u64>,
    saved: Vec<u64>,
}

fn costs(
    model: &Model,
    bindings: &Bindings,
    train: &TrainConfig,
    notes: &mut Vec<String>,
) -> crate::Result<Costs> {
    let inf = analysis::shape::infer(model, bindings)?;
    let bound = inf.require_bound(model, "the training estimate");
    if let Err(e) = &bound {
        if !notes.iter().any(|n| n.starts_with("no training estimate")) {
            notes.push(format!("no training estimate: {e}"));
        }
    }
    let report = analysis::report(model, &inf, bound.is_ok().then_some(train));
    let macs = inf
        .macs
        .iter()
        .map(|m| m.as_ref().and_then(|d| d.as_u64()).unwrap_or(0))
        .collect();
    let acts = model
        .graph
        .nodes
        .iter()
        .map(|n| {
            n.outputs()
                .iter()
                .flatten()
                .filter_map(|v| inf.facts[v].bytes().and_then(|b| b.as_u64()))
                .sum()
        })
        .collect();
    let saved = report
        .training
        .as_ref()
        .map(|t| t.per_node.iter().map(|p| p.0).collect())
        .unwrap_or_else(|| vec![0; model.graph.nodes.len()]);
    Ok(Costs {
        report,
        macs,
        acts,
        saved,
    })
}

/// Elements and bytes of the float initializers some of `nodes` read (each counted once): the
/// weights and biases of a layer, as `nnlint mem` charges them.
fn stored(g: &Graph, nodes: &[NodeId]) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let (mut count, mut size) = (0, 0);
    for &n in nodes {
        for v in g.nodes[n].inputs().values() {
            // through the Identity twins PyTorch exports for deduplicated weights
            let mut v = v;
            while let Some((p, _)) = g.values[v].producer() {
                match (&g.nodes[p].op_type[..], g.nodes[p].input(0)) {
                    ("Identity", Some(x)) => v = x,
                    _ => break,
                }
            }
            if let Some(t) = g.stored(v).filter(|t| t.dtype.is_float()) {
                if seen.insert(v) {
                    count += t.numel().unwrap_or(0);
                    size += t.byte_size().unwrap_or(0);
                }
            }
        }
    }
    (count, size)
}

fn sum(v: &[u64], nodes: &[NodeId]) -> u64 {
    nodes.iter().filter_map(|&n| v.get(n)).sum()
}

/// Builds the report from the original, the written model, the plans and the verification.
#[allow(clippy::too_many_arguments)]
pub fn build(
    original: &Model,
    rewritten: &Model,
    plans: &[Planned],
    skipped: Vec<Skipped>,
    bindings: &Bindings,
    train: &TrainConfig,
    verification: Option<Verification>,
    external_data: Option<String>,
) -> crate::Result<RewriteReport> {
    let mut notes = Vec::new();
    let mut b = bindings.clone();
    b.batch.get_or_insert(1);
    let a = costs(original, &b, train, &mut notes)?;
    let z = costs(rewritten, &b, train, &mut notes)?;
    let gz = &rewritten.graph;
    let mut rows = Vec::new();
    for p in plans {
        let added: Vec<NodeId> = p
            .record
            .added
            .iter()
            .filter_map(|o| {
                gz.value_by_name(o)
                    .and_then(|v| gz.values[v].producer())
                    .map(|(n, _)| n)
            })
            .collect();
        let (before_params, before_bytes) = stored(&original.graph, &p.removed);
        let (after_params, after_bytes) = stored(gz, &added);
        // the model's records may hold earlier rewrites too: the last match is this one
        let check = verification.as_ref().and_then(|v| {
            v.checks
                .iter()
                .rev()
                .find(|c| c.node == p.record.node && c.kind == p.record.kind)
        });
        rows.push(Row {
            rule: p.record.rule.clone(),
            kind: p.record.kind,
            node: p.record.node.clone(),
            new_nodes: p
                .nodes
                .iter()
                .map(|n| n.name.clone().unwrap_or_default())
                .collect(),
            rank: p.record.rank,
            safety: p.record.safety,
            energy_kept: p.energy_kept.map(|e| (e * 1e6).round() / 1e6),
            params: Change {
                before: before_params,
                after: after_params,
            },
            bytes: Change {
                before: before_bytes,
                after: after_bytes,
            },
            macs: Change {
                before: sum(&a.macs, &p.removed),
                after: sum(&z.macs, &added),
            },
            activation_bytes: Change {
                before: sum(&a.acts, &p.removed),
                after: sum(&z.acts, &added),
            },
            saved_bytes: Change {
                before: sum(&a.saved, &p.removed),
                after: sum(&z.saved, &added),
            },
            note: p.note.clone(),
            verify: check.map(Numbers::from),
        });
    }
    let (ta, tz) = (&a.report.totals, &z.report.totals);
    let weight_bytes = |t: &analysis::Totals| t.param_bytes + t.buffer_bytes + t.constant_bytes;
    let macs = |t: &analysis::Totals| t.macs.as_ref().and_then(|m| m.as_u64()).unwrap_or(0);
    let totals = Totals {
        params: Change {
            before: ta.params,
            after: tz.params,
        },
        bytes: Change {
            before: weight_bytes(ta),
            after: weight_bytes(tz),
        },
        macs: Change {
            before: macs(ta),
            after: macs(tz),
        },
        inference_peak: ta
            .inference_peak_bytes
            .zip(tz.inference_peak_bytes)
            .map(|(before, after)| Change { before, after }),
        training_peak: a
            .report
            .training
            .as_ref()
            .zip(z.report.training.as_ref())
            .map(|(x, y)| Change {
                before: x.total_bytes,
                after: y.total_bytes,
            }),
        training: *train,
    };
    Ok(RewriteReport {
        model: original.path.display().to_string(),
        output: Some(rewritten.path.display().to_string()),
        external_data,
        batch: b.batch.unwrap_or(1),
        rewrites: rows,
        skipped,
        totals,
        verdict: verification.as_ref().map(|v| v.verdict.clone()),
        whole_model: verification.map(|v| v.whole_model),
        notes,
    })
}

fn sci(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.1e}"))
}

fn ratio(c: &Change) -> String {
    if c.after > 0 && c.before > c.after {
        format!(" ({:.1}x fewer)", c.before as f64 / c.after as f64)
    } else {
        String::new()
    }
}

/// The rewrite report as a table, its node names shortened to fit `width` when given.
pub fn table(r: &RewriteReport, width: Option<usize>) -> String {
    let mut out = format!(
        "{} -> {}: {} rewrite{} (batch {})\n",
        r.model,
        r.output.as_deref().unwrap_or("-"),
        r.rewrites.len(),
        if r.rewrites.len() == 1 { "" } else { "s" },
        r.batch
    );
    if let Some(d) = &r.external_data {
        out.push_str(&format!("external data: {d}\n"));
    }
    out.push('\n');
    let head = [
        "node",
        "rewrite",
        "rank",
        "safety",
        "params",
        "MACs",
        "rel. error",
    ];
    // the header is the first row: this table has no rule under it
    let mut table = Table::plain(&[Align::Left; 7]).squeeze_column(0);
    table.push(head.iter().map(|h| h.to_string()).collect());
    for row in &r.rewrites {
        table.push(vec![
            row.node.clone(),
            row.kind.name().to_string(),
            row.rank.map_or("-".into(), |k| k.to_string()),
            row.safety.name().to_string(),
            row.params.text(count),
            row.macs.text(count),
            match &row.verify {
                Some(Numbers {
                    skipped: Some(_), ..
                }) => "not checked".into(),
                Some(n) => sci(n.max_rel_error),
                None => "-".into(),
            },
        ]);
    }
    out.push_str(&table.render_fitting(width));
    for row in &r.rewrites {
        if let Some(n) = &row.note {
            out.push_str(&format!("  {}: {n}\n", row.node));
        }
        if let Some(Numbers {
            skipped: Some(why), ..
        }) = &row.verify
        {
            out.push_str(&format!("  {}: not checked: {why}\n", row.node));
        }
        if let Some(Numbers {
            constant_input_rel_error: Some(e),
            ..
        }) = &row.verify
        {
            out.push_str(&format!(
                "  {}: on a spatially constant map the relative error is {e:.1e}\n",
                row.node
            ));
        }
    }
    for s in &r.skipped {
        out.push_str(&format!("skipped {} ({}): {}\n", s.node, s.rule, s.reason));
    }
    let t = &r.totals;
    out.push_str(&format!(
        "\nparams          {}{}\nweight bytes    {}\nMACs            {}{}\n",
        t.params.text(count),
        ratio(&t.params),
        t.bytes.text(bytes),
        t.macs.text(count),
        ratio(&t.macs)
    ));
    if let Some(p) = &t.inference_peak {
        out.push_str(&format!("inference peak  {}\n", p.text(bytes)));
    }
    if let Some(p) = &t.training_peak {
        out.push_str(&format!(
            "training peak   {} ({}, {})\n",
            p.text(bytes),
            t.training.precision,
            t.training.optimizer
        ));
    }
    if let Some(w) = &r.whole_model {
        out.push_str(&whole_text(w));
    }
    if let Some(v) = &r.verdict {
        out.push_str(&verdict_line(v));
    }
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out
}

fn whole_text(w: &WholeModel) -> String {
    if !w.checked {
        return format!(
            "whole model     not compared: {}\n",
            w.reason.as_deref().unwrap_or("-")
        );
    }
    w.outputs
        .iter()
        .map(|o| {
            format!(
                "whole model     output '{}': max abs error {:.1e}, relative {:.1e}\n",
                o.name, o.max_abs_error, o.max_rel_error
            )
        })
        .collect()
}

/// `nnlint verify` as a table.
pub fn verify_table(v: &Verification) -> String {
    let mut out = format!(
        "{} vs {} (batch {}, seed {})\n\n",
        v.original, v.rewritten, v.batch, v.seed
    );
    if v.checks.is_empty() {
        out.push_str("no rewrite records (metadata 'nnlint.rewrites'): whole-model outputs only\n");
    }
    for c in &v.checks {
        match &c.skipped {
            Some(why) => out.push_str(&format!(
                "{} ({}): not checked: {why}\n",
                c.node,
                c.kind.name()
            )),
            None => out.push_str(&format!(
                "{} ({}, {}{}): max abs error {}, relative {}{}\n",
                c.node,
                c.kind.name(),
                c.safety.name(),
                c.rank.map_or(String::new(), |r| format!(", rank {r}")),
                sci(c.max_abs_error),
                sci(c.max_rel_error),
                c.constant_input_rel_error
                    .map_or(String::new(), |e| format!(
                        "; {e:.1e} on a spatially constant map"
                    ))
            )),
        }
    }
    out.push_str(&whole_text(&v.whole_model));
    out.push_str(&verdict_line(&v.verdict));
    out
}

/// `verdict: pass: ...`, or `verdict: changed as declared: ...` where the reason already starts
/// with the status.
fn verdict_line(v: &VerdictLine) -> String {
    if v.reason.starts_with(v.status.name()) {
        format!("verdict: {}\n", v.reason)
    } else {
        format!("verdict: {}: {}\n", v.status.name(), v.reason)
    }
}

/// JSON of any report.
pub fn json<T: Serialize>(r: &T) -> String {
    let mut s = serde_json::to_string_pretty(r).expect("the report serialises");
    s.push('\n');
    s
}
